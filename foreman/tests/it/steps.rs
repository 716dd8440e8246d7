//! Issue 29, step-level controls: a step with `approve: true` starts only
//! on a person's approval (denied, then approved); breakpoints before and
//! after a step (the template's, and set with `task breakpoint`) pause the
//! task there; `task step` goes on for exactly one step; each through the
//! CLI and through the HTTP API, with the `step.started` and `task.paused`
//! webhooks. Real Docker, a real `saheeli serve`, replay scripts.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::human::{Serve, until};
use crate::lifecycle::wait_for;
use crate::util::{Saheeli, require_docker, script};
use crate::web::{WebServe, post, until_api};
use crate::webhooks::{Receiver, SECRET};

pub(crate) fn step<'a>(t: &'a Value, name: &str) -> &'a Value {
    t["template_steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no step {name}: {t:#}"))
}

pub(crate) fn started(t: &Value, name: &str) -> bool {
    step(t, name)["started_at"].is_string()
}

pub(crate) fn done(t: &Value, name: &str) -> bool {
    step(t, name)["state"] == "completed"
}

fn session(t: &Value, id: &str) -> String {
    let results = Path::new(t["results"].as_str().unwrap());
    std::fs::read_to_string(results.join(format!("servo-{id}-session.json"))).unwrap()
}

/// Three steps, each started and marked done in turn, then the end.
fn three_steps(s: &Saheeli) {
    three_steps_after(s, &[]);
}

/// [`three_steps`], with `first` played before step `a` starts.
fn three_steps_after(s: &Saheeli, first: &[(&str, Value)]) {
    let mut turns = first.to_vec();
    for name in ["a", "b", "c"] {
        turns.push(("step_start", json!({ "name": name })));
        turns.push((
            "step_done",
            json!({"name": name, "evidence": format!("{name} done")}),
        ));
    }
    turns.push(("task_complete", json!({"message": "all three"})));
    s.write("three.json", &script(&turns));
}

const THREE: &str = "---\nmodel: replay:three.json\npark_after: 60s\nsteps:\n\
    \x20 - { name: a, description: First, breakpoint: before }\n\
    \x20 - { name: b, description: Second }\n\
    \x20 - { name: c, description: Third }\n---\nDo a, b and c.\n";

