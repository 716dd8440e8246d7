//! OpenAI chat completions through the foreman's gateway: a unix socket in
//! a container, plain HTTP in tests. No key and no auth header: the gateway
//! adds the key, which never enters the container.

use std::time::{Duration, SystemTime};

use saheeli_protocol::Usage;
use saheeli_protocol::chat::{ChatMessage, ChatResponse, ErrorBody, Role, ToolSpec, gateway_error};
use saheeli_protocol::human::InboxFirst;
use serde::Serialize;

use super::retry::{self, Attempt, Verdict, Waiting};
use super::{LlmError, Turn};

pub(crate) struct Gateway {
    http: reqwest::Client,
    url: String,
}

/// The request body (a `protocol::chat::ChatRequest` on the wire),
/// borrowing the conversation instead of copying it every step.
#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    messages: &'a [ChatMessage],
    tools: &'a [ToolSpec],
}

impl Gateway {
    /// `unix:/path/to.sock` or `http://host:port`; `timeout` limits one
    /// request ([`retry::REQUEST_TIMEOUT`] when None).
    pub fn new(address: &str, timeout: Option<Duration>) -> Result<Gateway, String> {
        let builder = reqwest::Client::builder()
            .timeout(timeout.unwrap_or(retry::REQUEST_TIMEOUT))
            .connect_timeout(Duration::from_secs(10));
        let (builder, base) = match address.strip_prefix("unix:") {
            Some(path) => (
                builder.unix_socket(path.to_string()),
                "http://gateway".to_string(),
            ),
            None if address.starts_with("http://") => {
                (builder, address.trim_end_matches('/').to_string())
            }
            None => {
                return Err(format!(
                    "gateway `{address}` is neither `unix:/path/to.sock` nor `http://host:port`; \
                     fix SAHEELI_GATEWAY"
                ));
            }
        };
        let http = builder
            .default_headers(crate::remote::auth_headers()?)
            .build()
            .map_err(|e| format!("building the HTTP client: {e}"))?;
        Ok(Gateway {
            http,
            url: format!("{base}/v1/chat/completions"),
        })
    }

    /// One completion, retried as [`retry`] says.
    pub async fn complete(
        &self,
        model: &str,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        inbox_after: Option<i64>,
        notify: impl FnMut(Waiting),
    ) -> Result<Turn, LlmError> {
        let body = serde_json::to_vec(&Request {
            model,
            messages,
            tools,
        })
        .map_err(|e| LlmError::Failed(format!("encoding the request: {e}")))?;
        retry::run(|| self.attempt(body.clone(), inbox_after), notify).await
    }

    async fn attempt(&self, body: Vec<u8>, inbox_after: Option<i64>) -> Attempt<Turn> {
        let mut post = self
            .http
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        if let Some(after) = inbox_after {
            post = post.header(saheeli_protocol::human::INBOX_AFTER, after.to_string());
        }
        let resp = match post.body(body).send().await {
            Ok(r) => r,
            Err(e) => return transport_error("gateway unreachable", &e),
        };
        let status = resp.status().as_u16();
        let wish = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry::retry_after(v, SystemTime::now()));
        let bytes = match resp.bytes().await {
            Ok(b) => b,
            Err(e) => return transport_error("response cut off", &e),
        };
        if (200..300).contains(&status) {
            return Attempt::Done(match serde_json::from_slice::<ChatResponse>(&bytes) {
                Ok(r) => into_turn(r),
                Err(e) => Err(LlmError::Malformed(format!("not a chat completion: {e}"))),
            });
        }
        if status == 409
            && let Ok(first) = serde_json::from_slice::<InboxFirst>(&bytes)
            && first.error.kind.as_deref() == Some(gateway_error::INBOX)
        {
            return Attempt::Done(Err(LlmError::Inbox(first.inbox)));
        }
        let (kind, message) = error_body(&bytes);
        let text = format!("HTTP {status}: {message}");
        Attempt::Done(Err(match retry::verdict(status, kind.as_deref()) {
            Verdict::Retry => {
                return Attempt::Retry {
                    error: text,
                    retry_after: wish,
                };
            }
            // A server reached directly says it in its own words.
            Verdict::Fail
                if saheeli_protocol::retry::context_overflow(&String::from_utf8_lossy(&bytes)) =>
            {
                LlmError::ContextLength(message)
            }
            Verdict::Fail => LlmError::Failed(text),
            Verdict::Budget => LlmError::Budget(message),
            Verdict::Malformed => LlmError::Malformed(message),
            Verdict::ContextLength => LlmError::ContextLength(message),
        }))
    }
}

