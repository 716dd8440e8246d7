//! Leases: renewal on a timer of its own, and what a supervisor does when
//! it learns another foreman holds its task now.

use std::sync::{Arc, Mutex};

use saheeli_protocol::TaskId;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::gateway::Gateway;
use crate::store::{DbError, Store};

use super::context::{Ctx, Joined};
use super::serve::Handles;

/// Whether `e` says another foreman took the task over: the supervisor
/// then stops quietly, touching neither the container nor the results.
/// A `DbError` (from `Ctx::db`) is matched; an `anyhow` chain that carries
/// one is read back by the store (`store::lease_lost_in`).
pub(crate) fn lease_lost(e: &impl LostLease) -> bool {
    e.lease_lost()
}

/// An error that can say another foreman took the task over.
pub(crate) trait LostLease {
    fn lease_lost(&self) -> bool;
}

impl LostLease for DbError {
    fn lease_lost(&self) -> bool {
        DbError::lease_lost(self)
    }
}

impl LostLease for anyhow::Error {
    fn lease_lost(&self) -> bool {
        crate::store::lease_lost_in(self)
    }
}

/// Renews this foreman's leases every `lease`/5. A task missing from the
/// renewal was taken over by another foreman (this one was paused or cut
/// off for longer than the lease): its supervisor is told to let go.
pub(super) async fn renew_leases(
    ctx: Arc<Ctx>,
    store: Arc<Mutex<Store>>,
    handles: Handles,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(ctx.cfg.file.lease / 5);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let asked = std::time::Instant::now();
        let lease = ctx.lease.clone();
        let store = store.clone();
        let renewed = tokio::task::spawn_blocking(move || {
            store
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .renew(&lease)
        })
        .await;
        match renewed {
            Ok(Ok(held)) => {
                for (id, h) in handles.lock().unwrap().iter() {
                    // Claimed after the renewal was asked: not in its answer.
                    if h.since < asked && !held.contains(id) && !h.is_lost() {
                        warn!(task_id = %id, "lease lost: another foreman holds this task now");
                        h.lose();
                    }
                }
            }
            Ok(Err(e)) => warn!(error = %e, "renewing leases failed; trying again"),
            Err(e) => warn!(error = %e, "lease renewal thread panicked; trying again"),
        }
    }
}

/// Whether this foreman still holds `id` (renewing the lease if so).
/// A database error counts as held: the writes that follow are fenced.
pub(crate) async fn still_held(ctx: &Ctx, id: TaskId) -> bool {
    let lease = ctx.lease.clone();
    !matches!(ctx.db(move |s| s.hold(id, &lease)).await, Err(e) if lease_lost(&e))
}

/// Lets a task go that another foreman holds now: its container, volume,
/// results and gateway directory are the other's, so nothing is touched.
pub(crate) async fn abandon(id: TaskId, gateway: Option<Gateway>) -> Joined {
    warn!(task_id = %id, "lease lost: another foreman took this task over; letting go");
    if let Some(g) = gateway {
        g.abandon().await;
    }
    (id, None)
}

/// Gives a task back for a later take-over round when its actual state
/// cannot be learnt now (Docker not answering).
pub(crate) async fn let_go(ctx: &Ctx, id: TaskId, e: &impl std::fmt::Display) -> Joined {
    warn!(task_id = %id, error = %format!("{e:#}"), "cannot inspect the task's container yet; trying again later");
    let lease = ctx.lease.clone();
    let _ = ctx.db(move |s| s.release(id, &lease)).await;
    (id, None)
}
