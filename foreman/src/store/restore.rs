//! What a retry's start says about the attempt it goes on from (issue
//! 51): `restore_incomplete` when a third-party agent's own session cannot
//! be restored, `starts_over` when its agent cannot resume one at all.
//! Events on the retry's trail, beside its state changes.

use rusqlite::TransactionBehavior;
use saheeli_protocol::TaskId;

use super::desk::note_event;
use super::{Result, Store};

impl Store {
    /// Records `kind` with `detail` on task `id`'s trail (by `saheeli`).
    pub fn note_retry(&mut self, id: TaskId, kind: &str, detail: &str) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        note_event(&tx, id, kind, Some("saheeli"), detail)?;
        tx.commit()?;
        Ok(())
    }
}
