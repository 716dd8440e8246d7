//! Removing what ended tasks left: whatever carries their label on the
//! engine (containers, volumes, workspace images; services, secrets and
//! node leftovers on a swarm), and parked workspaces kept on this host.
//! Tasks this loop is running are skipped.

use std::collections::HashSet;
use std::sync::Arc;

use tracing::info;

use super::serve::Handles;
use crate::supervisor::Ctx;

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
        left.remove(&ended).await;
    }
}

/// Warm servos (issue 28) whose foreman stopped, or that a pool lost
/// track of: removed, unless a task that has not ended records one as
/// its container (its claim: adoption takes it over). Another foreman's
/// is left alone while that foreman serves (its admission row is fresh).
pub(super) async fn sweep_pool(ctx: Arc<Ctx>) {
    let Some(pool) = ctx.engine.pool() else {
        return;
    };
    let Ok(left) = pool.leftovers().await else {
        return;
    };
    if left.is_empty() {
        return;
    }
    let since = crate::store::now_ms() - owner_fresh_ms(&ctx);
    let seen = ctx
        .db(move |s| {
            let live = s.serving_owners(since)?;
            let in_use = s.warm_in_use(crate::backend::POOL_PREFIX)?;
            Ok((live, in_use))
        })
        .await;
    let Ok((live, in_use)) = seen else {
        return;
    };
    let remove: Vec<String> = left
        .into_iter()
        .filter(|(name, (owner, mine))| {
            removable(PoolSeen {
                mine: *mine,
                in_use: in_use.contains(name),
                owner_is_me: *owner == ctx.lease.owner,
                owner_serves: live.contains(owner),
            })
        })
        .map(|(name, _)| name)
        .collect();
    if !remove.is_empty() {
        pool.remove(&remove).await;
    }
}

/// A foreman serves while its admission row is younger than this.
fn owner_fresh_ms(ctx: &Ctx) -> i64 {
    (ctx.cfg.file.lease.as_millis() as i64).max(6_000)
}

/// What the sweeper knows of one warm servo's container or volume.
#[derive(Clone, Copy, Debug)]
struct PoolSeen {
    /// This foreman's pool knows it (idle, being made, or claimed).
    mine: bool,
    /// A task that has not ended records it (claimed).
    in_use: bool,
    /// Its label names this foreman.
    owner_is_me: bool,
    /// The foreman its label names serves now.
    owner_serves: bool,
}

/// Whether to remove it: never a claimed one or one this pool knows;
/// one this foreman made and forgot, or whose foreman stopped, goes.
fn removable(s: PoolSeen) -> bool {
    if s.in_use || s.mine {
        return false;
    }
    s.owner_is_me || !s.owner_serves
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unclaimed_warm_servos_of_no_serving_pool_are_removed() {
        let seen = |mine, in_use, owner_is_me, owner_serves| PoolSeen {
            mine,
            in_use,
            owner_is_me,
            owner_serves,
        };
        // (mine, in_use, owner is me, owner serves) -> removed
        let table = [
            (seen(true, false, true, true), false),   // idle in this pool
            (seen(false, true, true, true), false),   // claimed by a task
            (seen(false, true, false, false), false), // a dead foreman's claim: adopted
            (seen(false, false, true, true), true),   // made here, forgotten
            (seen(false, false, false, true), false), // another serving foreman's
            (seen(false, false, false, false), true), // a stopped foreman's idle one
        ];
        for (s, want) in table {
            assert_eq!(removable(s), want, "{s:?}");
        }
    }
}
