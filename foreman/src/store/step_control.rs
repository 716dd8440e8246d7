//! Step-level controls (issue 29): when a step starts (`step_start`, the
//! `step.started` webhook), a step that starts only on a person's approval
//! (`approve: true`), breakpoints before and after a step (the template's
//! `breakpoint:`, or set and cleared with `task breakpoint`), and
//! step-through (`task step`: go on until the next step ends, then pause).
//!
//! A breakpoint pauses as `task pause` does: `pause_requested` is set and
//! the servo pauses before its next LLM call (`task.paused`). "Before" a
//! step is once it has started, before any of its work; "after" is once it
//! was marked done. The servo's writes are fenced by the lease; a person's
//! (the CLI, the API) are not.

use rusqlite::{TransactionBehavior, params};
use saheeli_protocol::TaskId;
use saheeli_protocol::human::Waiting;
use saheeli_protocol::template::{Position, Step, StepHeld};

use crate::state::TaskState;

use super::desk::{DeskError, note_event, requeue_if_parked};
use super::{
    ExecCached, Lease, Result, Store, current_state, enqueue_webhooks, held_state, now_ms,
};

/// What became of a servo's `step_start`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StepStarted {
    /// Recorded: the names of the steps done so far.
    Started(Vec<String>),
    /// The step has `approve: true` and no unused approval of its
    /// `step_start` is on record (the agent's shell calling the route
    /// directly, say): refused.
    NeedsApproval,
}

/// The breakpoints that hold: a person's setting of a step and position
/// wins over the template's `breakpoint:`.
pub(crate) fn effective_breakpoints(
    declared: &[Step],
    set: &[(String, Position, bool)],
) -> Vec<(String, Position)> {
    let mut out = Vec::new();
    for step in declared {
        for pos in [Position::Before, Position::After] {
            let by_person = set
                .iter()
                .find(|(n, p, _)| *n == step.name && *p == pos)
                .map(|(_, _, on)| *on);
            if by_person.unwrap_or(step.breakpoint == Some(pos)) {
                out.push((step.name.clone(), pos));
            }
        }
    }
    out
}

/// The template's steps of task `id` (from its spec).
fn declared(tx: &rusqlite::Transaction<'_>, id: TaskId) -> Result<Vec<Step>> {
    let json: Option<String> = tx.query_row(
        "SELECT json_extract(spec, '$.steps') FROM tasks WHERE id = ?1",
        params![id.to_string()],
        |r| r.get(0),
    )?;
    Ok(json
        .and_then(|j| serde_json::from_str(&j).ok())
        .unwrap_or_default())
}

fn set_by_people(conn: &rusqlite::Connection, id: TaskId) -> Result<Vec<(String, Position, bool)>> {
    let mut stmt = conn
        .prepare_cached("SELECT name, position, active FROM step_breakpoints WHERE task_id = ?1")?;
    let rows = stmt
        .query_map(params![id.to_string()], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)? != 0,
            ))
        })?
        .filter_map(|r| r.ok())
        .filter_map(|(n, p, on)| {
            let pos = match p.as_str() {
                "before" => Position::Before,
                "after" => Position::After,
                _ => return None,
            };
            Some((n, pos, on))
        })
        .collect();
    Ok(rows)
}

fn holds(tx: &rusqlite::Transaction<'_>, id: TaskId, name: &str, pos: Position) -> Result<bool> {
    let all = effective_breakpoints(&declared(tx, id)?, &set_by_people(tx, id)?);
    Ok(all.iter().any(|(n, p)| n == name && *p == pos))
}

/// Pauses the task before its next LLM call, saying why.
fn pause_here(tx: &rusqlite::Transaction<'_>, id: TaskId, detail: &str) -> Result<()> {
    tx.exec_cached(
        "UPDATE tasks SET pause_requested = 1 WHERE id = ?1",
        params![id.to_string()],
    )?;
    note_event(tx, id, "breakpoint", Some("saheeli"), detail)?;
    Ok(())
}

/// The tools whose approval starts a gated step: `step_start`, and
/// `step_done` of a step not started yet (the call that reaches a step
/// first is its start).
const STARTS_A_STEP: [&str; 2] = ["step_start", "step_done"];

