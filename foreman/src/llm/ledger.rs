//! The per-call ledger in SQLite (`llm_calls`), so that a foreman crash
//! neither forgets nor double-counts what a task spent.
//!
//! Before forwarding a call the gateway reserves its estimate in a row
//! (`in_flight`); after the answer it settles the row to the real usage.
//! A foreman adopting a task marks the rows a dead foreman left in flight
//! `lost` (the call may have been billed upstream: it is counted once, at
//! its reservation) and seeds the task's meter from settled usage plus lost
//! reservations. The gateway keeps its own connection to the database file
//! (WAL, 10 s busy timeout, `BEGIN IMMEDIATE` for writes) and is called
//! from blocking threads only. The SQL is the store's (`store::ledger`).

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{Connection, TransactionBehavior};
use saheeli_protocol::TaskId;
use saheeli_protocol::chat::ChatUsage;

use crate::store::ledger::{self, Spent};

#[derive(Debug, thiserror::Error)]
pub(crate) enum LedgerError {
    #[error("call ledger in `{path}`: {source}")]
    Sqlite {
        path: String,
        source: rusqlite::Error,
    },
}

pub(crate) struct Ledger {
    path: String,
    conn: Mutex<Connection>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger").field("path", &self.path).finish()
    }
}

impl Ledger {
    /// Opens the database the store already migrated.
    pub fn open(path: &Path) -> Result<Ledger, LedgerError> {
        let p = path.display().to_string();
        let err = |source| LedgerError::Sqlite {
            path: p.clone(),
            source,
        };
        let conn = Connection::open(path).map_err(err)?;
        crate::store::wait_when_busy(&conn).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(err)?;
        // Its writes run through the statement cache (`ExecCached`).
        conn.set_prepared_statement_cache_capacity(32);
        Ok(Ledger {
            path: p,
            conn: Mutex::new(conn),
        })
    }

