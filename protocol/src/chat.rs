//! The OpenAI-compatible chat-completions wire format.
//!
//! The servo speaks it to the foreman's gateway; the gateway forwards it to
//! any OpenAI-compatible upstream. Only the fields Saheeli uses are modelled;
//! unknown fields in responses are ignored.

use serde::{Deserialize, Serialize};

/// `POST /v1/chat/completions` body. Unknown fields are dropped when it is
/// parsed: the gateway forwards only what this type holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Output token limit (the older OpenAI name, which most compatible
    /// servers understand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Output token limit (the newer OpenAI name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u64>,
    /// Server-sent events; the gateway refuses it (it meters whole answers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// `"auto"` whenever tools are offered: the gateway sets it, since
    /// llama-cpp-python reads a missing one as "none" and drops the tools
    /// from the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<String>,
    /// Number of choices; the gateway never forwards it (one choice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    /// OpenAI's prompt-cache routing key: the gateway sets it to the task's
    /// id (issue 26), so one task's calls land where its prefix is cached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache_key: Option<String>,
    /// The answer's per-token log probabilities (`choices[].logprobs`):
    /// the gateway asks for them for a task with `logprobs: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    /// OpenAI allows null content on assistant turns that only call tools.
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    pub fn system(text: impl Into<String>) -> Self {
        Self::text(Role::System, text)
    }

    pub fn is_assistant(&self) -> bool {
        self.role == Role::Assistant
    }

    pub fn user(text: impl Into<String>) -> Self {
        Self::text(Role::User, text)
    }

    pub fn tool_result(call_id: impl Into<String>, text: impl Into<String>) -> Self {
        ChatMessage {
            role: Role::Tool,
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.into()),
        }
    }

    fn text(role: Role, text: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".to_string()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// A JSON document as a string, exactly as OpenAI sends it. It may be
    /// invalid JSON: the servo reports that to the model.
    pub arguments: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionSpec,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// The response of a chat completion.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    pub choices: Vec<Choice>,
    #[serde(default)]
    pub usage: Option<ChatUsage>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    #[serde(default)]
    pub index: u32,
    pub message: ChatMessage,
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// The answer's per-token log probabilities, when the request asked
    /// (`logprobs: true`) and the provider returned them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<ChoiceLogprobs>,
}

/// OpenAI's `choices[].logprobs`: one entry per token of the text (the
/// alternatives and bytes it also sends are not kept).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChoiceLogprobs {
    #[serde(default)]
    pub content: Option<Vec<TokenLogprob>>,
}

/// One token and its log probability.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f64,
}

/// What one call used. `prompt_tokens` counts every input token the
/// provider processed, cached ones included (Anthropic reports those apart
/// from `input_tokens`; the gateway adds them in); `cache_read_tokens` and
/// `cache_write_tokens` are the parts of it read from and written to the
/// provider's prompt cache (issue 26). The gateway fills them from each
/// provider's own usage shape; an upstream OpenAI body never has them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatUsage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The `error.type` values the foreman's gateway answers with, so the
/// servo can tell a spent budget from a broken key.
pub mod gateway_error {
    /// The task's token or cost budget would be exceeded (HTTP 402).
    pub const BUDGET: &str = "budget_exceeded";
    /// The provider refused the key (HTTP 401/403); not retried.
    pub const AUTH: &str = "auth";
    /// The provider refused the request (HTTP 400/404/422); not retried.
    pub const BAD_REQUEST: &str = "bad_request";
    /// The provider answered, but not with a usable completion (HTTP 502).
    /// The servo reports it to the model and carries on.
    pub const MALFORMED: &str = "malformed_response";
    /// Retries are used up: rate limits, 5xx, resets, timeouts (HTTP 503).
    pub const UNAVAILABLE: &str = "upstream_unavailable";
    /// The request did not fit the model's context window (HTTP 400): the
    /// servo compacts its conversation and asks again (issue 26).
    pub const CONTEXT_LENGTH: &str = "context_length_exceeded";
    /// The provider's rate limit held the call longer than the servo waits
    /// for one answer (HTTP 429 with Retry-After): the servo asks again
    /// (issue 26); a rate limit never ends a task on its own.
    pub const RATE_LIMITED: &str = "rate_limited";
    /// The servo asked its call to look at the inbox first
    /// ([`INBOX_AFTER`](crate::human::INBOX_AFTER)) and the inbox has
    /// messages or a pause for it (HTTP 409, the
    /// [`Inbox`](crate::human::Inbox) under `inbox`): nothing was sent to
    /// any provider; the servo takes them and asks again.
    pub const INBOX: &str = "saheeli_inbox";
}

/// The OpenAI error envelope: `{"error": {"message": …, "type": …}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_openai_tool_call_response() {
        let body = r#"{
          "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini",
          "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null, "refusal": null,
              "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "execute_shell", "arguments": "{\"command\":\"ls\"}"}}]}}],
          "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
        }"#;
        let r: ChatResponse = serde_json::from_str(body).unwrap();
        let m = &r.choices[0].message;
        assert_eq!(m.role, Role::Assistant);
        assert_eq!(m.content, None);
        assert_eq!(m.tool_calls[0].function.name, "execute_shell");
        assert_eq!(r.usage.unwrap().total_tokens, 17);
    }

    #[test]
    fn tool_result_serializes_with_call_id() {
        let m = ChatMessage::tool_result("call_1", "ok");
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["role"], "tool");
        assert_eq!(v["tool_call_id"], "call_1");
        assert!(v.get("tool_calls").is_none());
    }
}
