//! Issue 29, checked steps: `done_when: { verify: COMMAND }`. When the
//! model marks such a step done, the command runs in a verify container
//! beside the task's (as `verify` runs); a failure keeps the step open and
//! its output is the model's tool result, a pass records the step with
//! the check in its evidence. Through the CLI (`saheeli run`, `task
//! status`) and the HTTP API (`POST /api/tasks`, `GET /api/tasks/ID`).
//! Real Docker, replay scripts.

use serde_json::{Value, json};

use crate::util::{Saheeli, require_docker, script};
use crate::web::{WebServe, post, until_api};

const CHECKED: &str = "---\nmodel: replay:checked.json\nsteps:\n\
    \x20 - { name: build, description: Make the file, done_when: { verify: \"test -f made.txt && cat made.txt\" } }\n\
    \x20 - { name: tell, description: Say so, done_when: it is said }\n---\nMake made.txt.\n";

/// `build` marked done before its file exists (the check fails), then the
/// file is made and `build` marked again (it passes).
fn checked_script(s: &Saheeli) {
    s.write(
        "checked.json",
        &script(&[
            ("step_start", json!({"name": "build"})),
            ("step_done", json!({"name": "build", "evidence": "made it"})),
            (
                "execute_shell",
                json!({"command": "echo the-file-is-here > made.txt"}),
            ),
            (
                "step_done",
                json!({"name": "build", "evidence": "made it now"}),
            ),
            ("step_start", json!({"name": "tell"})),
            ("step_done", json!({"name": "tell", "evidence": "said"})),
            ("task_complete", json!({"message": "made"})),
        ]),
    );
}

fn step<'a>(t: &'a Value, name: &str) -> &'a Value {
    t["template_steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no step {name}: {t:#}"))
}

fn check_events(t: &Value) -> Vec<String> {
    t["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "step_check")
        .map(|e| e["detail"].as_str().unwrap().to_string())
        .collect()
}

fn session(t: &Value) -> String {
    let dir = std::path::Path::new(t["results"].as_str().unwrap());
    let id = t["id"].as_str().unwrap();
    std::fs::read_to_string(dir.join(format!("servo-{id}-session.json"))).unwrap()
}

/// What both tests hold of the ended task.
fn assert_checked_then_passed(t: &Value) {
    assert_eq!(t["state"], "complete", "{t:#}");
    assert_eq!(
        check_events(t),
        [
            "step `build`: `test -f made.txt && cat made.txt` failed: exit 1",
            "step `build`: `test -f made.txt && cat made.txt` passed: exit 0",
        ]
    );
    let build = step(t, "build");
    assert_eq!(build["state"], "completed");
    assert_eq!(
        build["done_when"],
        json!({"verify": "test -f made.txt && cat made.txt"})
    );
    let evidence = build["evidence"].as_str().unwrap();
    assert!(
        evidence.starts_with("made it now")
            && evidence.contains("its check `test -f made.txt && cat made.txt` passed"),
        "{evidence}"
    );
    // The model heard the failure, with the command's exit code, and that
    // the step stays open; then the pass.
    let text = session(t);
    assert!(
        text.contains("Step `build` is not done: its check `test -f made.txt && cat made.txt` exited with code 1")
            && text.contains("The step stays open"),
        "{text}"
    );
    assert!(
        text.contains("Step `build` recorded as done (1 of 2 steps done)"),
        "{text}"
    );
    // The model was told what the check is.
    assert!(
        text.contains("(done when: `test -f made.txt && cat made.txt` passes (Saheeli runs it))"),
        "{text}"
    );
}

#[test]
fn a_checked_step_fails_stays_open_then_passes_through_the_cli() {
    require_docker();
    let s = Saheeli::new();
    checked_script(&s);
    s.write("p.md", CHECKED);
    let out = s.run(&["run", "p.md", "--json"]);
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = t["id"].as_str().unwrap();
    let t = s.expect_json(&["task", "status", id, "--json"], 0);
    assert_checked_then_passed(&t);
    let text = s.expect(&["task", "status", id], 0);
    assert!(text.contains("✓ build"), "{text}");
    let report = std::fs::read_to_string(
        std::path::Path::new(t["results"].as_str().unwrap()).join("report.md"),
    )
    .unwrap();
    assert!(
        report.contains("its check `test -f made.txt && cat made.txt` passed"),
        "{report}"
    );
}

#[test]
fn a_checked_step_fails_stays_open_then_passes_through_the_api() {
    require_docker();
    let s = Saheeli::new();
    checked_script(&s);
    let w = WebServe::start(&s, "127.0.0.1:0", &["-j", "1"]);
    let r = post(
        &w.addr,
        "/api/tasks",
        json!({"prompt": CHECKED, "name": "checked.md"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.json()["id"].as_str().unwrap().to_string();
    let t = until_api(&w, &id, "ended", |t| {
        ["complete", "incomplete", "failed"].contains(&t["state"].as_str().unwrap_or(""))
    });
    assert_checked_then_passed(&t);
}

#[test]
fn an_empty_check_command_is_refused_at_submit_naming_the_step() {
    let s = Saheeli::new();
    s.write(
        "p.md",
        "---\nmodel: replay:x.json\nsteps:\n  - { name: build, done_when: { verify: \" \" } }\n---\nGo.\n",
    );
    s.write(
        "x.json",
        &script(&[("task_complete", json!({"message": "m"}))]),
    );
    let err = s.expect_err(&["task", "submit", "--prompt", "p.md"], 2);
    assert!(
        err.contains("step `build` has `done_when: { verify: }` with no command"),
        "{err}"
    );
    s.write(
        "q.md",
        "---\nmodel: replay:x.json\nsteps:\n  - { name: build, done_when: { run: ls } }\n---\nGo.\n",
    );
    s.expect_err(&["task", "submit", "--prompt", "q.md"], 2);
}
