//! The human desk on a task's gateway socket: the servo asks a question
//! (or for an approval, or a plan review), waits for the reply, reads the
//! messages a human injected and whether it must pause. Everything is in
//! SQLite (`store::desk`), written by the CLI from any process; a wait here
//! wakes on the event bus when the task's trail moves.
//!
//! The agent's shell can reach these routes too. Nothing it can send here
//! decides anything: replies come only from humans (the CLI) or from the
//! task's no-human policy, and every write is fenced by this foreman's lease.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use saheeli_protocol::TaskId;
use saheeli_protocol::human::{
    Ask, Asked, Breakpoint, Decision, Delivered, Inbox, MAX_WAIT_MS, Replied, Reply, Waiting,
};
use serde::Deserialize;
use tracing::info;

use super::ctx::Ctx;
use crate::llm::task::error_response;
use crate::llm::task::json_response;
use crate::state::TaskState;
use crate::store::{Lease, Store, StoreError};

/// Largest text kept of a question, a plan step or a gated call's arguments.
const MAX_TEXT: usize = 64 * 1024;

/// What the no-human policy answers to `ask_user`.
pub(crate) const NO_HUMAN_ANSWER: &str = "No human is available to answer (this task runs without one). Decide yourself, state your assumption, and go on.";

/// What the no-human policy answers to `task_blocked`.
pub(crate) const NO_HUMAN_UNBLOCK: &str = "No human is available to unblock this task (it runs without one). Go on as far as you can without what you need, or end with task_complete saying what is missing.";

/// How a task's gateway reaches the desk.
#[derive(Clone)]
pub(crate) struct DeskLink {
    pub store: Arc<Mutex<Store>>,
    pub lease: Lease,
    pub bus: crate::events::Bus,
    /// Whether the task waits (for a human, or for its children): it then
    /// holds no concurrency slot and the wait is not working time.
    pub waiting: WaitFlag,
    pub policy: DeskPolicy,
    /// The names of the task's template steps (`step_done` marks them).
    pub steps: Arc<[String]>,
    /// How `task_complete` is checked: set when the task has `verify:` or
    /// `assess: true` (only then is the verify route open), or checked
    /// steps (their commands run as `verify` runs its own).
    pub verify: Option<Arc<super::verify_link::VerifyLink>>,
    /// The checked steps (`done_when: { verify: COMMAND }`): name, command.
    pub step_checks: Arc<[(String, String)]>,
    /// The capabilities the task was granted (`capabilities:`).
    pub capabilities: Arc<[String]>,
    /// The task's approval gates (`approve:`): a gated capability call
    /// runs only on a human's approval of that exact call.
    pub gates: Arc<[saheeli_protocol::human::Gate]>,
    /// Largest capability result handed back, in bytes.
    pub max_output: usize,
    /// Set when the task was granted `delegate:` (issue 30).
    pub delegate: Option<Arc<super::children::DelegateLink>>,
    /// A third-party agent's `replay:` script: the gateway answers its
    /// calls from it instead of a provider (`llm::vendor::replay`).
    pub replay: Option<Arc<saheeli_protocol::ReplayScript>>,
}

/// The task's human settings, from its spec.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeskPolicy {
    pub no_human: bool,
    pub no_human_approves: bool,
    pub pause_on_tool_error: bool,
    pub human_timeout_ms: i64,
}

impl DeskPolicy {
    pub fn of(spec: &crate::spec::TaskSpec) -> DeskPolicy {
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

/// Whether a task waits, as its supervisor and the serve loop read it
/// (`Inbox::waiting`: a flag, read every tick without a query).
///
/// "Waits for a human" has one source, the task's state in SQLite
/// (`TaskState::is_waiting`). This flag caches it, and its one writer is
/// the task's gateway: after each desk call that can move the state (an
/// ask, a reply taken, the inbox), `Ctx::desk_moved` reads the
/// state back under the same hold of the store and the flag follows it.
/// A wait for children (`wait_tasks`) is no state of its own; it is kept
/// apart and the flag is set while either wait lasts.
#[derive(Clone)]
pub(crate) struct WaitFlag {
    /// What the readers see: `human || children`.
    shared: Arc<AtomicBool>,
    human: Arc<AtomicBool>,
    children: Arc<AtomicBool>,
}

impl WaitFlag {
    pub fn new(shared: Arc<AtomicBool>) -> WaitFlag {
        WaitFlag {
            shared,
            human: Arc::default(),
            children: Arc::default(),
        }
    }

    /// The task's state after a desk call: a waiting state sets the flag.
    fn follow(&self, state: TaskState) {
        self.human.store(state.is_waiting(), Ordering::Relaxed);
        self.publish();
    }

    /// The task's servo waits for its children (`wait_tasks`), or not.
    pub(crate) fn children(&self, waiting: bool) {
        self.children.store(waiting, Ordering::Relaxed);
        self.publish();
    }

    fn publish(&self) {
        let waits = self.human.load(Ordering::Relaxed) || self.children.load(Ordering::Relaxed);
        self.shared.store(waits, Ordering::Relaxed);
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

impl Ctx {
    /// A desk call that can move the task's state, then the state read
    /// back under the same hold of the store: the waiting flag follows it
    /// (its one writer; see [`WaitFlag`]).
    async fn desk_moved<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store, &Lease) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, Response> {
        let id = self.task_id;
        let (t, state) = self
            .desk_db(move |s, l| {
                let t = f(s, l)?;
                Ok((t, s.state_of(id)?))
            })
            .await?;
        self.desk.waiting.follow(state);
        Ok(t)
    }

    pub(crate) async fn desk_db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store, &Lease) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, Response> {
        let store = self.desk.store.clone();
        let lease = self.desk.lease.clone();
        let r = tokio::task::spawn_blocking(move || {
            let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut s, &lease)
        })
        .await;
        match r {
            Ok(Ok(t)) => Ok(t),
            Ok(Err(StoreError::LeaseLost(_))) => Err(error_response(
                self,
                StatusCode::CONFLICT,
                "lease_lost",
                "another foreman holds this task now",
            )),
            Ok(Err(e @ StoreError::AskOpen { .. })) => Err(error_response(
                self,
                StatusCode::CONFLICT,
                "ask_open",
                &e.to_string(),
            )),
            Ok(Err(e @ StoreError::GatewayCap(_))) => Err(error_response(
                self,
                StatusCode::TOO_MANY_REQUESTS,
                "gateway_cap",
                &e.to_string(),
            )),
            Ok(Err(e)) => Err(error_response(
                self,
                StatusCode::SERVICE_UNAVAILABLE,
                "desk",
                &format!("the desk could not be read: {e}"),
            )),
            Err(e) => Err(error_response(
                self,
                StatusCode::INTERNAL_SERVER_ERROR,
                "desk",
                &format!("desk thread failed: {e}"),
            )),
        }
    }

    /// Waits until this task's trail moves or `until` (never past it).
    async fn trail_moves(
        &self,
        rx: &mut tokio::sync::broadcast::Receiver<crate::events::TaskEvent>,
        until: tokio::time::Instant,
    ) {
        let id = self.task_id;
        loop {
            tokio::select! {
                ev = rx.recv() => match ev {
                    Ok(e) if e.task_id == id => return,
                    Ok(_) => {}
                    // Missed events, or no bus: look again.
                    Err(_) => return,
                },
                _ = tokio::time::sleep_until(until) => return,
            }
        }
    }
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
    }
}

