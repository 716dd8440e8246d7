//! `POST /saheeli/v1/snapshot` (issue 51): the servo is between steps
//! (the last step's tools have run, its session is saved) and waits while
//! the foreman keeps the workspace as it is, when the task's `snapshots:`
//! says so: at every step (`every`), or at the next one after `saheeli
//! task snapshot ID` (`on_request`). The copy is `collect::snapshot`'s,
//! under the foreman's state; the container never sees it.
//!
//! The step is the servo's word: in a separated container the socket is
//! its uid's alone. A snapshot of a step already kept is taken again
//! (the servo's own point comes last). Each snapshot copies at most the
//! workspace cap, and a task's snapshots at most `max_results_size`
//! together (their directories counted too); past that, no more are
//! taken and the answer says why.
//!
//! The agent's shell reaches the socket too, so the route is paced per
//! task: one snapshot at a time (a point while one is taken is refused,
//! not queued). A point for a step no snapshot was taken at yet, and no
//! later than the model calls this gateway answered (and the turns of a
//! `replay:` script the servo plays itself), is earned by those calls
//! (each call earns one, and calls are budgeted); any other point
//! (a step again, or ahead of the calls) takes a token from a bucket of
//! [`BURST`] that gets one back per [`REFILL`]. A refused point gets a
//! 429 with a JSON error saying which (`snapshot_busy`, `snapshot_rate`)
//! and a `retry-after`; the servo goes on without that step's snapshot,
//! so a flood neither stalls the task nor grows the disk past its caps,
//! while a servo whose steps are quick keeps one snapshot per step.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;
use saheeli_protocol::front_matter::Snapshots;
use saheeli_protocol::snapshot::{SnapshotPoint, SnapshotTaken, routes as r};
use tracing::{info, warn};

use super::ctx::{Ctx, On};
use crate::backend::TaskEngine;
use crate::collect::snapshot::{self, Taken};
use crate::collect::snapshot_record::{self, DIR_BYTES};
use crate::llm::task::{error_response, json_response};

/// Snapshots a task may take at once before the pace holds them back.
const BURST: f64 = 10.0;

/// Then one more per this long.
const REFILL: Duration = Duration::from_secs(1);

/// The route's pace: steps earned by model calls, and a token bucket of
/// [`BURST`] tokens, one back per [`REFILL`], for every other point.
#[derive(Debug)]
struct Pace {
    tokens: f64,
    at: Instant,
    /// The last step a model call earned a snapshot for.
    earned: Option<u32>,
}

impl Pace {
    fn new(now: Instant) -> Pace {
        Pace {
            tokens: BURST,
            at: now,
            earned: None,
        }
    }

    /// Lets a point for `step` through at `now`, when `calls` model calls
    /// were answered: free when the calls earned it, else for a token;
    /// else how long until one is back.
    fn let_through(&mut self, now: Instant, step: u32, calls: u64) -> Result<(), Duration> {
        let new = self.earned.is_none_or(|e| step > e);
        if new && u64::from(step) <= calls {
            self.earned = Some(step);
            return Ok(());
        }
        self.take(now)
    }

    /// Takes a token at `now`; else how long until one is back.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let back = now.saturating_duration_since(self.at).as_secs_f64() / REFILL.as_secs_f64();
        self.tokens = (self.tokens + back).min(BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(REFILL.mul_f64(1.0 - self.tokens))
        }
    }
}

/// Where the task's snapshots stand.
#[derive(Default)]
struct Last {
    /// The newest snapshot: what the next links from.
    taken: Option<Taken>,
    /// What the task's snapshots added on disk so far (for its cap).
    bytes: u64,
    /// Read back from the snapshot directory (a foreman that adopted the
    /// task goes on from its record: `snapshot_record`).
    loaded: bool,
}

