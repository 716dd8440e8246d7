//! `POST /saheeli/v1/agent-session/restore-incomplete` (issue 51): a retry
//! of Claude Code or Codex from the session was given the agent's kept
//! session (the foreman's check passed), but its servo could not restore
//! it into the agent's new home, so the agent starts over (the servo tells
//! it so). The retry's trail says it: a `restore_incomplete` event by the
//! servo, with its reason, never only a line in the container's log.
//!
//! The reason is the container's word: one line, capped. Only a task
//! that was brought a session may say it, and only once.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;
use saheeli_protocol::agent_session::{self as kept, Kind, RestoreIncomplete};
use saheeli_protocol::attempt::RetryFrom;
use tracing::warn;

use super::ctx::{Ctx, On};
use crate::llm::task::{error_response, json_response};
use crate::spec::TaskSpec;

/// Whether the task's servo restores an agent's own session: a retry of
/// Claude Code or Codex from the session.
pub(crate) struct Link {
    restores: bool,
}

impl Link {
    pub(crate) fn of(spec: &TaskSpec) -> Link {
        let from_session = spec.resume().is_some_and(|r| r.mode == RetryFrom::Session);
        Link {
            restores: from_session && Kind::of(&spec.agent).is_some(),
        }
    }
}

async fn incomplete(State(gw): State<Arc<On<Link>>>, body: axum::body::Bytes) -> Response {
    if !gw.link.restores {
        return error_response(
            &gw,
            StatusCode::FORBIDDEN,
            "not_allowed",
            "this task restores no agent session",
        );
    }
    let Ok(said) = serde_json::from_slice::<RestoreIncomplete>(&body) else {
        return error_response(
            &gw,
            StatusCode::BAD_REQUEST,
            saheeli_protocol::chat::gateway_error::BAD_REQUEST,
            "not a restore report",
        );
    };
    let why: String = said
        .why
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(kept::MAX_WHY)
        .collect();
    let id = gw.task_id;
    warn!(task_id = %id, %why, "restore_incomplete: the servo could not restore the agent's own session");
    let detail = format!(
        "the servo could not restore its agent's own session ({why}): it starts over with a fresh conversation"
    );
    match gw
        .db(move |s, l| s.note_servo_restore_incomplete(id, l, &detail))
        .await
    {
        Ok(_) => json_response(&gw, StatusCode::OK, &serde_json::json!({})),
        Err(resp) => resp,
    }
}

/// The route, with the task's link.
pub(crate) fn routes(ctx: &Arc<Ctx>, spec: &TaskSpec) -> Router {
    Router::new()
        .route(kept::RESTORE_INCOMPLETE, post(incomplete))
        .with_state(On::new(ctx, Link::of(spec)))
}
