//! After the watch: a servo the infrastructure lost is requeued; a parked
//! one leaves its workspace kept; any other's workspace comes home, its
//! patch is written, and the ending is concluded.

use saheeli_protocol::Reason;

use super::conclude::{Seen, conclude};
use super::finish::{finish, requeue_or_fail};
use super::gateway::Gateway;
use super::outcome::{nothing_collected, parked_exit};
use super::park::record_park;
use super::record::record_changes;
use super::watch::{Ended, Metered, Watched};
use super::{Ctx, Joined, abandon, still_held};
use crate::backend::Removal;
use crate::backend::{Servo, Workspace};
use crate::store::{Outcome, TaskRow, now_ms};

/// Collects a watched servo's workspace and concludes its task.
pub(super) async fn collect(
    ctx: &Ctx,
    task: &TaskRow,
    servo: Servo,
    gateway: Option<Gateway>,
    started_ms: i64,
    watched: Watched,
) -> Joined {
    let id = task.id;
    let engine = &ctx.engine;
    if let Ended::Lost(why) = &watched.ended {
        if let Some(g) = gateway {
            g.stop().await;
        }
        engine.remove_task(id, Removal::All).await;
        let detail = format!("infrastructure: {why}");
        let stopping = watched.stopped.is_some();
        return requeue_or_fail(ctx, task, &detail, Reason::Lost, stopping).await;
    }
    let parked = parked_exit(watched.exit(), watched.timed_out, watched.stopped);
    let dest = ctx.cfg.results_dir().join(id.to_string());
    let verifies = task.spec.verifies();
    let collected = engine
        .collect(
            &servo,
            gateway.as_ref().and_then(|g| g.upload_from()).as_ref(),
            &dest,
            parked,
            verifies,
            watched.exit(),
        )
        .await;
    tracing::debug!(task_id = %id, ms = collected.took.as_millis() as u64, "collected");
    if let Workspace::Kept = collected.workspace {
        if !still_held(ctx, id).await {
            return abandon(id, gateway).await;
        }
        let active = now_ms() - started_ms - watched.waited_ms - task.active_ms;
        // Only now: the servo's container needed its gateway's directory.
        if let Some(g) = gateway {
            g.stop().await;
        }
        engine.removals().later(servo);
        return record_park(ctx, id, active).await;
    }
    // `report: synthesized`: one more metered call, before the meter is
    // read (issue 29).
    let synthesis = match (&gateway, &collected.workspace) {
        (Some(g), Workspace::Results(Ok(_)))
            if task.spec.report == saheeli_protocol::front_matter::ReportMode::Synthesized =>
        {
            Some(super::synthesis::synthesize(ctx, task, g, &dest).await)
        }
        _ => None,
    };
    let metered = gateway.as_ref().map(|g| Metered::read(g.meter()));
    if let Some(g) = gateway {
        g.stop().await;
    }
    let place = servo.place();
    // The slot is free once the task is concluded; what is left of this
    // launch goes meanwhile (nothing of another launch).
    engine.removals().later(servo);
    if !still_held(ctx, id).await {
        return (id, None);
    }
    let workspace = match collected.workspace {
        Workspace::Results(r) => r,
        Workspace::Kept | Workspace::Nothing => {
            let (state, reason) =
                nothing_collected(watched.stopped, watched.timed_out, collected.oom);
            let oomed = if collected.oom { " (OOM-killed)" } else { "" };
            let exit = watched
                .exit()
                .map_or_else(|| "no exit code".to_string(), |c| format!("exit {c}"));
            let detail = format!(
                "{exit}{oomed} {place}; the servo uploaded no workspace, nothing collected"
            );
            return finish(ctx, id, state, reason, Outcome::default(), &detail).await;
        }
    };
    if let Ok(c) = &workspace {
        let has_workspace = task.spec.workspace.is_some();
        record_changes(ctx, id, has_workspace, &dest, c.truncated).await;
    }
    // The submitted workspace is in no further launch of this task; only a
    // retry by policy may still need it (`finish` hands it over).
    if task.attempt > i64::from(task.spec.retries) {
        crate::inputs::remove_workspace(&ctx.cfg.state_dir(), id).await;
    }
    tracing::debug!(task_id = %id, "changes recorded");
    let seen = Seen {
        watched,
        oom: collected.oom,
        metered,
        collect_ms: collected.took.as_millis(),
        synthesis,
        verifies,
    };
    conclude(ctx, id, &dest, workspace, seen).await
}
