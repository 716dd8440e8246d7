//! The vendors' own APIs on the task socket, for third-party agents
//! (issue 25): Anthropic Messages (`/v1/messages`, and its
//! `count_tokens`), OpenAI Chat Completions streamed, OpenAI Responses.
//!
//! A request is passed through as the agent wrote it, after [`vet`]:
//! another model than the task's refused, the fields that would spend outside the
//! meter refused (server-side tools that bill on their own, stored
//! conversations whose input the request does not carry, background runs,
//! several choices), the output capped to what the budget leaves and, for
//! a streamed chat, usage asked for. The agent's headers are dropped but
//! for the caching ones (`anthropic-beta`, `anthropic-version`); its
//! placeholder key never leaves the gateway. Errors are answered in the
//! API's own format so that the agent's SDK understands them.

use serde_json::{Map, Value, json};

use crate::config::ProviderKind;

/// The wire format of one route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Api {
    /// Anthropic Messages.
    Messages,
    /// OpenAI Chat Completions.
    Chat,
    /// OpenAI Responses.
    Responses,
}

impl Api {
    /// The route on the task socket.
    pub fn path(self) -> &'static str {
        match self {
            Api::Messages => "/v1/messages",
            Api::Chat => "/v1/chat/completions",
            Api::Responses => "/v1/responses",
        }
    }

    /// Its name in a trajectory line.
    pub fn name(self) -> &'static str {
        match self {
            Api::Messages => "messages",
            Api::Chat => "chat",
            Api::Responses => "responses",
        }
    }

    /// Whether a provider of this kind speaks the API.
    pub fn served_by(self, kind: ProviderKind) -> bool {
        match self {
            Api::Messages => kind == ProviderKind::Anthropic,
            Api::Chat | Api::Responses => kind == ProviderKind::Openai,
        }
    }

    /// The provider's URL for this API (`base_url` has no trailing slash;
    /// an OpenAI one ends in `/v1`, an Anthropic one does not).
    pub fn endpoint(self, base_url: &str) -> String {
        match self {
            Api::Messages => format!("{base_url}/v1/messages"),
            Api::Chat => format!("{base_url}/chat/completions"),
            Api::Responses => format!("{base_url}/responses"),
        }
    }

    /// The request field capping the output.
    fn output_field(self, body: &Map<String, Value>) -> &'static str {
        match self {
            Api::Messages => "max_tokens",
            // Keep the field the caller used: newer models refuse the other.
            Api::Chat if body.contains_key("max_completion_tokens") => "max_completion_tokens",
            Api::Chat => "max_tokens",
            Api::Responses => "max_output_tokens",
        }
    }

    /// An error body in this API's format.
    pub fn error_body(self, kind: &str, message: &str) -> Value {
        match self {
            Api::Messages => json!({"type": "error", "error": {
                "type": anthropic_kind(kind), "message": message}}),
            Api::Chat | Api::Responses => json!({"error": {
                "message": message, "type": kind, "code": kind, "param": null}}),
        }
    }
}

/// Saheeli's refusal kinds as Anthropic's error types, which its SDK and
/// Claude Code know (neither retries these).
fn anthropic_kind(kind: &str) -> &'static str {
    use saheeli_protocol::chat::gateway_error as e;
    match kind {
        e::BUDGET => "billing_error",
        MAX_STEPS => "permission_error",
        e::AUTH => "authentication_error",
        NOT_FOUND => "not_found_error",
        e::UNAVAILABLE => "overloaded_error",
        e::MALFORMED => "api_error",
        _ => "invalid_request_error",
    }
}

/// A third-party agent made `max_steps` LLM calls.
pub(crate) const MAX_STEPS: &str = "max_steps";
/// A path or an API the task's provider does not speak.
pub(crate) const NOT_FOUND: &str = "not_found";

/// A request ready to forward once its output cap is known.
#[derive(Debug, PartialEq)]
pub(crate) struct Vetted {
    pub body: Map<String, Value>,
    pub stream: bool,
    /// The output cap the agent asked for, if any.
    pub asked: Option<u64>,
}

impl Vetted {
    /// The body with the output capped to `max`, as bytes to send.
    pub fn capped(mut self, api: Api, max: u64) -> Vec<u8> {
        let field = api.output_field(&self.body);
        self.body.insert(field.into(), json!(max));
        serde_json::to_vec(&self.body).expect("JSON values serialize")
    }
}

/// Top-level fields refused, per API, with why.
fn refused_field(api: Api, name: &str) -> Option<&'static str> {
    let why = match (api, name) {
        (Api::Messages, "mcp_servers") => "runs MCP servers at the provider, outside the task",
        (Api::Messages, "container") => "runs code at the provider, billed outside the meter",
        (_, "service_tier") => "changes the price outside the task's price table",
        (Api::Chat, "n" | "best_of") => "asks for several answers, outside the output cap",
        (Api::Chat, "audio" | "modalities" | "prediction") => {
            "bills other than text tokens, outside the meter"
        }
        (Api::Chat, "web_search_options") => "searches the web at the provider, billed apart",
        (Api::Responses, "previous_response_id" | "conversation" | "prompt") => {
            "sends input stored at the provider, which the request does not carry and the meter \
             cannot bound"
        }
        (Api::Responses, "background") => "runs the call after the request ends, unmetered",
        _ => return None,
    };
    Some(why)
}

