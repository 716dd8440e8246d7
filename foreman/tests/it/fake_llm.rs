//! A stand-in for a paid LLM API on 127.0.0.1: real HTTP, the real wire
//! formats (OpenAI chat completions with tool calls and usage at
//! `/v1/chat/completions`, Anthropic Messages with tool_use at
//! `/v1/messages`, OpenAI Responses at `/v1/responses`; each streamed when
//! the request asks, see `fake_stream`; their input counted at
//! `/v1/messages/count_tokens` and `/v1/responses/input_tokens` when the
//! test gives a count, else 404 as a local server), and real failures (429 with
//! Retry-After, 500, 401, malformed JSON, a truncated body, slow answers,
//! streams cut).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// One scripted answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// An assistant turn calling these tools, with this usage (prompt, completion).
    Tools(Vec<(String, Value)>, (u64, u64)),
    /// An assistant turn with this text and no tool calls (an assessor's
    /// verdict), with this usage.
    Text(String, (u64, u64)),
    /// An assistant turn that says this text and calls these tools; with
    /// the request's `logprobs: true`, each text token's log probability
    /// (`fake_stream::token_logprobs`).
    Said(String, Vec<(String, Value)>, (u64, u64)),
    /// An HTTP error with an OpenAI error body, optionally with Retry-After.
    Error(u16, Option<String>),
    /// An HTTP error whose Retry-After is an HTTP date this long after the
    /// moment it is answered (whole seconds, as the format has).
    ErrorUntil(u16, std::time::Duration),
    /// An HTTP status with this JSON body (a provider's own error shape).
    Body(u16, Value),
    /// A 200 whose body is not JSON (usage cannot be read).
    Malformed,
    /// A 200 whose JSON parses but is not a completion; it reports usage.
    Unusable((u64, u64)),
    /// A 200 that promises more bytes than it sends.
    Truncated,
    /// Waits, then answers with the inner reply.
    Slow(Duration, Box<Reply>),
    /// An HTTP error whose body echoes the key the caller sent, raw and in
    /// base64 (standard and URL-safe), as a careless provider might.
    EchoKey(u16),
    /// A 200 completion whose text echoes the key (raw and base64) and calls
    /// `task_complete`; usage (100, 20).
    EchoKeyContent,
    /// The inner reply streamed, but only its first `n` events: then the
    /// connection is dropped (nothing is billed).
    CutStream(usize, Box<Reply>),
    /// The inner reply streamed up to the end of its text; the rest (tool
    /// calls, usage, the last event) waits until the test releases the
    /// gate: the call cannot end before the test has seen the text.
    Held(Arc<tokio::sync::Notify>, Box<Reply>),
}

impl Reply {
    pub fn tool(name: &str, args: Value) -> Reply {
        Reply::Tools(vec![(name.into(), args)], (100, 20))
    }
}

/// What the fake saw.
#[derive(Clone, Debug)]
pub struct Seen {
    pub at: Instant,
    pub path: String,
    pub authorization: Option<String>,
    pub api_key: Option<String>,
    pub body: Value,
    /// What a caching fake billed this request (`start_caching`).
    pub billed: Option<crate::fake_cache::Billed>,
    /// The `anthropic-beta` header.
    pub beta: Option<String>,
}

/// Picks the reply for a request body before the script is consulted.
type Matcher = Box<dyn Fn(&Value) -> Option<Reply> + Send>;

/// Counts the input tokens of a count request's body.
type Counter = Box<dyn Fn(&Value) -> u64 + Send>;

#[derive(Default)]
struct Inner {
    script: VecDeque<Reply>,
    seen: Vec<Seen>,
    matcher: Option<Matcher>,
    /// The usage of every turn served (input, output).
    billed: Vec<(u64, u64)>,
    /// Set: usage is billed like a provider with prompt caching.
    cache: Option<crate::fake_cache::PromptCache>,
    /// Set: a provider's rate limit is enforced (`fake_limit`).
    limiter: Option<crate::fake_limit::Limiter>,
    /// Set: the count endpoints answer with this count.
    counter: Option<Counter>,
    /// The count requests received.
    counts: Vec<Seen>,
}

