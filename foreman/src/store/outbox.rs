//! The webhook outbox: rows written with each event (`queue::enqueue_webhooks`)
//! and taken here by a sender. A sender claims the oldest due row of each
//! task and URL (so a task's events arrive in order), for a while: two
//! foremen never send the same row at once, and a dead sender's claims lapse.

use rusqlite::{TransactionBehavior, params};
use saheeli_protocol::TaskId;

use crate::state::{TaskState, sql_list};

use super::{ExecCached, Result, Store, now_ms};

/// One delivery to make, with the facts its body carries.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Delivery {
    pub id: i64,
    pub event_id: i64,
    pub url: String,
    pub format: String,
    pub kind: String,
    pub attempts: i64,
    pub created_at: i64,
    pub task_id: TaskId,
    pub title: String,
    /// The state the event moved the task to.
    pub state: String,
    pub reason: Option<String>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
    pub results: Option<String>,
    pub detail: Option<String>,
    /// The task's branch as delivered (issue 52), once it ended.
    pub delivered: Option<crate::task::Delivered>,
}

/// Deliveries of one task, by outcome (for status).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct WebhookCounts {
    pub delivered: i64,
    pub pending: i64,
    pub dead: i64,
}

impl Store {
    /// Claims up to `limit` due deliveries for `owner` until `claim_ms`
    /// from now: for each task and URL, only its oldest pending row.
    pub fn claim_deliveries(
        &mut self,
        owner: &str,
        claim_ms: i64,
        limit: usize,
    ) -> Result<Vec<Delivery>> {
        let now = now_ms();
        // The sender asks four times a second: nothing due (as nearly
        // always) is answered by a read, without taking the write lock
        // every task's foreman needs.
        let due: bool = self
            .conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM outbox WHERE state = 'pending' AND next_at <= ?1
                              AND (claimed_until IS NULL OR claimed_until < ?1))",
            )?
            .query_row(params![now], |r| r.get(0))?;
        if !due {
            return Ok(Vec::new());
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let rows = {
            // The limit is in the text: a bound LIMIT makes SQLite compile
            // the statement again each time it is bound.
            let mut stmt = tx.prepare_cached(&format!(
                "SELECT o.id, o.event_id, o.url, o.format, o.kind, o.attempts, o.created_at,
                        o.task_id, t.title, e.to_state,
                        CASE WHEN e.to_state IN {ended} THEN t.reason END,
                        t.input_tokens, t.output_tokens, t.cost_usd, t.results_path, e.detail,
                        CASE WHEN e.to_state IN {ended} THEN t.delivered END
                 FROM outbox o JOIN tasks t ON t.id = o.task_id JOIN events e ON e.id = o.event_id
                 WHERE o.state = 'pending' AND o.next_at <= ?1
                   AND (o.claimed_until IS NULL OR o.claimed_until < ?1)
                   AND NOT EXISTS (SELECT 1 FROM outbox p WHERE p.task_id = o.task_id
                                   AND p.url = o.url AND p.state = 'pending' AND p.id < o.id)
                 ORDER BY o.id LIMIT {limit}",
                ended = sql_list(&TaskState::TERMINAL)
            ))?;
            stmt.query_map(params![now], |r| {
                let task: String = r.get(7)?;
                Ok(Delivery {
                    id: r.get(0)?,
                    event_id: r.get(1)?,
                    url: r.get(2)?,
                    format: r.get(3)?,
                    kind: r.get(4)?,
                    attempts: r.get(5)?,
                    created_at: r.get(6)?,
                    task_id: task.parse().expect("stored ids are UUIDs"),
                    title: r.get(8)?,
                    state: r.get(9)?,
                    reason: r.get(10)?,
                    input_tokens: r.get(11)?,
                    output_tokens: r.get(12)?,
                    cost_usd: r.get(13)?,
                    results: r.get(14)?,
                    detail: r.get(15)?,
                    delivered: r
                        .get::<_, Option<String>>(16)?
                        .and_then(|d| serde_json::from_str(&d).ok()),
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?
        };
        for d in &rows {
            tx.exec_cached(
                "UPDATE outbox SET claimed_by = ?2, claimed_until = ?3 WHERE id = ?1",
                params![d.id, owner, now + claim_ms],
            )?;
        }
        tx.commit()?;
        Ok(rows)
    }

    /// The receiver answered 2xx: never sent again.
    pub fn delivery_done(&mut self, id: i64) -> Result<()> {
        self.conn.exec_cached(
            "UPDATE outbox SET state = 'delivered', delivered_at = ?2, claimed_by = NULL,
                claimed_until = NULL, attempts = attempts + 1
             WHERE id = ?1",
            params![id, now_ms()],
        )?;
        Ok(())
    }

    /// A failed attempt: tried again at `next_at`, or given up (`dead`).
    pub fn delivery_failed(
        &mut self,
        id: i64,
        error: &str,
        next_at: i64,
        dead: bool,
    ) -> Result<()> {
        self.conn.exec_cached(
            "UPDATE outbox SET attempts = attempts + 1, last_error = ?2, next_at = ?3,
                state = CASE WHEN ?4 THEN 'dead' ELSE state END,
                claimed_by = NULL, claimed_until = NULL
             WHERE id = ?1",
            params![id, error, next_at, dead],
        )?;
        Ok(())
    }

    /// Pending deliveries (of every task): how many, and how many of them
    /// are due within `ms` from now (or being sent).
    pub fn pending_deliveries(&self, ms: i64) -> Result<(i64, i64)> {
        let now = now_ms();
        Ok(self.conn.query_row(
            "SELECT COUNT(*), COALESCE(SUM(next_at <= ?1 OR claimed_until > ?2), 0)
             FROM outbox WHERE state = 'pending'",
            params![now + ms, now],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?)
    }

    /// How a task's webhook deliveries stand.
    pub fn webhook_counts(&self, id: TaskId) -> Result<WebhookCounts> {
        let mut c = WebhookCounts::default();
        let mut stmt = self.conn.prepare_cached(
            "SELECT state, COUNT(*) FROM outbox WHERE task_id = ?1 GROUP BY state",
        )?;
        let rows = stmt.query_map(params![id.to_string()], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
        })?;
        for row in rows {
            let (state, n) = row?;
            match state.as_str() {
                "delivered" => c.delivered = n,
                "dead" => c.dead = n,
                _ => c.pending += n,
            }
        }
        Ok(c)
    }
}
