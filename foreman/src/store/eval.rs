//! Evaluation runs (`saheeli eval`): one row per run of a suite, and the
//! link from each of its tasks to the case and repeat it runs. A case's
//! task and its link are written in one transaction: after a crash a
//! case either has its task or has nothing, never a task nobody knows of.

use rusqlite::{OptionalExtension, TransactionBehavior, params};
use saheeli_protocol::TaskId;

use super::{ExecCached, Result, Store, StoreError, insert_task, now_ms};
use crate::state::TaskState;
use crate::task::TaskSpec;

/// One row of `eval_runs`.
#[derive(Clone, Debug)]
pub(crate) struct EvalRunRow {
    pub id: String,
    pub suite_name: String,
    pub suite_path: String,
    /// SHA-256 of the suite file's bytes when the run started.
    pub suite_digest: String,
    /// The command line's options, as JSON (`eval::RunOptions`).
    pub options: String,
    pub report_dir: String,
    pub started_at: i64,
    pub ended_at: Option<i64>,
    /// `running`, `passed` or `failed` (against the suite's threshold).
    pub state: String,
    /// Until when the `saheeli eval` process running it promised to be alive.
    pub alive_until: Option<i64>,
    pub pass_rate: Option<f64>,
}

impl EvalRunRow {
    /// The state a person sees: a run whose process stopped beating
    /// before it ended is `interrupted` (resume it with `--resume`).
    pub fn shown_state(&self, now: i64) -> &str {
        if self.state == "running" && self.alive_until.is_none_or(|t| t < now) {
            "interrupted"
        } else {
            &self.state
        }
    }
}

/// A case and repeat of a run, and its (first) task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EvalLink {
    pub case_id: String,
    pub repeat: u32,
    pub task_id: TaskId,
}

const RUN_COLUMNS: &str = "id, suite_name, suite_path, suite_digest, options, report_dir, \
    started_at, ended_at, state, alive_until, pass_rate";

fn read_run(r: &rusqlite::Row<'_>) -> rusqlite::Result<EvalRunRow> {
    Ok(EvalRunRow {
        id: r.get(0)?,
        suite_name: r.get(1)?,
        suite_path: r.get(2)?,
        suite_digest: r.get(3)?,
        options: r.get(4)?,
        report_dir: r.get(5)?,
        started_at: r.get(6)?,
        ended_at: r.get(7)?,
        state: r.get(8)?,
        alive_until: r.get(9)?,
        pass_rate: r.get(10)?,
    })
}

impl Store {
    /// Records a new run (state `running`).
    pub fn create_eval_run(&mut self, run: &EvalRunRow) -> Result<()> {
        self.conn.exec_cached(
            &format!("INSERT INTO eval_runs ({RUN_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"),
            params![
                run.id,
                run.suite_name,
                run.suite_path,
                run.suite_digest,
                run.options,
                run.report_dir,
                run.started_at,
                run.ended_at,
                run.state,
                run.alive_until,
                run.pass_rate
            ],
        )?;
        Ok(())
    }

