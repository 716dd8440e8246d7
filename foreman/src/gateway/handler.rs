//! Serving one request: only the known path, a typed request built here,
//! the budget reserved before forwarding and settled after, answers and
//! errors redacted.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use saheeli_protocol::chat::{ChatRequest, ChatResponse, ChatUsage, gateway_error};
use saheeli_protocol::context::Cache;
use saheeli_protocol::{Reason, TaskId};
use serde_json::Value;
use tracing::{info, warn};

use super::limit_headers::{self, Observed};
use super::*;
use crate::config::ProviderKind;
use crate::metrics::{Refusal, RetryCause, live};

pub(super) struct GatewayState {
    pub(super) task_id: TaskId,
    pub(super) upstream: Arc<Upstream>,
    pub(super) route: Route,
    /// The route's price with its cache rates resolved (None: unpriced).
    pub(super) rates: Option<pricing::Rates>,
    pub(super) budget: Budget,
    pub(super) meter: Arc<Meter>,
    pub(super) desk: DeskLink,
    /// The task's live followers (`live`).
    pub(super) live: Arc<super::live::LiveBus>,
}

impl GatewayState {
    /// The model the task's agent may name (`native::vet`).
    pub(super) fn task_model(&self) -> super::native::TaskModel<'_> {
        super::native::TaskModel {
            provider: &self.route.provider.name,
            model: &self.route.model,
        }
    }
}

/// A JSON answer for the container, redacted for every key.
pub(super) fn json_response(
    gw: &GatewayState,
    status: StatusCode,
    body: &impl serde::Serialize,
) -> Response {
    let text = serde_json::to_string(body).expect("answers serialize");
    let text = gw.upstream.redactor.redact(&text).into_owned();
    (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}

pub(super) fn error_response(
    gw: &GatewayState,
    status: StatusCode,
    kind: &str,
    message: &str,
) -> Response {
    let body = serde_json::json!({"error": {"message": message, "type": kind}});
    json_response(gw, status, &body)
}

/// Any other path or method: refused.
/// The body is read first: answering before it is, hyper would close the
/// connection under a client still sending (a broken pipe, not a 404).
pub(super) async fn not_found(
    State(gw): State<Arc<GatewayState>>,
    uri: axum::http::Uri,
    _body: Bytes,
) -> Response {
    live().refusal(Refusal::NotFound);
    error_response(
        &gw,
        StatusCode::NOT_FOUND,
        gateway_error::BAD_REQUEST,
        &format!(
            "`{}` is not served; the gateway serves POST /v1/chat/completions, \
             /v1/responses, /v1/messages and /v1/messages/count_tokens (each for the providers \
             that speak it) and Saheeli's own /saheeli/v1 routes",
            uri.path()
        ),
    )
}

/// An error and its causes on one line (reqwest's own message is terse).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cur = c.source();
    }
    s
}

/// Runs a ledger write off the async threads; a failure is logged, not
/// fatal (the meter in memory still enforces the budget).
pub(super) async fn ledger(
    gw: &GatewayState,
    f: impl FnOnce(&Ledger) -> Result<(), ledger::LedgerError> + Send + 'static,
) {
    let l = gw.upstream.ledger.clone();
    match tokio::task::spawn_blocking(move || f(&l)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => warn!(task_id = %gw.task_id, error = %e, "call ledger not written"),
        Err(e) => warn!(task_id = %gw.task_id, error = %e, "call ledger thread failed"),
    }
}

