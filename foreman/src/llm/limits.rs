//! One shared budget of requests and tokens per provider and model, for
//! every task of this foreman (issue 26): calls wait their turn here
//! instead of collecting 429s.
//!
//! Each budget is a token bucket per dimension (requests, tokens) that may
//! go into debt: a call takes its cost now, and when the bucket is below
//! zero it waits until the refill has paid its share of the debt. The
//! debt is the queue: calls are served in the order they asked, at the
//! rate the provider refills. The bucket's size and rate come from the
//! provider's headers (`limit_headers`): the window's limit, and what
//! refills it by its reset time (a minute's worth per minute when the
//! provider does not say). Every answer's `remaining` resets the level,
//! less what the calls still waiting have taken.
//!
//! Until a provider and model's first answer is in, one call goes alone
//! (the probe) and the others wait for what it learns, at most
//! [`PROBE_WAIT`]. An answer without rate headers leaves the budget
//! unlimited. A 429 pauses the budget for its `retry-after` (else until the
//! exhausted dimension resets, else [`DEFAULT_PAUSE`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::limit_headers::{Allowance, Observed};

/// How long the others wait for a probe's answer before going anyway.
pub(crate) const PROBE_WAIT: Duration = Duration::from_secs(10);

/// A 429 with nothing to say about when to come back pauses this long.
pub(crate) const DEFAULT_PAUSE: Duration = Duration::from_secs(1);

/// The longest pause a 429 imposes.
const MAX_PAUSE: Duration = Duration::from_secs(60);

/// The window assumed when the provider gives no reset time.
const WINDOW: f64 = 60.0;

/// A provider (its name in config.yaml) and a model.
pub(crate) type Key = (String, String);

/// One dimension's bucket.
#[derive(Clone, Debug, PartialEq)]
struct Lane {
    cap: f64,
    /// Units per second.
    rate: f64,
    /// The level at `at`; below zero: owed by calls waiting.
    level: f64,
    at: Instant,
    /// Taken by calls still waiting their turn.
    queued: f64,
}

impl Lane {
    fn new(a: &Allowance, now: Instant) -> Lane {
        let mut l = Lane {
            cap: 0.0,
            rate: 0.0,
            level: 0.0,
            at: now,
            queued: 0.0,
        };
        l.observe(a, now);
        l
    }

    fn observe(&mut self, a: &Allowance, now: Instant) {
        let remaining = a.remaining as f64;
        self.cap = a
            .limit
            .map_or(self.cap.max(remaining), |l| l as f64)
            .max(1.0);
        let missing = self.cap - remaining;
        self.rate = match a.resets_in {
            Some(d) if d >= Duration::from_millis(10) && missing >= 1.0 => {
                missing / d.as_secs_f64()
            }
            _ => self.cap / WINDOW,
        }
        .max(self.cap / 3600.0);
        self.level = remaining - self.queued;
        self.at = now;
    }

    fn level_at(&self, t: Instant) -> f64 {
        if t <= self.at {
            self.level
        } else {
            (self.level + self.rate * (t - self.at).as_secs_f64()).min(self.cap)
        }
    }

    /// How long after `t` a call costing `cost` would go.
    fn wait_for(&self, cost: f64, t: Instant) -> Duration {
        let left = self.level_at(t) - cost;
        if left >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-left / self.rate)
        }
    }

    /// Takes `cost` at `t`; how long after `t` the taker must wait.
    fn take(&mut self, cost: f64, t: Instant) -> Duration {
        let wait = self.wait_for(cost, t);
        self.level = self.level_at(t) - cost;
        self.at = self.at.max(t);
        wait
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
enum Learned {
    /// No answer yet: the next call probes.
    #[default]
    Unknown,
    /// One call is out to learn the limits.
    Probing,
    /// Learned from an answer (no rate headers: unlimited).
    Yes,
}

#[derive(Debug, Default)]
struct Bucket {
    known: Learned,
    requests: Option<Lane>,
    tokens: Option<Lane>,
    paused_until: Option<Instant>,
    notify: Arc<Notify>,
}

impl Bucket {
    /// How long a new call costing `tokens` would wait at `now`.
    fn wait_for(&self, tokens: f64, now: Instant) -> Duration {
        let start = self.paused_until.filter(|p| *p > now).unwrap_or(now);
        let lanes = [
            self.requests.as_ref().map(|l| l.wait_for(1.0, start)),
            self.tokens.as_ref().map(|l| l.wait_for(tokens, start)),
        ];
        (start - now) + lanes.into_iter().flatten().max().unwrap_or_default()
    }

    fn observe(&mut self, o: &Observed, now: Instant) {
        for (lane, a) in [
            (&mut self.requests, &o.requests),
            (&mut self.tokens, &o.tokens),
        ] {
            match (lane.as_mut(), a) {
                (Some(l), Some(a)) => l.observe(a, now),
                (None, Some(a)) => *lane = Some(Lane::new(a, now)),
                _ => {}
            }
        }
    }
}

/// The shared budgets (one per provider and model).
#[derive(Debug, Default)]
pub(crate) struct Limits {
    buckets: Mutex<HashMap<Key, Bucket>>,
}

/// A call's turn, taken: say what its answer told with [`Limits::answered`].
pub(crate) struct Turn<'a> {
    limits: &'a Limits,
    key: Key,
    /// This call is the one learning the limits.
    probe: bool,
    /// How long it waited for its turn.
    pub waited: Duration,
}

