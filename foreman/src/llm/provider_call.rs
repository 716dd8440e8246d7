//! One call to the provider for the built-in loop: its tries and retries
//! (`retry`), its turn in the rate-limit budget every task shares
//! (`limits`), and the answer read back into the OpenAI format.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::Response;
use saheeli_protocol::Reason;
use saheeli_protocol::chat::{ChatResponse, ChatUsage, gateway_error};
use saheeli_protocol::context::Cache;
use serde_json::Value;
use tracing::{info, warn};

use super::held::Why;
use super::limit_headers::{self, Observed};
use crate::config::ProviderKind;
use crate::llm::GatewayState;
use crate::llm::Upstream;
use crate::llm::anthropic;
use crate::llm::assemble;
use crate::llm::retry;
use crate::llm::retry::Verdict;
use crate::llm::task::error_response;
use crate::llm::task::json_response;
use crate::llm::usage;
use crate::metrics::{Refusal, RetryCause, live};
use crate::text::error_chain;

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
    req = crate::llm::probe::with_key(req, provider);
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
pub(crate) async fn call(gw: &GatewayState, body: Bytes) -> (Response, Option<ChatUsage>) {
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
        retry_wait(gw, wait).await;
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
pub(crate) fn rate_patience(up: &Upstream) -> Duration {
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
pub(crate) async fn rate_turn(gw: &GatewayState, body_bytes: usize) -> super::limits::Turn<'_> {
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

/// The wait before a call's next try; what its hold waits for meanwhile
/// (`held`).
pub(crate) async fn retry_wait(gw: &GatewayState, wait: Duration) {
    gw.held.note(Why::Retry);
    tokio::time::sleep(wait).await;
    gw.held.note(Why::Model);
}

/// A call starts (`Some`: for about this long) or stops waiting for its
/// turn in the provider's budget: the metrics, and the task's row that
/// `task status` reads (`waiting for provider rate limit`).
pub(crate) fn rate_waiting(gw: &GatewayState, wait: Option<Duration>) {
    let provider = &gw.route.provider.name;
    gw.held.note(wait.map_or(Why::Model, |_| Why::RateLimit));
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
pub(crate) fn answer(gw: &GatewayState, bytes: &[u8]) -> (Response, Option<ChatUsage>) {
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
pub(crate) fn error_text(bytes: &[u8]) -> String {
    serde_json::from_slice::<Value>(bytes)
        .ok()
        .and_then(|v| v.get("error")?.get("message")?.as_str().map(String::from))
        .unwrap_or_else(|| String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned())
}
