//! The agent's model calls while the gateway holds them (issue 51): from
//! the moment a call arrives until its answer is ready the servo can only
//! wait, whether the call waits for its turn in a provider's rate limit
//! (`limits`), a 429's pause, a provider's Retry-After (`provider_call`)
//! or the model itself. The supervisor reads for how long every call in
//! flight has been held, freezes the servo past `suspend_after`, and
//! thaws it when no call is held any more.
//!
//! The one rule: a frozen servo is never answered. A call whose answer
//! is ready stops being held, then waits until the servo is free (thawed
//! by the supervisor, which the end of the hold wakes at once) before its
//! answer goes back. A freeze under way counts as frozen: the supervisor
//! marks it before it asks the engine, under the same lock the calls take,
//! so no answer slips out between its look and the freeze.
//!
//! llm knows no supervisor: the supervisor holds the other end of this
//! state (`supervisor::freeze`), as `inbox::InboxLook` is the desk's.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::warn;

/// The longest an answer waits for a thaw: a supervisor that could not
/// thaw by then (a daemon that does not answer) has the answer written
/// anyway, into the socket's buffer, where the thawed servo reads it.
const THAW_WAIT: Duration = Duration::from_secs(30);

/// What a held call waits for, as its freeze's event says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Why {
    /// The provider's answer (the model works, or the answer comes).
    #[default]
    Model,
    /// Its turn in the provider's rate limit, or a 429's pause.
    RateLimit,
    /// The wait before a retry (a provider's Retry-After, or backoff).
    Retry,
}

impl Why {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Why::Model => "the provider's answer",
            Why::RateLimit => "a rate-limit wait",
            Why::Retry => "a retry's wait",
        }
    }
}

/// Whether the servo is frozen for its model calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Ice {
    #[default]
    Free,
    /// The supervisor is freezing it (an answer waits as if frozen).
    Freezing,
    Frozen,
}

#[derive(Debug, Default)]
struct State {
    /// Calls arrived whose answer is not ready yet.
    calls: u32,
    /// Since when at least one call has been held without a break.
    since: Option<Instant>,
    why: Why,
    ice: Ice,
}

/// One task's held calls (`GatewayState::held`).
#[derive(Debug)]
pub(crate) struct Held {
    state: Mutex<State>,
    /// Bumped when a call ends and when the servo is free again: the
    /// supervisor and the answers waiting look again.
    bell: watch::Sender<u64>,
}

impl Default for Held {
    fn default() -> Held {
        Held {
            state: Mutex::default(),
            bell: watch::Sender::new(0),
        }
    }
}

impl Held {
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn ring(&self) {
        self.bell.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A call arrives: held until [`Call::answer`] (or its drop).
    pub(crate) fn call(self: &Arc<Self>) -> Call {
        self.with(|s| {
            if s.calls == 0 {
                s.since = Some(Instant::now());
                s.why = Why::Model;
            }
            s.calls += 1;
        });
        Call {
            held: self.clone(),
            open: true,
        }
    }

    /// What the calls held now wait for (the newest word wins).
    pub(crate) fn note(&self, why: Why) {
        self.with(|s| s.why = why);
    }

    /// Rings when a call ends or the servo is free again.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.bell.subscribe()
    }

    /// Whether any call is held now.
    pub(crate) fn holds(&self) -> bool {
        self.with(|s| s.calls > 0)
    }

    /// The supervisor's look: when calls have been held for `after` or
    /// more and the servo is free, it is marked freezing (answers wait
    /// from now on) and the wait so far is returned with what it waits for.
    pub(crate) fn freezing(&self, after: Duration) -> Option<(Duration, Why)> {
        self.with(|s| {
            let held_for = s.since?.elapsed();
            if s.calls == 0 || s.ice != Ice::Free || held_for < after {
                return None;
            }
            s.ice = Ice::Freezing;
            Some((held_for, s.why))
        })
    }

    /// The freeze [`Held::freezing`] began is done (`ok`) or was not made.
    /// False when no call is held any more: the supervisor thaws at once
    /// (an answer is waiting for it).
    pub(crate) fn froze(&self, ok: bool) -> bool {
        let still = self.with(|s| {
            s.ice = if ok { Ice::Frozen } else { Ice::Free };
            s.calls > 0
        });
        if !ok {
            self.ring();
        }
        still
    }

    /// The servo is free again: the answers waiting go back.
    pub(crate) fn thawed(&self) {
        let was = self.with(|s| std::mem::take(&mut s.ice));
        if was != Ice::Free {
            self.ring();
        }
    }

