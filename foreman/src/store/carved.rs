//! What a parent's children hold of its budget (issue 30; case N18 of
//! issue 47): each child's whole chain of attempts, its retries by policy
//! and by hand, counted against the budget carved for it.

use rusqlite::params;
use saheeli_protocol::TaskId;

use crate::state::TaskState;
use crate::task::TaskSpec;

use super::Result;
use super::carve::Carved;

/// What `parent`'s children hold of its budget (see [`Carved`]), each
/// child's whole chain of attempts counted (case N18: a child counted at
/// its first spec while its retries spent three times that). An ended
/// chain holds what it used; one still running what its ended attempts
/// used plus all its running attempt may spend.
pub(super) fn carved(tx: &rusqlite::Transaction<'_>, parent: TaskId) -> Result<Carved> {
    let mut stmt = tx.prepare_cached(
        "WITH RECURSIVE chain(child, id) AS (
            SELECT child_id, child_id FROM children WHERE parent_id = ?1
            UNION ALL
            SELECT chain.child, t.id FROM tasks t JOIN chain ON t.retry_of = chain.id
         )
         SELECT chain.child, t.state, t.spec, t.input_tokens + t.output_tokens, t.cost_usd
         FROM chain JOIN tasks t ON t.id = chain.id ORDER BY chain.child",
    )?;
    let rows = stmt.query_map(params![parent.to_string()], |r| {
        Ok(Attempt {
            child: r.get(0)?,
            state: r.get(1)?,
            spec: r.get(2)?,
            used: r.get(3)?,
            cost: r.get(4)?,
        })
    })?;
    let mut by_child: Vec<Vec<Attempt>> = Vec::new();
    for row in rows {
        let a = row?;
        match by_child.last_mut() {
            Some(chain) if chain[0].child == a.child => chain.push(a),
            _ => by_child.push(vec![a]),
        }
    }
    let mut c = Carved::default();
    for chain in &by_child {
        let (tokens, cost) = held_by(chain);
        c.children += 1;
        c.tokens += tokens;
        c.cost += cost;
    }
    Ok(c)
}

/// What every attempt of the chain `id` belongs to used, when that chain
/// is a child's (its first attempt is in `children`); None otherwise. A
/// child's retry by hand goes on from it: the parent's carve covers the
/// whole chain (N18).
pub(super) fn child_chain_used(
    tx: &rusqlite::Transaction<'_>,
    id: TaskId,
) -> Result<Option<crate::task::Used>> {
    let first: String = tx.query_row(
        "WITH RECURSIVE up(id, before) AS (
            SELECT id, retry_of FROM tasks WHERE id = ?1
            UNION ALL
            SELECT t.id, t.retry_of FROM tasks t JOIN up ON t.id = up.before
         )
         SELECT id FROM up WHERE before IS NULL",
        params![id.to_string()],
        |r| r.get(0),
    )?;
    let is_child: bool = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM children WHERE child_id = ?1)",
        params![first],
        |r| r.get(0),
    )?;
    if !is_child {
        return Ok(None);
    }
    let (tokens, cost): (i64, f64) = tx.query_row(
        "WITH RECURSIVE chain(id) AS (
            SELECT ?1
            UNION ALL
            SELECT t.id FROM tasks t JOIN chain ON t.retry_of = chain.id
         )
         SELECT COALESCE(SUM(t.input_tokens + t.output_tokens), 0), COALESCE(SUM(t.cost_usd), 0.0)
         FROM chain JOIN tasks t ON t.id = chain.id",
        params![first],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok(Some(crate::task::Used {
        steps: 0,
        tokens: tokens.max(0) as u64,
        cost: cost.max(0.0),
    }))
}

/// One attempt of a child, as [`carved`] reads it.
struct Attempt {
    child: String,
    state: String,
    spec: String,
    used: i64,
    cost: f64,
}

/// What one child's chain of attempts holds of its parent's budget.
fn held_by(chain: &[Attempt]) -> (u64, f64) {
    let mut tokens = 0u64;
    let mut cost = 0.0;
    for a in chain {
        let ended = a.state.parse::<TaskState>().is_ok_and(|s| s.is_terminal());
        if ended {
            tokens += a.used.max(0) as u64;
            cost += a.cost;
            continue;
        }
        // Running (or queued): all this attempt may spend.
        let spec: Option<TaskSpec> = serde_json::from_str(&a.spec).ok();
        let left = spec.as_ref().map(|s| s.left());
        tokens += left.and_then(|l| l.tokens).unwrap_or(0);
        cost += left.and_then(|l| l.cost).unwrap_or(0.0);
    }
    (tokens, cost)
}
