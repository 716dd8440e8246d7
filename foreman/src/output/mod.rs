//! How tasks are shown: tables for people, JSON for scripts; a
//! template's steps with their marks (`steps`); the serving foreman's
//! admission footer (`admission`); the log line of an ended task (`ended`);
//! how long a queued task still waits (`waits`); the snapshots a task
//! keeps (`kept`).

mod admission;
mod dry_run;
mod ended;
mod json;
mod kept;
mod recoverable;
mod samples;
mod steps;
mod table;
mod text;
mod tree;
mod waits;

use crate::text::time;
use json::duration_ms;

pub(crate) use crate::text::{clean, printable, waiting_line};
pub(crate) use admission::admission_line;
pub(crate) use dry_run::{DryRunView, DryWorkspace};
pub(crate) use ended::log_finished;
pub(crate) use json::{AttemptView, TaskView, hit_rate};
pub(crate) use kept::{SnapshotView, snapshots_line};
pub(crate) use recoverable::recoverable;
pub(crate) use samples::{samples_line, samples_view};
pub(crate) use steps::{StepView, steps_text};
pub(crate) use table::{detail, how_to_reply, override_line, short_duration, table};
pub(crate) use text::audit_line;
pub(crate) use tree::{ChildView, TreeTotals, family, family_lines, tree_text};
pub(crate) use waits::waits_line;
