//! A servo frozen while its task waits (issue 51): `frozen_at` on the
//! task while its container is in the cgroup freezer, an event per freeze
//! and thaw (`frozen`, `thawed`), and what thaws it: anything that moves
//! the task's trail (an answer, an approval, a resume, a message, a
//! cancel) or ends one of its children.

use rusqlite::{TransactionBehavior, params};
use saheeli_protocol::TaskId;

use super::desk::note_event;
use super::{ExecCached, Lease, Result, Store, StoreError};
use crate::state::{TaskState, sql_list};

impl Store {
    /// Where the trail ends now: a thaw is due once something after this
    /// concerns the task ([`Store::moved_since`]).
    pub fn trail_mark(&mut self) -> Result<i64> {
        Ok(self
            .conn
            .query_row("SELECT coalesce(max(id), 0) FROM events", [], |r| r.get(0))?)
    }

    /// Whether task `id`'s trail moved after event `mark` (its own
    /// `frozen` and `thawed` aside), or one of its children ended since.
    pub fn moved_since(&mut self, id: TaskId, mark: i64) -> Result<bool> {
        let sql = format!(
            "SELECT EXISTS(SELECT 1 FROM events WHERE task_id = ?1 AND id > ?2
                             AND coalesce(kind, '') NOT IN ('frozen', 'thawed'))
                 OR EXISTS(SELECT 1 FROM children c JOIN events e ON e.task_id = c.child_id
                           WHERE c.parent_id = ?1 AND e.id > ?2 AND e.kind IS NULL
                             AND e.to_state IN {})",
            sql_list(&TaskState::TERMINAL)
        );
        Ok(self
            .conn
            .prepare_cached(&sql)?
            .query_row(params![id.to_string(), mark], |r| r.get(0))?)
    }

    /// Records task `id`'s servo as frozen since `at` (fenced by `lease`).
    pub fn froze(&mut self, id: TaskId, lease: &Lease, at: i64, detail: &str) -> Result<()> {
        self.freeze_write(id, lease, Some(at), "frozen", detail)
    }

    /// Records task `id`'s servo as running again (fenced by `lease`).
    pub fn thawed(&mut self, id: TaskId, lease: &Lease, detail: &str) -> Result<()> {
        self.freeze_write(id, lease, None, "thawed", detail)
    }

    fn freeze_write(
        &mut self,
        id: TaskId,
        lease: &Lease,
        at: Option<i64>,
        kind: &str,
        detail: &str,
    ) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = tx.exec_cached(
            &format!(
                "UPDATE tasks SET frozen_at = ?3 WHERE id = ?1 AND owner = ?2 AND state IN {}",
                sql_list(&TaskState::HELD)
            ),
            params![id.to_string(), lease.owner, at],
        )?;
        if n == 0 {
            return Err(StoreError::LeaseLost(id));
        }
        note_event(&tx, id, kind, Some("saheeli"), detail)?;
        tx.commit()?;
        Ok(())
    }
}
