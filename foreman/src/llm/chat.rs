//! The built-in loop's route, `POST /v1/chat/completions`: only a typed
//! request built here goes on, the budget reserved before it is forwarded
//! and settled after, the answer and errors redacted.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use saheeli_protocol::Reason;
use saheeli_protocol::chat::{ChatRequest, ChatUsage, gateway_error};
use saheeli_protocol::context::Cache;
use serde_json::Value;
use tracing::{info, warn};

use crate::config::ProviderKind;
use crate::llm::GatewayState;
use crate::llm::anthropic;
use crate::llm::api::Api;
use crate::llm::assemble;
use crate::llm::count;
use crate::llm::input_bound;
use crate::llm::meter;
use crate::llm::provider_call::call;
use crate::llm::record;
use crate::llm::shape;
use crate::llm::task::error_response;
use crate::llm::task::ledger_now;
use crate::metrics::{Refusal, live};

/// The servo's own call: its typed request (as read from the body),
/// checked, then forwarded (`forward`). A streamed chat, or any chat of an agent answered by a
/// `replay:` script, is a third-party agent's and is passed through
/// instead (`vendor::passthrough::chat_completions` decides).
pub(crate) async fn typed(
    gw: Arc<GatewayState>,
    req: Result<ChatRequest, serde_json::Error>,
) -> Response {
    let req: ChatRequest = match req {
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
    if let Some(why) = shape::foreign_tool(&req) {
        live().refusal(Refusal::InvalidRequest);
        return error_response(
            &gw,
            StatusCode::BAD_REQUEST,
            gateway_error::BAD_REQUEST,
            &why,
        );
    }
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
pub(crate) async fn forward(gw: &GatewayState, req: ChatRequest) -> Response {
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
    // their prefix is cached (issue 26); a fork's are its parent's.
    if route.provider.kind == ProviderKind::Openai && gw.budget.cache != Cache::Off {
        up.prompt_cache_key = Some(gw.cache_key.clone());
    }
    // Anthropic has no per-token log probabilities to ask for.
    if route.provider.kind == ProviderKind::Openai && gw.logprobs {
        up.logprobs = Some(true);
    }
    // Every call carries an output cap, budget or not (issue 27).
    let want = shape::output_cap(
        &gw.upstream.policy,
        route.provider.kind,
        route.provider.max_output_tokens,
        asked,
    );
    let completion_field = req.max_completion_tokens.is_some();
    // The input this call sends, bounded from above (`input_bound`): what
    // the provider billed an earlier call of this conversation plus one
    // token per byte added, or the request's bytes (no tokenizer makes
    // more tokens than bytes; bytes / 4 under-counted dense text 2x, case
    // 25); when that bound would refuse the call, the provider's own
    // count (`count`). The meter settles the real count after the call.
    let mut body = Body::build(gw, &mut up, completion_field, want);
    let input = gw.meter.input_bound(&body.shape);
    let reserved = match gw.meter.reserve(&gw.budget, gw.rates, input, Some(want)) {
        Ok(grant) => Ok(grant),
        Err(why) => match serde_json::from_slice::<Value>(&body.plain) {
            Ok(Value::Object(map)) => count::reserve(gw, body.api(gw), &map, input, want).await,
            _ => Err(why),
        },
    };
    let grant = match reserved {
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
    if max != want {
        // Cut to what the budget leaves; bounded as it was asked for.
        let shape = std::mem::take(&mut body.shape);
        body = Body::build(gw, &mut up, completion_field, max);
        body.shape = shape;
    }
    let call_id = uuid::Uuid::now_v7().to_string();
    let (task, id, tokens, cost) = (gw.task_id, call_id.clone(), grant.tokens, grant.cost_usd());
    // Armed before the reservation is written: a drop from here on
    // releases the grant (the gateway's stop settles a row written late).
    let mut pending = Pending {
        gw,
        grant: Some(grant),
        call_id: call_id.clone(),
    };
    // The reservation is written while the body is put together, and
    // before anything is sent: a foreman that dies mid-call leaves it
    // `in_flight`, counted at its reservation when the task is adopted.
    let reserving = ledger_now(gw, move |l| l.reserve(task, &id, tokens, cost));
    // Streamed, so that the text is shown as it comes (issue 29); read
    // back into the whole answer (`assemble`).
    let upstream_body = body.sent(gw);
    reserving.await;
    let started = Instant::now();
    let (response, usage) = call(gw, upstream_body).await;
    live().llm_call(&route.provider.name, started.elapsed());
    let billed = usage.map(|u| (u.prompt_tokens, u.completion_tokens));
    let call_shape = std::mem::take(&mut body.shape);
    let request = body.recorded(up);
    let (response, line) = record::chat_call(gw, call_id.clone(), request, response, billed).await;
    // No await from here on: the meter and the ledger settle together.
    let grant = pending.grant.take().expect("settled once");
    // The meter settles now: the next call is reserved against it.
    if let Some(u) = usage {
        gw.meter.counted(call_shape, u.prompt_tokens);
    }
    let usage = usage.unwrap_or_default();
    let cost_micro = gw.meter.settle(&grant, usage, gw.rates);
    // The ledger's row, then the trajectory's line, are written off the
    // answer's path on one thread: a foreman that dies before the row is
    // settled counts the call at its reservation, as one that died
    // waiting for the answer did. The gateway's stop waits for them
    // before it settles what is still in flight.
    let (l, task_id) = (gw.upstream.ledger.clone(), gw.task_id);
    gw.writes.spawn_blocking(move || {
        if let Err(e) = l.settle(&call_id, &usage, cost_micro as f64 / 1e6) {
            warn!(%task_id, error = %e, "call ledger not written");
        }
        if let Some(line) = line {
            line.write();
        }
    });
    response
}

/// The body of one typed call as it is forwarded.
struct Body {
    /// Without the stream asked for: the bytes that bound the input, and
    /// for OpenAI what the trajectory records.
    plain: Vec<u8>,
    shape: input_bound::Shape,
    /// Anthropic's Messages body (OpenAI's is the typed request itself).
    messages: Option<Value>,
}

impl Body {
    /// The body with an output cap of `max`. OpenAI's is the typed request
    /// (the cap in the field the caller used: newer models refuse the
    /// other), its shape from the items the task's last call had.
    fn build(gw: &GatewayState, up: &mut ChatRequest, completion_field: bool, max: u64) -> Body {
        let route = &gw.route;
        match route.provider.kind {
            ProviderKind::Openai => {
                if completion_field {
                    up.max_completion_tokens = Some(max);
                } else {
                    up.max_tokens = Some(max);
                }
                let plain = serde_json::to_vec(&*up).expect("requests serialize");
                let shape = gw.chat_items.shape(up, plain.len() as u64);
                Body {
                    plain,
                    shape,
                    messages: None,
                }
            }
            ProviderKind::Anthropic => {
                let v = anthropic::request(up, &route.model, max, gw.budget.cache);
                let plain = serde_json::to_vec(&v).expect("requests serialize");
                let shape = match &v {
                    Value::Object(map) => input_bound::Shape::of(map, plain.len() as u64),
                    _ => input_bound::Shape::bytes_only(plain.len() as u64),
                };
                Body {
                    plain,
                    shape,
                    messages: Some(v),
                }
            }
        }
    }

    fn api(&self, gw: &GatewayState) -> Api {
        match gw.route.provider.kind {
            ProviderKind::Openai => Api::Chat,
            ProviderKind::Anthropic => Api::Messages,
        }
    }

    /// What is sent: streamed when the policy says so.
    fn sent(&mut self, gw: &GatewayState) -> Bytes {
        let kind = gw.route.provider.kind;
        match (&mut self.messages, gw.upstream.policy.stream) {
            (_, false) => Bytes::from(self.plain.clone()),
            (None, true) => Bytes::from(assemble::streamed(&self.plain, kind)),
            (Some(v), true) => {
                let mut v = v.clone();
                assemble::ask_streamed(&mut v, kind);
                Bytes::from(v.to_string())
            }
        }
    }

    /// The request the trajectory records, as the gateway built it
    /// (chat-shaped, whatever the provider), encoded off the answer's path.
    fn recorded(self, up: ChatRequest) -> record::Request {
        match self.messages {
            None => record::Request::Bytes(self.plain),
            Some(_) => record::Request::Typed(up),
        }
    }
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
pub(crate) fn cut_off(gw: &GatewayState, grant: &meter::Grant, call_id: &str) {
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
