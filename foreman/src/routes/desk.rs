//! The human desk on a task's gateway socket: the servo asks a question
//! (or for an approval, or a plan review), waits for the reply, reads the
//! messages a human injected and whether it must pause. Everything is in
//! SQLite (`store::desk`), written by the CLI from any process; a wait here
//! wakes on the event bus when the task's trail moves.
//!
//! The agent's shell can reach these routes too. Nothing it can send here
//! decides anything: replies come only from humans (the CLI) or from the
//! task's no-human policy, and every write is fenced by this foreman's lease.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use saheeli_protocol::TaskId;
use saheeli_protocol::human::{
    Ask, Asked, Breakpoint, Decision, Delivered, Inbox, MAX_WAIT_MS, Replied, Reply, Waiting,
};
use serde::Deserialize;
use tracing::info;

use super::ctx::{Ctx, On};
use crate::llm::task::error_response;
use crate::llm::task::json_response;
use crate::spec::TaskSpec;

/// Largest text kept of a question, a plan step or a gated call's arguments.
const MAX_TEXT: usize = 64 * 1024;

/// What the no-human policy answers to `ask_user`.
pub(crate) const NO_HUMAN_ANSWER: &str = "No human is available to answer (this task runs without one). Decide yourself, state your assumption, and go on.";

/// What the no-human policy answers to `task_blocked`.
pub(crate) const NO_HUMAN_UNBLOCK: &str = "No human is available to unblock this task (it runs without one). Go on as far as you can without what you need, or end with task_complete saying what is missing.";

/// The task's human settings, from its spec.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeskPolicy {
    pub no_human: bool,
    pub no_human_approves: bool,
    pub pause_on_tool_error: bool,
    pub human_timeout_ms: i64,
}

impl DeskPolicy {
    pub fn of(spec: &TaskSpec) -> DeskPolicy {
        DeskPolicy {
            no_human: spec.no_human,
            no_human_approves: spec.no_human_approves,
            pause_on_tool_error: spec.pause_on_tool_error,
            human_timeout_ms: (spec.human_timeout_s as i64).saturating_mul(1000),
        }
    }

    /// The immediate reply when nobody will answer.
    fn auto_reply(&self, w: &Waiting) -> Option<Reply> {
        if !self.no_human {
            return None;
        }
        let (decision, text) = match w {
            Waiting::Answer { .. } => (Decision::Answer, NO_HUMAN_ANSWER.to_string()),
            Waiting::Blocked { .. } => (Decision::Answer, NO_HUMAN_UNBLOCK.to_string()),
            _ if self.no_human_approves => (
                Decision::Approve,
                "approved by the no-human policy (no_human_gates: approve)".into(),
            ),
            _ => (
                Decision::Deny,
                "no human is available to approve, and the no-human policy denies (no_human_gates: deny)".into(),
            ),
        };
        Some(Reply {
            decision,
            text: Some(text),
            by: "saheeli".into(),
        })
    }
}

#[derive(Deserialize)]
pub(crate) struct Wait {
    #[serde(default)]
    wait_ms: u64,
    /// The inbox: the newest note the servo has in its session.
    #[serde(default)]
    after: Option<i64>,
}

pub(crate) fn capped(text: &str) -> String {
    capped_to(text, MAX_TEXT)
}

/// `text` cut to `max` bytes (on a character boundary), the cut stated.
pub(crate) fn capped_to(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}…[{} more bytes not shown]",
        &text[..end],
        text.len() - end
    )
}

fn capped_waiting(w: Waiting) -> Waiting {
    match w {
        Waiting::Answer { question } => Waiting::Answer {
            question: capped(&question),
        },
        Waiting::Approval { tool, arguments } => Waiting::Approval {
            tool: capped(&tool),
            arguments: capped(&arguments),
        },
        Waiting::Plan { plan } => Waiting::Plan {
            plan: plan.iter().take(100).map(|s| capped(s)).collect(),
        },
        Waiting::Blocked { reason, needed } => Waiting::Blocked {
            reason: capped(&reason),
            needed: capped(&needed),
        },
        // Refused before this (`ask`): only the egress proxy asks it.
        w @ Waiting::Egress { .. } => w,
    }
}

