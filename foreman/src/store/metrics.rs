//! What a metrics scrape reads from the database: one read transaction, so
//! the counts agree with each other and with `task status`.
//!
//! The event trail and the call ledger only grow, so they are read from a
//! cursor on (the caller keeps it and adds up what is new); the gauges
//! (tasks by state, waiting tasks, servos, the usage of unended tasks) are
//! counted afresh through the `tasks_by_state` index.

use rusqlite::params;

use crate::state::{TaskState, sql_list};

use super::{Result, Store};

/// The end states of the lifecycle, as SQL.
const TERMINAL: &str = "('complete', 'incomplete', 'failed', 'cancelled')";

/// One event row, with what metrics need of its task.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct TrailFact {
    pub seq: i64,
    pub from: Option<TaskState>,
    pub to: Option<TaskState>,
    /// Set on events that are not state changes (`asked`, `parked`, …).
    pub kind: Option<String>,
    /// The task's reason code, on transitions into an end state.
    pub reason: Option<String>,
    /// On a task's first end: the task's model, usage and (when it ever
    /// started) its duration, as `task status` shows them.
    pub ended: Option<Ended>,
    /// On a move to `starting`: how long the task was queued.
    pub queued_ms: Option<i64>,
}

/// A task as it ended.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Ended {
    pub model: String,
    pub duration_ms: Option<i64>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
    /// Cached input (issue 26): (read, written), and compactions.
    pub cached: (i64, i64),
    pub compactions: i64,
}

/// Tokens and cost of the tasks that have not ended, by model.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ModelUsage {
    pub model: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
    pub cached: (i64, i64),
    pub compactions: i64,
}

/// Waiting tasks of one state, parked (no container) or not.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct WaitingCount {
    pub state: TaskState,
    pub parked: bool,
    pub tasks: i64,
    /// When the longest-waiting of them started waiting (ms).
    pub since: Option<i64>,
}

/// What one scrape read besides the trail and the calls.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ScrapeRead {
    pub states: Vec<(TaskState, i64)>,
    pub waiting: Vec<WaitingCount>,
    /// Tasks holding a servo container.
    pub servos: i64,
    /// Tasks whose servo is frozen (issue 51).
    pub frozen: i64,
    pub unended: Vec<ModelUsage>,
    /// Webhook deliveries by state (`pending`, `delivered`, `dead`).
    pub webhooks: Vec<(String, i64)>,
    /// The cursors to read from next time.
    pub trail_end: i64,
    pub calls_end: i64,
}

/// Receives the rows read from cursors.
pub(crate) trait ScrapeSink {
    fn fact(&mut self, fact: TrailFact);
    /// `calls` new LLM calls of tasks using `model`.
    fn calls(&mut self, model: &str, calls: u64);
}

impl Store {
    /// Reads, in one transaction, the event rows after `trail_after` and
    /// the ledger rows after `calls_after` (into `sink`), and the gauges.
    pub fn scrape(
        &mut self,
        trail_after: i64,
        calls_after: i64,
        sink: &mut dyn ScrapeSink,
    ) -> Result<ScrapeRead> {
        let tx = self.conn.transaction()?;
        let trail_end = read_trail(&tx, trail_after, sink)?;
        let calls_end = read_calls(&tx, calls_after, sink)?;
        let read = ScrapeRead {
            states: states(&tx)?,
            waiting: waiting(&tx)?,
            servos: tx.query_row(
                &format!(
                    "SELECT count(*) FROM tasks WHERE state IN {}
                       AND container_id IS NOT NULL AND parked = 0",
                    sql_list(&TaskState::HELD)
                ),
                [],
                |r| r.get(0),
            )?,
            frozen: tx.query_row(
                &format!(
                    "SELECT count(*) FROM tasks WHERE state IN {} AND frozen_at IS NOT NULL",
                    sql_list(&TaskState::HELD)
                ),
                [],
                |r| r.get(0),
            )?,
            unended: unended(&tx)?,
            webhooks: {
                let mut stmt =
                    tx.prepare_cached("SELECT state, count(*) FROM outbox GROUP BY state")?;
                stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<_>>()?
            },
            trail_end,
            calls_end,
        };
        tx.commit()?;
        Ok(read)
    }
}

