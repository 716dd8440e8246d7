//! Messages for the model, durably: a human's note injected (or, for a
//! `blocked` task, taken as its reply), read by the servo before its next
//! LLM call together with the pause flag (`inbox`), and marked delivered.

use rusqlite::{TransactionBehavior, params};
use saheeli_protocol::TaskId;
use saheeli_protocol::human::Note;

use crate::state::TaskState;

use super::desk::{DeskError, note_event};
use super::{ExecCached, Lease, Result, Store, current_state, held_state, move_state, now_ms};

impl Store {
    /// A message for the model, delivered before its next LLM call: the
    /// note's id. A `blocked` task is unblocked with it instead (None).
    pub fn inject(
        &mut self,
        id: TaskId,
        text: &str,
        by: &str,
    ) -> std::result::Result<Option<i64>, DeskError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let state = current_state(&tx, id)?;
        if state.is_terminal() {
            return Err(DeskError::Ended { id, state });
        }
        // A blocked servo waits for its reply, not for an LLM call: the
        // message is the reply (no note, so it is not told twice).
        if super::blocked::unblock(&tx, id, state, text, by)? {
            note_event(&tx, id, "injected", Some(by), text)?;
            tx.commit()?;
            return Ok(None);
        }
        tx.exec_cached(
            "INSERT INTO notes (task_id, text, author, at) VALUES (?1, ?2, ?3, ?4)",
            params![id.to_string(), text, by, now_ms()],
        )?;
        let note = tx.last_insert_rowid();
        note_event(&tx, id, "injected", Some(by), text)?;
        tx.commit()?;
        Ok(Some(note))
    }

    /// The servo's inbox (fenced): the messages after note `after` (the
    /// newest one the servo has in its session), or without it those not
    /// marked delivered, and the pause flag; the task becomes `paused` or
    /// `running` to match, and the state it left the task in (the desk's
    /// waiting flag follows it). With `after`, whoever marked a note delivered
    /// (the agent's shell can post to the socket, case 23) cannot keep it
    /// from the model: the servo's own session says what it has.
    pub fn inbox(
        &mut self,
        id: TaskId,
        lease: &Lease,
        human_timeout_ms: i64,
        after: Option<i64>,
    ) -> Result<(Vec<Note>, bool, TaskState)> {
        // Asked before every LLM call of every task: a look that moves
        // nothing reads only (a WAL reader never waits for a writer nor
        // holds one up); the write lock is taken only to move the state.
        {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Deferred)?;
            let (state, notes, pause) = inbox_look(&tx, id, lease, after)?;
            if inbox_move(pause, state).is_none() {
                tx.commit()?;
                return Ok((notes, pause, state));
            }
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let (state, notes, pause) = inbox_look(&tx, id, lease, after)?;
        let moved = inbox_move(pause, state);
        match moved {
            Some(TaskState::Paused) => {
                move_state(
                    &tx,
                    id,
                    state,
                    TaskState::Paused,
                    Some("paused before the next LLM call"),
                )?;
                tx.exec_cached(
                    "UPDATE tasks SET human_deadline = ?2 WHERE id = ?1",
                    params![id.to_string(), now_ms() + human_timeout_ms],
                )?;
            }
            Some(to) => move_state(&tx, id, state, to, Some("resumed"))?,
            None => {}
        }
        tx.commit()?;
        Ok((notes, pause, moved.unwrap_or(state)))
    }

    /// The servo has these messages in its saved session (fenced).
    pub fn delivered(&mut self, id: TaskId, lease: &Lease, ids: &[i64]) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        held_state(&tx, id, lease)?;
        let now = now_ms();
        for n in ids {
            tx.exec_cached(
                "UPDATE notes SET delivered_at = COALESCE(delivered_at, ?3) WHERE task_id = ?1 AND id = ?2",
                params![id.to_string(), n, now],
            )?;
        }
        tx.commit()?;
        Ok(())
    }
}

/// What the inbox sees (fenced): the task's state, its messages after
/// note `after` (or, without it, those not marked delivered), and
/// whether a pause was asked for.
fn inbox_look(
    tx: &rusqlite::Transaction<'_>,
    id: TaskId,
    lease: &Lease,
    after: Option<i64>,
) -> Result<(TaskState, Vec<Note>, bool)> {
    let state = held_state(tx, id, lease)?;
    let pause: bool = tx
        .prepare_cached("SELECT pause_requested FROM tasks WHERE id = ?1")?
        .query_row(params![id.to_string()], |r| {
            r.get::<_, i64>(0).map(|v| v != 0)
        })?;
    let mut stmt = tx.prepare_cached(
        "SELECT id, text, author FROM notes WHERE task_id = ?1
           AND (CASE WHEN ?2 IS NULL THEN delivered_at IS NULL ELSE id > ?2 END)
         ORDER BY id",
    )?;
    let notes = stmt
        .query_map(params![id.to_string(), after], |r| {
            Ok(Note {
                id: r.get(0)?,
                text: r.get(1)?,
                by: r.get(2)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok((state, notes, pause))
}

/// Where the inbox moves a task: paused when a pause was asked for and
/// it runs, running again when the pause was lifted; else nowhere.
fn inbox_move(pause: bool, state: TaskState) -> Option<TaskState> {
    match (pause, state) {
        (true, TaskState::Running | TaskState::Starting) => Some(TaskState::Paused),
        (false, TaskState::Paused) => Some(TaskState::Running),
        _ => None,
    }
}