fn deadline(wait_ms: u64) -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_millis(wait_ms.min(MAX_WAIT_MS))
}

pub(crate) async fn ask(
    State(gw): State<Arc<On<DeskPolicy>>>,
    body: axum::body::Bytes,
) -> Response {
    let ask: Ask = match serde_json::from_slice(&body) {
        Ok(a) => a,
        Err(e) => {
            return error_response(
                &gw,
                StatusCode::BAD_REQUEST,
                "bad_request",
                &format!("not an ask: {e}"),
            );
        }
    };
    if matches!(ask.waiting, Waiting::Egress { .. }) {
        return error_response(
            &gw,
            StatusCode::BAD_REQUEST,
            "bad_request",
            "an egress approval is asked by the foreman's proxy, not by the servo",
        );
    }
    if ask.call_id.is_empty() || ask.call_id.len() > 256 {
        return error_response(
            &gw,
            StatusCode::BAD_REQUEST,
            "bad_request",
            "call_id must be 1 to 256 bytes",
        );
    }
    let waiting = capped_waiting(ask.waiting);
    let auto = gw.link.auto_reply(&waiting);
    let timeout = gw.link.human_timeout_ms;
    let id: TaskId = gw.task_id;
    let call = ask.call_id.clone();
    let r = gw
        .moved(move |s, l| s.ask(id, l, &call, &waiting, auto.as_ref(), timeout))
        .await;
    match r {
        Ok(reply) => {
            if reply.is_none() {
                info!(task_id = %id, call = %ask.call_id, "waiting for a human");
            }
            json_response(&gw, StatusCode::OK, &Asked { reply })
        }
        Err(resp) => resp,
    }
}

pub(crate) async fn reply(
    State(gw): State<Arc<On<DeskPolicy>>>,
    Path(call_id): Path<String>,
    Query(wait): Query<Wait>,
) -> Response {
    let until = deadline(wait.wait_ms);
    let mut rx = gw.bus.subscribe();
    loop {
        let (id, call) = (gw.task_id, call_id.clone());
        match gw.moved(move |s, l| s.take_reply(id, l, &call)).await {
            Ok(Some((reply, waiting))) => {
                let replied = Replied {
                    reply: Some(reply),
                    waiting: Some(waiting),
                };
                return json_response(&gw, StatusCode::OK, &replied);
            }
            // Still waiting (also after a take-over: the flag follows the
            // state, which says so).
            Ok(None) => {}
            Err(resp) => return resp,
        }
        if tokio::time::Instant::now() >= until {
            let none = Replied {
                reply: None,
                waiting: None,
            };
            return json_response(&gw, StatusCode::OK, &none);
        }
        gw.trail_moves(&mut rx, until).await;
    }
}

pub(crate) async fn inbox(
    State(gw): State<Arc<On<DeskPolicy>>>,
    Query(wait): Query<Wait>,
) -> Response {
    let until = deadline(wait.wait_ms);
    let mut rx = gw.bus.subscribe();
    let timeout = gw.link.human_timeout_ms;
    let after = wait.after;
    loop {
        let id = gw.task_id;
        let r = gw
            .followed(move |s, l| {
                let (notes, pause, state) = s.inbox(id, l, timeout, after)?;
                Ok(((notes, pause), state))
            })
            .await;
        let (notes, pause) = match r {
            Ok(r) => r,
            Err(resp) => return resp,
        };
        // A running servo asks without waiting; a paused one waits for a
        // change: a message, or the pause lifted.
        if !pause || !notes.is_empty() || tokio::time::Instant::now() >= until {
            return json_response(&gw, StatusCode::OK, &Inbox { notes, pause });
        }
        gw.trail_moves(&mut rx, until).await;
    }
}

