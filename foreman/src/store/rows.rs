//! What the store reads and writes: task and event rows, outcomes, leases.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use saheeli_protocol::TaskId;

use crate::state::TaskState;
use crate::task::TaskSpec;

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
    pub detail: Option<String>,
    /// Waiting for a human with no container: the workspace is kept.
    pub parked: bool,
    /// Working time of earlier launches (a parked task's), in ms.
    pub active_ms: i64,
    pub pause_requested: bool,
    /// When the task began waiting for a human.
    pub waiting_since: Option<i64>,
    /// What a `waiting_human` task waits for.
    pub waiting_for: Option<saheeli_protocol::human::Waiting>,
    /// Set once someone overrode the outcome (`saheeli task override`).
    pub overridden: Option<Override>,
    /// Calls to capability (MCP) tools the gateway served.
    pub capability_calls: i64,
    /// Requests of the task's container the gateway refused at its caps
    /// or gates (store/guard.rs).
    pub gateway_refused: i64,
    /// Parts of `input_tokens` the provider read from or wrote to its
    /// prompt cache (issue 26).
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    /// Times the servo compacted its conversation (issue 26).
    pub compactions: i64,
    /// A queued task is not claimed before this (a retry's backoff, a
    /// requeue's delay; issue 30).
    pub not_before: Option<i64>,
    /// Until when a call of the task waits for the provider's rate limit
    /// (issue 26); None, or a time past, when it does not.
    pub rate_wait_until: Option<i64>,
    /// How its last launch's set-up went (issue 50): the cache key, hit
    /// or miss, its time.
    pub setup: Option<crate::task::SetupRan>,
    /// The commit it started from (issue 52: `workspace: { git }`).
    pub git: Option<crate::task::GitStart>,
    /// How its branch was delivered (issue 52: `deliver:`).
    pub delivered: Option<crate::task::Delivered>,
    /// The delivered task whose review it follows up (issue 52).
    pub follow_up_of: Option<TaskId>,
    /// Since when its servo is frozen while it waits (issue 51).
    pub frozen_at: Option<i64>,
}

impl TaskRow {
    /// Waiting on an approval (a step's, a tool gate's) that names who
    /// decides or a message (issue 52): that, for people asked.
    pub fn approval_asked(&self) -> Option<String> {
        let w = self.waiting_for.as_ref()?;
        let s = &self.spec;
        let (what, a) = crate::task::approval_for(&s.steps, &s.gate_approval, w)?;
        Some(crate::task::asked_line(&what, a))
    }

    /// A call of this running task waits for its turn in the provider's
    /// rate limit (`waiting for provider rate limit`).
    pub fn rate_limited(&self, now_ms: i64) -> bool {
        !self.state.is_terminal() && self.rate_wait_until.is_some_and(|t| t > now_ms)
    }
}

/// A person's override of how a task ended; the task's `state` is the
/// outcome it was given.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Override {
    /// The state the task ended in before any override.
    pub from: TaskState,
    /// Why, in the words of whoever overrode it (the latest override).
    pub reason: String,
    /// The OS user who did it.
    pub by: String,
    pub at: i64,
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
    /// Its row id: events sort by it, and a page of them starts below one.
    pub seq: i64,
    pub at: i64,
    pub from: Option<TaskState>,
    pub to: TaskState,
    pub detail: Option<String>,
    /// Not a state change: what happened (`asked`, `answered`, …).
    pub kind: Option<String>,
    pub actor: Option<String>,
}

/// One row of the event trail with its task (what the event bus carries).
#[derive(Clone, Debug)]
pub(crate) struct TrailRow {
    pub seq: i64,
    pub task_id: TaskId,
    pub at: i64,
    pub from: Option<TaskState>,
    pub to: TaskState,
    pub detail: Option<String>,
    pub reason: Option<String>,
    pub kind: Option<String>,
    pub actor: Option<String>,
}

