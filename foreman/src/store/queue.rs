//! Submitting and claiming tasks.

use rusqlite::{OptionalExtension, TransactionBehavior, params};
use saheeli_protocol::TaskId;

use crate::state::TaskState;
use crate::task::TaskSpec;

use super::caps::{Closed, ClosedBy};
use super::{
    COLUMNS, ExecCached, Lease, Result, Store, StoreError, TaskRow, current_state, move_state,
    now_ms, read_row,
};

impl Store {
    /// Queues a task and records its first event.
    pub fn submit(
        &mut self,
        id: TaskId,
        spec: &TaskSpec,
        priority: i64,
        retry_of: Option<TaskId>,
        attempt: i64,
    ) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        insert_task(&tx, id, spec, priority, retry_of, attempt)?;
        tx.commit()?;
        Ok(())
    }

    /// Queues forks of a task (`task fork`) together: all or none.
    pub fn submit_forks(&mut self, forks: &[(TaskId, TaskSpec)], priority: i64) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        for (id, spec) in forks {
            insert_task(&tx, *id, spec, priority, None, 1)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The forks of task `id` (`forked_from`), oldest first.
    pub fn forks_of(&self, id: TaskId) -> Result<Vec<TaskId>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id FROM tasks WHERE json_extract(spec, '$.forked_from.task') = ?1
             ORDER BY created_at, id",
        )?;
        let ids = stmt
            .query_map(params![id.to_string()], |r| r.get::<_, String>(0))?
            .filter_map(|r| r.ok()?.parse().ok())
            .collect();
        Ok(ids)
    }

    /// Moves the best queued task (or `only`, or one of its descendants:
    /// `saheeli run` of a parent runs its children too) to
    /// `starting`, leased to `lease.owner`, and returns it.
    #[cfg(test)]
    pub fn claim_next(&mut self, only: Option<TaskId>, lease: &Lease) -> Result<Option<TaskRow>> {
        self.claim_within(only, false, lease, None)
    }

    /// [`Store::claim_next`] within `pools:` (issue 52): `closed` says,
    /// from the tasks holding a slot now, which agent types, models and
    /// keys are full; the best queued task in none of them is claimed, so
    /// a full pool's tasks never hold up another's behind them.
    /// `under_held`: only the children of tasks `lease.owner` holds and
    /// has not ended, or their retries (a draining foreman starts nothing
    /// new, but a running best-of-N task's queued samples, or a parent's
    /// queued children, are part of the work it finishes).
    pub fn claim_within(
        &mut self,
        only: Option<TaskId>,
        under_held: bool,
        lease: &Lease,
        closed: Option<ClosedBy<'_>>,
    ) -> Result<Option<TaskRow>> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        // The write lock is held (BEGIN IMMEDIATE): nobody claims between
        // the count, the pick and the move, in any foreman.
        let closed = match closed {
            Some(f) => f(&super::caps::groups(&tx, &TaskState::ACTIVE)?),
            None => Closed::default(),
        };
        let json = |v: &Vec<String>| serde_json::to_string(v).expect("strings serialize");
        let id: Option<String> = tx
            .prepare_cached(
                "SELECT id FROM tasks WHERE state = 'queued'
                   AND (?2 IS NULL OR id = ?2
                        OR id IN (SELECT child_id FROM children WHERE root_id = ?2))
                   AND (?6 IS NULL OR id IN (WITH RECURSIVE under(id) AS (
                          SELECT c.child_id FROM children c JOIN tasks p ON p.id = c.parent_id
                           WHERE p.owner = ?6
                             AND p.state IN ('starting', 'running', 'waiting_human', 'paused', 'blocked')
                          UNION SELECT t.id FROM tasks t JOIN under u ON t.retry_of = u.id)
                        SELECT id FROM under))
                   AND (not_before IS NULL OR not_before <= ?1)
                   AND COALESCE(agent_type, '') NOT IN (SELECT value FROM json_each(?3))
                   AND COALESCE(model, '') NOT IN (SELECT value FROM json_each(?4))
                   AND COALESCE(provider_key, '') NOT IN (SELECT value FROM json_each(?5))
                 ORDER BY priority DESC, id LIMIT 1",
            )?
            .query_row(
                params![
                    now,
                    only.map(|i| i.to_string()),
                    json(&closed.agent_types),
                    json(&closed.models),
                    json(&closed.keys),
                    under_held.then_some(lease.owner.as_str())
                ],
                |r| r.get(0),
            )
            .optional()?;
        let Some(id) = id else {
            return Ok(None);
        };
        let task_id: TaskId = id.parse().expect("stored ids are UUIDs");
        move_state(&tx, task_id, TaskState::Queued, TaskState::Starting, None)?;
        tx.prepare_cached("UPDATE tasks SET owner = ?2, lease_until = ?3 WHERE id = ?1")?
            .execute(params![id, lease.owner, now + lease.ms])?;
        tx.commit()?;
        self.get(&id)
    }

    /// Queues a new attempt of an ended task (`saheeli task retry`);
    /// refused while the task has not ended, so it never runs twice at once.
    pub fn retry(&mut self, old: TaskId, new: TaskId) -> Result<TaskRow> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let state = current_state(&tx, old)?;
        if !state.is_terminal() {
            return Err(StoreError::NotEnded { id: old, state });
        }
        let row = tx.query_row(
            &format!("SELECT {COLUMNS} FROM tasks WHERE id = ?1"),
            params![old.to_string()],
            read_row,
        )?;
        // A retry by hand starts afresh: no chain of attempts behind it.
        // A child's goes on from what its chain used: its budget is what
        // is left of the carve (N18), never the carve again.
        let mut spec = row.spec.clone();
        spec.chain = None;
        if let Some(used) = super::carved::child_chain_used(&tx, old)? {
            spec.budget_per_attempt = false;
            spec.chain = Some(crate::task::Chain {
                from: old,
                mode: saheeli_protocol::attempt::RetryFrom::Scratch,
                note: String::new(),
                used,
            });
        }
        insert_task(&tx, new, &spec, row.priority, Some(old), row.attempt + 1)?;
        tx.commit()?;
        Ok(row)
    }
}