pub struct FakeLlm {
    pub addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    _runtime: tokio::runtime::Runtime,
}

impl FakeLlm {
    /// Starts serving `script` in order; when it runs out, answers 500.
    pub fn start(script: Vec<Reply>) -> FakeLlm {
        Self::start_matching(script, |_| None)
    }

    /// Like `start`, but a tool-calling reply's input usage is what a
    /// provider with prompt caching bills for the request (`fake_cache`),
    /// in its own usage shape; the scripted output tokens are kept.
    pub fn start_caching(script: Vec<Reply>) -> FakeLlm {
        let llm = Self::start(script);
        llm.inner.lock().unwrap().cache = Some(Default::default());
        llm
    }

    /// Like `start`, but a request for which `matcher` returns a reply gets
    /// that reply and leaves the script alone (requests arriving in parallel
    /// from several sources then cannot steal each other's turns).
    pub fn start_matching(
        script: Vec<Reply>,
        matcher: impl Fn(&Value) -> Option<Reply> + Send + 'static,
    ) -> FakeLlm {
        let inner = Arc::new(Mutex::new(Inner {
            script: script.into(),
            seen: vec![],
            matcher: Some(Box::new(matcher)),
            billed: vec![],
            cache: None,
            limiter: None,
            counter: None,
            counts: vec![],
        }));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new()
            .route("/v1/chat/completions", post(openai))
            .route("/v1/messages", post(anthropic))
            .route("/v1/responses", post(responses))
            .route("/v1/messages/count_tokens", post(count))
            .route("/v1/responses/input_tokens", post(count))
            .with_state(inner.clone());
        runtime.spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeLlm {
            addr,
            inner,
            _runtime: runtime,
        }
    }

    /// From now on the count endpoints answer with `counter`'s count of
    /// the request's body (before, they answer 404 as a local server).
    pub fn count_with(&self, counter: impl Fn(&Value) -> u64 + Send + 'static) {
        self.inner.lock().unwrap().counter = Some(Box::new(counter));
    }

    /// The count requests received, in order.
    pub fn counts(&self) -> Vec<Seen> {
        self.inner.lock().unwrap().counts.clone()
    }

    /// The base URL as the OpenAI SDKs expect it (ending in /v1).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The base URL as the Anthropic SDKs expect it (no /v1).
    pub fn anthropic_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.inner.lock().unwrap().seen.clone()
    }

    /// How many requests were seen so far, without copying them (for a
    /// loop that polls: `seen` copies every body).
    pub fn seen_count(&self) -> usize {
        self.inner.lock().unwrap().seen.len()
    }

    /// When the `i`th request (from 0) arrived, once it has.
    pub fn seen_at(&self, i: usize) -> Option<Instant> {
        self.inner.lock().unwrap().seen.get(i).map(|s| s.at)
    }

    /// From now on, enforces a provider's rate limit: answers carry the
    /// provider's rate-limit headers and a request over it gets a 429.
    pub fn limit(&self, limit: crate::fake_limit::RateLimit) {
        self.inner.lock().unwrap().limiter = Some(crate::fake_limit::Limiter::new(limit));
    }

    /// Requests the rate limit let through, and 429s it answered.
    pub fn rate_limited(&self) -> (u64, u64) {
        let g = self.inner.lock().unwrap();
        g.limiter.as_ref().map_or((0, 0), |l| (l.served, l.refused))
    }

    /// What the fake billed in all: the tokens of every turn it served.
    pub fn billed(&self) -> u64 {
        self.inner
            .lock()
            .unwrap()
            .billed
            .iter()
            .map(|(i, o)| i + o)
            .sum()
    }
}

fn error(status: u16, retry_after: Option<&str>) -> Response {
    let body = json!({"error": {"message": format!("fake error {status}"), "type": "fake"}});
    let mut r = (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response();
    if let Some(s) = retry_after {
        r.headers_mut().insert("retry-after", s.parse().unwrap());
    }
    r
}

/// The key as a careless provider echoes it: raw, and in base64 with both
/// alphabets, inside a longer text.
pub fn echo(key: &str) -> String {
    use base64::Engine;
    let std = base64::engine::general_purpose::STANDARD.encode(format!("Bearer {key}"));
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("key={key};"));
    format!("Incorrect API key provided: {key}. Trace: {std} / {url}")
}

