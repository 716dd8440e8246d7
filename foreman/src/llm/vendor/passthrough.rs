//! Serving the vendors' APIs for third-party agents (`native` vets the
//! request): the call is reserved before it is forwarded, sent with the
//! task's key only, and settled from the usage it reports, whole or
//! streamed (`stream`). Every call is a ledger row, as the servo's are.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use saheeli_protocol::Reason;
use saheeli_protocol::chat::{ChatRequest, ErrorDetail, gateway_error};
use saheeli_protocol::human::{INBOX_AFTER, InboxFirst};
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::native::{self, Api};
use super::stream::{self, Held, Partial};
use crate::config::ProviderKind;
use crate::llm::GatewayState;
use crate::llm::count;
use crate::llm::input_bound;
use crate::llm::limit_headers;
use crate::llm::provider_call;
use crate::llm::provider_call::error_text;
use crate::llm::provider_call::rate_patience;
use crate::llm::record;
use crate::llm::retry;
use crate::llm::retry::Verdict;
use crate::llm::shape;
use crate::llm::task::json_response;
use crate::llm::task::ledger;
use crate::metrics::{Refusal, RetryCause, live};
use crate::text::error_chain;

/// Longest whole (not streamed) answer read from a provider.
const MAX_ANSWER: usize = 32 * 1024 * 1024;

/// An error in the API's own format, redacted.
fn refuse(gw: &GatewayState, api: Api, status: StatusCode, kind: &str, message: &str) -> Response {
    json_response(gw, status, &api.error_body(kind, message))
}

pub(crate) async fn messages(
    State(gw): State<Arc<GatewayState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(gw, Api::Messages, &headers, body).await
}

pub(crate) async fn responses(
    State(gw): State<Arc<GatewayState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(gw, Api::Responses, &headers, body).await
}

/// A third-party agent's chat completion: streamed, or any of a replayed
/// agent's (the servo's own calls go through `handler::chat_completions`).
pub(crate) async fn chat_native(
    gw: Arc<GatewayState>,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    serve(gw, Api::Chat, headers, body).await
}

/// `POST /v1/chat/completions`: a streamed chat is a third-party
/// agent's (issue 25), passed through as the agent wrote it and metered
/// from the stream; so is every chat of an agent answered by a `replay:`
/// script. Any other is the servo's own typed call (`llm::chat`).
pub(crate) async fn chat_completions(
    State(gw): State<Arc<GatewayState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if gw.replay.is_some() {
        return chat_native(gw, &headers, body).await;
    }
    // The servo's call looks at the inbox with it: the look starts now,
    // beside reading the body, and the call waits for what it finds.
    let look = headers
        .get(INBOX_AFTER)
        .and_then(|v| v.to_str().ok()?.parse::<i64>().ok())
        .and_then(|after| Some(gw.inbox.get()?.start(after)));
    // Read once: the servo's own call is a typed request (a stream asked
    // for in it is a third-party agent's too). Only a body that is no such
    // request is read as any JSON, to find whether it asks for a stream.
    let req = serde_json::from_slice::<ChatRequest>(&body);
    let streamed = match &req {
        Ok(r) => r.stream == Some(true),
        Err(_) => serde_json::from_slice::<Value>(&body)
            .is_ok_and(|v| v.get("stream") == Some(&Value::Bool(true))),
    };
    if streamed {
        return chat_native(gw, &headers, body).await;
    }
    if let Some(look) = look
        && let Some(inbox) = look.await
    {
        let first = InboxFirst {
            error: ErrorDetail {
                message: "the inbox has messages or a pause for the servo: nothing was sent to \
                          the model; take them and ask again"
                    .into(),
                kind: Some(gateway_error::INBOX.into()),
            },
            inbox,
        };
        return json_response(&gw, StatusCode::CONFLICT, &first);
    }
    let call = gw.held.call();
    let answer = crate::llm::chat::typed(gw.clone(), req).await;
    call.answer().await;
    answer
}