    /// Queues the task of case `case_id`, repeat `repeat`, of run
    /// `run_id`, and links it, in one transaction. Refused (nothing
    /// written) when that case and repeat already has a task.
    pub fn submit_eval_task(
        &mut self,
        id: TaskId,
        spec: &TaskSpec,
        run_id: &str,
        case_id: &str,
        repeat: u32,
    ) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        insert_task(&tx, id, spec, 0, None, 1)?;
        tx.exec_cached(
            "INSERT INTO eval_tasks (run_id, case_id, repeat, task_id) VALUES (?1, ?2, ?3, ?4)",
            params![run_id, case_id, repeat, id.to_string()],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Every case task of a run, by case and repeat.
    pub fn eval_links(&self, run_id: &str) -> Result<Vec<EvalLink>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT case_id, repeat, task_id FROM eval_tasks WHERE run_id = ?1
             ORDER BY case_id, repeat",
        )?;
        let rows = stmt.query_map(params![run_id], |r| {
            let id: String = r.get(2)?;
            Ok(EvalLink {
                case_id: r.get(0)?,
                repeat: r.get(1)?,
                task_id: id.parse().expect("stored ids are UUIDs"),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The run `query` names: its id or a unique prefix of it.
    pub fn eval_run(&self, query: &str) -> Result<Option<EvalRunRow>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {RUN_COLUMNS} FROM eval_runs WHERE id >= ?1 AND id < ?1 || x'ff' LIMIT 2"
        ))?;
        let mut rows: Vec<EvalRunRow> = stmt
            .query_map(params![query], read_run)?
            .collect::<rusqlite::Result<_>>()?;
        match rows.len() {
            1 => Ok(rows.pop()),
            0 => Ok(None),
            _ => Err(StoreError::Ambiguous {
                query: query.to_string(),
                matches: rows.into_iter().map(|r| r.id).collect(),
            }),
        }
    }

    /// Every run, newest first.
    pub fn eval_runs(&self) -> Result<Vec<EvalRunRow>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {RUN_COLUMNS} FROM eval_runs ORDER BY started_at DESC, id DESC"
        ))?;
        Ok(stmt
            .query_map([], read_run)?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// Takes a run for this process until `until` (ms): refused (false)
    /// when another live process holds it. Sets the state to `running`.
    pub fn hold_eval_run(&mut self, run_id: &str, now: i64, until: i64) -> Result<bool> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let alive: Option<Option<i64>> = tx
            .query_row(
                "SELECT alive_until FROM eval_runs WHERE id = ?1 AND state = 'running'",
                params![run_id],
                |r| r.get(0),
            )
            .optional()?;
        if alive.flatten().is_some_and(|t| t >= now) {
            return Ok(false);
        }
        tx.exec_cached(
            "UPDATE eval_runs SET state = 'running', ended_at = NULL, alive_until = ?2 WHERE id = ?1",
            params![run_id, until],
        )?;
        tx.commit()?;
        Ok(true)
    }

    /// Renews the heartbeat of a run this process holds.
    pub fn beat_eval_run(&mut self, run_id: &str, until: i64) -> Result<()> {
        self.conn.exec_cached(
            "UPDATE eval_runs SET alive_until = ?2 WHERE id = ?1 AND state = 'running'",
            params![run_id, until],
        )?;
        Ok(())
    }

    /// Gives a run up without ending it (the process is stopping early).
    pub fn release_eval_run(&mut self, run_id: &str) -> Result<()> {
        self.conn.exec_cached(
            "UPDATE eval_runs SET alive_until = NULL WHERE id = ?1",
            params![run_id],
        )?;
        Ok(())
    }

    /// A task's state changes, `(at, to)` in order (not its other events):
    /// what an eval report splits into set-up, agent and verify time.
    pub fn state_changes(&self, id: TaskId) -> Result<Vec<(i64, TaskState)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT at, to_state FROM events WHERE task_id = ?1 AND kind IS NULL ORDER BY id",
        )?;
        let rows = stmt.query_map(params![id.to_string()], |r| {
            let to: String = r.get(1)?;
            Ok((r.get(0)?, to))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (at, to) = row?;
            if let Ok(to) = to.parse::<TaskState>() {
                out.push((at, to));
            }
        }
        Ok(out)
    }

    /// Records a run's end: `passed` or `failed`, and its pass rate.
    pub fn end_eval_run(&mut self, run_id: &str, state: &str, pass_rate: f64) -> Result<()> {
        self.conn.exec_cached(
            "UPDATE eval_runs SET state = ?2, pass_rate = ?3, ended_at = ?4, alive_until = NULL
             WHERE id = ?1",
            params![run_id, state, pass_rate, now_ms()],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str) -> EvalRunRow {
        EvalRunRow {
            id: id.into(),
            suite_name: "s".into(),
            suite_path: "s.yaml".into(),
            suite_digest: "d".into(),
            options: "{}".into(),
            report_dir: "results/eval-x".into(),
            started_at: 1,
            ended_at: None,
            state: "running".into(),
            alive_until: None,
            pass_rate: None,
        }
    }

    #[test]
    fn a_case_and_repeat_gets_one_task_and_a_run_one_holder() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("db")).unwrap();
        s.create_eval_run(&run("0001")).unwrap();
        let spec = crate::store::tests::spec("t");
        let a = TaskId::new();
        s.submit_eval_task(a, &spec, "0001", "calc", 1).unwrap();
        let again = s.submit_eval_task(TaskId::new(), &spec, "0001", "calc", 1);
        assert!(again.is_err(), "a second task for the same case and repeat");
        // Nothing of the refused submit was kept.
        assert_eq!(s.count_in(&[crate::state::TaskState::Queued]).unwrap(), 1);
        assert_eq!(
            s.eval_links("0001").unwrap(),
            vec![EvalLink {
                case_id: "calc".into(),
                repeat: 1,
                task_id: a
            }]
        );
        // Its state changes, in order, for the report's phases.
        let lease = crate::store::Lease {
            owner: "test".into(),
            ms: 10_000,
        };
        s.claim_next(None, &lease).unwrap().unwrap();
        let changes: Vec<TaskState> = s
            .state_changes(a)
            .unwrap()
            .into_iter()
            .map(|(_, to)| to)
            .collect();
        assert_eq!(changes, vec![TaskState::Queued, TaskState::Starting]);
        assert!(s.hold_eval_run("0001", 100, 200).unwrap());
        assert!(!s.hold_eval_run("0001", 150, 300).unwrap(), "still alive");
        assert!(
            s.hold_eval_run("0001", 250, 300).unwrap(),
            "heartbeat lapsed"
        );
        let r = s.eval_run("000").unwrap().unwrap();
        assert_eq!(r.shown_state(260), "running");
        assert_eq!(r.shown_state(301), "interrupted");
        s.end_eval_run("0001", "passed", 1.0).unwrap();
        let r = s.eval_run("0001").unwrap().unwrap();
        assert_eq!((r.shown_state(999), r.pass_rate), ("passed", Some(1.0)));
    }
}
