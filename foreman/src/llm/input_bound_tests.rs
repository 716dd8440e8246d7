use serde_json::{Value, json};

use super::*;

fn shape(v: Value) -> Shape {
    let bytes = serde_json::to_vec(&v).unwrap().len() as u64;
    Shape::of(v.as_object().unwrap(), bytes)
}

fn item_bytes(v: Value) -> u64 {
    serde_json::to_vec(&v).unwrap().len() as u64
}

fn chat(messages: Vec<Value>) -> Value {
    json!({"model": "m", "tools": [{"type": "function", "function": {"name": "bash"}}],
           "messages": messages, "max_tokens": 4096, "stream": true})
}

fn msg(role: &str, text: &str) -> Value {
    json!({"role": role, "content": text})
}

/// Every case: the bound for a request after an earlier counted call.
#[test]
fn the_bound_is_the_earlier_count_plus_what_is_new() {
    let sys = msg("system", &"You are careful. ".repeat(200));
    let u1 = msg("user", "fix the bug");
    let a1 = msg("assistant", "looking");
    let t1 = msg("tool", &"output line\n".repeat(50));
    let first = chat(vec![sys.clone(), u1.clone()]);
    let counted = |v: Value, tokens| Counted {
        shape: shape(v),
        tokens,
    };
    let earlier = [counted(first.clone(), 900)];
    // (what, request, expected bound)
    let extended = chat(vec![sys.clone(), u1.clone(), a1.clone(), t1.clone()]);
    let cases: Vec<(&str, Value, u64)> = vec![
        (
            "an extension: the count plus the new items' bytes",
            extended.clone(),
            900 + item_bytes(a1.clone()) + item_bytes(t1.clone()),
        ),
        ("the same request again: the count", first.clone(), 900),
        (
            "another output cap and no stream: still the count",
            json!({"model": "m", "tools": [{"type": "function", "function": {"name": "bash"}}],
                   "messages": [sys.clone(), u1.clone()], "max_tokens": 10}),
            900,
        ),
        (
            "the last item changed: it is counted again",
            chat(vec![sys.clone(), msg("user", "fix the other bug")]),
            900 + item_bytes(msg("user", "fix the other bug")),
        ),
        (
            "compacted (an item removed, one added): the count plus the new one",
            chat(vec![sys.clone(), msg("user", "summary")]),
            900 + item_bytes(msg("user", "summary")),
        ),
        (
            "other tools: not comparable, its bytes",
            json!({"model": "m", "messages": [sys.clone(), u1.clone()]}),
            shape(json!({"model": "m", "messages": [sys.clone(), u1.clone()]})).bytes,
        ),
        (
            "truncation by the provider: its bytes",
            json!({"model": "m", "tools": [{"type": "function", "function": {"name": "bash"}}],
                   "messages": [sys.clone(), u1.clone()], "truncation": "auto"}),
            shape(
                json!({"model": "m", "tools": [{"type": "function", "function": {"name": "bash"}}],
                   "messages": [sys.clone(), u1.clone()], "truncation": "auto"}),
            )
            .bytes,
        ),
        (
            "no conversation list: its bytes",
            json!({"model": "m", "input": "hello"}),
            shape(json!({"model": "m", "input": "hello"})).bytes,
        ),
    ];
    for (what, req, want) in cases {
        assert_eq!(bound(&shape(req), &earlier), want, "{what}");
    }
    // Never more than the bytes: an earlier count larger than them is no help.
    let big = [counted(first.clone(), 1 << 30)];
    assert_eq!(
        bound(&shape(extended.clone()), &big),
        shape(extended.clone()).bytes
    );
    // With no earlier call, the bytes.
    assert_eq!(bound(&shape(first.clone()), &[]), shape(first).bytes);
    // Of several earlier calls, the tightest.
    let two = [
        counted(chat(vec![sys.clone()]), 800),
        counted(chat(vec![sys.clone(), u1.clone(), a1.clone()]), 950),
    ];
    assert_eq!(
        bound(&shape(extended), &two),
        (800 + item_bytes(u1) + item_bytes(a1) + item_bytes(t1.clone())).min(950 + item_bytes(t1))
    );
}

