//! `execute_shell`: a bash command in the workspace, in its own process
//! group so that a timeout kills everything it started.

use std::collections::VecDeque;
use std::io::Read;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;

use super::output::{cap, join_cut};
use super::{ToolOutput, Toolbox};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExecuteShell {
    command: String,
    timeout_s: Option<u64>,
}

/// The first and last `max` bytes of a stream, and its full length.
struct HeadTail {
    max: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: usize,
}

impl HeadTail {
    fn new(max: usize) -> HeadTail {
        HeadTail {
            max,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    /// Reads until end of file into `into`, which the caller may take at
    /// any time: a reader can block for ever on a pipe that a detached
    /// process holds open, and what it read so far is still wanted.
    fn read_all(mut r: impl Read, into: &Mutex<HeadTail>) {
        let mut buf = [0u8; 8192];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => into
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(&buf[..n]),
            }
        }
    }

    fn push(&mut self, mut data: &[u8]) {
        self.total += data.len();
        let room = self.max.saturating_sub(self.head.len());
        let take = room.min(data.len());
        self.head.extend_from_slice(&data[..take]);
        data = &data[take..];
        self.tail.extend(data);
        if self.tail.len() > self.max {
            self.tail.drain(..self.tail.len() - self.max);
        }
    }

    /// The output within `max` bytes, and whether it was cut.
    fn text(mut self, max: usize) -> (String, bool) {
        let dropped = self.total - self.head.len() - self.tail.len();
        if dropped == 0 {
            self.head.extend(self.tail);
            return cap(&String::from_utf8_lossy(&self.head), max);
        }
        let head = String::from_utf8_lossy(&self.head);
        let tail = String::from_utf8_lossy(self.tail.make_contiguous());
        (join_cut(&head, &tail, self.total, max), true)
    }
}

/// Kills the command's whole process group when dropped while armed: on a
/// timeout, and when the servo stops mid-command (SIGTERM, time budget),
/// so nothing the model started outlives its call by accident.
struct GroupGuard(Option<u32>);

impl GroupGuard {
    fn kill(&self) {
        if let Some(pgid) = self.0.filter(|&p| p > 0) {
            // SAFETY: killpg only sends a signal; a stale group fails with ESRCH.
            unsafe {
                libc::killpg(pgid as libc::pid_t, libc::SIGKILL);
            }
        }
    }

    /// The command ended normally: leave what it started in the background.
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How long output is still read after the process group was killed.
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(1);

pub(crate) async fn run(tb: &Toolbox, a: ExecuteShell) -> ToolOutput {
    if a.command.trim().is_empty() {
        return ToolOutput::error("`command` is empty");
    }
    let timeout = a
        .timeout_s
        .map(Duration::from_secs)
        .unwrap_or(tb.shell_timeout);
    // One pipe for stdout and stderr, so the output keeps its order.
    let (reader, writer) = match std::io::pipe() {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(format!("creating a pipe: {e}")),
    };
    let writer2 = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => return ToolOutput::error(format!("creating a pipe: {e}")),
    };
    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg("-c")
        .arg(&a.command)
        .current_dir(tb.ws.root())
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer2))
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return ToolOutput::error(format!("starting bash: {e}")),
    };
    // The parent's copies of the write end must close, or reading never ends.
    drop(cmd);
    let group = GroupGuard(child.id());
    let collected = Arc::new(Mutex::new(HeadTail::new(tb.max_output)));
    let into = collected.clone();
    let mut output = tokio::task::spawn_blocking(move || HeadTail::read_all(reader, &into));

    let (status, timed_out) = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(status) => (status.ok(), false),
        Err(_) => {
            group.kill();
            (child.wait().await.ok(), true)
        }
    };
    // Background jobs may keep the pipe open: give them a moment, then end
    // them. One that left the process group (`setsid`) survives that: stop
    // reading after a bound and keep what came, or the call would hang
    // until the whole task times out.
    let mut abandoned = false;
    if tokio::time::timeout(Duration::from_secs(2), &mut output)
        .await
        .is_err()
    {
        group.kill();
        abandoned = tokio::time::timeout(DRAIN_AFTER_KILL, &mut output)
            .await
            .is_err();
    }
    group.disarm();
    let collected = std::mem::replace(
        &mut *collected.lock().unwrap_or_else(|p| p.into_inner()),
        HeadTail::new(0),
    );
    let code = status.map(|s| {
        use std::os::unix::process::ExitStatusExt;
        s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
    });
    let ended = Ended {
        code,
        timed_out,
        abandoned,
        timeout,
    };
    report(collected, &ended, tb.max_output)
}

/// How a command ended.
struct Ended {
    code: Option<i32>,
    timed_out: bool,
    abandoned: bool,
    timeout: Duration,
}

