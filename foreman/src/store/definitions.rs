//! Definitions from Git (issue 52): each commit of the definitions
//! repository the foreman judged, one row each: applied (its files as
//! JSON, what it changed) or rejected (why). The newest applied row is
//! the set every submit and claim reads; a rejected one changes nothing
//! but says why, with a `definitions.rejected` notice per webhook asked
//! for, written in the same transaction. `notices` is the outbox of
//! foreman events that belong to no task.

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::{ExecCached, Result, Store, now_ms};

/// One judged commit.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DefinitionsRow {
    pub id: i64,
    pub repo: String,
    pub commit: String,
    pub applied: bool,
    /// Rejected: why.
    pub reason: Option<String>,
    /// Applied: what changed from the set before (JSON).
    pub changes: Option<String>,
    /// Applied: the set's files (JSON).
    pub files: Option<String>,
    /// When it was judged (ms).
    pub at: i64,
}

/// One notice to deliver.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Notice {
    pub id: i64,
    pub kind: String,
    pub url: String,
    pub format: String,
    /// What the event says (JSON), rendered into the body when sent.
    pub facts: String,
    pub attempts: i64,
    pub created_at: i64,
}

const ROW: &str = "id, repo, commit_id, applied, reason, changes, files, at";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<DefinitionsRow> {
    Ok(DefinitionsRow {
        id: r.get(0)?,
        repo: r.get(1)?,
        commit: r.get(2)?,
        applied: r.get(3)?,
        reason: r.get(4)?,
        changes: r.get(5)?,
        files: r.get(6)?,
        at: r.get(7)?,
    })
}

impl Store {
    /// The set in use: the newest applied commit (None: none yet).
    pub fn definitions_current(&self) -> Result<Option<DefinitionsRow>> {
        Ok(self
            .conn
            .prepare_cached(&format!(
                "SELECT {ROW} FROM definitions WHERE applied = 1 ORDER BY id DESC LIMIT 1"
            ))?
            .query_row([], row)
            .optional()?)
    }

    /// The id of the set in use, cheaply (the loop asks every tick).
    pub fn definitions_current_id(&self) -> Result<Option<i64>> {
        Ok(self
            .conn
            .prepare_cached("SELECT MAX(id) FROM definitions WHERE applied = 1")?
            .query_row([], |r| r.get(0))?)
    }

    /// The newest rejected commit (None: none ever was).
    pub fn definitions_last_rejected(&self) -> Result<Option<DefinitionsRow>> {
        Ok(self
            .conn
            .prepare_cached(&format!(
                "SELECT {ROW} FROM definitions WHERE applied = 0 ORDER BY id DESC LIMIT 1"
            ))?
            .query_row([], row)
            .optional()?)
    }

    /// Records `commit` of `repo` as the set in use.
    pub fn definitions_apply(
        &mut self,
        repo: &str,
        commit: &str,
        changes: &str,
        files: &str,
    ) -> Result<i64> {
        self.conn.exec_cached(
            "INSERT INTO definitions (repo, commit_id, applied, changes, files, at)
             VALUES (?1, ?2, 1, ?3, ?4, ?5)",
            params![repo, commit, changes, files, now_ms()],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Records `commit` of `repo` as rejected for `reason`, with a
    /// `definitions.rejected` notice to each of `hooks` (URL, format)
    /// saying `facts`, in one transaction.
    pub fn definitions_reject(
        &mut self,
        repo: &str,
        commit: &str,
        reason: &str,
        hooks: &[(String, String)],
        facts: &str,
    ) -> Result<i64> {
        let now = now_ms();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.exec_cached(
            "INSERT INTO definitions (repo, commit_id, applied, reason, at)
             VALUES (?1, ?2, 0, ?3, ?4)",
            params![repo, commit, reason, now],
        )?;
        let id = tx.last_insert_rowid();
        for (url, format) in hooks {
            tx.exec_cached(
                "INSERT INTO notices (kind, url, format, facts, created_at, next_at)
                 VALUES ('definitions.rejected', ?1, ?2, ?3, ?4, ?4)",
                params![url, format, facts, now],
            )?;
        }
        tx.commit()?;
        Ok(id)
    }

    /// Claims up to `limit` due notices for `owner` until `claim_ms` from now.
    pub fn claim_notices(
        &mut self,
        owner: &str,
        claim_ms: i64,
        limit: usize,
    ) -> Result<Vec<Notice>> {
        let now = now_ms();
        let due: bool = self
            .conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM notices WHERE state = 'pending' AND next_at <= ?1
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
            let mut stmt = tx.prepare_cached(&format!(
                "SELECT id, kind, url, format, facts, attempts, created_at FROM notices
                 WHERE state = 'pending' AND next_at <= ?1
                   AND (claimed_until IS NULL OR claimed_until < ?1)
                 ORDER BY id LIMIT {limit}"
            ))?;
            stmt.query_map(params![now], |r| {
                Ok(Notice {
                    id: r.get(0)?,
                    kind: r.get(1)?,
                    url: r.get(2)?,
                    format: r.get(3)?,
                    facts: r.get(4)?,
                    attempts: r.get(5)?,
                    created_at: r.get(6)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?
        };
        for n in &rows {
            tx.exec_cached(
                "UPDATE notices SET claimed_by = ?2, claimed_until = ?3 WHERE id = ?1",
                params![n.id, owner, now + claim_ms],
            )?;
        }
        tx.commit()?;
        Ok(rows)
    }

    /// The receiver answered 2xx: never sent again.
    pub fn notice_done(&mut self, id: i64) -> Result<()> {
        self.conn.exec_cached(
            "UPDATE notices SET state = 'delivered', delivered_at = ?2, claimed_by = NULL,
                claimed_until = NULL, attempts = attempts + 1
             WHERE id = ?1",
            params![id, now_ms()],
        )?;
        Ok(())
    }

    /// A failed attempt: tried again at `next_at`, or given up (`dead`).
    pub fn notice_failed(&mut self, id: i64, error: &str, next_at: i64, dead: bool) -> Result<()> {
        self.conn.exec_cached(
            "UPDATE notices SET attempts = attempts + 1, last_error = ?2, next_at = ?3,
                state = CASE WHEN ?4 THEN 'dead' ELSE state END,
                claimed_by = NULL, claimed_until = NULL
             WHERE id = ?1",
            params![id, error, next_at, dead],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_applied_set_is_current_and_a_rejection_queues_its_notices() {
        let d = tempfile::tempdir().unwrap();
        let mut s = Store::open(&d.path().join("db.sqlite")).unwrap();
        assert!(s.definitions_current().unwrap().is_none());
        assert_eq!(s.definitions_current_id().unwrap(), None);
        let a = s.definitions_apply("/r", "aaa", "{}", "{}").unwrap();
        let hooks = [("http://x/h".to_string(), "json".to_string())];
        s.definitions_reject("/r", "bbb", "templates/x.md: bad", &hooks, "{}")
            .unwrap();
        let cur = s.definitions_current().unwrap().unwrap();
        assert_eq!((cur.id, cur.commit.as_str(), cur.applied), (a, "aaa", true));
        let rej = s.definitions_last_rejected().unwrap().unwrap();
        assert_eq!(rej.reason.as_deref(), Some("templates/x.md: bad"));
        let due = s.claim_notices("me", 1000, 10).unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].kind, "definitions.rejected");
        // Claimed: not handed out twice.
        assert!(s.claim_notices("other", 1000, 10).unwrap().is_empty());
        s.notice_done(due[0].id).unwrap();
        assert!(s.claim_notices("me", 0, 10).unwrap().is_empty());
    }
}
