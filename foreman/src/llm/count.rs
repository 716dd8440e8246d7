//! The provider's own count of a call's input, asked only when the bound
//! without a tokenizer (`input_bound`) would refuse the call (issue 47).
//! A first call has no earlier count to build on, so it is bounded by its
//! bytes, about four times its tokens: a task of `max_tokens: 2000` was
//! refused its first call of 4.6 KB. Anthropic counts a Messages request
//! at `/v1/messages/count_tokens`, OpenAI a Responses request at
//! `/v1/responses/input_tokens`; a Chat Completions request is counted
//! as the same conversation in the Responses form. Neither costs tokens.
//!
//! The provider calls its count an estimate, and a conversation moved to
//! the Responses form is framed a little differently, so the call is
//! reserved at the count plus [`margin`]. A provider without the endpoint
//! (a local server), an error, a slow or oversized answer: the byte bound
//! stands and the call is refused as before.

use std::time::Duration;

use axum::http::header;
use futures_util::StreamExt;
use serde_json::{Map, Value, json};
use tracing::info;

use super::GatewayState;
use super::meter::Grant;
use crate::config::ProviderKind;
use crate::llm::api::Api;

/// How long the count may take: it stands before a call the task waits on.
const PATIENCE: Duration = Duration::from_secs(10);

/// The most bytes of a count's answer read (`{"input_tokens": N}`).
const ANSWER_CAP: usize = 64 * 1024;

/// What a call is reserved at for a provider's count of `count`: a tenth
/// more, and 64 tokens for the framing of a moved conversation.
pub(crate) fn margin(count: u64) -> u64 {
    count.saturating_add(count / 10).saturating_add(64)
}

/// Fields a Messages count accepts that bear on the input.
const MESSAGES_FIELDS: &[&str] = &[
    "model",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "thinking",
];

/// Fields a Responses count accepts that bear on the input.
const RESPONSES_FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning",
    "text",
    "truncation",
    "conversation",
    "previous_response_id",
];

