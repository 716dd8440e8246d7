use serde_json::{Value, json};

use super::atif;
use crate::store::TaskRow;

fn row(model: &str) -> TaskRow {
    let d = tempfile::tempdir().unwrap();
    let mut spec = crate::store::tests::spec("t");
    spec.model = model.into();
    let mut store = crate::store::Store::open(&d.path().join("db")).unwrap();
    let id = saheeli_protocol::TaskId::new();
    store.submit(id, &spec, 0, None, 1).unwrap();
    store.get(&id.to_string()).unwrap().unwrap()
}

fn session() -> String {
    json!({"task_id": "x", "seal": "abc", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": "looking", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "execute_shell", "arguments": "{\"command\":\"ls\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": "not json"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "file text"},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c3", "type": "function", "function": {"name": "task_complete", "arguments": "{}"}}]}
    ]})
    .to_string()
}

fn audit() -> String {
    [
        json!({"event": "llm_call", "ts": "2026-01-02T03:04:05Z", "step": 1, "model": "m", "latency_ms": 5,
               "usage": {"input_tokens": 100, "output_tokens": 7, "cache_read_tokens": 40}}),
        json!({"event": "llm_call", "ts": "2026-01-02T03:04:06Z", "step": 2, "model": "m", "latency_ms": 5,
               "usage": {"input_tokens": 0, "output_tokens": 0}, "error": "502"}),
        json!({"event": "llm_call", "ts": "2026-01-02T03:04:07Z", "step": 2, "model": "m", "latency_ms": 5,
               "usage": {"input_tokens": 120, "output_tokens": 3}}),
    ]
    .iter()
    .map(Value::to_string)
    .collect::<Vec<_>>()
    .join("\n")
}

#[test]
fn a_session_becomes_atif_with_each_calls_tokens_and_its_results() {
    let t = atif::from_session(&row("gpt-4o"), &session(), &audit(), "").unwrap();
    assert_eq!(t["schema_version"], "ATIF-v1.8");
    assert_eq!(t["agent"]["model_name"], "gpt-4o");
    let steps = t["steps"].as_array().unwrap();
    let sources: Vec<&str> = steps
        .iter()
        .map(|s| s["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["system", "user", "agent", "agent"]);
    assert_eq!(steps[3]["step_id"], 4);
    let first = &steps[2];
    assert_eq!(first["timestamp"], "2026-01-02T03:04:05Z");
    assert_eq!(
        first["metrics"],
        json!({"prompt_tokens": 100, "completion_tokens": 7, "cached_tokens": 40})
    );
    assert_eq!(
        first["tool_calls"][0]["arguments"],
        json!({"command": "ls"})
    );
    assert_eq!(
        first["tool_calls"][1]["arguments"],
        json!({"input": "not json"})
    );
    let results = first["observation"]["results"].as_array().unwrap();
    assert_eq!(
        results[0],
        json!({"source_call_id": "c2", "content": "file text"})
    );
    assert_eq!(
        results[1],
        json!({"source_call_id": "c1", "content": "a.py"})
    );
    // The failed call is not a turn: the second turn has the third call's tokens.
    assert_eq!(steps[3]["metrics"]["prompt_tokens"], 120);
    assert_eq!(steps[3]["message"], "");
    assert_eq!(t["final_metrics"]["total_prompt_tokens"], 220);
    assert_eq!(t["final_metrics"]["total_steps"], 4);
    // No gateway lines: no logprobs.
    assert!(!t.to_string().contains("logprobs"));
}

/// The gateway's lines of the same calls (`llm::record`): the failed one
/// (`ended`) is not a turn, as in the audit log.
#[test]
fn each_agent_step_carries_the_logprobs_its_call_returned() {
    let gateway = [
        json!({"call_id": "a", "api": "chat", "ended": null, "logprobs": [-0.25, -1.5]}),
        json!({"call_id": "b", "api": "chat", "ended": "HTTP 502"}),
        json!({"call_id": "c", "api": "chat", "ended": null, "logprobs": [-0.125]}),
    ]
    .iter()
    .map(Value::to_string)
    .collect::<Vec<_>>()
    .join("\n");
    let t = atif::from_session(&row("gpt-4o"), &session(), &audit(), &gateway).unwrap();
    let steps = t["steps"].as_array().unwrap();
    assert_eq!(steps[2]["metrics"]["logprobs"], json!([-0.25, -1.5]));
    assert_eq!(steps[2]["metrics"]["completion_tokens"], 7);
    assert_eq!(steps[3]["metrics"]["logprobs"], json!([-0.125]));
    assert_eq!(
        atif::rollout_logprobs(&t),
        Some(vec![json!([-0.25, -1.5]), json!([-0.125])])
    );
    // A call that returned none: its step has no `logprobs`.
    let gateway = json!({"call_id": "a", "api": "chat", "ended": null}).to_string();
    let t = atif::from_session(&row("gpt-4o"), &session(), &audit(), &gateway).unwrap();
    assert!(t["steps"][2]["metrics"].get("logprobs").is_none(), "{t}");
    assert_eq!(atif::rollout_logprobs(&t), None);
}

#[test]
fn a_replayed_session_says_no_model_was_called() {
    let t = atif::from_session(&row("replay:oracle"), &session(), &audit(), "").unwrap();
    let agent: Vec<&Value> = t["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["source"] == "agent")
        .collect();
    assert!(
        agent
            .iter()
            .all(|s| s["llm_call_count"] == 0 && s.get("metrics").is_none())
    );
    assert!(t["agent"].get("model_name").is_none());
    assert!(t["final_metrics"].get("total_prompt_tokens").is_none());
}

#[test]
fn no_session_no_trajectory() {
    assert!(atif::from_session(&row("m"), "{\"messages\": []}", "", "").is_none());
    assert!(atif::from_session(&row("m"), "not json", "", "").is_none());
}
