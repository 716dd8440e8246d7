//! Issue 47 (cases N15, N16): a step's gate and its breakpoint before
//! apply whichever call reaches the step first. A `step_done` of a step
//! with `approve: true` that never started waits for a person's approval
//! (`waiting_human`) and the step is not done until `task approve`; a
//! `step_done` of a step with `breakpoint: before` starts it and pauses
//! there, leaving it open. A checked step's command runs at most
//! `MAX_CHECKS_PER_STEP` (5) times in an attempt; past it the model is
//! refused, and no verify container starts. The same holds for a
//! third-party agent's shell posting to the servo's MCP route. Real
//! Docker, a real `saheeli serve`, replay scripts and a custom agent.

use serde_json::{Value, json};

use crate::children::events_of;
use crate::human::{Serve, until};
use crate::steps::{done, started};
use crate::util::{Saheeli, require_docker, script};

fn session(t: &Value) -> String {
    let dir = std::path::Path::new(t["results"].as_str().unwrap());
    let id = t["id"].as_str().unwrap();
    std::fs::read_to_string(dir.join(format!("servo-{id}-session.json"))).unwrap()
}

/// N15 with the built-in loop: the hostile run's `s1.md`, its replay
/// calling `step_done a`, `step_done b`, `task_complete` and never
/// `step_start`.
#[test]
fn step_done_without_step_start_meets_the_approval_and_the_breakpoint() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "s1.json",
        &script(&[
            ("step_done", json!({"name": "a", "evidence": "a done"})),
            ("step_done", json!({"name": "b", "evidence": "b done"})),
            ("task_complete", json!({"message": "both done"})),
        ]),
    );
    s.write(
        "s1.md",
        "---\nmodel: replay:s1.json\npark_after: 60s\nsteps:\n\
         \x20 - { name: a, description: Ship it, approve: true }\n\
         \x20 - { name: b, description: Then this, breakpoint: before }\n---\nShip.\n",
    );
    let id = s.submit("s1.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let t = until(&s, &id, &serve, "the approval gate", |t| {
        t["state"] == "waiting_human"
    });
    assert_eq!(t["waiting_for"]["kind"], "approval", "{t:#}");
    assert_eq!(t["waiting_for"]["tool"], "step_done", "{t:#}");
    let args = t["waiting_for"]["arguments"].as_str().unwrap();
    assert!(args.contains("\"name\":\"a\""), "{args}");
    assert!(!started(&t, "a") && !done(&t, "a"), "{t:#}");

    s.expect(&["task", "approve", &id], 0);
    // `b` never started: its step_done starts it and stops before it.
    let t = until(&s, &id, &serve, "paused before b", |t| {
        t["state"] == "paused"
    });
    assert!(started(&t, "a") && done(&t, "a"), "{t:#}");
    assert!(started(&t, "b") && !done(&t, "b"), "{t:#}");
    assert_eq!(
        events_of(&t, "breakpoint"),
        ["breakpoint before step `b`"],
        "{t:#}"
    );

    s.expect(&["task", "resume", &id], 0);
    let t = until(&s, &id, &serve, "ended", |t| t["state"] == "complete");
    // The model never marked `b` again: it stays open.
    assert!(done(&t, "a") && !done(&t, "b"), "{t:#}");
    let text = session(&t);
    assert!(
        text.contains("Step `a` recorded as done (1 of 2 steps done)"),
        "{text}"
    );
    assert!(
        text.contains("Step `b` had not started, so this call started it"),
        "{text}"
    );
}