pub(super) async fn chat_completions(
    State(gw): State<Arc<GatewayState>>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    // A streamed chat is a third-party agent's (issue 25): passed through
    // as the agent wrote it, metered from the stream; so is every chat of
    // an agent answered by a `replay:` script.
    let streamed = serde_json::from_slice::<Value>(&body)
        .is_ok_and(|v| v.get("stream") == Some(&Value::Bool(true)));
    if streamed || gw.desk.replay.is_some() {
        return passthrough::chat_native(gw, &headers, body).await;
    }
    let req: ChatRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            live().refusal(Refusal::InvalidRequest);
            return error_response(
                &gw,
                StatusCode::BAD_REQUEST,
                gateway_error::BAD_REQUEST,
                &format!("request is not a chat completion: {e}"),
            );
        }
    };
    // A replay task's turns come from its script: it has no business
    // upstream, and its gateway must not spend the operator's key for
    // whoever posts here (case 26).
    if gw.route.model.starts_with("replay:") {
        live().refusal(Refusal::InvalidRequest);
        return error_response(
            &gw,
            StatusCode::FORBIDDEN,
            gateway_error::BAD_REQUEST,
            "this task's model is a `replay:` script: its gateway makes no LLM call, and nothing \
             was sent to any provider",
        );
    }
    if !req.model.is_empty() && !gw.task_model().is(&req.model) {
        live().refusal(Refusal::InvalidRequest);
        let why = gw.task_model().refusal(&format!("`{}`", req.model));
        return error_response(
            &gw,
            StatusCode::BAD_REQUEST,
            gateway_error::BAD_REQUEST,
            &why,
        );
    }
    forward(&gw, req).await
}

/// Forwards a typed request for the task, within its budget: reserved
/// first, settled with the billed usage, written to the ledger. Used by
/// the servo's calls and by the assessor's (`verify`).
pub(super) async fn forward(gw: &GatewayState, req: ChatRequest) -> Response {
    let route = &gw.route;
    // The request forwarded is built here, from typed fields only: the
    // task's model, one choice, no stream, and the output cap set below.
    let asked = req.max_completion_tokens.or(req.max_tokens);
    let mut up = ChatRequest {
        model: route.model.clone(),
        messages: req.messages,
        tools: req.tools,
        ..Default::default()
    };
    shape::conservative(&mut up);
    // One task's calls share a cache key, so OpenAI routes them to where
    // their prefix is cached (issue 26).
    if route.provider.kind == ProviderKind::Openai && gw.budget.cache != Cache::Off {
        up.prompt_cache_key = Some(gw.task_id.to_string());
    }
    // The input this call sends, bounded from above: no tokenizer makes
    // more tokens than bytes, so the request's size in bytes is a safe
    // estimate (bytes / 4 under-counted dense text 2x, case 25). The meter
    // settles the real count after the call.
    let input = serde_json::to_vec(&up).map_or(0, |b| b.len()) as u64;
    // Every call carries an output cap, budget or not (issue 27).
    let want = shape::output_cap(
        &gw.upstream.policy,
        route.provider.kind,
        route.provider.max_output_tokens,
        asked,
    );
    let grant = match gw.meter.reserve(&gw.budget, gw.rates, input, Some(want)) {
        Ok(g) => g,
        Err(why) => {
            info!(task_id = %gw.task_id, %why, "call refused");
            live().refusal(Refusal::Budget);
            gw.meter.set_fatal(Reason::Budget);
            return error_response(
                gw,
                StatusCode::PAYMENT_REQUIRED,
                gateway_error::BUDGET,
                &why,
            );
        }
    };
    let max = grant.max_output.unwrap_or(want).max(1);
    let upstream_body: Value = match route.provider.kind {
        ProviderKind::Openai => {
            // Keep the field the caller used: newer models refuse the other.
            if req.max_completion_tokens.is_some() {
                up.max_completion_tokens = Some(max);
            } else {
                up.max_tokens = Some(max);
            }
            serde_json::to_value(&up).expect("requests serialize")
        }
        ProviderKind::Anthropic => anthropic::request(&up, &route.model, max, gw.budget.cache),
    };
    // Streamed, so that the text is shown as it comes (issue 29); read
    // back into the whole answer (`assemble`).
    let mut upstream_body = upstream_body;
    if gw.upstream.policy.stream {
        assemble::ask_streamed(&mut upstream_body, route.provider.kind);
    }
    let upstream_body: Bytes = upstream_body.to_string().into();
    let call_id = uuid::Uuid::now_v7().to_string();
    let (task, id, tokens, cost) = (gw.task_id, call_id.clone(), grant.tokens, grant.cost_usd());
    // Armed before the reservation is written: a drop from here on
    // releases the grant (the gateway's stop settles a row written late).
    let mut pending = Pending {
        gw,
        grant: Some(grant),
        call_id: call_id.clone(),
    };
    ledger(gw, move |l| l.reserve(task, &id, tokens, cost)).await;
    let started = Instant::now();
    let (response, usage) = call(gw, upstream_body).await;
    live().llm_call(&route.provider.name, started.elapsed());
    let billed = usage.map(|u| (u.prompt_tokens, u.completion_tokens));
    let response = record::chat_call(gw, call_id.clone(), up, response, billed).await;
    let grant = pending.grant.take().expect("settled once");
    let usage = usage.unwrap_or_default();
    let cost_micro = gw.meter.settle(&grant, usage, gw.rates);
    ledger(gw, move |l| {
        l.settle(&call_id, &usage, cost_micro as f64 / 1e6)
    })
    .await;
    response
}

