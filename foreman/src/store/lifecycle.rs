//! State changes of tasks: every one is checked against the lifecycle
//! and recorded as an event row in the same transaction.

use std::time::Duration;

use rusqlite::{OptionalExtension, TransactionBehavior, params};
use saheeli_protocol::TaskId;

use crate::state::{TaskState, sql_list};

use super::{
    ExecCached, Lease, Outcome, Result, Retry, Store, StoreError, insert_event, insert_task, now_ms,
};

impl Store {
    /// Applies a lifecycle transition of a task this foreman holds, checked
    /// against the current state and the lease (fenced: a foreman whose
    /// task was taken over gets [`StoreError::LeaseLost`] and writes nothing).
    #[cfg(test)]
    pub fn transition(
        &mut self,
        id: TaskId,
        lease: &Lease,
        to: TaskState,
        detail: Option<&str>,
        outcome: Option<&Outcome>,
    ) -> Result<()> {
        self.finish(id, lease, to, detail, outcome, None)
    }

    /// The servo's container started: `starting` becomes `running`. A
    /// servo whose first call already asked a human or found a pause
    /// (it can be faster than this write) keeps that state; the start is
    /// recorded as a note. Returns the state the task is in.
    pub fn started(&mut self, id: TaskId, lease: &Lease, detail: &str) -> Result<TaskState> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let from = held_state(&tx, id, lease)?;
        if from == TaskState::Starting {
            move_state(&tx, id, from, TaskState::Running, Some(detail))?;
            tx.commit()?;
            return Ok(TaskState::Running);
        }
        super::desk::note_event(&tx, id, "started", None, detail)?;
        tx.commit()?;
        Ok(from)
    }

    /// [`Store::transition`], and when `retry` is given, the task that
    /// retries this one is queued in the same transaction: a crash between
    /// the two can neither lose the retry nor run it twice.
    pub fn finish(
        &mut self,
        id: TaskId,
        lease: &Lease,
        to: TaskState,
        detail: Option<&str>,
        outcome: Option<&Outcome>,
        retry: Option<&Retry>,
    ) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let from = held_state(&tx, id, lease)?;
        // The servo ended (or the task was cancelled) with a question
        // open: nobody will read the reply now.
        super::desk::close_moot_asks(&tx, id)?;
        move_state(&tx, id, from, to, detail)?;
        if let Some(o) = outcome {
            tx.exec_cached(
                "UPDATE tasks SET reason = ?2, steps = ?3, input_tokens = ?4,
                    output_tokens = ?5, results_path = ?6, cost_usd = ?7, detail = ?8,
                    cache_read_tokens = ?9, cache_write_tokens = ?10, compactions = ?11
                 WHERE id = ?1",
                params![
                    id.to_string(),
                    o.reason,
                    o.steps,
                    o.input_tokens,
                    o.output_tokens,
                    o.results_path,
                    o.cost_usd,
                    o.detail,
                    o.cache_read_tokens,
                    o.cache_write_tokens,
                    o.compactions
                ],
            )?;
        }
        if let Some(r) = retry {
            insert_task(&tx, r.id, &r.spec, r.priority, Some(id), r.attempt)?;
            if r.not_before.is_some() {
                tx.exec_cached(
                    "UPDATE tasks SET not_before = ?2 WHERE id = ?1",
                    params![r.id.to_string(), r.not_before],
                )?;
            }
            // What the retry's start says, with it: never a retry
            // without it, nor it without the retry.
            if let Some((kind, detail)) = &r.said {
                super::desk::note_event(&tx, r.id, kind, Some("saheeli"), detail)?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Moves a task nobody holds yet (queued) to `failed`: `saheeli run`
    /// could not reach Docker after submitting it.
    pub fn fail_queued(&mut self, id: TaskId, reason: &str, detail: &str) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let from = current_state(&tx, id)?;
        if from != TaskState::Queued {
            return Err(StoreError::BadTransition {
                id,
                from,
                to: TaskState::Failed,
            });
        }
        move_state(&tx, id, from, TaskState::Failed, Some(detail))?;
        tx.exec_cached(
            "UPDATE tasks SET reason = ?2, detail = ?3 WHERE id = ?1",
            params![id.to_string(), reason, detail],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Puts a task back in the queue after an infrastructure failure (its
    /// foreman died before the servo started, Docker failed, the container
    /// vanished), to be claimed again no sooner than `delay` from now.
    /// Counted in `requeues`, not as an attempt of the agent.
    pub fn requeue(
        &mut self,
        id: TaskId,
        lease: &Lease,
        detail: &str,
        delay: Duration,
    ) -> Result<()> {
        self.put_back(id, lease, detail, delay, 1)
    }

    /// Puts a task whose launch failed for the Docker daemon's sake (no
    /// answer, a 5xx) back in the queue, counted neither as an attempt nor
    /// in `requeues`: the task is not at fault, and it waits for the
    /// daemon as long as it takes (the admission breaker paces launches).
    pub fn requeue_for_daemon(
        &mut self,
        id: TaskId,
        lease: &Lease,
        detail: &str,
        delay: Duration,
    ) -> Result<()> {
        self.put_back(id, lease, detail, delay, 0)
    }

    /// How many times task `id` went back to the queue with a detail
    /// starting `prefix` (uncounted daemon requeues: their events).
    pub fn requeues_with(&self, id: TaskId, prefix: &str) -> Result<i64> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT count(*) FROM events
                 WHERE task_id = ?1 AND to_state = 'queued' AND substr(detail, 1, length(?2)) = ?2",
            )?
            .query_row(params![id.to_string(), prefix], |r| r.get(0))?)
    }

    fn put_back(
        &mut self,
        id: TaskId,
        lease: &Lease,
        detail: &str,
        delay: Duration,
        counted: i64,
    ) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let from = held_state(&tx, id, lease)?;
        move_state(&tx, id, from, TaskState::Queued, Some(detail))?;
        tx.exec_cached(
            "UPDATE tasks SET owner = NULL, lease_until = NULL,
                container_id = NULL, started_at = NULL, requeues = requeues + ?3,
                not_before = ?2
             WHERE id = ?1",
            params![id.to_string(), now_ms() + delay.as_millis() as i64, counted],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Asks for a task to be cancelled. A queued task is cancelled at once;
    /// a starting or running one is flagged for the serving foreman.
    /// Returns the state the task was in.
    /// Cancelling a parent cancels its descendants (issue 30), in the
    /// same transaction.
    pub fn request_cancel(&mut self, id: TaskId) -> Result<TaskState> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let state = cancel_one(&tx, id, "cancelled before it started")?;
        for child in super::children::descendants_in(&tx, id)? {
            let detail = format!("cancelled with its ancestor {id}");
            cancel_one(&tx, child, &detail)?;
        }
        tx.commit()?;
        Ok(state)
    }

    /// Ids of active tasks someone asked to cancel.
    pub fn cancel_requests(&self) -> Result<Vec<TaskId>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT id FROM tasks WHERE cancel_requested = 1 AND state IN {}",
            sql_list(&TaskState::HELD)
        ))?;
        let ids = stmt
            .query_map([], |r| r.get::<_, String>(0))?
            .filter_map(|r| r.ok().and_then(|s| s.parse().ok()))
            .collect();
        Ok(ids)
    }
}