/// The count request for a call of `api` with `body`: the path after the
/// provider's base URL, and the body. None when the call cannot be put
/// in a form the provider counts.
pub(crate) fn request(api: Api, body: &Map<String, Value>) -> Option<(&'static str, Value)> {
    let keep = |fields: &[&str], body: &Map<String, Value>| -> Value {
        Value::Object(
            body.iter()
                .filter(|(k, _)| fields.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
    };
    match api {
        Api::Messages => Some(("/v1/messages/count_tokens", keep(MESSAGES_FIELDS, body))),
        Api::Responses => Some(("/responses/input_tokens", keep(RESPONSES_FIELDS, body))),
        Api::Chat => Some(("/responses/input_tokens", chat_as_responses(body)?)),
    }
}

/// A Chat Completions request as the same conversation in the Responses
/// form: messages become input items (a tool call and its result items of
/// their own), function tools lose their wrapper. None for anything with
/// no counterpart (audio, a legacy `function` message).
fn chat_as_responses(body: &Map<String, Value>) -> Option<Value> {
    let mut input = Vec::new();
    for m in body.get("messages")?.as_array()? {
        let role = m.get("role")?.as_str()?;
        match role {
            "tool" => input.push(json!({
                "type": "function_call_output",
                "call_id": m.get("tool_call_id")?.as_str()?,
                "output": text_of(m.get("content")?)?,
            })),
            "system" | "developer" | "user" | "assistant" => {
                let content = m.get("content").unwrap_or(&Value::Null);
                if !content.is_null() {
                    input.push(json!({"role": role, "content": parts(role, content)?}));
                }
                for call in m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let f = call.get("function")?;
                    input.push(json!({
                        "type": "function_call",
                        "call_id": call.get("id")?.as_str()?,
                        "name": f.get("name")?.as_str()?,
                        "arguments": f.get("arguments")?.as_str()?,
                    }));
                }
            }
            _ => return None,
        }
    }
    let mut out = Map::new();
    out.insert("model".into(), body.get("model")?.clone());
    out.insert("input".into(), Value::Array(input));
    if let Some(tools) = body.get("tools").and_then(Value::as_array) {
        let tools = tools
            .iter()
            .map(|t| {
                let f = t.get("function")?;
                let mut tool = f.as_object()?.clone();
                tool.insert("type".into(), json!("function"));
                Some(Value::Object(tool))
            })
            .collect::<Option<Vec<_>>>()?;
        out.insert("tools".into(), Value::Array(tools));
    }
    Some(Value::Object(out))
}

/// A message's content in the Responses form: a string stays one; text
/// and image parts get the Responses part types.
fn parts(role: &str, content: &Value) -> Option<Value> {
    let text_type = if role == "assistant" {
        "output_text"
    } else {
        "input_text"
    };
    match content {
        Value::String(_) => Some(content.clone()),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p.get("type")?.as_str()? {
                "text" | "refusal" => Some(json!({
                    "type": text_type,
                    "text": p.get("text").or_else(|| p.get("refusal"))?.as_str()?,
                })),
                "image_url" => Some(json!({
                    "type": "input_image",
                    "image_url": p.get("image_url")?.get("url")?.as_str()?,
                })),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .map(Value::Array),
        _ => None,
    }
}

/// A tool result's text: a string, or its text parts joined.
fn text_of(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => parts
            .iter()
            .map(|p| p.get("text")?.as_str().map(String::from))
            .collect::<Option<Vec<_>>>()
            .map(|t| t.join("")),
        _ => None,
    }
}

/// The provider's count of the input of a call of `api` with `body`, with
/// the task's key; None when it gives none (see the module's note).
pub(crate) async fn provider_count(
    gw: &GatewayState,
    api: Api,
    body: &Map<String, Value>,
) -> Option<u64> {
    if gw.replay.is_some() || gw.route.model.starts_with("replay:") {
        return None;
    }
    let provider = &gw.route.provider;
    let (path, count_body) = request(api, body)?;
    let mut req = gw
        .upstream
        .client
        .post(format!("{}{path}", provider.base_url))
        .timeout(PATIENCE)
        .header(header::CONTENT_TYPE, "application/json")
        .body(count_body.to_string());
    req = crate::llm::probe::with_key(req, provider);
    if provider.kind == ProviderKind::Anthropic {
        req = req.header("anthropic-version", "2023-06-01");
    }
    let resp = req.send().await.ok()?;
    if !resp.status().is_success() {
        info!(task_id = %gw.task_id, status = resp.status().as_u16(), "the provider gave no input count");
        return None;
    }
    let mut bytes = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.ok()?;
        if bytes.len() + chunk.len() > ANSWER_CAP {
            return None;
        }
        bytes.extend_from_slice(&chunk);
    }
    let answer: Value = serde_json::from_slice(&bytes).ok()?;
    answer.get("input_tokens")?.as_u64()
}

/// Reserves a call sending at most `input` tokens (`input_bound`) and
/// asking for `want` out; when the budget refuses it at that bound, asks
/// the provider's count and, when that with its [`margin`] is lower,
/// reserves it at that.
pub(crate) async fn reserve(
    gw: &GatewayState,
    api: Api,
    body: &Map<String, Value>,
    input: u64,
    want: u64,
) -> Result<Grant, String> {
    let refused = match gw.meter.reserve(&gw.budget, gw.rates, input, Some(want)) {
        Ok(grant) => return Ok(grant),
        Err(why) => why,
    };
    match provider_count(gw, api, body).await.map(margin) {
        Some(counted) if counted < input => {
            info!(task_id = %gw.task_id, bound = input, counted, "reserved at the provider's count");
            gw.meter
                .reserve(&gw.budget, gw.rates, counted, Some(want))
                .map_err(|why| {
                    format!(
                        "{why} (the provider counts this call's input at {counted} with its margin)"
                    )
                })
        }
        _ => Err(refused),
    }
}

#[cfg(test)]
#[path = "count_tests.rs"]
mod tests;
