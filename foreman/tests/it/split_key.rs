//! Issue 47 (hostile N10, N11): a provider's streamed text carries the key
//! split between events (the fake streams text five characters an event).
//! Redacted event by event, the agent put the key back together and
//! `task trajectory` printed it; now the relay redacts across events and
//! the export redacts what it reassembles.

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::gateway_guard::{hold, holding, release};
use crate::gateway_native::post;
use crate::human::{Serve, until};
use crate::util::{Saheeli, require_docker};

const KEY: &str = "sk-ant-split-0123456789abcdef";

/// The text an agent puts together from a Messages stream.
fn streamed_text(body: &str) -> String {
    body.split("\n\n")
        .filter_map(|b| b.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|v| v["delta"]["type"] == "text_delta")
        .map(|v| v["delta"]["text"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn a_key_split_between_stream_events_reaches_neither_agent_nor_export() {
    require_docker();
    let llm = FakeLlm::start_matching(vec![], |body| {
        if body.to_string().contains("SPLIT-KEY") {
            return Some(Reply::Text(
                format!("the key is {KEY}, said twice: {KEY}!"),
                (300, 12),
            ));
        }
        let servo_calls = body["messages"].as_array().map_or(0, Vec::len);
        Some(if servo_calls <= 2 {
            Reply::tool("execute_shell", hold("go"))
        } else {
            Reply::tool("task_complete", json!({"message": "done"}))
        })
    });
    let s = Saheeli::new()
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", &llm.anthropic_url());
    s.write("p.md", "---\nmodel: claude-test\n---\nGo.\n");
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let sock = holding(&s, &id, &serve, "go");
    let req = json!({"model": "claude-test", "max_tokens": 1000, "stream": true,
                     "messages": [{"role": "user", "content": "SPLIT-KEY"}]});
    let headers = [
        ("x-api-key", "placeholder"),
        ("anthropic-version", "2023-06-01"),
    ];
    let a = post(&sock, "/v1/messages", &headers, &req);
    assert_eq!(a.status, 200, "{}", a.body);
    let text = streamed_text(&a.body);
    assert!(
        !text.contains(KEY),
        "the agent put the key together: {text}"
    );
    assert_eq!(
        text,
        "the key is [REDACTED:ANTHROPIC_API_KEY], said twice: [REDACTED:ANTHROPIC_API_KEY]!"
    );
    release(&id, "go");
    until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    for format in ["atif", "openai"] {
        let out = s.expect(&["task", "trajectory", &id, "--format", format], 0);
        assert!(!out.contains(KEY), "{format}: {out}");
        assert!(
            out.contains("[REDACTED:ANTHROPIC_API_KEY]"),
            "{format}: {out}"
        );
    }

    // A record written before the relay redacted across events (its
    // events each redacted alone) is redacted when exported.
    let dir = s.path().join(".saheeli/trajectories");
    let file = dir.join(format!("{id}.jsonl"));
    let events: String = ["the key is ", &KEY[..9], &KEY[9..], "."]
        .iter()
        .map(|p| {
            format!(
                "event: content_block_delta\ndata: {}\n\n",
                json!({"type": "content_block_delta", "index": 0,
                       "delta": {"type": "text_delta", "text": p}})
            )
        })
        .collect();
    let line = json!({"call_id": "old", "api": "messages", "at_ms": 1, "streamed": true,
                      "request": req, "response": events,
                      "usage": {"input_tokens": 1, "output_tokens": 1}});
    std::fs::write(&file, format!("{line}\n")).unwrap();
    for format in ["atif", "openai"] {
        let out = s.expect(&["task", "trajectory", &id, "--format", format], 0);
        assert!(!out.contains(KEY), "{format}: {out}");
    }
}
