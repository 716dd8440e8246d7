//! Taking over a task whose foreman stopped.

use std::sync::Arc;
use std::time::Duration;

use saheeli_protocol::Reason;
use tracing::{error, info, warn};

use crate::collect;
use crate::docker;
use crate::gateway::Gateway;
use crate::inputs;
use crate::state::TaskState;
use crate::store::{Outcome, TaskRow, now_ms};

use super::*;

/// Picks up a task whose foreman stopped. A servo that started is
/// supervised again (timeout still counted from its original start); one
/// that never started is put back in the queue; a servo that vanished ends
/// the task from whatever results were collected, else it is requeued
/// (up to 3 times) as an infrastructure failure.
pub(super) async fn resume(ctx: Arc<Ctx>, task: TaskRow, inbox: Inbox) -> Joined {
    let id = task.id;
    let d = &ctx.docker;
    let containers = match docker::task_containers(d, id).await {
        Ok(c) => c,
        Err(e) => return let_go(&ctx, id, &e).await,
    };
    let first = match containers.first() {
        Some(cid) => Some((cid.clone(), docker::has_started(d, cid).await)),
        None => None,
    };
    match plan(first) {
        Plan::Adopt(cid) => return adopt_servo(ctx.clone(), task, cid, inbox).await,
        Plan::AskLater(e) => return let_go(&ctx, id, &e).await,
        // Collected by a foreman that stopped (or failed) before recording
        // the ending: the ending wins over the wait (case 22), below.
        Plan::Settle
            if task.state.is_waiting() && !ctx.cfg.results_dir().join(id.to_string()).is_dir() =>
        {
            // The servo parked and its foreman stopped before recording it:
            // the workspace is kept, the task waits on without a container.
            return park(&ctx, &task, None, None, 0).await;
        }
        Plan::Settle => {}
    }
    // No servo ran (or none is left): clean up what is there, if still ours.
    let lease = ctx.lease.clone();
    if let Err(e) = ctx.db(move |s| s.hold(id, &lease)).await {
        return let_go(&ctx, id, &e).await;
    }
    // Every container of the task: a verify container a crash left too.
    let every = docker::every_task_container(d, id)
        .await
        .unwrap_or_else(|_| containers.clone());
    for cid in &every {
        let _ = docker::remove_container(d, cid).await;
    }
    let dest = ctx.cfg.results_dir().join(id.to_string());
    if task.state == TaskState::Running
        && containers.is_empty()
        && !dest.is_dir()
        && let Some(src) = docker::local_volume_dir(d, id).await
    {
        // The servo ran, and its foreman removed the container to collect
        // the volume, then stopped: the volume still holds the workspace.
        let secrets = ctx.upstream.providers.secrets();
        let cap = ctx.cfg.file.max_results_size.0;
        if let Err(e) = copy_local(id, src, dest.clone(), secrets, cap).await {
            warn!(task_id = %id, error = %format!("{e:#}"), "collecting the left volume failed");
        }
    }
    for v in docker::task_volumes(d, id).await.unwrap_or_default() {
        let _ = docker::remove_volume(d, &v).await;
    }
    if (task.state == TaskState::Running || task.state.is_waiting()) && dest.is_dir() {
        // Collected, but the foreman stopped before recording it.
        return record_collected(&ctx, &task, dest).await;
    }
    let (detail, retry) = match task.state {
        TaskState::Starting => (
            "the foreman stopped before the servo started; queued again",
            true,
        ),
        _ => (
            "the servo's container vanished; queued again",
            task.requeues < MAX_REQUEUES,
        ),
    };
    if retry {
        info!(task_id = %id, "{detail}");
        let lease = ctx.lease.clone();
        match ctx
            .db(move |s| s.requeue(id, &lease, detail, Duration::ZERO))
            .await
        {
            Ok(()) => return (id, None),
            Err(e) if lease_lost(&e) => return (id, None),
            Err(e) => error!(task_id = %id, error = %format!("{e:#}"), "requeue failed"),
        }
    }
    finish(
        &ctx,
        id,
        TaskState::Incomplete,
        Reason::Lost,
        Outcome::default(),
        "the servo's container vanished",
    )
    .await
}

