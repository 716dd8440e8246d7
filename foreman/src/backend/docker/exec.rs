//! Running a command inside a running container (the exec API), as the
//! container's own user (the agent's, or root for `agent_user: root`) in
//! /workspace, under the container's own limits: what `verify` runs in its
//! verify container (`verify.rs`), set-up and regrade in theirs. The command's
//! output is captured under a cap (head and
//! tail kept) and its time is bounded twice: by `timeout` inside the
//! container, and by the foreman, which stops reading a little later
//! whatever the command (or what it left running) does.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::Context;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures_util::StreamExt;
use saheeli_protocol::paths;

/// How long past its own timeout the foreman waits for a command's output
/// to end (a process it left behind may hold the output open).
const GRACE: Duration = Duration::from_secs(10);

/// `timeout`'s exit code when the limit ran out (137: killed after it).
const TIMED_OUT: [i64; 2] = [124, 137];

/// How a command ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ran {
    /// None when it did not end in time (or its end is unknown).
    pub exit_code: Option<i64>,
    pub timed_out: bool,
    pub duration: Duration,
    /// stdout and stderr as they came, capped.
    pub output: String,
}

/// Runs `argv` in the container without a shell, waits for it, and
/// returns its exit code (for chores such as removing files).
pub(crate) async fn exec_quiet(
    docker: &Docker,
    container: &str,
    argv: Vec<String>,
) -> anyhow::Result<Ran> {
    exec(
        docker,
        container,
        argv,
        Duration::from_secs(60),
        4096,
        Vec::new(),
    )
    .await
}

/// Runs `command` as [`exec_shell`] does, then, in the same exec once it
/// ended, the shell script `after` with `args`: the command's output
/// (stdout and stderr as they came) is the `Ran`'s; what `after` prints
/// comes back apart, at most `after_cap` bytes. A check's reward is read
/// this way with the check (issue 49: one exec, not two). The exit code is
/// the command's.
pub(crate) async fn exec_shell_then(
    docker: &Docker,
    container: &str,
    command: &str,
    limit: Duration,
    cap: usize,
    (after, args, after_cap): (&str, &[String], usize),
) -> anyhow::Result<(Ran, Vec<u8>)> {
    const WRAP: &str = "s=$1 c=$2 a=$3; shift 3; \
        timeout --kill-after=5 \"$s\" bash -c \"$c\" 2>&1 </dev/null; rc=$?; \
        sh -c \"$a\" sh \"$@\" 1>&2 </dev/null; exit $rc";
    let secs = limit.as_secs().max(1).to_string();
    let mut argv = ["sh", "-c", WRAP, "sh", &secs, command, after]
        .map(String::from)
        .to_vec();
    argv.extend(args.iter().cloned());
    exec_apart(docker, container, argv, limit, cap, Vec::new(), after_cap).await
}

/// Runs `bash -c command` in the container with `limit`, keeping at most
/// `cap` bytes of output.
pub(crate) async fn exec_shell(
    docker: &Docker,
    container: &str,
    command: &str,
    limit: Duration,
    cap: usize,
) -> anyhow::Result<Ran> {
    exec_shell_env(docker, container, command, limit, cap, Vec::new()).await
}

/// [`exec_shell`] with `env` (`NAME=value`) given to the command's
/// process only (the exec's own environment, not the container's): the
/// set-up's secrets (issue 50).
pub(crate) async fn exec_shell_env(
    docker: &Docker,
    container: &str,
    command: &str,
    limit: Duration,
    cap: usize,
    env: Vec<String>,
) -> anyhow::Result<Ran> {
    let secs = limit.as_secs().max(1).to_string();
    let argv = ["timeout", "--kill-after=5", &secs, "bash", "-c", command]
        .map(String::from)
        .to_vec();
    exec(docker, container, argv, limit, cap, env).await
}

/// Starts `argv` in the container as `user`, detached: it runs until the
/// container is removed (the egress bridge, issue 50).
pub(crate) async fn spawn_as(
    docker: &Docker,
    container: &str,
    argv: Vec<String>,
    user: &str,
) -> anyhow::Result<()> {
    let created = docker
        .create_exec(
            container,
            CreateExecOptions {
                cmd: Some(argv),
                user: Some(user.to_string()),
                working_dir: Some(paths::WORKSPACE.to_string()),
                ..Default::default()
            },
        )
        .await
        .context("creating an exec in the container")?;
    docker
        .start_exec(
            &created.id,
            Some(bollard::exec::StartExecOptions {
                detach: true,
                ..Default::default()
            }),
        )
        .await
        .context("starting an exec in the container")?;
    Ok(())
}