/// A call reserved and not yet settled. Dropped unsettled (the servo
/// killed mid-call drops the request's future), it is settled at its
/// reservation, counted as input in the task's meter and ledger: its row
/// stayed `in_flight` and its tokens were missing from usage (issue 27).
struct Pending<'a> {
    gw: &'a GatewayState,
    grant: Option<meter::Grant>,
    call_id: String,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(grant) = self.grant.take() {
            cut_off(self.gw, &grant, &self.call_id);
        }
    }
}

/// Settles a call cut off (its request dropped, its stream cut, its
/// usage never reported) at its reservation, counted as input in the
/// task's meter and ledger (issue 27).
pub(super) fn cut_off(gw: &GatewayState, grant: &meter::Grant, call_id: &str) {
    let usage = ChatUsage {
        prompt_tokens: grant.tokens,
        completion_tokens: 0,
        total_tokens: grant.tokens,
        ..Default::default()
    };
    gw.meter.settle(grant, usage, gw.rates);
    let (l, id) = (gw.upstream.ledger.clone(), call_id.to_string());
    let task_id = gw.task_id;
    // The gateway's stop settles whatever this cannot write in time.
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn_blocking(move || {
            if let Err(e) = l.settle_cut(&id) {
                warn!(%task_id, error = %e, "a call cut off not settled");
            }
        });
    }
    info!(%task_id, %call_id, "call cut off: settled at its reservation");
}

/// How one upstream try went.
enum Try {
    /// A 2xx answer's body.
    Answered(Bytes),
    /// Anything else: what to do about it, the server's wish for a wait,
    /// and what happened (not yet redacted).
    Failed {
        verdict: Verdict,
        /// The HTTP status, when there was an answer.
        status: Option<u16>,
        wish: Option<Duration>,
        why: String,
    },
}

/// Sends the request once to the task's provider, with its key: how it
/// went, and what the answer's headers said about the rate limits.
async fn try_once(
    gw: &GatewayState,
    body: &Bytes,
    turn: &mut super::limits::Turn<'_>,
) -> (Try, Observed) {
    let mut observed = Observed::default();
    let t = try_sending(gw, body, &mut observed, turn).await;
    (t, observed)
}

