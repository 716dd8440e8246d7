//! `POST /saheeli/v1/verify`: the servo's `task_complete` asks, the
//! foreman checks. One attempt: a fresh container is made from the task's
//! image with the task's workspace volume (`docker::VerifyBox`: a new
//! `/tmp` and `$HOME`, the task's hardening, `env:` and limits, no gateway
//! socket) while the task's own container is paused; the workspace is made
//! what `changes.patch` delivers and changes that shadow what the commands
//! run are refused (`verify_tree`, `shadow`); `verify_files` are
//! restored in it from the submitted workspace, each `verify` command runs
//! in it (`docker exec`, the servo's user, /workspace, `verify_timeout`,
//! output capped), and it is removed. With hidden tests, a check the agent
//! gets its workspace back after sees it through a throwaway copy-on-write
//! view (`VerifyLink::on_copy`), so the checked code cannot leave the tests
//! in it. Then, with `assess: true`, an LLM
//! judges the work against the objective (`assess`). The checks are
//! rows in SQLite (fenced by the lease); the foreman counts the attempts,
//! so neither the servo nor the agent's shell, which can reach this route
//! too, can get more than `1 + verify_retries`.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::Response;
use saheeli_protocol::TaskId;
use saheeli_protocol::verify::{Check, CheckKind, Verdict, VerifyRequest};
use tracing::{info, warn};

use super::assess;
use super::ctx::{Ctx, On};
use super::verify_checks;
use super::verify_link::VerifyLink;
use super::verify_spare;
use crate::backend::docker;
use crate::llm::task::error_response;
use crate::llm::task::json_response;
use axum::Router;
use axum::routing::post;

/// Output kept of one verify command (head and tail).
pub(crate) const OUTPUT_CAP: usize = 64 * 1024;

/// Output of a failed command quoted back to the model (head and tail).
const FEEDBACK_CAP: usize = 8 * 1024;

pub(crate) async fn verify(
    axum::extract::State(gw): axum::extract::State<Arc<On<Option<Arc<VerifyLink>>>>>,
    body: axum::body::Bytes,
) -> Response {
    let req: VerifyRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            let why = format!("not a verify request: {e}");
            return error_response(&gw, StatusCode::BAD_REQUEST, "bad_request", &why);
        }
    };
    if req.call_id.is_empty() || req.call_id.len() > 256 {
        let why = "call_id must be 1 to 256 bytes";
        return error_response(&gw, StatusCode::BAD_REQUEST, "bad_request", why);
    }
    let Some(link) = gw
        .link
        .clone()
        .filter(|l| !l.commands.is_empty() || l.assess)
    else {
        let why = "this task has no `verify` or `assess`: task_complete needs no check";
        return error_response(&gw, StatusCode::FORBIDDEN, "not_allowed", why);
    };
    let _one = link.one_at_a_time.lock().await;
    let id = gw.task_id;
    let call = req.call_id.clone();
    let known = gw
        .db(move |s, l| {
            s.hold(id, l)?;
            Ok((s.verify_attempt_of(id, &call)?, s.verify_attempts(id)?))
        })
        .await;
    let (attempt, checks) = match known {
        Err(resp) => return resp,
        // Asked again (the gateway was away): the same verdict.
        Ok((Some(known), _)) => known,
        Ok((None, made)) if made >= link.max_attempts => {
            let why = format!(
                "no verification attempt is left ({made} of {} made)",
                link.max_attempts
            );
            return error_response(&gw, StatusCode::CONFLICT, "no_attempts_left", &why);
        }
        Ok((None, made)) => {
            let attempt = made + 1;
            let t0 = std::time::Instant::now();
            let checks = run_attempt(&gw, link.clone(), attempt, &req.message).await;
            let ms = t0.elapsed().as_millis() as u64;
            info!(task_id = %id, attempt, ms, "verification attempt ran");
            let (rows, call) = (checks.clone(), req.call_id.clone());
            let recorded = gw
                .db(move |s, l| s.record_verify(id, l, &call, attempt, &rows))
                .await;
            if let Err(resp) = recorded {
                return resp;
            }
            (attempt, checks)
        }
    };
    let all = match gw.db(move |s, _| s.verify_checks(id)).await {
        Ok(all) => all,
        Err(resp) => return resp,
    };
    // What the servo hears goes into its session and audit log, which the
    // agent reads: with hidden tests, their command lines are not told
    // (they may carry the tests), only what they printed.
    let (checks, all) = if link.hidden.is_empty() {
        (checks, all)
    } else {
        (hide_commands(checks), hide_commands(all))
    };
    let verdict = verdict(attempt, link.max_attempts, &checks, all, link.timeout);
    info!(task_id = %id, attempt, passed = verdict.passed, "verified");
    json_response(&gw, StatusCode::OK, &verdict)
}

