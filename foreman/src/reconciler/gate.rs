//! The serve loop's side of admission: it asks [`Admission`] before each
//! claim, the supervisors pass each launch's report on, and the state is
//! made visible: tracing on every breaker change and back-off, the launch
//! failure counter, and the `admission` row `task status` and `saheeli
//! metrics` read.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use crate::store::{AdmissionRow, Store, now_ms};

use crate::admission::{Breaker, Snapshot, log_change};
use crate::supervisor::Ctx;

/// The admission row is rewritten at least this often while serving (a
/// reader takes a row older than `metrics::ADMISSION_FRESH_MS` for a
/// foreman that is gone).
const HEARTBEAT: Duration = Duration::from_secs(2);

/// Changes are written no more often than this.
const SETTLE: Duration = Duration::from_millis(250);

/// Whether the loop may claim one more task with `busy` holding a slot.
pub(super) fn may_launch(ctx: &Ctx, busy: usize) -> bool {
    let wait = ctx.upstream.rate_wait();
    let mut a = ctx.admission.lock().unwrap_or_else(|p| p.into_inner());
    let held = a.held_for_rate();
    a.provider_wait(wait);
    if a.held_for_rate() != held {
        info!(
            wait_s = wait.as_secs_f64().round(),
            held = !held,
            "admission: a provider's rate limit {} launches",
            if held { "no longer holds" } else { "holds" }
        );
    }
    let (ok, change) = a.may_launch(Instant::now(), busy);
    if let Some(c) = change {
        log_change(&a, c);
    }
    ok
}

/// Whether the pool may make warm servos now: only while the breaker
/// is closed (a failing daemon gets no refills either), and, for a
/// drain whose queue has nothing left to claim, not at all (see
/// [`refill_allowed`]).
pub(super) fn may_refill(ctx: &Ctx, drain: &QueueWatch) -> bool {
    let mut a = ctx.admission.lock().unwrap_or_else(|p| p.into_inner());
    let closed = a.breaker(Instant::now()).0 == Breaker::Closed;
    refill_allowed(closed, drain.draining, drain.nothing_queued())
}

/// The loop claimed a task to launch.
pub(super) fn admitted(ctx: &Ctx) {
    ctx.admission
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .admitted();
}

fn admission_snapshot(ctx: &Ctx) -> Snapshot {
    ctx.admission
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .snapshot(Instant::now())
}

/// Writes the admission row when it changed (or now and then), on a
/// connection of its own: never queued with the supervisors' writes.
#[derive(Default)]
pub(super) struct Publisher {
    last: Option<(usize, &'static str, usize, Option<usize>)>,
    written: Option<Instant>,
    store: Option<Arc<Mutex<Store>>>,
}

impl Publisher {
    /// A failed write is logged, never fatal: the row is only for show.
    pub(super) async fn publish(&mut self, ctx: &Arc<Ctx>, running: usize) {
        let s = admission_snapshot(ctx);
        let pool_idle = ctx.engine.pool().and_then(|p| p.idle());
        let key = (s.limit, s.breaker.as_str(), running, pool_idle);
        let due = match self.written {
            None => true,
            Some(t) if t.elapsed() >= HEARTBEAT => true,
            Some(t) => self.last != Some(key) && t.elapsed() >= SETTLE,
        };
        if !due {
            return;
        }
        self.last = Some(key);
        self.written = Some(Instant::now());
        let row = AdmissionRow {
            owner: ctx.lease.owner.clone(),
            concurrency: s.mode.to_string(),
            limit: s.limit as i64,
            running: running as i64,
            breaker: s.breaker.as_str().into(),
            failures: s.failures.into(),
            latency_ms: s.latency_ms,
            baseline_ms: s.baseline_ms,
            open_for_ms: s.open_for_ms.map(|v| v as i64),
            updated_at: now_ms(),
            pool_idle: pool_idle.map(|n| n as i64),
        };
        if let Err(e) = self.write(ctx, move |st| st.put_admission(&row)).await {
            warn!(error = %format!("{e:#}"), "could not write the admission row");
        }
    }

    async fn write(
        &mut self,
        ctx: &Ctx,
        f: impl FnOnce(&mut Store) -> Result<(), crate::store::StoreError> + Send + 'static,
    ) -> anyhow::Result<()> {
        let store = match &self.store {
            Some(s) => s.clone(),
            None => {
                let path = ctx.cfg.database();
                let opened = tokio::task::spawn_blocking(move || Store::open(&path)).await??;
                self.store.insert(Arc::new(Mutex::new(opened))).clone()
            }
        };
        tokio::task::spawn_blocking(move || {
            f(&mut store.lock().unwrap_or_else(|p| p.into_inner()))
        })
        .await??;
        Ok(())
    }

    /// The foreman stops serving: its row goes.
    pub(super) async fn retire(ctx: &Arc<Ctx>) {
        let owner = ctx.lease.owner.clone();
        if let Err(e) = ctx.db(move |s| s.drop_admission(&owner)).await {
            warn!(error = %format!("{e:#}"), "could not remove the admission row");
        }
    }
}

/// What the serve loop last found in the queue, for the pool's pace.
#[derive(Clone, Default)]
pub(crate) struct QueueWatch {
    /// `serve --drain`: it stops once the queue is empty.
    pub draining: bool,
    empty: Arc<AtomicBool>,
}

impl QueueWatch {
    pub fn new(draining: bool) -> QueueWatch {
        QueueWatch {
            draining,
            empty: Arc::default(),
        }
    }

    /// The loop looked for a task to claim: found one, or none.
    pub fn found(&self, some: bool) {
        self.empty.store(!some, Ordering::Relaxed);
    }

    fn nothing_queued(&self) -> bool {
        self.empty.load(Ordering::Relaxed)
    }
}

/// Whether the pool may refill: the breaker closed, and not a drain that
/// has nothing left to claim (each servo made then would be removed
/// unclaimed when the drain ends; a task submitted meanwhile is claimed,
/// and refills go on).
fn refill_allowed(breaker_closed: bool, draining: bool, nothing_queued: bool) -> bool {
    breaker_closed && !(draining && nothing_queued)
}

#[cfg(test)]
mod refill_tests {
    use super::*;

    #[test]
    fn a_drain_with_nothing_left_to_claim_makes_no_warm_servo() {
        for (closed, draining, empty, allowed) in [
            (true, false, false, true),
            (true, false, true, true), // serving: the pool waits for tasks
            (true, true, false, true), // draining, tasks left to claim
            (true, true, true, false), // draining, nothing left
            (false, false, false, false),
            (false, true, false, false),
        ] {
            assert_eq!(
                refill_allowed(closed, draining, empty),
                allowed,
                "closed {closed}, draining {draining}, nothing queued {empty}"
            );
        }
        let watch = QueueWatch::new(true);
        assert!(!watch.nothing_queued(), "nothing looked at yet");
        watch.found(false);
        assert!(watch.nothing_queued());
        watch.found(true);
        assert!(!watch.nothing_queued(), "a task came: refills go on");
    }
}