async fn try_sending(
    gw: &GatewayState,
    body: &Bytes,
    observed: &mut Observed,
    turn: &mut super::limits::Turn<'_>,
) -> Try {
    let provider = &gw.route.provider;
    let mut req = gw
        .upstream
        .client
        .post(provider.endpoint())
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.clone());
    if let Some(key) = &provider.key {
        req = match provider.kind {
            ProviderKind::Openai => req.bearer_auth(&key.0),
            ProviderKind::Anthropic => req.header("x-api-key", &key.0),
        };
    }
    if provider.kind == ProviderKind::Anthropic {
        req = req.header("anthropic-version", "2023-06-01");
        if gw.budget.cache == Cache::OneHour {
            req = req.header("anthropic-beta", anthropic::EXTENDED_TTL_BETA);
        }
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            return Try::Failed {
                verdict: Verdict::Retry,
                status: None,
                wish: None,
                why: format!(
                    "{} unreachable: {}",
                    provider.name,
                    error_chain(&e.without_url())
                ),
            };
        }
    };
    let status = resp.status().as_u16();
    *observed = limit_headers::observe(resp.headers(), SystemTime::now());
    let wish = observed.retry_after;
    // A success's headers are what the calls waiting on this provider's
    // budget need (its first answer's above all: the probe's): they go on
    // now, not once the whole answer has been generated and read.
    if retry::verdict(status) == Verdict::Success {
        gw.upstream.limits.answered(turn, observed);
    }
    let streamed = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if streamed && retry::verdict(status) == Verdict::Success {
        return match assemble::read(gw, resp).await {
            Ok(bytes) => Try::Answered(bytes),
            Err(why) => Try::Failed {
                verdict: Verdict::Retry,
                status: None,
                wish: None,
                why: format!("{} {why}", provider.name),
            },
        };
    }
    match resp.bytes().await {
        Err(e) => Try::Failed {
            verdict: Verdict::Retry,
            status: None,
            wish: None,
            why: format!(
                "{} response cut off: {}",
                provider.name,
                error_chain(&e.without_url())
            ),
        },
        Ok(bytes) if retry::verdict(status) == Verdict::Success => Try::Answered(bytes),
        Ok(bytes) => Try::Failed {
            verdict: retry::verdict_of(status, &bytes),
            status: Some(status),
            wish,
            why: format!(
                "{} answered HTTP {status}: {}",
                provider.name,
                error_text(&bytes)
            ),
        },
    }
}

