//! `saheeli task override`: a person sets the outcome of an ended task.
//!
//! Not a lifecycle step (an ended task never moves on its own, and
//! `TaskState::can_become` keeps saying so): an explicit act with its own
//! check, recorded in the event trail like every change of state.

use rusqlite::{TransactionBehavior, params};
use saheeli_protocol::TaskId;

use crate::state::TaskState;

use super::{ExecCached, Result, Store, StoreError, current_state, insert_event, now_ms};

/// The outcomes a task may be given by hand.
const TARGETS: &[TaskState] = &[TaskState::Complete, TaskState::Incomplete];

/// The ended states whose outcome may be overridden (not `cancelled`:
/// nobody judged that run's work).
const OVERRIDABLE: &[TaskState] = &[
    TaskState::Complete,
    TaskState::Incomplete,
    TaskState::Failed,
];

impl Store {
    /// Sets the state of the ended task `id` to `to` (complete or
    /// incomplete) with `reason`, by the OS user `by`. The outcome it first
    /// ended with is kept (`override_from`, set by the first override
    /// only); the state and the event row are written in one transaction.
    pub fn override_outcome(
        &mut self,
        id: TaskId,
        to: TaskState,
        reason: &str,
        by: &str,
    ) -> Result<()> {
        if !TARGETS.contains(&to) {
            return Err(StoreError::BadOverride { id, to });
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let from = current_state(&tx, id)?;
        if !OVERRIDABLE.contains(&from) {
            return Err(StoreError::NotOverridable { id, state: from });
        }
        if from == to {
            return Err(StoreError::SameOutcome { id, state: from });
        }
        let now = now_ms();
        tx.exec_cached(
            "UPDATE tasks SET state = ?2, override_from = COALESCE(override_from, ?3),
                override_reason = ?4, override_by = ?5, override_at = ?6
             WHERE id = ?1",
            params![id.to_string(), to.as_str(), from.as_str(), reason, by, now],
        )?;
        let detail = format!("overridden by {by}: {reason}");
        insert_event(&tx, id, now, Some(from), to, Some(&detail))?;
        tx.commit()?;
        Ok(())
    }
}
