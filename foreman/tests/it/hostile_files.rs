//! Issue 9 §3: files in a collected workspace are the agent's. An audit log
//! replaced by a link to `/dev/zero` or `/proc/self/environ`, a FIFO, or
//! terminal escapes appended to it must not hang or bloat the foreman, nor
//! make `task logs` print the foreman's environment or drive the terminal.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::util::{Saheeli, replay_prompt, require_docker, script};

/// What a watched command did.
pub struct Watched {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub peak_rss_kb: u64,
    /// Why the watchdog killed it, if it did.
    pub killed: Option<String>,
}

fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs `cmd`, killing it when it runs past `timeout`, its RSS passes
/// `max_rss_kb`, or `stop` says so; keeps the first MiB of each output.
pub fn watched(
    mut cmd: Command,
    timeout: Duration,
    max_rss_kb: u64,
    stop: impl Fn() -> Option<String>,
) -> Watched {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            let mut buf = [0u8; 8192];
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if kept.len() < 1 << 20 {
                    kept.extend_from_slice(&buf[..n]);
                }
            }
            String::from_utf8_lossy(&kept).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let started = Instant::now();
    let mut peak = 0;
    let mut killed = None;
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if let Some(kb) = rss_kb(child.id()) {
            peak = peak.max(kb);
        }
        let why = if peak > max_rss_kb {
            Some(format!("RSS reached {peak} kB"))
        } else if started.elapsed() > timeout {
            Some(format!("still running after {timeout:?}"))
        } else {
            stop()
        };
        if let Some(why) = why {
            let _ = child.kill();
            let _ = child.wait();
            killed = Some(why);
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Watched {
        code,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        peak_rss_kb: peak,
        killed,
    }
}

#[test]
fn issue9_an_audit_log_the_agent_replaced_is_never_followed() {
    require_docker();
    let env_canary = "sk-canary-env-7f3a9c2e5b";
    let dotenv_canary = "sk-canary-dotenv-41d8e0aa";
    let s = Saheeli::new().env("ANTHROPIC_API_KEY", env_canary);
    s.write(".env", &format!("OPENAI_API_KEY={dotenv_canary}\n"));
    let swaps = [
        ("zero", "rm \"$f\" && ln -s /dev/zero \"$f\""),
        ("environ", "rm \"$f\" && ln -s /proc/self/environ \"$f\""),
        ("fifo", "rm \"$f\" && mkfifo \"$f\""),
        (
            "escapes",
            "printf '\\033]0;owned\\007\\033[2J raw line\\n' >> \"$f\"",
        ),
    ];
    let mut ids = Vec::new();
    for (name, swap) in swaps {
        s.write(
            &format!("{name}.json"),
            &script(&[
                (
                    "execute_shell",
                    json!({"command": format!("f=$(ls servo-*-audit.log) && {swap}")}),
                ),
                ("task_complete", json!({"message": "swapped"})),
            ]),
        );
        s.write(
            &format!("{name}.md"),
            &replay_prompt(&format!("{name}.json"), ""),
        );
        ids.push((name, s.submit(&format!("{name}.md"))));
    }
    let serve = watched(
        s.cmd(&["serve", "--drain"]),
        Duration::from_secs(180),
        512 * 1024,
        || None,
    );
    assert_eq!(
        (serve.killed.as_deref(), serve.code),
        (None, Some(0)),
        "serve: peak {} kB\n{}",
        serve.peak_rss_kb,
        serve.stderr
    );
    for (name, id) in &ids {
        assert_eq!(s.task(id)["state"], "complete", "{name}");
        let logs = watched(
            s.cmd(&["task", "logs", id]),
            Duration::from_secs(30),
            256 * 1024,
            || None,
        );
        assert_eq!(logs.killed, None, "{name}: task logs");
        let all = format!("{}{}{}", logs.stdout, logs.stderr, serve.stderr);
        for canary in [env_canary, dotenv_canary] {
            assert!(
                !all.contains(canary),
                "{name}: the foreman's environment was printed:\n{all}"
            );
        }
        assert!(
            !logs.stdout.contains('\x1b') && !logs.stdout.contains('\x07'),
            "{name}: raw terminal escapes printed:\n{}",
            logs.stdout
        );
        // Issue 23: the audit log is the servo's, in a sticky workspace:
        // the agent's swap fails, and the log is the servo's own, whole.
        assert_eq!(logs.code, Some(0), "{name}: {}", logs.stderr);
        assert!(logs.stdout.contains("finish"), "{name}: {}", logs.stdout);
        assert!(
            !logs.stdout.contains("[not an audit event]"),
            "{name}: a line the agent added:\n{}",
            logs.stdout
        );
        let results = std::path::PathBuf::from(s.task(id)["results"].as_str().unwrap());
        let audit = results.join(format!("servo-{id}-audit.log"));
        assert!(
            std::fs::symlink_metadata(&audit).unwrap().is_file(),
            "{name}: the audit log was replaced"
        );
    }
}