/// `POST /v1/messages/count_tokens`: estimated here, nothing forwarded.
pub(crate) async fn count_tokens(State(gw): State<Arc<GatewayState>>, body: Bytes) -> Response {
    if gw.replay.is_none() && !Api::Messages.served_by(gw.route.provider.kind) {
        return not_spoken(&gw, Api::Messages);
    }
    match native::count_tokens(&body) {
        Ok(v) => json_response(&gw, StatusCode::OK, &v),
        Err(why) => {
            live().refusal(Refusal::InvalidRequest);
            refuse(
                &gw,
                Api::Messages,
                StatusCode::BAD_REQUEST,
                gateway_error::BAD_REQUEST,
                &why,
            )
        }
    }
}

fn not_spoken(gw: &GatewayState, api: Api) -> Response {
    live().refusal(Refusal::NotFound);
    let other = match gw.route.provider.kind {
        ProviderKind::Anthropic => "/v1/messages",
        ProviderKind::Openai => "/v1/chat/completions or /v1/responses",
    };
    refuse(
        gw,
        api,
        StatusCode::NOT_FOUND,
        native::NOT_FOUND,
        &format!(
            "{} is not served for this task: its model `{}` goes to provider `{}`, which speaks \
             {other}; give the task an agent speaking that API or a model of this one",
            api.path(),
            gw.route.model,
            gw.route.provider.name
        ),
    )
}

/// An agent's call, held (`llm::held`) until its answer is ready and the
/// servo free to take it.
async fn serve(gw: Arc<GatewayState>, api: Api, headers: &HeaderMap, body: Bytes) -> Response {
    let call = gw.held.call();
    let answer = serve_held(gw, api, headers, body).await;
    call.answer().await;
    answer
}