/// Whether a tool of this `type` runs in the agent (allowed) rather than
/// at the provider, billed or reaching out on its own (refused).
fn client_tool(api: Api, kind: Option<&str>) -> bool {
    match (api, kind) {
        (_, None) => true,
        (Api::Messages, Some(k)) => {
            k == "custom"
                || ["bash_", "text_editor_", "computer_", "memory_"]
                    .iter()
                    .any(|p| k.starts_with(p))
        }
        (Api::Chat, Some(k)) => matches!(k, "function" | "custom"),
        (Api::Responses, Some(k)) => {
            matches!(
                k,
                "function" | "custom" | "local_shell" | "shell" | "apply_patch"
            )
        }
    }
}

/// The model a task's agent may name: the upstream model and the same
/// model as the prompt may write it (`provider/model`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TaskModel<'a> {
    pub provider: &'a str,
    pub model: &'a str,
}

impl TaskModel<'_> {
    /// Why a request naming another model (`named`, as the request wrote
    /// it; cut short when long) is refused.
    pub(crate) fn refusal(&self, named: &str) -> String {
        let named: String = named.chars().take(120).collect();
        let model = self.model;
        format!(
            "field `model` is {named}, but this task runs `{model}` (its prompt's `model:`); \
             the gateway serves no other model: name `{model}` or leave `model` out"
        )
    }

    /// Whether `named` (the request's `model`) is this one.
    pub(crate) fn is(&self, named: &str) -> bool {
        named == self.model
            || named
                .strip_prefix(self.provider)
                .and_then(|r| r.strip_prefix('/'))
                .is_some_and(|m| m == self.model)
    }
}

/// Checks a request for `api` from the container: another model than the
/// task's is refused (none named: the task's is used), and the upstream
/// name is what is sent. The error names the field and what to do.
pub(crate) fn vet(api: Api, body: &[u8], task: TaskModel<'_>) -> Result<Vetted, String> {
    let model = task.model;
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| format!("the body is not JSON for {}: {e}", api.path()))?;
    let Value::Object(mut body) = v else {
        return Err(format!("the body of {} must be a JSON object", api.path()));
    };
    match body.get("model") {
        None | Some(Value::Null) => {}
        Some(Value::String(named)) if task.is(named) => {}
        Some(named) => return Err(task.refusal(&named.to_string())),
    }
    for name in body.keys() {
        if let Some(why) = refused_field(api, name) {
            return Err(format!(
                "field `{name}` is refused by the gateway: it {why}; remove it"
            ));
        }
    }
    if let Some(tools) = body.get("tools") {
        let Some(tools) = tools.as_array() else {
            return Err("field `tools` must be an array".into());
        };
        for (i, t) in tools.iter().enumerate() {
            let kind = t.get("type").and_then(Value::as_str);
            // A Responses `namespace` groups tools (Codex's MCP servers'):
            // allowed when every tool in it is the agent's.
            let kind = match (api, kind) {
                (Api::Responses, Some("namespace")) => t
                    .get("tools")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|n| n.get("type").and_then(Value::as_str))
                    .find(|k| !client_tool(api, *k))
                    .unwrap_or(None),
                _ => kind,
            };
            if !client_tool(api, kind) {
                return Err(format!(
                    "tools[{i}] has type `{}`, a tool the provider runs itself (billed apart \
                     or reaching outside the task); only tools the agent runs are allowed",
                    kind.unwrap_or_default()
                ));
            }
        }
    }
    let stream = match body.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("field `stream` must be true or false".into()),
    };
    let field = api.output_field(&body);
    let asked = match body.get(field) {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or_else(|| format!("field `{field}` must be a positive integer"))?,
        ),
    };
    body.insert("model".into(), json!(model));
    if api == Api::Chat && stream {
        // Usage is what a stream is settled from: always asked for.
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(Vetted {
        body,
        stream,
        asked,
    })
}

/// A third-party agent's `max_steps` when its `calls` have reached it:
/// the next LLM call is refused (Saheeli's own loop has no such limit
/// here: it counts its steps itself).
pub(crate) fn steps_spent(budget: &crate::gateway::Budget, calls: u64) -> Option<u64> {
    budget.max_calls.filter(|max| calls >= *max)
}

/// Anthropic `count_tokens`, answered here without a call: the request's
/// bytes / 4, the usual estimate. Nothing is billed or forwarded.
pub(crate) fn count_tokens(body: &[u8]) -> Result<Value, String> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| format!("the body is not JSON for /v1/messages/count_tokens: {e}"))?;
    if !v.is_object() {
        return Err("the body of /v1/messages/count_tokens must be a JSON object".into());
    }
    Ok(json!({"input_tokens": (body.len() as u64).div_ceil(4)}))
}

/// `anthropic-version` as the agent sent it when it looks like one (a
/// date), else the version the gateway speaks.
pub(crate) fn anthropic_version(sent: Option<&str>) -> String {
    match sent {
        Some(v) if v.len() == 10 && v.bytes().all(|b| b.is_ascii_digit() || b == b'-') => {
            v.to_string()
        }
        _ => "2023-06-01".into(),
    }
}

/// `anthropic-beta` as the agent sent it (prompt caching and other
/// features are named there), when it is a plain comma-separated list.
pub(crate) fn anthropic_beta(sent: Option<&str>) -> Option<String> {
    let v = sent?;
    let plain = v.len() <= 1024
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.,: ".contains(&b));
    plain.then(|| v.to_string())
}

#[cfg(test)]
#[path = "native_tests.rs"]
mod tests;