#[derive(Clone, Copy, PartialEq)]
enum Format {
    OpenAi,
    Anthropic,
    Responses,
}

impl Format {
    fn path(self) -> &'static str {
        match self {
            Format::OpenAi => "/v1/chat/completions",
            Format::Anthropic => "/v1/messages",
            Format::Responses => "/v1/responses",
        }
    }
}

/// A count endpoint of either API: `{"input_tokens": N}` (OpenAI's with
/// its object name), or 404 when the test gave no count.
async fn count(
    State(inner): State<Arc<Mutex<Inner>>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error(400, None);
    };
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    let mut g = inner.lock().unwrap();
    g.counts.push(Seen {
        at: Instant::now(),
        path: uri.path().into(),
        authorization: header("authorization"),
        api_key: header("x-api-key"),
        body: body.clone(),
        billed: None,
        beta: header("anthropic-beta"),
    });
    let Some(n) = g.counter.as_ref().map(|c| c(&body)) else {
        return error(404, None);
    };
    let answer = if uri.path().starts_with("/v1/responses") {
        json!({"object": "response.input_tokens", "input_tokens": n})
    } else {
        json!({"input_tokens": n})
    };
    axum::Json(answer).into_response()
}

async fn openai(state: State<Arc<Mutex<Inner>>>, headers: HeaderMap, body: Bytes) -> Response {
    handle(state, headers, body, Format::OpenAi).await
}

async fn anthropic(state: State<Arc<Mutex<Inner>>>, headers: HeaderMap, body: Bytes) -> Response {
    if headers.get("anthropic-version").is_none() {
        return error(400, None);
    }
    handle(state, headers, body, Format::Anthropic).await
}

async fn responses(state: State<Arc<Mutex<Inner>>>, headers: HeaderMap, body: Bytes) -> Response {
    handle(state, headers, body, Format::Responses).await
}

