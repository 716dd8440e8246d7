//! How a task's branch was delivered (issue 52), kept as JSON in
//! `tasks.delivered` with an event: `delivered`, or `delivery_failed`
//! naming why. Never a credential: git's refusal is all it holds.

use rusqlite::{TransactionBehavior, params};
use saheeli_protocol::TaskId;

use super::{Lease, Result, Store, StoreError};
use crate::task::Delivered;

impl Store {
    /// Records task `id`'s delivery, while `lease` holds it.
    pub fn set_delivered(&mut self, id: TaskId, lease: &Lease, d: &Delivered) -> Result<()> {
        let json = serde_json::to_string(d).expect("Delivered serializes");
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = tx.execute(
            "UPDATE tasks SET delivered = ?3 WHERE id = ?1 AND owner = ?2",
            params![id.to_string(), lease.owner, json],
        )?;
        if n == 0 {
            return Err(StoreError::LeaseLost(id));
        }
        let commit = d.commit.as_deref().unwrap_or("no commit");
        let (kind, detail) = match &d.error {
            None if d.pushed => ("delivered", format!("pushed {commit} to {}", d.branch)),
            None => (
                "delivered",
                format!(
                    "committed {commit} for {} (not pushed: `push: false`, or nothing changed)",
                    d.branch
                ),
            ),
            Some(why) => ("delivery_failed", format!("{} ({commit}): {why}", d.branch)),
        };
        super::desk::note_event(&tx, id, kind, None, &detail)?;
        tx.commit()?;
        Ok(())
    }
}
