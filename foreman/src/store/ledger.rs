//! The per-call ledger's SQL (`llm_calls`, and a task's `rate_wait_until`).
//! Each function runs inside the caller's write transaction: the gateway's
//! `Ledger` keeps a connection of its own (`BEGIN IMMEDIATE`, its pragmas)
//! and calls these from blocking threads only.

use rusqlite::{Transaction, params};
use saheeli_protocol::TaskId;
use saheeli_protocol::chat::ChatUsage;

use super::{ExecCached, now_ms};

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

/// Records a call about to be forwarded, with what it may cost at most.
pub(crate) fn reserve(
    tx: &Transaction<'_>,
    task: TaskId,
    call: &str,
    tokens: u64,
    cost_usd: f64,
) -> rusqlite::Result<()> {
    tx.exec_cached(
        "INSERT INTO llm_calls (call_id, task_id, state, reserved_tokens, reserved_cost, started_at)
         VALUES (?1, ?2, 'in_flight', ?3, ?4, ?5)",
        params![call, task.to_string(), tokens as i64, cost_usd, now_ms()],
    )?;
    Ok(())
}

/// Records what the call really cost (zero when nothing was billed).
pub(crate) fn settle(
    tx: &Transaction<'_>,
    call: &str,
    usage: &ChatUsage,
    cost_usd: f64,
) -> rusqlite::Result<()> {
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
}

/// Until when a call of `task` waits for its turn in the provider's rate
/// limit (None: no longer), for `task status`.
pub(crate) fn rate_wait(
    tx: &Transaction<'_>,
    task: TaskId,
    until_ms: Option<i64>,
) -> rusqlite::Result<()> {
    tx.exec_cached(
        "UPDATE tasks SET rate_wait_until = ?2 WHERE id = ?1",
        params![task.to_string(), until_ms],
    )?;
    Ok(())
}

/// Settles a call cut off before its answer at its reservation, counted
/// as input.
pub(crate) fn settle_cut(tx: &Transaction<'_>, call: &str) -> rusqlite::Result<()> {
    tx.exec_cached(
        "UPDATE llm_calls SET state = 'settled', input_tokens = reserved_tokens,
                output_tokens = 0, cost_usd = reserved_cost, settled_at = ?2
         WHERE call_id = ?1 AND state = 'in_flight'",
        params![call, now_ms()],
    )?;
    Ok(())
}

/// Settles every call of `task` still in flight at its reservation;
/// returns how many there were.
pub(crate) fn settle_all_cut(tx: &Transaction<'_>, task: TaskId) -> rusqlite::Result<usize> {
    tx.exec_cached(
        "UPDATE llm_calls SET state = 'settled', input_tokens = reserved_tokens,
                output_tokens = 0, cost_usd = reserved_cost, settled_at = ?2
         WHERE task_id = ?1 AND state = 'in_flight'",
        params![task.to_string(), now_ms()],
    )
}

/// Calls left in flight become `lost` (counted once, at their
/// reservation), and the task's total spend is returned. None when the
/// ledger knows no call of the task.
pub(crate) fn adopt(tx: &Transaction<'_>, task: TaskId) -> rusqlite::Result<Option<Spent>> {
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
    // A lost call's reservation is counted as input: which part of it the
    // provider billed as output is unknown.
    Ok(Some(Spent {
        calls: calls as u64,
        input_tokens: (input + reserved) as u64,
        output_tokens: output as u64,
        cost_usd: cost + reserved_cost,
        lost: lost as u64,
        cache_read_tokens: read as u64,
        cache_write_tokens: write as u64,
    }))
}
