//! Parking: a servo that waits for a human longer than `park_after` saves
//! its session and exits; its container goes, its workspace volume stays,
//! and the lease is let go. The reply (or resume) queues the task again and
//! a new container on the same volume goes on from the session. A parked
//! task that is cancelled, or waits past `human_timeout`, is ended here:
//! its workspace collected like any other.

use std::sync::Arc;

use saheeli_protocol::Reason;
use tracing::{error, info, warn};

use crate::docker;
use crate::gateway::Gateway;
use crate::inputs;
use crate::state::TaskState;
use crate::store::{Outcome, TaskRow};

use super::*;

/// The servo exited parked: let the container and the lease go, keep the
/// workspace. `active_ms`: working time this launch added.
pub(super) async fn park(
    ctx: &Ctx,
    task: &TaskRow,
    container: Option<&str>,
    gateway: Option<Gateway>,
    active_ms: i64,
) -> Joined {
    let id = task.id;
    if !remove_containers(ctx, id, container).await {
        warn!(task_id = %id, "the parked servo's container was not removed; it goes when the task does");
    }
    if let Some(g) = gateway {
        g.stop().await;
    }
    let lease = ctx.lease.clone();
    match ctx.db(move |s| s.park(id, &lease, active_ms.max(0))).await {
        Ok(true) => info!(task_id = %id, "parked; the reply is already there: queued to go on"),
        Ok(false) => info!(task_id = %id, "parked: waiting for a human, without a container"),
        Err(e) if lease_lost(&e) => {}
        Err(e) => error!(task_id = %id, error = %format!("{e:#}"), "recording the park failed"),
    }
    (id, None)
}

/// Ends a parked task (held by this foreman now): cancelled, or nobody
/// answered within `human_timeout`. The kept workspace is collected.
pub(super) async fn end_parked(ctx: Arc<Ctx>, task: TaskRow, cancelled: bool) -> Joined {
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
    // a foreman that could not record the ending (case 22): its volume is
    // gone, and collecting again would replace the work with nothing.
    let kept = std::fs::symlink_metadata(&dest).is_ok_and(|m| m.is_dir());
    let collected = if kept {
        if handles_swarm(&ctx) {
            swarm::remove_all(&ctx, id).await;
        } else {
            cleanup(&ctx, id, None).await;
        }
        Err(anyhow::anyhow!("kept"))
    } else if handles_swarm(&ctx) {
        collect_parked(&ctx, id, &dest).await
    } else {
        collect_kept_volume(&ctx, &task, &dest).await
    };
    inputs::remove_workspace(&ctx.cfg.state_dir(), id).await;
    let mut outcome = Outcome {
        results_path: Some(dest.display().to_string()),
        ..Default::default()
    };
    count_usage(id, &dest, &mut outcome).await;
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

/// Collects a parked task's kept volume on this host, and removes it.
async fn collect_kept_volume(
    ctx: &Ctx,
    task: &TaskRow,
    dest: &std::path::Path,
) -> anyhow::Result<crate::collect::Collected> {
    let id = task.id;
    // A container on the kept volume, never started: the archive API reads
    // through it (or it is removed first for a local copy).
    let created = docker::create_container(
        &ctx.docker,
        id,
        &task.spec,
        &ctx.cfg.file.image,
        &docker::volume_name(id),
        None,
        None,
    )
    .await;
    let (collected, known) = match created {
        Ok(cid) => (gather(ctx, id, &cid, dest).await, Some(cid)),
        Err(e) => (Err(e), None),
    };
    cleanup(ctx, id, known.as_deref()).await;
    collected
}