/// What the route takes from the task.
pub(crate) struct Link {
    mode: Snapshots,
    engine: TaskEngine,
    state_dir: PathBuf,
    /// The most one snapshot copies.
    max_bytes: u64,
    /// The most all of the task's snapshots copy.
    max_total: u64,
    /// The workspace's host directory, found at the first point.
    dir: tokio::sync::OnceCell<Option<PathBuf>>,
    /// The last snapshot (what the next links from) and what they added
    /// on disk so far; one snapshot at a time.
    last: tokio::sync::Mutex<Last>,
    pace: std::sync::Mutex<Pace>,
    /// The turns of the built-in loop's `replay:` script: the steps such
    /// a servo takes without a model call.
    scripted: u64,
}

impl Link {
    pub(crate) fn of(
        spec: &crate::spec::TaskSpec,
        cfg: &crate::config::Config,
        engine: TaskEngine,
    ) -> Link {
        Link {
            mode: spec.snapshots,
            engine,
            state_dir: cfg.state_dir(),
            max_bytes: spec
                .disk
                .unwrap_or(cfg.file.task.disk.0)
                .max(cfg.file.max_workspace_size.0),
            max_total: cfg.file.max_results_size.0,
            dir: tokio::sync::OnceCell::new(),
            last: tokio::sync::Mutex::new(Last::default()),
            pace: std::sync::Mutex::new(Pace::new(Instant::now())),
            scripted: spec
                .replay
                .as_ref()
                .filter(|_| spec.agent.api().is_none())
                .map_or(0, |r| r.turns.len() as u64),
        }
    }
}

fn answer(gw: &On<Link>, taken: bool, why: Option<String>) -> Response {
    json_response(gw, StatusCode::OK, &SnapshotTaken { taken, why })
}

/// A point refused by the pace: a 429 saying why and when to come back.
fn refuse(gw: &On<Link>, kind: &str, message: &str, after: Duration) -> Response {
    let mut r = error_response(gw, StatusCode::TOO_MANY_REQUESTS, kind, message);
    let secs = after.as_secs_f64().ceil().max(1.0) as u64;
    if let Ok(v) = axum::http::HeaderValue::from_str(&secs.to_string()) {
        r.headers_mut().insert(axum::http::header::RETRY_AFTER, v);
    }
    r
}

