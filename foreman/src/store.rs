//! The SQLite queue: tasks, their state transitions and the event trail.
//!
//! WAL mode, a 10 s busy timeout, and every write in a `BEGIN IMMEDIATE`
//! transaction, so several `saheeli` processes can share one file without
//! SQLITE_BUSY errors. Every state change writes an event row in the same
//! transaction. Synchronous on purpose: async callers use `spawn_blocking`.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use rusqlite_migration::{M, Migrations};
use saheeli_protocol::TaskId;

use crate::spec::TaskSpec;
use crate::state::TaskState;

#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("no task with id `{0}`; `saheeli task status` lists them")]
    TaskNotFound(String),
    #[error("task `{id}` is {from}; it cannot become {to}")]
    BadTransition {
        id: TaskId,
        from: TaskState,
        to: TaskState,
    },
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("database migration: {0}")]
    Migration(#[from] rusqlite_migration::Error),
}

type Result<T> = std::result::Result<T, StoreError>;

const MIGRATIONS: &[M<'static>] = &[
    M::up(
        "CREATE TABLE tasks (
        id            TEXT PRIMARY KEY,
        title         TEXT NOT NULL,
        state         TEXT NOT NULL,
        reason        TEXT,
        priority      INTEGER NOT NULL DEFAULT 0,
        spec          TEXT NOT NULL,
        retry_of      TEXT REFERENCES tasks(id),
        container_id  TEXT,
        created_at    INTEGER NOT NULL,
        started_at    INTEGER,
        finished_at   INTEGER,
        steps         INTEGER NOT NULL DEFAULT 0,
        input_tokens  INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        results_path  TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX tasks_by_state ON tasks(state, priority DESC, id);
    CREATE TABLE events (
        id         INTEGER PRIMARY KEY,
        task_id    TEXT NOT NULL REFERENCES tasks(id),
        at         INTEGER NOT NULL,
        from_state TEXT,
        to_state   TEXT NOT NULL,
        detail     TEXT
    );
    CREATE INDEX events_by_task ON events(task_id, id);",
    ),
    M::up("ALTER TABLE tasks ADD COLUMN cost_usd REAL NOT NULL DEFAULT 0;"),
    // Leases: the foreman running a task renews `lease_until`; another
    // foreman takes the task over only once the lease has expired.
    M::up(
        "ALTER TABLE tasks ADD COLUMN owner TEXT;
         ALTER TABLE tasks ADD COLUMN lease_until INTEGER;
         ALTER TABLE tasks ADD COLUMN requeues INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE tasks ADD COLUMN not_before INTEGER;",
    ),
    M::up("ALTER TABLE tasks ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;"),
    // The gateway's per-call ledger (gateway/ledger.rs): each call's
    // reservation, then its real usage; `lost` when a foreman died with
    // the call in flight.
    M::up(
        "CREATE TABLE llm_calls (
            call_id         TEXT PRIMARY KEY,
            task_id         TEXT NOT NULL,
            state           TEXT NOT NULL,
            reserved_tokens INTEGER NOT NULL,
            reserved_cost   REAL NOT NULL,
            input_tokens    INTEGER NOT NULL DEFAULT 0,
            output_tokens   INTEGER NOT NULL DEFAULT 0,
            cost_usd        REAL NOT NULL DEFAULT 0,
            started_at      INTEGER NOT NULL,
            settled_at      INTEGER
        );
        CREATE INDEX llm_calls_by_task ON llm_calls(task_id, state);",
    ),
];

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One row of `tasks`.
#[derive(Clone, Debug)]
pub(crate) struct TaskRow {
    pub id: TaskId,
    pub title: String,
    pub state: TaskState,
    pub reason: Option<String>,
    pub priority: i64,
    pub spec: TaskSpec,
    pub retry_of: Option<TaskId>,
    pub container_id: Option<String>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub steps: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub results_path: Option<String>,
    pub cancel_requested: bool,
    pub cost_usd: f64,
    pub requeues: i64,
    pub attempt: i64,
}

/// Who holds a task while it runs, and for how long without renewal.
#[derive(Clone, Debug)]
pub(crate) struct Lease {
    /// A fresh id per foreman process.
    pub owner: String,
    pub ms: i64,
}

