//! Translation between the OpenAI chat format (what servos speak) and
//! Anthropic Messages (`tool_use` / `tool_result` content blocks).
//!
//! # Prompt caching (issue 26)
//!
//! The breakpoints are placed here, in the gateway, not in the servo: the
//! servo speaks OpenAI's format, which has no `cache_control`; only the
//! gateway knows the provider; and placing them where the request is built
//! makes them right by construction for every servo version. Anthropic
//! renders tools, then system, then messages, and allows four breakpoints:
//!
//! 1. the last tool (the tools never change within a task),
//! 2. the system prompt,
//! 3. the last block of the newest message (what the next call reads), and
//! 4. the last block of the message that ended the previous call (what
//!    this call reads, found even when one step added more than the 20
//!    blocks Anthropic looks back over).
//!
//! The servo's conversation is append-only (its per-call note is written
//! once onto the newest message and never rewritten), so each request's
//! messages begin with the previous request's, byte for byte; a compaction
//! rewrites older turns on purpose, and the cache is written again once.

use saheeli_protocol::chat::{
    ChatMessage, ChatRequest, ChatResponse, ChatUsage, Choice, FunctionCall, Role, ToolCall,
};
use saheeli_protocol::context::Cache;
use serde_json::{Value, json};

/// The `anthropic-beta` value a `1h` cache needs.
pub(crate) const EXTENDED_TTL_BETA: &str = "extended-cache-ttl-2025-04-11";

/// The `cache_control` of a breakpoint, None when caching is off.
fn cache_control(cache: Cache) -> Option<Value> {
    match cache {
        Cache::FiveMinutes => Some(json!({"type": "ephemeral"})),
        Cache::OneHour => Some(json!({"type": "ephemeral", "ttl": "1h"})),
        Cache::Off => None,
    }
}

/// Marks the last block of `message` (a `{"role", "content": [..]}`).
fn mark_last_block(message: &mut Value, cc: &Value) {
    if let Some(block) = message
        .get_mut("content")
        .and_then(Value::as_array_mut)
        .and_then(|b| b.last_mut())
    {
        block["cache_control"] = cc.clone();
    }
}

/// The Messages request for an OpenAI-style chat request, with cache
/// breakpoints for `cache`.
pub(crate) fn request(req: &ChatRequest, model: &str, max_tokens: u64, cache: Cache) -> Value {
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
    let mut tools = tools;
    let mut messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let cc = cache_control(cache);
    if let Some(cc) = &cc {
        if let Some(last) = tools.last_mut() {
            last["cache_control"] = cc.clone();
        }
        // The newest message, and the user message before the newest
        // assistant turn: where the previous call ended.
        let n = messages.len();
        if let Some(last) = messages.last_mut() {
            mark_last_block(last, cc);
        }
        let previous = (0..n.saturating_sub(1))
            .rev()
            .skip_while(|&i| messages[i]["role"] != "assistant")
            .find(|&i| messages[i]["role"] == "user");
        if let Some(i) = previous {
            mark_last_block(&mut messages[i], cc);
        }
    }
    let mut body = json!({
        "model": model,
        "max_tokens": max_tokens,
        "messages": messages,
    });
    if !system.is_empty() {
        let text = system.join("\n\n");
        body["system"] = match &cc {
            Some(cc) => json!([{"type": "text", "text": text, "cache_control": cc}]),
            None => json!(text),
        };
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
    super::usage::of_body(crate::config::ProviderKind::Anthropic, v)
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
            // Anthropic returns none.
            logprobs: None,
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
        let body = request(&req, "claude-x", 100, Cache::Off);
        assert_eq!(body["system"], "be good");
        assert!(body.to_string().find("cache_control").is_none());
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

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            kind: "function".into(),
            function: FunctionCall {
                name: "read_file".into(),
                arguments: "{}".into(),
            },
        }
    }

    /// Issue 26: breakpoints on the tools, the system prompt, the newest
    /// message and the message that ended the previous call; four at most;
    /// the 1h lifetime when asked; none when off.
    #[test]
    fn cache_breakpoints_sit_where_the_prefix_ends() {
        let turn = |id: &str| ChatMessage {
            role: Role::Assistant,
            content: None,
            tool_calls: vec![call(id)],
            tool_call_id: None,
        };
        let req = ChatRequest {
            messages: vec![
                ChatMessage::system("rules"),
                ChatMessage::user("task"),
                turn("a"),
                ChatMessage::tool_result("a", "out a"),
                turn("b"),
                ChatMessage::tool_result("b", "out b"),
                ChatMessage::user("[saheeli] Remaining: 3 steps"),
            ],
            tools: vec![
                ToolSpec {
                    kind: "function".into(),
                    function: FunctionSpec {
                        name: "read_file".into(),
                        description: "d".into(),
                        parameters: json!({"type": "object"}),
                    },
                };
                2
            ],
            ..Default::default()
        };
        let body = request(&req, "claude-x", 100, Cache::FiveMinutes);
        let text = body.to_string();
        assert_eq!(text.matches("cache_control").count(), 4, "{body:#}");
        assert!(body["tools"][0].get("cache_control").is_none());
        assert_eq!(
            body["tools"][1]["cache_control"],
            json!({"type": "ephemeral"})
        );
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        let msgs = body["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 5);
        // The newest user turn: its tool result and the note, marked last.
        let newest = msgs[4]["content"].as_array().unwrap();
        assert!(newest[0].get("cache_control").is_none());
        assert_eq!(newest[1]["cache_control"]["type"], "ephemeral");
        // Where the previous call ended: the tool result of step one.
        assert_eq!(msgs[2]["content"][0]["type"], "tool_result");
        assert_eq!(msgs[2]["content"][0]["cache_control"]["type"], "ephemeral");
        let hour = request(&req, "claude-x", 100, Cache::OneHour);
        assert_eq!(hour["tools"][1]["cache_control"]["ttl"], "1h");
        assert_eq!(hour.to_string().matches(r#""ttl":"1h""#).count(), 4);
        // The first call: tools, system and the prompt only.
        let first = ChatRequest {
            messages: req.messages[..2].to_vec(),
            ..req.clone()
        };
        let body = request(&first, "claude-x", 100, Cache::FiveMinutes);
        assert_eq!(body.to_string().matches("cache_control").count(), 3);
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
        let mut req: ChatRequest = serde_json::from_value(crate::llm::recorded::sent(
            "llama-server",
            "tool-turn-content-null.json",
        ))
        .unwrap();
        crate::llm::shape::conservative(&mut req);
        let body = request(&req, "smollm2", 64, Cache::Off);
        assert_eq!(body["tool_choice"], json!({"type": "auto"}), "{body}");
        let turn = &body["messages"][1];
        assert_eq!(turn["role"], "assistant");
        let blocks = turn["content"].as_array().unwrap();
        assert_eq!(blocks.len(), 1, "{turn}");
        assert_eq!(blocks[0]["type"], "tool_use");
        // llama-server's `/v1/messages` answer cut at `max_tokens`.
        let v = crate::llm::recorded::answer("llama-server", "messages-max-tokens.json");
        assert_eq!(v["stop_reason"], "max_tokens", "{v}");
        let r = response(&v).unwrap();
        assert_eq!(r.choices[0].finish_reason.as_deref(), Some("length"));
    }
}
