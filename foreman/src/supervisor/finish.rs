//! Recording how a task ended, and the retry policy; requeueing after an
//! infrastructure failure.

use std::time::Duration;

use saheeli_protocol::{Reason, TaskId};
use tracing::{error, info, warn};

use super::record::record_report;
use crate::inputs;
use crate::reconciler::{Ctx, Joined, MAX_REQUEUES, lease_lost};
use crate::state::TaskState;
use crate::store::{Outcome, Retry, TaskRow};

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
        let next = TaskId::new();
        // One copy of the submitted workspace per chain of attempts.
        match inputs::hand_over_workspace(ctx.cfg.state_dir(), id, next).await {
            Ok(()) => {
                detail.push_str(&format!(
                    "; retried as {next} (attempt {} of {})",
                    task.attempt + 1,
                    task.spec.retries + 1
                ));
                retry = Some(Retry {
                    id: next,
                    spec: task.spec,
                    priority: task.priority,
                    attempt: task.attempt + 1,
                });
            }
            Err(e) => warn!(task_id = %id, error = %format!("{e:#}"), "not retried"),
        }
    }
    let lease = ctx.lease.clone();
    outcome.detail = Some(detail.clone());
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
            if let Some(r) = retry
                && let Err(e) = inputs::hand_over_workspace(ctx.cfg.state_dir(), r.id, id).await
            {
                warn!(task_id = %id, error = %format!("{e:#}"), "submitted workspace not handed back");
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
        let delay = requeue_delay(task.requeues);
        let detail = format!("{detail}; queued again in {}s", delay.as_secs());
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

/// How long an infrastructure failure waits in the queue: 1 s, doubling
/// with each requeue, at most 32 s.
pub(super) fn requeue_delay(requeues: i64) -> Duration {
    Duration::from_secs(1 << requeues.clamp(0, 5))
}

/// The retry policy (Kubernetes Job semantics): another attempt when the
/// reason is one `retry_on` lists, another attempt can help, and fewer
/// than `retries` + 1 attempts were made.
pub(super) fn should_retry(
    reason: Reason,
    retry_on: &[String],
    attempt: i64,
    retries: u32,
) -> bool {
    !reason.is_final()
        && retry_on.iter().any(|r| r == reason.code())
        && attempt <= i64::from(retries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requeues_back_off_to_half_a_minute() {
        let secs: Vec<u64> = (-1..8).map(|n| requeue_delay(n).as_secs()).collect();
        assert_eq!(secs, [1, 1, 2, 4, 8, 16, 32, 32, 32]);
    }

    #[test]
    fn retry_policy() {
        let on = vec![
            "timeout".to_string(),
            "exit".to_string(),
            "budget".to_string(),
        ];
        assert!(should_retry(Reason::Timeout, &on, 1, 1));
        assert!(
            !should_retry(Reason::Timeout, &on, 2, 1),
            "attempts used up"
        );
        assert!(should_retry(Reason::Exit(137), &on, 1, 2));
        assert!(!should_retry(Reason::MaxSteps, &on, 1, 2), "not listed");
        assert!(!should_retry(Reason::Budget, &on, 1, 2), "never helps");
    }
}
