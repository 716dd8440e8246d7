//! `step_start` and `step_done` on a task's gateway socket: the servo
//! begins one of the template's steps, or marks it done with its evidence,
//! and the row is written fenced by this foreman's lease (`store::steps`,
//! `store::step_control`). The agent's shell can reach
//! this route too: it can only mark a step its own task declares, as the
//! model could, and nothing it sends decides the task's outcome.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use saheeli_protocol::template::{StepDone, StepStart, StepsDone};

use crate::store::StepStarted;
use tracing::debug;

use super::*;

/// Longest evidence kept; the rest is cut with a note.
const MAX_EVIDENCE: usize = 16 * 1024;

/// A step request's body (`what`, for the error) naming one of the
/// task's steps, or the refusal to answer.
fn of_this_task<T: serde::de::DeserializeOwned>(
    gw: &GatewayState,
    body: &[u8],
    what: &str,
    name: impl Fn(&T) -> &String,
) -> Result<T, Box<Response>> {
    let step: T = serde_json::from_slice(body).map_err(|e| {
        Box::new(error_response(
            gw,
            StatusCode::BAD_REQUEST,
            "bad_request",
            &format!("not a {what}: {e}"),
        ))
    })?;
    let asked = name(&step);
    if !gw.desk.steps.contains(asked) {
        let names = gw.desk.steps.join(", ");
        return Err(Box::new(error_response(
            gw,
            StatusCode::BAD_REQUEST,
            "unknown_step",
            &format!(
                "this task has no step `{}`; its steps are: {names}",
                crate::output::clean(&asked.chars().take(100).collect::<String>())
            ),
        )));
    }
    Ok(step)
}

pub(super) async fn step_done(
    State(gw): State<Arc<GatewayState>>,
    body: axum::body::Bytes,
) -> Response {
    let step: StepDone = match of_this_task(&gw, &body, "step_done", |s: &StepDone| &s.name) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let evidence = desk::capped_to(&step.evidence, MAX_EVIDENCE);
    let id = gw.task_id;
    let name = step.name.clone();
    let r = gw
        .desk_db(move |s, l| s.step_done(id, l, &name, &evidence))
        .await;
    match r {
        Ok(done) => {
            debug!(task_id = %id, step = %step.name, "step done");
            json_response(&gw, StatusCode::OK, &StepsDone { done })
        }
        Err(resp) => resp,
    }
}

/// `step_start`: the servo begins a step. A step with `approve: true` is
/// recorded only on an unused approval of that `step_start` (the agent's
/// shell posting here directly is refused, 403, and counted).
pub(super) async fn step_start(
    State(gw): State<Arc<GatewayState>>,
    body: axum::body::Bytes,
) -> Response {
    let step: StepStart = match of_this_task(&gw, &body, "step_start", |s: &StepStart| &s.name) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let id = gw.task_id;
    let name = step.name.clone();
    match gw.desk_db(move |s, l| s.step_start(id, l, &name)).await {
        Ok(StepStarted::Started(done)) => {
            debug!(task_id = %id, step = %step.name, "step started");
            json_response(&gw, StatusCode::OK, &StepsDone { done })
        }
        Ok(StepStarted::NeedsApproval) => error_response(
            &gw,
            StatusCode::FORBIDDEN,
            "not_approved",
            &format!(
                "step `{}` starts only on a person's approval of its step_start",
                step.name
            ),
        ),
        Err(resp) => resp,
    }
}
