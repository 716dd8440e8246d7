//! OpenAI chat completions through the foreman's gateway (a unix socket in
//! a container; plain HTTP in tests). No key: the gateway adds it.

use std::time::{Duration, Instant};

use saheeli_protocol::Usage;
use saheeli_protocol::chat::{ChatMessage, ChatResponse, ToolSpec, gateway_error};
use serde::Serialize;

use super::retry::{self, MAX_ATTEMPTS};
use super::{LlmError, Turn};

pub(crate) struct Gateway {
    http: reqwest::Client,
    url: String,
}

/// The request body, borrowing the conversation instead of copying it.
#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    messages: &'a [ChatMessage],
    tools: &'a [ToolSpec],
}

impl Gateway {
    /// `unix:/path/to.sock` or `http://host:port`.
    pub fn new(address: &str) -> Result<Gateway, String> {
        let builder = reqwest::Client::builder()
            .timeout(Duration::from_secs(600))
            .connect_timeout(Duration::from_secs(10));
        let (builder, base) = match address.strip_prefix("unix:") {
            Some(path) => (
                builder.unix_socket(path.to_string()),
                "http://gateway".to_string(),
            ),
            None => (builder, address.trim_end_matches('/').to_string()),
        };
        let http = builder
            .build()
            .map_err(|e| format!("building the HTTP client: {e}"))?;
        Ok(Gateway {
            http,
            url: format!("{base}/v1/chat/completions"),
        })
    }

    /// One completion. The gateway already retries what the provider
    /// failed; here only a gateway that cannot be reached (the foreman
    /// restarting) is retried.
    pub async fn complete(
        &mut self,
        model: &str,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
    ) -> Result<Turn, LlmError> {
        let body = serde_json::to_vec(&Request {
            model,
            messages,
            tools,
        })
        .map_err(|e| LlmError::Failed(format!("encoding the request: {e}")))?;
        let mut last_error = String::new();
        for attempt in 1..=MAX_ATTEMPTS {
            let started = Instant::now();
            let result = self
                .http
                .post(&self.url)
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await;
            match result {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let bytes = resp.bytes().await.unwrap_or_default();
                    if (200..300).contains(&status) {
                        return match serde_json::from_slice::<ChatResponse>(&bytes) {
                            Ok(r) => into_turn(r),
                            Err(e) => Err(LlmError::Malformed(e.to_string())),
                        };
                    }
                    let (kind, message) = error_body(&bytes);
                    let text = format!("HTTP {status}: {message}");
                    return Err(match kind.as_deref() {
                        Some(gateway_error::BUDGET) => LlmError::Budget(message),
                        Some(gateway_error::MALFORMED) => LlmError::Malformed(message),
                        _ => LlmError::Failed(text),
                    });
                }
                Err(e) => {
                    let mut msg = e.to_string();
                    let mut cur = std::error::Error::source(&e);
                    while let Some(c) = cur {
                        msg = format!("{msg}: {c}");
                        cur = c.source();
                    }
                    last_error = format!("gateway unreachable: {msg}");
                }
            }
            if attempt == MAX_ATTEMPTS {
                break;
            }
            let wait = retry::backoff(attempt, None);
            tracing::warn!(attempt, error = %last_error, wait_ms = wait.as_millis() as u64,
                elapsed_ms = started.elapsed().as_millis() as u64, "retrying");
            tokio::time::sleep(wait).await;
        }
        Err(LlmError::Failed(format!(
            "giving up after {MAX_ATTEMPTS} attempts: {last_error}"
        )))
    }
}

/// The `error.type` and message of an error body.
fn error_body(bytes: &[u8]) -> (Option<String>, String) {
    match serde_json::from_slice::<saheeli_protocol::chat::ErrorBody>(bytes) {
        Ok(e) => (e.error.kind, e.error.message),
        Err(_) => (
            None,
            String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned(),
        ),
    }
}

fn into_turn(r: ChatResponse) -> Result<Turn, LlmError> {
    let usage = r
        .usage
        .map(|u| Usage {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
        })
        .unwrap_or_default();
    let choice = r
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| LlmError::Failed("the response has no choices".into()))?;
    let mut message = choice.message;
    message.role = saheeli_protocol::chat::Role::Assistant;
    Ok(Turn { message, usage })
}
