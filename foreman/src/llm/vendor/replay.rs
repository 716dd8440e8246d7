//! A `replay:` script answering a third-party agent (issue 25), so that
//! `agent: claude-code` or `agent: codex` runs offline with no key: the
//! gateway answers the agent's own API (Anthropic Messages, OpenAI Chat
//! Completions or Responses, whole or streamed) from the script instead of
//! a provider, and the call is then metered, recorded and relayed exactly
//! as a provider's answer is (`passthrough`).
//!
//! Which turn answers a request: the number of assistant turns that called
//! tools already in its conversation. An agent's side requests (a title, a
//! summary) and a retried request therefore get the turn their
//! conversation is at, not the next one in line, and the example
//! exchanges an agent puts in its prompt (aider's) are not counted. An
//! agent that never calls tools (aider edits in its text) is answered from
//! the first turn. A script with no turn left is answered with the API's
//! own error, naming the script's length.

use saheeli_protocol::{ReplayScript, ReplayTurn};
use serde_json::{Value, json};

use super::native::Api;

/// The provider's answer to one request, or the API error saying why not.
pub(crate) fn answer(
    api: Api,
    script: &ReplayScript,
    body: &[u8],
    streamed: bool,
) -> Result<reqwest::Response, String> {
    let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let n = turns_so_far(api, &request);
    let turn = script.turns.get(n).ok_or_else(|| {
        format!(
            "the replay script has no more turns: it has {}, and this request is turn {} \
             (add turns to the script, or end the agent's run with a turn without tool calls)",
            script.turns.len(),
            n + 1
        )
    })?;
    let model = request["model"].as_str().unwrap_or("replay");
    let usage = usage(turn, body.len());
    let a = Answer {
        n: n + 1,
        model,
        turn,
        usage,
        request: &request,
    };
    let (content_type, bytes) = match (api, streamed) {
        (Api::Messages, false) => ("application/json", a.messages().to_string()),
        (Api::Messages, true) => ("text/event-stream", a.messages_stream()),
        (Api::Chat, false) => ("application/json", a.chat().to_string()),
        (Api::Chat, true) => ("text/event-stream", a.chat_stream()),
        (Api::Responses, false) => ("application/json", a.response("completed").to_string()),
        (Api::Responses, true) => ("text/event-stream", a.responses_stream()),
    };
    let resp = axum::http::Response::builder()
        .status(200)
        .header(axum::http::header::CONTENT_TYPE, content_type)
        .body(bytes)
        .expect("a static status and header");
    Ok(reqwest::Response::from(resp))
}

/// How many assistant turns that called tools the request's conversation
/// holds (in the Responses API's flat `input`, a run of calls is one turn).
fn turns_so_far(api: Api, request: &Value) -> usize {
    match api {
        Api::Messages => count(&request["messages"], |m| {
            m["role"] == "assistant"
                && m["content"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_use"))
        }),
        Api::Chat => count(&request["messages"], |m| {
            m["role"] == "assistant" && m["tool_calls"].as_array().is_some_and(|c| !c.is_empty())
        }),
        Api::Responses => {
            let call = |item: &Value| {
                matches!(
                    item["type"].as_str(),
                    Some(
                        "function_call"
                            | "custom_tool_call"
                            | "local_shell_call"
                            | "tool_search_call"
                    )
                )
            };
            let mut runs = 0;
            let mut inside = false;
            for item in request["input"].as_array().into_iter().flatten() {
                let c = call(item);
                if c && !inside {
                    runs += 1;
                }
                // A turn's text or reasoning between its calls keeps it one.
                inside =
                    c || (inside && (item["role"] == "assistant" || item["type"] == "reasoning"));
            }
            runs
        }
    }
}

fn count(items: &Value, f: impl Fn(&Value) -> bool) -> usize {
    items
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| f(i))
        .count()
}

/// (input, output) tokens: the script's, else estimated from the sizes
/// (about four bytes a token) so that budgets and `max_steps` still act.
fn usage(turn: &ReplayTurn, request_bytes: usize) -> (u64, u64) {
    if let Some(u) = &turn.usage {
        return (u.input_tokens, u.output_tokens);
    }
    let out: usize = turn.content.as_deref().map_or(0, str::len)
        + turn
            .tool_calls
            .iter()
            .map(|c| c.name.len() + c.arguments_json().len())
            .sum::<usize>();
    ((request_bytes / 4) as u64 + 1, (out / 4) as u64 + 1)
}