/// One call with retries: the answer for the servo, and the usage billed
/// (None when the provider billed nothing). Each try waits its turn in the
/// provider's shared budget (`limits`); a 429 that is a rate limit sends
/// the call back to the queue without counting as a failed attempt, for
/// as long as the servo waits for its answer (`rate_patience`).
pub(super) async fn call(gw: &GatewayState, body: Bytes) -> (Response, Option<ChatUsage>) {
    let policy = &gw.upstream.policy;
    let provider = &gw.route.provider;
    let started = Instant::now();
    let mut last: String;
    let mut previous: Option<String> = None;
    let mut attempt = 1;
    loop {
        let mut turn = rate_turn(gw, body.len()).await;
        let (outcome, observed) = try_once(gw, &body, &mut turn).await;
        let (mut verdict, status, wish) = match outcome {
            // Its budget heard the headers already.
            Try::Answered(bytes) => return answer(gw, &bytes),
            Try::Failed {
                verdict,
                status,
                wish,
                why,
            } => {
                // Whatever the provider said may hold the key: never log
                // or pass it on raw.
                last = gw.upstream.redactor.redact(&why).into_owned();
                (verdict, status, wish)
            }
        };
        if status == Some(429) && !retry::out_of_quota(&last) {
            let pause = gw.upstream.limits.refused(&mut turn, &observed);
            live().retry(&provider.name, RetryCause::RateLimited);
            if started.elapsed() + pause < rate_patience(&gw.upstream) {
                info!(task_id = %gw.task_id, pause_ms = pause.as_millis() as u64, "provider rate limit: the call waits its turn again");
                continue;
            }
            return (still_rate_limited(gw, &last, started.elapsed()), None);
        }
        if status.is_some() {
            gw.upstream.limits.answered(&mut turn, &observed);
        }
        drop(turn);
        if retry::repeated_invalid(status, &last, previous.as_deref()) {
            verdict = Verdict::BadRequest;
        }
        previous = Some(last.clone());
        match verdict {
            Verdict::Auth => {
                live().refusal(Refusal::Auth);
                gw.meter.set_fatal(Reason::Auth);
                warn!(task_id = %gw.task_id, error = %last, "provider refused the key");
                let hint = match &provider.key_env {
                    Some(var) => format!("{last} (check {var})"),
                    None => format!(
                        "{last} (provider `{}` has no `api_key_env` in config.yaml: name the \
                         variable holding its key there)",
                        provider.name
                    ),
                };
                return (
                    error_response(gw, StatusCode::UNAUTHORIZED, gateway_error::AUTH, &hint),
                    None,
                );
            }
            Verdict::BadRequest => {
                live().refusal(Refusal::BadRequest);
                gw.meter.set_fatal(Reason::BadRequest);
                warn!(task_id = %gw.task_id, error = %last, "provider refused the request");
                return (
                    error_response(
                        gw,
                        StatusCode::BAD_REQUEST,
                        gateway_error::BAD_REQUEST,
                        &last,
                    ),
                    None,
                );
            }
            Verdict::ContextLength => {
                // Not fatal: the servo compacts its conversation and asks again.
                live().refusal(Refusal::ContextLength);
                info!(task_id = %gw.task_id, error = %last, "the request did not fit the model's window");
                let kind = gateway_error::CONTEXT_LENGTH;
                return (
                    error_response(gw, StatusCode::BAD_REQUEST, kind, &last),
                    None,
                );
            }
            Verdict::Retry | Verdict::Success => {}
        }
        let wait = retry::backoff(attempt, wish);
        if attempt >= policy.max_attempts || started.elapsed() + wait > policy.max_retry_time {
            break;
        }
        warn!(task_id = %gw.task_id, attempt, wait_ms = wait.as_millis() as u64, error = %last, "retrying LLM call");
        live().retry(&provider.name, RetryCause::of(status));
        tokio::time::sleep(wait).await;
        attempt += 1;
    }
    live().refusal(Refusal::Unavailable);
    let why = format!("giving up after {:.0?}: {last}", started.elapsed());
    (
        error_response(
            gw,
            StatusCode::SERVICE_UNAVAILABLE,
            gateway_error::UNAVAILABLE,
            &why,
        ),
        None,
    )
}

/// How long one call may go on waiting for the provider's rate limit:
/// the servo gives up on a call after `servo_request_timeout`, and one
/// more try must fit.
pub(super) fn rate_patience(up: &Upstream) -> Duration {
    up.servo_request_timeout()
        .saturating_sub(up.policy.request_timeout + Duration::from_secs(30))
}

/// A call still rate-limited after `rate_patience`: a 429 the servo tries
/// again (not a typed, final error: a rate limit never fails a task on
/// its own).
fn still_rate_limited(gw: &GatewayState, last: &str, waited: Duration) -> Response {
    let why = format!("still rate-limited after {waited:.0?}: {last}");
    let mut r = error_response(
        gw,
        StatusCode::TOO_MANY_REQUESTS,
        gateway_error::RATE_LIMITED,
        &why,
    );
    r.headers_mut().insert(
        header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("5"),
    );
    r
}

/// Waits for a call's turn in the provider's budget that every task
/// shares (issue 26), with the request's bytes / 4 as its input tokens
/// (roughly: the meter's bound, bytes, is far above what a provider counts
/// against its limit); a wait is counted in the metrics.
pub(super) async fn rate_turn(gw: &GatewayState, body_bytes: usize) -> super::limits::Turn<'_> {
    let provider = &gw.route.provider.name;
    let key = (provider.clone(), gw.route.model.clone());
    let turn = gw
        .upstream
        .limits
        .turn(key, body_bytes as u64 / 4, |w| rate_waiting(gw, w))
        .await;
    if !turn.waited.is_zero() {
        live().rate_limit_waited(provider, turn.waited);
    }
    turn
}