/// The inbox look of the servo's own chat calls (`llm::inbox`): the same
/// look as [`inbox`]'s with no wait, started at once on the desk's
/// connection. It holds the routes' context weakly (the context holds the
/// LLM side, which holds this).
pub(crate) struct DeskInbox {
    ctx: std::sync::Weak<Ctx>,
    human_timeout_ms: i64,
}

impl DeskInbox {
    pub(crate) fn new(ctx: &Arc<Ctx>, spec: &TaskSpec) -> DeskInbox {
        DeskInbox {
            ctx: Arc::downgrade(ctx),
            human_timeout_ms: DeskPolicy::of(spec).human_timeout_ms,
        }
    }
}

impl crate::llm::inbox::InboxLook for DeskInbox {
    fn start(&self, after: i64) -> crate::llm::inbox::Look {
        let Some(ctx) = self.ctx.upgrade() else {
            return Box::pin(async { None });
        };
        let (id, timeout) = (ctx.task_id, self.human_timeout_ms);
        let (store, lease) = (ctx.store.clone(), ctx.lease.clone());
        let look = tokio::task::spawn_blocking(move || {
            let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
            s.inbox(id, &lease, timeout, Some(after))
        });
        Box::pin(async move {
            match look.await {
                Ok(Ok((notes, pause, state))) => {
                    ctx.waiting.follow(state);
                    (pause || !notes.is_empty()).then_some(Inbox { notes, pause })
                }
                // Unreadable now: the call goes on, the next one looks again.
                Ok(Err(e)) => {
                    tracing::debug!(task_id = %id, error = %e, "inbox look with a call failed");
                    None
                }
                Err(_) => None,
            }
        })
    }
}

pub(crate) async fn delivered(
    State(gw): State<Arc<On<DeskPolicy>>>,
    Json(d): Json<Delivered>,
) -> Response {
    let id = gw.task_id;
    let ids: Vec<i64> = d.ids.into_iter().take(1000).collect();
    match gw.db(move |s, l| s.delivered(id, l, &ids)).await {
        Ok(()) => json_response(&gw, StatusCode::OK, &serde_json::json!({})),
        Err(resp) => resp,
    }
}

pub(crate) async fn breakpoint(
    State(gw): State<Arc<On<DeskPolicy>>>,
    Json(b): Json<Breakpoint>,
) -> Response {
    if !gw.link.pause_on_tool_error {
        return error_response(
            &gw,
            StatusCode::FORBIDDEN,
            "not_allowed",
            "this task has no `pause_on: [tool_error]`",
        );
    }
    let id = gw.task_id;
    let detail = format!(
        "{} failed: {}",
        capped(&b.tool),
        capped(&b.error).chars().take(500).collect::<String>()
    );
    match gw.db(move |s, l| s.breakpoint(id, l, &detail)).await {
        Ok(()) => json_response(&gw, StatusCode::OK, &serde_json::json!({})),
        Err(resp) => resp,
    }
}

/// `GET /saheeli/v1/session-key`: the key this task's servo seals its
/// session with. Only the servo can ask: in a separated container the
/// socket is its uid's alone (a remote servo presents its token).
/// A retry that goes on from the attempt before it (issue 30) is given
/// that attempt's key too, to check its session file.
pub(crate) async fn session_key(State(gw): State<Arc<On<DeskPolicy>>>) -> Response {
    let id = gw.task_id.to_string();
    let resumes = match gw
        .db(move |s, _| s.require(&id).map(|t| t.spec.resume().map(|r| r.from)))
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

/// The desk's routes: questions and their replies, the inbox, delivered
/// messages, breakpoints, the session key.
pub(crate) fn routes(ctx: &Arc<Ctx>, spec: &TaskSpec) -> Router {
    use saheeli_protocol::human::routes as r;
    Router::new()
        .route(r::ASK, post(ask))
        .route("/saheeli/v1/ask/{call_id}", get(reply))
        .route(r::INBOX, get(inbox))
        .route(r::DELIVERED, post(delivered))
        .route(r::BREAKPOINT, post(breakpoint))
        .route(r::SESSION_KEY, get(session_key))
        .with_state(On::new(ctx, DeskPolicy::of(spec)))
}
