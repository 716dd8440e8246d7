//! Unblocking a `blocked` task. The model said it cannot go on
//! (`task_blocked`); its question is an ask row like `ask_user`'s, so
//! `task answer` replies to it as to any question. `task inject` and
//! `task resume` unblock it too: the message, or a plain "go on", becomes
//! the reply to the blocked call (a note would wait for an LLM call the
//! blocked servo never makes).

use rusqlite::{OptionalExtension, params};
use saheeli_protocol::TaskId;
use saheeli_protocol::human::{Decision, Reply, Waiting};

use crate::state::TaskState;

use super::Result;

/// What `task resume` tells a blocked model.
pub(crate) const RESUMED_TEXT: &str = "resumed without an answer: go on as far as you can, or end with task_complete saying what is missing";

/// Replies to the blocked call of a `blocked` task with `text` (from an
/// inject or a resume) and queues a parked task to go on. Returns false
/// when the task is not blocked (nothing was written).
pub(super) fn unblock(
    tx: &rusqlite::Transaction<'_>,
    id: TaskId,
    state: TaskState,
    text: &str,
    by: &str,
) -> Result<bool> {
    if state != TaskState::Blocked {
        return Ok(false);
    }
    let open: Option<(String, String)> = tx
        .query_row(
            "SELECT call_id, waiting FROM asks WHERE task_id = ?1 AND decision IS NULL
             ORDER BY id DESC LIMIT 1",
            params![id.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((call_id, waiting)) = open else {
        return Ok(false);
    };
    if !matches!(
        serde_json::from_str::<Waiting>(&waiting),
        Ok(Waiting::Blocked { .. })
    ) {
        return Ok(false);
    }
    let reply = Reply {
        decision: Decision::Answer,
        text: Some(text.to_string()),
        by: by.to_string(),
    };
    super::desk::write_reply(tx, id, &call_id, &reply)?;
    super::desk::requeue_if_parked(tx, id, state, "unblocked")?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::super::tests::spec;
    use super::*;
    use crate::store::{DeskError, HumanAct};
    use crate::store::{Lease, Store};

    fn lease() -> Lease {
        Lease {
            owner: "test".into(),
            ms: 10_000,
        }
    }

    fn blocked_task(s: &mut Store) -> TaskId {
        let id = TaskId::new();
        s.submit(id, &spec("t"), 0, None, 1).unwrap();
        s.claim_next(None, &lease()).unwrap().unwrap();
        s.transition(id, &lease(), TaskState::Running, None, None)
            .unwrap();
        let w = Waiting::Blocked {
            reason: "the registry refuses".into(),
            needed: "a mirror".into(),
        };
        assert_eq!(s.ask(id, &lease(), "b1", &w, None, 60_000).unwrap(), None);
        assert_eq!(
            s.require(&id.to_string()).unwrap().state,
            TaskState::Blocked
        );
        id
    }

    #[test]
    fn blocked_is_unblocked_by_an_answer_a_message_or_a_resume() {
        let d = tempfile::tempdir().unwrap();
        let mut s = Store::open(&d.path().join("q.db")).unwrap();
        type Unblock<'a> = &'a dyn Fn(&mut Store, TaskId) -> String;
        let unblockers: [Unblock; 3] = [
            &|s, id| {
                s.reply(id, &HumanAct::Answer("use mirror.local".into()), "ann")
                    .unwrap();
                "use mirror.local".into()
            },
            &|s, id| {
                assert_eq!(s.inject(id, "try the cache", "ann").unwrap(), None);
                "try the cache".into()
            },
            &|s, id| {
                assert_eq!(s.resume(id, "ann").unwrap(), TaskState::Blocked);
                RESUMED_TEXT.into()
            },
        ];
        for unblock in unblockers {
            let id = blocked_task(&mut s);
            let text = unblock(&mut s, id);
            let (reply, waiting) = s.take_reply(id, &lease(), "b1").unwrap().unwrap();
            assert_eq!(reply.decision, Decision::Answer);
            assert_eq!(
                (reply.text.as_deref(), reply.by.as_str()),
                (Some(&*text), "ann")
            );
            assert!(matches!(waiting, Waiting::Blocked { .. }));
            assert_eq!(
                s.require(&id.to_string()).unwrap().state,
                TaskState::Running
            );
        }
    }

    #[test]
    fn an_approval_does_not_unblock_and_a_parked_blocked_task_is_queued() {
        let d = tempfile::tempdir().unwrap();
        let mut s = Store::open(&d.path().join("q.db")).unwrap();
        let id = blocked_task(&mut s);
        let e = s.reply(id, &HumanAct::Approve(None), "ann").unwrap_err();
        assert!(
            matches!(
                e,
                DeskError::WrongKind {
                    command: "answer",
                    ..
                }
            ),
            "{e}"
        );
        assert!(!s.park(id, &lease(), 0).unwrap());
        s.inject(id, "go", "ann").unwrap();
        assert_eq!(s.require(&id.to_string()).unwrap().state, TaskState::Queued);
        // The pause a `task resume` lifts is not a blocked task's.
        let d = tempfile::tempdir().unwrap();
        let mut s = Store::open(&d.path().join("q.db")).unwrap();
        let id = blocked_task(&mut s);
        assert!(matches!(
            s.request_pause(id, "ann"),
            Err(DeskError::CannotPause { .. })
        ));
    }
}