/// What the model reads: the output (head and tail within `max_output`)
/// and a trailer the cap never cuts, saying how the command ended.
fn report(collected: HeadTail, e: &Ended, max_output: usize) -> ToolOutput {
    let mut trailer = String::new();
    if e.abandoned {
        trailer.push_str(
            "[stopped reading: a process that left the command's process group (setsid, nohup &) \
             still holds its output open; redirect its output to a file]\n",
        );
    }
    if e.timed_out {
        trailer.push_str(&format!(
            "[killed after {}s timeout; pass a larger timeout_s if it needs longer]\n",
            e.timeout.as_secs()
        ));
    }
    trailer.push_str(&format!(
        "[exit code {}]",
        e.code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "unknown".into())
    ));
    let room = max_output.saturating_sub(trailer.len() + 1);
    let (mut text, truncated) = collected.text(room);
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&trailer);
    ToolOutput {
        text,
        ok: e.code == Some(0) && !e.timed_out,
        exit_code: e.code,
        truncated,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use crate::tools::tests::toolbox;

    #[tokio::test]
    async fn runs_in_the_workspace_with_combined_output() {
        let (d, tb) = toolbox();
        std::fs::write(d.path().join("here.txt"), "x").unwrap();
        let out = tb
            .dispatch(
                "execute_shell",
                r#"{"command": "ls; echo err >&2; exit 3"}"#,
            )
            .await;
        assert_eq!(out.exit_code, Some(3));
        assert!(!out.ok);
        assert!(
            out.text.contains("here.txt") && out.text.contains("err"),
            "{}",
            out.text
        );
        assert!(out.text.ends_with("[exit code 3]"));
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let (_d, tb) = toolbox();
        let start = Instant::now();
        let out = tb
            .dispatch(
                "execute_shell",
                r#"{"command": "sleep 30 & sleep 30", "timeout_s": 1}"#,
            )
            .await;
        assert!(start.elapsed().as_secs() < 10, "{:?}", start.elapsed());
        assert!(!out.ok);
        assert!(out.text.contains("killed after 1s"), "{}", out.text);
    }

    #[tokio::test]
    async fn a_call_dropped_midway_kills_its_group() {
        // What happens on SIGTERM or at the time budget: the loop's future
        // is dropped while the command runs.
        let (d, tb) = toolbox();
        let call = tb.dispatch(
            "execute_shell",
            r#"{"command": "sleep 30 & echo $! > bg.pid; wait"}"#,
        );
        let dropped = tokio::time::timeout(std::time::Duration::from_millis(500), call).await;
        assert!(dropped.is_err(), "the command should still be running");
        let pid = std::fs::read_to_string(d.path().join("bg.pid")).unwrap();
        let stat = format!("/proc/{}/stat", pid.trim());
        let start = Instant::now();
        // Gone, or a zombie waiting for whoever inherited it.
        while std::fs::read_to_string(&stat)
            .is_ok_and(|s| s.contains("(sleep) ") && !s.contains(") Z "))
        {
            assert!(start.elapsed().as_secs() < 15, "`sleep 30` survived");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    #[tokio::test]
    async fn background_jobs_do_not_hang_the_call() {
        let (_d, tb) = toolbox();
        let start = Instant::now();
        let out = tb
            .dispatch("execute_shell", r#"{"command": "sleep 30 & echo started"}"#)
            .await;
        assert!(start.elapsed().as_secs() < 10);
        assert_eq!(out.exit_code, Some(0));
        assert!(out.text.contains("started"));
    }

    #[tokio::test]
    async fn long_output_keeps_head_and_tail() {
        let (_d, tb) = toolbox();
        let out = tb
            .dispatch(
                "execute_shell",
                r#"{"command": "echo FIRST; seq 1 100000; echo LAST"}"#,
            )
            .await;
        assert!(out.truncated);
        assert!(
            out.text.starts_with("FIRST") && out.text.contains("LAST"),
            "{}",
            &out.text[..100]
        );
        assert!(out.text.contains("bytes cut"));
        assert!(out.text.ends_with("[exit code 0]"), "{}", out.text);
        assert!(out.text.len() <= 4096, "{}", out.text.len());
    }

    #[tokio::test]
    async fn a_detached_job_holding_the_pipe_does_not_hang_the_call() {
        // `setsid` leaves the process group, so killing the group does not
        // end it, and it keeps the output pipe open.
        let (d, tb) = toolbox();
        let start = Instant::now();
        let out = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            tb.dispatch(
                "execute_shell",
                r#"{"command": "setsid sleep 5000 & echo $! > bg.pid; echo started"}"#,
            ),
        )
        .await;
        // `setsid` in a non-interactive shell execs the sleep in place: $!
        // is the sleep, which this test started and now ends.
        if let Ok(pid) = std::fs::read_to_string(d.path().join("bg.pid")) {
            let pid: i32 = pid.trim().parse().unwrap();
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() == "sleep" {
                // SAFETY: only sends a signal to the process this test started.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
        let out = out.expect("the call hung on the detached job");
        assert!(start.elapsed().as_secs() < 10, "{:?}", start.elapsed());
        assert_eq!(out.exit_code, Some(0), "{}", out.text);
        assert!(out.text.contains("started"), "{}", out.text);
    }
}
