//! `saheeli serve`: the foreman's loop. SQLite holds the desired state,
//! the engine the actual one; this loop claims queued tasks, admits them
//! (the concurrency limit, the breaker), hands each to a supervisor
//! (`crate::supervisor`: one task's life), takes over tasks whose foreman
//! died, passes cancels on, sweeps leftovers and renews leases.
//!
//! Other `saheeli` processes talk to it through the database (`task
//! cancel` sets a flag it reads when the database's doorbell rings: see
//! `bell`).

mod bell;
mod context;
mod control;
mod gate;
mod lease;
mod serve;
mod sweep;

/// Read by `gateway/upstream.rs` (the auto connection ceiling) until that
/// takes it from `crate::admission` (plan step B1).
pub(crate) use crate::admission::Tuning;
pub(crate) use context::{Ctx, Joined, MAX_REQUEUES, ServeOptions};
pub(crate) use control::{Command, Inbox};
#[cfg(test)]
pub(crate) use control::{Control, channel};
pub(crate) use lease::{abandon, lease_lost, let_go, still_held};
pub(crate) use serve::run;