#[test]
fn a_gated_step_is_denied_then_approved_and_the_model_hears_both() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "g.json",
        &script(&[
            ("step_start", json!({"name": "deploy"})),
            ("step_start", json!({"name": "deploy"})),
            (
                "step_done",
                json!({"name": "deploy", "evidence": "deployed"}),
            ),
            ("task_complete", json!({"message": "deployed"})),
        ]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:g.json\npark_after: 60s\nsteps:\n\
         \x20 - { name: deploy, description: Ship it, approve: true }\n---\nShip it.\n",
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let t = until(&s, &id, &serve, "the gate", |t| {
        t["state"] == "waiting_human"
    });
    assert_eq!(
        t["waiting_for"],
        json!({"kind": "approval", "tool": "step_start", "arguments": "{\"name\":\"deploy\"}"})
    );
    assert_eq!(step(&t, "deploy")["approve"], true);
    assert!(!started(&t, "deploy"), "not started before the approval");
    s.expect(
        &[
            "task",
            "deny",
            &id,
            "--reason",
            "not before the freeze ends",
        ],
        0,
    );

    // The state may still read waiting_human between the deny and the
    // second ask: wait for the open ask itself.
    let t = until(&s, &id, &serve, "asked again", |t| {
        t["state"] == "waiting_human"
            && !t["waiting_for"].is_null()
            && t["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["kind"] == "denied")
    });
    assert!(!started(&t, "deploy"), "a denied step does not start");
    s.expect(&["task", "approve", &id], 0);
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    assert!(started(&t, "deploy") && done(&t, "deploy"), "{t:#}");
    let text = session(&t, &id);
    assert!(
        text.contains(
            "denied this call, so it was not run. Their note: not before the freeze ends"
        ),
        "{text}"
    );
    assert!(text.contains("You are in step `deploy` (1 of 1)"), "{text}");
}

#[test]
fn breakpoints_pause_before_and_after_and_task_step_goes_one_step() {
    require_docker();
    let s = Saheeli::new();
    three_steps(&s);
    s.write("p.md", THREE);
    let id = s.submit("p.md");
    // A breakpoint set by hand, beside the template's (before `a`).
    let out = s.expect(&["task", "breakpoint", &id, "--step", "b", "--after"], 0);
    assert!(out.contains("breakpoint set after step `b`"), "{out}");
    let err = s.expect_err(&["task", "breakpoint", &id, "--step", "zz", "--after"], 2);
    assert!(err.contains("its steps are: a, b, c"), "{err}");
    s.expect_err(&["task", "breakpoint", &id, "--step", "b"], 2);
    let serve = Serve::start(&s, &["-j", "1"]);

    // Before `a`: started, none of its work done.
    let t = until(&s, &id, &serve, "paused before a", |t| {
        t["state"] == "paused"
    });
    assert!(started(&t, "a") && !done(&t, "a"), "{t:#}");
    assert_eq!(step(&t, "a")["breakpoints"], json!(["before"]));
    assert_eq!(step(&t, "b")["breakpoints"], json!(["after"]));
    assert_eq!(t["recoverable"], true);

    // One step: `a` ends, and it pauses again before `b` starts.
    let out = s.expect(&["task", "step", &id], 0);
    assert!(out.contains("stepping"), "{out}");
    let t = until(&s, &id, &serve, "paused after a", |t| {
        t["state"] == "paused" && done(t, "a")
    });
    assert!(!started(&t, "b"), "exactly one step: {t:#}");
    // A dry run says what comes next, and changes nothing.
    let plan = s.expect(&["task", "step", &id, "--dry-run"], 0);
    assert!(plan.contains("next step 2 of 3, `b`"), "{plan}");
    assert!(plan.contains("what:      Second"), "{plan}");
    assert!(plan.contains("pauses:    after"), "{plan}");
    assert!(plan.contains("estimate:  "), "{plan}");
    assert!(plan.contains("nothing was changed"), "{plan}");
    let still = s.task(&id);
    assert_eq!(still["state"], "paused");
    assert!(!started(&still, "b"), "{still:#}");

    // Resumed: `b` runs to its breakpoint after it.
    s.expect(&["task", "resume", &id], 0);
    let t = until(&s, &id, &serve, "paused after b", |t| {
        t["state"] == "paused" && done(t, "b")
    });
    assert!(!started(&t, "c"), "{t:#}");
    s.expect(&["task", "resume", &id], 0);
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    let details: Vec<&str> = t["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "breakpoint")
        .filter_map(|e| e["detail"].as_str())
        .collect();
    assert_eq!(
        details,
        [
            "breakpoint before step `a`",
            "step-through: step `a` is done",
            "breakpoint after step `b`"
        ]
    );
    let err = s.expect_err(&["task", "step", &id], 2);
    assert!(err.contains("ended"), "{err}");
}

/// `task breakpoint ID --clear` alone clears every breakpoint that holds,
/// the template's too: the task then runs through without pausing.
#[test]
fn clear_alone_clears_every_breakpoint_and_the_task_runs_through() {
    require_docker();
    let s = Saheeli::new();
    three_steps(&s);
    s.write("p.md", THREE);
    let id = s.submit("p.md");
    s.expect(&["task", "breakpoint", &id, "--step", "c", "--after"], 0);
    let err = s.expect_err(&["task", "breakpoint", &id], 2);
    assert!(err.contains("`--clear` alone"), "{err}");
    let out = s.expect(&["task", "breakpoint", &id, "--clear"], 0);
    assert!(
        out.contains("cleared 2 breakpoint(s)")
            && out.contains("before `a`")
            && out.contains("after `c`"),
        "{out}"
    );
    let t = s.task(&id);
    for name in ["a", "b", "c"] {
        assert_eq!(step(&t, name)["breakpoints"], json!([]), "{t:#}");
    }
    let out = s.expect(&["task", "breakpoint", &id, "--clear"], 0);
    assert!(out.contains("has no breakpoints to clear"), "{out}");
    s.expect(&["serve", "--drain"], 0);
    let t = s.task(&id);
    assert_eq!(t["state"], "complete");
    assert!(
        !t["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "breakpoint"),
        "it never paused: {t:#}"
    );
}

#[test]
fn the_api_sets_breakpoints_and_steps_and_webhooks_tell_of_each_step_and_pause() {
    require_docker();
    let mut rx = Receiver::new();
    rx.start();
    let s = Saheeli::with_config(&format!(
        "notify:\n  - url: {}\n    events: [step.started, task.paused]\n",
        rx.url()
    ))
    .env("SAHEELI_WEBHOOK_SECRET", SECRET);
    // The task starts with serve: its first command gives the API's
    // calls below the time to clear the breakpoint before `a` first
    // (on a loaded machine they could come after `a` started).
    three_steps_after(&s, &[("execute_shell", json!({"command": "sleep 3"}))]);
    s.write("p.md", THREE);
    let id = s.submit("p.md");
    let w = WebServe::start(&s, "127.0.0.1:0", &["-j", "1"]);
    let a = &w.addr;
    let act = |action: &str, body: Value| {
        let r = post(a, &format!("/api/tasks/{id}/{action}"), body);
        assert_eq!(r.status, 200, "{action}: {}", r.body);
        r.json()
    };
    // The template's breakpoint before `a` is cleared, one before `c` set.
    act(
        "breakpoint",
        json!({"step": "a", "position": "before", "clear": true}),
    );
    act("breakpoint", json!({"step": "c", "position": "before"}));
    let bad = post(
        a,
        &format!("/api/tasks/{id}/breakpoint"),
        json!({"step": "c", "position": "middle"}),
    );
    bad.error(400, "bad_input");
    let t = until_api(&w, &id, "paused before c", |t| t["state"] == "paused");
    assert!(done(&t, "a") && done(&t, "b") && started(&t, "c") && !done(&t, "c"));
    assert_eq!(step(&t, "a")["breakpoints"], json!([]));
    let r = act("step", json!({}));
    assert!(r["message"].as_str().unwrap().contains("stepping"), "{r}");
    let t = until_api(&w, &id, "paused after c", |t| {
        t["state"] == "paused" && done(t, "c")
    });
    assert_eq!(t["recoverable"], true);
    act("resume", json!({}));
    until_api(&w, &id, "complete", |t| t["state"] == "complete");

    let arrived = wait_for(Duration::from_secs(60), || {
        rx.got.lock().unwrap().len() >= 5
    });
    let got = rx.got.lock().unwrap().clone();
    assert!(arrived, "{got:?}\n{}", w.serve.log());
    assert!(rx.bad.lock().unwrap().is_empty(), "bad signatures");
    let types: Vec<&str> = got.iter().map(|g| g.1.as_str()).collect();
    assert_eq!(
        types,
        [
            "step.started",
            "step.started",
            "step.started",
            "task.paused",
            "task.paused"
        ]
    );
    rx.stop();
}

#[test]
fn steps_skipped_and_marked_done_by_hand_are_recorded_shown_and_told_to_the_model() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "o.json",
        &script(&[
            ("step_start", json!({"name": "a"})),
            ("step_start", json!({"name": "c"})),
            ("step_done", json!({"name": "c", "evidence": "c done"})),
            ("task_complete", json!({"message": "c only"})),
        ]),
    );
    s.write("p.md", &THREE.replace("three.json", "o.json"));
    let id = s.submit("p.md");
    let w = WebServe::start(&s, "127.0.0.1:0", &["-j", "1"]);
    until_api(&w, &id, "paused before a", |t| t["state"] == "paused");
    // Through the CLI, and through the API.
    let out = s.expect(
        &[
            "task",
            "step-override",
            &id,
            "--step",
            "a",
            "--state",
            "skipped",
            "--reason",
            "not needed on this repo",
        ],
        0,
    );
    assert!(out.contains("marked skipped"), "{out}");
    let r = post(
        &w.addr,
        &format!("/api/tasks/{id}/step-override"),
        json!({"step": "b", "state": "done", "reason": "done by hand"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    post(
        &w.addr,
        &format!("/api/tasks/{id}/step-override"),
        json!({"step": "b", "state": "maybe", "reason": "x"}),
    )
    .error(400, "bad_input");
    let err = s.expect_err(
        &[
            "task",
            "step-override",
            &id,
            "--step",
            "zz",
            "--state",
            "done",
            "--reason",
            "x",
        ],
        2,
    );
    assert!(err.contains("its steps are: a, b, c"), "{err}");
    let t = s.task(&id);
    assert_eq!(step(&t, "a")["state"], "skipped");
    assert_eq!(
        step(&t, "a")["override"]["reason"],
        "not needed on this repo"
    );
    assert!(step(&t, "a")["override"]["by"].is_string());
    assert_eq!(step(&t, "b")["state"], "completed");
    assert_eq!(step(&t, "b")["override"]["state"], "done");
    let text = s.expect(&["task", "status", &id], 0);
    assert!(text.contains("⊘ a"), "{text}");

    let r = post(&w.addr, &format!("/api/tasks/{id}/resume"), json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    let t = until_api(&w, &id, "complete", |t| t["state"] == "complete");
    let text = session(&t, &id);
    assert!(
        text.contains("I marked step `a` skipped: not needed on this repo"),
        "{text}"
    );
    assert!(
        text.contains("I marked step `b` done: done by hand"),
        "{text}"
    );
    let report = s.expect(&["task", "report", &id], 0);
    assert!(report.contains("skipped by"), "{report}");
    assert!(report.contains("not needed on this repo"), "{report}");
}

/// docs/steps.md's worked example, as it tells it.
#[test]
fn the_step_through_example_stops_where_the_docs_say() {
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
    let id = s.submit("prompts/step-through.md");
    let serve = Serve::start(&s, &[]);
    let t = until(&s, &id, &serve, "paused before reproduce", |t| {
        t["state"] == "paused"
    });
    assert!(started(&t, "reproduce") && !done(&t, "reproduce"), "{t:#}");
    s.expect(&["task", "step", &id], 0);
    let t = until(&s, &id, &serve, "paused after reproduce", |t| {
        t["state"] == "paused" && done(t, "reproduce")
    });
    assert!(!started(&t, "fix"));
    s.expect(&["task", "resume", &id], 0);
    let t = until(&s, &id, &serve, "fix waits for approval", |t| {
        t["state"] == "waiting_human"
    });
    assert_eq!(t["waiting_for"]["tool"], "step_start");
    s.expect(&["task", "approve", &id], 0);
    let t = until(&s, &id, &serve, "paused after confirm", |t| {
        t["state"] == "paused" && done(t, "confirm")
    });
    assert!(done(&t, "fix"));
    // `confirm` is checked: Saheeli ran the tests when the model marked it.
    let evidence = step(&t, "confirm")["evidence"].as_str().unwrap();
    assert!(
        evidence.contains("its check `python3 -m unittest` passed (exit 0)"),
        "{evidence}"
    );
    s.expect(&["task", "resume", &id], 0);
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    let fixed =
        std::fs::read_to_string(Path::new(t["results"].as_str().unwrap()).join("calc.py")).unwrap();
    assert!(
        fixed.contains("return sum(values) / len(values)"),
        "{fixed}"
    );
}
