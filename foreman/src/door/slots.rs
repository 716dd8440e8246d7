//! Warm jobs on a swarm's nodes (issue 53) as the hub knows them: each a
//! slot id with its own token (the job's Swarm secret), no task yet. An
//! idle job may ask one thing, `GET claim`, a long poll (204 now and then:
//! ask again); everything else is refused. A claim registers the task's
//! routes with the slot's token (`Hub::register`, `RemoteTask::slot`); the
//! launch is given only once the holder of the task's lease releases it
//! (`Hub::release_warm`), so a foreman that stops between the claim and
//! the release leaves a job that never began the task. From then on the
//! slot's requests are the task's, and the slot goes with the task.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderName, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use saheeli_protocol::TaskId;
use saheeli_protocol::remote::warm::{CLAIM, WORKSPACE_HEADER};
use tokio::sync::watch;

use super::remote::{Entry, Hub, constant_time_eq, refuse};

/// How long `GET claim` waits before answering 204 (ask again).
const CLAIM_WAIT: Duration = Duration::from_secs(25);

/// Where a slot is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claim {
    Idle,
    /// Claimed for a task, not yet given to the job.
    Claimed(TaskId),
    /// Given to the job: its requests are the task's.
    Released(TaskId),
}

struct Slot {
    token: String,
    claim: watch::Sender<Claim>,
}

/// The hub's warm slots, by slot id.
#[derive(Clone, Default)]
pub(crate) struct Slots(Arc<Mutex<HashMap<TaskId, Arc<Slot>>>>);

/// What a slot's request comes to: the task's routes, or an answer here.
pub(super) enum Slotted {
    Task(Arc<Entry>),
    Answer(Response),
}

impl Slots {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TaskId, Arc<Slot>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, slot: TaskId) -> Option<Arc<Slot>> {
        self.lock().get(&slot).cloned()
    }

    /// A warm job the pool made, calling as `slot` with `token`.
    pub fn add(&self, slot: TaskId, token: String) {
        let s = Slot {
            token,
            claim: watch::Sender::new(Claim::Idle),
        };
        self.lock().insert(slot, Arc::new(s));
    }

    pub fn remove(&self, slot: TaskId) {
        self.lock().remove(&slot);
    }

    /// The slot is task `id`'s (a claim, or an adopted one's: added again
    /// with its token).
    pub(super) fn claimed(&self, slot: TaskId, id: TaskId, token: &str) {
        let s = self
            .lock()
            .entry(slot)
            .or_insert_with(|| {
                Arc::new(Slot {
                    token: token.to_string(),
                    claim: watch::Sender::new(Claim::Idle),
                })
            })
            .clone();
        s.claim.send_if_modified(|c| match c {
            Claim::Released(_) => false,
            _ => {
                *c = Claim::Claimed(id);
                true
            }
        });
    }

    /// Gives the claimed task to the job (waiting on `GET claim`, or
    /// asking next). Only the holder of the task's lease does.
    pub fn release(&self, slot: TaskId) {
        if let Some(s) = self.get(slot) {
            s.claim.send_if_modified(|c| match *c {
                Claim::Claimed(id) => {
                    *c = Claim::Released(id);
                    true
                }
                _ => false,
            });
        }
    }

    /// Whether `token` is the slot's.
    pub(super) fn proves(&self, slot: TaskId, token: &str) -> bool {
        self.get(slot)
            .is_some_and(|s| constant_time_eq(s.token.as_bytes(), token.as_bytes()))
    }

    /// Whether `req` is the claim long poll.
    pub(super) fn asks_claim(req: &Request) -> bool {
        req.method() == Method::GET && req.uri().path() == CLAIM
    }

    /// A request of a slot that proved itself: the claim long poll, the
    /// task's routes once released, nothing else.
    pub(super) async fn front(&self, hub: &Hub, slot: TaskId, claim_asked: bool) -> Slotted {
        let Some(s) = self.get(slot) else {
            return Slotted::Answer(refuse(StatusCode::FORBIDDEN, "this warm job is gone"));
        };
        if claim_asked {
            return Slotted::Answer(claim(hub, &s).await);
        }
        match *s.claim.borrow() {
            Claim::Released(id) => match hub.entry(id) {
                Some(e) => Slotted::Task(e),
                None => Slotted::Answer(refuse(StatusCode::FORBIDDEN, "this task is over")),
            },
            _ => Slotted::Answer(refuse(
                StatusCode::CONFLICT,
                "no task was given to this warm job yet",
            )),
        }
    }
}

/// `GET claim`: the task's launch once released (with whether there is a
/// workspace to fetch), or 204 after [`CLAIM_WAIT`].
async fn claim(hub: &Hub, s: &Slot) -> Response {
    let mut rx = s.claim.subscribe();
    let released =
        tokio::time::timeout(CLAIM_WAIT, rx.wait_for(|c| matches!(c, Claim::Released(_)))).await;
    let id = match released {
        Ok(Ok(c)) => match *c {
            Claim::Released(id) => id,
            _ => return StatusCode::NO_CONTENT.into_response(),
        },
        _ => return StatusCode::NO_CONTENT.into_response(),
    };
    let Some(entry) = hub.entry(id) else {
        return refuse(StatusCode::FORBIDDEN, "this task is over");
    };
    let t = &entry.task;
    let workspace = if t.input.is_some() || t.resume_from.is_some() {
        "yes"
    } else {
        "none"
    };
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (HeaderName::from_static(WORKSPACE_HEADER), workspace),
        ],
        t.launch.clone(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_given_only_once_released_and_never_taken_back() {
        let slots = Slots::default();
        let (slot, task) = (TaskId::new(), TaskId::new());
        slots.add(slot, "t".into());
        assert!(slots.proves(slot, "t"));
        assert!(!slots.proves(slot, "u"));
        assert!(!slots.proves(TaskId::new(), "t"));
        slots.release(slot);
        assert_eq!(*slots.get(slot).unwrap().claim.borrow(), Claim::Idle);
        slots.claimed(slot, task, "t");
        slots.release(slot);
        assert_eq!(
            *slots.get(slot).unwrap().claim.borrow(),
            Claim::Released(task)
        );
        // Registering again (a gateway reopened) never takes it back.
        slots.claimed(slot, TaskId::new(), "t");
        assert_eq!(
            *slots.get(slot).unwrap().claim.borrow(),
            Claim::Released(task)
        );
        slots.remove(slot);
        assert!(!slots.proves(slot, "t"));
    }
}
