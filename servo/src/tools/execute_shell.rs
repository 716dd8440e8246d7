//! `execute_shell`: a bash command in the task's persistent shell
//! (`shell`), its output (stdout and stderr in order) capped to its head
//! and tail, and how it ended: the exit code, a timeout, background jobs
//! stopped, a shell that had to be replaced.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Deserialize;

use super::output::{cap, join_cut};
use super::shell::{Lost, Shell};
use super::{ToolOutput, Toolbox};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExecuteShell {
    command: String,
    timeout_s: Option<u64>,
}

/// The first and last `max` bytes of a stream, and its full length.
pub(crate) struct HeadTail {
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

    pub(crate) fn push(&mut self, mut data: &[u8]) {
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

/// How long output is still read after the command's processes were killed.
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(1);

/// How long background jobs may hold the output open after the command ended.
const BACKGROUND_GRACE: Duration = Duration::from_secs(2);

/// What the model is told when its shell had to be replaced.
const FRESH: &str = "the next command runs in a fresh shell: working directory /workspace, \
                     variables, functions and options reset";

pub(crate) async fn run(tb: &Toolbox, a: ExecuteShell) -> ToolOutput {
    if a.command.trim().is_empty() {
        return ToolOutput::error("`command` is empty");
    }
    if a.command.contains('\0') {
        return ToolOutput::error("`command` contains a NUL byte, which bash cannot run");
    }
    let timeout = a
        .timeout_s
        .map(Duration::from_secs)
        .unwrap_or(tb.shell_timeout);
    // The shell is taken out while the command runs: if this call is
    // dropped midway (SIGTERM, the time budget), it is dropped with it and
    // its whole process group killed, so nothing the model started
    // outlives its call by accident.
    let mut slot = tb.shell.lock().await;
    let taken = slot.take().map(|mut s| {
        let exited = s.exited();
        (s, exited)
    });
    let (shell, mut notice) = match taken {
        Some((s, false)) => (Some(s), None),
        Some((_, true)) => (
            None,
            Some(format!(
                "[the shell had exited since the last command; {FRESH}]\n"
            )),
        ),
        None if tb.shell_reset.swap(false, Ordering::Relaxed) => (
            None,
            Some(
                "[this command ran in a fresh shell (working directory /workspace, variables, \
                 functions and options reset): the previous one ended when the task was parked \
                 or when its processes were stopped for verification]\n"
                    .to_string(),
            ),
        ),
        None => (None, None),
    };
    let mut shell = match shell {
        Some(s) => s,
        None => match Shell::start(tb.ws.root()).await {
            Ok(s) => s,
            Err(e) => return ToolOutput::error(format!("starting bash: {e}")),
        },
    };
    let mut collected = HeadTail::new(tb.max_output);
    let (ended, mut output) = match shell.run(&a.command, timeout, &mut collected).await {
        Ok(r) => r,
        Err(e) => return ToolOutput::error(format!("running the command in bash: {e}")),
    };
    // Background jobs may keep the output open: give them a moment, then
    // end them. One that left the process group (`setsid`) survives that:
    // stop reading after a bound and keep what came, or the call would
    // hang until the whole task times out.
    let mut abandoned = false;
    if !output.drain(&mut collected, BACKGROUND_GRACE).await {
        if ended.lost.is_some() {
            shell.kill_all();
        } else {
            shell.kill_others();
        }
        abandoned = !output.drain(&mut collected, DRAIN_AFTER_KILL).await;
    }
    drop(output);
    match ended.lost {
        None => *slot = Some(shell),
        Some(lost) => {
            shell.kill_all();
            let why = match lost {
                Lost::Exited => "the shell exited",
                Lost::Killed => "the shell did not stop when interrupted and was killed",
            };
            notice = Some(format!("{}[{why}; {FRESH}]\n", notice.unwrap_or_default()));
        }
    }
    drop(slot);
    let ended = Ended {
        code: ended.code,
        timed_out: ended.timed_out,
        abandoned,
        timeout,
        notice,
    };
    report(collected, &ended, tb.max_output)
}

/// How a command ended.
struct Ended {
    code: Option<i32>,
    timed_out: bool,
    abandoned: bool,
    timeout: Duration,
    /// What happened to the shell, for the model.
    notice: Option<String>,
}

/// What the model reads: the output (head and tail within `max_output`)
/// and a trailer the cap never cuts, saying how the command ended.
fn report(collected: HeadTail, e: &Ended, max_output: usize) -> ToolOutput {
    let mut trailer = e.notice.clone().unwrap_or_default();
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

    async fn sh(tb: &crate::tools::Toolbox, args: serde_json::Value) -> crate::tools::ToolOutput {
        tb.dispatch("execute_shell", &args.to_string()).await
    }

    #[tokio::test]
    async fn the_shell_keeps_its_directory_and_variables() {
        let (d, tb) = toolbox();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        let out = sh(
            &tb,
            serde_json::json!({"command": "cd sub; export X=1; f() { echo fn; }"}),
        )
        .await;
        assert_eq!(out.exit_code, Some(0), "{}", out.text);
        let out = sh(
            &tb,
            serde_json::json!({"command": "pwd; echo \"x=$X $1 $#\"; f"}),
        )
        .await;
        let sub = d.path().join("sub").canonicalize().unwrap();
        assert!(
            out.text.contains(&format!("{}\n", sub.display())),
            "{}",
            out.text
        );
        assert!(out.text.contains("x=1  0\nfn\n"), "{}", out.text);
        // A syntax error is the command's, not the shell's.
        let out = sh(&tb, serde_json::json!({"command": "if then"})).await;
        assert_eq!(out.exit_code, Some(2), "{}", out.text);
        assert!(out.text.contains("syntax error"), "{}", out.text);
        let out = sh(&tb, serde_json::json!({"command": "echo $X; exit 0"})).await;
        assert!(out.text.starts_with("1\n"), "{}", out.text);
    }

    #[tokio::test]
    async fn a_shell_that_exits_is_replaced_and_the_model_is_told() {
        let (d, tb) = toolbox();
        for (command, code) in [
            ("cd /; export X=1; echo bye; exit 3", 3),
            ("cd /; kill $$", 143),
        ] {
            let out = sh(&tb, serde_json::json!({"command": command})).await;
            assert_eq!(out.exit_code, Some(code), "{}", out.text);
            assert!(
                out.text
                    .contains("[the shell exited; the next command runs in a fresh shell"),
                "{}",
                out.text
            );
            let out = sh(&tb, serde_json::json!({"command": "pwd; echo \"x=$X\""})).await;
            let root = d.path().canonicalize().unwrap();
            assert_eq!(out.text, format!("{}\nx=\n[exit code 0]", root.display()));
        }
    }

    #[tokio::test]
    async fn a_timeout_interrupts_the_command_and_keeps_the_shell() {
        let (_d, tb) = toolbox();
        for command in [
            "export Y=2; sleep 30; echo not-reached",
            "export Y=2; while :; do :; done",
        ] {
            let out = sh(&tb, serde_json::json!({"command": command, "timeout_s": 1})).await;
            assert!(out.text.contains("killed after 1s"), "{}", out.text);
            assert!(
                !out.text.contains("not-reached") && !out.text.contains("fresh shell"),
                "{}",
                out.text
            );
            let out = sh(&tb, serde_json::json!({"command": "echo y=$Y"})).await;
            assert!(out.text.starts_with("y=2\n"), "{}", out.text);
        }
        // A command that ignores the interrupt costs its shell.
        let out = sh(
            &tb,
            serde_json::json!({"command": "trap '' INT; sleep 30", "timeout_s": 1}),
        )
        .await;
        assert!(out.text.contains("killed after 1s"), "{}", out.text);
        assert!(
            out.text.contains("did not stop when interrupted"),
            "{}",
            out.text
        );
        let out = sh(&tb, serde_json::json!({"command": "echo y=$Y"})).await;
        assert!(out.text.starts_with("y=\n"), "{}", out.text);
    }

    #[tokio::test]
    async fn a_resumed_session_hears_its_shell_is_new() {
        let (_d, tb) = toolbox();
        tb.shell_reset
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let out = sh(&tb, serde_json::json!({"command": "true"})).await;
        assert!(out.text.contains("ran in a fresh shell"), "{}", out.text);
        let out = sh(&tb, serde_json::json!({"command": "true"})).await;
        assert_eq!(out.text, "[exit code 0]");
        let out = sh(&tb, serde_json::json!({"command": "echo a\u{0}b"})).await;
        assert!(!out.ok && out.text.contains("NUL"), "{}", out.text);
    }
}