impl Lease {
    pub fn new(duration: Duration) -> Lease {
        Lease {
            owner: uuid::Uuid::new_v4().to_string(),
            ms: duration.as_millis() as i64,
        }
    }
}

/// One row of `events`.
#[derive(Clone, Debug)]
pub(crate) struct EventRow {
    pub at: i64,
    pub from: Option<TaskState>,
    pub to: TaskState,
    pub detail: Option<String>,
}

/// How a task ended, written with its final transition.
#[derive(Clone, Debug, Default)]
pub(crate) struct Outcome {
    pub reason: Option<String>,
    pub steps: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
    pub results_path: Option<String>,
}

pub(crate) struct Store {
    conn: Connection,
}

const COLUMNS: &str = "id, title, state, reason, priority, spec, retry_of, container_id, created_at, \
     started_at, finished_at, steps, input_tokens, output_tokens, results_path, cancel_requested, cost_usd, \
     requeues, attempt";

impl Store {
    /// Opens (creating when absent) and migrates the database.
    pub fn open(path: &Path) -> Result<Store> {
        let mut conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        Migrations::from_slice(MIGRATIONS).to_latest(&mut conn)?;
        Ok(Store { conn })
    }

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
        let now = now_ms();
        let spec_json = serde_json::to_string(spec).expect("TaskSpec serializes");
        tx.execute(
            "INSERT INTO tasks (id, title, state, priority, spec, retry_of, created_at, attempt)
             VALUES (?1, ?2, 'queued', ?3, ?4, ?5, ?6, ?7)",
            params![
                id.to_string(),
                spec.title,
                priority,
                spec_json,
                retry_of.map(|r| r.to_string()),
                now,
                attempt
            ],
        )?;
        let detail = match retry_of {
            Some(old) => format!(
                "submitted from {} (attempt {attempt}, retry of {old})",
                spec.prompt_path
            ),
            None => format!("submitted from {}", spec.prompt_path),
        };
        insert_event(&tx, id, now, None, TaskState::Queued, Some(&detail))?;
        tx.commit()?;
        Ok(())
    }

    /// Moves the best queued task (or `only`, if it is queued) to
    /// `starting`, leased to `lease.owner`, and returns it.
    pub fn claim_next(&mut self, only: Option<TaskId>, lease: &Lease) -> Result<Option<TaskRow>> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        let id: Option<String> = tx
            .query_row(
                "UPDATE tasks SET state = 'starting', started_at = ?1, owner = ?3, lease_until = ?4
                 WHERE id = (SELECT id FROM tasks WHERE state = 'queued'
                             AND (?2 IS NULL OR id = ?2)
                             AND (not_before IS NULL OR not_before <= ?1)
                             ORDER BY priority DESC, id LIMIT 1)
                 RETURNING id",
                params![
                    now,
                    only.map(|i| i.to_string()),
                    lease.owner,
                    now + lease.ms
                ],
                |r| r.get(0),
            )
            .optional()?;
        let Some(id) = id else {
            return Ok(None);
        };
        let task_id: TaskId = id.parse().expect("stored ids are UUIDs");
        insert_event(
            &tx,
            task_id,
            now,
            Some(TaskState::Queued),
            TaskState::Starting,
            None,
        )?;
        tx.commit()?;
        self.get(&id)
    }

    /// Applies a lifecycle transition, checked against the current state.
    pub fn transition(
        &mut self,
        id: TaskId,
        to: TaskState,
        detail: Option<&str>,
        outcome: Option<&Outcome>,
    ) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let from = current_state(&tx, id)?;
        if !from.can_become(to) {
            return Err(StoreError::BadTransition { id, from, to });
        }
        let now = now_ms();
        tx.execute(
            "UPDATE tasks SET state = ?2,
                finished_at = CASE WHEN ?3 THEN ?4 ELSE finished_at END
             WHERE id = ?1",
            params![id.to_string(), to.as_str(), to.is_terminal(), now],
        )?;
        if let Some(o) = outcome {
            tx.execute(
                "UPDATE tasks SET reason = ?2, steps = ?3, input_tokens = ?4,
                    output_tokens = ?5, results_path = ?6, cost_usd = ?7 WHERE id = ?1",
                params![
                    id.to_string(),
                    o.reason,
                    o.steps,
                    o.input_tokens,
                    o.output_tokens,
                    o.results_path,
                    o.cost_usd
                ],
            )?;
        }
        insert_event(&tx, id, now, Some(from), to, detail)?;
        tx.commit()?;
        Ok(())
    }

    /// Extends the lease on every active task `lease.owner` holds.
    pub fn renew(&mut self, lease: &Lease) -> Result<usize> {
        Ok(self.conn.execute(
            "UPDATE tasks SET lease_until = ?2
             WHERE owner = ?1 AND state IN ('starting', 'running')",
            params![lease.owner, now_ms() + lease.ms],
        )?)
    }

    /// Takes over active tasks whose lease has expired (their foreman died).
    pub fn take_over_expired(&mut self, lease: &Lease) -> Result<Vec<TaskRow>> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        let ids: Vec<String> = {
            let mut stmt = tx.prepare(
                "UPDATE tasks SET owner = ?1, lease_until = ?2
                 WHERE state IN ('starting', 'running')
                   AND (owner IS NULL OR lease_until IS NULL OR lease_until < ?3)
                 RETURNING id",
            )?;
            stmt.query_map(params![lease.owner, now + lease.ms, now], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?
        };
        tx.commit()?;
        let mut rows = Vec::new();
        for id in ids {
            rows.extend(self.get(&id)?);
        }
        Ok(rows)
    }

    /// Puts a task back in the queue after an infrastructure failure (its
    /// foreman died before the servo started, Docker failed, the container
    /// vanished), to be claimed again no sooner than `delay` from now.
    /// Counted in `requeues`, not as an attempt of the agent.
    pub fn requeue(&mut self, id: TaskId, detail: &str, delay: Duration) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let from = current_state(&tx, id)?;
        if !matches!(from, TaskState::Starting | TaskState::Running) {
            return Err(StoreError::BadTransition {
                id,
                from,
                to: TaskState::Queued,
            });
        }
        let now = now_ms();
        tx.execute(
            "UPDATE tasks SET state = 'queued', owner = NULL, lease_until = NULL,
                container_id = NULL, started_at = NULL, requeues = requeues + 1,
                not_before = ?2
             WHERE id = ?1",
            params![id.to_string(), now + delay.as_millis() as i64],
        )?;
        insert_event(&tx, id, now, Some(from), TaskState::Queued, Some(detail))?;
        tx.commit()?;
        Ok(())
    }

    /// Gives a task's lease up, so that the next take-over round retries it.
    pub fn release(&mut self, id: TaskId) -> Result<()> {
        self.conn.execute(
            "UPDATE tasks SET owner = NULL, lease_until = NULL WHERE id = ?1",
            params![id.to_string()],
        )?;
        Ok(())
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
            .query_row("PRAGMA data_version", [], |r| r.get(0))?)
    }

    pub fn set_container(&mut self, id: TaskId, container_id: &str) -> Result<()> {
        self.conn.execute(
            "UPDATE tasks SET container_id = ?2 WHERE id = ?1",
            params![id.to_string(), container_id],
        )?;
        Ok(())
    }

    /// Live usage while a task runs (from the gateway).
    pub fn set_usage(
        &mut self,
        id: TaskId,
        steps: i64,
        input: i64,
        output: i64,
        cost: f64,
    ) -> Result<()> {
        self.conn.execute(
            "UPDATE tasks SET steps = ?2, input_tokens = ?3, output_tokens = ?4, cost_usd = ?5
             WHERE id = ?1",
            params![id.to_string(), steps, input, output, cost],
        )?;
        Ok(())
    }

    /// Asks for a task to be cancelled. A queued task is cancelled at once;
    /// a starting or running one is flagged for the serving foreman.
    /// Returns the state the task was in.
    pub fn request_cancel(&mut self, id: TaskId) -> Result<TaskState> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let state = current_state(&tx, id)?;
        match state {
            TaskState::Queued => {
                let now = now_ms();
                tx.execute(
                    "UPDATE tasks SET state = 'cancelled', reason = 'cancelled', finished_at = ?2
                     WHERE id = ?1",
                    params![id.to_string(), now],
                )?;
                insert_event(
                    &tx,
                    id,
                    now,
                    Some(state),
                    TaskState::Cancelled,
                    Some("cancelled before it started"),
                )?;
            }
            TaskState::Starting | TaskState::Running => {
                tx.execute(
                    "UPDATE tasks SET cancel_requested = 1 WHERE id = ?1",
                    params![id.to_string()],
                )?;
            }
            _ => {}
        }
        tx.commit()?;
        Ok(state)
    }

    /// Ids of active tasks someone asked to cancel.
    pub fn cancel_requests(&self) -> Result<Vec<TaskId>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id FROM tasks WHERE cancel_requested = 1
             AND state IN ('starting', 'running')",
        )?;
        let ids = stmt
            .query_map([], |r| r.get::<_, String>(0))?
            .filter_map(|r| r.ok().and_then(|s| s.parse().ok()))
            .collect();
        Ok(ids)
    }

    /// One task by full id, or a unique prefix or suffix of one (the
    /// tables show the last 12 digits).
    pub fn get(&self, id_or_part: &str) -> Result<Option<TaskRow>> {
        let q = id_or_part.trim().to_ascii_lowercase();
        if q.is_empty() || !q.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Ok(None);
        }
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks WHERE id >= ?1 AND id < ?1 || 'g' ORDER BY id LIMIT 2"
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
        if !rows.is_empty() || q.len() < 6 {
            return Ok(None);
        }
        // The random tail of an id, as the tables show it.
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks WHERE replace(id, '-', '') LIKE '%' || ?1 LIMIT 2"
        ))?;
        let rows: Vec<TaskRow> = stmt
            .query_map(params![q.replace('-', "")], read_row)?
            .collect::<rusqlite::Result<_>>()?;
        Ok(if rows.len() == 1 {
            rows.into_iter().next()
        } else {
            None
        })
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
        let mut stmt = self.conn.prepare_cached(
            "SELECT at, from_state, to_state, detail FROM events WHERE task_id = ?1 ORDER BY id",
        )?;
        let rows = stmt
            .query_map(params![id.to_string()], |r| {
                let from: Option<String> = r.get(1)?;
                let to: String = r.get(2)?;
                Ok(EventRow {
                    at: r.get(0)?,
                    from: from.and_then(|s| s.parse().ok()),
                    to: to.parse().unwrap_or(TaskState::Failed),
                    detail: r.get(3)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }
}

/// A task's state, read inside a write transaction.
fn current_state(tx: &rusqlite::Transaction<'_>, id: TaskId) -> Result<TaskState> {
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

fn insert_event(
    tx: &rusqlite::Transaction<'_>,
    id: TaskId,
    at: i64,
    from: Option<TaskState>,
    to: TaskState,
    detail: Option<&str>,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO events (task_id, at, from_state, to_state, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id.to_string(), at, from.map(|s| s.as_str()), to.as_str(), detail],
    )?;
    Ok(())
}

fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TaskRow> {
    let id: String = r.get(0)?;
    let state: String = r.get(2)?;
    let spec: String = r.get(5)?;
    let retry_of: Option<String> = r.get(6)?;
    let conv = |i: usize, e: Box<dyn std::error::Error + Send + Sync>| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, e)
    };
    Ok(TaskRow {
        id: id.parse().map_err(|e| conv(0, Box::new(e)))?,
        title: r.get(1)?,
        state: state.parse().map_err(|e: String| conv(2, e.into()))?,
        reason: r.get(3)?,
        priority: r.get(4)?,
        spec: serde_json::from_str(&spec).map_err(|e| conv(5, Box::new(e)))?,
        retry_of: retry_of.and_then(|s| s.parse().ok()),
        container_id: r.get(7)?,
        created_at: r.get(8)?,
        started_at: r.get(9)?,
        finished_at: r.get(10)?,
        steps: r.get(11)?,
        input_tokens: r.get(12)?,
        output_tokens: r.get(13)?,
        results_path: r.get(14)?,
        cancel_requested: r.get::<_, i64>(15)? != 0,
        cost_usd: r.get(16)?,
        requeues: r.get(17)?,
        attempt: r.get(18)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn spec(title: &str) -> TaskSpec {
        TaskSpec {
            title: title.into(),
            prompt_path: "p.md".into(),
            body: "b".into(),
            model: "gpt".into(),
            max_steps: 5,
            max_tokens: None,
            max_cost: None,
            retries: 0,
            retry_on: vec![],
            timeout_s: 60,
            network: saheeli_protocol::NetworkMode::None,
            memory: 1 << 30,
            cpus: 1.0,
            pids: 64,
            env: BTreeMap::new(),
            max_output_bytes: 1000,
            replay: None,
            workspace: None,
        }
    }

    fn lease() -> Lease {
        Lease {
            owner: "test".into(),
            ms: 10_000,
        }
    }

    fn store() -> (tempfile::TempDir, Store) {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(&d.path().join("q.db")).unwrap();
        (d, s)
    }

    #[test]
    fn claim_follows_priority_then_age() {
        let (_d, mut s) = store();
        let a = TaskId::new();
        let b = TaskId::new();
        let c = TaskId::new();
        s.submit(a, &spec("a"), 0, None, 1).unwrap();
        s.submit(b, &spec("b"), 5, None, 1).unwrap();
        s.submit(c, &spec("c"), 0, None, 1).unwrap();
        let order: Vec<_> =
            std::iter::from_fn(|| s.claim_next(None, &lease()).unwrap().map(|t| t.id)).collect();
        assert_eq!(order, vec![b, a, c]);
        assert!(s.claim_next(None, &lease()).unwrap().is_none());
    }

    #[test]
    fn transitions_are_checked_and_recorded() {
        let (_d, mut s) = store();
        let id = TaskId::new();
        s.submit(id, &spec("t"), 0, None, 1).unwrap();
        let err = s
            .transition(id, TaskState::Complete, None, None)
            .unwrap_err();
        assert!(matches!(err, StoreError::BadTransition { .. }), "{err}");
        s.claim_next(None, &lease()).unwrap();
        s.transition(id, TaskState::Running, None, None).unwrap();
        let o = Outcome {
            reason: Some("max_steps".into()),
            steps: 5,
            ..Default::default()
        };
        s.transition(id, TaskState::Incomplete, Some("exit 3"), Some(&o))
            .unwrap();
        let t = s.require(&id.to_string()).unwrap();
        assert_eq!(t.state, TaskState::Incomplete);
        assert_eq!(t.reason.as_deref(), Some("max_steps"));
        assert!(t.finished_at.is_some());
        let ev: Vec<_> = s.events(id).unwrap().into_iter().map(|e| e.to).collect();
        assert_eq!(
            ev,
            vec![
                TaskState::Queued,
                TaskState::Starting,
                TaskState::Running,
                TaskState::Incomplete
            ]
        );
    }

    #[test]
    fn expired_leases_are_taken_over_live_ones_are_not() {
        let (_d, mut s) = store();
        let (a, b) = (TaskId::new(), TaskId::new());
        s.submit(a, &spec("a"), 0, None, 1).unwrap();
        s.submit(b, &spec("b"), 0, None, 1).unwrap();
        let live = lease();
        let dead = Lease {
            owner: "dead".into(),
            ms: -1,
        };
        s.claim_next(Some(a), &live).unwrap();
        s.claim_next(Some(b), &dead).unwrap();
        let me = Lease {
            owner: "me".into(),
            ms: 10_000,
        };
        let taken: Vec<_> = s
            .take_over_expired(&me)
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect();
        assert_eq!(taken, vec![b]);
        assert!(s.take_over_expired(&me).unwrap().is_empty());
        assert_eq!(s.renew(&live).unwrap(), 1);
        s.requeue(b, "never started", Duration::ZERO).unwrap();
        let t = s.require(&b.to_string()).unwrap();
        assert_eq!((t.state, t.requeues), (TaskState::Queued, 1));
        assert_eq!(s.claim_next(None, &me).unwrap().unwrap().id, b);
    }

    #[test]
    fn prefix_lookup_and_cancel() {
        let (_d, mut s) = store();
        let id = TaskId::new();
        s.submit(id, &spec("t"), 0, None, 1).unwrap();
        let full = id.to_string();
        assert_eq!(s.require(&full[..8]).unwrap().id, id);
        assert_eq!(s.require(&id.short()).unwrap().id, id);
        assert!(matches!(
            s.require("ffffffff"),
            Err(StoreError::TaskNotFound(_))
        ));
        assert_eq!(s.request_cancel(id).unwrap(), TaskState::Queued);
        assert_eq!(s.require(&full).unwrap().state, TaskState::Cancelled);
        assert!(s.claim_next(None, &lease()).unwrap().is_none());
    }
}