async fn serve_held(gw: Arc<GatewayState>, api: Api, headers: &HeaderMap, body: Bytes) -> Response {
    // A replayed agent's script speaks whichever API the agent does.
    let replayed = gw.replay.is_some();
    if !replayed && !api.served_by(gw.route.provider.kind) {
        return not_spoken(&gw, api);
    }
    if !replayed && gw.route.model.starts_with("replay:") {
        live().refusal(Refusal::InvalidRequest);
        return refuse(
            &gw,
            api,
            StatusCode::FORBIDDEN,
            gateway_error::BAD_REQUEST,
            "this task's model is a `replay:` script: its gateway makes no LLM call",
        );
    }
    // Headers by allow list too: of the agent's, only `anthropic-version`
    // and known `anthropic-beta` features go on (`send`).
    let beta = headers.get("anthropic-beta").and_then(|v| v.to_str().ok());
    let vet_started = Instant::now();
    let vetted = native::vet(api, &body, beta, gw.task_model());
    let vet_us = vet_started.elapsed().as_micros() as u64;
    let vetted = match vetted {
        Ok(v) => v,
        Err(why) => {
            live().refusal(Refusal::InvalidRequest);
            return refuse(
                &gw,
                api,
                StatusCode::BAD_REQUEST,
                gateway_error::BAD_REQUEST,
                &why,
            );
        }
    };
    if let Some(max) = native::steps_spent(&gw.budget, gw.meter.calls.load(Ordering::Relaxed)) {
        gw.meter.set_fatal(Reason::MaxSteps);
        return refuse(
            &gw,
            api,
            StatusCode::FORBIDDEN,
            native::MAX_STEPS,
            &format!("max_steps: this task's agent made its {max} LLM calls"),
        );
    }
    let route = &gw.route;
    // Its input bounded from above (`input_bound`): an earlier call's count
    // plus one token per byte added, or the request's bytes; when that
    // would refuse the call, the provider's own count (`count`).
    let call_shape = input_bound::Shape::of(&vetted.body, body.len() as u64);
    let input = gw.meter.input_bound(&call_shape);
    let want = shape::output_cap(
        &gw.upstream.policy,
        route.provider.kind,
        route.provider.max_output_tokens,
        vetted.asked,
    );
    let grant = match count::reserve(&gw, api, &vetted.body, input, want).await {
        Ok(g) => g,
        Err(why) => {
            info!(task_id = %gw.task_id, %why, "call refused");
            live().refusal(Refusal::Budget);
            gw.meter.set_fatal(Reason::Budget);
            return refuse(
                &gw,
                api,
                StatusCode::PAYMENT_REQUIRED,
                gateway_error::BUDGET,
                &why,
            );
        }
    };
    let streamed = vetted.stream;
    let upstream_body: Bytes = vetted
        .capped(api, grant.max_output.unwrap_or(want).max(1))
        .into();
    let call_id = uuid::Uuid::now_v7().to_string();
    let (task, id, tokens, cost) = (gw.task_id, call_id.clone(), grant.tokens, grant.cost_usd());
    let mut held = Held {
        gw: gw.clone(),
        grant: Some(grant),
        call: record::Call {
            call_id,
            api: api.name(),
            at_ms: crate::store::now_ms(),
            request: upstream_body.to_vec(),
            streamed,
            vet_us,
            ..record::Call::default()
        },
        shape: Some(call_shape),
    };
    ledger(&gw, move |l| l.reserve(task, &id, tokens, cost)).await;
    let started = Instant::now();
    let resp = match send(&gw, api, headers, upstream_body, streamed).await {
        Ok(r) => r,
        Err(refused) => {
            held.call.ended = Some(format!(
                "refused upstream: HTTP {}",
                refused.status().as_u16()
            ));
            held.settle(Some(Partial::default())).await;
            return refused;
        }
    };
    gw.meter.calls.fetch_add(1, Ordering::Relaxed);
    let is_stream = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !is_stream {
        let r = whole(&gw, api, resp, held).await;
        live().llm_call(&gw.route.provider.name, started.elapsed());
        return r;
    }
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(stream::relay(api, resp, tx, held, started));
    let body = Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }));
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// A whole answer: passed on redacted, settled from its usage.
async fn whole(gw: &GatewayState, api: Api, resp: reqwest::Response, mut held: Held) -> Response {
    let status = resp.status().as_u16();
    let bytes = match capped_bytes(resp, MAX_ANSWER).await {
        Ok(b) => b,
        Err(why) => {
            held.settle(None).await;
            let why = gw.upstream.redactor.redact(&why).into_owned();
            return refuse(
                gw,
                api,
                StatusCode::BAD_GATEWAY,
                gateway_error::MALFORMED,
                &why,
            );
        }
    };
    let usage = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .map(|v| stream::read_usage(&v))
        .filter(|u| u.input.is_some() || u.output.is_some());
    if usage.is_none() {
        gw.meter.malformed.fetch_add(1, Ordering::Relaxed);
    }
    let text = gw
        .upstream
        .redactor
        .redact(&String::from_utf8_lossy(&bytes))
        .into_owned();
    held.call.streamed = false;
    held.saw(&text);
    held.settle(usage).await;
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
        [(header::CONTENT_TYPE, "application/json")],
        text,
    )
        .into_response()
}

