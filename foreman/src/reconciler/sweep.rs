//! Removing what ended tasks left: whatever carries their label on the
//! engine (containers, volumes, workspace images; services, secrets and
//! node leftovers on a swarm), and parked workspaces kept on this host.
//! Tasks this loop is running are skipped.

use std::collections::HashSet;
use std::sync::Arc;

use tracing::info;

use super::context::Ctx;
use super::serve::Handles;

/// Removes what ended tasks left behind (a foreman that died mid-cleanup,
/// a node that was Down).
pub(super) async fn sweep(ctx: Arc<Ctx>, active: Handles) {
    sweep_parked(&ctx, &active).await;
    let Ok(left) = ctx.engine.leftovers().await else {
        return;
    };
    let mut ended = HashSet::new();
    for task in left.tasks() {
        let lookup = task.clone();
        let is_ended = ctx
            .db(move |s| s.get(&lookup))
            .await
            .ok()
            .flatten()
            .is_some_and(|t| t.state.is_terminal() && !active.lock().unwrap().contains_key(&t.id));
        if is_ended {
            ended.insert(task);
        }
    }
    if !ended.is_empty() {
        ctx.engine.remove_leftovers(left, &ended).await;
    }
}

/// Removes parked workspaces of tasks that have ended (a task normally
/// removes its own in `finish`; this covers one ended otherwise, or by a
/// foreman that stopped first).
async fn sweep_parked(ctx: &Ctx, active: &Handles) {
    for id in crate::inputs::parked_tasks(&ctx.cfg.state_dir()) {
        if active.lock().unwrap().contains_key(&id) {
            continue;
        }
        let ended = ctx
            .db(move |s| s.get(&id.to_string()))
            .await
            .ok()
            .flatten()
            .is_none_or(|t| t.state.is_terminal());
        if ended {
            info!(task_id = %id, "removing the parked workspace of an ended task");
            crate::inputs::remove_parked(&ctx.cfg.state_dir(), id).await;
        }
    }
}
