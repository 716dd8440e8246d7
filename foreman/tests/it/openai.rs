//! The OpenAI-compatible path: servo → gateway (unix socket) → fake LLM.

use std::path::Path;
use std::time::Duration;

use saheeli_protocol::{Completion, Session};
use serde_json::json;

use crate::fake_llm::{FakeLlm, Reply};
use crate::util::{Saheeli, leftovers, require_docker};

#[test]
fn tool_calls_through_the_gateway_with_a_429_on_the_way() {
    require_docker();
    let llm = FakeLlm::start(vec![
        Reply::Error(429, Some("1".into())),
        Reply::tool(
            "create_file",
            json!({"path": "answer.txt", "content": "42\n"}),
        ),
        Reply::Tools(
            vec![("execute_shell".into(), json!({"command": "cat answer.txt"}))],
            (150, 10),
        ),
        Reply::tool("task_complete", json!({"message": "wrote the answer"})),
    ]);
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", &llm.base_url());
    s.write(
        "p.md",
        "---\nmodel: gpt-test\nmax_steps: 10\n---\nWrite the answer to answer.txt.\n",
    );
    let t = s.expect_json(&["run", "p.md", "--json"], 0);
    assert_eq!(t["state"], "complete");
    let id = t["id"].as_str().unwrap();
    let results = Path::new(t["results"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(results.join("answer.txt")).unwrap(),
        "42\n"
    );

    // 4 requests: the 429 was retried after its Retry-After.
    let seen = llm.seen();
    assert_eq!(seen.len(), 4);
    assert!(
        seen[1].at - seen[0].at >= Duration::from_millis(950),
        "{:?}",
        seen[1].at - seen[0].at
    );
    // The real wire format: model, tools, and the conversation so far.
    let first = &seen[0].body;
    assert_eq!(first["model"], "gpt-test");
    let tools: Vec<_> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].clone())
        .collect();
    for name in [
        "execute_shell",
        "create_file",
        "read_file",
        "edit_file",
        "list_files",
        "task_complete",
    ] {
        assert!(
            tools.contains(&json!(name)),
            "{name} missing from {tools:?}"
        );
    }
    let last = &seen[3].body["messages"];
    let tool_msg = last
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert!(
        tool_msg["content"].as_str().unwrap().contains("42"),
        "{tool_msg}"
    );

    // Usage is counted from the responses.
    let c: Completion =
        serde_json::from_slice(&std::fs::read(results.join("complete.json")).unwrap()).unwrap();
    assert_eq!(c.usage.input_tokens, 100 + 150 + 100);
    assert_eq!(c.usage.output_tokens, 20 + 10 + 20);
    assert_eq!(t["tokens"], 400);
    let session: Session = serde_json::from_slice(
        &std::fs::read(results.join(format!("servo-{id}-session.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(session.steps, 3);
    assert!(leftovers(id).is_empty());
}

#[test]
fn an_unreachable_provider_ends_the_task_incomplete() {
    require_docker();
    // Nothing listens on this port: every attempt fails to connect.
    let s = Saheeli::with_config("llm:\n  max_attempts: 2\n")
        .env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1");
    s.write("p.md", "---\nmodel: gpt-test\n---\nAnything.\n");
    let t = s.expect_json(&["run", "p.md", "--json"], 1);
    assert_eq!(t["state"], "incomplete");
    assert_eq!(t["reason"], "llm_error");
}