/// Responses' `input` list and Anthropic's cache breakpoints: a
/// breakpoint moved to the newest item leaves the earlier ones the same.
#[test]
fn cache_breakpoints_and_responses_input_compare() {
    let a = json!({"role": "user", "content": [{"type": "text", "text": "hi",
                   "cache_control": {"type": "ephemeral"}}]});
    let a_plain = json!({"role": "user", "content": [{"type": "text", "text": "hi"}]});
    let b = json!({"role": "assistant", "content": [{"type": "text", "text": "yo",
                   "cache_control": {"type": "ephemeral"}}]});
    let old = json!({"model": "c", "system": "s", "messages": [a]});
    let new = json!({"model": "c", "system": "s", "messages": [a_plain, b.clone()]});
    let earlier = [Counted {
        shape: shape(old),
        tokens: 40,
    }];
    assert_eq!(bound(&shape(new), &earlier), 40 + item_bytes(b));
    let r_old =
        json!({"model": "o", "instructions": "x", "input": [{"role": "user", "content": "q"}]});
    let out = json!({"type": "function_call_output", "call_id": "c1", "output": "done"});
    let r_new = json!({"model": "o", "instructions": "x",
                       "input": [{"role": "user", "content": "q"}, out.clone()]});
    let earlier = [Counted {
        shape: shape(r_old),
        tokens: 30,
    }];
    assert_eq!(bound(&shape(r_new), &earlier), 30 + item_bytes(out));
    // A stored previous response is input the request does not carry.
    let stored = json!({"model": "o", "previous_response_id": "r1", "input": []});
    assert_eq!(bound(&shape(stored.clone()), &earlier), shape(stored).bytes);
}

/// The servo's typed chats keep their items between calls: the shape is
/// the same as `Shape::of` of the body sent, as the conversation grows, as
/// a message in it changes, and after a compaction.
#[test]
fn a_typed_chat_has_the_shape_of_its_body() {
    use saheeli_protocol::chat::{ChatMessage, ChatRequest};
    let typed = |messages: Vec<ChatMessage>| ChatRequest {
        model: "m".into(),
        messages,
        tools: vec![saheeli_protocol::chat::ToolSpec {
            kind: "function".into(),
            function: saheeli_protocol::chat::FunctionSpec {
                name: "bash".into(),
                description: "Runs a command.".into(),
                parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
            },
        }],
        max_tokens: Some(4096),
        tool_choice: Some("auto".into()),
        prompt_cache_key: Some("task".into()),
        ..Default::default()
    };
    let items = ChatItems::default();
    let check = |req: &mut ChatRequest| {
        let body = serde_json::to_vec(&*req).unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        let want = Shape::of(v.as_object().unwrap(), body.len() as u64);
        assert!(want.rest.is_some());
        assert_eq!(items.shape(req, body.len() as u64), want);
    };
    let mut conversation = vec![
        ChatMessage::system("You are careful."),
        ChatMessage::user("fix the bug"),
    ];
    check(&mut typed(conversation.clone()));
    for i in 0..5 {
        let mut turn = ChatMessage::user(format!("step {i}"));
        turn.role = saheeli_protocol::chat::Role::Assistant;
        conversation.push(turn);
        conversation.push(ChatMessage::tool_result(format!("c{i}"), "ok"));
        check(&mut typed(conversation.clone()));
    }
    // An earlier message changed: it and what follows are digested anew.
    conversation[3].content = Some("another".into());
    check(&mut typed(conversation.clone()));
    // Compacted: shorter.
    conversation.truncate(2);
    conversation.push(ChatMessage::user("summary"));
    check(&mut typed(conversation.clone()));
    // Another head (the tools): its own digest, the same items.
    let mut other = typed(conversation.clone());
    other.tools.clear();
    other.tool_choice = None;
    check(&mut other);
}
