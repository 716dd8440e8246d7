//! Recording how a task ended, and carrying out the retry policy
//! (`retry`): the next attempt queued with its wait and the workspace it
//! starts on; requeueing after an infrastructure failure.

use std::path::Path;

use saheeli_protocol::agent_session::Kind;
use saheeli_protocol::attempt::RetryFrom;
use saheeli_protocol::{Reason, TaskId};
use tracing::{error, info, warn};

use super::record::record_report;
use super::retry::{Ended, plan, requeue_delay, should_retry, starts_over};
use super::{Ctx, Joined, MAX_REQUEUES, lease_lost};
use crate::state::TaskState;
use crate::store::{Outcome, Retry, TaskRow, now_ms};
use crate::{collect, inputs};

/// Records the terminal state, and by the retry policy queues the next
/// attempt in the same transaction; returns what the loop reports.
pub(super) async fn finish(
    ctx: &Ctx,
    id: TaskId,
    to: TaskState,
    reason: Reason,
    mut outcome: Outcome,
    detail: &str,
) -> Joined {
    outcome.reason = Some(reason.to_string());
    let mut detail = detail.to_string();
    // The retry policy: another attempt, as a new task linked to this one.
    let mut retry = None;
    if to == TaskState::Incomplete
        && let Ok(task) = ctx.db(move |s| s.require(&id.to_string())).await
        && should_retry(reason, &task.spec.retry_on, task.attempt, task.spec.retries)
    {
        retry = next_attempt(ctx, &task, reason, &outcome, &mut detail).await;
    }
    let lease = ctx.lease.clone();
    outcome.detail = Some(detail.clone());
    super::deliver::deliver(ctx, id, to, &outcome).await;
    record_report(ctx, id, to, &outcome).await;
    let queued = retry.clone();
    let recorded = ctx
        .db(move |s| {
            s.finish(
                id,
                &lease,
                to,
                Some(&detail),
                Some(&outcome),
                queued.as_ref(),
            )
        })
        .await;
    if recorded.is_ok() {
        // Ended: a parked workspace (swarm) is in results or not needed.
        inputs::remove_parked(&ctx.cfg.state_dir(), id).await;
    }
    match (recorded, retry) {
        (Ok(()), Some(r)) => {
            info!(task_id = %id, state = %to, %reason, retry = %r.id, attempt = r.attempt, "task finished; retried by policy");
            // Superseded: the retry reports for both.
            (id, None)
        }
        (Ok(()), None) => {
            crate::output::log_finished(id, to, &reason, &ctx.cfg.results_dir());
            // Ended: no launch needs its submitted workspace any more.
            inputs::remove_workspace(&ctx.cfg.state_dir(), id).await;
            (id, Some(to))
        }
        (Err(e), retry) => {
            // Not recorded: the workspace stays with this task.
            if let Some(r) = retry {
                if let Err(e) = inputs::hand_over_workspace(ctx.cfg.state_dir(), r.id, id).await {
                    warn!(task_id = %id, error = %format!("{e:#}"), "submitted workspace not handed back");
                }
                let _ =
                    tokio::fs::remove_file(inputs::resume_tar(&ctx.cfg.state_dir(), r.id)).await;
            }
            if lease_lost(&e) {
                warn!(task_id = %id, "lease lost before the outcome was recorded; the new holder records it");
                return (id, None);
            }
            error!(task_id = %id, error = %format!("{e:#}"), "recording the outcome failed");
            (id, Some(to))
        }
    }
}

/// Infrastructure failures go back to the queue with backoff (not an
/// attempt), up to the limit; after that the task fails with `reason`
/// (is cancelled, when a stop was asked meanwhile).
pub(super) async fn requeue_or_fail(
    ctx: &Ctx,
    task: &TaskRow,
    detail: &str,
    reason: Reason,
    stopping: bool,
) -> Joined {
    let id = task.id;
    if task.requeues < MAX_REQUEUES && !stopping {
        let delay = requeue_delay(
            &ctx.cfg.file.requeue_backoff,
            task.requeues,
            fastrand::f64(),
        );
        let detail = format!("{detail}; queued again in {}s", delay.as_secs_f64().round());
        warn!(task_id = %id, %detail, "requeued");
        let lease = ctx.lease.clone();
        match ctx.db(move |s| s.requeue(id, &lease, &detail, delay)).await {
            Ok(()) => return (id, None),
            Err(e) if lease_lost(&e) => return (id, None),
            Err(e) => error!(task_id = %id, error = %format!("{e:#}"), "requeue failed"),
        }
    }
    let state = if stopping {
        TaskState::Cancelled
    } else {
        TaskState::Failed
    };
    finish(ctx, id, state, reason, Outcome::default(), detail).await
}

