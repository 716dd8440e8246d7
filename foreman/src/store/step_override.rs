//! A person marks a template step done or skipped (`task step-override`),
//! with a reason, recorded with who and when (as `task override` records
//! an outcome). The model is told before its next LLM call (a message, as
//! `task inject` sends one); a `blocked` task is unblocked with it. A step
//! marked done this way is a done row too, its evidence saying who and why.

use rusqlite::{TransactionBehavior, params};
use saheeli_protocol::TaskId;

use crate::state::TaskState;

use super::desk::{DeskError, note_event};
use super::{ExecCached, Result, Store, current_state, now_ms};

/// One step a person overrode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StepOverride {
    pub name: String,
    /// `done` or `skipped`.
    pub state: String,
    pub reason: String,
    pub by: String,
    pub at: i64,
}

/// What the model reads of an override.
pub(crate) fn told(name: &str, state: &str, reason: &str) -> String {
    match state {
        "skipped" => format!(
            "I marked step `{name}` skipped: {reason}. Do not do it; go on with the next step."
        ),
        _ => format!("I marked step `{name}` done: {reason}. Go on with the next step."),
    }
}

impl Store {
    /// Marks step `name` (the caller checked it is declared) `done` or
    /// `skipped` on a task that has not ended.
    pub fn step_override(
        &mut self,
        id: TaskId,
        name: &str,
        state: &str,
        reason: &str,
        by: &str,
    ) -> std::result::Result<TaskState, DeskError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let task = current_state(&tx, id)?;
        if task.is_terminal() {
            return Err(DeskError::Ended { id, state: task });
        }
        let now = now_ms();
        tx.exec_cached(
            "INSERT OR REPLACE INTO step_overrides (task_id, name, state, reason, author, at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![id.to_string(), name, state, reason, by, now],
        )?;
        if state == "done" {
            tx.exec_cached(
                "INSERT OR REPLACE INTO steps (task_id, name, evidence, at) VALUES (?1, ?2, ?3, ?4)",
                params![
                    id.to_string(),
                    name,
                    format!("marked done by {by}: {reason}"),
                    now
                ],
            )?;
        }
        note_event(
            &tx,
            id,
            "step_override",
            Some(by),
            &format!("step `{name}` {state}: {reason}"),
        )?;
        let text = told(name, state, reason);
        if !super::blocked::unblock(&tx, id, task, &text, by)? {
            tx.exec_cached(
                "INSERT INTO notes (task_id, text, author, at) VALUES (?1, ?2, ?3, ?4)",
                params![id.to_string(), text, by, now],
            )?;
        }
        tx.commit()?;
        Ok(task)
    }

    /// The steps of task `id` a person overrode.
    pub fn step_overrides(&self, id: TaskId) -> Result<Vec<StepOverride>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT name, state, reason, author, at FROM step_overrides WHERE task_id = ?1
             ORDER BY at",
        )?;
        let rows = stmt
            .query_map(params![id.to_string()], |r| {
                Ok(StepOverride {
                    name: r.get(0)?,
                    state: r.get(1)?,
                    reason: r.get(2)?,
                    by: r.get(3)?,
                    at: r.get(4)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::spec;
    use super::*;
    use crate::store::step_status_with;
    use saheeli_protocol::template::Step;

    #[test]
    fn an_override_is_recorded_told_and_shown() {
        let d = tempfile::tempdir().unwrap();
        let mut s = Store::open(&d.path().join("q.db")).unwrap();
        let id = TaskId::new();
        let mut sp = spec("t");
        sp.steps = ["a", "b", "c"]
            .iter()
            .map(|n| Step {
                name: n.to_string(),
                ..Step::default()
            })
            .collect();
        s.submit(id, &sp, 0, None, 1).unwrap();
        s.step_override(id, "a", "skipped", "not needed here", "ann")
            .unwrap();
        s.step_override(id, "b", "done", "done by hand", "bob")
            .unwrap();
        let o = s.step_overrides(id).unwrap();
        assert_eq!(
            o.iter()
                .map(|o| (o.name.as_str(), o.state.as_str(), o.by.as_str()))
                .collect::<Vec<_>>(),
            [("a", "skipped", "ann"), ("b", "done", "bob")]
        );
        let st = step_status_with(&sp.steps, &s.steps_done(id).unwrap(), &o);
        let states: Vec<&str> = st.iter().map(|s| s.state.as_str()).collect();
        assert_eq!(states, ["skipped", "completed", "in_progress"]);
        assert_eq!(
            st[1].done.as_ref().unwrap().evidence,
            "marked done by bob: done by hand"
        );
        let notes: i64 = s
            .conn
            .query_row(
                "SELECT count(*) FROM notes WHERE task_id = ?1",
                params![id.to_string()],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(notes, 2, "each is told to the model");
    }
}
