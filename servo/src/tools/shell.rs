//! The task's persistent shell: one bash process per servo start runs every
//! `execute_shell` command, so the working directory, variables and
//! functions carry over from one command to the next, and a builtin such
//! as `true` starts no process at all.
//!
//! The model's text never goes through the shell's input, so there is no
//! quoting or framing to get wrong: each command is written to a file of
//! its own in a private directory, and the shell is sent one line of ours
//! that sets a random nonce and the command's number and calls
//! `__saheeli_step`. That sources the file (stdin from /dev/null, stdout
//! and stderr into a FIFO of its own, read here on the servo's own thread)
//! and then prints `<nonce> <status>` on the shell's stdout, which only
//! that line is written to.
//!
//! A timeout sends SIGINT to the shell's process group: the command is
//! interrupted and returns 130, the shell lives on, and processes it left
//! in the group (background jobs, which ignore SIGINT) are killed. A shell
//! that does not come back within [`INTERRUPT_GRACE`] is killed with its
//! group. A shell that exits (`exit`, `kill $$`, `set -e`) or is killed is
//! replaced by a fresh one at the next command, and the result says so.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::execute_shell::HeadTail;

/// How long an interrupted command has to return before its shell is killed.
const INTERRUPT_GRACE: Duration = Duration::from_secs(1);

/// Defines the step function; the directory is quoted by [`quote`].
const INIT: &str = r#"__saheeli_step() {
  trap 'return 130' INT
  . "$__saheeli_dir/cmd-$__saheeli_i" < /dev/null > "$__saheeli_dir/out-$__saheeli_i" 2>&1
  builtin printf '%s %d\n' "$__saheeli_n" "$?"
}
"#;

/// What became of the shell during a command.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Lost {
    /// It exited (the command ran `exit`, or something killed it).
    Exited,
    /// It did not come back from an interrupted command and was killed.
    Killed,
}

/// How the shell side of a command ended.
pub(crate) struct Ended {
    /// The command's status, or the shell's when it exited.
    pub code: Option<i32>,
    pub timed_out: bool,
    pub lost: Option<Lost>,
}

pub(crate) struct Shell {
    child: Child,
    pgid: i32,
    input: ChildStdin,
    status: BufReader<ChildStdout>,
    /// A status line read in part.
    line: Vec<u8>,
    dir: PathBuf,
    seq: u64,
}