async fn point(State(gw): State<Arc<On<Link>>>, body: axum::body::Bytes) -> Response {
    let Ok(point) = serde_json::from_slice::<SnapshotPoint>(&body) else {
        return crate::llm::task::error_response(
            &gw,
            StatusCode::BAD_REQUEST,
            saheeli_protocol::chat::gateway_error::BAD_REQUEST,
            "not a snapshot point",
        );
    };
    let (id, link) = (gw.task_id, &gw.link);
    if link.mode == Snapshots::Off {
        return answer(&gw, false, None);
    }
    // One at a time: a point while a snapshot is taken is refused.
    let Ok(mut last) = link.last.try_lock() else {
        return refuse(
            &gw,
            BUSY,
            "a snapshot of this task is being taken; no other is taken meanwhile",
            REFILL,
        );
    };
    let due = match link.mode {
        Snapshots::Every => true,
        Snapshots::OnRequest => snapshot::take_request(&link.state_dir, id),
        Snapshots::Off => false,
    };
    if !due {
        return answer(&gw, false, None);
    }
    let paced = link
        .pace
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .let_through(
            Instant::now(),
            point.step,
            link.scripted + gw.meter.calls.load(std::sync::atomic::Ordering::Relaxed),
        );
    if let Err(after) = paced {
        if link.mode == Snapshots::OnRequest {
            // The request stands for a point the pace lets through.
            let _ = snapshot::request(&link.state_dir, id);
        }
        warn!(task_id = %id, step = point.step, "snapshot point refused: too many too fast");
        let why = format!(
            "too many snapshot points: past one per model call, a task takes at most {BURST} \
             snapshots at once, then one every {}s",
            REFILL.as_secs()
        );
        return refuse(&gw, RATE, &why, after);
    }
    let dir = link
        .dir
        .get_or_init(|| link.engine.workspace_dir(id))
        .await
        .clone();
    let Some(dir) = dir else {
        return answer(
            &gw,
            false,
            Some("the task's workspace is not on this host".into()),
        );
    };
    if !last.loaded {
        let (state_dir, id) = (link.state_dir.clone(), id);
        if let Ok((taken, bytes)) =
            tokio::task::spawn_blocking(move || snapshot_record::load(&state_dir, id)).await
        {
            (last.taken, last.bytes) = (taken, bytes);
        }
        last.loaded = true;
    }
    if last.bytes >= link.max_total {
        let why = format!(
            "the task's snapshots reached their cap ({} bytes, `max_results_size`)",
            link.max_total
        );
        return answer(&gw, false, Some(why));
    }
    let prev = last.taken.take();
    let (state_dir, max) = (link.state_dir.clone(), link.max_bytes);
    let step = point.step;
    let made = tokio::task::spawn_blocking(move || {
        let t = snapshot::take(&dir, &state_dir, id, step, prev.as_ref(), max);
        (t, prev)
    })
    .await;
    match made {
        Ok((Ok(t), _)) => {
            info!(task_id = %id, step, files = t.files, linked = t.linked, copied = t.copied,
                  took_ms = t.took.as_millis() as u64, "snapshot kept");
            last.bytes += t.copied + t.dirs * DIR_BYTES;
            last.taken = Some(t);
            answer(&gw, true, None)
        }
        Ok((Err(e), prev)) => {
            warn!(task_id = %id, step, error = %format!("{e:#}"), "no snapshot at this step");
            last.taken = prev;
            answer(&gw, false, Some(format!("{e:#}")))
        }
        Err(_) => answer(&gw, false, Some("the snapshot thread panicked".into())),
    }
}

/// The error types of a point refused (429).
pub(crate) const BUSY: &str = "snapshot_busy";
pub(crate) const RATE: &str = "snapshot_rate";

/// The snapshot route.
pub(crate) fn routes(ctx: &Arc<Ctx>, link: Link) -> Router {
    Router::new()
        .route(r::SNAPSHOT, post(point))
        .with_state(On::new(ctx, link))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pace_lets_a_burst_through_then_one_per_refill() {
        let t0 = Instant::now();
        let mut p = Pace::new(t0);
        for _ in 0..BURST as usize {
            assert_eq!(p.take(t0), Ok(()));
        }
        assert_eq!(p.take(t0), Err(REFILL));
        let half = t0 + REFILL / 2;
        assert_eq!(p.take(half), Err(REFILL / 2));
        assert_eq!(p.take(t0 + REFILL), Ok(()));
        assert!(p.take(t0 + REFILL).is_err());
        // Idle long enough, a whole burst again, never more.
        let later = t0 + REFILL * 100;
        for _ in 0..BURST as usize {
            assert_eq!(p.take(later), Ok(()));
        }
        assert!(p.take(later).is_err());
    }

    #[test]
    fn each_model_call_earns_one_snapshot_and_no_more() {
        let t0 = Instant::now();
        let mut p = Pace::new(t0);
        // A quick servo: a point per step, each after its call.
        for step in 0..50 {
            assert_eq!(p.let_through(t0, step, u64::from(step)), Ok(()));
        }
        assert_eq!(p.tokens, BURST, "earned points take no token");
        // The same step again, or one ahead of the calls, takes a token.
        for _ in 0..BURST as usize {
            assert_eq!(p.let_through(t0, 49, 49), Ok(()));
        }
        assert!(p.let_through(t0, 49, 49).is_err());
        assert!(p.let_through(t0, 60, 49).is_err());
        // A step going back (a compaction undone) is not earned again.
        assert!(p.let_through(t0, 10, 49).is_err());
        // The next call earns the next step.
        assert_eq!(p.let_through(t0, 50, 50), Ok(()));
    }
}
