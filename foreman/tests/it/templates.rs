//! Issue 11, "Templates with parameters": declared parameters with types
//! and defaults, `{{ name }}` placeholders, a missing required parameter
//! (exit 2 without a terminal, asked for on one), and `steps:` marked done
//! with `step_done`, shown live by `task status` (text and `--json`) and
//! in the report. Real Docker, replay scripts, a real pseudo-terminal.

use std::io::{Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::human::{Serve, until};
use crate::lifecycle::wait_for;
use crate::util::{Saheeli, assert_nothing_queued, require_docker, script};

/// A replay script that writes a file and completes.
fn quick_script(s: &Saheeli) {
    s.write(
        "s.json",
        &script(&[
            (
                "create_file",
                json!({"path": "out.txt", "content": "done\n"}),
            ),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
}

const COUNT: &str = "---
title: \"Count {{ what }}\"
model: replay:s.json
parameters:
  - { name: what, type: string, required: true, description: what to count }
  - { name: times, type: int, required: true, description: how many times }
---
Count {{ what }} {{ times }} times.
";

#[test]
fn a_missing_required_parameter_without_a_terminal_exits_2_naming_it_and_queues_nothing() {
    require_docker();
    let s = Saheeli::new();
    quick_script(&s);
    s.write("count.md", COUNT);
    for args in [
        &[
            "task",
            "submit",
            "--prompt",
            "count.md",
            "--param",
            "what=sheep",
        ][..],
        &["run", "count.md", "--param", "what=sheep"][..],
    ] {
        let err = s.expect_err(args, 2);
        assert!(
            err.contains("count.md: required parameter `times` has no value (how many times); give it with `--param times=VALUE`"),
            "{args:?}: {err}"
        );
        assert_nothing_queued(&s);
    }
    let err = s.expect_err(&["task", "submit", "--prompt", "count.md"], 2);
    assert!(
        err.contains("`what` has no value (what to count)") && err.contains("`--param what=VALUE`"),
        "both are named: {err}"
    );
    assert_nothing_queued(&s);
}

/// What a process wrote to its terminal so far.
#[derive(Clone, Default)]
struct Screen(Arc<Mutex<Vec<u8>>>);

impl Screen {
    fn follow(mut from: impl Read + Send + 'static) -> Screen {
        let screen = Screen::default();
        let into = screen.0.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 {
                    break;
                }
                into.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        screen
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Waits until `needle` is on the screen `times` times.
    fn wait_for(&self, needle: &str, times: usize) {
        let seen = wait_for(Duration::from_secs(60), || {
            self.text().matches(needle).count() >= times
        });
        assert!(seen, "never saw {needle:?} ×{times}:\n{}", self.text());
    }
}

#[test]
fn on_a_terminal_each_missing_parameter_is_asked_for_until_it_fits_and_the_task_runs() {
    require_docker();
    let s = Saheeli::new();
    quick_script(&s);
    s.write("count.md", COUNT);
    let mut child = s
        .in_pty(&["run", "count.md"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("util-linux `script` runs");
    let mut keys = child.stdin.take().unwrap();
    let screen = Screen::follow(child.stdout.take().unwrap());

    screen.wait_for("what = ", 1);
    assert!(
        screen
            .text()
            .contains("parameter `what` (string, required): what to count"),
        "{}",
        screen.text()
    );
    keys.write_all(b"sheep\n").unwrap();
    screen.wait_for("times = ", 1);
    assert!(
        screen
            .text()
            .contains("parameter `times` (int, required): how many times")
    );
    keys.write_all(b"lots\n").unwrap();
    screen.wait_for("`lots` is not a whole number; try again", 1);
    screen.wait_for("times = ", 2);
    keys.write_all(b"3\n").unwrap();

    let ended = wait_for(Duration::from_secs(120), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !ended {
        let _ = child.kill();
    }
    let status = child.wait().unwrap();
    drop(keys);
    assert!(ended, "the run never ended:\n{}", screen.text());
    assert_eq!(status.code(), Some(0), "{}", screen.text());
    let tasks = s.tasks();
    assert_eq!(tasks.len(), 1, "{tasks:#?}");
    assert_eq!(tasks[0]["state"], "complete");
    assert_eq!(tasks[0]["title"], "Count sheep");
    let results = Path::new(tasks[0]["results"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(results.join("prompt.md")).unwrap(),
        "Count sheep 3 times.\n"
    );
}

#[test]
fn parameter_values_are_checked_against_their_types_naming_the_parameter() {
    require_docker();
    let s = Saheeli::new();
    quick_script(&s);
    std::fs::create_dir(s.path().join("repo")).unwrap();
    s.write(
        "typed.md",
        "---
model: replay:s.json
parameters:
  - { name: n, type: int, default: 1 }
  - { name: flag, type: bool, default: false }
  - { name: dir, type: path, default: repo }
  - { name: mode, type: one_of, values: [fast, careful], default: fast }
---
n={{ n }} flag={{ flag }} dir={{ dir }} mode={{ mode }}
",
    );
    for (param, expected) in [
        (
            "n=2.5",
            "parameter `n` (int): `--param n=…`: `2.5` is not a whole number",
        ),
        (
            "flag=yes",
            "parameter `flag` (bool): `--param flag=…`: `yes` is not `true` or `false`",
        ),
        (
            "dir=nowhere",
            "parameter `dir` (path): `--param dir=…`: path `nowhere` does not exist",
        ),
        (
            "mode=slow",
            "parameter `mode` (one_of): `--param mode=…`: `slow` is not one of fast, careful",
        ),
    ] {
        let err = s.expect_err(
            &["task", "submit", "--prompt", "typed.md", "--param", param],
            2,
        );
        assert!(err.contains(expected), "{param}: {err}");
        assert_nothing_queued(&s);
    }
    // Good values of every type pass, and the dry run says where each came from.
    let view = s.expect_json(
        &[
            "task",
            "submit",
            "--prompt",
            "typed.md",
            "--dry-run",
            "--json",
            "--param",
            "n=-7",
            "--param",
            "flag=true",
            "--param",
            "mode=careful",
        ],
        0,
    );
    assert_eq!(
        view["task"]["body"],
        "n=-7 flag=true dir=repo mode=careful\n"
    );
    let sources: Vec<(String, String)> = view["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["source"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        sources,
        [
            ("n".to_string(), "--param".to_string()),
            ("flag".into(), "--param".into()),
            ("dir".into(), "default".into()),
            ("mode".into(), "--param".into())
        ]
    );
    let text = s.expect(&["run", "typed.md", "--dry-run", "--param", "n=4"], 0);
    assert!(text.contains("PARAMETER"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains(" n ") && l.contains(" 4 ") && l.contains("--param")),
        "{text}"
    );
    assert_nothing_queued(&s);
}

#[test]
fn an_unknown_placeholder_is_an_error_naming_its_line() {
    require_docker();
    let s = Saheeli::new();
    quick_script(&s);
    s.write(
        "p.md",
        "---\nmodel: replay:s.json\nparameters:\n  - { name: repo, default: calc }\n---\n\
         Fix {{ repo }}\nand {{ rpeo }}.\nLiteral \\{{ braces }} are fine.\n",
    );
    let err = s.expect_err(&["task", "submit", "--prompt", "p.md"], 2);
    assert!(
        err.contains("p.md:7: `{{ rpeo }}` names no parameter; declare it under `parameters:` (declared: `repo`)"),
        "{err}"
    );
    assert_nothing_queued(&s);
}

#[test]
fn a_parameter_named_like_a_front_matter_key_is_refused_naming_both() {
    require_docker();
    let s = Saheeli::new();
    quick_script(&s);
    s.write(
        "p.md",
        "---\nmodel: replay:s.json\nparameters:\n  - name: repo\n  - name: timeout\n    type: int\n---\nGo.\n",
    );
    let err = s.expect_err(&["task", "submit", "--prompt", "p.md"], 2);
    assert!(
        err.contains("p.md:5: parameter `timeout` has the name of the front-matter key `timeout`"),
        "{err}"
    );
    assert_nothing_queued(&s);
}

/// The agent's shell tries to mark a step of its own choosing through the
/// socket: since issue 23 it cannot open the socket at all (the gateway's
/// own refusal of an undeclared step is `gateway_guard`'s).
const FORGE: &str = r#"python3 -c "
import json, socket
s = socket.socket(socket.AF_UNIX)
s.connect('/run/saheeli/gateway.sock')
b = json.dumps({'name': 'deploy', 'evidence': 'forged'})
s.sendall(('POST /saheeli/v1/step_done HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' % (len(b), b)).encode())
print('forged:', s.recv(300).decode().split('\r\n')[0])
""#;

fn step<'a>(t: &'a Value, name: &str) -> &'a Value {
    t["template_steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no step {name}: {t:#}"))
}

#[test]
fn step_done_shows_live_in_status_text_and_json_and_in_the_report() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "s.json",
        &script(&[
            (
                "step_done",
                json!({"name": "read", "evidence": "first look"}),
            ),
            ("step_done", json!({"name": "deploy", "evidence": "x"})),
            (
                "step_done",
                json!({"name": "read", "evidence": "read calc.py: the divisor is off by one"}),
            ),
            ("execute_shell", json!({"command": FORGE})),
            ("ask_user", json!({"question": "go on?"})),
            (
                "step_done",
                json!({"name": "fix", "evidence": "edited calc.py"}),
            ),
            ("task_complete", json!({"message": "fixed, not checked"})),
        ]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:s.json\nsteps:\n\
         \x20 - { name: read, description: Read the code, done_when: the bug is found }\n\
         \x20 - { name: fix, description: Fix it, done_when: the code is changed }\n\
         \x20 - { name: check, description: Run the tests, done_when: all pass }\n---\nFix it.\n",
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &[]);
    let t = until(&s, &id, &serve, "waiting on the question", |t| {
        t["state"] == "waiting_human"
    });
    // Live: what the model marked so far, while the task is not over.
    assert_eq!(step(&t, "read")["state"], "completed", "{t:#}");
    assert_eq!(
        step(&t, "read")["evidence"],
        "read calc.py: the divisor is off by one",
        "marked twice: the later evidence"
    );
    assert!(step(&t, "read")["at"].is_string());
    assert_eq!(step(&t, "fix")["state"], "in_progress");
    assert_eq!(step(&t, "fix")["done_when"], "the code is changed");
    assert_eq!(step(&t, "check")["state"], "pending");
    assert_eq!(step(&t, "check")["evidence"], Value::Null);
    let text = s.expect(&["task", "status", &id], 0);
    for line in [
        "progress:  1 of 3 template steps done",
        "  ✓ read   evidence: read calc.py: the divisor is off by one",
        "  ◐ fix    done when: the code is changed",
        "  ○ check  done when: all pass",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }

    s.expect(&["task", "answer", &id, "yes"], 0);
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    assert_eq!(step(&t, "fix")["state"], "completed");
    assert_eq!(step(&t, "check")["state"], "in_progress");
    let results = Path::new(t["results"].as_str().unwrap());
    // The unknown step was an error the model read, not a crash.
    let session =
        std::fs::read_to_string(results.join(format!("servo-{id}-session.json"))).unwrap();
    assert!(
        session.contains("error: unknown step `deploy`; the steps are: read, fix, check"),
        "{session}"
    );
    assert!(
        session.contains("PermissionError"),
        "the agent's shell cannot reach the gateway: {session}"
    );
    assert!(
        !t["events"].to_string().contains("forged"),
        "{:#}",
        t["events"]
    );
    assert_eq!(t["template_steps"].as_array().unwrap().len(), 3);
    let report = s.expect(&["task", "report", &id], 0);
    for part in [
        "## Template steps",
        "2 of 3 steps done.",
        "| ✓ completed | `read` | `read calc.py: the divisor is off by one` |",
        "| ✓ completed | `fix` | `edited calc.py` |",
        "| ◐ in progress | `check` | (done when: `all pass`) | - |",
    ] {
        assert!(report.contains(part), "missing {part:?} in\n{report}");
    }
}

#[test]
fn the_example_template_runs_to_complete_offline() {
    require_docker();
    let s = Saheeli::new();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let copied = std::process::Command::new("cp")
        .args(["-r"])
        .arg(repo.join("prompts"))
        .arg(s.path())
        .status()
        .unwrap();
    assert!(copied.success());
    let out = s.run(&[
        "run",
        "prompts/fix-failing-test.md",
        "--param",
        "test=test_calc.MeanTest.test_mean",
        "--param",
        "model=replay:fix-failing-test.replay.yaml",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let id = Path::new(stdout.trim())
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let t = s.task(&id);
    assert_eq!(
        t["title"],
        "Fix the failing test test_calc.MeanTest.test_mean"
    );
    for name in ["reproduce", "fix", "confirm"] {
        assert_eq!(step(&t, name)["state"], "completed", "{t:#}");
    }
    let results = Path::new(stdout.trim());
    let fixed = std::fs::read_to_string(results.join("calc.py")).unwrap();
    assert!(
        fixed.contains("return sum(values) / len(values)"),
        "{fixed}"
    );
    let report = s.expect(&["task", "report", &id], 0);
    assert!(report.contains("3 of 3 steps done."), "{report}");
}