/// Ends a task whose workspace was collected while no foreman watched it:
/// complete when complete.json is valid, else for the reason the servo's
/// audit log gives (`lost` when it gives none).
async fn record_collected(ctx: &Ctx, task: &TaskRow, dest: std::path::PathBuf) -> Joined {
    let id = task.id;
    // The patch is written before the submitted workspace is removed: when
    // the copy is gone, the foreman that removed it wrote the patch.
    let has_workspace = task.spec.workspace.is_some();
    if !has_workspace || inputs::workspace_tar(&ctx.cfg.state_dir(), id).is_file() {
        let truncated = std::fs::symlink_metadata(dest.join(collect::TRUNCATED_MARKER)).is_ok();
        record_changes(ctx, id, has_workspace, &dest, truncated).await;
    }
    let mut outcome = Outcome {
        results_path: Some(dest.display().to_string()),
        ..Default::default()
    };
    let read = {
        let dest = dest.clone();
        tokio::task::spawn_blocking(move || {
            (
                collect::read_completion(&dest, id),
                collect::audit_totals(&dest, id).unwrap_or_default(),
            )
        })
        .await
    };
    let (completion, totals) = match read {
        Ok(r) => r,
        Err(e) => (Err(e.to_string()), collect::AuditTotals::default()),
    };
    outcome.steps = totals.steps.into();
    outcome.input_tokens = totals.usage.input_tokens as i64;
    outcome.output_tokens = totals.usage.output_tokens as i64;
    outcome.cache_read_tokens = totals.usage.cache_read_tokens as i64;
    outcome.cache_write_tokens = totals.usage.cache_write_tokens as i64;
    outcome.compactions = totals.compactions.into();
    let detail = "collected after a foreman restart";
    if let Ok(Some(c)) = completion {
        outcome.steps = c.steps.into();
        return finish(
            ctx,
            id,
            TaskState::Complete,
            Reason::Complete,
            outcome,
            detail,
        )
        .await;
    }
    let reason = match totals.outcome.as_deref().map(str::parse::<Reason>) {
        Some(Ok(Reason::Complete)) => Reason::NoCompletion,
        Some(Ok(r)) => r,
        _ => Reason::Lost,
    };
    finish(ctx, id, TaskState::Incomplete, reason, outcome, detail).await
}

/// What to do with a task whose foreman stopped, from what Docker says
/// of its container.
#[derive(Debug)]
enum Plan {
    /// Its servo started: supervise it.
    Adopt(String),
    /// None ran (or none is left): clean up and settle the task.
    Settle,
    /// Docker did not answer: unknown, ask again in a later round.
    AskLater(anyhow::Error),
}

/// A Docker error means "unknown", never "not started": acting on a guess
/// would remove a running servo's container and volume.
fn plan(first: Option<(String, anyhow::Result<bool>)>) -> Plan {
    match first {
        Some((cid, Ok(true))) => Plan::Adopt(cid),
        Some((_, Err(e))) => Plan::AskLater(e),
        Some((_, Ok(false))) | None => Plan::Settle,
    }
}

/// Supervises a servo that a stopped foreman had started: its gateway
/// served again (the budget going on from the call ledger), its timeout
/// still counted from its first start.
async fn adopt_servo(ctx: Arc<Ctx>, task: TaskRow, cid: String, inbox: Inbox) -> Joined {
    let id = task.id;
    info!(task_id = %id, container = %cid, "adopting servo");
    if task.state == TaskState::Starting {
        let detail = format!("container {} (adopted)", &cid[..12.min(cid.len())]);
        let lease = ctx.lease.clone();
        if let Err(e) = ctx.db(move |s| s.started(id, &lease, &detail)).await {
            if lease_lost(&e) {
                return (id, None);
            }
            error!(task_id = %id, error = %format!("{e:#}"), "adopting failed");
        }
    }
    let gateway = {
        // Budgets go on from what was already spent (the call ledger).
        match Gateway::adopt(
            &ctx.cfg.run_dir(),
            id,
            ctx.upstream.clone(),
            &task.spec.model,
            task.spec.budget(),
            (
                task.input_tokens as u64,
                task.output_tokens as u64,
                task.cost_usd,
            ),
            ctx.desk_link(
                task.id,
                &task.spec,
                inbox.waiting(),
                ctx.task_engine(task.id, None),
            ),
        )
        .await
        {
            Ok(g) => Some(g),
            Err(e) => {
                warn!(task_id = %id, error = %format!("{e:#}"), "gateway not restarted");
                None
            }
        }
    };
    // A verify attempt its foreman left midway: the servo is paused. It
    // runs again once its gateway answers, and asks again.
    if let Err(e) = docker::recover_verify(&ctx.docker, id, &cid).await {
        warn!(task_id = %id, error = %format!("{e:#}"), "a verify attempt left midway was not undone");
    }
    let started = if task.active_ms > 0 {
        now_ms() - task.active_ms
    } else {
        task.started_at.unwrap_or_else(now_ms)
    };
    monitor(ctx, task, cid, gateway, started, inbox).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 9 §6: an error while asking whether the servo started is not
    /// taken for "not started" (which removed a running task's container).
    #[test]
    fn a_docker_error_is_unknown_not_not_started() {
        let err = || Err(anyhow::anyhow!("connection reset"));
        assert!(matches!(plan(Some(("c".into(), err()))), Plan::AskLater(_)));
        assert!(matches!(plan(Some(("c".into(), Ok(true)))), Plan::Adopt(c) if c == "c"));
        assert!(matches!(plan(Some(("c".into(), Ok(false)))), Plan::Settle));
        assert!(matches!(plan(None), Plan::Settle));
    }
}
