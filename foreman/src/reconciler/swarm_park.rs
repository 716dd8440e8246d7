//! Parking on a swarm. The servo's volume is node-local, so what it
//! parked with comes home in its upload (marked parked) and is kept as the
//! task's parked workspace (`.saheeli/parked/<id>/`, never as results);
//! the job service, its secret and its node leftovers go, the lease is let
//! go and the park recorded as on one host. The launch after the reply
//! serves that workspace to the new servo, on whichever node, which goes
//! on from the session in it. A parked task that ends (cancelled, or no
//! answer within `human_timeout`) is collected from it into results; it is
//! removed whenever the task ends (`finish`).

use saheeli_protocol::{Reason, ServoExit, TaskId};
use tracing::{error, info, warn};

use crate::collect::Collected;
use crate::gateway::Uploaded;
use crate::inputs;
use crate::store::TaskRow;

use super::*;

/// Whether the servo exited parked (and nothing stopped it).
pub(super) fn parked_exit(code: i64, timed_out: bool, stopped: Option<Reason>) -> bool {
    !timed_out && stopped.is_none() && code == i64::from(ServoExit::Parked.code())
}

/// Puts an upload where the exit says it belongs: the parked workspace
/// when the servo parked, else results. The servo's own word (its header)
/// chose where it was extracted; the exit code decides.
pub(super) async fn settle_upload(
    ctx: &Ctx,
    id: TaskId,
    uploaded: Uploaded,
    parked: bool,
) -> anyhow::Result<Collected> {
    let upload = uploaded.map_err(|e| anyhow::anyhow!("the servo's upload: {e}"))?;
    if upload.parked == parked {
        return Ok(upload.collected);
    }
    let kept = inputs::parked_dir(&ctx.cfg.state_dir(), id);
    let results = ctx.cfg.results_dir().join(id.to_string());
    let (from, to) = if parked {
        (results, inputs::new_parked_dir(&ctx.cfg.state_dir(), id)?)
    } else {
        (kept, results)
    };
    warn!(task_id = %id, parked, "the upload's parked mark and the exit disagree; moving it");
    let (secrets, cap) = (
        ctx.upstream.providers.secrets(),
        ctx.cfg.file.max_results_size.0,
    );
    tokio::task::spawn_blocking(move || inputs::move_tree(&from, &to, &secrets, cap)).await?
}

/// The servo parked and its workspace is kept: removes the job service
/// and what it left, lets the lease go and records the park.
pub(super) async fn park_swarm(ctx: &Ctx, task: &TaskRow, active_ms: i64) -> Joined {
    let id = task.id;
    let lease = ctx.lease.clone();
    match ctx.db(move |s| s.park(id, &lease, active_ms.max(0))).await {
        Ok(true) => info!(task_id = %id, "parked; the reply is already there: queued to go on"),
        Ok(false) => info!(task_id = %id, "parked: waiting for a human, no job service left"),
        Err(e) if lease_lost(&e) => {}
        Err(e) => error!(task_id = %id, error = %format!("{e:#}"), "recording the park failed"),
    }
    (id, None)
}

/// A parked swarm task's kept workspace, collected into `dest` (moved:
/// the parked copy is gone after).
pub(super) async fn collect_parked(
    ctx: &Ctx,
    id: TaskId,
    dest: &std::path::Path,
) -> anyhow::Result<Collected> {
    remove_all(ctx, id).await;
    let kept = inputs::parked_dir(&ctx.cfg.state_dir(), id);
    anyhow::ensure!(
        kept.is_dir(),
        "no parked workspace `{}` is kept for this task",
        kept.display()
    );
    let dest = dest.to_path_buf();
    let (secrets, cap) = (
        ctx.upstream.providers.secrets(),
        ctx.cfg.file.max_results_size.0,
    );
    tokio::task::spawn_blocking(move || inputs::move_tree(&kept, &dest, &secrets, cap)).await?
}