/// One attempt: the verify commands (stopping at the first failure),
/// then the assessment when they passed (or there are none).
async fn run_attempt(gw: &Ctx, link: Arc<VerifyLink>, attempt: u32, message: &str) -> Vec<Check> {
    let mut checks = Vec::new();
    if !link.commands.is_empty() {
        let commands = link.commands.clone();
        let ledger = super::verify_egress::ledger(gw, &link).await;
        checks = run_commands(gw.task_id, link.clone(), commands, attempt, ledger).await;
    }
    if link.assess && checks.iter().all(|c| c.passed) {
        checks.push(assess::assess(gw, &link, attempt, message, &checks).await);
    }
    checks
}

/// What a hidden test's command is shown as to the servo.
pub(crate) const HIDDEN_COMMAND: &str = "the task's hidden tests";

fn hide_commands(mut checks: Vec<Check>) -> Vec<Check> {
    for c in &mut checks {
        if c.kind == CheckKind::Verify {
            c.command = HIDDEN_COMMAND.to_string();
        }
    }
    checks
}

/// A check that could not run: failed, saying why.
pub(super) fn not_run(attempt: u32, kind: CheckKind, command: &str, why: String) -> Check {
    Check {
        attempt,
        kind,
        command: command.to_string(),
        exit_code: None,
        duration_ms: 0,
        passed: false,
        output: why,
        limited: false,
        findings: Vec::new(),
        graded: None,
    }
}

/// Runs the commands in a verify container beside the task's (paused)
/// container, and removes it. Spawned: a request dropped midway (the
/// foreman stopping, a caller gone) still removes the verify container
/// and lets the task's container run again.
pub(crate) async fn run_commands(
    id: TaskId,
    link: Arc<VerifyLink>,
    commands: Vec<String>,
    attempt: u32,
    ledger: Option<Vec<u8>>,
) -> Vec<Check> {
    let first = commands[0].clone();
    let shown = first.clone();
    let ran = tokio::spawn(async move {
        let (d, task_container) = match link.engine.container(id).await {
            Ok(found) => found,
            Err(e) => {
                return vec![not_run(
                    attempt,
                    CheckKind::Verify,
                    &first,
                    format!("{e:#}"),
                )];
            }
        };
        let t0 = std::time::Instant::now();
        let made = match open_box(&link, id, attempt, &d, &task_container).await {
            Ok(made) => made,
            Err(why) => return vec![not_run(attempt, CheckKind::Verify, &first, why)],
        };
        let verify_spare::Made { vbox, staged, host } = made;
        // The task's container stopping (its timeout, a cancel) ends the
        // check: nothing waits for its verdict any more.
        let stopped = async {
            match docker::wait(&d, &task_container).await {
                Ok(_) => (),
                Err(_) => std::future::pending().await,
            }
        };
        let open_ms = t0.elapsed().as_millis() as u64;
        let checks = tokio::select! {
            checks = verify_checks::checks_in(&d, (vbox.container(), host.as_deref()), &link, &commands, attempt, ledger.as_deref()) => checks,
            () = stopped => {
                let why = "the task's container stopped during verification (its timeout, or a cancel)";
                vec![not_run(attempt, CheckKind::Verify, &first, why.to_string())]
            }
        };
        let t1 = std::time::Instant::now();
        // Killed and the task's container resumed now; removed meanwhile
        // (the gateway waits for it before the workspace is collected).
        // A pass with no assessor after it ends the task: its container
        // runs again while the verify container is killed.
        let ends = !link.assess && !checks.is_empty() && checks.iter().all(|c| c.passed);
        let (released, removing) = vbox.release(ends).await;
        link.spares.removing(removing);
        if let Err(e) = released {
            warn!(task_id = %id, error = %format!("{e:#}"), "the verify container was not undone");
        }
        let close_ms = t1.elapsed().as_millis() as u64;
        if let Some(dir) = staged {
            link.spares.removing(tokio::spawn(async move {
                tokio::fs::remove_dir_all(&dir).await.map_err(Into::into)
            }));
        }
        info!(task_id = %id, attempt, open_ms, close_ms, "verify container released");
        // A failed attempt with another left: its container is made while
        // the agent works on the feedback.
        if attempt < link.max_attempts && !checks.iter().all(|c| c.passed) {
            verify_spare::prewarm(&link, id, attempt + 1);
        }
        checks
    });
    match ran.await {
        Ok(checks) => checks,
        Err(e) => vec![not_run(
            attempt,
            CheckKind::Verify,
            &shown,
            format!("the verify run failed: {e}"),
        )],
    }
}

