//! Parking: a servo that waits for a human longer than `park_after` saves
//! its session and exits; the engine keeps its workspace (a local volume,
//! or on a swarm the upload kept as `.saheeli/parked/<id>/`), the servo's
//! container or service goes, and the lease is let go. The reply (or
//! resume) queues the task again and the next launch goes on from the
//! session. A parked task that is cancelled, or waits past
//! `human_timeout`, is ended here: its kept workspace collected like any
//! other.

use std::sync::Arc;

use saheeli_protocol::{Reason, TaskId};
use tracing::{error, info};

use super::conclude::count_usage;
use super::finish::finish;
use super::{Ctx, Joined, lease_lost};
use crate::backend::Removal;
use crate::inputs;
use crate::state::TaskState;
use crate::store::{Outcome, TaskRow};

/// The servo exited parked and its workspace is kept: records the park
/// and lets the lease go. `active_ms`: working time this launch added.
pub(super) async fn record_park(ctx: &Ctx, id: TaskId, active_ms: i64) -> Joined {
    let lease = ctx.lease.clone();
    match ctx.db(move |s| s.park(id, &lease, active_ms.max(0))).await {
        Ok(true) => info!(task_id = %id, "parked; the reply is already there: queued to go on"),
        Ok(false) => info!(task_id = %id, "parked: waiting for a human, without a servo"),
        Err(e) if lease_lost(&e) => {}
        Err(e) => error!(task_id = %id, error = %format!("{e:#}"), "recording the park failed"),
    }
    (id, None)
}

/// Ends a parked task (held by this foreman now): cancelled, or nobody
/// answered within `human_timeout`. The kept workspace is collected.
pub(crate) async fn end_parked(ctx: Arc<Ctx>, task: TaskRow, cancelled: bool) -> Joined {
    let id = task.id;
    let (state, reason, detail) = if cancelled {
        (
            TaskState::Cancelled,
            Reason::Cancelled,
            "cancelled while waiting for a human".to_string(),
        )
    } else {
        let waited = std::time::Duration::from_secs(task.spec.human_timeout_s);
        (
            TaskState::Incomplete,
            Reason::NoAnswer,
            format!(
                "nobody answered within human_timeout ({})",
                humantime::format_duration(waited)
            ),
        )
    };
    info!(task_id = %id, %reason, "ending a parked task");
    let dest = ctx.cfg.results_dir().join(id.to_string());
    // Results already there were collected from this task's last servo by
    // a foreman that could not record the ending (case 22): its workspace
    // is gone, and collecting again would replace the work with nothing.
    let kept = std::fs::symlink_metadata(&dest).is_ok_and(|m| m.is_dir());
    let collected = if kept {
        ctx.engine.remove_task(id, Removal::All).await;
        Err(anyhow::anyhow!("kept"))
    } else {
        ctx.engine.collect_kept(id, &task.spec, &dest).await
    };
    inputs::remove_workspace(&ctx.cfg.state_dir(), id).await;
    let mut outcome = Outcome {
        results_path: Some(dest.display().to_string()),
        ..Default::default()
    };
    let _ = count_usage(id, &dest, &mut outcome).await;
    if task.input_tokens + task.output_tokens > 0 {
        outcome.input_tokens = task.input_tokens;
        outcome.output_tokens = task.output_tokens;
        outcome.cost_usd = task.cost_usd;
        outcome.cache_read_tokens = task.cache_read_tokens;
        outcome.cache_write_tokens = task.cache_write_tokens;
    }
    let detail = match collected {
        _ if kept => format!("{detail}; the workspace collected earlier is kept"),
        Ok(c) => format!("{detail}; collected {} files, {} bytes", c.files, c.bytes),
        Err(e) => {
            outcome.results_path = None;
            format!("{detail}; the workspace could not be collected: {e:#}")
        }
    };
    finish(&ctx, id, state, reason, outcome, &detail).await
}