/// A stream of these events (server-sent); with `cut`, the connection is
/// dropped after them (once they had time to reach the client).
fn event_stream(events: Vec<String>, cut: bool) -> Response {
    use futures_util::StreamExt;
    let chunks: Vec<Result<Bytes, std::io::Error>> =
        events.into_iter().map(|e| Ok(Bytes::from(e))).collect();
    let end = futures_util::stream::iter(cut.then_some(())).then(|()| async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Err(std::io::Error::other("connection cut"))
    });
    let body = axum::body::Body::from_stream(futures_util::stream::iter(chunks).chain(end));
    (
        StatusCode::OK,
        [
            ("content-type", "text/event-stream"),
            ("cache-control", "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// The events of a turn in the request's format.
fn turn_events(format: Format, body: &Value, t: &crate::fake_stream::Turn) -> Vec<String> {
    use crate::fake_stream as fs;
    match format {
        Format::Anthropic => fs::anthropic(t),
        Format::OpenAi => fs::chat(
            t,
            body["stream_options"]["include_usage"] == true,
            body["logprobs"] == true,
        ),
        Format::Responses => fs::responses(t),
    }
}

/// The rate limit first, when one is set: a 429 leaves the script alone;
/// an answer carries the limit's headers.
async fn handle(
    State(inner): State<Arc<Mutex<Inner>>>,
    headers: HeaderMap,
    body: Bytes,
    format: Format,
) -> Response {
    let anthropic = format == Format::Anthropic;
    let limited = inner
        .lock()
        .unwrap()
        .limiter
        .as_mut()
        .map(|l| l.take(body.len() as u64 / 4, anthropic));
    match limited {
        None => answer(State(inner), headers, body, format).await,
        Some((h, false)) => {
            let mut r = error(429, None);
            if anthropic {
                let body = json!({"type": "error", "error": {"type": "rate_limit_error",
                    "message": "This request would exceed the rate limit for your organization"}});
                r = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
            }
            r.headers_mut().extend(h);
            r
        }
        Some((h, true)) => {
            let mut r = answer(State(inner), headers, body, format).await;
            r.headers_mut().extend(h);
            r
        }
    }
}

async fn answer(
    State(inner): State<Arc<Mutex<Inner>>>,
    headers: HeaderMap,
    body: Bytes,
    format: Format,
) -> Response {
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) => return error(400, None),
    };
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    let (reply, n, cached_usage) = {
        let mut g = inner.lock().unwrap();
        let reply = g
            .matcher
            .as_ref()
            .and_then(|m| m(&body))
            .or_else(|| g.script.pop_front());
        let output = match &reply {
            Some(Reply::Tools(_, (_, completion))) => Some(*completion),
            _ => None,
        };
        let billed = match (g.cache.as_mut(), output) {
            (Some(c), Some(out)) => match format {
                Format::OpenAi => Some(c.openai(&body, out)),
                Format::Anthropic => Some(c.anthropic(&body, out)),
                // Caching is billed on the two APIs the servo's loop uses.
                Format::Responses => None,
            },
            _ => None,
        };
        g.seen.push(Seen {
            at: Instant::now(),
            path: format.path().into(),
            authorization: header("authorization"),
            api_key: header("x-api-key"),
            body: body.clone(),
            billed: billed.as_ref().map(|b| b.0),
            beta: header("anthropic-beta"),
        });
        (reply, g.seen.len(), billed.map(|b| b.1))
    };
    let key = header("authorization")
        .and_then(|a| a.strip_prefix("Bearer ").map(String::from))
        .or_else(|| header("x-api-key"))
        .unwrap_or_default();
    let model = body["model"].as_str().unwrap_or("fake").to_string();
    let mut reply = reply.unwrap_or(Reply::Error(500, None));
    let streamed = body["stream"] == true;
    // The stream's events are cut after this many, if at all.
    let mut cut: Option<usize> = None;
    // The stream waits for this gate after its text.
    let mut held: Option<Arc<tokio::sync::Notify>> = None;
    loop {
        let turn = match &reply {
            Reply::Tools(calls, usage) => Some((None, calls.clone(), *usage)),
            Reply::Text(text, usage) => Some((Some(text.clone()), vec![], *usage)),
            Reply::Said(text, calls, usage) => Some((Some(text.clone()), calls.clone(), *usage)),
            _ => None,
        };
        if let Some((text, calls, usage)) = turn
            && (streamed || format != Format::OpenAi)
        {
            let text = text.or_else(|| (format != Format::OpenAi).then(|| "On it.".to_string()));
            let t = crate::fake_stream::Turn {
                n,
                model: &model,
                text: text.as_deref(),
                calls: &calls,
                usage,
            };
            if !streamed {
                inner.lock().unwrap().billed.push(usage);
                let mut body = match format {
                    Format::Anthropic => crate::fake_stream::anthropic_body(&t),
                    _ => crate::fake_stream::responses_body(&t),
                };
                if let Some(u) = &cached_usage {
                    body["usage"] = u.clone();
                }
                return axum::Json(body).into_response();
            }
            let mut events = turn_events(format, &body, &t);
            if let Some(u) = &cached_usage {
                events = events
                    .iter()
                    .map(|e| crate::fake_stream::with_usage(e, u))
                    .collect();
            }
            if let Some(gate) = held {
                inner.lock().unwrap().billed.push(usage);
                return crate::fake_stream::held_stream(events, gate);
            }
            match cut {
                None => {
                    inner.lock().unwrap().billed.push(usage);
                    return event_stream(events, false);
                }
                Some(k) => {
                    events.truncate(k);
                    return event_stream(events, true);
                }
            }
        }
        match reply {
            Reply::Held(gate, inner_reply) => {
                held = Some(gate);
                reply = *inner_reply;
            }
            Reply::CutStream(k, inner_reply) => {
                cut = Some(k);
                reply = *inner_reply;
            }
            Reply::Slow(d, inner) => {
                tokio::time::sleep(d).await;
                reply = *inner;
            }
            Reply::Error(status, retry_after) => return error(status, retry_after.as_deref()),
            Reply::ErrorUntil(status, after) => {
                let date = httpdate::fmt_http_date(std::time::SystemTime::now() + after);
                return error(status, Some(&date));
            }
            Reply::Body(status, body) => {
                return (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response();
            }
            Reply::EchoKey(status) => {
                let body =
                    json!({"error": {"message": echo(&key), "type": "invalid_request_error"}});
                return (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response();
            }
            Reply::EchoKeyContent => {
                let resp = json!({
                    "id": format!("chatcmpl-{n}"), "object": "chat.completion", "model": model,
                    "choices": [{"index": 0, "finish_reason": "tool_calls",
                        "message": {"role": "assistant", "content": echo(&key),
                            "tool_calls": [{"id": format!("call_{n}_0"), "type": "function",
                                "function": {"name": "task_complete",
                                    "arguments": json!({"message": "done"}).to_string()}}]}}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
                });
                return axum::Json(resp).into_response();
            }
            Reply::Text(text, (prompt, completion)) => {
                inner.lock().unwrap().billed.push((prompt, completion));
                let resp = json!({
                    "id": format!("chatcmpl-{n}"), "object": "chat.completion", "model": model,
                    "choices": [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                              "total_tokens": prompt + completion}
                });
                return axum::Json(resp).into_response();
            }
            Reply::Malformed => {
                return (
                    StatusCode::OK,
                    [("content-type", "application/json")],
                    "{\"choices\": [",
                )
                    .into_response();
            }
            Reply::Unusable((i, o)) => {
                let usage = match format {
                    Format::OpenAi | Format::Responses => {
                        json!({"prompt_tokens": i, "completion_tokens": o, "total_tokens": i + o})
                    }
                    Format::Anthropic => json!({"input_tokens": i, "output_tokens": o}),
                };
                return axum::Json(json!({"unexpected": true, "usage": usage})).into_response();
            }
            Reply::Truncated => {
                // Promise 4096 bytes, send 14, then drop the connection.
                let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
                    Ok(Bytes::from_static(b"{\"choices\": [")),
                    Err(std::io::Error::other("connection cut")),
                ];
                let body = axum::body::Body::from_stream(futures_util::stream::iter(chunks));
                let mut r = (StatusCode::OK, body).into_response();
                r.headers_mut()
                    .insert("content-length", "4096".parse().unwrap());
                r.headers_mut()
                    .insert("content-type", "application/json".parse().unwrap());
                return r;
            }
            Reply::Said(text, calls, (prompt, completion)) => {
                inner.lock().unwrap().billed.push((prompt, completion));
                let tool_calls: Vec<Value> = calls
                    .iter()
                    .enumerate()
                    .map(|(i, (name, args))| {
                        json!({"id": format!("call_{n}_{i}"), "type": "function",
                               "function": {"name": name, "arguments": args.to_string()}})
                    })
                    .collect();
                let logprobs = (body["logprobs"] == true).then(|| {
                    json!({"content": crate::fake_stream::token_logprobs(&text), "refusal": null})
                });
                let resp = json!({
                    "id": format!("chatcmpl-{n}"), "object": "chat.completion", "model": model,
                    "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": logprobs,
                        "message": {"role": "assistant", "content": text,
                                    "tool_calls": tool_calls}}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                              "total_tokens": prompt + completion}
                });
                return axum::Json(resp).into_response();
            }
            Reply::Tools(calls, (prompt, completion)) => {
                inner.lock().unwrap().billed.push((prompt, completion));
                let resp = match format {
                    Format::Responses => unreachable!("answered above"),
                    Format::OpenAi => {
                        let tool_calls: Vec<Value> = calls
                            .iter()
                            .enumerate()
                            .map(|(i, (name, args))| {
                                json!({"id": format!("call_{n}_{i}"), "type": "function",
                                       "function": {"name": name, "arguments": args.to_string()}})
                            })
                            .collect();
                        json!({
                            "id": format!("chatcmpl-{n}"),
                            "object": "chat.completion",
                            "created": 0,
                            "model": model,
                            "choices": [{"index": 0, "finish_reason": "tool_calls",
                                "message": {"role": "assistant", "content": null, "tool_calls": tool_calls}}],
                            "usage": cached_usage.clone().unwrap_or_else(|| json!(
                                {"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": prompt + completion}))
                        })
                    }
                    Format::Anthropic => unreachable!("answered above"),
                };
                return axum::Json(resp).into_response();
            }
        }
    }
}