/// The check's verify container (the spare, or one made now), with the
/// task's container paused meanwhile: the freeze and the wait for the
/// container overlap. Else why not, with the task's container running.
async fn open_box(
    link: &Arc<VerifyLink>,
    id: TaskId,
    attempt: u32,
    d: &bollard::Docker,
    task_container: &str,
) -> Result<verify_spare::Made, String> {
    let opened = async {
        match verify_spare::take(link, id, attempt, task_container).await {
            Some(made) => Ok(made),
            None => verify_spare::make(link, id, attempt, d, task_container).await,
        }
    };
    // A swarm's verify container joins the task container's network: it
    // is made first, the freeze after. A check on a copy of the workspace
    // freezes first: the copy is made on the frozen workspace, and so is
    // its container (no spare; one of a later attempt is left for it).
    let (made, frozen) = match link.engine {
        _ if link.on_copy(attempt).is_some() => match docker::freeze(d, task_container).await {
            Ok(()) => {
                let made = verify_spare::make(link, id, attempt, d, task_container).await;
                (made, Ok(()))
            }
            Err(e) => (Err(e), Err(anyhow::anyhow!("not paused"))),
        },
        crate::backend::TaskEngine::Swarm { .. } => {
            let made = opened.await;
            let frozen = match &made {
                Ok(_) => docker::freeze(d, task_container).await,
                Err(_) => Err(anyhow::anyhow!("no verify container")),
            };
            (made, frozen)
        }
        _ => tokio::join!(opened, docker::freeze(d, task_container)),
    };
    match (made, frozen) {
        (Ok(mut made), Ok(())) => {
            made.vbox.held_already();
            Ok(made)
        }
        (Ok(made), Err(e)) => {
            link.spares.removing(tokio::spawn(made.vbox.close()));
            if let Some(dir) = made.staged {
                let _ = tokio::fs::remove_dir_all(&dir).await;
            }
            Err(format!("the verify container could not be made: {e:#}"))
        }
        (Err(e), frozen) => {
            if frozen.is_ok()
                && let Err(t) = docker::thaw(d, task_container).await
            {
                warn!(task_id = %id, error = %format!("{t:#}"), "the task's container was not resumed");
            }
            Err(format!("{e:#}"))
        }
    }
}

