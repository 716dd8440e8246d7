//! What a task's gateway may write on requests from its container (issue
//! 23). The container is not trusted (a compromised servo, or an agent
//! that reaches the socket), so every row such a request causes is
//! charged against per-task caps kept in the task's row (they hold across
//! foremen and restarts); past a cap the request is refused and counted
//! (`gateway_refused`), and one event says the cap was reached. Also here:
//! an approved capability call runs once per approval (`use_approval`).

use rusqlite::{OptionalExtension, params};
use saheeli_protocol::TaskId;
use saheeli_protocol::human::Waiting;

use super::desk::note_event;
use super::{ExecCached, Lease, Result, Store, StoreError, held_state, now_ms};

/// Most event rows a task's gateway writes on its container's requests.
/// Why this many: an honest servo writes one per question, template step
/// or breakpoint, a few dozen in a long task; a flood (case 19 wrote
/// 2,458 in 7 s) stops here instead of growing the database and every
/// view of the task.
pub(crate) const MAX_GATEWAY_EVENTS: i64 = 1000;

/// Most bytes of text (questions, plans, gated arguments, evidence) a
/// task's gateway stores for its container. Why: each text is capped at
/// 64 KiB already, but not their number; 16 MiB is far above a real
/// task's desk and far below the 567 MB a flood reached.
pub(crate) const MAX_GATEWAY_BYTES: i64 = 16 << 20;

/// Refused capability calls recorded one by one (an event row and a WARN
/// line each); later ones are only counted in `gateway_refused`. Why: the
/// first few show a human what the agent tried; 2,000 more add nothing
/// but rows and log lines (case 21).
pub(crate) const LOGGED_REFUSALS: i64 = 5;

/// The event kind written once, when a task's gateway caps are reached.
const CAP_EVENT: &str = "gateway_cap";

/// Charges one row of `bytes` to the task's gateway budget; false (and
/// nothing charged) when it would go past a cap.
pub(super) fn charge(tx: &rusqlite::Transaction<'_>, id: TaskId, bytes: usize) -> Result<bool> {
    let n = tx.exec_cached(
        "UPDATE tasks SET gateway_events = gateway_events + 1, gateway_bytes = gateway_bytes + ?2
         WHERE id = ?1 AND gateway_events < ?3 AND gateway_bytes + ?2 <= ?4",
        params![
            id.to_string(),
            bytes as i64,
            MAX_GATEWAY_EVENTS,
            MAX_GATEWAY_BYTES
        ],
    )?;
    Ok(n == 1)
}

/// Counts one refused request of the task's container.
pub(super) fn count_refusal(tx: &rusqlite::Transaction<'_>, id: TaskId) -> Result<i64> {
    Ok(tx.query_row(
        "UPDATE tasks SET gateway_refused = gateway_refused + 1 WHERE id = ?1
         RETURNING gateway_refused",
        params![id.to_string()],
        |r| r.get(0),
    )?)
}

/// A request refused at the caps: counted, and the first time an event
/// says so. Returns the error to give once the transaction is committed.
pub(super) fn capped(tx: &rusqlite::Transaction<'_>, id: TaskId) -> Result<StoreError> {
    count_refusal(tx, id)?;
    let said: bool = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM events WHERE task_id = ?1 AND kind = ?2)",
        params![id.to_string(), CAP_EVENT],
        |r| r.get(0),
    )?;
    if !said {
        note_event(
            tx,
            id,
            CAP_EVENT,
            Some("saheeli"),
            &format!(
                "the task's gateway stored {MAX_GATEWAY_EVENTS} events or {MAX_GATEWAY_BYTES} bytes \
                 for its container; later requests that would store more are refused and counted \
                 (`gateway_refused` in `task status --json`)"
            ),
        )?;
    }
    Ok(StoreError::GatewayCap(id))
}

impl Store {
    /// A capability call the gateway refused (not granted, or gated
    /// without an approval): counted; the first [`LOGGED_REFUSALS`] (within
    /// the caps) also recorded as an event. Returns whether it was recorded
    /// (the caller logs it then, and only then).
    pub fn refuse_capability(&mut self, id: TaskId, kind: &str, detail: &str) -> Result<bool> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        count_refusal(&tx, id)?;
        let logged: i64 = tx.query_row(
            "SELECT COUNT(*) FROM events WHERE task_id = ?1 AND kind = ?2",
            params![id.to_string(), kind],
            |r| r.get(0),
        )?;
        let recorded = logged < LOGGED_REFUSALS && charge(&tx, id, detail.len())?;
        if recorded {
            note_event(&tx, id, kind, Some("saheeli"), detail)?;
        }
        tx.commit()?;
        Ok(recorded)
    }

    /// Takes a human's approval of exactly this call (tool and arguments,
    /// as the servo asked): true when there was one not yet used; it is
    /// used now, so one approval runs one call (fenced by the lease).
    pub fn use_approval(
        &mut self,
        id: TaskId,
        lease: &Lease,
        tool: &str,
        arguments: &str,
    ) -> Result<bool> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        held_state(&tx, id, lease)?;
        // Compared as the desk stored the ask: the same serialization of
        // the same fields (the caller caps them as the desk did).
        let waiting = serde_json::to_string(&Waiting::Approval {
            tool: tool.to_string(),
            arguments: arguments.to_string(),
        })
        .expect("serializes");
        let row: Option<i64> = tx
            .query_row(
                "SELECT id FROM asks WHERE task_id = ?1 AND waiting = ?2 AND decision = 'approve'
                   AND used_at IS NULL ORDER BY id LIMIT 1",
                params![id.to_string(), waiting],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(row) = row {
            tx.exec_cached(
                "UPDATE asks SET used_at = ?2 WHERE id = ?1",
                params![row, now_ms()],
            )?;
        }
        tx.commit()?;
        Ok(row.is_some())
    }
}