/// A call that got no answer. A timeout is retried a few times (the
/// gateway is alive but slow); anything else (refused, reset, cut off)
/// means the gateway's foreman is gone, and is waited for.
fn transport_error<T>(what: &str, e: &reqwest::Error) -> Attempt<T> {
    let error = format!("{what}: {}", error_chain(e));
    if e.is_timeout() {
        Attempt::Retry {
            error,
            retry_after: None,
        }
    } else {
        Attempt::Unreachable { error }
    }
}

/// An error and its causes, for a message that says what went wrong
/// (reqwest's own text is often just "error sending request").
fn error_chain(e: &reqwest::Error) -> String {
    let mut msg = e.to_string();
    let mut cur = std::error::Error::source(e);
    while let Some(c) = cur {
        msg = format!("{msg}: {c}");
        cur = c.source();
    }
    msg
}

/// The `error.type` and message of an error body, else the body's start.
fn error_body(bytes: &[u8]) -> (Option<String>, String) {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(e) => (e.error.kind, e.error.message),
        Err(_) => {
            let start = &bytes[..bytes.len().min(300)];
            (None, String::from_utf8_lossy(start).trim().to_string())
        }
    }
}

fn into_turn(r: ChatResponse) -> Result<Turn, LlmError> {
    let usage = r
        .usage
        .map(|u| Usage {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
        })
        .unwrap_or_default();
    let choice = r
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| LlmError::Malformed("the response has no choices".into()))?;
    let cut = choice.finish_reason.as_deref() == Some("length");
    let mut message = choice.message;
    message.role = Role::Assistant;
    Ok(Turn {
        message,
        usage,
        cut,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_addresses() {
        let g = Gateway::new("unix:/run/saheeli/gateway.sock", None).unwrap();
        assert_eq!(g.url, "http://gateway/v1/chat/completions");
        let g = Gateway::new("http://127.0.0.1:8080/", None).unwrap();
        assert_eq!(g.url, "http://127.0.0.1:8080/v1/chat/completions");
        let e = Gateway::new("127.0.0.1:8080", None).err().unwrap();
        assert!(e.contains("SAHEELI_GATEWAY"), "{e}");
    }

    #[test]
    fn request_has_the_chat_request_shape() {
        let messages = [ChatMessage::user("hi")];
        let tools = crate::tools::specs();
        let body = serde_json::to_vec(&Request {
            model: "m",
            messages: &messages,
            tools: &tools,
        })
        .unwrap();
        let req: saheeli_protocol::chat::ChatRequest = serde_json::from_slice(&body).unwrap();
        assert_eq!(req.model, "m");
        assert_eq!(req.tools.len(), 6);
    }

    #[test]
    fn error_bodies() {
        let (kind, msg) =
            error_body(br#"{"error": {"message": "spent", "type": "budget_exceeded"}}"#);
        assert_eq!(kind.as_deref(), Some("budget_exceeded"));
        assert_eq!(msg, "spent");
        assert_eq!(
            error_body(b"<html>bad</html>\n"),
            (None, "<html>bad</html>".into())
        );
    }

    /// Issue 27 item 5: a reply cut at the output cap is flagged (the
    /// gateway reports Anthropic's `max_tokens` stop as `length` too).
    #[test]
    fn a_reply_cut_at_the_cap_is_flagged() {
        // Recorded from llama-server and llama-cpp-python's server
        // (scripts/record-local-servers.py).
        for text in [
            include_str!("../../../foreman/tests/fixtures/local-servers/llama-server/length.json"),
            include_str!(
                "../../../foreman/tests/fixtures/local-servers/llama-cpp-python/length.json"
            ),
        ] {
            cut_is_flagged(serde_json::from_str(text).unwrap());
        }
    }

    fn cut_is_flagged(recorded: serde_json::Value) {
        let body = &recorded["response"]["body"];
        assert_eq!(body["choices"][0]["finish_reason"], "length", "{body}");
        let r: ChatResponse = serde_json::from_value(body.clone()).unwrap();
        let turn = into_turn(r.clone()).unwrap();
        assert!(turn.cut);
        assert_eq!(
            turn.usage.output_tokens,
            body["usage"]["completion_tokens"].as_u64().unwrap()
        );
        let mut whole = r;
        whole.choices[0].finish_reason = Some("stop".into());
        assert!(!into_turn(whole).unwrap().cut);
    }
}
