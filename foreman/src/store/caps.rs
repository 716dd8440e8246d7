//! What `pools:` count (issue 52): tasks grouped by their agent type,
//! model and provider key (columns written at submit), and what a claim
//! must skip. Which pools are full is decided above the store
//! (`admission::pools`), from these groups.

use crate::state::{TaskState, sql_list};

use super::{Result, Store};

/// Tasks in one state with the same agent type, model and key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PoolGroup {
    pub state: Option<TaskState>,
    pub agent_type: Option<String>,
    pub model: Option<String>,
    pub key: Option<String>,
    pub tasks: usize,
}

/// What a claim skips: queued tasks of these agent types, models or keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Closed {
    pub agent_types: Vec<String>,
    pub models: Vec<String>,
    pub keys: Vec<String>,
}

/// Which selectors are full, given the groups of tasks holding a slot
/// (`admission::pools::closed`, with config.yaml's pools).
pub(crate) type ClosedBy<'a> = &'a dyn Fn(&[PoolGroup]) -> Closed;

/// The tasks in `states`, grouped.
pub(super) fn groups(
    conn: &rusqlite::Connection,
    states: &[TaskState],
) -> rusqlite::Result<Vec<PoolGroup>> {
    let sql = format!(
        "SELECT state, agent_type, model, provider_key, count(*) FROM tasks
         WHERE state IN {} GROUP BY 1, 2, 3, 4",
        sql_list(states)
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map([], |r| {
        let state: String = r.get(0)?;
        Ok(PoolGroup {
            state: state.parse().ok(),
            agent_type: r.get(1)?,
            model: r.get(2)?,
            key: r.get(3)?,
            tasks: r.get::<_, i64>(4)?.max(0) as usize,
        })
    })?;
    rows.collect()
}

impl Store {
    /// Queued tasks and those holding a slot, grouped as pools select
    /// them: `saheeli metrics`, `task status` and the dashboard.
    pub fn pool_groups(&self) -> Result<Vec<PoolGroup>> {
        let mut states = vec![TaskState::Queued];
        states.extend(TaskState::ACTIVE);
        Ok(groups(&self.conn, &states)?)
    }
}