/// Streams the event rows after `after` into `sink`; returns the last id.
fn read_trail(
    tx: &rusqlite::Transaction<'_>,
    after: i64,
    sink: &mut dyn ScrapeSink,
) -> Result<i64> {
    // A first end is a move into an end state from one that is not (an
    // override moves between end states). The queue wait is measured from
    // the task's latest move into `queued` before this event.
    let first_end = format!(
        "(e.kind IS NULL AND e.to_state IN {TERMINAL}
          AND (e.from_state IS NULL OR e.from_state NOT IN {TERMINAL}))"
    );
    // The spec is parsed for first ends only.
    let sql = format!(
        "SELECT e.id, e.from_state, e.to_state, e.kind,
            CASE WHEN e.kind IS NULL AND e.to_state IN {TERMINAL} THEN t.reason END,
            {first_end},
            CASE WHEN e.kind IS NULL AND e.to_state = 'starting' THEN e.at - (
                SELECT max(q.at) FROM events q WHERE q.task_id = e.task_id AND q.id < e.id
                  AND q.to_state = 'queued' AND q.kind IS NULL) END,
            CASE WHEN {first_end} THEN json_extract(t.spec, '$.model') END,
            t.finished_at - t.started_at, t.input_tokens, t.output_tokens, t.cost_usd,
            t.cache_read_tokens, t.cache_write_tokens, t.compactions
         FROM events e JOIN tasks t ON t.id = e.task_id
         WHERE e.id > ?1 ORDER BY e.id"
    );
    let mut stmt = tx.prepare_cached(&sql)?;
    let mut rows = stmt.query(params![after])?;
    let mut last = after;
    while let Some(r) = rows.next()? {
        let first_end: bool = r.get(5)?;
        let fact = TrailFact {
            seq: r.get(0)?,
            from: r.get::<_, Option<String>>(1)?.and_then(|s| s.parse().ok()),
            to: r.get::<_, String>(2)?.parse().ok(),
            kind: r.get(3)?,
            reason: r.get(4)?,
            queued_ms: r.get(6)?,
            ended: match first_end {
                true => Some(Ended {
                    model: r.get::<_, Option<String>>(7)?.unwrap_or_default(),
                    duration_ms: r.get(8)?,
                    input_tokens: r.get(9)?,
                    output_tokens: r.get(10)?,
                    cost_usd: r.get(11)?,
                    cached: (r.get(12)?, r.get(13)?),
                    compactions: r.get(14)?,
                }),
                false => None,
            },
        };
        last = fact.seq;
        sink.fact(fact);
    }
    Ok(last)
}

/// Counts the ledger rows after `after` by their task's model; returns the
/// last rowid. Rows are only ever inserted, so rowids grow in commit order.
fn read_calls(
    tx: &rusqlite::Transaction<'_>,
    after: i64,
    sink: &mut dyn ScrapeSink,
) -> Result<i64> {
    let end: i64 = tx.query_row(
        "SELECT coalesce(max(rowid), ?1) FROM llm_calls",
        params![after],
        |r| r.get(0),
    )?;
    if end <= after {
        return Ok(after);
    }
    let mut stmt = tx.prepare_cached(
        "SELECT json_extract(t.spec, '$.model'), sum(c.n)
         FROM (SELECT task_id, count(*) AS n FROM llm_calls
               WHERE rowid > ?1 AND rowid <= ?2 GROUP BY task_id) c
         JOIN tasks t ON t.id = c.task_id
         GROUP BY 1",
    )?;
    let rows = stmt.query_map(params![after, end], |r| {
        Ok((r.get::<_, Option<String>>(0)?, r.get::<_, i64>(1)?))
    })?;
    for row in rows {
        let (model, n) = row?;
        sink.calls(model.as_deref().unwrap_or_default(), n.max(0) as u64);
    }
    Ok(end)
}

fn states(tx: &rusqlite::Transaction<'_>) -> Result<Vec<(TaskState, i64)>> {
    let mut stmt = tx.prepare_cached("SELECT state, count(*) FROM tasks GROUP BY state")?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
    let mut out = Vec::new();
    for row in rows {
        let (state, n) = row?;
        if let Ok(s) = state.parse() {
            out.push((s, n));
        }
    }
    Ok(out)
}

fn waiting(tx: &rusqlite::Transaction<'_>) -> Result<Vec<WaitingCount>> {
    let mut stmt = tx.prepare_cached(&format!(
        "SELECT state, parked, count(*), min(waiting_since) FROM tasks
         WHERE state IN {} GROUP BY state, parked",
        sql_list(&TaskState::WAITING)
    ))?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, bool>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, Option<i64>>(3)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (state, parked, tasks, since) = row?;
        if let Ok(state) = state.parse() {
            out.push(WaitingCount {
                state,
                parked,
                tasks,
                since,
            });
        }
    }
    Ok(out)
}

/// Usage of the tasks that have not ended (a running task's is written
/// every second; a parked one keeps what it spent).
fn unended(tx: &rusqlite::Transaction<'_>) -> Result<Vec<ModelUsage>> {
    let mut stmt = tx.prepare_cached(&format!(
        "SELECT json_extract(spec, '$.model'), sum(input_tokens), sum(output_tokens), sum(cost_usd),
                sum(cache_read_tokens), sum(cache_write_tokens), sum(compactions)
         FROM tasks
         WHERE state IN {}
           AND (input_tokens > 0 OR output_tokens > 0 OR cost_usd > 0)
         GROUP BY 1",
        sql_list(&TaskState::UNENDED)
    ))?;
    let rows = stmt.query_map([], |r| {
        Ok(ModelUsage {
            model: r.get::<_, Option<String>>(0)?.unwrap_or_default(),
            input_tokens: r.get(1)?,
            output_tokens: r.get(2)?,
            cost_usd: r.get(3)?,
            cached: (r.get(4)?, r.get(5)?),
            compactions: r.get(6)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
