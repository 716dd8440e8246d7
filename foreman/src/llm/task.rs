//! One task's side of the LLM proxy: its route and budget, its meter,
//! its live followers and, for a third-party agent answered by a
//! `replay:` script, the script; answers redacted for every key, and the
//! ledger written off the async threads.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use saheeli_protocol::TaskId;
use saheeli_protocol::chat::gateway_error;
use tracing::warn;

use super::ledger::{self, Ledger};
use super::live::LiveBus;
use super::meter::Budget;
use super::meter::Meter;
use super::pricing;
use super::upstream::Upstream;
use crate::config::providers::Route;
use crate::llm::api::TaskModel;
use crate::metrics::{Refusal, live};

pub(crate) struct GatewayState {
    pub(crate) task_id: TaskId,
    pub(crate) upstream: Arc<Upstream>,
    pub(crate) route: Route,
    /// The route's price with its cache rates resolved (None: unpriced).
    pub(crate) rates: Option<pricing::Rates>,
    pub(crate) budget: Budget,
    /// The task asked for per-token log probabilities (`logprobs: true`).
    pub(crate) logprobs: bool,
    /// What its calls carry as OpenAI's `prompt_cache_key` (a fork's
    /// parent's, so that it reads the cached prefix).
    pub(crate) cache_key: String,
    pub(crate) meter: Arc<Meter>,
    /// A third-party agent's `replay:` script: the gateway answers its
    /// calls from it instead of a provider (`vendor::replay`).
    pub(crate) replay: Option<Arc<saheeli_protocol::ReplayScript>>,
    /// The task's live followers (`live`).
    pub(crate) live: Arc<LiveBus>,
    /// The servo's chats' items as its last call had them (`input_bound`).
    pub(crate) chat_items: super::input_bound::ChatItems,
    /// Ledger and trajectory writes left to finish after an answer went
    /// back; the gateway's stop waits for them.
    pub(crate) writes: tokio_util::task::TaskTracker,
    /// The desk's inbox look for the servo's own calls (set by the routes,
    /// for the built-in loop only).
    pub(crate) inbox: std::sync::OnceLock<Arc<dyn super::inbox::InboxLook>>,
    /// The agent's calls held here, which the supervisor's freezer reads
    /// (`held`, issue 51).
    pub(crate) held: Arc<super::held::Held>,
}

impl GatewayState {
    /// The model the task's agent may name (`native::vet`).
    pub(crate) fn task_model(&self) -> TaskModel<'_> {
        TaskModel {
            provider: &self.route.provider.name,
            model: &self.route.model,
        }
    }
}
/// A JSON answer for the container, redacted for every key.
pub(crate) fn json_response(
    gw: &GatewayState,
    status: StatusCode,
    body: &impl serde::Serialize,
) -> Response {
    let text = serde_json::to_string(body).expect("answers serialize");
    let text = gw.upstream.redactor.redact(&text).into_owned();
    (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}

pub(crate) fn error_response(
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
pub(crate) async fn not_found(
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

/// A ledger write started now on a blocking thread (before the caller
/// does anything else), awaited by the future returned; a failure is
/// logged, not fatal (the meter in memory still enforces the budget).
pub(crate) fn ledger_now(
    gw: &GatewayState,
    f: impl FnOnce(&Ledger) -> Result<(), ledger::LedgerError> + Send + 'static,
) -> impl std::future::Future<Output = ()> + '_ {
    let l = gw.upstream.ledger.clone();
    let write = tokio::task::spawn_blocking(move || f(&l));
    async move {
        match write.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(task_id = %gw.task_id, error = %e, "call ledger not written"),
            Err(e) => warn!(task_id = %gw.task_id, error = %e, "call ledger thread failed"),
        }
    }
}

/// Runs a ledger write off the async threads; a failure is logged, not
/// fatal (the meter in memory still enforces the budget).
pub(crate) async fn ledger(
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
