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
use tracing::{debug, info};

use super::*;

/// Longest evidence kept; the rest is cut with a note.
const MAX_EVIDENCE: usize = 16 * 1024;

/// Step checks' verify containers are numbered from here (a task's own
/// verify attempts are few: `1 + verify_retries`).
const STEP_CHECK_ATTEMPTS: u32 = 10_000;

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
    let mut evidence = desk::capped_to(&step.evidence, MAX_EVIDENCE);
    let id = gw.task_id;
    if let Some((_, command)) = gw.desk.step_checks.iter().find(|(n, _)| *n == step.name) {
        match check(&gw, &step.name, command).await {
            Ok(Checked::Passed(how)) => evidence.push_str(&format!("\n\n{how}")),
            Ok(Checked::Failed(why)) => {
                let done = match gw.desk_db(move |s, _| s.steps_done(id)).await {
                    Ok(rows) => rows.into_iter().map(|r| r.name).collect(),
                    Err(resp) => return resp,
                };
                let answer = StepsDone {
                    done,
                    check_failed: Some(why),
                };
                return json_response(&gw, StatusCode::OK, &answer);
            }
            Err(resp) => return *resp,
        }
    }
    let name = step.name.clone();
    let r = gw
        .desk_db(move |s, l| s.step_done(id, l, &name, &evidence))
        .await;
    match r {
        Ok(done) => {
            debug!(task_id = %id, step = %step.name, "step done");
            let answer = StepsDone {
                done,
                check_failed: None,
            };
            json_response(&gw, StatusCode::OK, &answer)
        }
        Err(resp) => resp,
    }
}

/// How a checked step's command ended.
enum Checked {
    /// It passed: the line added to the evidence.
    Passed(String),
    /// It failed: what the model is told.
    Failed(String),
}

/// Runs a checked step's command as `verify` runs its commands (a verify
/// container beside the task's, `verify_files` restored, the servo's user,
/// `verify_timeout`, output capped), and records a `step_check` event.
async fn check(
    gw: &Arc<GatewayState>,
    name: &str,
    command: &str,
) -> Result<Checked, Box<Response>> {
    let Some(link) = gw.desk.verify.clone() else {
        let why = "this task's checked steps have no verify link (a foreman fault)";
        return Err(Box::new(error_response(
            gw,
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            why,
        )));
    };
    let _one = link.one_at_a_time.lock().await;
    let id = gw.task_id;
    let run = gw.desk_db(move |s, _| s.step_checks_run(id)).await;
    // Verify containers are named by attempt: step checks count apart.
    let attempt = STEP_CHECK_ATTEMPTS + run.map_err(Box::new)? + 1;
    let checks = verify::run_commands(id, link.clone(), vec![command.to_string()], attempt).await;
    let Some(c) = checks.into_iter().next() else {
        return Err(Box::new(error_response(
            gw,
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the step's check ran no command",
        )));
    };
    let how = match c.exit_code {
        Some(code) => format!("exit {code}"),
        None => "no exit code (stopped, or not run)".to_string(),
    };
    let detail = format!(
        "step `{name}`: `{command}` {}: {how}",
        if c.passed { "passed" } else { "failed" }
    );
    gw.desk_db(move |s, l| s.record_step_check(id, l, &detail))
        .await
        .map_err(Box::new)?;
    info!(task_id = %id, step = %name, passed = c.passed, "step check ran");
    if c.passed {
        return Ok(Checked::Passed(format!(
            "[saheeli] its check `{command}` passed (exit 0)."
        )));
    }
    let what = verify::step_feedback(&c, link.timeout);
    Ok(Checked::Failed(format!(
        "[saheeli] Step `{name}` is not done: {what}\n\nThe step stays open. Fix the problem, \
         then call step_done for it again."
    )))
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
            let answer = StepsDone {
                done,
                check_failed: None,
            };
            json_response(&gw, StatusCode::OK, &answer)
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
