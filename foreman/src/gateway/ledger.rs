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
//! from blocking threads only.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{Connection, TransactionBehavior, params};
use saheeli_protocol::TaskId;
use saheeli_protocol::chat::ChatUsage;

use crate::store::ExecCached;

#[derive(Debug, thiserror::Error)]
pub(crate) enum LedgerError {
    #[error("call ledger in `{path}`: {source}")]
    Sqlite {
        path: String,
        source: rusqlite::Error,
    },
}

/// What a task spent according to the ledger.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Spent {
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    /// Calls a dead foreman left in flight, now counted at their reservation.
    pub lost: u64,
    /// Parts of `input_tokens` read from and written to the provider's cache.
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
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

fn now_ms() -> i64 {
    crate::store::now_ms()
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
        self.write(|tx| {
            tx.exec_cached(
                "INSERT INTO llm_calls (call_id, task_id, state, reserved_tokens, reserved_cost, started_at)
                 VALUES (?1, ?2, 'in_flight', ?3, ?4, ?5)",
                params![call, task.to_string(), tokens as i64, cost_usd, now_ms()],
            )?;
            Ok(())
        })
    }

    /// Records what the call really cost (zero when nothing was billed).
    pub fn settle(&self, call: &str, usage: &ChatUsage, cost_usd: f64) -> Result<(), LedgerError> {
        self.write(|tx| {
            tx.exec_cached(
                "UPDATE llm_calls SET state = 'settled', input_tokens = ?2, output_tokens = ?3,
                        cost_usd = ?4, settled_at = ?5, cache_read_tokens = ?6,
                        cache_write_tokens = ?7
                 WHERE call_id = ?1 AND state = 'in_flight'",
                params![
                    call,
                    usage.prompt_tokens as i64,
                    usage.completion_tokens as i64,
                    cost_usd,
                    now_ms(),
                    usage.cache_read_tokens as i64,
                    usage.cache_write_tokens as i64
                ],
            )?;
            Ok(())
        })
    }

    /// Until when a call of `task` waits for its turn in the provider's
    /// rate limit (None: no longer), for `task status`.
    pub fn rate_wait(&self, task: TaskId, until_ms: Option<i64>) -> Result<(), LedgerError> {
        self.write(|tx| {
            tx.exec_cached(
                "UPDATE tasks SET rate_wait_until = ?2 WHERE id = ?1",
                params![task.to_string(), until_ms],
            )?;
            Ok(())
        })
    }

    /// Settles a call cut off before its answer (the servo killed, the
    /// request dropped) at its reservation, counted as input: what the
    /// provider billed is unknown, and it may have billed it all.
    pub fn settle_cut(&self, call: &str) -> Result<(), LedgerError> {
        self.write(|tx| {
            tx.exec_cached(
                "UPDATE llm_calls SET state = 'settled', input_tokens = reserved_tokens,
                        output_tokens = 0, cost_usd = reserved_cost, settled_at = ?2
                 WHERE call_id = ?1 AND state = 'in_flight'",
                params![call, now_ms()],
            )?;
            Ok(())
        })
    }

    /// When a task's gateway stops: every call of the task still in flight
    /// is settled at its reservation, so none stays `in_flight` forever
    /// (issue 27). Returns how many there were.
    pub fn settle_all_cut(&self, task: TaskId) -> Result<usize, LedgerError> {
        self.write(|tx| {
            tx.exec_cached(
                "UPDATE llm_calls SET state = 'settled', input_tokens = reserved_tokens,
                        output_tokens = 0, cost_usd = reserved_cost, settled_at = ?2
                 WHERE task_id = ?1 AND state = 'in_flight'",
                params![task.to_string(), now_ms()],
            )
        })
    }

    /// Takes a task over: calls left in flight become `lost` (counted once,
    /// at their reservation), and the task's total spend is returned. None
    /// when the ledger knows no call of the task.
    pub fn adopt(&self, task: TaskId) -> Result<Option<Spent>, LedgerError> {
        self.write(|tx| {
            let id = task.to_string();
            let lost = tx.exec_cached(
                "UPDATE llm_calls SET state = 'lost', settled_at = ?2
                 WHERE task_id = ?1 AND state = 'in_flight'",
                params![id, now_ms()],
            )?;
            let (calls, input, output, cost, reserved, reserved_cost, read, write): (
                i64,
                i64,
                i64,
                f64,
                i64,
                f64,
                i64,
                i64,
            ) = tx.query_row(
                "SELECT count(*),
                        coalesce(sum(CASE state WHEN 'settled' THEN input_tokens END), 0),
                        coalesce(sum(CASE state WHEN 'settled' THEN output_tokens END), 0),
                        coalesce(sum(CASE state WHEN 'settled' THEN cost_usd END), 0.0),
                        coalesce(sum(CASE state WHEN 'lost' THEN reserved_tokens END), 0),
                        coalesce(sum(CASE state WHEN 'lost' THEN reserved_cost END), 0.0),
                        coalesce(sum(CASE state WHEN 'settled' THEN cache_read_tokens END), 0),
                        coalesce(sum(CASE state WHEN 'settled' THEN cache_write_tokens END), 0)
                     FROM llm_calls WHERE task_id = ?1",
                [&id],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                    ))
                },
            )?;
            if calls == 0 {
                return Ok(None);
            }
            // A lost call's reservation is counted as input: which part of
            // it the provider billed as output is unknown.
            Ok(Some(Spent {
                calls: calls as u64,
                input_tokens: (input + reserved) as u64,
                output_tokens: output as u64,
                cost_usd: cost + reserved_cost,
                lost: lost as u64,
                cache_read_tokens: read as u64,
                cache_write_tokens: write as u64,
            }))
        })
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
