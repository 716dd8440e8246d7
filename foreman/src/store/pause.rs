//! Pauses and parked tasks, durably: a pause asked for (the CLI, or a
//! `pause_on` breakpoint) and lifted, a waiting servo parked without its
//! container, and a parked task queued again once its wait is over (or
//! taken to be ended when it was cancelled or waited too long).

use rusqlite::{TransactionBehavior, params};
use saheeli_protocol::TaskId;

use crate::state::{TaskState, sql_list};

use super::desk::{DeskError, note_event};
use super::{
    ExecCached, Lease, Result, Store, TaskRow, current_state, held_state, move_state, now_ms,
};

impl Store {
    /// Asks the servo to pause before its next LLM call.
    pub fn request_pause(
        &mut self,
        id: TaskId,
        by: &str,
    ) -> std::result::Result<TaskState, DeskError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let state = current_state(&tx, id)?;
        if !matches!(
            state,
            TaskState::Queued | TaskState::Starting | TaskState::Running | TaskState::Paused
        ) {
            return Err(DeskError::CannotPause { id, state });
        }
        tx.exec_cached(
            "UPDATE tasks SET pause_requested = 1 WHERE id = ?1",
            params![id.to_string()],
        )?;
        note_event(
            &tx,
            id,
            "pause_requested",
            Some(by),
            "pause before the next LLM call",
        )?;
        tx.commit()?;
        Ok(state)
    }

    /// Lifts a pause; a parked paused task is queued to go on.
    pub fn resume(&mut self, id: TaskId, by: &str) -> std::result::Result<TaskState, DeskError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let state = current_state(&tx, id)?;
        let requested: bool = tx.query_row(
            "SELECT pause_requested FROM tasks WHERE id = ?1",
            params![id.to_string()],
            |r| r.get::<_, i64>(0).map(|v| v != 0),
        )?;
        if super::blocked::unblock(&tx, id, state, super::blocked::RESUMED_TEXT, by)? {
            note_event(&tx, id, "resumed", Some(by), "resume (unblocked)")?;
            tx.commit()?;
            return Ok(state);
        }
        if state != TaskState::Paused && !requested {
            return Err(DeskError::NotPaused { id, state });
        }
        tx.exec_cached(
            "UPDATE tasks SET pause_requested = 0 WHERE id = ?1",
            params![id.to_string()],
        )?;
        note_event(&tx, id, "resumed", Some(by), "resume")?;
        requeue_if_parked(&tx, id, state, "resumed")?;
        tx.commit()?;
        Ok(state)
    }

    /// A `pause_on` breakpoint hit (fenced): pause before the next call.
    pub fn breakpoint(&mut self, id: TaskId, lease: &Lease, detail: &str) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        held_state(&tx, id, lease)?;
        if !super::guard::charge(&tx, id, detail.len())? {
            let e = super::guard::capped(&tx, id)?;
            tx.commit()?;
            return Err(e);
        }
        tx.exec_cached(
            "UPDATE tasks SET pause_requested = 1 WHERE id = ?1",
            params![id.to_string()],
        )?;
        note_event(&tx, id, "breakpoint", Some("saheeli"), detail)?;
        tx.commit()?;
        Ok(())
    }

    /// Whether `breakpoint: on_subtask` holds for task `id`: its
    /// prompt's (`declared`), unless a person set or cleared it since.
    pub fn subtask_breakpoint(&self, id: TaskId, declared: bool) -> Result<bool> {
        use rusqlite::OptionalExtension;
        let set: Option<i64> = self
            .conn
            .prepare_cached(
                "SELECT active FROM step_breakpoints
                 WHERE task_id = ?1 AND name = '' AND position = 'on_subtask'",
            )?
            .query_row(params![id.to_string()], |r| r.get(0))
            .optional()?;
        Ok(set.map_or(declared, |a| a != 0))
    }

    /// A person sets (`active`) or clears `breakpoint: on_subtask` on a
    /// task that has not ended.
    pub fn set_subtask_breakpoint(
        &mut self,
        id: TaskId,
        active: bool,
        by: &str,
    ) -> std::result::Result<TaskState, DeskError> {
        self.put_breakpoint(id, "", "on_subtask", active, by, "on_subtask")
    }

    /// The servo parked: its container is gone, the workspace is kept and
    /// the lease let go. When the reply (or resume) came meanwhile, the task
    /// is queued at once. Returns whether it was.
    pub fn park(&mut self, id: TaskId, lease: &Lease, active_ms: i64) -> Result<bool> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let state = held_state(&tx, id, lease)?;
        tx.exec_cached(
            "UPDATE tasks SET parked = 1, owner = NULL, lease_until = NULL, container_id = NULL,
                active_ms = active_ms + ?2
             WHERE id = ?1",
            params![id.to_string(), active_ms],
        )?;
        note_event(
            &tx,
            id,
            "parked",
            None,
            "waiting without a container; the workspace is kept",
        )?;
        let queued = requeue_if_parked(&tx, id, state, "the reply came while parking")?;
        tx.commit()?;
        Ok(queued)
    }

    /// Parked tasks that must end now: cancelled, or waited past their
    /// `human_timeout`. Each with whether it was a cancel.
    pub fn parked_to_end(&self) -> Result<Vec<(TaskId, bool)>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT id, cancel_requested FROM tasks WHERE parked = 1 AND owner IS NULL
               AND state IN {} AND (cancel_requested = 1 OR human_deadline <= ?1)",
            sql_list(&TaskState::WAITING)
        ))?;
        let rows = stmt
            .query_map(params![now_ms()], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? != 0))
            })?
            .filter_map(|r| r.ok())
            .filter_map(|(id, c)| id.parse().ok().map(|id| (id, c)))
            .collect();
        Ok(rows)
    }

    /// Takes a parked task to end it (nobody else holds it).
    pub fn hold_parked(&mut self, id: TaskId, lease: &Lease) -> Result<Option<TaskRow>> {
        let n = self.conn.exec_cached(
            &format!(
                "UPDATE tasks SET owner = ?2, lease_until = ?3 WHERE id = ?1 AND parked = 1
                   AND owner IS NULL AND state IN {}",
                sql_list(&TaskState::WAITING)
            ),
            params![id.to_string(), lease.owner, now_ms() + lease.ms],
        )?;
        if n == 0 {
            return Ok(None);
        }
        self.get(&id.to_string())
    }
}

