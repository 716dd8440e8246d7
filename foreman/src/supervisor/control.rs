//! The per-task control channel: how the serve loop talks to a task's
//! supervisor: stop requests (a cancel, a second Ctrl-C), and the flag a
//! task's gateway sets while it waits for a human (it holds no slot then).
//! Answers, pauses and messages travel through SQLite and the gateway.
//! Apart from the channel, a task can be *lost*: another foreman holds it
//! now, and the supervisor lets go without touching anything.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use saheeli_protocol::Reason;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What the loop can ask of a running task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// Stop the servo, collect, and end the task with this reason
    /// ([`Reason::Cancelled`] or [`Reason::Interrupted`]).
    Stop(Reason),
}

/// The loop's end of a task's control channel.
#[derive(Clone)]
pub(crate) struct Control {
    tx: mpsc::UnboundedSender<Command>,
    stopping: Arc<AtomicBool>,
    lost: CancellationToken,
    /// Set while the task waits for a human (it holds no slot then).
    waiting: Arc<AtomicBool>,
    /// Set while its servo is frozen (no slot either: it uses no CPU).
    frozen: Arc<AtomicBool>,
    /// When this foreman took the task (a lease renewal asked before then
    /// cannot know about it).
    pub since: Instant,
}

/// The supervisor's end.
pub(crate) struct Inbox {
    rx: mpsc::UnboundedReceiver<Command>,
    lost: CancellationToken,
    /// A stop that arrived while the supervisor was busy (launching).
    pending_stop: Option<Reason>,
    open: bool,
    waiting: Arc<AtomicBool>,
    frozen: Arc<AtomicBool>,
}

/// A new control channel for one task.
pub(crate) fn channel() -> (Control, Inbox) {
    let (tx, rx) = mpsc::unbounded_channel();
    let lost = CancellationToken::new();
    let waiting = Arc::new(AtomicBool::new(false));
    let frozen = Arc::new(AtomicBool::new(false));
    (
        Control {
            tx,
            stopping: Arc::default(),
            lost: lost.clone(),
            waiting: waiting.clone(),
            frozen: frozen.clone(),
            since: Instant::now(),
        },
        Inbox {
            rx,
            lost,
            pending_stop: None,
            open: true,
            waiting,
            frozen,
        },
    )
}

impl Control {
    /// Asks the supervisor to stop its servo (once; later asks are ignored).
    pub fn stop(&self, reason: Reason) {
        if !self.stopping.swap(true, Ordering::Relaxed) {
            let _ = self.tx.send(Command::Stop(reason));
        }
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// Tells the supervisor another foreman holds its task now.
    pub fn lose(&self) {
        self.lost.cancel();
    }

    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// Whether the task waits for a human now (it holds no slot).
    pub fn is_waiting(&self) -> bool {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Whether its servo is frozen now (it holds no slot).
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::Relaxed)
    }
}

impl Inbox {
    /// The next command; pending forever once the loop's end is gone.
    pub async fn recv(&mut self) -> Command {
        if let Some(r) = self.pending_stop.take() {
            return Command::Stop(r);
        }
        if self.open {
            match self.rx.recv().await {
                Some(c) => return c,
                None => self.open = false,
            }
        }
        std::future::pending().await
    }

    /// Whether a stop was asked for so far (without waiting).
    pub fn stop_requested(&mut self) -> Option<Reason> {
        while let Ok(c) = self.rx.try_recv() {
            match c {
                Command::Stop(r) => self.pending_stop = Some(r),
            }
        }
        self.pending_stop
    }

    /// Cancelled when the task was taken over by another foreman.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// The flag the task's gateway sets while it waits for a human.
    pub fn waiting(&self) -> Arc<AtomicBool> {
        self.waiting.clone()
    }

    /// The flag the supervisor sets while the task's servo is frozen.
    pub fn frozen(&self) -> Arc<AtomicBool> {
        self.frozen.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stop_is_delivered_once_and_remembered_across_a_peek() {
        let (control, mut inbox) = channel();
        assert_eq!(inbox.stop_requested(), None);
        control.stop(Reason::Cancelled);
        control.stop(Reason::Interrupted);
        assert!(control.is_stopping());
        assert_eq!(inbox.stop_requested(), Some(Reason::Cancelled));
        assert_eq!(inbox.recv().await, Command::Stop(Reason::Cancelled));
        let waited = tokio::time::timeout(std::time::Duration::from_millis(50), inbox.recv()).await;
        assert!(waited.is_err(), "the second stop was not sent");
    }

    #[tokio::test]
    async fn losing_a_task_wakes_its_supervisor() {
        let (control, inbox) = channel();
        assert!(!control.is_lost());
        control.lose();
        inbox.lost().cancelled().await;
        assert!(control.is_lost());
    }
}
