//! What the CLI, the HTTP API, the task routes and the supervisor do
//! alike, below all of them: submitting a task (`submit`, `children` for
//! a person's child task), steering one (`steer`, `steps`), retrying one
//! (`retry`), showing one (`view`), opening the database (`store`),
//! submitting by a definitions template (`definitions`). Each
//! takes plain request types (never clap's), and fails with [`Error`],
//! sorted where it failed so that the API answers by its variant and the
//! CLI prints it.

mod children;
mod definitions;
mod error;
mod follow_up;
mod fork;
mod git;
mod retry;
mod snapshot;
mod steer;
mod steps;
mod store;
mod submit;
mod view;

pub(crate) use children::submit_child;
pub(crate) use definitions::{template_spec, with_definitions};
pub(crate) use error::Error;
pub(crate) use follow_up::{MAX_FEEDBACK, follow_up};
#[allow(unused_imports)]
pub(crate) use fork::fork_at;
pub(crate) use fork::{Fork, fork_task};
pub(crate) use retry::retry_task;
pub(crate) use snapshot::{Asked, kept_snapshots, request_snapshot};
#[cfg(test)]
pub(crate) use steer::user_name;
pub(crate) use steer::{Steer, StepOverrideState, joined, os_user, steer, who};
pub(crate) use steps::next_step_plan;
pub(crate) use store::{narrow, open_existing_store, open_store};
pub(crate) use submit::{Submit, pack_submitted, require_image, spec_for_text, submit_spec};
pub(crate) use view::{EVENTS_SHOWN, EventPage, task_view};
