//! Taking over a task whose foreman stopped. The engine finds its servo:
//! one that runs is supervised again (its gateway served again, the budget
//! going on from the call ledger, the timeout still counted from its first
//! start). Otherwise what it left is cleared: a workspace that outlived
//! its servo (a local volume) ends the task from what it holds; a task
//! that never started is put back in the queue; a servo that vanished is
//! requeued (up to 3 times) as an infrastructure failure.

use std::sync::Arc;
use std::time::Duration;

use saheeli_protocol::Reason;
use tracing::{error, info, warn};

use super::finish::{finish, requeue_or_fail};
use super::gateway::{Gateway, GatewayPlan};
use super::park::record_park;
use super::record::record_changes;
use super::run::{supervise, way};
use super::{Ctx, Inbox, Joined, MAX_REQUEUES, lease_lost, let_go};
use crate::backend::Removal;
use crate::backend::{Found, Servo};
use crate::collect;
use crate::inputs;
use crate::state::TaskState;
use crate::store::{Outcome, TaskRow, now_ms};

/// Picks up a task whose foreman stopped.
pub(crate) async fn adopt(ctx: Arc<Ctx>, task: TaskRow, inbox: Inbox) -> Joined {
    let id = task.id;
    let lease = ctx.lease.clone();
    if let Err(e) = ctx.db(move |s| s.hold(id, &lease)).await {
        return let_go(&ctx, id, &e).await;
    }
    if task.spec.samples.is_some() {
        // Best-of-N (issue 51): no servo to find; its samples are looked at again.
        return super::samples::run(ctx, task, inbox).await;
    }
    let recorded = task.container_id.as_deref();
    let gone = match ctx.engine.find(id, recorded).await {
        Found::Running(servo) => return adopt_servo(ctx, task, servo, inbox).await,
        Found::Unknown(e) => return let_go(&ctx, id, &anyhow::Error::from(e)).await,
        Found::NeverStarted => false,
        Found::Gone => true,
    };
    if !ctx.engine.traits().workspace_outlives_servo {
        // Its upload went with it.
        ctx.engine.remove_task(id, Removal::All).await;
        let detail = "infrastructure: the foreman stopped and its job service is gone or ended";
        return requeue_or_fail(&ctx, &task, detail, Reason::Lost, false).await;
    }
    let dest = ctx.cfg.results_dir().join(id.to_string());
    // Collected by a foreman that stopped (or failed) before recording
    // the ending: the ending wins over the wait (case 22), below.
    if task.state.is_waiting() && !dest.is_dir() {
        // The servo parked and its foreman stopped before recording it:
        // the workspace is kept, the task waits on without a servo.
        ctx.engine.remove_task(id, Removal::KeepWorkspace).await;
        return record_park(&ctx, id, 0).await;
    }
    // No servo ran (or none is left): clear what is there. The servo ran,
    // and its foreman removed it to collect the workspace, then stopped:
    // what outlived it still holds the workspace.
    let collect_into =
        (task.state == TaskState::Running && gone && !dest.is_dir()).then_some(dest.as_path());
    let left = Removal::Left {
        collect_into,
        recorded: task.container_id.as_deref(),
    };
    ctx.engine.remove_task(id, left).await;
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

/// Supervises a servo that a stopped foreman had started: its gateway
/// served again (the budget going on from the call ledger), its timeout
/// still counted from its first start.
async fn adopt_servo(ctx: Arc<Ctx>, task: TaskRow, servo: Servo, inbox: Inbox) -> Joined {
    let id = task.id;
    info!(task_id = %id, servo = %servo.id, "adopting servo");
    // An engine that reports its servo running records it when it does.
    let running = task.state != TaskState::Starting || !ctx.engine.traits().reports_running;
    if task.state == TaskState::Starting && running {
        let detail = format!("{} (adopted)", servo.running_detail());
        let lease = ctx.lease.clone();
        if let Err(e) = ctx.db(move |s| s.started(id, &lease, &detail)).await {
            if lease_lost(&e) {
                return (id, None);
            }
            error!(task_id = %id, error = %format!("{e:#}"), "adopting failed");
        }
    }
    // What acts on the servo's container: the verify route, and the
    // undoing of a verify attempt left midway (below), alike.
    let task_engine = ctx.engine.task_engine(id, &servo.prepared);
    let routes = ctx.route_plan(
        &task.spec,
        inbox.waiting(),
        task_engine.clone(),
        task.priority,
    );
    let opened = match way(&ctx, &task, &servo.prepared) {
        // Budgets go on from what was already spent (the call ledger).
        Ok(way) => {
            Gateway::open(GatewayPlan {
                task_id: id,
                upstream: ctx.upstream.clone(),
                model: task.spec.model.clone(),
                budget: task.spec.budget(),
                routes,
                way,
                adopted: Some((
                    task.input_tokens as u64,
                    task.output_tokens as u64,
                    task.cost_usd,
                )),
            })
            .await
        }
        Err(e) => Err(e),
    };
    let gateway = match opened {
        Ok(g) => Some(g),
        Err(e) => {
            warn!(task_id = %id, error = %format!("{e:#}"), "gateway not restarted");
            None
        }
    };
    // A verify attempt its foreman left midway: the servo is paused. It
    // runs again once its gateway answers, and asks again.
    if let Err(e) = task_engine.recover_verify(id, &ctx.cfg.state_dir()).await {
        warn!(task_id = %id, error = %format!("{e:#}"), "a verify attempt left midway was not undone");
    }
    let started = if task.active_ms > 0 {
        now_ms() - task.active_ms
    } else {
        task.started_at.unwrap_or_else(now_ms)
    };
    supervise(ctx, task, servo, gateway, started, running, inbox).await
}
