//! Translation between the OpenAI chat format (what servos speak) and
//! Anthropic Messages (`tool_use` / `tool_result` content blocks).

use saheeli_protocol::chat::{
    ChatMessage, ChatRequest, ChatResponse, ChatUsage, Choice, FunctionCall, Role, ToolCall,
};
use serde_json::{Value, json};

/// The Messages request for an OpenAI-style chat request.
pub(crate) fn request(req: &ChatRequest, model: &str, max_tokens: u64) -> Value {
    let mut system = Vec::new();
    // Anthropic wants user and assistant turns to alternate: consecutive
    // turns of one role (tool results, then a nudge) merge into one.
    let mut messages: Vec<(String, Vec<Value>)> = Vec::new();
    for m in &req.messages {
        let (role, blocks) = match m.role {
            Role::System => {
                system.extend(m.content.clone());
                continue;
            }
            Role::User => ("user", text_block(m.content.as_deref())),
            Role::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                    "content": m.content.clone().unwrap_or_default(),
                })],
            ),
            Role::Assistant => {
                let mut blocks = text_block(m.content.as_deref());
                for c in &m.tool_calls {
                    // Arguments the model sent as invalid JSON are passed as a string field.
                    let input = serde_json::from_str::<Value>(&c.function.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({ "_raw": c.function.arguments }));
                    blocks.push(json!({"type": "tool_use", "id": c.id, "name": c.function.name, "input": input}));
                }
                ("assistant", blocks)
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some((r, b)) if r == role => b.extend(blocks),
            _ => messages.push((role.to_string(), blocks)),
        }
    }
    let tools: Vec<Value> = req
        .tools
        .iter()
        .map(|t| {
            json!({
                "name": t.function.name,
                "description": t.function.description,
                "input_schema": t.function.parameters,
            })
        })
        .collect();
    let mut body = json!({
        "model": model,
        "max_tokens": max_tokens,
        "messages": messages
            .into_iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect::<Vec<_>>(),
    });
    if !system.is_empty() {
        body["system"] = json!(system.join("\n\n"));
    }
    if !tools.is_empty() {
        body["tools"] = json!(tools);
        // As `tool_choice: "auto"` on the OpenAI path (issue 27).
        body["tool_choice"] = json!({"type": "auto"});
    }
    body
}

fn text_block(text: Option<&str>) -> Vec<Value> {
    match text {
        Some(t) if !t.is_empty() => vec![json!({"type": "text", "text": t})],
        _ => vec![],
    }
}

/// Usage from an Anthropic body, even one that is otherwise unusable.
pub(crate) fn usage(v: &Value) -> Option<ChatUsage> {
    let u = v.get("usage")?;
    let input = u.get("input_tokens")?.as_u64()?;
    let output = u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0);
    Some(ChatUsage {
        prompt_tokens: input,
        completion_tokens: output,
        total_tokens: input + output,
    })
}