    fn write<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<T>,
    ) -> Result<T, LedgerError> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let run = || {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let r = f(&tx)?;
            tx.commit()?;
            Ok(r)
        };
        run().map_err(|source| LedgerError::Sqlite {
            path: self.path.clone(),
            source,
        })
    }

    /// Records a call about to be forwarded, with what it may cost at most.
    pub fn reserve(
        &self,
        task: TaskId,
        call: &str,
        tokens: u64,
        cost_usd: f64,
    ) -> Result<(), LedgerError> {
        self.write(|tx| ledger::reserve(tx, task, call, tokens, cost_usd))
    }

    /// Records what the call really cost (zero when nothing was billed).
    pub fn settle(&self, call: &str, usage: &ChatUsage, cost_usd: f64) -> Result<(), LedgerError> {
        self.write(|tx| ledger::settle(tx, call, usage, cost_usd))
    }

    /// Until when a call of `task` waits for its turn in the provider's
    /// rate limit (None: no longer), for `task status`.
    pub fn rate_wait(&self, task: TaskId, until_ms: Option<i64>) -> Result<(), LedgerError> {
        self.write(|tx| ledger::rate_wait(tx, task, until_ms))
    }

    /// Settles a call cut off before its answer (the servo killed, the
    /// request dropped) at its reservation, counted as input: what the
    /// provider billed is unknown, and it may have billed it all.
    pub fn settle_cut(&self, call: &str) -> Result<(), LedgerError> {
        self.write(|tx| ledger::settle_cut(tx, call))
    }

    /// When a task's gateway stops: every call of the task still in flight
    /// is settled at its reservation, so none stays `in_flight` forever
    /// (issue 27). Returns how many there were.
    pub fn settle_all_cut(&self, task: TaskId) -> Result<usize, LedgerError> {
        self.write(|tx| ledger::settle_all_cut(tx, task))
    }

    /// Takes a task over: calls left in flight become `lost` (counted once,
    /// at their reservation), and the task's total spend is returned. None
    /// when the ledger knows no call of the task.
    pub fn adopt(&self, task: TaskId) -> Result<Option<Spent>, LedgerError> {
        self.write(|tx| ledger::adopt(tx, task))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64) -> ChatUsage {
        ChatUsage {
            prompt_tokens: input,
            completion_tokens: output,
            total_tokens: input + output,
            ..Default::default()
        }
    }

    /// Issue 26: a task adopted after a restart keeps its cached counts.
    #[test]
    fn cached_tokens_survive_adoption() {
        let d = tempfile::tempdir().unwrap();
        let db = d.path().join("q.db");
        drop(crate::store::Store::open(&db).unwrap());
        let l = Ledger::open(&db).unwrap();
        let a = TaskId::new();
        for (call, read, write) in [("c1", 0, 900), ("c2", 900, 100)] {
            l.reserve(a, call, 2000, 0.0).unwrap();
            let u = ChatUsage {
                cache_read_tokens: read,
                cache_write_tokens: write,
                ..usage(1000, 10)
            };
            l.settle(call, &u, 0.0).unwrap();
        }
        let spent = l.adopt(a).unwrap().unwrap();
        assert_eq!(
            (
                spent.input_tokens,
                spent.cache_read_tokens,
                spent.cache_write_tokens
            ),
            (2000, 900, 1000)
        );
    }

    #[test]
    fn lost_calls_are_counted_once_at_their_reservation() {
        let d = tempfile::tempdir().unwrap();
        let db = d.path().join("q.db");
        drop(crate::store::Store::open(&db).unwrap());
        let l = Ledger::open(&db).unwrap();
        let (a, b) = (TaskId::new(), TaskId::new());
        assert_eq!(l.adopt(a).unwrap(), None);
        l.reserve(a, "c1", 1000, 0.5).unwrap();
        l.settle("c1", &usage(100, 20), 0.1).unwrap();
        l.reserve(a, "c2", 900, 0.4).unwrap(); // the foreman dies here
        l.reserve(b, "c3", 50, 0.0).unwrap();
        let spent = l.adopt(a).unwrap().unwrap();
        assert_eq!(
            (
                spent.calls,
                spent.input_tokens,
                spent.output_tokens,
                spent.lost
            ),
            (2, 100 + 900, 20, 1)
        );
        assert!((spent.cost_usd - 0.5).abs() < 1e-9);
        // A second adoption counts the lost call again only once.
        l.settle("c2", &usage(1, 1), 0.0).unwrap(); // too late: already lost
        let again = l.adopt(a).unwrap().unwrap();
        assert_eq!(again.input_tokens, 1000);
        assert_eq!(again.lost, 0);
        // Another task's call is untouched.
        assert_eq!(l.adopt(b).unwrap().unwrap().lost, 1);
    }

    /// Issue 27 item 6: a call cut off when its task ended stayed
    /// `in_flight` forever and was missing from the task's usage.
    #[test]
    fn calls_cut_off_are_settled_at_their_reservation() {
        let d = tempfile::tempdir().unwrap();
        let db = d.path().join("q.db");
        drop(crate::store::Store::open(&db).unwrap());
        let l = Ledger::open(&db).unwrap();
        let (a, b) = (TaskId::new(), TaskId::new());
        l.reserve(a, "c1", 1000, 0.5).unwrap();
        l.settle("c1", &usage(100, 20), 0.1).unwrap();
        l.reserve(a, "c2", 900, 0.4).unwrap(); // dropped mid-call
        l.settle_cut("c2").unwrap();
        l.reserve(a, "c3", 800, 0.3).unwrap(); // in flight as the gateway stops
        l.reserve(b, "c4", 50, 0.0).unwrap();
        assert_eq!(l.settle_all_cut(a).unwrap(), 1);
        let in_flight: i64 = l
            .conn
            .lock()
            .unwrap()
            .query_row(
                "SELECT count(*) FROM llm_calls WHERE task_id = ?1 AND state = 'in_flight'",
                [a.to_string()],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(in_flight, 0);
        let spent = l.adopt(a).unwrap().unwrap();
        assert_eq!(
            (
                spent.calls,
                spent.input_tokens,
                spent.output_tokens,
                spent.lost
            ),
            (3, 100 + 900 + 800, 20, 0)
        );
        assert!((spent.cost_usd - 0.8).abs() < 1e-9);
        // Another task's call is untouched.
        assert_eq!(l.adopt(b).unwrap().unwrap().lost, 1);
    }
}
