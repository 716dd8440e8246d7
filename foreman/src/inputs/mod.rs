//! What goes into a task's /workspace before its servo starts: a copy of the
//! `workspace:` directory, taken at submit time, and the launch files
//! (`prompt.md`, `.saheeli/task.json`).
//!
//! Everything is owned by the servo's user (uid 1000) in the archives, so
//! the unprivileged servo can write to its workspace.

mod check;
mod copies;
mod launch;
mod pack;
mod parked;
mod restore;
#[cfg(test)]
mod tests;

pub(crate) use check::*;
pub(crate) use copies::*;
pub(crate) use launch::*;
pub(crate) use pack::*;
pub(crate) use parked::*;
pub(crate) use restore::*;
