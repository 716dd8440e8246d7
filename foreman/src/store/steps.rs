//! A template's steps marked done (`step_done`): one row per step, written
//! by the gateway of the foreman holding the task (fenced by its lease),
//! read by `task status` and the report while the task runs and after.

use rusqlite::{TransactionBehavior, params};
use saheeli_protocol::TaskId;
use saheeli_protocol::template::{Step, StepHeld};

use super::desk::note_event;
use super::{ExecCached, Lease, Result, Store, held_state, now_ms};

/// A step marked done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StepRow {
    pub name: String,
    pub evidence: String,
    pub at: i64,
}

/// Where a step stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StepState {
    Completed,
    /// The first step not done.
    InProgress,
    Pending,
    /// A person skipped it (`task step-override --state skipped`).
    Skipped,
}

impl StepState {
    pub fn as_str(self) -> &'static str {
        match self {
            StepState::Completed => "completed",
            StepState::InProgress => "in_progress",
            StepState::Pending => "pending",
            StepState::Skipped => "skipped",
        }
    }

    /// 003's dashboard marks: ✓ completed, ◐ in progress, ○ pending.
    pub fn mark(self) -> char {
        match self {
            StepState::Completed => '✓',
            StepState::InProgress => '◐',
            StepState::Pending => '○',
            StepState::Skipped => '⊘',
        }
    }
}

/// A declared step with where it stands (its row once done).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct StepStatus {
    pub step: Step,
    pub state: StepState,
    pub done: Option<StepRow>,
    /// A person marked it done or skipped.
    pub overridden: Option<super::StepOverride>,
}

/// [`step_status_with`] without overrides.
#[cfg(test)]
pub(crate) fn step_status(declared: &[Step], rows: &[StepRow]) -> Vec<StepStatus> {
    step_status_with(declared, rows, &[])
}

/// Each of `declared` with its state: skipped when a person skipped it
/// (`task step-override`), done when a row names it; the first one neither
/// is in progress, the rest pending.
pub(crate) fn step_status_with(
    declared: &[Step],
    rows: &[StepRow],
    overrides: &[super::StepOverride],
) -> Vec<StepStatus> {
    let mut seen_open = false;
    declared
        .iter()
        .map(|step| {
            let done = rows.iter().find(|r| r.name == step.name).cloned();
            let overridden = overrides.iter().find(|o| o.name == step.name).cloned();
            let skipped = overridden.as_ref().is_some_and(|o| o.state == "skipped");
            let state = match (&done, seen_open) {
                _ if skipped => StepState::Skipped,
                (Some(_), _) => StepState::Completed,
                (None, false) => {
                    seen_open = true;
                    StepState::InProgress
                }
                (None, true) => StepState::Pending,
            };
            StepStatus {
                step: step.clone(),
                state,
                done,
                overridden,
            }
        })
        .collect()
}

/// What became of a `step_done`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StepMarked {
    /// Recorded: the names of every step done so far.
    Done(Vec<String>),
    /// Not recorded: the step had not started, and its start stops there
    /// first (its approval gate, its breakpoint before).
    Held(StepHeld),
}

