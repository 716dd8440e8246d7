//! A task's set-up as its launch went (issue 50): the cache key, hit or
//! miss and its time, kept as JSON in `tasks.setup` for status and the
//! report. Never a secret: the set-up's values are not in it.

use rusqlite::params;
use saheeli_protocol::TaskId;

use super::{Lease, Result, Store};
use crate::task::SetupRan;

impl Store {
    /// Records how task `id`'s set-up went, while `lease` holds it.
    pub fn set_setup(&mut self, id: TaskId, lease: &Lease, ran: &SetupRan) -> Result<()> {
        let json = serde_json::to_string(ran).expect("SetupRan serializes");
        self.fenced_update(
            id,
            "UPDATE tasks SET setup = ?3 WHERE id = ?1 AND owner = ?2",
            params![id.to_string(), lease.owner, json],
        )
    }
}
