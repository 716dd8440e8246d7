//! What the sweeper and `gc` ask about warm servos (issue 28): whether a
//! task that has not ended records one as its container (a claim), and
//! which foremen serve now (their admission rows are their heartbeat).

use rusqlite::params;

use crate::state::{TaskState, sql_list};

use super::{Result, Store};

impl Store {
    /// Whether a task that has not ended records `container` as its own.
    pub fn container_in_use(&self, container: &str) -> Result<bool> {
        let sql = format!(
            "SELECT EXISTS(SELECT 1 FROM tasks WHERE container_id = ?1 AND state IN {})",
            sql_list(&TaskState::UNENDED)
        );
        Ok(self
            .conn
            .query_row(&sql, params![container], |r| r.get::<_, bool>(0))?)
    }

    /// Which of the warm servos named `prefix…` a task that has not ended
    /// records as its own: one look at the unended tasks for all of them
    /// (the sweeper asks every few seconds, with a thousand queued).
    pub fn warm_in_use(&self, prefix: &str) -> Result<std::collections::HashSet<String>> {
        let sql = format!(
            "SELECT container_id FROM tasks WHERE state IN {} AND substr(container_id, 1, ?2) = ?1",
            sql_list(&TaskState::UNENDED)
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let names = stmt
            .query_map(params![prefix, prefix.len() as i64], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(names)
    }

    /// The foremen whose admission row was written since `since_ms`.
    pub fn serving_owners(&self, since_ms: i64) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT owner FROM admission WHERE updated_at >= ?1")?;
        let owners = stmt
            .query_map(params![since_ms], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<String>>>()?;
        Ok(owners)
    }
}