/// The one place a task's state changes: checked against the lifecycle
/// (`TaskState::can_become`), stamped, and recorded as an event row, all in
/// the caller's write transaction. Ending a task also ends its lease.
pub(super) fn move_state(
    tx: &rusqlite::Transaction<'_>,
    id: TaskId,
    from: TaskState,
    to: TaskState,
    detail: Option<&str>,
) -> Result<()> {
    if !from.can_become(to) {
        return Err(StoreError::BadTransition { id, from, to });
    }
    let now = now_ms();
    tx.prepare_cached(
        "UPDATE tasks SET state = ?2,
            finished_at = CASE WHEN ?3 THEN ?4 ELSE finished_at END,
            lease_until = CASE WHEN ?3 THEN NULL ELSE lease_until END,
            started_at = CASE WHEN ?5 THEN COALESCE(started_at, ?4) ELSE started_at END,
            parked = CASE WHEN ?6 THEN 0 ELSE parked END,
            waiting_since = CASE WHEN ?7 THEN ?4 ELSE NULL END
         WHERE id = ?1",
    )?
    .execute(params![
        id.to_string(),
        to.as_str(),
        to.is_terminal(),
        now,
        to == TaskState::Starting,
        to == TaskState::Running,
        to.is_waiting()
    ])?;
    insert_event(tx, id, now, Some(from), to, detail)?;
    Ok(())
}

/// The state of a task this foreman holds, inside a write transaction;
/// [`StoreError::LeaseLost`] when another foreman owns it now.
pub(super) fn held_state(
    tx: &rusqlite::Transaction<'_>,
    id: TaskId,
    lease: &Lease,
) -> Result<TaskState> {
    let row: Option<(String, Option<String>)> = tx
        .prepare_cached("SELECT state, owner FROM tasks WHERE id = ?1")?
        .query_row(params![id.to_string()], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let (state, owner) = row.ok_or_else(|| StoreError::TaskNotFound(id.to_string()))?;
    if owner.as_deref() != Some(lease.owner.as_str()) {
        return Err(StoreError::LeaseLost(id));
    }
    Ok(state.parse().expect("stored states are valid"))
}

/// A task's state, read inside a write transaction.
pub(super) fn current_state(tx: &rusqlite::Transaction<'_>, id: TaskId) -> Result<TaskState> {
    let state: String = tx
        .query_row(
            "SELECT state FROM tasks WHERE id = ?1",
            params![id.to_string()],
            |r| r.get(0),
        )
        .optional()?
        .ok_or_else(|| StoreError::TaskNotFound(id.to_string()))?;
    Ok(state.parse().expect("stored states are valid"))
}

/// Cancels `id`: a queued task at once (with `queued_detail`), an active
/// one flagged for its serving foreman; an ended one is left as it is.
fn cancel_one(
    tx: &rusqlite::Transaction<'_>,
    id: TaskId,
    queued_detail: &str,
) -> Result<TaskState> {
    let state = current_state(tx, id)?;
    match state {
        TaskState::Queued => {
            let detail = queued_detail;
            move_state(tx, id, state, TaskState::Cancelled, Some(detail))?;
            tx.exec_cached(
                "UPDATE tasks SET reason = 'cancelled', detail = ?2 WHERE id = ?1",
                params![id.to_string(), detail],
            )?;
        }
        TaskState::Starting
        | TaskState::Running
        | TaskState::WaitingHuman
        | TaskState::Paused
        | TaskState::Blocked => {
            tx.exec_cached(
                "UPDATE tasks SET cancel_requested = 1 WHERE id = ?1",
                params![id.to_string()],
            )?;
        }
        _ => {}
    }
    Ok(state)
}
