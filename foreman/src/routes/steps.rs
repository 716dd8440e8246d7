//! `step_start` and `step_done` on a task's gateway socket: the servo
//! begins one of the template's steps, or marks it done with its evidence,
//! and the row is written fenced by this foreman's lease (`store::steps`,
//! `store::step_control`). The agent's shell can reach
//! this route too: it can only mark a step its own task declares, as the
//! model could, and nothing it sends decides the task's outcome.
//!
//! Whichever call reaches a step first starts it: a `step_done` of a step
//! never started meets the step's approval gate and its breakpoint before
//! as a `step_start` would, and is not recorded until they let it (a
//! gated step is never done without its approval used). A checked step's
//! command runs at most [`MAX_CHECKS_PER_STEP`] times.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use saheeli_protocol::template::{StepDone, StepHeld, StepStart, StepsDone};

use super::ctx::{Ctx, On};
use super::desk;
use super::verify;
use super::verify_link::VerifyLink;
use crate::llm::task::error_response;
use crate::llm::task::json_response;
use crate::spec::TaskSpec;
use crate::store::{StepMarked, StepStarted};
use axum::Router;
use axum::routing::post;
use tracing::{debug, info};

/// Longest evidence kept; the rest is cut with a note.
const MAX_EVIDENCE: usize = 16 * 1024;

/// How many times one step's check (`done_when: { verify }`) may run in
/// an attempt: each run is a fresh verify container (case N16: a model
/// looping `step_done` ran 8 in 2.3 s). Past it, `step_done` of that step
/// is answered with a refusal the model reads, and no container starts.
pub(crate) const MAX_CHECKS_PER_STEP: u32 = 5;

/// Step checks' verify containers are numbered from here (a task's own
/// verify attempts are few: `1 + verify_retries`).
const STEP_CHECK_ATTEMPTS: u32 = 10_000;

