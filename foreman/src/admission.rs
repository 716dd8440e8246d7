//! Admission: how many tasks may run now, and whether to launch at all.
//!
//! With `concurrency: auto` the limit follows the Docker daemon: each
//! launch reports how long its create and start calls took, or that they
//! failed for the daemon's sake. The limit grows while that latency stays
//! near its baseline (by one per good launch until the first back-off,
//! which doubles it per round of launches; then by one per round), holds
//! while it is somewhat above, and shrinks by a quarter when it climbs to
//! twice the baseline (once per round, so one burst is not punished
//! twice). A daemon error halves it. The baseline is the lowest smoothed
//! latency seen, drifting slowly up so that a daemon that became slower
//! for good is, in time, the new normal.
//!
//! A rise in launch latency is only pressure worth backing off from when
//! it is a real part of a task's life: once tasks have ended, the limit
//! keeps growing while the rise above the baseline stays under
//! [`Tuning::life_share`] of a task's smoothed life from launch to end
//! (issue 26). Tasks that mostly wait on an LLM make launching more cost
//! almost nothing, even when unrelated load on the host slows Docker down;
//! one-step tasks, whose life is mostly Docker's, still back off. Until the
//! first task has ended, a rise holds the limit instead of lowering it:
//! nothing says yet whether it matters (daemon errors still halve it).
//!
//! With `auto`, no task is launched while a new call to a provider would
//! wait longer than [`Tuning::serve_soon`] for its turn in the provider's
//! rate limit (`llm::limits`), unless nothing runs: its first call
//! could not be served soon.
//!
//! A circuit breaker, in every mode: after [`Tuning::trip_after`] daemon
//! errors in a row it opens and nothing is launched for
//! [`Tuning::open_for`]; then it is half-open and lets one launch through.
//! That launch succeeding closes it; failing opens it again for twice as
//! long (at most [`Tuning::max_open_for`]).
//!
//! Everything here is a pure function of the reports and the time passed
//! in; the serve loop asks (`reconciler::gate`) and the supervisors
//! report. It sits below both, and below `metrics` (the breaker's states).

pub(crate) mod pools;

use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use crate::config::Concurrency;
use crate::fault::DaemonFault;

/// The controller's constants.
#[derive(Clone, Debug)]
pub(crate) struct Tuning {
    /// The limit `auto` starts from.
    pub initial: f64,
    /// The limit `auto` never goes below.
    pub min: f64,
    /// The limit `auto` never goes above.
    pub max: f64,
    /// Latency up to this multiple of the baseline lets the limit grow.
    pub grow_below: f64,
    /// Latency from this multiple of the baseline shrinks the limit.
    pub shrink_above: f64,
    /// What the limit is multiplied by when latency climbs.
    pub shrink_by: f64,
    /// Weight of a new sample in the smoothed latency.
    pub smoothing: f64,
    /// How far the baseline moves toward the smoothed latency per sample.
    pub drift: f64,
    /// Daemon errors in a row that open the breaker.
    pub trip_after: u32,
    /// How long the breaker first stays open.
    pub open_for: Duration,
    /// The longest it stays open.
    pub max_open_for: Duration,
    /// A latency rise under this share of a task's life is not pressure.
    pub life_share: f64,
    /// `auto` launches nothing while a provider's rate limit holds a new
    /// call longer than this.
    pub serve_soon: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            initial: 4.0,
            min: 1.0,
            max: crate::config::AUTO_CEILING as f64,
            grow_below: 1.5,
            shrink_above: 2.0,
            shrink_by: 0.75,
            smoothing: 0.3,
            drift: 0.01,
            trip_after: 5,
            open_for: Duration::from_secs(5),
            max_open_for: Duration::from_secs(60),
            life_share: 0.25,
            serve_soon: Duration::from_secs(10),
        }
    }
}

/// The circuit breaker's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub(crate) enum Breaker {
    /// Launching as the limit allows.
    Closed,
    /// Not launching until the pause is over.
    Open,
    /// One trial launch at a time.
    HalfOpen,
}