/// One scripted turn, to be written in an API's format.
struct Answer<'a> {
    /// The turn's number in the script, from 1 (ids are made from it).
    n: usize,
    model: &'a str,
    turn: &'a ReplayTurn,
    usage: (u64, u64),
    request: &'a Value,
}

/// One server-sent event.
fn sse(event: Option<&str>, data: &Value) -> String {
    match event {
        Some(e) => format!("event: {e}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

impl Answer<'_> {
    fn text(&self) -> Option<&str> {
        self.turn.content.as_deref().filter(|t| !t.is_empty())
    }

    fn calls(&self) -> impl Iterator<Item = (usize, &str, String)> {
        self.turn
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| (i, c.name.as_str(), c.arguments_json()))
    }

    fn ends_turn(&self) -> bool {
        self.turn.tool_calls.is_empty()
    }

    /// A call's arguments as a JSON value (a string that is not JSON is
    /// kept as the script wrote it).
    fn input(args: &str) -> Value {
        serde_json::from_str(args).unwrap_or_else(|_| json!(args))
    }

    fn messages(&self) -> Value {
        let mut content: Vec<Value> = self
            .text()
            .map(|t| json!({"type": "text", "text": t}))
            .into_iter()
            .collect();
        content.extend(self.calls().map(|(i, name, args)| {
            json!({"type": "tool_use", "id": format!("toolu_replay_{}_{i}", self.n),
                   "name": name, "input": Self::input(&args)})
        }));
        json!({"id": format!("msg_replay_{}", self.n), "type": "message", "role": "assistant",
               "model": self.model, "content": content,
               "stop_reason": if self.ends_turn() { "end_turn" } else { "tool_use" },
               "stop_sequence": null,
               "usage": {"input_tokens": self.usage.0, "output_tokens": self.usage.1}})
    }

    fn messages_stream(&self) -> String {
        let mut start = self.messages();
        start["content"] = json!([]);
        start["stop_reason"] = Value::Null;
        start["usage"]["output_tokens"] = json!(1);
        let mut out = sse(
            Some("message_start"),
            &json!({"type": "message_start", "message": start}),
        );
        let whole = self.messages();
        for (index, block) in whole["content"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let (empty, delta) = if block["type"] == "text" {
                (
                    json!({"type": "text", "text": ""}),
                    json!({"type": "text_delta", "text": block["text"]}),
                )
            } else {
                let mut empty = block.clone();
                empty["input"] = json!({});
                (
                    empty,
                    json!({"type": "input_json_delta", "partial_json": block["input"].to_string()}),
                )
            };
            for (event, data) in [
                (
                    "content_block_start",
                    json!({"index": index, "content_block": empty}),
                ),
                (
                    "content_block_delta",
                    json!({"index": index, "delta": delta}),
                ),
                ("content_block_stop", json!({"index": index})),
            ] {
                let mut data = data;
                data["type"] = json!(event);
                out.push_str(&sse(Some(event), &data));
            }
        }
        out.push_str(&sse(
            Some("message_delta"),
            &json!({"type": "message_delta",
                    "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": null},
                    "usage": {"output_tokens": self.usage.1}}),
        ));
        out.push_str(&sse(Some("message_stop"), &json!({"type": "message_stop"})));
        out
    }

    fn tool_calls(&self) -> Vec<Value> {
        self.calls()
            .map(|(i, name, args)| {
                json!({"id": format!("call_replay_{}_{i}", self.n), "type": "function",
                       "function": {"name": name, "arguments": args}})
            })
            .collect()
    }

    fn finish(&self) -> &'static str {
        if self.ends_turn() {
            "stop"
        } else {
            "tool_calls"
        }
    }

    fn chat_usage(&self) -> Value {
        let (i, o) = self.usage;
        json!({"prompt_tokens": i, "completion_tokens": o, "total_tokens": i + o})
    }

    fn chat(&self) -> Value {
        let mut message = json!({"role": "assistant", "content": self.text().unwrap_or("")});
        if !self.ends_turn() {
            message["tool_calls"] = json!(self.tool_calls());
        }
        json!({"id": format!("chatcmpl-replay-{}", self.n), "object": "chat.completion",
               "created": 0, "model": self.model,
               "choices": [{"index": 0, "message": message, "finish_reason": self.finish()}],
               "usage": self.chat_usage()})
    }

    fn chat_stream(&self) -> String {
        let chunk = |choices: Value, usage: Value| {
            sse(
                None,
                &json!({"id": format!("chatcmpl-replay-{}", self.n),
                        "object": "chat.completion.chunk", "created": 0, "model": self.model,
                        "choices": choices, "usage": usage}),
            )
        };
        let delta =
            |d: Value, finish: Value| json!([{"index": 0, "delta": d, "finish_reason": finish}]);
        let mut out = chunk(
            delta(
                json!({"role": "assistant", "content": self.text().unwrap_or("")}),
                Value::Null,
            ),
            Value::Null,
        );
        for (i, call) in self.tool_calls().into_iter().enumerate() {
            let mut call = call;
            call["index"] = json!(i);
            out.push_str(&chunk(
                delta(json!({"tool_calls": [call]}), Value::Null),
                Value::Null,
            ));
        }
        out.push_str(&chunk(delta(json!({}), json!(self.finish())), Value::Null));
        out.push_str(&chunk(json!([]), self.chat_usage()));
        out.push_str("data: [DONE]\n\n");
        out
    }

    /// The Responses namespace offering a tool of this name, when no
    /// top-level tool has it (Codex groups an MCP server's tools so, and
    /// routes a call by its `namespace`).
    fn namespace_of(&self, name: &str) -> Option<&str> {
        let tools = self.request["tools"].as_array()?;
        if tools.iter().any(|t| t["name"] == name) {
            return None;
        }
        tools
            .iter()
            .filter(|t| t["type"] == "namespace")
            .find(|t| {
                t["tools"]
                    .as_array()
                    .is_some_and(|ts| ts.iter().any(|x| x["name"] == name))
            })
            .and_then(|t| t["name"].as_str())
    }

    fn response_items(&self) -> Vec<Value> {
        let mut items: Vec<Value> = self
            .text()
            .map(|t| {
                json!({"type": "message", "id": format!("msg_replay_{}", self.n),
                       "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": t, "annotations": []}]})
            })
            .into_iter()
            .collect();
        items.extend(self.calls().map(|(i, name, args)| {
            let mut call = json!({"type": "function_call",
                   "id": format!("fc_replay_{}_{i}", self.n),
                   "call_id": format!("call_replay_{}_{i}", self.n), "name": name,
                   "arguments": args, "status": "completed"});
            if let Some(ns) = self.namespace_of(name) {
                call["namespace"] = json!(ns);
            }
            call
        }));
        items
    }

    fn response(&self, status: &str) -> Value {
        let (i, o) = self.usage;
        let done = status == "completed";
        json!({"id": format!("resp_replay_{}", self.n), "object": "response", "created_at": 0,
               "status": status, "error": null, "incomplete_details": null, "model": self.model,
               "output": if done { self.response_items() } else { vec![] },
               "usage": if done {
                   json!({"input_tokens": i, "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens": o, "output_tokens_details": {"reasoning_tokens": 0},
                          "total_tokens": i + o})
               } else { Value::Null }})
    }

    fn responses_stream(&self) -> String {
        let mut seq = 0u64;
        let mut out = String::new();
        let mut ev = |name: &str, mut data: Value| {
            data["type"] = json!(name);
            data["sequence_number"] = json!(seq);
            seq += 1;
            out.push_str(&sse(Some(name), &data));
        };
        ev(
            "response.created",
            json!({"response": self.response("in_progress")}),
        );
        for (index, item) in self.response_items().into_iter().enumerate() {
            let id = item["id"].clone();
            let mut started = item.clone();
            started["status"] = json!("in_progress");
            if item["type"] == "function_call" {
                started["arguments"] = json!("");
                ev(
                    "response.output_item.added",
                    json!({"output_index": index, "item": started}),
                );
                ev(
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": index, "delta": item["arguments"]}),
                );
                ev(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": index, "arguments": item["arguments"]}),
                );
            } else {
                started["content"] = json!([]);
                let part = &item["content"][0];
                ev(
                    "response.output_item.added",
                    json!({"output_index": index, "item": started}),
                );
                ev(
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                           "part": {"type": "output_text", "text": "", "annotations": []}}),
                );
                ev(
                    "response.output_text.delta",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                           "delta": part["text"], "logprobs": []}),
                );
                ev(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                           "text": part["text"], "logprobs": []}),
                );
                ev(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                           "part": part}),
                );
            }
            ev(
                "response.output_item.done",
                json!({"output_index": index, "item": item}),
            );
        }
        ev(
            "response.completed",
            json!({"response": self.response("completed")}),
        );
        out
    }
}

#[cfg(test)]
#[path = "replay_tests.rs"]
mod tests;
