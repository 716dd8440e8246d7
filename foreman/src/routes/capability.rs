//! The capability routes: the tools of the task's granted capabilities,
//! and calls to them. A call to a capability the task was not granted is
//! refused (403); so is a call an `approve:` gate holds, unless a human
//! approved that exact call (tool and arguments) as the servo asked it:
//! the gateway enforces the gate itself, since whoever posts here may not
//! be the servo (case 36). Refusals are counted; the first few are also
//! logged and recorded as events of the task (case 21).

use std::sync::Arc;
use std::time::Duration;

use super::ctx::{Ctx, On};
use super::desk;
use crate::llm::task::error_response;
use crate::llm::task::json_response;
use crate::spec::TaskSpec;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use saheeli_protocol::capability::{Call, CallResult, SEP, Tools};
use saheeli_protocol::human::Gate;
use tracing::{debug, info, warn};

/// Limit on one capability call.
const CALL_LIMIT: Duration = Duration::from_secs(120);

pub(crate) async fn tools(State(gw): State<Arc<On<Link>>>) -> Response {
    let granted: Vec<String> = gw.link.capabilities.to_vec();
    match gw.upstream.broker.tools(&granted).await {
        Ok(tools) => json_response(&gw, StatusCode::OK, &Tools { tools }),
        Err(e) => error_response(&gw, StatusCode::SERVICE_UNAVAILABLE, "capability", &e),
    }
}

pub(crate) async fn call(State(gw): State<Arc<On<Link>>>, body: Bytes) -> Response {
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
    if !gw.link.capabilities.iter().any(|c| c == cap) {
        let why = format!("this task was not granted capability `{cap}`");
        let detail = format!("{cap}{SEP}{tool}: capability `{cap}` not granted");
        return refuse(&gw, "capability_refused", "not_granted", detail, &why).await;
    }
    if gated(&gw.link.gates, &call.tool, &call.arguments) {
        // As the desk stored the ask (its texts capped the same way).
        let (id, t, a) = (
            gw.task_id,
            desk::capped(&call.tool),
            desk::capped(&call.arguments),
        );
        match gw.db(move |s, l| s.use_approval(id, l, &t, &a)).await {
            Ok(true) => {}
            Ok(false) => {
                let why = format!(
                    "`{}` is behind an `approve:` gate and no human approved this call with these \
                     arguments; the servo asks (`POST /saheeli/v1/ask`) and runs it once approved",
                    call.tool
                );
                let detail = format!("{}: not run, no approval for this call", call.tool);
                return refuse(&gw, "capability_unapproved", "not_approved", detail, &why).await;
            }
            Err(resp) => return resp,
        }
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
    let (id, store) = (gw.task_id, gw.store.clone());
    let _ = tokio::task::spawn_blocking(move || {
        let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
        s.count_capability_call(id)
    })
    .await;
    json_response(&gw, StatusCode::OK, &capped(result, gw.link.max_output))
}

/// A capability call refused: counted; the first few logged and recorded
/// as an event `kind` of the task, the rest only counted.
async fn refuse(gw: &Ctx, kind: &'static str, code: &str, detail: String, why: &str) -> Response {
    let (id, store) = (gw.task_id, gw.store.clone());
    let recorded = tokio::task::spawn_blocking(move || {
        let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
        s.refuse_capability(id, kind, &detail)
    })
    .await;
    match recorded {
        Ok(Ok(true)) => warn!(task_id = %gw.task_id, kind, "capability call refused: {why}"),
        _ => debug!(task_id = %gw.task_id, kind, "capability call refused (counted)"),
    }
    error_response(gw, StatusCode::FORBIDDEN, code, why)
}

/// Whether an `approve:` gate holds this call: a gate naming the tool,
/// with no pattern or one found in the call's main argument (its `path`,
/// else the raw arguments), as the servo's gates match.
fn gated(gates: &[Gate], tool: &str, arguments: &str) -> bool {
    gates.iter().any(|g| {
        g.tool == tool
            && match &g.pattern {
                None => true,
                // Checked valid at submit; one that is not holds the call.
                Some(p) => {
                    regex::Regex::new(p).map_or(true, |re| re.is_match(&main_argument(arguments)))
                }
            }
    })
}

fn main_argument(arguments: &str) -> String {
    serde_json::from_str::<serde_json::Value>(arguments)
        .ok()
        .and_then(|v| v.get("path").and_then(|s| s.as_str()).map(str::to_string))
        .unwrap_or_else(|| arguments.to_string())
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

/// What the capability routes take from the task's spec.
pub(crate) struct Link {
    /// The capabilities the task was granted (`capabilities:`).
    pub capabilities: Arc<[String]>,
    /// The task's approval gates (`approve:`): a gated capability call
    /// runs only on a human's approval of that exact call.
    pub gates: Arc<[Gate]>,
    /// Largest capability result handed back, in bytes.
    pub max_output: usize,
}

impl Link {
    pub fn of(spec: &TaskSpec) -> Link {
        Link {
            capabilities: spec.capabilities.iter().cloned().collect(),
            gates: spec.gates.iter().cloned().collect(),
            max_output: spec.max_output_bytes,
        }
    }
}

/// The granted capabilities' tools, and calls to them.
pub(crate) fn routes(ctx: &Arc<Ctx>, spec: &TaskSpec) -> Router {
    use saheeli_protocol::capability::routes as r;
    Router::new()
        .route(r::TOOLS, get(tools))
        .route(r::CALL, post(call))
        .with_state(On::new(ctx, Link::of(spec)))
}
