//! The model for the per-step measurement: an OpenAI-compatible chat
//! completions server on 127.0.0.1, answering at once over real HTTP with
//! real tool calls, as a provider would (TCP_NODELAY, keep-alive).
//!
//! It keeps no script: the model name says how many turns a task has
//! (`steps-101`), and the number of assistant messages already in the
//! conversation says which turn this is. Every turn but the last calls
//! `execute_shell {"command": "true"}`; the last calls `task_complete`.
//! It records when each request arrived and when its answer was ready,
//! so the bench can tell the server's own time from the path's.
//!
//! At `/v1/responses` it answers any request with a short text turn (the
//! vetting figure's third-party agent, which reads no answer).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// One request as the server saw it.
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    /// Microseconds from arrival of the whole body to the answer being
    /// ready (the server's own work: parsing and building the answer).
    pub handler_us: f64,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// Whether a `limited-N` model's one 429 was answered.
static LIMITED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub struct FakeLlm {
    pub addr: SocketAddr,
    log: Log,
    server: tokio::task::JoinHandle<()>,
}

impl FakeLlm {
    pub async fn start() -> anyhow::Result<FakeLlm> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the fake LLM")?;
        let addr = listener.local_addr()?;
        let log = Log::default();
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .route("/v1/responses", post(respond))
            .with_state(log.clone());
        // A provider's server does not hold small answers back (Nagle).
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeLlm { addr, log, server })
    }

    /// The base URL for `OPENAI_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Takes what was seen so far.
    pub fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// How many turns a model name asks for (`steps-N`).
fn turns(model: &str) -> Option<usize> {
    model.strip_prefix("steps-")?.parse().ok()
}

/// The answer for turn `turn` (1-based) of `total`.
fn answer(turn: usize, total: usize, prompt_bytes: usize) -> Value {
    let (name, args) = if turn < total {
        ("execute_shell", json!({"command": "true"}))
    } else {
        ("task_complete", json!({"message": "ok"}))
    };
    json!({
        "id": format!("chatcmpl-bench-{turn}"),
        "object": "chat.completion",
        "created": 0,
        "model": format!("steps-{total}"),
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant",
                "content": null,
                "tool_calls": [{
                    "id": format!("call_{turn}"),
                    "type": "function",
                    "function": {"name": name, "arguments": args.to_string()}
                }]
            },
            "finish_reason": "tool_calls"
        }],
        "usage": {
            "prompt_tokens": prompt_bytes / 4,
            "completion_tokens": 12,
            "total_tokens": prompt_bytes / 4 + 12
        }
    })
}

async fn complete(State(log): State<Log>, body: Bytes) -> Response {
    let t0 = Instant::now();
    let req: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("not JSON: {e}")).into_response(),
    };
    // `limited-N`: the first call of all is refused with a 429 and a
    // `retry-after` of N seconds (a provider's rate limit); every other
    // call completes the task.
    if let Some(secs) = req["model"]
        .as_str()
        .and_then(|m| m.strip_prefix("limited-"))
    {
        if !LIMITED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            let body = json!({"error": {"message": "rate limit reached", "type": "rate_limit"}});
            let retry = secs.to_string();
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, retry)],
                axum::Json(body),
            )
                .into_response();
        }
        return axum::Json(answer(1, 1, body.len())).into_response();
    }
    let Some(total) = req["model"].as_str().and_then(turns) else {
        return (StatusCode::BAD_REQUEST, "model must be `steps-N`").into_response();
    };
    let done = req["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] == "assistant").count())
        .unwrap_or(0);
    let text = answer(done + 1, total, body.len()).to_string();
    log.lock().unwrap().push(Seen {
        handler_us: t0.elapsed().as_secs_f64() * 1e6,
    });
    ([(header::CONTENT_TYPE, "application/json")], text).into_response()
}

/// A whole Responses answer: one text turn, usage at a token for four
/// bytes of the request.
async fn respond(body: Bytes) -> Response {
    let input = body.len() as u64 / 4;
    let text = json!({
        "id": "resp_bench",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": "bench",
        "output": [{
            "type": "message",
            "id": "msg_bench",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "ok", "annotations": []}]
        }],
        "usage": {
            "input_tokens": input,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 2,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input + 2
        }
    })
    .to_string();
    ([(header::CONTENT_TYPE, "application/json")], text).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_follow_the_conversation() {
        assert_eq!(turns("steps-101"), Some(101));
        assert_eq!(turns("gpt-4o"), None);
        let a = answer(1, 2, 400);
        let call = &a["choices"][0]["message"]["tool_calls"][0]["function"];
        assert_eq!(call["name"], "execute_shell");
        assert_eq!(call["arguments"], r#"{"command":"true"}"#);
        let a = answer(2, 2, 400);
        assert_eq!(
            a["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
            "task_complete"
        );
        assert_eq!(a["usage"]["prompt_tokens"], 100);
    }
}
