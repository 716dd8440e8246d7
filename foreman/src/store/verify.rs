//! Verification checks, durably: each verify command and assessment run
//! after a `task_complete`, by attempt. The foreman counts attempts here
//! (not the servo, not the agent), so a restarted or adopting foreman
//! knows how many are left; the report and `verify-N.log` are written
//! from these rows, never from files the agent could have made.

use rusqlite::{TransactionBehavior, params};
use saheeli_protocol::TaskId;
use saheeli_protocol::verify::{Check, CheckKind};

use super::{ExecCached, Lease, Result, Store, held_state, now_ms};

const CHECK_COLUMNS: &str =
    "attempt, kind, command, exit_code, duration_ms, passed, output, limited, findings, graded";

fn read_check(r: &rusqlite::Row<'_>) -> rusqlite::Result<Check> {
    let kind: String = r.get(1)?;
    Ok(Check {
        attempt: r.get(0)?,
        kind: if kind == "assess" {
            CheckKind::Assess
        } else {
            CheckKind::Verify
        },
        command: r.get(2)?,
        exit_code: r.get(3)?,
        duration_ms: r.get::<_, i64>(4)?.max(0) as u64,
        passed: r.get(5)?,
        output: r.get(6)?,
        limited: r.get(7)?,
        findings: serde_json::from_str(&r.get::<_, String>(8)?).unwrap_or_default(),
        graded: r
            .get::<_, Option<String>>(9)?
            .and_then(|g| serde_json::from_str(&g).ok()),
    })
}

impl Store {
    /// Every check of task `id`, attempt by attempt (not fenced: reports
    /// and status read it).
    pub fn verify_checks(&self, id: TaskId) -> Result<Vec<Check>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {CHECK_COLUMNS} FROM verify_checks WHERE task_id = ?1 ORDER BY attempt, id"
        ))?;
        let rows = stmt.query_map(params![id.to_string()], read_check)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The attempt `call_id` already made, if any: (attempt, its checks).
    pub fn verify_attempt_of(
        &self,
        id: TaskId,
        call_id: &str,
    ) -> Result<Option<(u32, Vec<Check>)>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {CHECK_COLUMNS} FROM verify_checks WHERE task_id = ?1 AND call_id = ?2 ORDER BY id"
        ))?;
        let rows = stmt.query_map(params![id.to_string(), call_id], read_check)?;
        let checks: Vec<Check> = rows.collect::<rusqlite::Result<_>>()?;
        Ok(checks.first().map(|c| c.attempt).map(|a| (a, checks)))
    }

    /// How many attempts task `id` has made.
    pub fn verify_attempts(&self, id: TaskId) -> Result<u32> {
        Ok(self.conn.query_row(
            "SELECT COALESCE(MAX(attempt), 0) FROM verify_checks WHERE task_id = ?1",
            params![id.to_string()],
            |r| r.get(0),
        )?)
    }

    /// Whether the task's last attempt passed (false: none made, or the
    /// last failed): `complete` needs it when the task verifies.
    pub fn verify_passed(&self, id: TaskId) -> Result<bool> {
        let checks = self.verify_checks(id)?;
        let Some(last) = checks.last().map(|c| c.attempt) else {
            return Ok(false);
        };
        Ok(checks
            .iter()
            .filter(|c| c.attempt == last)
            .all(|c| c.passed))
    }

    /// Records one attempt's checks (fenced by the lease), with an event
    /// row for the trail.
    pub fn record_verify(
        &mut self,
        id: TaskId,
        lease: &Lease,
        call_id: &str,
        attempt: u32,
        checks: &[Check],
    ) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        held_state(&tx, id, lease)?;
        let now = now_ms();
        for c in checks {
            tx.exec_cached(
                "INSERT INTO verify_checks
                   (task_id, attempt, call_id, kind, command, exit_code, duration_ms, passed, output, at,
                    limited, findings, graded)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                params![
                    id.to_string(),
                    attempt,
                    call_id,
                    c.kind.as_str(),
                    c.command,
                    c.exit_code,
                    c.duration_ms as i64,
                    c.passed,
                    c.output,
                    now,
                    c.limited,
                    serde_json::to_string(&c.findings).unwrap_or_else(|_| "[]".into()),
                    c.graded.as_ref().and_then(|g| serde_json::to_string(g).ok()),
                ],
            )?;
        }
        let passed = checks.iter().all(|c| c.passed);
        let failed: Vec<&str> = checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.kind.as_str())
            .collect();
        let detail = if passed {
            format!("attempt {attempt}: passed")
        } else if checks.iter().any(|c| c.limited) {
            format!("attempt {attempt}: assess said limited (more attempts cannot help)")
        } else {
            format!("attempt {attempt}: {} failed", failed.join(" and "))
        };
        super::desk::note_event(&tx, id, "verified", Some("saheeli"), &detail)?;
        tx.commit()?;
        Ok(())
    }
}