/// The verdict of `attempt` (its `checks`) for the servo, with every check
/// so far (`all`).
pub(crate) fn verdict(
    attempt: u32,
    max_attempts: u32,
    checks: &[Check],
    all: Vec<Check>,
    timeout: Duration,
) -> Verdict {
    let passed = !checks.is_empty() && checks.iter().all(|c| c.passed);
    let limited = !passed && checks.iter().any(|c| c.limited);
    let feedback = match checks.iter().find(|c| !c.passed) {
        None => String::new(),
        Some(c) if limited => format!(
            "[saheeli] Attempt {attempt} of {max_attempts}: the assessor found that more \
             attempts cannot help (limited). Its feedback:\n{}\n\nThe task ends as incomplete \
             (limited), with the findings in its report.",
            c.output.trim_end()
        ),
        Some(c) => feedback(c, attempt, max_attempts, timeout),
    };
    Verdict {
        passed,
        attempt,
        max_attempts,
        feedback,
        checks: all,
        limited,
    }
}

/// What the model is told of a checked step's failed command.
pub(crate) fn step_feedback(c: &Check, timeout: Duration) -> String {
    what_failed(c, timeout).replacen("verification failed: ", "its check ", 1)
}

/// What the model is told of a failed check.
fn feedback(c: &Check, attempt: u32, max_attempts: u32, timeout: Duration) -> String {
    let what = what_failed(c, timeout);
    let left = max_attempts.saturating_sub(attempt);
    let next = if left == 0 {
        "No attempt is left: the task ends as verification_failed.".to_string()
    } else {
        format!(
            "Fix the problem, check your work, then call task_complete again \
             ({left} more attempt{} allowed).",
            if left == 1 { "" } else { "s" }
        )
    };
    format!("[saheeli] Attempt {attempt} of {max_attempts}: {what}\n\n{next}")
}

/// What failed in a check, with its output.
fn what_failed(c: &Check, timeout: Duration) -> String {
    if let Some(g) = &c.graded {
        return format!(
            "verification failed: {} gave a reward of {}, short of a pass. Its output:\n{}",
            if c.command == HIDDEN_COMMAND {
                HIDDEN_COMMAND.to_string()
            } else {
                format!("`{}`", c.command)
            },
            g.reward,
            fenced(&cut(&c.output, FEEDBACK_CAP))
        );
    }
    match (c.kind, c.exit_code) {
        (CheckKind::Assess, _) => format!(
            "assessment failed: the objective is not met. The assessor's feedback:\n{}",
            c.output.trim_end()
        ),
        (CheckKind::Verify, Some(code)) => format!(
            "verification failed: `{}` exited with code {code}. Its output:\n{}",
            c.command,
            fenced(&cut(&c.output, FEEDBACK_CAP))
        ),
        (CheckKind::Verify, None) if c.duration_ms >= timeout.as_millis() as u64 => format!(
            "verification failed: `{}` did not finish within {} and was stopped. Its output:\n{}",
            c.command,
            humantime::format_duration(timeout),
            fenced(&cut(&c.output, FEEDBACK_CAP))
        ),
        (CheckKind::Verify, None) => {
            format!(
                "verification failed: `{}`: {}",
                c.command,
                c.output.trim_end()
            )
        }
    }
}

/// `text` cut to about `cap` bytes: its head and tail.
fn cut(text: &str, cap: usize) -> String {
    if text.len() <= cap {
        return text.to_string();
    }
    let half = cap / 2;
    let mut a = half;
    while !text.is_char_boundary(a) {
        a -= 1;
    }
    let mut b = text.len() - half;
    while !text.is_char_boundary(b) {
        b += 1;
    }
    format!(
        "{}\n[… {} bytes not shown …]\n{}",
        &text[..a],
        b - a,
        &text[b..]
    )
}

fn fenced(text: &str) -> String {
    format!("```\n{}\n```", text.trim_end())
}

/// The verify route, open when the task verifies (`link`: None answers
/// that it does not).
pub(crate) fn routes(ctx: &Arc<Ctx>, link: Option<Arc<VerifyLink>>) -> Router {
    Router::new()
        .route(saheeli_protocol::verify::routes::VERIFY, post(verify))
        .with_state(On::new(ctx, link))
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