fn deadline(wait_ms: u64) -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_millis(wait_ms.min(MAX_WAIT_MS))
}

pub(crate) async fn ask(State(gw): State<Arc<Ctx>>, body: axum::body::Bytes) -> Response {
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
    if ask.call_id.is_empty() || ask.call_id.len() > 256 {
        return error_response(
            &gw,
            StatusCode::BAD_REQUEST,
            "bad_request",
            "call_id must be 1 to 256 bytes",
        );
    }
    let waiting = capped_waiting(ask.waiting);
    let auto = gw.desk.policy.auto_reply(&waiting);
    let timeout = gw.desk.policy.human_timeout_ms;
    let id: TaskId = gw.task_id;
    let call = ask.call_id.clone();
    let r = gw
        .desk_moved(move |s, l| s.ask(id, l, &call, &waiting, auto.as_ref(), timeout))
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
    State(gw): State<Arc<Ctx>>,
    Path(call_id): Path<String>,
    Query(wait): Query<Wait>,
) -> Response {
    let until = deadline(wait.wait_ms);
    let mut rx = gw.desk.bus.subscribe();
    loop {
        let (id, call) = (gw.task_id, call_id.clone());
        match gw.desk_moved(move |s, l| s.take_reply(id, l, &call)).await {
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

pub(crate) async fn inbox(State(gw): State<Arc<Ctx>>, Query(wait): Query<Wait>) -> Response {
    let until = deadline(wait.wait_ms);
    let mut rx = gw.desk.bus.subscribe();
    let timeout = gw.desk.policy.human_timeout_ms;
    let after = wait.after;
    loop {
        let id = gw.task_id;
        let (notes, pause) = match gw
            .desk_moved(move |s, l| s.inbox(id, l, timeout, after))
            .await
        {
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

pub(crate) async fn delivered(State(gw): State<Arc<Ctx>>, Json(d): Json<Delivered>) -> Response {
    let id = gw.task_id;
    let ids: Vec<i64> = d.ids.into_iter().take(1000).collect();
    match gw.desk_db(move |s, l| s.delivered(id, l, &ids)).await {
        Ok(()) => json_response(&gw, StatusCode::OK, &serde_json::json!({})),
        Err(resp) => resp,
    }
}

pub(crate) async fn breakpoint(State(gw): State<Arc<Ctx>>, Json(b): Json<Breakpoint>) -> Response {
    if !gw.desk.policy.pause_on_tool_error {
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
    match gw.desk_db(move |s, l| s.breakpoint(id, l, &detail)).await {
        Ok(()) => json_response(&gw, StatusCode::OK, &serde_json::json!({})),
        Err(resp) => resp,
    }
}

/// `GET /saheeli/v1/session-key`: the key this task's servo seals its
/// session with. Only the servo can ask: in a separated container the
/// socket is its uid's alone (a remote servo presents its token).
/// A retry that goes on from the attempt before it (issue 30) is given
/// that attempt's key too, to check its session file.
pub(crate) async fn session_key(State(gw): State<Arc<Ctx>>) -> Response {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_follows_the_state_and_a_wait_for_children() {
        let shared = Arc::new(AtomicBool::new(false));
        let flag = WaitFlag::new(shared.clone());
        let now = || shared.load(Ordering::Relaxed);
        for state in TaskState::WAITING {
            flag.follow(state);
            assert!(now(), "{state}");
        }
        flag.follow(TaskState::Running);
        assert!(!now());
        flag.children(true);
        assert!(now(), "waiting for children");
        // The human wait ends; the children's goes on.
        flag.follow(TaskState::WaitingHuman);
        flag.follow(TaskState::Running);
        assert!(now());
        flag.children(false);
        assert!(!now());
    }
}