async fn exec(
    docker: &Docker,
    container: &str,
    argv: Vec<String>,
    limit: Duration,
    cap: usize,
    env: Vec<String>,
) -> anyhow::Result<Ran> {
    let (ran, _) = exec_apart(docker, container, argv, limit, cap, env, 0).await?;
    Ok(ran)
}

/// Runs `argv`; with `apart_cap` > 0 what it writes to stderr is kept
/// apart (at most `apart_cap` bytes) instead of in the output.
async fn exec_apart(
    docker: &Docker,
    container: &str,
    argv: Vec<String>,
    limit: Duration,
    cap: usize,
    env: Vec<String>,
    apart_cap: usize,
) -> anyhow::Result<(Ran, Vec<u8>)> {
    let t0 = Instant::now();
    let created = docker
        .create_exec(
            container,
            CreateExecOptions {
                cmd: Some(argv),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                // The container's user: each checking container is made
                // as the task's agent user (`verify::user_of`).
                user: None,
                env: (!env.is_empty()).then_some(env),
                working_dir: Some(paths::WORKSPACE.to_string()),
                ..Default::default()
            },
        )
        .await
        .context("creating an exec in the container")?;
    let started = docker
        .start_exec(&created.id, None)
        .await
        .context("starting an exec in the container")?;
    let mut out = Capped::new(cap);
    let mut apart = Vec::new();
    let mut ended = true;
    if let StartExecResults::Attached { mut output, .. } = started {
        let deadline = tokio::time::Instant::now() + limit + GRACE;
        loop {
            match tokio::time::timeout_at(deadline, output.next()).await {
                Ok(Some(Ok(LogOutput::StdErr { message }))) if apart_cap > 0 => {
                    let room = apart_cap.saturating_sub(apart.len()).min(message.len());
                    apart.extend_from_slice(&message[..room]);
                }
                Ok(Some(Ok(chunk))) => out.push(&chunk.into_bytes()),
                Ok(Some(Err(e))) => {
                    out.push(format!("\n[saheeli: the output stream failed: {e}]\n").as_bytes());
                    break;
                }
                Ok(None) => break,
                Err(_) => {
                    ended = false;
                    break;
                }
            }
        }
    }
    let inspect = docker
        .inspect_exec(&created.id)
        .await
        .context("inspecting an exec in the container")?;
    let running = inspect.running.unwrap_or(false);
    let exit_code = if running { None } else { inspect.exit_code };
    let duration = t0.elapsed();
    let timed_out = !ended
        || running
        || (duration >= limit && exit_code.is_some_and(|c| TIMED_OUT.contains(&c)));
    let ran = Ran {
        exit_code: if timed_out { None } else { exit_code },
        timed_out,
        duration,
        output: out.finish(),
    };
    Ok((ran, apart))
}

/// Output kept under a cap: the first half and the last half, and how
/// many bytes between them were dropped.
struct Capped {
    half: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    dropped: u64,
}

impl Capped {
    fn new(cap: usize) -> Capped {
        Capped {
            half: (cap / 2).max(1),
            head: Vec::new(),
            tail: VecDeque::new(),
            dropped: 0,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        let room = self.half - self.head.len();
        if room > 0 {
            let n = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if bytes.len() >= self.half {
            self.dropped += (self.tail.len() + bytes.len() - self.half) as u64;
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.half..]);
            return;
        }
        let over = (self.tail.len() + bytes.len()).saturating_sub(self.half);
        self.tail.drain(..over);
        self.dropped += over as u64;
        self.tail.extend(bytes);
    }

    fn finish(self) -> String {
        let mut s = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            s.push_str(&format!(
                "\n[… {} bytes of output not kept …]\n",
                self.dropped
            ));
        }
        let tail: Vec<u8> = self.tail.into_iter().collect();
        s.push_str(&String::from_utf8_lossy(&tail));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_keeps_head_and_tail_and_counts_the_cut() {
        let mut c = Capped::new(8);
        c.push(b"abcdefgh");
        c.push(b"ijkl");
        c.push(b"mn");
        assert_eq!(c.finish(), "abcd\n[… 6 bytes of output not kept …]\nklmn");
        let mut c = Capped::new(8);
        c.push(b"abc");
        c.push(b"de");
        assert_eq!(c.finish(), "abcde");
        let mut c = Capped::new(4);
        for b in b"0123456789" {
            c.push(&[*b]);
        }
        assert_eq!(c.finish(), "01\n[… 6 bytes of output not kept …]\n89");
    }
}
