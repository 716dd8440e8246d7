//! What a supervisor does when it learns another foreman holds its task
//! now (the renewal itself is the loop's: `reconciler::lease`).

use saheeli_protocol::TaskId;
use tracing::warn;

use super::gateway::Gateway;
use crate::store::DbError;

use super::ctx::{Ctx, Joined};

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