/// A step request's body (`what`, for the error) naming one of the
/// task's steps, or the refusal to answer.
fn of_this_task<T: serde::de::DeserializeOwned>(
    gw: &On<Link>,
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
    if !gw.link.steps.contains(asked) {
        let names = gw.link.steps.join(", ");
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

pub(crate) async fn step_done(
    State(gw): State<Arc<On<Link>>>,
    body: axum::body::Bytes,
) -> Response {
    let step: StepDone = match of_this_task(&gw, &body, "step_done", |s: &StepDone| &s.name) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let mut evidence = desk::capped_to(&step.evidence, MAX_EVIDENCE);
    let id = gw.task_id;
    // The call that reaches a step first is its start: its approval and
    // its breakpoint before come first (case N15), before any check runs.
    let name = step.name.clone();
    match gw.db(move |s, l| s.reach_step(id, l, &name)).await {
        Ok(Some(held)) => return not_done(&gw, &step.name, Held::Start(held)).await,
        Ok(None) => {}
        Err(resp) => return resp,
    }
    if let Some((_, command)) = gw.link.step_checks.iter().find(|(n, _)| *n == step.name) {
        match check(&gw, &step.name, command).await {
            Ok(Checked::Passed(how)) => evidence.push_str(&format!("\n\n{how}")),
            Ok(Checked::Failed(why)) => return not_done(&gw, &step.name, Held::Check(why)).await,
            Err(resp) => return *resp,
        }
    }
    let name = step.name.clone();
    let r = gw
        .db(move |s, l| s.step_done(id, l, &name, &evidence))
        .await;
    match r {
        Ok(StepMarked::Done(done)) => {
            debug!(task_id = %id, step = %step.name, "step done");
            let answer = StepsDone {
                done,
                ..StepsDone::default()
            };
            json_response(&gw, StatusCode::OK, &answer)
        }
        Ok(StepMarked::Held(held)) => not_done(&gw, &step.name, Held::Start(held)).await,
        Err(resp) => resp,
    }
}

/// Why a `step_done` left its step open.
enum Held {
    /// Its start stops first (an approval, a breakpoint before).
    Start(StepHeld),
    /// Its check failed or may not run again: what the model is told.
    Check(String),
}

/// The answer to a `step_done` that did not mark its step: the steps done
/// so far and why this one is not.
async fn not_done(gw: &On<Link>, name: &str, held: Held) -> Response {
    let id = gw.task_id;
    let done = match gw.db(move |s, _| s.steps_done(id)).await {
        Ok(rows) => rows.into_iter().map(|r| r.name).collect(),
        Err(resp) => return resp,
    };
    debug!(task_id = %id, step = %name, "step not done");
    let answer = match held {
        Held::Start(h) => StepsDone {
            done,
            check_failed: None,
            held: Some(h),
        },
        Held::Check(why) => StepsDone {
            done,
            check_failed: Some(why),
            held: None,
        },
    };
    json_response(gw, StatusCode::OK, &answer)
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
async fn check(gw: &On<Link>, name: &str, command: &str) -> Result<Checked, Box<Response>> {
    let Some(link) = gw.link.verify.clone() else {
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
    let step = name.to_string();
    let ran = gw.db(move |s, _| s.step_checks_of(id, &step)).await;
    if ran.map_err(Box::new)? >= MAX_CHECKS_PER_STEP {
        return Ok(Checked::Failed(format!(
            "[saheeli] Step `{name}` is not done, and its check `{command}` will not run \
             again: it ran {MAX_CHECKS_PER_STEP} times, the most one step's check may run in \
             an attempt (each run is a fresh verify container). Do not call step_done for it \
             again. Go on with the rest of the task, or ask for help with ask_user; a person \
             can mark the step done with `saheeli task step-override`."
        )));
    }
    let run = gw.db(move |s, _| s.step_checks_run(id)).await;
    // Verify containers are named by attempt: step checks count apart.
    let attempt = STEP_CHECK_ATTEMPTS + run.map_err(Box::new)? + 1;
    let checks =
        verify::run_commands(id, link.clone(), vec![command.to_string()], attempt, None).await;
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
    gw.db(move |s, l| s.record_step_check(id, l, &detail))
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
pub(crate) async fn step_start(
    State(gw): State<Arc<On<Link>>>,
    body: axum::body::Bytes,
) -> Response {
    let step: StepStart = match of_this_task(&gw, &body, "step_start", |s: &StepStart| &s.name) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let id = gw.task_id;
    let name = step.name.clone();
    match gw.db(move |s, l| s.step_start(id, l, &name)).await {
        Ok(StepStarted::Started(done)) => {
            debug!(task_id = %id, step = %step.name, "step started");
            let answer = StepsDone {
                done,
                ..StepsDone::default()
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

/// What the step routes take from the task's spec.
pub(crate) struct Link {
    /// The names of the task's template steps (`step_done` marks them).
    pub steps: Arc<[String]>,
    /// The checked steps (`done_when: { verify: COMMAND }`): name, command.
    pub step_checks: Arc<[(String, String)]>,
    /// How a checked step's command runs (as `verify` runs its own).
    pub verify: Option<Arc<VerifyLink>>,
}

impl Link {
    pub fn of(spec: &TaskSpec, verify: Option<Arc<VerifyLink>>) -> Link {
        Link {
            steps: spec.steps.iter().map(|s| s.name.clone()).collect(),
            step_checks: spec
                .steps
                .iter()
                .filter_map(|s| {
                    let command = s.done_when.as_ref()?.command()?;
                    Some((s.name.clone(), command.to_string()))
                })
                .collect(),
            verify,
        }
    }
}

/// `step_start` and `step_done`.
pub(crate) fn routes(ctx: &Arc<Ctx>, link: Link) -> Router {
    use saheeli_protocol::template::routes as r;
    Router::new()
        .route(r::STEP_DONE, post(step_done))
        .route(r::STEP_START, post(step_start))
        .with_state(On::new(ctx, link))
}