impl Breaker {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What one launch told the controller.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Report {
    /// The container was created and started; these calls took this long.
    Launched(Duration),
    /// A Docker call failed for the daemon's sake.
    DaemonFailed(DaemonFault),
    /// The launch ended otherwise (cancelled, the task's own error): it
    /// says nothing about the daemon.
    Neutral,
    /// A launched task ended this long after its launch began.
    Lived(Duration),
}

/// A change worth a log line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Change {
    Opened { for_: Duration, failures: u32 },
    HalfOpened,
    Closed,
    Shrunk { limit: usize },
}

/// The state the serve loop keeps.
#[derive(Clone, Debug)]
pub(crate) struct Admission {
    mode: Concurrency,
    tuning: Tuning,
    limit: f64,
    slow_start: bool,
    /// Good launches to go before the limit may shrink again.
    calm_for: f64,
    smoothed: Option<f64>,
    baseline: Option<f64>,
    failures: u32,
    breaker: Breaker,
    open_until: Option<Instant>,
    open_for: Duration,
    probing: bool,
    /// Smoothed seconds from a launch to its task's end.
    life: Option<f64>,
    /// How long a new call would wait for a provider's rate limit.
    rate_wait: Duration,
}

/// What status, logs and metrics show.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Snapshot {
    pub mode: Concurrency,
    pub limit: usize,
    pub breaker: Breaker,
    /// Daemon errors in a row.
    pub failures: u32,
    pub latency_ms: Option<f64>,
    pub baseline_ms: Option<f64>,
    /// When an open breaker half-opens.
    pub open_for_ms: Option<u64>,
}

impl Admission {
    pub fn new(mode: Concurrency, tuning: Tuning) -> Admission {
        Admission {
            mode,
            limit: tuning.initial,
            open_for: tuning.open_for,
            tuning,
            slow_start: true,
            calm_for: 0.0,
            smoothed: None,
            baseline: None,
            failures: 0,
            breaker: Breaker::Closed,
            open_until: None,
            probing: false,
            life: None,
            rate_wait: Duration::ZERO,
        }
    }

    /// How long a new LLM call would wait now for its turn in a
    /// provider's rate limit (`llm::Upstream::rate_wait`).
    pub fn provider_wait(&mut self, wait: Duration) {
        self.rate_wait = wait;
    }

    /// Whether `auto` holds launches for a provider's rate limit now.
    pub fn held_for_rate(&self) -> bool {
        self.mode == Concurrency::Auto && self.rate_wait > self.tuning.serve_soon
    }

    /// How many tasks may hold a slot.
    pub fn limit(&self) -> usize {
        match self.mode {
            Concurrency::Fixed(n) => n,
            Concurrency::Auto => self.limit.floor() as usize,
        }
    }

    /// The breaker's state at `now` (an open one half-opens when its pause is over).
    pub fn breaker(&mut self, now: Instant) -> (Breaker, Option<Change>) {
        if self.breaker == Breaker::Open && self.open_until.is_some_and(|t| now >= t) {
            self.breaker = Breaker::HalfOpen;
            self.open_until = None;
            self.probing = false;
            return (Breaker::HalfOpen, Some(Change::HalfOpened));
        }
        (self.breaker, None)
    }

    /// Whether one more task may be launched with `busy` holding a slot.
    pub fn may_launch(&mut self, now: Instant, busy: usize) -> (bool, Option<Change>) {
        let (breaker, change) = self.breaker(now);
        if busy > 0 && self.held_for_rate() {
            return (false, change);
        }
        let ok = match breaker {
            Breaker::Closed => busy < self.limit(),
            Breaker::HalfOpen => !self.probing && busy < self.limit(),
            Breaker::Open => false,
        };
        (ok, change)
    }

    /// A task was claimed to be launched (after `may_launch` said yes).
    pub fn admitted(&mut self) {
        if self.breaker == Breaker::HalfOpen {
            self.probing = true;
        }
    }

    /// What a launch reported.
    pub fn report(&mut self, now: Instant, report: Report) -> Option<Change> {
        match report {
            Report::Launched(took) => self.launched(took),
            Report::DaemonFailed(_) => self.failed(now),
            Report::Neutral => {
                self.probing = false;
                None
            }
            Report::Lived(life) => {
                // A task that waited on a human for hours says nothing of
                // the work's shape: ten minutes is long enough.
                let sample = life.as_secs_f64().min(600.0);
                let t = &self.tuning;
                self.life = Some(self.life.map_or(sample, |l| l + t.smoothing * (sample - l)));
                None
            }
        }
    }