/// The OpenAI-style response for a Messages response.
pub(crate) fn response(v: &Value) -> Result<ChatResponse, String> {
    let content = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or("no `content` array")?;
    let mut text = Vec::new();
    let mut tool_calls = Vec::new();
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                text.extend(block.get("text").and_then(Value::as_str).map(String::from))
            }
            Some("tool_use") => {
                let id = block
                    .get("id")
                    .and_then(Value::as_str)
                    .ok_or("tool_use without `id`")?;
                let name = block
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or("tool_use without `name`")?;
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                tool_calls.push(ToolCall {
                    id: id.to_string(),
                    kind: "function".into(),
                    function: FunctionCall {
                        name: name.to_string(),
                        arguments: input.to_string(),
                    },
                });
            }
            _ => {} // thinking and other blocks are not part of the conversation we keep
        }
    }
    Ok(ChatResponse {
        id: v.get("id").and_then(Value::as_str).map(String::from),
        model: v.get("model").and_then(Value::as_str).map(String::from),
        choices: vec![Choice {
            index: 0,
            message: ChatMessage {
                role: Role::Assistant,
                content: (!text.is_empty()).then(|| text.join("\n")),
                tool_calls,
                tool_call_id: None,
            },
            // The OpenAI name for a reply cut at the cap, which the servo
            // tells the model about (issue 27).
            finish_reason: v
                .get("stop_reason")
                .and_then(Value::as_str)
                .map(|r| if r == "max_tokens" { "length" } else { r }.to_string()),
        }],
        usage: usage(v),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use saheeli_protocol::chat::{FunctionSpec, ToolSpec};

    #[test]
    fn conversation_translates_with_alternating_roles() {
        let req = ChatRequest {
            model: "claude-x".into(),
            messages: vec![
                ChatMessage::system("be good"),
                ChatMessage::user("do it"),
                ChatMessage {
                    role: Role::Assistant,
                    content: Some("ok".into()),
                    tool_calls: vec![
                        ToolCall {
                            id: "t1".into(),
                            kind: "function".into(),
                            function: FunctionCall {
                                name: "a".into(),
                                arguments: r#"{"x":1}"#.into(),
                            },
                        },
                        ToolCall {
                            id: "t2".into(),
                            kind: "function".into(),
                            function: FunctionCall {
                                name: "b".into(),
                                arguments: "{bad".into(),
                            },
                        },
                    ],
                    tool_call_id: None,
                },
                ChatMessage::tool_result("t1", "r1"),
                ChatMessage::tool_result("t2", "r2"),
                ChatMessage::user("go on"),
            ],
            tools: vec![ToolSpec {
                kind: "function".into(),
                function: FunctionSpec {
                    name: "a".into(),
                    description: "d".into(),
                    parameters: json!({"type": "object"}),
                },
            }],
            ..Default::default()
        };
        let body = request(&req, "claude-x", 100);
        assert_eq!(body["system"], "be good");
        assert_eq!(body["max_tokens"], 100);
        let msgs = body["messages"].as_array().unwrap();
        let roles: Vec<_> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "user"]);
        assert_eq!(msgs[1]["content"][1]["input"], json!({"x": 1}));
        assert_eq!(msgs[1]["content"][2]["input"], json!({"_raw": "{bad"}));
        let last = msgs[2]["content"].as_array().unwrap();
        assert_eq!(last[0]["type"], "tool_result");
        assert_eq!(last[1]["tool_use_id"], "t2");
        assert_eq!(last[2]["text"], "go on");
        assert_eq!(body["tools"][0]["input_schema"], json!({"type": "object"}));
    }

    #[test]
    fn response_translates_tool_use_and_usage() {
        let v = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "text", "text": "Let me check."},
                        {"type": "tool_use", "id": "toolu_1", "name": "execute_shell", "input": {"command": "ls"}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 30, "output_tokens": 7}
        });
        let r = response(&v).unwrap();
        let m = &r.choices[0].message;
        assert_eq!(m.content.as_deref(), Some("Let me check."));
        assert_eq!(m.tool_calls[0].function.arguments, r#"{"command":"ls"}"#);
        assert_eq!(r.usage.unwrap().total_tokens, 37);
        assert!(response(&json!({"usage": {"input_tokens": 1}})).is_err());
    }

    /// Issue 27 items 2, 3 and 5 on the Messages path: tools go with
    /// `tool_choice: {type: auto}`, a tool-call turn without text is its
    /// `tool_use` blocks only (an empty text block is refused), and a
    /// reply cut at `max_tokens` reaches the servo as `length`.
    #[test]
    fn local_server_shapes_on_the_messages_path() {
        let mut req: ChatRequest = serde_json::from_str(include_str!(
            "../../tests/fixtures/local-servers/servo-tool-turn-request.json"
        ))
        .unwrap();
        super::super::shape::conservative(&mut req);
        let body = request(&req, "smollm2", 64);
        assert_eq!(body["tool_choice"], json!({"type": "auto"}), "{body}");
        let turn = &body["messages"][1];
        assert_eq!(turn["role"], "assistant");
        let blocks = turn["content"].as_array().unwrap();
        assert_eq!(blocks.len(), 1, "{turn}");
        assert_eq!(blocks[0]["type"], "tool_use");
        let v: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/local-servers/anthropic-max-tokens-response.json"
        ))
        .unwrap();
        let r = response(&v).unwrap();
        assert_eq!(r.choices[0].finish_reason.as_deref(), Some("length"));
    }
}
