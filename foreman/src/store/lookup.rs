//! Reading tasks: by id or a unique part of one, lists, events, attempts.

use rusqlite::{OptionalExtension, params};
use saheeli_protocol::TaskId;

use crate::state::{TaskState, sql_list};

use super::{COLUMNS, EventRow, Result, Store, StoreError, TaskRow, TrailRow, read_row};

impl Store {
    /// A task's state now, by its full id.
    pub fn state_of(&self, id: TaskId) -> Result<TaskState> {
        let state: Option<String> = self
            .conn
            .query_row(
                "SELECT state FROM tasks WHERE id = ?1",
                params![id.to_string()],
                |r| r.get(0),
            )
            .optional()?;
        let state = state.ok_or_else(|| StoreError::TaskNotFound(id.to_string()))?;
        Ok(state.parse().expect("stored states are valid"))
    }

    /// One task by full id, or a unique prefix or suffix of one (the
    /// tables show the last 12 digits).
    pub fn get(&self, id_or_part: &str) -> Result<Option<TaskRow>> {
        /// Matches listed when an id is ambiguous (one more shows there are more).
        const SHOWN: usize = 5;
        let q = id_or_part.trim().to_ascii_lowercase();
        if q.is_empty() || !q.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Ok(None);
        }
        let ambiguous = |rows: &[TaskRow]| {
            let mut matches: Vec<String> =
                rows.iter().take(SHOWN).map(|r| r.id.to_string()).collect();
            if rows.len() > SHOWN {
                matches.push("…".into());
            }
            StoreError::Ambiguous {
                query: id_or_part.trim().to_string(),
                matches,
            }
        };
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks WHERE id >= ?1 AND id < ?1 || 'g' ORDER BY id LIMIT 6"
        ))?;
        let rows: Vec<TaskRow> = stmt
            .query_map(params![q], read_row)?
            .collect::<rusqlite::Result<_>>()?;
        if let Some(exact) = rows.iter().find(|r| r.id.to_string() == q) {
            return Ok(Some(exact.clone()));
        }
        if rows.len() == 1 {
            return Ok(rows.into_iter().next());
        }
        if rows.len() > 1 {
            return Err(ambiguous(&rows));
        }
        if q.len() < 6 {
            return Ok(None);
        }
        // The random tail of an id, as the tables show it.
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks WHERE replace(id, '-', '') LIKE '%' || ?1 LIMIT 6"
        ))?;
        let rows: Vec<TaskRow> = stmt
            .query_map(params![q.replace('-', "")], read_row)?
            .collect::<rusqlite::Result<_>>()?;
        match rows.len() {
            0 => Ok(None),
            1 => Ok(rows.into_iter().next()),
            _ => Err(ambiguous(&rows)),
        }
    }

    /// Like [`Store::get`] but a missing task is an error naming the id.
    pub fn require(&self, id_or_prefix: &str) -> Result<TaskRow> {
        self.get(id_or_prefix)?
            .ok_or_else(|| StoreError::TaskNotFound(id_or_prefix.to_string()))
    }

    /// The newest `limit` tasks, newest first.
    pub fn list(&self, limit: usize) -> Result<Vec<TaskRow>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks ORDER BY id DESC LIMIT ?1"
        ))?;
        let rows = stmt
            .query_map(params![limit as i64], read_row)?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// The newest `limit` tasks, newest first, only those in `state` (when
    /// given) and created at or after `since_ms` (when given).
    pub fn list_where(
        &self,
        state: Option<TaskState>,
        since_ms: Option<i64>,
        limit: usize,
    ) -> Result<Vec<TaskRow>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks
             WHERE (?1 IS NULL OR state = ?1) AND (?2 IS NULL OR created_at >= ?2)
             ORDER BY id DESC LIMIT ?3"
        ))?;
        let rows = stmt
            .query_map(
                params![state.map(|s| s.as_str()), since_ms, limit as i64],
                read_row,
            )?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    pub fn count_in(&self, states: &[TaskState]) -> Result<i64> {
        let list = states
            .iter()
            .map(|s| format!("'{}'", s.as_str()))
            .collect::<Vec<_>>()
            .join(",");
        Ok(self.conn.query_row(
            &format!("SELECT COUNT(*) FROM tasks WHERE state IN ({list})"),
            [],
            |r| r.get(0),
        )?)
    }

    pub fn events(&self, id: TaskId) -> Result<Vec<EventRow>> {
        let (mut rows, _) = self.events_page(id, None, usize::MAX)?;
        rows.reverse();
        Ok(rows)
    }

    /// Up to `limit` of a task's events below row `before` (None: the
    /// newest), newest first, and how many events the task has: a view
    /// of a task never loads its whole trail (case 19: 285 MB).
    pub fn events_page(
        &self,
        id: TaskId,
        before: Option<i64>,
        limit: usize,
    ) -> Result<(Vec<EventRow>, i64)> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, at, from_state, to_state, detail, kind, actor FROM events
             WHERE task_id = ?1 AND id < ?2 ORDER BY id DESC LIMIT ?3",
        )?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(
                params![id.to_string(), before.unwrap_or(i64::MAX), limit],
                |r| {
                    let from: Option<String> = r.get(2)?;
                    let to: String = r.get(3)?;
                    Ok(EventRow {
                        seq: r.get(0)?,
                        at: r.get(1)?,
                        from: from.and_then(|s| s.parse().ok()),
                        to: to.parse().unwrap_or(TaskState::Failed),
                        detail: r.get(4)?,
                        kind: r.get(5)?,
                        actor: r.get(6)?,
                    })
                },
            )?
            .collect::<rusqlite::Result<_>>()?;
        let total = self.conn.query_row(
            "SELECT COUNT(*) FROM events WHERE task_id = ?1",
            params![id.to_string()],
            |r| r.get(0),
        )?;
        Ok((rows, total))
    }

    /// The id of the newest event row (0 when there is none).
    pub fn last_event_seq(&self) -> Result<i64> {
        Ok(self
            .conn
            .query_row("SELECT COALESCE(MAX(id), 0) FROM events", [], |r| r.get(0))?)
    }

    /// Up to `limit` event rows after the one with id `after`, oldest
    /// first, with the task's reason on terminal transitions.
    pub fn events_after(&self, after: i64, limit: usize) -> Result<Vec<TrailRow>> {
        self.trail(None, after, limit)
    }

    /// [`Store::events_after`] for one task.
    pub fn task_events_after(&self, id: TaskId, after: i64, limit: usize) -> Result<Vec<TrailRow>> {
        self.trail(Some(id), after, limit)
    }

    fn trail(&self, task: Option<TaskId>, after: i64, limit: usize) -> Result<Vec<TrailRow>> {
        // Two statements rather than an `OR`: each uses its index.
        let sql = match task {
            None => "WHERE e.id > ?1 AND ?2 IS NULL",
            Some(_) => "WHERE e.task_id = ?2 AND e.id > ?1",
        };
        // The limit is part of the text, not a parameter: SQLite compiles
        // a statement whose LIMIT is bound again every time it is bound
        // (the event feed reads this 50 times a second).
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT e.id, e.task_id, e.at, e.from_state, e.to_state, e.detail,
                    CASE WHEN e.to_state IN {ended} THEN t.reason END, e.kind, e.actor
             FROM events e JOIN tasks t ON t.id = e.task_id
             {sql} ORDER BY e.id LIMIT {limit}",
            ended = sql_list(&TaskState::TERMINAL)
        ))?;
        let rows = stmt
            .query_map(params![after, task.map(|t| t.to_string())], |r| {
                let task: String = r.get(1)?;
                let from: Option<String> = r.get(3)?;
                let to: String = r.get(4)?;
                Ok(TrailRow {
                    seq: r.get(0)?,
                    task_id: task.parse().expect("stored ids are UUIDs"),
                    at: r.get(2)?,
                    from: from.and_then(|s| s.parse().ok()),
                    to: to.parse().unwrap_or(TaskState::Failed),
                    detail: r.get(5)?,
                    reason: r.get(6)?,
                    kind: r.get(7)?,
                    actor: r.get(8)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Every attempt of the task `id` belongs to, oldest first: the chain
    /// of tasks linked by `retry_of`.
    pub fn attempts(&self, id: TaskId) -> Result<Vec<TaskRow>> {
        let mut root = self.require(&id.to_string())?;
        while let Some(parent) = root
            .retry_of
            .and_then(|p| self.get(&p.to_string()).ok().flatten())
        {
            root = parent;
        }
        let mut chain = vec![root];
        while let Some(next) = self.retried_as(chain.last().expect("non-empty").id)? {
            chain.push(next);
        }
        Ok(chain)
    }

    /// The task that retried `id`, if any.
    pub fn retried_as(&self, id: TaskId) -> Result<Option<TaskRow>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks WHERE retry_of = ?1 ORDER BY id LIMIT 1"
        ))?;
        Ok(stmt
            .query_map(params![id.to_string()], read_row)?
            .next()
            .transpose()?)
    }

    /// Changes whenever another connection commits: a cheap "anything new?".
    pub fn data_version(&self) -> Result<i64> {
        Ok(self
            .conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |r| r.get(0))?)
    }
}
