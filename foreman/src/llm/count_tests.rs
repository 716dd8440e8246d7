use serde_json::{Value, json};

use super::*;

fn map(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[test]
fn a_messages_count_keeps_only_what_is_input() {
    let body = map(json!({
        "model": "claude-x", "max_tokens": 900, "stream": true,
        "system": "Be brief.", "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "t", "input_schema": {}}], "metadata": {"user_id": "u"},
    }));
    let (path, count) = request(Api::Messages, &body).unwrap();
    assert_eq!(path, "/v1/messages/count_tokens");
    assert_eq!(
        count,
        json!({"model": "claude-x", "system": "Be brief.",
               "messages": [{"role": "user", "content": "hi"}],
               "tools": [{"name": "t", "input_schema": {}}]})
    );
}

#[test]
fn a_responses_count_keeps_only_what_is_input() {
    let body = map(json!({
        "model": "gpt-x", "max_output_tokens": 900, "stream": true, "store": false,
        "instructions": "Be brief.", "input": "hi", "include": ["reasoning.encrypted_content"],
    }));
    let (path, count) = request(Api::Responses, &body).unwrap();
    assert_eq!(path, "/responses/input_tokens");
    assert_eq!(
        count,
        json!({"model": "gpt-x", "instructions": "Be brief.", "input": "hi"})
    );
}

#[test]
fn a_chat_call_is_counted_as_the_same_conversation_in_the_responses_form() {
    let body = map(json!({
        "model": "gpt-x", "max_completion_tokens": 500,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "sh", "arguments": "{\"command\":\"ls\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
            {"role": "assistant", "content": "Done."},
        ],
        "tools": [{"type": "function", "function": {"name": "sh", "description": "run",
            "parameters": {"type": "object"}}}],
    }));
    let (path, count) = request(Api::Chat, &body).unwrap();
    assert_eq!(path, "/responses/input_tokens");
    assert_eq!(
        count,
        json!({
            "model": "gpt-x",
            "input": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "input_text", "text": "look"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]},
                {"type": "function_call", "call_id": "c1", "name": "sh",
                    "arguments": "{\"command\":\"ls\"}"},
                {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
                {"role": "assistant", "content": "Done."},
            ],
            "tools": [{"type": "function", "name": "sh", "description": "run",
                "parameters": {"type": "object"}}],
        })
    );
}

#[test]
fn a_chat_call_with_no_responses_counterpart_is_not_counted() {
    for m in [
        json!({"role": "function", "name": "f", "content": "x"}),
        json!({"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}),
        json!({"role": "tool", "content": "no id"}),
    ] {
        let body = map(json!({"model": "gpt-x", "messages": [m]}));
        assert_eq!(request(Api::Chat, &body), None, "{body:?}");
    }
}

#[test]
fn the_margin_is_a_tenth_and_the_framing() {
    assert_eq!(margin(0), 64);
    assert_eq!(margin(1150), 1150 + 115 + 64);
    assert_eq!(margin(u64::MAX), u64::MAX);
}