/// A parked task whose wait is over (replied, or resumed) goes back to the
/// queue, to start again on its workspace. Returns whether it did.
pub(super) fn requeue_if_parked(
    tx: &rusqlite::Transaction<'_>,
    id: TaskId,
    state: TaskState,
    why: &str,
) -> Result<bool> {
    let (parked, owner, pause, open): (bool, Option<String>, bool, bool) = tx.query_row(
        "SELECT parked, owner, pause_requested,
                EXISTS (SELECT 1 FROM asks a WHERE a.task_id = tasks.id AND a.decision IS NULL)
         FROM tasks WHERE id = ?1",
        params![id.to_string()],
        |r| {
            Ok((
                r.get::<_, i64>(0)? != 0,
                r.get(1)?,
                r.get::<_, i64>(2)? != 0,
                r.get::<_, i64>(3)? != 0,
            ))
        },
    )?;
    let over = match state {
        TaskState::WaitingHuman | TaskState::Blocked => !open,
        TaskState::Paused => !pause,
        _ => false,
    };
    if !(parked && owner.is_none() && over) {
        return Ok(false);
    }
    move_state(
        tx,
        id,
        state,
        TaskState::Queued,
        Some(&format!("{why}; queued to go on")),
    )?;
    tx.exec_cached(
        "UPDATE tasks SET not_before = NULL, human_deadline = NULL WHERE id = ?1",
        params![id.to_string()],
    )?;
    Ok(true)
}