/// Takes (marks used) an approval of a call in [`STARTS_A_STEP`] for step
/// `name`.
fn take_step_approval(tx: &rusqlite::Transaction<'_>, id: TaskId, name: &str) -> Result<bool> {
    let rows: Vec<(i64, String)> = {
        let mut stmt = tx.prepare_cached(
            "SELECT id, waiting FROM asks WHERE task_id = ?1 AND decision = 'approve'
               AND used_at IS NULL AND (waiting LIKE '%\"tool\":\"step_start\"%'
                 OR waiting LIKE '%\"tool\":\"step_done\"%') ORDER BY id",
        )?;
        stmt.query_map(params![id.to_string()], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?
    };
    for (row, waiting) in rows {
        let Ok(Waiting::Approval { tool, arguments }) = serde_json::from_str(&waiting) else {
            continue;
        };
        let named = serde_json::from_str::<serde_json::Value>(&arguments)
            .ok()
            .and_then(|v| v.get("name").and_then(|n| n.as_str()).map(str::to_string));
        if STARTS_A_STEP.contains(&tool.as_str()) && named.as_deref().map(str::trim) == Some(name) {
            tx.exec_cached(
                "UPDATE asks SET used_at = ?2 WHERE id = ?1",
                params![row, now_ms()],
            )?;
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether step `name` of task `id` has started (a `step_start`, or a
/// `step_done` that reached it first).
fn has_started(tx: &rusqlite::Transaction<'_>, id: TaskId, name: &str) -> Result<bool> {
    Ok(tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM step_starts WHERE task_id = ?1 AND name = ?2)",
        params![id.to_string(), name],
        |r| r.get(0),
    )?)
}

/// Records the start of step `name` (its first: an event and the
/// `step.started` webhook); true when a breakpoint before it holds, and
/// then the task pauses before its next LLM call.
fn record_start(tx: &rusqlite::Transaction<'_>, id: TaskId, name: &str) -> Result<bool> {
    let inserted = tx.exec_cached(
        "INSERT OR IGNORE INTO step_starts (task_id, name, at) VALUES (?1, ?2, ?3)",
        params![id.to_string(), name, now_ms()],
    )?;
    if inserted == 1 {
        note_event(tx, id, "step_started", None, name)?;
        let event = tx.last_insert_rowid();
        enqueue_webhooks(tx, id, event, "step.started", now_ms())?;
    }
    // Each start of a step with a breakpoint before it stops there
    // (a step started again after a denial or a restart, too).
    let stop = holds(tx, id, name, Position::Before)?;
    if stop {
        pause_here(tx, id, &format!("breakpoint before step `{name}`"))?;
    }
    Ok(stop)
}

/// A `step_done` of step `name` (in its transaction, before anything is
/// recorded): a step that has not started starts here, its approval gate
/// and its breakpoint before applying as to a `step_start` (case N15: a
/// gated step marked done with no approval, a breakpoint never stopped
/// at). None: it has started, and may be marked done.
pub(super) fn reach_by_done(
    tx: &rusqlite::Transaction<'_>,
    id: TaskId,
    name: &str,
) -> Result<Option<StepHeld>> {
    if has_started(tx, id, name)? {
        return Ok(None);
    }
    let gated = declared(tx, id)?
        .iter()
        .any(|s| s.name == name && s.approve.required);
    if gated && !take_step_approval(tx, id, name)? {
        super::guard::count_refusal(tx, id)?;
        return Ok(Some(StepHeld::NeedsApproval));
    }
    Ok(record_start(tx, id, name)?.then_some(StepHeld::BreakpointBefore))
}

/// After a step is first marked done (in `step_done`'s transaction): a
/// breakpoint after it, or a step-through, pauses the task.
pub(super) fn after_step_done(
    tx: &rusqlite::Transaction<'_>,
    id: TaskId,
    name: &str,
) -> Result<()> {
    let through: bool = tx.query_row(
        "SELECT step_through FROM tasks WHERE id = ?1",
        params![id.to_string()],
        |r| r.get::<_, i64>(0).map(|v| v != 0),
    )?;
    if through {
        tx.exec_cached(
            "UPDATE tasks SET step_through = 0 WHERE id = ?1",
            params![id.to_string()],
        )?;
        pause_here(tx, id, &format!("step-through: step `{name}` is done"))?;
    } else if holds(tx, id, name, Position::After)? {
        pause_here(tx, id, &format!("breakpoint after step `{name}`"))?;
    }
    Ok(())
}

impl Store {
    /// The servo begins step `name` (fenced; the gateway checked that the
    /// task declares it). The first start of a step is an event and a
    /// `step.started` webhook; a breakpoint before it pauses the task.
    pub fn step_start(&mut self, id: TaskId, lease: &Lease, name: &str) -> Result<StepStarted> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        held_state(&tx, id, lease)?;
        let steps = declared(&tx, id)?;
        let gated = steps.iter().any(|s| s.name == name && s.approve.required);
        if gated && !take_step_approval(&tx, id, name)? {
            super::guard::count_refusal(&tx, id)?;
            tx.commit()?;
            return Ok(StepStarted::NeedsApproval);
        }
        record_start(&tx, id, name)?;
        let done = {
            let mut stmt =
                tx.prepare_cached("SELECT name FROM steps WHERE task_id = ?1 ORDER BY at, name")?;
            stmt.query_map(params![id.to_string()], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()?
        };
        tx.commit()?;
        Ok(StepStarted::Started(done))
    }

    /// When each step of task `id` (first) started, in that order.
    pub fn step_starts(&self, id: TaskId) -> Result<Vec<(String, i64)>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT name, at FROM step_starts WHERE task_id = ?1 ORDER BY at")?;
        let rows = stmt
            .query_map(params![id.to_string()], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// The breakpoints that hold for task `id`.
    pub fn breakpoints(&self, id: TaskId, declared: &[Step]) -> Result<Vec<(String, Position)>> {
        Ok(effective_breakpoints(
            declared,
            &set_by_people(&self.conn, id)?,
        ))
    }

    /// A person sets (`active`) or clears a breakpoint of a task that has
    /// not ended (the caller checked the step's name).
    pub fn set_breakpoint(
        &mut self,
        id: TaskId,
        name: &str,
        position: Position,
        active: bool,
        by: &str,
    ) -> std::result::Result<TaskState, DeskError> {
        let what = format!("{} step `{name}`", position.as_str());
        self.put_breakpoint(id, name, position.as_str(), active, by, &what)
    }

    /// A person's breakpoint row (`name` and `position` as stored; the
    /// task-wide `on_subtask` is name `''`) with its event, on a task that
    /// has not ended; `what` names it in the event.
    pub(super) fn put_breakpoint(
        &mut self,
        id: TaskId,
        name: &str,
        position: &str,
        active: bool,
        by: &str,
        what: &str,
    ) -> std::result::Result<TaskState, DeskError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let state = current_state(&tx, id)?;
        if state.is_terminal() {
            return Err(DeskError::Ended { id, state });
        }
        tx.exec_cached(
            "INSERT OR REPLACE INTO step_breakpoints (task_id, name, position, active, author, at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![id.to_string(), name, position, active as i64, by, now_ms()],
        )?;
        let (kind, verb) = if active {
            ("breakpoint_set", "set")
        } else {
            ("breakpoint_cleared", "cleared")
        };
        note_event(
            &tx,
            id,
            kind,
            Some(by),
            &format!("breakpoint {what} {verb}"),
        )?;
        tx.commit()?;
        Ok(state)
    }

    /// `task step`: the task goes on until the next step ends, then
    /// pauses. A paused task resumes; a running one pauses once its
    /// current step ends. Returns the state it was in.
    pub fn step_through(
        &mut self,
        id: TaskId,
        by: &str,
    ) -> std::result::Result<TaskState, DeskError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let state = current_state(&tx, id)?;
        if state.is_terminal() {
            return Err(DeskError::Ended { id, state });
        }
        if matches!(state, TaskState::WaitingHuman | TaskState::Blocked) {
            return Err(DeskError::NothingToStep { id, state });
        }
        tx.exec_cached(
            "UPDATE tasks SET step_through = 1, pause_requested = 0 WHERE id = ?1",
            params![id.to_string()],
        )?;
        note_event(
            &tx,
            id,
            "step_through",
            Some(by),
            "go on until the next step ends, then pause",
        )?;
        requeue_if_parked(&tx, id, state, "stepped")?;
        tx.commit()?;
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(name: &str, bp: Option<Position>) -> Step {
        Step {
            name: name.into(),
            breakpoint: bp,
            ..Step::default()
        }
    }

    #[test]
    fn a_persons_setting_wins_over_the_templates() {
        use Position::*;
        let declared = [
            step("a", Some(Before)),
            step("b", Some(After)),
            step("c", None),
        ];
        type Set = [(String, Position, bool)];
        let cases: &[(&Set, &[(&str, Position)])] = &[
            (&[], &[("a", Before), ("b", After)]),
            (&[("a".into(), Before, false)], &[("b", After)]),
            (
                &[("c".into(), After, true), ("a".into(), After, true)],
                &[("a", Before), ("a", After), ("b", After), ("c", After)],
            ),
            // A setting for a step the template does not declare is moot.
            (
                &[("zz".into(), Before, true)],
                &[("a", Before), ("b", After)],
            ),
        ];
        for (set, want) in cases {
            let got = effective_breakpoints(&declared, set);
            let want: Vec<(String, Position)> =
                want.iter().map(|(n, p)| (n.to_string(), *p)).collect();
            assert_eq!(got, want, "{set:?}");
        }
    }
}
