//! The bus: a broadcast channel of [`TaskEvent`]s.

use saheeli_protocol::{Reason, TaskId};
use tokio::sync::broadcast;

use crate::state::TaskState;

/// One transition of one task, as recorded in the event trail.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TaskEvent {
    /// The event row's id: increasing, so a reader can resume after it.
    pub seq: i64,
    pub task_id: TaskId,
    pub at_ms: i64,
    pub from: Option<TaskState>,
    pub to: TaskState,
    /// Why the task ended (terminal transitions only).
    pub reason: Option<Reason>,
    pub detail: Option<String>,
    /// Set on events that are not state changes: `asked`, `answered`,
    /// `approved`, `denied`, `injected`, `pause_requested`, `resumed`,
    /// `breakpoint`, `parked` (`from` and `to` are then the current state).
    pub kind: Option<String>,
    /// Who did it (a user name; `saheeli` for a policy).
    pub actor: Option<String>,
}

/// Where task events are published. Cloning gives another handle on the
/// same bus. A slow subscriber misses events (it is told how many) rather
/// than slowing the publisher down.
#[derive(Clone, Debug)]
pub(crate) struct Bus {
    tx: broadcast::Sender<TaskEvent>,
}

impl Bus {
    pub fn new(capacity: usize) -> Bus {
        let (tx, _) = broadcast::channel(capacity);
        Bus { tx }
    }

    pub fn publish(&self, event: TaskEvent) {
        // No subscriber is not an error.
        let _ = self.tx.send(event);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<TaskEvent> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64) -> TaskEvent {
        TaskEvent {
            seq,
            task_id: TaskId::new(),
            at_ms: 0,
            from: None,
            to: TaskState::Queued,
            reason: None,
            detail: None,
            kind: None,
            actor: None,
        }
    }

    #[tokio::test]
    async fn every_subscriber_gets_every_event_in_order() {
        let bus = Bus::new(16);
        let mut a = bus.subscribe();
        let mut b = bus.subscribe();
        for seq in 1..=3 {
            bus.publish(event(seq));
        }
        for rx in [&mut a, &mut b] {
            for seq in 1..=3 {
                assert_eq!(rx.recv().await.unwrap().seq, seq);
            }
        }
    }

    #[tokio::test]
    async fn a_slow_subscriber_is_told_what_it_missed() {
        let bus = Bus::new(2);
        let mut rx = bus.subscribe();
        for seq in 1..=5 {
            bus.publish(event(seq));
        }
        assert!(matches!(
            rx.recv().await,
            Err(broadcast::error::RecvError::Lagged(3))
        ));
        assert_eq!(rx.recv().await.unwrap().seq, 4);
    }
}
