//! Each serving foreman's admission state (its concurrency limit and
//! circuit breaker), written by its loop when it changes and now and then,
//! read by `task status` and `saheeli metrics` in other processes.

use rusqlite::{OptionalExtension, params};

use super::{Result, Store};

/// One foreman's admission state as last written.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AdmissionRow {
    pub owner: String,
    /// `auto` or a number.
    pub concurrency: String,
    pub limit: i64,
    pub running: i64,
    /// `closed`, `open` or `half_open`.
    pub breaker: String,
    /// Daemon errors in a row.
    pub failures: i64,
    pub latency_ms: Option<f64>,
    pub baseline_ms: Option<f64>,
    /// How long an open breaker stays open from `updated_at`.
    pub open_for_ms: Option<i64>,
    pub updated_at: i64,
    /// Warm servos idle in its pool (None: it has no pool).
    pub pool_idle: Option<i64>,
}

impl Store {
    /// Writes this foreman's admission state.
    pub fn put_admission(&mut self, row: &AdmissionRow) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO admission (owner, concurrency, lim, running, breaker,
                    failures, latency_ms, baseline_ms, open_for_ms, updated_at, pool_idle)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?
            .execute(params![
                row.owner,
                row.concurrency,
                row.limit,
                row.running,
                row.breaker,
                row.failures,
                row.latency_ms,
                row.baseline_ms,
                row.open_for_ms,
                row.updated_at,
                row.pool_idle
            ])?;
        Ok(())
    }

    /// Forgets a foreman's admission state (it stopped serving).
    pub fn drop_admission(&mut self, owner: &str) -> Result<()> {
        self.conn
            .execute("DELETE FROM admission WHERE owner = ?1", params![owner])?;
        Ok(())
    }

    /// The freshest admission state written since `since_ms`, if any, with
    /// the warm servos idle in every fresh foreman's pool: a `saheeli run`
    /// beside a serving foreman writes a row of its own, with no pool, and
    /// the freshest row alone hid the serving foreman's pool half the time.
    pub fn admission_since(&self, since_ms: i64) -> Result<Option<AdmissionRow>> {
        Ok(self
            .conn
            .query_row(
                "SELECT owner, concurrency, lim, running, breaker, failures, latency_ms,
                        baseline_ms, open_for_ms, updated_at,
                        (SELECT SUM(pool_idle) FROM admission WHERE updated_at >= ?1)
                 FROM admission WHERE updated_at >= ?1 ORDER BY updated_at DESC LIMIT 1",
                params![since_ms],
                |r| {
                    Ok(AdmissionRow {
                        owner: r.get(0)?,
                        concurrency: r.get(1)?,
                        limit: r.get(2)?,
                        running: r.get(3)?,
                        breaker: r.get(4)?,
                        failures: r.get(5)?,
                        latency_ms: r.get(6)?,
                        baseline_ms: r.get(7)?,
                        open_for_ms: r.get(8)?,
                        updated_at: r.get(9)?,
                        pool_idle: r.get(10)?,
                    })
                },
            )
            .optional()?)
    }
}
