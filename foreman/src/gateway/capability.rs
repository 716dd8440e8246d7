//! The capability routes: the tools of the task's granted capabilities,
//! and calls to them. A call to a capability the task was not granted is
//! refused (403), logged, and recorded as an event of the task.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use saheeli_protocol::capability::{Call, CallResult, SEP, Tools};
use tracing::{info, warn};

use super::*;

/// Limit on one capability call.
const CALL_LIMIT: Duration = Duration::from_secs(120);

pub(super) async fn tools(State(gw): State<Arc<GatewayState>>) -> Response {
    let granted: Vec<String> = gw.desk.capabilities.to_vec();
    match gw.upstream.broker.tools(&granted).await {
        Ok(tools) => json_response(&gw, StatusCode::OK, &Tools { tools }),
        Err(e) => error_response(&gw, StatusCode::SERVICE_UNAVAILABLE, "capability", &e),
    }
}

pub(super) async fn call(State(gw): State<Arc<GatewayState>>, body: Bytes) -> Response {
    let call: Call = match serde_json::from_slice(&body) {
        Ok(c) => c,
        Err(e) => {
            return error_response(
                &gw,
                StatusCode::BAD_REQUEST,
                "bad_request",
                &format!("not a capability call: {e}"),
            );
        }
    };
    let Some((cap, tool)) = call.tool.split_once(SEP) else {
        return error_response(
            &gw,
            StatusCode::BAD_REQUEST,
            "bad_request",
            "a capability tool is named `capability__tool`",
        );
    };
    if !gw.desk.capabilities.iter().any(|c| c == cap) {
        return refuse(&gw, cap, tool).await;
    }
    let started = std::time::Instant::now();
    let called = gw
        .upstream
        .broker
        .call(cap, tool, &call.arguments, CALL_LIMIT)
        .await;
    let ms = started.elapsed().as_millis();
    let result = match called {
        Ok(c) => CallResult {
            ok: !c.is_error,
            text: gw.upstream.redactor.redact(&c.text).into_owned(),
        },
        Err(e) => CallResult {
            ok: false,
            text: format!("error: {e}"),
        },
    };
    info!(task_id = %gw.task_id, capability = cap, tool, ok = result.ok, bytes = result.text.len(), ms, "capability call");
    let (id, store) = (gw.task_id, gw.desk.store.clone());
    let _ = tokio::task::spawn_blocking(move || {
        let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
        s.count_capability_call(id)
    })
    .await;
    json_response(&gw, StatusCode::OK, &capped(result, gw.desk.max_output))
}

/// A call to a capability the task was not granted.
async fn refuse(gw: &Arc<GatewayState>, cap: &str, tool: &str) -> Response {
    warn!(task_id = %gw.task_id, capability = cap, tool, "capability call refused: not granted to this task");
    let (id, detail) = (
        gw.task_id,
        format!("{cap}{SEP}{tool}: capability `{cap}` not granted"),
    );
    let store = gw.desk.store.clone();
    let _ = tokio::task::spawn_blocking(move || {
        let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
        s.record_note(id, "capability_refused", &detail)
    })
    .await;
    error_response(
        gw,
        StatusCode::FORBIDDEN,
        "not_granted",
        &format!("this task was not granted capability `{cap}`"),
    )
}

/// Caps a result like built-in tool output: head and tail kept.
fn capped(mut r: CallResult, max: usize) -> CallResult {
    let max = max.max(1024);
    if r.text.len() > max {
        let mut head = max / 2;
        while !r.text.is_char_boundary(head) {
            head -= 1;
        }
        let mut tail = r.text.len() - max / 2;
        while !r.text.is_char_boundary(tail) {
            tail += 1;
        }
        let cut = tail - head;
        r.text = format!(
            "{}\n[… {cut} bytes cut …]\n{}",
            &r.text[..head],
            &r.text[tail..]
        );
    }
    r
}
