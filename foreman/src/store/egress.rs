//! The egress ledger (issue 50): one row per connection a task's proxy
//! was asked for, allowed or refused, written by `egress::Ledger` as the
//! connection ends; read by the report, the task view and verify.

use rusqlite::params;
use saheeli_protocol::TaskId;
use saheeli_protocol::egress::Phase;
use serde::{Deserialize, Serialize};

use super::{ExecCached, Result, Store};

/// What became of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum EgressVerdict {
    /// A list named the host.
    Allowed,
    /// A person approved the host (`egress_approval: ask`).
    Approved,
    Refused,
}

impl EgressVerdict {
    pub const fn as_str(self) -> &'static str {
        match self {
            EgressVerdict::Allowed => "allowed",
            EgressVerdict::Approved => "approved",
            EgressVerdict::Refused => "refused",
        }
    }

    pub fn parse(s: &str) -> Option<EgressVerdict> {
        [
            EgressVerdict::Allowed,
            EgressVerdict::Approved,
            EgressVerdict::Refused,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }
}

/// One connection asked of the proxy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct EgressEntry {
    pub phase: Phase,
    pub host: String,
    pub port: u16,
    pub verdict: EgressVerdict,
    /// Why it was refused, or who approved it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The address connected to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Bytes from the container to the host, and back.
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Unix milliseconds when it was asked for.
    pub started_at: i64,
    /// How long it lasted, in milliseconds.
    pub ms: u64,
}

/// The most rows a task keeps: a client retrying forever fills no disk.
pub(crate) const MAX_ROWS: i64 = 10_000;

impl Store {
    /// Keeps one entry (past [`MAX_ROWS`] for the task, only counted in
    /// `/metrics` and the log).
    pub fn egress_record(&mut self, task: TaskId, e: &EgressEntry) -> Result<()> {
        let id = task.to_string();
        let n: i64 = self.conn.query_row(
            "SELECT COUNT(*) FROM egress WHERE task_id = ?1",
            params![id],
            |r| r.get(0),
        )?;
        if n >= MAX_ROWS {
            return Ok(());
        }
        self.conn.exec_cached(
            "INSERT INTO egress (task_id, phase, host, port, verdict, reason, address,
                                 bytes_up, bytes_down, started_at, ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                id,
                e.phase.as_str(),
                e.host,
                e.port,
                e.verdict.as_str(),
                e.reason,
                e.address,
                e.bytes_up as i64,
                e.bytes_down as i64,
                e.started_at,
                e.ms as i64,
            ],
        )?;
        Ok(())
    }

    /// A task's entries, oldest first.
    pub fn egress_of(&self, task: TaskId) -> Result<Vec<EgressEntry>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT phase, host, port, verdict, reason, address, bytes_up, bytes_down,
                    started_at, ms
             FROM egress WHERE task_id = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map(params![task.to_string()], |r| {
            let phase: String = r.get(0)?;
            let verdict: String = r.get(3)?;
            Ok(EgressEntry {
                phase: Phase::ALL
                    .into_iter()
                    .find(|p| p.as_str() == phase)
                    .unwrap_or(Phase::Agent),
                host: r.get(1)?,
                port: r.get(2)?,
                verdict: EgressVerdict::parse(&verdict).unwrap_or(EgressVerdict::Refused),
                reason: r.get(4)?,
                address: r.get(5)?,
                bytes_up: r.get::<_, i64>(6)?.max(0) as u64,
                bytes_down: r.get::<_, i64>(7)?.max(0) as u64,
                started_at: r.get(8)?,
                ms: r.get::<_, i64>(9)?.max(0) as u64,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
}
