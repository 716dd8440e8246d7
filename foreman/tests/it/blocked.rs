//! Issue 29, blocked: the model says it cannot go on (`task_blocked
//! {reason, needed}`), the task is `blocked` (recoverable) until a person
//! unblocks it, through the CLI (`task answer`) or the HTTP API (`inject`,
//! `resume`); `task.blocked` and `task.paused` are webhooks, delivered and
//! signed. Real Docker, a real `saheeli serve`, replay scripts.

use std::time::Duration;

use serde_json::{Value, json};

use crate::human::{Serve, until};
use crate::lifecycle::wait_for;
use crate::util::{Saheeli, replay_prompt, require_docker, script};
use crate::web::{WebServe, get, post, until_api};
use crate::webhooks::{Receiver, SECRET};

/// Blocked, then (after the unblock) a shell command and the end. The
/// turn that blocks also asks for a shell command, which is not run.
fn blocked_script(s: &Saheeli) {
    s.write(
        "blocked.json",
        &serde_json::to_string_pretty(&json!({"turns": [
            {"tool_calls": [
                {"name": "task_blocked", "arguments": {
                    "reason": "the package index refuses every download",
                    "needed": "a reachable mirror URL"}},
                {"name": "execute_shell", "arguments": {"command": "touch not-run"}}
            ]},
            {"tool_calls": [{"name": "execute_shell", "arguments": {"command": "touch went-on"}}]},
            {"tool_calls": [{"name": "task_complete", "arguments": {"message": "went on"}}]}
        ]}))
        .unwrap(),
    );
}

fn kinds(t: &Value) -> Vec<String> {
    t["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str().map(String::from))
        .collect()
}

#[test]
fn task_blocked_waits_blocked_until_answered_then_completes() {
    require_docker();
    let s = Saheeli::new();
    blocked_script(&s);
    s.write("p.md", &replay_prompt("blocked.json", "park_after: 60s\n"));
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let t = until(&s, &id, &serve, "blocked", |t| t["state"] == "blocked");
    assert_eq!(
        t["waiting_for"],
        json!({"kind": "blocked", "reason": "the package index refuses every download",
               "needed": "a reachable mirror URL"})
    );
    assert_eq!(t["recoverable"], true, "{t:#}");
    // Status shows why and how to unblock it.
    let table = s.expect(&["task", "status"], 0);
    assert!(table.contains("blocked"), "{table}");
    let detail = s.expect(&["task", "status", &id], 0);
    assert!(
        detail.contains("needs: a reachable mirror URL")
            && detail.contains(&format!("saheeli task answer {id}")),
        "{detail}"
    );
    // An approval is not an unblock; a pause of a blocked task is refused.
    let err = s.expect_err(&["task", "approve", &id], 2);
    assert!(err.contains("waits for an unblock"), "{err}");
    s.expect_err(&["task", "pause", &id], 2);

    let out = s.expect(&["task", "answer", &id, "use", "http://mirror.local"], 0);
    assert!(out.contains("unblocked"), "{out}");
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    assert_eq!(t["recoverable"], false);
    let k = kinds(&t);
    assert!(
        k.contains(&"asked".to_string()) && k.contains(&"answered".to_string()),
        "{k:?}"
    );
    let ws = std::path::PathBuf::from(t["results"].as_str().unwrap());
    assert!(ws.join("went-on").exists(), "the model went on");
    assert!(
        !ws.join("not-run").exists(),
        "task_blocked ended its turn: the call after it did not run"
    );
    // What the model read: the answer, and why its other call did not run.
    let session = std::fs::read_to_string(ws.join(format!("servo-{id}-session.json"))).unwrap();
    assert!(
        session.contains("unblocked the task: use http://mirror.local"),
        "{session}"
    );
    assert!(
        session.contains("not run: task_blocked ended the turn"),
        "{session}"
    );
    let logs = s.expect(&["task", "logs", &id], 0);
    assert!(
        logs.contains("asks a human: blocked: the package index refuses every download"),
        "{logs}"
    );
    assert!(logs.contains("answer by"), "{logs}");
}

#[test]
fn the_api_unblocks_and_resumes_and_webhooks_tell_of_the_pause_and_the_block() {
    require_docker();
    let mut rx = Receiver::new();
    rx.start();
    let s = Saheeli::with_config(&format!(
        "notify:\n  - url: {}\n    events: [task.paused, task.blocked, task.completed]\n",
        rx.url()
    ))
    .env("SAHEELI_WEBHOOK_SECRET", SECRET);
    s.write(
        "two.json",
        &script(&[
            (
                "task_blocked",
                json!({"reason": "no credentials for the staging database",
                       "needed": "a read-only account"}),
            ),
            (
                "task_blocked",
                json!({"reason": "still no account", "needed": "anything"}),
            ),
            ("task_complete", json!({"message": "done without it"})),
        ]),
    );
    s.write("p.md", &replay_prompt("two.json", "park_after: 60s\n"));
    let id = s.submit("p.md");
    // Paused before it starts: it pauses before its first LLM call.
    s.expect(&["task", "pause", &id], 0);
    let w = WebServe::start(&s, "127.0.0.1:0", &["-j", "1"]);
    let a = &w.addr;
    let t = until_api(&w, &id, "paused", |t| t["state"] == "paused");
    assert_eq!(t["recoverable"], true);
    let r = post(a, &format!("/api/tasks/{id}/resume"), json!({}));
    assert_eq!(r.status, 200, "{}", r.body);

    let t = until_api(&w, &id, "blocked", |t| t["state"] == "blocked");
    assert_eq!(t["waiting_for"]["kind"], "blocked");
    // A message unblocks it: it is the reply to the blocked call.
    let r = post(
        a,
        &format!("/api/tasks/{id}/inject"),
        json!({"text": "ask ops for one"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.json()["message"].as_str().unwrap().contains("unblocked"),
        "{}",
        r.body
    );
    // Blocked again; `resume` unblocks without an answer.
    let t = until_api(&w, &id, "blocked again", |t| {
        t["state"] == "blocked" && t["waiting_for"]["reason"] == "still no account"
    });
    assert_eq!(t["recoverable"], true);
    let r = post(a, &format!("/api/tasks/{id}/resume"), json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    let t = until_api(&w, &id, "complete", |t| t["state"] == "complete");
    let answered: Vec<&Value> = t["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "answered")
        .collect();
    assert_eq!(answered.len(), 2, "{t:#}");
    assert_eq!(answered[0]["detail"], "ask ops for one");
    let all = get(a, "/api/tasks?state=blocked").json();
    assert_eq!(all, json!([]));

    // The webhooks: paused, blocked twice, completed; each signed.
    let arrived = wait_for(Duration::from_secs(60), || {
        rx.got.lock().unwrap().len() >= 4
    });
    let got = rx.got.lock().unwrap().clone();
    assert!(arrived, "{got:?}\n{}", w.serve.log());
    assert!(rx.bad.lock().unwrap().is_empty(), "bad signatures");
    let types: Vec<&str> = got
        .iter()
        .filter(|g| g.2 == id)
        .map(|g| g.1.as_str())
        .collect();
    assert_eq!(
        types,
        [
            "task.paused",
            "task.blocked",
            "task.blocked",
            "task.completed"
        ]
    );
    rx.stop();
}