/// A call starts (`Some`: for about this long) or stops waiting for its
/// turn in the provider's budget: the metrics, and the task's row that
/// `task status` reads (`waiting for provider rate limit`).
pub(super) fn rate_waiting(gw: &GatewayState, wait: Option<Duration>) {
    let provider = &gw.route.provider.name;
    live().rate_limit_wait(provider, wait);
    let until = wait.map(|w| crate::store::now_ms() + w.as_millis() as i64);
    let (l, task_id) = (gw.upstream.ledger.clone(), gw.task_id);
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn_blocking(move || {
            if let Err(e) = l.rate_wait(task_id, until) {
                warn!(%task_id, error = %e, "the rate-limit wait not recorded");
            }
        });
    }
}

/// A successful response in the OpenAI format, and the usage it billed.
pub(super) fn answer(gw: &GatewayState, bytes: &[u8]) -> (Response, Option<ChatUsage>) {
    let m = &gw.meter;
    m.calls.fetch_add(1, Ordering::Relaxed);
    let parsed: Result<Value, String> = serde_json::from_slice(bytes).map_err(|e| e.to_string());
    let response: Result<ChatResponse, String> = match (&parsed, gw.route.provider.kind) {
        (Err(e), _) => Err(format!("not JSON: {e}")),
        (Ok(v), ProviderKind::Openai) => {
            serde_json::from_value(v.clone()).map_err(|e| e.to_string())
        }
        (Ok(v), ProviderKind::Anthropic) => anthropic::response(v),
    };
    match response {
        Ok(mut r) if !r.choices.is_empty() => {
            // One choice, whatever the provider sent.
            r.choices.truncate(1);
            // The provider's own usage shape, cached tokens included.
            let billed = parsed
                .as_ref()
                .ok()
                .and_then(|v| usage::of_body(gw.route.provider.kind, v));
            r.usage = billed.or(r.usage);
            let usage = r.usage.unwrap_or_default();
            (json_response(gw, StatusCode::OK, &r), Some(usage))
        }
        other => {
            // Billed all the same: count what usage the body reports.
            let usage = parsed
                .ok()
                .and_then(|v| usage::of_body(gw.route.provider.kind, &v));
            m.malformed.fetch_add(1, Ordering::Relaxed);
            live().refusal(Refusal::Malformed);
            let why = other.err().unwrap_or_else(|| "no choices".into());
            let why = gw.upstream.redactor.redact(&why).into_owned();
            warn!(task_id = %gw.task_id, error = %why, "malformed provider response");
            (
                error_response(
                    gw,
                    StatusCode::BAD_GATEWAY,
                    gateway_error::MALFORMED,
                    &format!("the provider's response could not be used: {why}"),
                ),
                usage,
            )
        }
    }
}

/// The message of an OpenAI or Anthropic error body, else its start.
pub(super) fn error_text(bytes: &[u8]) -> String {
    serde_json::from_slice::<Value>(bytes)
        .ok()
        .and_then(|v| v.get("error")?.get("message")?.as_str().map(String::from))
        .unwrap_or_else(|| String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned())
}

/// `GET /saheeli/v1/session-key`: the key this task's servo seals its
/// session with. Only the servo can ask: in a separated container the
/// socket is its uid's alone (a remote servo presents its token).
/// A retry that goes on from the attempt before it (issue 30) is given
/// that attempt's key too, to check its session file.
pub(super) async fn session_key(State(gw): State<Arc<GatewayState>>) -> Response {
    let id = gw.task_id.to_string();
    let resumes = match gw
        .desk_db(move |s, _| s.require(&id).map(|t| t.spec.resume().map(|r| r.from)))
        .await
    {
        Ok(r) => r,
        Err(refused) => return refused,
    };
    let key = saheeli_protocol::human::SessionKey {
        key: gw.upstream.session_secret.for_task(gw.task_id),
        resume_key: resumes.map(|from| gw.upstream.session_secret.for_task(from)),
    };
    (StatusCode::OK, axum::Json(key)).into_response()
}