async fn capped_bytes(resp: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut s = resp.bytes_stream();
    while let Some(chunk) = s.next().await {
        let chunk = chunk.map_err(|e| {
            format!(
                "the provider's answer was cut off: {}",
                error_chain(&e.without_url())
            )
        })?;
        if out.len() + chunk.len() > max {
            return Err(format!("the provider's answer is longer than {max} bytes"));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Sends the call with the task's key (never the agent's), retrying what
/// is worth it before any byte was passed on. A refusal is answered in
/// the API's format: the provider's own error body (redacted) when it
/// gave one.
async fn send(
    gw: &GatewayState,
    api: Api,
    headers: &HeaderMap,
    body: Bytes,
    streamed: bool,
) -> Result<reqwest::Response, Response> {
    if let Some(script) = &gw.replay {
        return super::replay::answer(api, script, &body, streamed).map_err(|why| {
            refuse(
                gw,
                api,
                StatusCode::BAD_REQUEST,
                gateway_error::BAD_REQUEST,
                &why,
            )
        });
    }
    let provider = &gw.route.provider;
    let policy = &gw.upstream.policy;
    let sent = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let started = Instant::now();
    let mut last: (StatusCode, String, Option<String>);
    let mut attempt = 1;
    loop {
        // The same shared budget as the built-in loop's calls.
        let mut turn = provider_call::rate_turn(gw, body.len()).await;
        let mut req = gw
            .upstream
            .client
            .post(api.endpoint(&provider.base_url))
            .header(header::CONTENT_TYPE, "application/json")
            .body(body.clone());
        if streamed {
            req = req.header(header::ACCEPT, "text/event-stream");
        }
        req = crate::llm::probe::with_key(req, provider);
        if provider.kind == ProviderKind::Anthropic {
            req = req.header(
                "anthropic-version",
                native::anthropic_version(sent("anthropic-version")),
            );
            if let Ok(Some(beta)) = native::anthropic_beta(sent("anthropic-beta")) {
                req = req.header("anthropic-beta", beta);
            }
        }
        let (status, wish) = match req.send().await {
            Ok(r) if r.status().is_success() => {
                let observed = limit_headers::observe(r.headers(), SystemTime::now());
                gw.upstream.limits.answered(&mut turn, &observed);
                return Ok(r);
            }
            Ok(r) => {
                let status = r.status();
                let observed = limit_headers::observe(r.headers(), SystemTime::now());
                let wish = observed.retry_after;
                let text = capped_bytes(r, 64 * 1024).await.unwrap_or_default();
                let text = gw
                    .upstream
                    .redactor
                    .redact(&String::from_utf8_lossy(&text))
                    .into_owned();
                let why = format!(
                    "{} answered HTTP {}: {}",
                    provider.name,
                    status.as_u16(),
                    error_text(text.as_bytes())
                );
                let rate_limited = status.as_u16() == 429 && !retry::out_of_quota(&why);
                last = (status, why, Some(text));
                if rate_limited {
                    let pause = gw.upstream.limits.refused(&mut turn, &observed);
                    live().retry(&provider.name, RetryCause::RateLimited);
                    if started.elapsed() + pause < rate_patience(&gw.upstream) {
                        continue;
                    }
                    break;
                }
                gw.upstream.limits.answered(&mut turn, &observed);
                (Some(status.as_u16()), wish)
            }
            Err(e) => {
                let why = format!(
                    "{} unreachable: {}",
                    provider.name,
                    error_chain(&e.without_url())
                );
                last = (
                    StatusCode::SERVICE_UNAVAILABLE,
                    gw.upstream.redactor.redact(&why).into_owned(),
                    None,
                );
                (None, None)
            }
        };
        let verdict = status.map_or(Verdict::Retry, retry::verdict);
        if verdict == Verdict::Auth {
            live().refusal(Refusal::Auth);
            gw.meter.set_fatal(Reason::Auth);
            warn!(task_id = %gw.task_id, error = %last.1, "provider refused the key");
            break;
        }
        if verdict == Verdict::BadRequest {
            live().refusal(Refusal::BadRequest);
            warn!(task_id = %gw.task_id, error = %last.1, "provider refused an agent's request");
            break;
        }
        drop(turn);
        let wait = retry::backoff(attempt, wish);
        if attempt >= policy.max_attempts || started.elapsed() + wait > policy.max_retry_time {
            live().refusal(Refusal::Unavailable);
            break;
        }
        warn!(task_id = %gw.task_id, attempt, error = %last.1, "retrying LLM call");
        provider_call::retry_wait(gw, wait).await;
        attempt += 1;
    }
    let (status, why, body) = last;
    // The provider's own error body is in the API's format already.
    Err(
        match body.filter(|b| serde_json::from_str::<Value>(b).is_ok()) {
            Some(b) => (status, [(header::CONTENT_TYPE, "application/json")], b).into_response(),
            None => refuse(gw, api, status, gateway_error::UNAVAILABLE, &why),
        },
    )
}
