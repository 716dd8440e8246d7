//! Issue 30: a retry by policy goes on from the attempt before it (its
//! collected workspace and saved session, with a note to the model on what
//! ended it), or starts from scratch; budgets span the chain unless
//! `budget_per_attempt`; retries wait out their backoff in `queued`, with
//! `not_before` in status. Real containers, a real OOM kill; the model is
//! the fake LLM (which sees every request) or a replay script.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::lifecycle::wait_for;
use crate::util::{Saheeli, leftovers, replay_prompt, require_docker, script};

/// Fills the container's memory past its 64 MiB (a tmpfs's pages are
/// memory no kill frees): the kernel's OOM killer ends every process in
/// it, the servo too, and Docker reports the container OOM-killed.
const ALLOCATE: &str = "head -c 300M /dev/zero > /tmp/fill";

fn run_json(s: &Saheeli, prompt: &str, code: i32) -> Value {
    let out = s.run(&["run", prompt, "--json"]);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The model's turns: a file written, then a command that runs the
/// container out of memory; after the retry, the file read and done.
fn oom_then_finish() -> FakeLlm {
    FakeLlm::start(vec![
        Reply::tool(
            "create_file",
            json!({"path": "work.txt", "content": "before the oom"}),
        ),
        Reply::tool("execute_shell", json!({ "command": ALLOCATE })),
        Reply::tool("read_file", json!({"path": "work.txt"})),
        Reply::tool("task_complete", json!({"message": "done after the oom"})),
    ])
}

fn openai(llm: &FakeLlm) -> Saheeli {
    Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test-gateway-000")
        .env("OPENAI_BASE_URL", &llm.base_url())
}

/// The prompt: 64 MiB, one retry from `from`, a short backoff.
fn prompt(from: &str) -> String {
    format!(
        "---\nmodel: gpt-test\nresources: {{ memory: 64m }}\nretries: 1\nretry_from: {from}\n\
         retry_backoff: {{ initial: 1s, multiplier: 1, max: 1s }}\n---\nWrite work.txt, then be done.\n"
    )
}

/// The messages of the `n`th request the model got (0-based).
fn messages(llm: &FakeLlm, n: usize) -> Vec<Value> {
    let seen = llm.seen();
    assert!(seen.len() > n, "only {} requests", seen.len());
    seen[n].body["messages"].as_array().unwrap().clone()
}

fn text(m: &Value) -> String {
    m["content"].as_str().unwrap_or_default().to_string()
}

/// Both attempts of a chain that ended after one retry: (first, last).
fn attempts(s: &Saheeli, last: &Value) -> (Value, Value) {
    let first_id = last["retry_of"]
        .as_str()
        .expect("the last attempt is a retry");
    (s.task(first_id), s.task(last["id"].as_str().unwrap()))
}

#[test]
fn an_oom_killed_task_goes_on_from_its_session() {
    require_docker();
    let llm = oom_then_finish();
    let s = openai(&llm);
    s.write("p.md", &prompt("session"));
    let last = run_json(&s, "p.md", 0);
    let (first, last) = attempts(&s, &last);
    assert_eq!(first["state"], "incomplete");
    assert_eq!(first["reason"], "oom");
    assert_eq!(
        (last["state"].as_str(), last["attempt"].as_i64()),
        (Some("complete"), Some(2))
    );
    assert_eq!(llm.seen_count(), 4, "the retry asked the model twice");

    // The retry's first request goes on from the conversation: the file
    // written, the call that ran out of memory answered as not finished,
    // and the note on what ended the attempt.
    let m = messages(&llm, 2);
    let calls: Vec<String> = m
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .map(|c| c["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(calls, ["create_file", "execute_shell"], "{m:#?}");
    let cut = m
        .iter()
        .find(|m| m["role"] == "tool" && text(m).contains("did not finish"));
    assert!(cut.is_some(), "the OOM call is answered: {m:#?}");
    let note = text(m.last().unwrap());
    assert_eq!(m.last().unwrap()["role"], "user");
    for want in [
        "Attempt 1 of this task ended",
        "ran out of memory",
        "attempt 2 of 2",
        "your conversation so far",
        "Budget left for it",
        "running its last tool call, `execute_shell`",
        "/dev/zero",
    ] {
        assert!(note.contains(want), "`{want}` not in the note: {note}");
    }
    // With the workspace it had: the file the first attempt wrote.
    let read = messages(&llm, 3);
    let result = read.iter().rev().find(|m| m["role"] == "tool").unwrap();
    assert!(text(result).contains("before the oom"), "{result}");
    let results = Path::new(last["results"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(results.join("work.txt")).unwrap(),
        "before the oom"
    );
    // The retry's own steps and tokens: the chain is counted across attempts.
    assert_eq!(last["steps"], 2);
    assert_eq!(first["steps"], 2);
    for t in [&first, &last] {
        assert!(leftovers(t["id"].as_str().unwrap()).is_empty());
    }
}

#[test]
fn an_oom_killed_task_retried_from_scratch_starts_over() {
    require_docker();
    let llm = oom_then_finish();
    let s = openai(&llm);
    s.write("p.md", &prompt("scratch"));
    let last = run_json(&s, "p.md", 0);
    let (first, last) = attempts(&s, &last);
    assert_eq!(first["reason"], "oom");
    assert_eq!(last["state"], "complete");
    // A fresh conversation: the system prompt and the task, nothing else.
    let m = messages(&llm, 2);
    assert_eq!(m.len(), messages(&llm, 0).len(), "{m:#?}");
    assert!(!m.iter().any(|m| text(m).contains("[saheeli] Attempt")));
    // On the submitted workspace: the first attempt's file is not there.
    let read = messages(&llm, 3);
    let result = read.iter().rev().find(|m| m["role"] == "tool").unwrap();
    assert!(!text(result).contains("before the oom"), "{result}");
    let results = Path::new(last["results"].as_str().unwrap());
    assert!(!results.join("work.txt").exists());
}

/// A replay that writes a file, runs out of memory, then takes three
/// more steps to finish.
fn replay_chain(s: &Saheeli, front: &str) {
    s.write(
        "oom.json",
        &script(&[
            (
                "create_file",
                json!({"path": "work.txt", "content": "kept"}),
            ),
            ("execute_shell", json!({ "command": ALLOCATE })),
            ("execute_shell", json!({"command": "cat work.txt"})),
            ("execute_shell", json!({"command": "true"})),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write(
        "p.md",
        &replay_prompt(
            "oom.json",
            &format!(
                "resources: {{ memory: 64m }}\nmax_steps: 3\nretries: 2\n\
                 retry_backoff: {{ initial: 1s, multiplier: 1, max: 1s }}\n{front}"
            ),
        ),
    );
}

#[test]
fn budgets_span_the_chain_of_attempts() {
    require_docker();
    let s = Saheeli::new();
    replay_chain(&s, "");
    // Attempt 1 took 2 of its 3 steps; attempt 2 (from its session) had
    // one left, and the chain's steps were then spent: no attempt 3.
    let last = run_json(&s, "p.md", 1);
    let (first, last) = attempts(&s, &last);
    assert_eq!(first["reason"], "oom");
    assert_eq!(first["steps"], 2);
    assert_eq!(last["state"], "incomplete");
    assert_eq!(last["reason"], "max_steps");
    assert_eq!(last["steps"], 1);
    let detail = last["detail"].as_str().unwrap();
    assert!(detail.contains("spent `max_steps`"), "{detail}");
    // The servo was given what the chain had left.
    let results = Path::new(last["results"].as_str().unwrap());
    let task: Value =
        serde_json::from_slice(&std::fs::read(results.join(".saheeli/task.json")).unwrap())
            .unwrap();
    assert_eq!(task["max_steps"], 1);
    assert_eq!(task["resume"]["mode"], "session");
}

#[test]
fn each_attempt_has_its_own_budget_when_asked() {
    require_docker();
    let s = Saheeli::new();
    replay_chain(&s, "budget_per_attempt: true\n");
    let last = run_json(&s, "p.md", 0);
    let (first, last) = attempts(&s, &last);
    assert_eq!(first["reason"], "oom");
    assert_eq!(last["state"], "complete");
    // Three steps of its own: from the step the first attempt reached.
    assert_eq!(last["steps"], 3);
    let results = Path::new(last["results"].as_str().unwrap());
    let audit = std::fs::read_to_string(
        results.join(format!("servo-{}-audit.log", last["id"].as_str().unwrap())),
    )
    .unwrap();
    assert!(audit.contains("cat work.txt"), "{audit}");
    assert!(
        !audit.contains("/dev/zero"),
        "the OOM step is not run again"
    );
}

#[test]
fn retries_wait_out_their_backoff_in_the_queue() {
    require_docker();
    let s = Saheeli::new();
    // Each attempt ends at once (its script runs out); the first retry
    // waits about a second, the second about a minute.
    s.write(
        "quick.json",
        &script(&[("execute_shell", json!({"command": "true"}))]),
    );
    s.write(
        "p.md",
        &replay_prompt(
            "quick.json",
            "retries: 2\nretry_backoff: { initial: 1s, multiplier: 60, max: 1h }\n",
        ),
    );
    let first = s.submit("p.md");
    let mut serve = s
        .cmd(&["serve"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let third = || {
        s.tasks()
            .into_iter()
            .find(|t| t["attempt"] == 3 && t["state"] == "queued")
    };
    let waiting = wait_for(Duration::from_secs(120), || third().is_some());
    let status = s.expect(&["task", "status"], 0);
    serve.kill().unwrap();
    serve.wait().unwrap();
    assert!(
        waiting,
        "the second retry was never queued: {:#?}",
        s.tasks()
    );
    let ms = |t: &Value, k: &str| {
        let at = t[k].as_str().unwrap_or_else(|| panic!("no `{k}` in {t}"));
        humantime::parse_rfc3339(at).unwrap()
    };
    let waited = |t: &Value| {
        ms(t, "not_before")
            .duration_since(ms(t, "created_at"))
            .unwrap()
            .as_secs_f64()
    };
    let second = s.tasks().into_iter().find(|t| t["attempt"] == 2).unwrap();
    assert_eq!(second["retry_of"], first.as_str());
    let third = third().unwrap();
    // 1 s and 60 s, each ±20 % jitter; the times shown are whole seconds.
    let (w2, w3) = (waited(&second), waited(&third));
    assert!((0.0..=2.2).contains(&w2), "first retry waited {w2} s");
    assert!((47.0..=73.0).contains(&w3), "second retry waits {w3} s");
    assert!(status.contains("retry 2 of 2 in"), "{status}");
    let detail = s.expect(&["task", "status", third["id"].as_str().unwrap()], 0);
    assert!(detail.contains("waits:     retry 2 of 2 in"), "{detail}");
    s.expect(&["task", "cancel", third["id"].as_str().unwrap()], 0);
}
