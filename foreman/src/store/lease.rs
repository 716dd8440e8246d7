//! Leases: who holds a running task, renewal, take-over, and the fence
//! every write about a held task goes through.

use rusqlite::{TransactionBehavior, params};
use saheeli_protocol::TaskId;

use crate::state::{TaskState, sql_list};

use super::{Lease, Result, Store, StoreError, TaskRow, now_ms};

impl Store {
    /// Confirms that this foreman still holds `id` and extends its lease;
    /// [`StoreError::LeaseLost`] otherwise. Called before acting on the
    /// task's container or results, so a foreman that was paused past its
    /// lease learns it before it touches anything.
    pub fn hold(&mut self, id: TaskId, lease: &Lease) -> Result<()> {
        self.fenced_update(
            id,
            &format!(
                "UPDATE tasks SET lease_until = ?3 WHERE id = ?1 AND owner = ?2 AND state IN {}",
                sql_list(&TaskState::HELD)
            ),
            params![id.to_string(), lease.owner, now_ms() + lease.ms],
        )
    }

    /// Runs one UPDATE of a held task in a write transaction (a deferred
    /// one could fail at once with SQLITE_BUSY, ignoring the busy timeout);
    /// no row changed means the lease is lost.
    pub(super) fn fenced_update(
        &mut self,
        id: TaskId,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = tx.prepare_cached(sql)?.execute(params)?;
        if n == 0 {
            return Err(StoreError::LeaseLost(id));
        }
        tx.commit()?;
        Ok(())
    }

    /// Extends the lease on every active task `lease.owner` holds and
    /// returns their ids: a task missing from the answer was taken over.
    pub fn renew(&mut self, lease: &Lease) -> Result<Vec<TaskId>> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let ids: Vec<String> = {
            let mut stmt = tx.prepare_cached(&format!(
                "UPDATE tasks SET lease_until = ?2
                 WHERE owner = ?1 AND state IN {}
                 RETURNING id",
                sql_list(&TaskState::HELD)
            ))?;
            // An error here must not read as "nothing held": propagate it.
            stmt.query_map(params![lease.owner, now_ms() + lease.ms], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?
        };
        tx.commit()?;
        Ok(ids
            .iter()
            .map(|s| s.parse().expect("stored ids are UUIDs"))
            .collect())
    }

    /// Takes over active tasks whose lease has expired (their foreman died).
    pub fn take_over_expired(&mut self, lease: &Lease) -> Result<Vec<TaskRow>> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        let ids: Vec<String> = {
            let mut stmt = tx.prepare_cached(&format!(
                "UPDATE tasks SET owner = ?1, lease_until = ?2
                 WHERE (state IN {active}
                        AND (owner IS NULL OR lease_until IS NULL OR lease_until < ?3))
                    -- A waiting task nobody holds is parked: it is not lost.
                    OR (state IN {waiting} AND owner IS NOT NULL
                        AND (lease_until IS NULL OR lease_until < ?3))
                 RETURNING id",
                active = sql_list(&TaskState::ACTIVE),
                waiting = sql_list(&TaskState::WAITING),
            ))?;
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

    /// Gives a task's lease up, so that the next take-over round retries it.
    pub fn release(&mut self, id: TaskId, lease: &Lease) -> Result<()> {
        self.fenced_update(
            id,
            "UPDATE tasks SET owner = NULL, lease_until = NULL WHERE id = ?1 AND owner = ?2",
            params![id.to_string(), lease.owner],
        )
    }

    pub fn set_container(&mut self, id: TaskId, lease: &Lease, container_id: &str) -> Result<()> {
        self.fenced_update(
            id,
            "UPDATE tasks SET container_id = ?3 WHERE id = ?1 AND owner = ?2",
            params![id.to_string(), lease.owner, container_id],
        )
    }

    /// Records the container and renews the lease in one fenced write: a
    /// warm servo's launch (issue 28), whose container runs already, so
    /// nothing happens between the two that a second write would fence.
    pub fn hold_container(&mut self, id: TaskId, lease: &Lease, container_id: &str) -> Result<()> {
        self.fenced_update(
            id,
            &format!(
                "UPDATE tasks SET container_id = ?3, lease_until = ?4
                 WHERE id = ?1 AND owner = ?2 AND state IN {}",
                sql_list(&TaskState::HELD)
            ),
            params![
                id.to_string(),
                lease.owner,
                container_id,
                now_ms() + lease.ms
            ],
        )
    }

    /// Live usage while a task runs (from the gateway); `cached`: input
    /// read from and written to the provider's cache.
    #[allow(clippy::too_many_arguments)]
    pub fn set_usage(
        &mut self,
        id: TaskId,
        lease: &Lease,
        steps: i64,
        input: i64,
        output: i64,
        cost: f64,
        cached: (i64, i64),
    ) -> Result<()> {
        self.fenced_update(
            id,
            &format!(
                "UPDATE tasks SET steps = ?3, input_tokens = ?4, output_tokens = ?5, cost_usd = ?6,
                        cache_read_tokens = ?7, cache_write_tokens = ?8
                 WHERE id = ?1 AND owner = ?2 AND state IN {}",
                sql_list(&TaskState::HELD)
            ),
            params![
                id.to_string(),
                lease.owner,
                steps,
                input,
                output,
                cost,
                cached.0,
                cached.1
            ],
        )
    }
}
