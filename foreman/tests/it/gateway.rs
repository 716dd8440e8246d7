//! The LLM gateway on real containers: both wire formats, retries,
//! failures that are not retried, budgets, live accounting, redaction.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use saheeli_protocol::{AuditEvent, Session};
use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::lifecycle::wait_for;
use crate::util::{Saheeli, leftovers, require_docker};

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

fn openai(llm: &FakeLlm) -> Saheeli {
    Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test-gateway-000")
        .env("OPENAI_BASE_URL", &llm.base_url())
}

#[test]
fn anthropic_task_completes_through_translation() {
    require_docker();
    let llm = FakeLlm::start(vec![
        Reply::Tools(
            vec![(
                "create_file".into(),
                json!({"path": "a.txt", "content": "A"}),
            )],
            (50, 5),
        ),
        Reply::Tools(
            vec![("task_complete".into(), json!({"message": "done"}))],
            (60, 6),
        ),
    ]);
    let s = Saheeli::new()
        .env("ANTHROPIC_API_KEY", "sk-ant-test-111")
        .env("ANTHROPIC_BASE_URL", &llm.anthropic_url());
    s.write(
        "p.md",
        "---\nmodel: claude-test-1\n---\nWrite A to a.txt.\n",
    );
    let t = run_json(&s, "p.md", 0);
    assert_eq!(t["state"], "complete");
    assert_eq!(t["input_tokens"], 110);
    assert_eq!(t["output_tokens"], 11);
    let results = Path::new(t["results"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(results.join("a.txt")).unwrap(), "A");
    let seen = llm.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|s| s.path == "/v1/messages"));
    assert_eq!(seen[0].api_key.as_deref(), Some("sk-ant-test-111"));
    assert_eq!(seen[0].authorization, None);
    let second = &seen[1].body;
    assert_eq!(second["model"], "claude-test-1");
    // The system prompt is one text block with a cache breakpoint (issue 26).
    assert!(
        second["system"][0]["text"]
            .as_str()
            .unwrap()
            .contains("/workspace")
    );
    assert_eq!(second["system"][0]["cache_control"]["type"], "ephemeral");
    let roles: Vec<_> = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].clone())
        .collect();
    assert_eq!(roles, vec!["user", "assistant", "user"]);
    assert_eq!(second["messages"][1]["content"][1]["type"], "tool_use");
    assert_eq!(second["messages"][2]["content"][0]["type"], "tool_result");
    assert!(second["tools"][0]["input_schema"].is_object());
}

#[test]
fn transient_failures_are_retried_honouring_retry_after() {
    require_docker();
    // An HTTP date 4 s after the answer (whole seconds, so 3 to 4 s): the
    // gateway must wait a good part of it.
    let llm = FakeLlm::start(vec![
        Reply::ErrorUntil(503, Duration::from_secs(4)),
        Reply::Error(500, Some("0".into())),
        Reply::Truncated,
        Reply::tool("execute_shell", json!({"command": "true"})),
        Reply::Unusable((40, 4)),
        Reply::Malformed,
        Reply::tool("task_complete", json!({"message": "made it"})),
    ]);
    let s = openai(&llm);
    s.write("p.md", "---\nmodel: gpt-test\n---\nPersist.\n");
    let t = run_json(&s, "p.md", 0);
    assert_eq!(t["state"], "complete");
    let seen = llm.seen();
    assert_eq!(seen.len(), 7);
    // The HTTP-date Retry-After was honoured.
    assert!(
        seen[1].at - seen[0].at >= Duration::from_secs(2),
        "{:?}",
        seen[1].at - seen[0].at
    );
    // Billed but unusable responses count; the model was told and went on.
    assert_eq!(t["input_tokens"], 100 + 40 + 100);
    let results = Path::new(t["results"].as_str().unwrap());
    let id = t["id"].as_str().unwrap();
    let session: Session = serde_json::from_slice(
        &std::fs::read(results.join(format!("servo-{id}-session.json"))).unwrap(),
    )
    .unwrap();
    let told = session
        .messages
        .iter()
        .filter(|m| {
            m.content
                .as_deref()
                .is_some_and(|c| c.contains("could not be used"))
        })
        .count();
    assert_eq!(told, 2, "one error turn per unusable response");
}

#[test]
fn rejected_key_and_bad_request_are_not_retried() {
    require_docker();
    for (status, reason) in [(401, "auth"), (403, "auth"), (400, "bad_request")] {
        let llm = FakeLlm::start(vec![
            Reply::Error(status, None),
            Reply::tool("task_complete", json!({"message": "x"})),
        ]);
        let s = openai(&llm);
        s.write("p.md", "---\nmodel: gpt-test\n---\nAnything.\n");
        let t = run_json(&s, "p.md", 1);
        assert_eq!(t["state"], "incomplete", "{status}");
        assert_eq!(t["reason"], reason, "{status}");
        assert_eq!(llm.seen_count(), 1, "{status} is not retried");
    }
}

