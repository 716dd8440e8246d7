//! What a retry's start says about the attempt it goes on from (issue
//! 51): `restore_incomplete` when a third-party agent's own session cannot
//! be restored, `starts_over` when its agent cannot resume one at all.
//! The foreman's own word is written with the retry (`Store::finish`);
//! the servo's, when its restore fails after the foreman's check passed,
//! comes through the gateway and is written here.

use rusqlite::{TransactionBehavior, params};
use saheeli_protocol::TaskId;

use super::desk::note_event;
use super::{Lease, Result, Store, held_state};

impl Store {
    /// Records `restore_incomplete` with `detail` on task `id`'s trail,
    /// said by its servo, fenced by `lease`; once: whoever says it again
    /// (the servo retrying its post, or the agent's shell) adds nothing.
    /// Whether it was recorded now.
    pub fn note_servo_restore_incomplete(
        &mut self,
        id: TaskId,
        lease: &Lease,
        detail: &str,
    ) -> Result<bool> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        held_state(&tx, id, lease)?;
        let said: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM events
                WHERE task_id = ?1 AND kind = 'restore_incomplete' AND actor = 'servo')",
            params![id.to_string()],
            |r| r.get(0),
        )?;
        if !said {
            note_event(&tx, id, "restore_incomplete", Some("servo"), detail)?;
        }
        tx.commit()?;
        Ok(!said)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::{lease, spec, store};

    #[test]
    fn the_servos_word_is_fenced_and_kept_once() {
        let (_d, mut s) = store();
        let id = TaskId::new();
        s.submit(id, &spec("t"), 0, None, 1).unwrap();
        s.claim_next(Some(id), &lease()).unwrap().unwrap();
        let other = Lease {
            owner: "other".into(),
            ms: 10_000,
        };
        assert!(s.note_servo_restore_incomplete(id, &other, "x").is_err());
        assert!(
            s.note_servo_restore_incomplete(id, &lease(), "gone")
                .unwrap()
        );
        assert!(
            !s.note_servo_restore_incomplete(id, &lease(), "again")
                .unwrap()
        );
        let said: Vec<_> = s
            .events(id)
            .unwrap()
            .into_iter()
            .filter(|e| e.kind.as_deref() == Some("restore_incomplete"))
            .map(|e| (e.actor, e.detail))
            .collect();
        assert_eq!(said, [(Some("servo".into()), Some("gone".into()))]);
    }
}