impl Store {
    /// A `step_done` of step `name` reaches it (fenced): a step not
    /// started starts now, as a `step_start` would start it; Some when
    /// that start stops there (an approval not given, a breakpoint
    /// before). The gateway asks before it runs a checked step's command.
    pub fn reach_step(
        &mut self,
        id: TaskId,
        lease: &Lease,
        name: &str,
    ) -> Result<Option<StepHeld>> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        held_state(&tx, id, lease)?;
        let held = super::step_control::reach_by_done(&tx, id, name)?;
        tx.commit()?;
        Ok(held)
    }

    /// Marks step `name` of task `id` done (fenced: only the holder's
    /// gateway), once it has started ([`Store::reach_step`]; a gated step
    /// never without its approval used). Marking it again replaces its
    /// evidence (the row, capped by the gateway) but writes no second
    /// event and sends no second `step.done` webhook (case 20: 300 posts
    /// were 300 webhooks).
    pub fn step_done(
        &mut self,
        id: TaskId,
        lease: &Lease,
        name: &str,
        evidence: &str,
    ) -> Result<StepMarked> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        held_state(&tx, id, lease)?;
        if let Some(held) = super::step_control::reach_by_done(&tx, id, name)? {
            tx.commit()?;
            return Ok(StepMarked::Held(held));
        }
        let known: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM steps WHERE task_id = ?1 AND name = ?2)",
            params![id.to_string(), name],
            |r| r.get(0),
        )?;
        if !known {
            if !super::guard::charge(&tx, id, evidence.len())? {
                let e = super::guard::capped(&tx, id)?;
                tx.commit()?;
                return Err(e);
            }
            tx.exec_cached(
                "INSERT INTO steps (task_id, name, evidence, at) VALUES (?1, ?2, ?3, ?4)",
                params![id.to_string(), name, evidence, now_ms()],
            )?;
            let summary: String = evidence.chars().take(200).collect();
            note_event(&tx, id, "step_done", None, &format!("{name}: {summary}"))?;
            super::step_control::after_step_done(&tx, id, name)?;
        } else {
            tx.exec_cached(
                "UPDATE steps SET evidence = ?3, at = ?4 WHERE task_id = ?1 AND name = ?2",
                params![id.to_string(), name, evidence, now_ms()],
            )?;
        }
        let done = {
            let mut stmt =
                tx.prepare_cached("SELECT name FROM steps WHERE task_id = ?1 ORDER BY at, name")?;
            stmt.query_map(params![id.to_string()], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()?
        };
        tx.commit()?;
        Ok(StepMarked::Done(done))
    }

    /// How many step checks (`done_when: { verify }`) task `id` has run:
    /// each left one `step_check` event.
    pub fn step_checks_run(&self, id: TaskId) -> Result<u32> {
        Ok(self.conn.query_row(
            "SELECT COUNT(*) FROM events WHERE task_id = ?1 AND kind = 'step_check'",
            params![id.to_string()],
            |r| r.get(0),
        )?)
    }

    /// How many times step `name`'s check ran in task `id` (its
    /// `step_check` events, whose detail starts with the step's name).
    pub fn step_checks_of(&self, id: TaskId, name: &str) -> Result<u32> {
        let prefix = format!("step `{name}`:");
        Ok(self.conn.query_row(
            "SELECT COUNT(*) FROM events WHERE task_id = ?1 AND kind = 'step_check'
               AND substr(detail, 1, length(?2)) = ?2",
            params![id.to_string(), prefix],
            |r| r.get(0),
        )?)
    }

    /// Records that a checked step's command ran (`detail`: the step, the
    /// command and how it ended), fenced by the lease.
    pub fn record_step_check(&mut self, id: TaskId, lease: &Lease, detail: &str) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        held_state(&tx, id, lease)?;
        note_event(&tx, id, "step_check", Some("saheeli"), detail)?;
        tx.commit()?;
        Ok(())
    }

    /// The steps task `id` marked done, in the order they were (last) marked.
    pub fn steps_done(&self, id: TaskId) -> Result<Vec<StepRow>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT name, evidence, at FROM steps WHERE task_id = ?1 ORDER BY at, name",
        )?;
        let rows = stmt
            .query_map(params![id.to_string()], |r| {
                Ok(StepRow {
                    name: r.get(0)?,
                    evidence: r.get(1)?,
                    at: r.get(2)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }
}

impl super::Store {
    /// The input and output tokens of task `id`'s last answered LLM call
    /// (what its next call sends at least: the conversation so far).
    pub fn last_call_tokens(
        &self,
        id: saheeli_protocol::TaskId,
    ) -> super::Result<Option<(i64, i64)>> {
        use rusqlite::OptionalExtension;
        Ok(self
            .conn
            .prepare_cached(
                "SELECT input_tokens, output_tokens FROM llm_calls
                 WHERE task_id = ?1 AND state = 'settled'
                 ORDER BY started_at DESC, rowid DESC LIMIT 1",
            )?
            .query_row([id.to_string()], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(name: &str) -> Step {
        Step {
            name: name.into(),
            description: String::new(),
            done_when: None,
            ..Step::default()
        }
    }

    fn row(name: &str) -> StepRow {
        StepRow {
            name: name.into(),
            evidence: "e".into(),
            at: 1,
        }
    }

    #[test]
    fn the_first_step_not_done_is_in_progress() {
        let declared = [step("a"), step("b"), step("c"), step("d")];
        let states: Vec<StepState> = step_status(&declared, &[row("a"), row("c")])
            .iter()
            .map(|s| s.state)
            .collect();
        assert_eq!(
            states,
            [
                StepState::Completed,
                StepState::InProgress,
                StepState::Completed,
                StepState::Pending
            ]
        );
        let all: Vec<char> = step_status(&declared, &[])
            .iter()
            .map(|s| s.state.mark())
            .collect();
        assert_eq!(all, ['◐', '○', '○', '○']);
    }
}
