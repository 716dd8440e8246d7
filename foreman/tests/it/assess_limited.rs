//! Issue 29, an assessor that can say "limited": its answer is
//! `{verdict: met | not_met | limited, feedback, findings}`; `limited`
//! stops the attempts at the first (whatever `verify_retries` allows) and
//! ends the task `incomplete` with reason `limited`, the findings in the
//! report. Real Docker; the LLM is the local fake (the assessor needs one).

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::util::{Saheeli, require_docker};
use crate::web::{WebServe, post, until_api};

const LIMITED: &str = r#"{"verdict": "limited", "feedback": "the service the objective names is not reachable from the sandbox", "findings": ["the client code is written and its unit tests pass", "the live endpoint could not be called: no network"]}"#;

/// The agent completes every time it is asked; the assessor answers
/// `verdicts` in turn.
fn llm(verdicts: Vec<&'static str>) -> FakeLlm {
    let verdicts = std::sync::Mutex::new(std::collections::VecDeque::from(verdicts));
    let agent = (0..4)
        .map(|_| Reply::tool("task_complete", json!({"message": "wrote the client"})))
        .collect();
    FakeLlm::start_matching(agent, move |body| {
        let system = body["messages"][0]["content"].as_str().unwrap_or("");
        if !system.contains("Saheeli's assessor") {
            return None;
        }
        let v = verdicts.lock().unwrap().pop_front()?;
        Some(Reply::Text(v.to_string(), (300, 30)))
    })
}

fn openai(llm: &FakeLlm) -> Saheeli {
    Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test-limited-000")
        .env("OPENAI_BASE_URL", &llm.base_url())
}

const PROMPT: &str = "---\nmodel: gpt-test\nassess: true\nverify_retries: 2\nobjective: Call the live weather API and store today's reading.\n---\nStore today's reading.\n";

fn assessor_calls(llm: &FakeLlm) -> usize {
    llm.seen()
        .iter()
        .filter(|s| s.body.to_string().contains("Saheeli's assessor"))
        .count()
}

/// What both tests hold of the ended task.
fn assert_limited(t: &Value, llm: &FakeLlm) {
    assert_eq!(t["state"], "incomplete", "{t:#}");
    assert_eq!(t["reason"], "limited", "{t:#}");
    assert_eq!(t["recoverable"], false, "a retry cannot help: {t:#}");
    // One attempt of the three allowed: the assessor was asked once, the
    // agent never again after it.
    assert_eq!(assessor_calls(llm), 1);
    let agent_calls = llm.seen_count() - 1;
    assert_eq!(agent_calls, 1, "the agent is not asked again");
    let dir = PathBuf::from(t["results"].as_str().unwrap());
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    for part in [
        "| 1 | `assess` | limited |",
        "The assessor answered `limited`",
        "- `the client code is written and its unit tests pass`",
        "- `the live endpoint could not be called: no network`",
        "not reachable from the sandbox",
    ] {
        assert!(report.contains(part), "{part}:\n{report}");
    }
    let log = std::fs::read_to_string(dir.join(".saheeli/verify-1.log")).unwrap();
    assert!(
        log.contains("== assess: limited") && log.contains("finding: the live endpoint"),
        "{log}"
    );
    assert!(!dir.join(".saheeli/verify-2.log").exists());
}

#[test]
fn an_assessor_answering_limited_stops_at_the_first_attempt_through_the_cli() {
    require_docker();
    let llm = llm(vec![LIMITED]);
    let s = openai(&llm);
    s.write("p.md", PROMPT);
    let out = s.run(&["run", "p.md", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = t["id"].as_str().unwrap();
    let t = s.expect_json(&["task", "status", id, "--json"], 0);
    assert_limited(&t, &llm);
    let text = s.expect(&["task", "status", id], 0);
    assert!(text.contains("limited"), "{text}");
}

#[test]
fn an_assessor_answering_limited_stops_at_the_first_attempt_through_the_api() {
    require_docker();
    let llm = llm(vec![LIMITED]);
    let s = openai(&llm);
    let w = WebServe::start(&s, "127.0.0.1:0", &["-j", "1"]);
    let r = post(
        &w.addr,
        "/api/tasks",
        json!({"prompt": PROMPT, "name": "limited.md"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.json()["id"].as_str().unwrap().to_string();
    let t = until_api(&w, &id, "ended", |t| t["state"] == "incomplete");
    assert_limited(&t, &llm);
}