/// `s` in single quotes, for bash.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl Shell {
    /// Starts bash in `cwd`, in a process group of its own.
    pub async fn start(cwd: &Path) -> std::io::Result<Shell> {
        let dir = std::env::temp_dir().join(format!(
            "saheeli-shell-{}-{:08x}",
            std::process::id(),
            fastrand::u32(..)
        ));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        let mut child = tokio::process::Command::new("bash")
            .args(["--noprofile", "--norc"])
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()?;
        let pgid = child.id().map_or(0, |p| p as i32);
        let mut input = child.stdin.take().expect("piped stdin");
        let status = BufReader::new(child.stdout.take().expect("piped stdout"));
        let dir_text = dir.to_str().ok_or_else(|| {
            std::io::Error::other(format!(
                "temporary directory `{}` is not UTF-8",
                dir.display()
            ))
        })?;
        let setup = format!("__saheeli_dir={}\n{INIT}", quote(dir_text));
        input.write_all(setup.as_bytes()).await?;
        input.flush().await?;
        Ok(Shell {
            child,
            pgid,
            input,
            status,
            line: Vec::new(),
            dir,
            seq: 0,
        })
    }

    /// Whether the shell has exited since its last command.
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Runs `command` until the shell reports its status, reading its
    /// output into `into` meanwhile. Returns how it ended and the output,
    /// still open when background jobs hold it (read it to the end with
    /// [`Output::drain`]).
    pub async fn run(
        &mut self,
        command: &str,
        timeout: Duration,
        into: &mut HeadTail,
    ) -> std::io::Result<(Ended, Output)> {
        self.seq += 1;
        let n = self.seq;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        let cmd = self.dir.join(format!("cmd-{n}"));
        let out = self.dir.join(format!("out-{n}"));
        let _ = std::fs::remove_file(&out);
        std::fs::write(&cmd, command)?;
        mkfifo(&out)?;
        // Our own writer keeps the FIFO from reading as ended before the
        // shell opens it; it is closed once the shell has reported.
        let reader = pipe::OpenOptions::new().open_receiver(&out);
        let keeper = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&out);
        let mut output = Output {
            fifo: reader.ok(),
            keeper: keeper.ok(),
            out,
            cmd,
        };
        let nonce = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
        let line = format!("__saheeli_n={nonce} __saheeli_i={n}; __saheeli_step\n");
        self.send(&line).await?;
        let status =
            tokio::time::timeout(timeout, self.status_reading(&nonce, &mut output, into)).await;
        let ended = match status {
            Ok(Some(code)) => Ended {
                code: Some(code),
                timed_out: false,
                lost: None,
            },
            Ok(None) => Ended {
                code: self.exit_code().await,
                timed_out: false,
                lost: Some(Lost::Exited),
            },
            Err(_) => self.interrupt(&nonce, &mut output, into).await,
        };
        output.keeper = None;
        Ok((ended, output))
    }

    /// The status for `nonce`, reading the command's output meanwhile (a
    /// command with more output than a pipe holds waits for its reader).
    async fn status_reading(
        &mut self,
        nonce: &str,
        output: &mut Output,
        into: &mut HeadTail,
    ) -> Option<i32> {
        let mut buf = [0u8; 8192];
        loop {
            let Some(fifo) = output.fifo.as_mut() else {
                return self.status_of(nonce).await;
            };
            tokio::select! {
                s = self.status_of(nonce) => return s,
                r = fifo.read(&mut buf) => match r {
                    Ok(0) | Err(_) => output.fifo = None,
                    Ok(n) => into.push(&buf[..n]),
                },
            }
        }
    }

    async fn send(&mut self, line: &str) -> std::io::Result<()> {
        self.input.write_all(line.as_bytes()).await?;
        self.input.flush().await
    }

    /// The status line for `nonce`; None when the shell's stdout closed.
    /// Resumable: a partial line stays in `self.line` when a `select!`
    /// drops this future.
    async fn status_of(&mut self, nonce: &str) -> Option<i32> {
        loop {
            let n = self.status.read_until(b'\n', &mut self.line).await.ok()?;
            if n == 0 {
                return None;
            }
            if !self.line.ends_with(b"\n") {
                continue;
            }
            let line = std::mem::take(&mut self.line);
            if let Some(code) = std::str::from_utf8(&line)
                .ok()
                .and_then(|l| l.strip_prefix(nonce))
                .and_then(|rest| rest.trim().parse().ok())
            {
                return Some(code);
            }
        }
    }

    /// The shell's own exit status, once it exited.
    async fn exit_code(&mut self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        let status = self.child.wait().await.ok()?;
        Some(
            status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
        )
    }

    /// The command ran out of time: interrupt it, and kill the shell if it
    /// does not come back.
    async fn interrupt(&mut self, nonce: &str, output: &mut Output, into: &mut HeadTail) -> Ended {
        self.signal_group(libc::SIGINT);
        let status = self.status_reading(nonce, output, into);
        match tokio::time::timeout(INTERRUPT_GRACE, status).await {
            Ok(Some(code)) => {
                self.kill_others();
                Ended {
                    code: Some(code),
                    timed_out: true,
                    lost: None,
                }
            }
            Ok(None) => Ended {
                code: self.exit_code().await,
                timed_out: true,
                lost: Some(Lost::Exited),
            },
            Err(_) => {
                self.signal_group(libc::SIGKILL);
                Ended {
                    code: self.exit_code().await,
                    timed_out: true,
                    lost: Some(Lost::Killed),
                }
            }
        }
    }

    fn signal_group(&self, sig: i32) {
        if self.pgid > 0 {
            // SAFETY: killpg only sends a signal; a stale group fails with ESRCH.
            unsafe {
                libc::killpg(self.pgid, sig);
            }
        }
    }

    /// Kills every process of the shell's group but the shell: what a
    /// command left running. Forks racing the scan are caught by the
    /// next round.
    pub fn kill_others(&self) {
        if self.pgid <= 0 {
            return;
        }
        for _ in 0..20 {
            let others = group_members(self.pgid)
                .into_iter()
                .filter(|&p| p != self.pgid)
                .collect::<Vec<_>>();
            if others.is_empty() {
                return;
            }
            for pid in others {
                // SAFETY: kill only sends a signal.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }

    /// Kills the whole group, shell included (a lost shell, or the servo
    /// stopping mid-command).
    pub fn kill_all(&self) {
        self.signal_group(libc::SIGKILL);
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        self.kill_all();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One command's output (a FIFO) and its files, removed when done.
pub(crate) struct Output {
    fifo: Option<pipe::Receiver>,
    /// Our own writer, until the shell has reported.
    keeper: Option<std::fs::File>,
    out: PathBuf,
    cmd: PathBuf,
}

impl Output {
    /// Reads to the end of the output (every writer gone) or for `wait`;
    /// whether it ended.
    pub async fn drain(&mut self, into: &mut HeadTail, wait: Duration) -> bool {
        let Some(fifo) = self.fifo.as_mut() else {
            return true;
        };
        let mut buf = [0u8; 8192];
        let read_all = async {
            loop {
                match fifo.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => into.push(&buf[..n]),
                }
            }
        };
        let ended = tokio::time::timeout(wait, read_all).await.is_ok();
        if ended {
            self.fifo = None;
        }
        ended
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.out);
        let _ = std::fs::remove_file(&self.cmd);
    }
}

fn mkfifo(path: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("a NUL in the FIFO's path"))?;
    // SAFETY: `c` is a valid NUL-terminated path for the call's duration.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The pids whose process group is `pgid` (from /proc).
fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    // After the command name (which may hold anything):
                    // state, ppid, pgrp.
                    let rest = &s[s.rfind(')')? + 1..];
                    rest.split_whitespace().nth(2)?.parse::<i32>().ok()
                })
                == Some(pgid)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(quote("/tmp/a'b"), r"'/tmp/a'\''b'");
    }
}
