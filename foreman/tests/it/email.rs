//! Issue 52 (from George): the email channel. `notify: [{ email: ADDRESS }]`
//! mails the events it asks for through config.yaml's `smtp:` relay, a real
//! SMTP server here (aiosmtpd, `foreman/tests/sdk/smtp_receiver.py`); a
//! task title cannot add a header; a relay that is down leaves the
//! delivery pending, not lost. Real Docker, a replay script.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::lifecycle::wait_for;
use crate::util::{Saheeli, require_docker, script};

/// The SMTP server, killed on drop.
struct Relay {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Relay {
    fn start() -> Relay {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let python = root.join(".venv-sdk/bin/python");
        assert!(
            python.exists(),
            "{} is missing: run `scripts/setup.sh sdk` (aiosmtpd, the SMTP server of this test)",
            python.display()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(&python)
            .arg(root.join("foreman/tests/sdk/smtp_receiver.py"))
            .arg(port.to_string())
            .arg(dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "ready", "the SMTP server did not start");
        Relay { child, port, dir }
    }

    /// The messages received so far: (envelope, raw message), in order.
    fn messages(&self) -> Vec<(Value, String)> {
        let mut out = Vec::new();
        for n in 1.. {
            let base: PathBuf = self.dir.path().join(n.to_string());
            let Ok(env) = std::fs::read_to_string(base.with_extension("json")) else {
                break;
            };
            let raw = std::fs::read_to_string(base.with_extension("eml")).unwrap();
            out.push((serde_json::from_str(&env).unwrap(), raw));
        }
        out
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn events_are_mailed_through_the_relay_and_a_title_adds_no_header() {
    require_docker();
    let relay = Relay::start();
    let s = Saheeli::with_config(&format!(
        "smtp: {{ relay: \"127.0.0.1:{}\", from: \"Saheeli <saheeli@example.com>\", tls: none }}\n\
         notify:\n  - email: ops@example.com\n    events: [task.completed]\n",
        relay.port
    ));
    s.write(
        "s.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:s.json\ntitle: \"Fix it\\r\\nBcc: evil@example.com\"\n---\nDo it.\n",
    );
    let id = s.submit("p.md");
    s.expect(&["serve", "--drain"], 0);
    assert!(
        wait_for(Duration::from_secs(30), || !relay.messages().is_empty()),
        "no message reached the relay: {:#}",
        s.task(&id)
    );
    let got = relay.messages();
    assert_eq!(got.len(), 1, "one event asked for, one message");
    let (envelope, raw) = &got[0];
    assert_eq!(envelope["from"], "saheeli@example.com");
    assert_eq!(envelope["to"], json!(["ops@example.com"]));
    let head = raw.split("\r\n\r\n").next().unwrap();
    assert!(
        !head
            .lines()
            .any(|l| l.to_ascii_lowercase().starts_with("bcc:")),
        "{head}"
    );
    assert!(head.contains("Subject: Saheeli: Fix it"), "{head}");
    assert!(head.contains("completed"), "{head}");
    assert!(raw.contains(&format!("Task {id}")), "{raw}");
    assert!(raw.contains("state:   complete"), "{raw}");
    assert_eq!(s.task(&id)["webhooks"]["delivered"], 1);
}

#[test]
fn an_email_channel_needs_a_relay_and_an_address() {
    require_docker();
    let replay = |s: &Saheeli| {
        s.write(
            "s.json",
            &script(&[("task_complete", json!({"message": "done"}))]),
        )
    };
    let s = Saheeli::new();
    replay(&s);
    s.write(
        "p.md",
        "---\nmodel: replay:s.json\nnotify: [{ email: ops@example.com }]\n---\nGo.\n",
    );
    let err = s.expect_err(&["task", "submit", "--prompt", "p.md"], 2);
    assert!(err.contains("needs a relay: add `smtp:"), "{err}");
    let s = Saheeli::with_config("smtp: { relay: \"127.0.0.1:1\", from: saheeli@example.com }\n");
    replay(&s);
    s.write(
        "p.md",
        "---\nmodel: replay:s.json\nnotify: [{ email: not-an-address }]\n---\nGo.\n",
    );
    let err = s.expect_err(&["task", "submit", "--prompt", "p.md"], 2);
    assert!(err.contains("is not an address"), "{err}");
    let s = Saheeli::with_config("smtp: { relay: mail.example.com, from: saheeli@example.com }\n");
    replay(&s);
    s.write("p.md", "---\nmodel: replay:s.json\n---\nGo.\n");
    let err = s.expect_err(&["task", "submit", "--prompt", "p.md"], 2);
    assert!(
        err.contains("`smtp.relay` `mail.example.com` is not HOST:PORT"),
        "{err}"
    );
}