#[test]
fn token_budget_is_enforced_before_the_call() {
    require_docker();
    let step = || {
        Reply::Tools(
            vec![("execute_shell".into(), json!({"command": "true"}))],
            (600, 20),
        )
    };
    let llm = FakeLlm::start(vec![step(); 12]);
    let s = openai(&llm);
    s.write(
        "p.md",
        // Room for the servo's first request (about 3.7 KB, reserved at
        // one token per byte) and a few more (each reserved at what the
        // one before was billed plus the bytes it adds: issue 47).
        "---\nmodel: gpt-test\nmax_tokens: 6000\n---\nLoop.\n",
    );
    let t = run_json(&s, "p.md", 1);
    assert_eq!(t["state"], "incomplete");
    assert_eq!(t["reason"], "budget");
    let calls = llm.seen_count();
    assert!((1..12).contains(&calls), "{calls} calls went upstream");
    assert_eq!(t["tokens"], 620 * calls as u64);
    assert!(t["tokens"].as_u64().unwrap() <= 6000);
    // The servo wrote its session and said why it stopped.
    let results = Path::new(t["results"].as_str().unwrap());
    let id = t["id"].as_str().unwrap();
    assert!(results.join(format!("servo-{id}-session.json")).is_file());
    let audit = std::fs::read_to_string(results.join(format!("servo-{id}-audit.log"))).unwrap();
    let last: AuditEvent = serde_json::from_str(audit.lines().last().unwrap()).unwrap();
    assert!(
        matches!(last, AuditEvent::Finish { ref outcome, .. } if outcome == "budget"),
        "{last:?}"
    );
    // The model was told what remained.
    assert!(
        audit.contains("budget")
            && std::fs::read_to_string(results.join(format!("servo-{id}-session.json")))
                .unwrap()
                .contains("tokens")
    );
}

#[test]
fn cost_budget_uses_the_price_table() {
    require_docker();
    let step = || {
        Reply::Tools(
            vec![("execute_shell".into(), json!({"command": "true"}))],
            (3000, 20),
        )
    };
    let llm = FakeLlm::start(vec![step(), step(), step()]);
    let s = Saheeli::with_config(
        // Output is cheap, so the first call can reserve room for an answer.
        "prices:\n  gpt-priced: { input_per_mtok: 1000, output_per_mtok: 100 }\n",
    )
    .env("OPENAI_API_KEY", "sk-test-gateway-000")
    .env("OPENAI_BASE_URL", &llm.base_url());
    s.write(
        "p.md",
        // The first request (about 3.7 KB, reserved at one token per
        // byte: $3.7) fits; after its $3.002 the second cannot.
        "---\nmodel: gpt-priced\nmax_cost: 5.0\n---\nLoop.\n",
    );
    let t = run_json(&s, "p.md", 1);
    assert_eq!(t["reason"], "budget");
    assert_eq!(llm.seen_count(), 1);
    assert!(
        (t["cost_usd"].as_f64().unwrap() - 3.002).abs() < 1e-9,
        "{}",
        t["cost_usd"]
    );

    // A cost budget without a price is refused at submit time.
    s.write(
        "q.md",
        "---\nmodel: gpt-unpriced\nmax_cost: 1.0\n---\nLoop.\n",
    );
    let out = s.run(&["task", "submit", "--prompt", "q.md"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("needs a price for model `gpt-unpriced`")
    );
}

#[test]
fn status_shows_tokens_while_the_task_runs() {
    require_docker();
    let llm = FakeLlm::start(vec![
        Reply::Tools(
            vec![("execute_shell".into(), json!({"command": "true"}))],
            (70, 7),
        ),
        Reply::Slow(
            Duration::from_secs(4),
            Box::new(Reply::tool("task_complete", json!({"message": "ok"}))),
        ),
    ]);
    let s = openai(&llm);
    s.write("p.md", "---\nmodel: gpt-test\n---\nSlowly.\n");
    let id = s.submit("p.md");
    let mut serve = s
        .cmd(&["serve", "--drain"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let live = wait_for(Duration::from_secs(30), || {
        let t = s.task(&id);
        t["state"] == "running" && t["tokens"] == 77
    });
    assert!(serve.wait().unwrap().success());
    assert!(live, "tokens were not visible while running");
    assert_eq!(s.task(&id)["tokens"], 77 + 120);
}

#[test]
fn a_key_that_reaches_the_workspace_is_redacted() {
    require_docker();
    let key = "sk-test-planted-5f3a9c2e71";
    let llm = FakeLlm::start(vec![
        Reply::tool(
            "create_file",
            json!({"path": "leak.txt", "content": format!("the key is {key}\n")}),
        ),
        Reply::tool("execute_shell", json!({"command": "cat leak.txt"})),
        Reply::tool("task_complete", json!({"message": "leaked"})),
    ]);
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", key)
        .env("OPENAI_BASE_URL", &llm.base_url());
    s.write("p.md", "---\nmodel: gpt-test\n---\nLeak.\n");
    let t = run_json(&s, "p.md", 0);
    let results = t["results"].as_str().unwrap();
    assert_eq!(
        std::fs::read_to_string(Path::new(results).join("leak.txt")).unwrap(),
        "the key is [REDACTED:OPENAI_API_KEY]\n"
    );
    let grep = std::process::Command::new("grep")
        .args(["-r", "-l", key, results])
        .output()
        .unwrap();
    assert!(
        grep.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&grep.stdout)
    );
    // The gateway already redacted the key in the completion that carried
    // it, so the agent never had it and collection found nothing left.
    let id = t["id"].as_str().unwrap();
    let db = std::fs::read(s.path().join("saheeli.db")).unwrap();
    assert!(!String::from_utf8_lossy(&db).contains(key));
    assert!(leftovers(id).is_empty());
}
