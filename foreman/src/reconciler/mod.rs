//! `saheeli serve`: the foreman's loop. SQLite holds the desired state,
//! the engine the actual one; this loop claims queued tasks, admits them
//! (the concurrency limit, the breaker), hands each to a supervisor
//! (`crate::supervisor`: one task's life), takes over tasks whose foreman
//! died, passes cancels on, sweeps leftovers and renews leases. What it
//! shares with the supervisors (`Ctx`), their control channels and what a
//! supervisor does with a lost lease are `supervisor`'s; the admission
//! decisions are `crate::admission`'s (`gate` is the loop's side).
//!
//! Other `saheeli` processes talk to it through the database (`task
//! cancel` sets a flag it reads when the database's doorbell rings: see
//! `bell`). `pools`: the `pools:` a claim is held to, the definitions'
//! in use or config.yaml's.

mod bell;
#[cfg(test)]
mod conformance_tests;
mod gate;
mod lease;
mod options;
mod pools;
mod serve;
mod sweep;

pub(crate) use options::ServeOptions;
pub(crate) use serve::run;