/// What a call waiting for its turn holds; given back when the wait ends
/// or the call is dropped.
struct Queued<'a> {
    limits: &'a Limits,
    key: &'a Key,
    tokens: f64,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.limits.with(self.key, |b| {
            if let Some(l) = &mut b.requests {
                l.queued = (l.queued - 1.0).max(0.0);
            }
            if let Some(l) = &mut b.tokens {
                l.queued = (l.queued - self.tokens).max(0.0);
            }
        });
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if self.probe {
            // The probe ended without an answer: the next call probes.
            self.limits.with(&self.key, |b| {
                if b.known == Learned::Probing {
                    b.known = Learned::Unknown;
                }
                b.notify.notify_waiters();
            });
        }
    }
}

/// What a call asking for its turn did.
enum Step {
    Go { probe: bool },
    Wait(Duration),
    Hold(Arc<Notify>),
}

impl Limits {
    fn with<T>(&self, key: &Key, f: impl FnOnce(&mut Bucket) -> T) -> T {
        let mut map = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        f(map.entry(key.clone()).or_default())
    }

    /// Waits for a call's turn: `tokens` is its input estimate. `waiting`
    /// hears `Some(how long)` when it has to wait and `None` when the wait
    /// is over.
    pub async fn turn(
        &self,
        key: Key,
        tokens: u64,
        waiting: impl Fn(Option<Duration>),
    ) -> Turn<'_> {
        let started = Instant::now();
        let tokens = tokens as f64;
        let mut held_since: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let probe_over = held_since.is_some_and(|t| now - t >= PROBE_WAIT);
            let step = self.with(&key, |b| match b.known {
                Learned::Unknown => {
                    b.known = Learned::Probing;
                    Step::Go { probe: true }
                }
                Learned::Probing if !probe_over => Step::Hold(b.notify.clone()),
                _ => {
                    let start = b.paused_until.filter(|p| *p > now).unwrap_or(now);
                    let lanes = [
                        b.requests.as_mut().map(|l| l.take(1.0, start)),
                        b.tokens.as_mut().map(|l| l.take(tokens, start)),
                    ];
                    let wait =
                        (start - now) + lanes.into_iter().flatten().max().unwrap_or_default();
                    if !wait.is_zero() {
                        if let Some(l) = &mut b.requests {
                            l.queued += 1.0;
                        }
                        if let Some(l) = &mut b.tokens {
                            l.queued += tokens;
                        }
                    }
                    if wait.is_zero() {
                        Step::Go { probe: false }
                    } else {
                        Step::Wait(wait)
                    }
                }
            });
            match step {
                Step::Go { probe } => {
                    if held_since.is_some() {
                        waiting(None);
                    }
                    return Turn {
                        limits: self,
                        key,
                        probe,
                        waited: started.elapsed(),
                    };
                }
                Step::Wait(wait) => {
                    let queued = Queued {
                        limits: self,
                        key: &key,
                        tokens,
                    };
                    waiting(Some(wait));
                    tokio::time::sleep(wait).await;
                    drop(queued);
                    waiting(None);
                    return Turn {
                        limits: self,
                        key,
                        probe: false,
                        waited: started.elapsed(),
                    };
                }
                Step::Hold(notify) => {
                    let since = *held_since.get_or_insert(now);
                    let notified = notify.notified();
                    tokio::pin!(notified);
                    notified.as_mut().enable();
                    // The probe may have answered before the wait began.
                    if self.with(&key, |b| b.known) != Learned::Probing {
                        continue;
                    }
                    if since == now {
                        waiting(Some(PROBE_WAIT));
                    }
                    let _ = tokio::time::timeout_at(since + PROBE_WAIT, notified).await;
                }
            }
        }
    }

    /// A call's answer came (any status but 429): what its headers say
    /// becomes the budget.
    pub fn answered(&self, turn: &mut Turn<'_>, o: &Observed) {
        let now = Instant::now();
        self.with(&turn.key, |b| {
            b.observe(o, now);
            if turn.probe || b.known != Learned::Yes {
                b.known = Learned::Yes;
                b.notify.notify_waiters();
            }
        });
        turn.probe = false;
    }

    /// A call was refused with a 429: the budget pauses, and the call asks
    /// for a new turn.
    pub fn refused(&self, turn: &mut Turn<'_>, o: &Observed) -> Duration {
        let now = Instant::now();
        let exhausted = [o.requests, o.tokens]
            .into_iter()
            .flatten()
            .filter(|a| a.remaining == 0)
            .filter_map(|a| a.resets_in)
            .max();
        let pause = o
            .retry_after
            .or(exhausted)
            .unwrap_or(DEFAULT_PAUSE)
            .min(MAX_PAUSE);
        self.with(&turn.key, |b| {
            b.observe(o, now);
            let until = now + pause;
            b.paused_until = Some(b.paused_until.map_or(until, |p| p.max(until)));
            b.known = Learned::Yes;
            b.notify.notify_waiters();
        });
        turn.probe = false;
        pause
    }

    /// The longest a new call to any provider and model would wait now:
    /// `concurrency: auto` launches no task whose first call would wait
    /// long (`reconciler::admission`).
    pub fn wait_now(&self) -> Duration {
        let now = Instant::now();
        let map = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        map.values()
            .map(|b| b.wait_for(0.0, now))
            .max()
            .unwrap_or_default()
    }
}

#[cfg(test)]
#[path = "limits_tests.rs"]
mod tests;