    fn launched(&mut self, took: Duration) -> Option<Change> {
        let t = &self.tuning;
        self.failures = 0;
        let mut change = None;
        if self.breaker != Breaker::Closed {
            self.breaker = Breaker::Closed;
            self.probing = false;
            self.open_until = None;
            self.open_for = t.open_for;
            change = Some(Change::Closed);
        }
        let sample = took.as_secs_f64();
        let smoothed = match self.smoothed {
            None => sample,
            Some(s) => s + t.smoothing * (sample - s),
        };
        self.smoothed = Some(smoothed);
        let baseline = match self.baseline {
            None => smoothed,
            Some(b) if smoothed < b => smoothed,
            Some(b) => b + t.drift * (smoothed - b),
        };
        self.baseline = Some(baseline);
        if self.mode != Concurrency::Auto {
            return change;
        }
        let ratio = smoothed / baseline.max(1e-6);
        self.calm_for -= 1.0;
        // The rise is a small part of what a task lasts: launching more
        // costs little, whatever slowed Docker down.
        let cheap = self
            .life
            .is_some_and(|life| smoothed - baseline < t.life_share * life);
        if ratio <= t.grow_below || cheap {
            self.limit += if self.slow_start {
                1.0
            } else {
                1.0 / self.limit
            };
        } else if ratio >= t.shrink_above && self.calm_for <= 0.0 && self.life.is_some() {
            self.shrink(t.shrink_by);
            change = change.or(Some(Change::Shrunk {
                limit: self.limit(),
            }));
        }
        self.limit = self.limit.clamp(self.tuning.min, self.tuning.max);
        change
    }

    fn failed(&mut self, now: Instant) -> Option<Change> {
        self.failures += 1;
        self.probing = false;
        if self.mode == Concurrency::Auto {
            self.shrink(0.5);
        }
        let reopen = self.breaker == Breaker::HalfOpen;
        if reopen || (self.breaker == Breaker::Closed && self.failures >= self.tuning.trip_after) {
            if reopen {
                self.open_for = (self.open_for * 2).min(self.tuning.max_open_for);
            }
            self.breaker = Breaker::Open;
            self.open_until = Some(now + self.open_for);
            return Some(Change::Opened {
                for_: self.open_for,
                failures: self.failures,
            });
        }
        None
    }

    fn shrink(&mut self, by: f64) {
        self.slow_start = false;
        self.limit = (self.limit * by).max(self.tuning.min);
        // A round of launches at the new limit before shrinking again.
        self.calm_for = self.limit.ceil();
    }

    pub fn snapshot(&self, now: Instant) -> Snapshot {
        Snapshot {
            mode: self.mode,
            limit: self.limit(),
            breaker: self.breaker,
            failures: self.failures,
            latency_ms: self.smoothed.map(|s| s * 1000.0),
            baseline_ms: self.baseline.map(|s| s * 1000.0),
            open_for_ms: self
                .open_until
                .map(|t| t.saturating_duration_since(now).as_millis() as u64),
        }
    }
}

/// The log line a change is worth (the loop's gate and the supervisors'
/// reports both write it).
pub(crate) fn log_change(a: &Admission, change: Change) {
    let s = a.snapshot(Instant::now());
    let latency_ms = s.latency_ms.map(|v| v.round());
    let baseline_ms = s.baseline_ms.map(|v| v.round());
    match change {
        Change::Opened { for_, failures } => warn!(
            breaker = "open",
            failures,
            pause_s = for_.as_secs_f64(),
            limit = s.limit,
            "admission: Docker daemon failing; no launches for a while"
        ),
        Change::HalfOpened => info!(breaker = "half_open", "admission: trying one launch"),
        Change::Closed => info!(
            breaker = "closed",
            limit = s.limit,
            "admission: Docker daemon answers again; launching"
        ),
        Change::Shrunk { limit } => info!(
            limit,
            latency_ms, baseline_ms, "admission: Docker slowing down; limit lowered"
        ),
    }
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