pub(super) fn insert_task(
    tx: &rusqlite::Transaction<'_>,
    id: TaskId,
    spec: &TaskSpec,
    priority: i64,
    retry_of: Option<TaskId>,
    attempt: i64,
) -> Result<()> {
    let now = now_ms();
    let spec_json = serde_json::to_string(spec).expect("TaskSpec serializes");
    let notify = (!spec.notify.is_empty())
        .then(|| serde_json::to_string(&spec.notify).expect("webhooks serialize"));
    let git = (spec.git.as_ref())
        .and_then(|g| g.start.as_ref())
        .map(|s| serde_json::to_string(s).expect("GitStart serializes"));
    tx.exec_cached(
        "INSERT INTO tasks (id, title, state, priority, spec, retry_of, created_at, attempt, notify,
                            git, follow_up_of, agent_type, model, provider_key)
         VALUES (?1, ?2, 'queued', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        params![
            id.to_string(),
            spec.title,
            priority,
            spec_json,
            retry_of.map(|r| r.to_string()),
            now,
            attempt,
            notify,
            git,
            spec.follow_up_of.map(|f| f.to_string()),
            spec.agent_type,
            spec.model,
            spec.provider_key
        ],
    )?;
    let detail = match (retry_of, &spec.forked_from) {
        (Some(old), _) => format!(
            "submitted from {} (attempt {attempt}, retry of {old})",
            spec.prompt_path
        ),
        (None, Some(f)) => format!(
            "forked from {} at step {} (fork {} of {})",
            f.task, f.step, f.index, f.count
        ),
        (None, None) => format!("submitted from {}", spec.prompt_path),
    };
    insert_event(tx, id, now, None, TaskState::Queued, Some(&detail))?;
    Ok(())
}

pub(super) fn insert_event(
    tx: &rusqlite::Transaction<'_>,
    id: TaskId,
    at: i64,
    from: Option<TaskState>,
    to: TaskState,
    detail: Option<&str>,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO events (task_id, at, from_state, to_state, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![id.to_string(), at, from.map(|s| s.as_str()), to.as_str(), detail])?;
    if let Some(kind) = webhook_kind(from, to) {
        let event = tx.last_insert_rowid();
        enqueue_webhooks(tx, id, event, kind, at)?;
    }
    Ok(())
}

/// The webhook event a transition is, if any.
pub(super) fn webhook_kind(from: Option<TaskState>, to: TaskState) -> Option<&'static str> {
    Some(match (from, to) {
        (None, TaskState::Queued) => "task.queued",
        (Some(TaskState::Starting), TaskState::Running) => "task.started",
        (_, TaskState::WaitingHuman) => "task.waiting_human",
        (_, TaskState::Blocked) => "task.blocked",
        // `task pause`, a `pause_on` breakpoint (and a step's, later).
        (Some(f), TaskState::Paused) if f != TaskState::Paused => "task.paused",
        (_, TaskState::Complete) => "task.completed",
        (_, TaskState::Incomplete) => "task.incomplete",
        (_, TaskState::Failed) => "task.failed",
        (_, TaskState::Cancelled) => "task.cancelled",
        _ => return None,
    })
}

/// The outbox: one row per webhook of the task that asked for `kind`,
/// written in the transaction of the event itself, so a delivery can be
/// neither lost nor invented by a crash. A task without webhooks costs
/// one primary-key lookup.
pub(super) fn enqueue_webhooks(
    tx: &rusqlite::Transaction<'_>,
    id: TaskId,
    event: i64,
    kind: &str,
    at: i64,
) -> rusqlite::Result<()> {
    tx.exec_cached(
        "INSERT OR IGNORE INTO outbox (event_id, task_id, url, format, kind, created_at, next_at)
         SELECT ?1, t.id, json_extract(n.value, '$.url'),
                COALESCE(json_extract(n.value, '$.format'), 'json'), ?2, ?3, ?3
         FROM tasks t, json_each(t.notify) n
         WHERE t.id = ?4 AND t.notify IS NOT NULL
           AND EXISTS (SELECT 1 FROM json_each(json_extract(n.value, '$.events')) e
                       WHERE e.value IN (?2, 'all'))",
        params![event, kind, at, id.to_string()],
    )?;
    Ok(())
}
