//! The fake LLM's answers in each API's own format, whole and streamed
//! (server-sent events), as the vendors send them: Anthropic Messages
//! (`message_start`, `content_block_*` with `text_delta` and
//! `input_json_delta`, `message_delta` with usage, `message_stop`), OpenAI
//! Chat Completions chunks (tool calls in pieces, a usage chunk only when
//! `stream_options.include_usage` asks for it, `[DONE]`) and OpenAI
//! Responses (`response.created` … `response.completed` with usage).
//! Each turn bills exactly the usage it reports.

use serde_json::{Value, json};

/// One scripted assistant turn.
pub struct Turn<'a> {
    /// The request's number at the fake (ids are made from it).
    pub n: usize,
    pub model: &'a str,
    pub text: Option<&'a str>,
    pub calls: &'a [(String, Value)],
    /// (input, output) tokens billed.
    pub usage: (u64, u64),
}

/// One server-sent event: `event:` (when named) and `data:` lines.
pub fn sse(event: Option<&str>, data: &Value) -> String {
    match event {
        Some(e) => format!("event: {e}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

/// `s` in pieces of at most `size` characters (tool arguments arrive so).
fn pieces(s: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// Anthropic Messages, streamed.
pub fn anthropic(t: &Turn) -> Vec<String> {
    let (input, output) = t.usage;
    let mut out = vec![sse(
        Some("message_start"),
        &json!({"type": "message_start", "message": {
            "id": format!("msg_{}", t.n), "type": "message", "role": "assistant",
            "model": t.model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input, "output_tokens": 1}}}),
    )];
    out.push(sse(Some("ping"), &json!({"type": "ping"})));
    let mut index = 0;
    if let Some(text) = t.text {
        out.push(sse(
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "text", "text": ""}}),
        ));
        for p in pieces(text, 5) {
            out.push(sse(
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": p}}),
            ));
        }
        out.push(sse(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for (i, (name, args)) in t.calls.iter().enumerate() {
        out.push(sse(
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": format!("toolu_{}_{i}", t.n),
                                      "name": name, "input": {}}}),
        ));
        let mut parts = vec![String::new()];
        parts.extend(pieces(&args.to_string(), 7));
        for p in parts {
            out.push(sse(
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": p}}),
            ));
        }
        out.push(sse(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    let stop = if t.calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    out.push(sse(
        Some("message_delta"),
        &json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                "usage": {"output_tokens": output}}),
    ));
    out.push(sse(Some("message_stop"), &json!({"type": "message_stop"})));
    out
}

/// Anthropic Messages, whole.
pub fn anthropic_body(t: &Turn) -> Value {
    let mut content: Vec<Value> = t
        .text
        .map(|text| json!({"type": "text", "text": text}))
        .into_iter()
        .collect();
    content.extend(t.calls.iter().enumerate().map(|(i, (name, args))| {
        json!({"type": "tool_use", "id": format!("toolu_{}_{i}", t.n), "name": name, "input": args})
    }));
    let stop = if t.calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    json!({"id": format!("msg_{}", t.n), "type": "message", "role": "assistant",
           "model": t.model, "content": content, "stop_reason": stop, "stop_sequence": null,
           "usage": {"input_tokens": t.usage.0, "output_tokens": t.usage.1}})
}

/// The log probability the fake gives the `i`th piece of a turn's text
/// (each piece one token): made from its place, so a test can name it.
pub fn logprob(i: usize) -> f64 {
    -((i + 1) as f64) / 8.0
}

/// The tokens of a turn's text as OpenAI's `logprobs.content` entries.
pub fn token_logprobs(text: &str) -> Vec<Value> {
    pieces(text, 5)
        .iter()
        .enumerate()
        .map(|(i, p)| {
            json!({"token": p, "logprob": logprob(i), "bytes": p.as_bytes(), "top_logprobs": []})
        })
        .collect()
}

/// OpenAI Chat Completions, streamed; the usage chunk only when asked, and
/// each text chunk's `logprobs` when the request asked (`logprobs: true`).
pub fn chat(t: &Turn, include_usage: bool, logprobs: bool) -> Vec<String> {
    let chunk = |delta: Value, finish: Value, lp: Value| {
        sse(
            None,
            &json!({"id": format!("chatcmpl-{}", t.n), "object": "chat.completion.chunk",
                    "created": 0, "model": t.model,
                    "choices": [{"index": 0, "delta": delta, "logprobs": lp,
                                 "finish_reason": finish}]}),
        )
    };
    let chunk2 = |delta: Value, finish: Value| chunk(delta, finish, Value::Null);
    let mut out = vec![chunk2(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    if let Some(text) = t.text {
        for (p, e) in pieces(text, 5).into_iter().zip(token_logprobs(text)) {
            let lp = if logprobs {
                json!({"content": [e], "refusal": null})
            } else {
                Value::Null
            };
            out.push(chunk(json!({"content": p}), Value::Null, lp));
        }
    }
    for (i, (name, args)) in t.calls.iter().enumerate() {
        out.push(chunk2(
            json!({"tool_calls": [{"index": i, "id": format!("call_{}_{i}", t.n), "type": "function",
                                   "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
        ));
        for p in pieces(&args.to_string(), 7) {
            out.push(chunk2(
                json!({"tool_calls": [{"index": i, "function": {"arguments": p}}]}),
                Value::Null,
            ));
        }
    }
    let finish = if t.calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    out.push(chunk2(json!({}), json!(finish)));
    if include_usage {
        let (i, o) = t.usage;
        out.push(sse(
            None,
            &json!({"id": format!("chatcmpl-{}", t.n), "object": "chat.completion.chunk",
                    "created": 0, "model": t.model, "choices": [],
                    "usage": {"prompt_tokens": i, "completion_tokens": o, "total_tokens": i + o}}),
        ));
    }
    out.push("data: [DONE]\n\n".into());
    out
}

/// The Responses API's output items for a turn.
fn response_items(t: &Turn) -> Vec<Value> {
    let mut items = Vec::new();
    if let Some(text) = t.text {
        items.push(
            json!({"type": "message", "id": format!("msg_{}", t.n), "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}),
        );
    }
    for (i, (name, args)) in t.calls.iter().enumerate() {
        // Codex's `tool_search` (a `tool_search` tool, run by the client)
        // is called with an item of its own, its arguments an object.
        if name == "tool_search" {
            items.push(
                json!({"type": "tool_search_call", "id": format!("ts_{}_{i}", t.n),
                "call_id": format!("call_{}_{i}", t.n), "execution": "client",
                "arguments": args, "status": "completed"}),
            );
            continue;
        }
        items.push(
            json!({"type": "function_call", "id": format!("fc_{}_{i}", t.n),
            "call_id": format!("call_{}_{i}", t.n), "name": name,
            "arguments": args.to_string(), "status": "completed"}),
        );
    }
    items
}

/// A whole Responses API object with `status` and `output`.
pub fn response_object(t: &Turn, status: &str, output: Vec<Value>) -> Value {
    let (i, o) = t.usage;
    let usage = (status == "completed").then(|| {
        json!({"input_tokens": i, "input_tokens_details": {"cached_tokens": 0},
               "output_tokens": o, "output_tokens_details": {"reasoning_tokens": 0},
               "total_tokens": i + o})
    });
    json!({"id": format!("resp_{}", t.n), "object": "response", "created_at": 0,
           "status": status, "error": null, "incomplete_details": null, "instructions": null,
           "metadata": {}, "model": t.model, "output": output, "parallel_tool_calls": true,
           "temperature": null, "tool_choice": "auto", "tools": [], "top_p": null,
           "usage": usage})
}

/// The Responses API, whole.
pub fn responses_body(t: &Turn) -> Value {
    response_object(t, "completed", response_items(t))
}

/// The Responses API, streamed.
pub fn responses(t: &Turn) -> Vec<String> {
    let mut seq = 0u64;
    let mut ev = |name: &str, mut data: Value| {
        data["type"] = json!(name);
        data["sequence_number"] = json!(seq);
        seq += 1;
        sse(Some(name), &data)
    };
    let mut out = vec![
        ev(
            "response.created",
            json!({"response": response_object(t, "in_progress", vec![])}),
        ),
        ev(
            "response.in_progress",
            json!({"response": response_object(t, "in_progress", vec![])}),
        ),
    ];
    for (index, item) in response_items(t).into_iter().enumerate() {
        let id = item["id"].clone();
        let mut started = item.clone();
        started["status"] = json!("in_progress");
        if item["type"] == "tool_search_call" {
            out.push(ev(
                "response.output_item.added",
                json!({"output_index": index, "item": started}),
            ));
        } else if item["type"] == "function_call" {
            started["arguments"] = json!("");
            out.push(ev(
                "response.output_item.added",
                json!({"output_index": index, "item": started}),
            ));
            let args = item["arguments"].as_str().unwrap().to_string();
            for p in pieces(&args, 7) {
                out.push(ev(
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": index, "delta": p}),
                ));
            }
            out.push(ev(
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": index, "arguments": args}),
            ));
        } else {
            started["content"] = json!([]);
            out.push(ev(
                "response.output_item.added",
                json!({"output_index": index, "item": started}),
            ));
            let part = json!({"type": "output_text", "text": "", "annotations": []});
            out.push(ev(
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
            ));
            let text = item["content"][0]["text"].as_str().unwrap().to_string();
            for p in pieces(&text, 5) {
                out.push(ev(
                    "response.output_text.delta",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                           "delta": p, "logprobs": []}),
                ));
            }
            out.push(ev(
                "response.output_text.done",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                       "text": text, "logprobs": []}),
            ));
            out.push(ev(
                "response.content_part.done",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                       "part": item["content"][0]}),
            ));
        }
        out.push(ev(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        ));
    }
    out.push(ev(
        "response.completed",
        json!({"response": responses_body(t)}),
    ));
    out
}

/// A streamed event whose usage is what a caching provider billed: the
/// usage chunk (OpenAI) or `message_start`'s (Anthropic).
pub fn with_usage(event: &str, usage: &Value) -> String {
    let Some((head, data)) = event.trim_end().rsplit_once("data: ") else {
        return event.to_string();
    };
    let Ok(mut v) = serde_json::from_str::<Value>(data) else {
        return event.to_string();
    };
    if v["type"] == "message_start" {
        v["message"]["usage"] = usage.clone();
    } else if v.get("usage").is_some_and(|u| !u.is_null()) && v["type"] != "message_delta" {
        v["usage"] = usage.clone();
    } else {
        return event.to_string();
    }
    format!("{head}data: {v}\n\n")
}

/// A stream whose events after the text wait for `gate` (`Reply::Held`).
pub fn held_stream(
    events: Vec<String>,
    gate: std::sync::Arc<tokio::sync::Notify>,
) -> axum::response::Response {
    use futures_util::StreamExt;
    let text_end = events
        .iter()
        .rposition(|e| e.contains("text_delta") || e.contains("\"delta\":{\"content\":\""))
        .map_or(0, |i| i + 1);
    let rest = events[text_end..].to_vec();
    let first: Vec<Result<axum::body::Bytes, std::io::Error>> = events[..text_end]
        .iter()
        .map(|e| Ok(axum::body::Bytes::from(e.clone())))
        .collect();
    let wait = futures_util::stream::once(async move {
        gate.notified().await;
        futures_util::stream::iter(rest.into_iter().map(|e| Ok(axum::body::Bytes::from(e))))
    })
    .flatten();
    let body = axum::body::Body::from_stream(futures_util::stream::iter(first).chain(wait));
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::OK,
        [
            ("content-type", "text/event-stream"),
            ("cache-control", "no-cache"),
        ],
        body,
    )
        .into_response()
}
