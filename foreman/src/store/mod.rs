//! The SQLite queue: tasks, their state transitions and the event trail;
//! the human desk (`desk`, `notes`, `pause`), a template's steps done (`steps`), each
//! serving foreman's admission state (`admission`), and evaluation runs
//! with their case tasks (`eval`), and parent and child tasks
//! (`children`), and the definitions judged from Git with the foreman's
//! own notices (`definitions`).
//!
//! WAL mode, a 10 s busy timeout, and every write in a `BEGIN IMMEDIATE`
//! transaction, so several `saheeli` processes can share one file without
//! SQLITE_BUSY errors. Every state change writes an event row in the same
//! transaction. Synchronous on purpose: async callers use `spawn_blocking`.

mod admission;
mod blocked;
mod caps;
mod carve;
mod carved;
mod children;
mod definitions;
mod desk;
mod egress;
mod error;
mod eval;
mod freeze;
mod git;
mod guard;
mod lease;
pub(crate) mod ledger;
mod lifecycle;
mod lookup;
mod metrics;
mod notes;
mod outbox;
mod overrides;
mod pause;
mod pool;
mod queue;
mod restore;
mod rows;
mod samples;
mod schema;
mod setup;
mod step_control;
mod step_override;
mod steps;
#[cfg(test)]
pub(crate) mod tests;
mod verify;

// Helpers the parts share (private to the store).
use error::Result;
use lifecycle::{current_state, held_state, move_state};
use queue::{enqueue_webhooks, insert_event, insert_task};
use rows::{COLUMNS, read_row};

pub(crate) use admission::AdmissionRow;
pub(crate) use caps::{Closed, ClosedBy, PoolGroup};
pub(crate) use carve::ParentBudget;
pub(crate) use children::{ChildRow, SpawnAsk, Spawned, WaitState};
pub(crate) use definitions::{DefinitionsRow, Notice};
pub(crate) use desk::{DeskError, HumanAct};
pub(crate) use egress::{EgressEntry, EgressVerdict};
pub(crate) use error::{DbError, StoreError, lease_lost_in};
pub(crate) use eval::{EvalLink, EvalRunRow};
#[cfg(test)]
pub(crate) use guard::{LOGGED_REFUSALS, MAX_GATEWAY_BYTES};
pub(crate) use metrics::{ScrapeRead, ScrapeSink, TrailFact};
pub(crate) use outbox::{Delivery, WebhookCounts};
pub(crate) use rows::{EventRow, Lease, Outcome, Override, Retry, TaskRow, TrailRow, now_ms};
pub(crate) use schema::wait_when_busy;
pub(crate) use schema::{ExecCached, Store};
pub(crate) use step_control::StepStarted;
pub(crate) use step_override::StepOverride;
pub(crate) use steps::StepMarked;
#[cfg(test)]
pub(crate) use steps::StepRow;
#[cfg(test)]
pub(crate) use steps::step_status;
pub(crate) use steps::{StepState, StepStatus, step_status_with};