    /// One call less; whether the servo is frozen (or being frozen).
    fn end(&self) -> bool {
        let ice = self.with(|s| {
            s.calls = s.calls.saturating_sub(1);
            if s.calls == 0 {
                s.since = None;
            }
            s.ice
        });
        self.ring();
        ice != Ice::Free
    }

    /// Waits until the servo is free (at most [`THAW_WAIT`]).
    async fn free(&self) {
        let wait = async {
            let mut bell = self.bell.subscribe();
            while self.with(|s| s.ice != Ice::Free) {
                if bell.changed().await.is_err() {
                    return;
                }
            }
        };
        if tokio::time::timeout(THAW_WAIT, wait).await.is_err() {
            warn!(
                "the servo was not thawed in {}s: its answer goes into the socket's buffer",
                THAW_WAIT.as_secs()
            );
        }
    }
}

/// One call held by the gateway. Dropped unanswered (the servo went away,
/// or the gateway stops), it is held no longer.
#[must_use]
pub(crate) struct Call {
    held: Arc<Held>,
    open: bool,
}

impl Call {
    /// The answer is ready: the call is held no longer and, when the servo
    /// is frozen, waits for the thaw that this wakes; then it may answer.
    pub(crate) async fn answer(mut self) {
        self.open = false;
        if self.held.end() {
            self.held.free().await;
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if self.open {
            self.held.end();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AFTER: Duration = Duration::from_secs(30);

    #[tokio::test(start_paused = true)]
    async fn a_call_is_frozen_only_after_the_wait_and_answered_only_once_thawed() {
        let held = Arc::new(Held::default());
        assert_eq!(held.freezing(AFTER), None, "no call");
        let call = held.call();
        held.note(Why::RateLimit);
        tokio::time::sleep(AFTER - Duration::from_secs(1)).await;
        assert_eq!(held.freezing(AFTER), None, "not long enough");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (waited, why) = held.freezing(AFTER).expect("held long enough");
        assert_eq!((waited, why), (AFTER, Why::RateLimit));
        // Being frozen: not asked twice.
        assert_eq!(held.freezing(AFTER), None);
        assert!(held.froze(true), "the call is still held");

        // The answer is ready: it waits for the thaw its end rang for.
        let mut bell = held.subscribe();
        let answered = tokio::spawn(call.answer());
        bell.changed().await.unwrap();
        assert!(!held.holds());
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!answered.is_finished(), "answered a frozen servo");
        held.thawed();
        answered.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_ready_during_the_freeze_waits_for_the_thaw_after_it() {
        let held = Arc::new(Held::default());
        let call = held.call();
        tokio::time::sleep(AFTER).await;
        assert!(held.freezing(AFTER).is_some());
        // The answer comes while the engine freezes.
        let answered = tokio::spawn(call.answer());
        tokio::task::yield_now().await;
        assert!(!answered.is_finished());
        // The freeze is done, and nothing is held: thaw at once.
        assert!(!held.froze(true));
        assert!(!answered.is_finished());
        held.thawed();
        answered.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_freeze_not_made_lets_the_answer_go_and_a_free_servo_is_answered_at_once() {
        let held = Arc::new(Held::default());
        let call = held.call();
        tokio::time::sleep(AFTER).await;
        assert!(held.freezing(AFTER).is_some());
        let answered = tokio::spawn(call.answer());
        held.froze(false);
        answered.await.unwrap();
        // Never frozen: the answer does not wait.
        let call = held.call();
        tokio::time::timeout(Duration::from_millis(1), call.answer())
            .await
            .expect("answered at once");
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_counts_from_the_first_of_calls_held_together_and_ends_with_the_last() {
        let held = Arc::new(Held::default());
        let first = held.call();
        tokio::time::sleep(Duration::from_secs(20)).await;
        let second = held.call();
        tokio::time::sleep(Duration::from_secs(10)).await;
        drop(first);
        assert!(held.holds());
        assert_eq!(held.freezing(AFTER).map(|f| f.0), Some(AFTER));
        held.froze(true);
        // Dropped unanswered (the servo went away): held no longer.
        drop(second);
        assert!(!held.holds());
        held.thawed();
        // A new call's wait starts again.
        let _third = held.call();
        assert_eq!(held.freezing(AFTER), None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_never_waits_past_the_bound() {
        let held = Arc::new(Held::default());
        let call = held.call();
        tokio::time::sleep(AFTER).await;
        held.freezing(AFTER);
        held.froze(true);
        let t0 = Instant::now();
        call.answer().await;
        assert_eq!(t0.elapsed(), THAW_WAIT);
    }
}
