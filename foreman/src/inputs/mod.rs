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
mod packed;
mod parked;
mod restore;
#[cfg(test)]
mod tests;

pub(crate) use check::{Bounds, bounds_of, check_within, check_workspace_path};
pub(crate) use copies::{
    AGENT_UID, copy_workspace, discard_workspace, hand_over_workspace, new_workspace_tar,
    pack_resume, pack_resume_with, remove_workspace, resume_tar, start_tar, workspace_tar,
};
pub(crate) use launch::launch_tar;
pub(crate) use pack::{
    PackError, PackOptions, check_workspace, pack_workspace, pack_workspace_with,
};
pub(crate) use packed::{pack, pack_options};
pub(crate) use parked::{
    move_tree, new_parked_dir, pack_dir, parked_dir, parked_tasks, remove_parked,
};
pub(crate) use restore::{restore_tar, workspace_args};