/// Decides and prepares the next attempt of `task` (found worth
/// retrying): its spec with the chain filled in, its wait, and the
/// workspace it starts on; None (and why, in `detail`) when there is none.
/// Its `said`: an event for the retry's trail (issue 51: its agent's
/// own session not restored).
async fn next_attempt(
    ctx: &Ctx,
    task: &TaskRow,
    reason: Reason,
    outcome: &Outcome,
    detail: &mut String,
) -> Option<Retry> {
    let mut said = None;
    let id = task.id;
    let ended = Ended {
        task,
        reason,
        outcome,
        detail,
        ran_ms: task.started_at.map(|t| now_ms() - t).unwrap_or(0),
    };
    let mut next = match plan(&ended, fastrand::f64()) {
        Ok(next) => next,
        Err(why) => {
            info!(task_id = %id, %why, "not retried");
            detail.push_str(&format!("; {why}"));
            return None;
        }
    };
    let next_id = TaskId::new();
    // One copy of the submitted workspace per chain of attempts (for
    // `changes.patch` and `verify_files`, whatever the retry starts on).
    if let Err(e) = inputs::hand_over_workspace(ctx.cfg.state_dir(), id, next_id).await {
        warn!(task_id = %id, error = %format!("{e:#}"), "not retried");
        return None;
    }
    let chain = next.spec.chain.as_mut().expect("plan sets the chain");
    // A third-party agent's own session: Claude Code's and Codex's are
    // checked here and brought along; the others cannot be resumed.
    let agent = &task.spec.agent;
    let kind = Kind::of(agent);
    let resumes_agent = chain.mode == RetryFrom::Session && !agent.is_builtin();
    if resumes_agent && kind.is_none() {
        let why = format!("`{}` cannot resume its own session", agent.label());
        chain.note = starts_over(&chain.note, &why);
        detail.push_str(&format!(
            "; {why}: the retry starts over (a fresh conversation on the workspace as it left it)"
        ));
        said = Some((
            "starts_over",
            format!("{why}: a fresh conversation on the workspace as it left it"),
        ));
    }
    let mut restored = None;
    if chain.mode != RetryFrom::Scratch {
        // The retry starts on this attempt's collected workspace.
        let packed = match outcome.results_path.clone() {
            None => Err("nothing was collected".to_string()),
            Some(results) => {
                let state_dir = ctx.cfg.state_dir();
                let max = ctx.cfg.file.max_workspace_size.0;
                let secrets = ctx.upstream.providers.secrets();
                let kind = kind.filter(|_| resumes_agent);
                tokio::task::spawn_blocking(move || {
                    let results = Path::new(&results);
                    let kept = kind.map(|k| collect::check_kept(results, k));
                    let dir = kept
                        .as_ref()
                        .and_then(|k| k.as_ref().ok())
                        .map(|k| k.0.clone());
                    inputs::pack_resume_with(
                        state_dir.as_path(),
                        results,
                        next_id,
                        max,
                        secrets,
                        dir.as_deref(),
                    )
                    .map(|()| kept)
                })
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
            }
        };
        let packed = packed.map(|kept| restored = kept);
        if let Err(e) = packed {
            warn!(task_id = %id, error = %e, "the collected workspace cannot be resumed; the retry starts from scratch");
            detail.push_str(&format!(
                "; the collected workspace cannot be resumed ({e}): the retry starts from scratch"
            ));
            chain.mode = RetryFrom::Scratch;
            chain.note.clear();
        }
    }
    match restored {
        Some(Ok((_, session))) => {
            info!(task_id = %id, %session, "the agent's own session goes to the retry");
            detail.push_str(&format!(
                "; its agent's session `{session}` kept for the retry"
            ));
        }
        Some(Err(why)) if chain.mode == RetryFrom::Session => {
            warn!(task_id = %id, %why, "restore_incomplete: the retry starts over");
            chain.note = starts_over(&chain.note, &format!("`restore_incomplete`: {why}"));
            detail.push_str(&format!(
                "; restore_incomplete: {why}: the retry starts over (a fresh conversation)"
            ));
            said = Some((
                "restore_incomplete",
                format!(
                    "its agent's own session cannot be restored ({why}): it starts over with a fresh conversation"
                ),
            ));
        }
        _ => {}
    }
    let mode = chain.mode;
    let delay = next.delay;
    detail.push_str(&format!(
        "; retried as {next_id} (attempt {} of {}, from {mode}, in {}s)",
        task.attempt + 1,
        task.spec.retries + 1,
        delay.as_secs_f64().round()
    ));
    Some(Retry {
        id: next_id,
        spec: next.spec,
        priority: task.priority,
        attempt: task.attempt + 1,
        not_before: Some(now_ms() + delay.as_millis() as i64),
        said,
    })
}