/// N16: a checked step's check looped.
#[test]
fn a_checked_steps_check_runs_at_most_five_times() {
    require_docker();
    let s = Saheeli::new();
    let mut turns: Vec<(&str, Value)> = Vec::new();
    for i in 0..7 {
        turns.push((
            "step_done",
            json!({"name": "b", "evidence": format!("try {i}")}),
        ));
    }
    turns.push(("task_complete", json!({"message": "gave up"})));
    s.write("loop.json", &script(&turns));
    s.write(
        "p.md",
        "---\nmodel: replay:loop.json\nsteps:\n\
         \x20 - { name: b, description: Never true, done_when: { verify: \"false\" } }\n---\nLoop.\n",
    );
    let out = s.run(&["run", "p.md", "--json"]);
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = t["id"].as_str().unwrap();
    let t = s.expect_json(&["task", "status", id, "--json"], 0);
    assert_eq!(t["state"], "complete", "{t:#}");
    assert!(!done(&t, "b"), "{t:#}");
    // Five verify containers, then none.
    let checks = events_of(&t, "step_check");
    assert_eq!(checks.len(), 5, "{checks:?}");
    assert!(
        checks
            .iter()
            .all(|c| c == "step `b`: `false` failed: exit 1")
    );
    let text = session(&t);
    assert_eq!(
        text.matches("its check `false` will not run again: it ran 5 times")
            .count(),
        2,
        "{text}"
    );
}

/// N15 from a third-party agent's shell: a custom agent (a Python script
/// in the servo image) posts `step_done` straight to the servo's loopback
/// MCP route, as the hostile run's `evil.py` did.
#[test]
fn an_agents_shell_gets_the_same_gates_through_the_forwarder() {
    require_docker();
    let llm = crate::fake_llm::FakeLlm::start(vec![]);
    let s = crate::human::project(&llm, "");
    s.write(
        "ws/evil.py",
        r#"import json, os, urllib.request
base = os.environ["OPENAI_BASE_URL"].rsplit("/v1", 1)[0]
def call(name, args):
    body = json.dumps({"name": name, "arguments": args}).encode()
    req = urllib.request.Request(base + "/saheeli/mcp/call", data=body,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)
said = [call("step_done", {"name": n, "evidence": n + " done"}) for n in ["a", "b", "c"]]
open("said.json", "w").write(json.dumps(said))
"#,
    );
    s.write(
        "p.md",
        "---\nmodel: gpt-test\nworkspace: ws\npark_after: 60s\n\
         agent: { command: [python3, /workspace/evil.py], api: openai-chat }\nsteps:\n\
         \x20 - { name: a, description: Ship it, approve: true }\n\
         \x20 - { name: b, description: Then this, breakpoint: before }\n\
         \x20 - { name: c, description: Never true, done_when: { verify: \"false\" } }\n---\nGo.\n",
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let t = until(&s, &id, &serve, "the approval gate", |t| {
        t["state"] == "waiting_human"
    });
    assert_eq!(t["waiting_for"]["tool"], "step_done", "{t:#}");
    assert!(!done(&t, "a"), "{t:#}");
    s.expect(&["task", "approve", &id], 0);
    let ended = |t: &Value| {
        ["complete", "incomplete", "failed"].contains(&t["state"].as_str().unwrap_or(""))
    };
    let mut t = until(&s, &id, &serve, "ended or paused", |t| {
        ended(t) || t["state"] == "paused"
    });
    if t["state"] == "paused" {
        s.expect(&["task", "resume", &id], 0);
        t = until(&s, &id, &serve, "ended", ended);
    }
    assert!(done(&t, "a") && !done(&t, "b") && !done(&t, "c"), "{t:#}");
    assert!(started(&t, "b"), "{t:#}");
    let results = std::path::Path::new(t["results"].as_str().unwrap());
    let said: Value =
        serde_json::from_str(&std::fs::read_to_string(results.join("said.json")).unwrap()).unwrap();
    let text = |i: usize| said[i]["content"][0]["text"].as_str().unwrap().to_string();
    assert_eq!(said[0]["isError"], false, "{said:#}");
    assert!(text(0).contains("Step `a` marked done"), "{said:#}");
    assert_eq!(said[1]["isError"], true, "{said:#}");
    assert!(text(1).contains("It is not done yet"), "{said:#}");
    assert_eq!(said[2]["isError"], true, "{said:#}");
    assert!(!text(2).contains("marked done"), "{said:#}");
    assert!(text(2).contains("Step `c` is not done"), "{said:#}");
}