/// How a task ended, written with its final transition.
#[derive(Clone, Debug, Default)]
pub(crate) struct Outcome {
    pub reason: Option<String>,
    /// What happened, for people (an error chain, what was collected).
    pub detail: Option<String>,
    pub steps: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
    pub results_path: Option<String>,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub compactions: i64,
    /// `report: synthesized` (issue 29): the section's text, or why there
    /// is none; None when the report is facts only. Not stored: report.md
    /// holds it.
    pub synthesis: Option<Result<String, String>>,
}

/// A new attempt to queue with a terminal transition.
#[derive(Clone, Debug)]
pub(crate) struct Retry {
    pub id: TaskId,
    pub spec: TaskSpec,
    pub priority: i64,
    pub attempt: i64,
    /// Not claimed before this (`retry_backoff`).
    pub not_before: Option<i64>,
    /// An event for the retry's trail, written with it (issue 51:
    /// `restore_incomplete`, `starts_over`): its kind and detail.
    pub said: Option<(&'static str, String)>,
}

pub(super) const COLUMNS: &str = "id, title, state, reason, priority, spec, retry_of, container_id, created_at, \
     started_at, finished_at, steps, input_tokens, output_tokens, results_path, cancel_requested, cost_usd, \
     requeues, attempt, detail, parked, active_ms, pause_requested, waiting_since, \
     (SELECT a.waiting FROM asks a WHERE a.task_id = tasks.id AND a.decision IS NULL \
      ORDER BY a.id DESC LIMIT 1), override_from, override_reason, override_by, override_at, capability_calls, \
     gateway_refused, cache_read_tokens, cache_write_tokens, compactions, not_before, rate_wait_until, setup, \
     git, delivered, follow_up_of, frozen_at";

pub(super) fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TaskRow> {
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
        state: state
            .parse()
            .map_err(|e: strum::ParseError| conv(2, Box::new(e)))?,
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
        detail: r.get(19)?,
        parked: r.get::<_, i64>(20)? != 0,
        active_ms: r.get(21)?,
        pause_requested: r.get::<_, i64>(22)? != 0,
        waiting_since: r.get(23)?,
        waiting_for: r
            .get::<_, Option<String>>(24)?
            .filter(|_| state == "waiting_human" || state == "blocked")
            .and_then(|w| serde_json::from_str(&w).ok()),
        overridden: read_override(r)?,
        capability_calls: r.get(29)?,
        gateway_refused: r.get(30)?,
        cache_read_tokens: r.get(31)?,
        cache_write_tokens: r.get(32)?,
        compactions: r.get(33)?,
        not_before: r.get(34)?,
        rate_wait_until: r.get(35)?,
        setup: r
            .get::<_, Option<String>>(36)?
            .and_then(|s| serde_json::from_str(&s).ok()),
        git: r
            .get::<_, Option<String>>(37)?
            .and_then(|s| serde_json::from_str(&s).ok()),
        delivered: r
            .get::<_, Option<String>>(38)?
            .and_then(|s| serde_json::from_str(&s).ok()),
        follow_up_of: r.get::<_, Option<String>>(39)?.and_then(|s| s.parse().ok()),
        frozen_at: r.get(40)?,
    })
}

/// The override columns (20 to 23 of [`COLUMNS`]).
fn read_override(r: &rusqlite::Row<'_>) -> rusqlite::Result<Option<Override>> {
    let from: Option<String> = r.get(25)?;
    let Some(from) = from else {
        return Ok(None);
    };
    let from = from.parse().map_err(|e: strum::ParseError| {
        rusqlite::Error::FromSqlConversionFailure(25, rusqlite::types::Type::Text, Box::new(e))
    })?;
    Ok(Some(Override {
        from,
        reason: r.get::<_, Option<String>>(26)?.unwrap_or_default(),
        by: r.get::<_, Option<String>>(27)?.unwrap_or_default(),
        at: r.get::<_, Option<i64>>(28)?.unwrap_or_default(),
    }))
}
