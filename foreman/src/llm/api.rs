//! What the LLM side and the vendors' APIs share: the wire format of a
//! route ([`Api`]: its path, its provider, its output field, its error
//! bodies) and the model a task's agent may name ([`TaskModel`]).

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
    pub(crate) fn output_field(self, body: &Map<String, Value>) -> &'static str {
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
