//! The warm pool (issue 28): per `pool:` class, servos kept started and
//! idle, each a fully hardened container (made as a cold one is, by
//! `docker::create_servo`) on its own empty workspace, its gateway
//! socket bound, the servo waiting on it for a claim. Nothing of any task
//! is in one: no environment, no secret, no workspace. A claim takes one
//! for one task; from then on it is that task's, removed with it after
//! collection, never idle again.
//!
//! Names derive from a slot id: container (and volume, when no image is
//! made) `saheeli-pool-<hex>` (the container's name is what a claim
//! records as the task's container, so a foreman that adopts the task
//! finds its workspace and socket again), socket directory
//! `<run_dir>/p-<hex>` (shorter than a task's), workspace image
//! `<state_dir>/workspaces/p-<hex>`.

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use saheeli_protocol::TaskId;
use tracing::{info, warn};

use crate::backend::docker;
use crate::backend::docker::cache_key;
use crate::backend::facts::Warm;
use crate::config::{Concurrency, SetupNeeds, WarmClass, WarmNeeds, class_for};
use crate::door::WarmSocket;

/// Container and volume names of warm servos start with this.
pub(crate) const POOL_PREFIX: &str = "saheeli-pool-";

/// The container (and volume) name of a slot.
pub(crate) fn slot_name(slot: TaskId) -> String {
    format!("{POOL_PREFIX}{}", slot.as_uuid().simple())
}

/// The socket directory's name (in `run_dir`) of a warm servo named
/// `name`, which is also its workspace's (in `state_dir/workspaces`).
pub(crate) fn socket_name(name: &str) -> Option<String> {
    let hex = name.strip_prefix(POOL_PREFIX)?;
    (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| format!("p-{hex}"))
}

/// The warm servo's name whose socket directory (or workspace) is `slot`.
pub(crate) fn slot_of(slot: &str) -> Option<String> {
    crate::backend::disk::is_slot(slot).then(|| format!("{POOL_PREFIX}{}", &slot[2..]))
}

/// A slot's workspace is made a moment before its container: only one
/// this old with no container is what a crash left (another foreman on
/// the same project may be making one right now).
pub(crate) const ORPHAN_SLOT_AGE: Duration = Duration::from_secs(60);

/// An idle warm servo.
pub(super) struct Idle {
    pub name: String,
    pub socket: WarmSocket,
    pub born: Instant,
}

/// `auto` sizes a class from the launches it served in this window.
const DEMAND_WINDOW: Duration = Duration::from_secs(60);
/// The most servos `auto` keeps warm in one class.
const AUTO_MAX: usize = 32;
/// Refills start only this long after the last warm claim: a burst of
/// claims is served from the idle servos first, without containers being
/// made beside it on the same cores (the refill comes right after).
pub(super) const CLAIM_LULL: Duration = Duration::from_millis(50);
/// Refills also wait while a servo claimed warm has not yet made its
/// first model call, this long at most: a burst of claims is over only
/// once its servos got going (each wakes to its launch, sets its task up
/// and calls the model: containers made beside them on the same cores
/// slow exactly what the pool is for). A servo that calls no model soon
/// (a task waiting on a human first) holds nothing up for longer.
pub(super) const START_HOLD: Duration = Duration::from_secs(2);
/// How often a held refill looks again whether the claimed servos got
/// going.
const START_LOOK: Duration = Duration::from_millis(20);

/// One foreman's pool.
pub(crate) struct Pool {
    pub(super) classes: Vec<WarmClass>,
    /// This foreman (its lease owner): the label on what its pool makes.
    pub(super) owner: String,
    pub(super) run_dir: PathBuf,
    pub(super) state: Mutex<PoolState>,
    /// Rung when a claim or a death leaves a class short.
    pub(super) wake: tokio::sync::Notify,
}

#[derive(Default)]
pub(super) struct PoolState {
    /// Per class, oldest first.
    pub idle: Vec<VecDeque<Idle>>,
    /// Per class, being made now.
    pub creating: Vec<usize>,
    /// Every servo this pool made and has not removed (idle, being made,
    /// claimed): the sweeper leaves these alone.
    pub known: HashSet<String>,
    /// Per class, when launches it would serve came (warm or cold).
    pub demand: Vec<VecDeque<Instant>>,
    /// When a warm servo was last claimed: refills wait for a lull in
    /// the claims ([`CLAIM_LULL`]).
    pub last_claim: Option<Instant>,
    /// Claimed warm servos not yet known to have made their first model
    /// call, with when they were claimed ([`START_HOLD`]).
    pub starting: Vec<(WarmSocket, Instant)>,
    /// Per class with `setup_key:`, the cached set-up its servos were
    /// last made with (issue 50): known once one was.
    pub setups: Vec<Option<ClassSetup>>,
}

/// The cached set-up a class's servos hold: its whole key, and the id of
/// the image it was made from (and the servos run): a task's key is
/// made with that id.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ClassSetup {
    pub key: String,
    pub image_id: String,
}

impl Pool {
    pub fn new(classes: Vec<WarmClass>, owner: String, run_dir: PathBuf) -> Pool {
        let n = classes.len();
        Pool {
            classes,
            owner,
            run_dir,
            state: Mutex::new(PoolState {
                idle: (0..n).map(|_| VecDeque::new()).collect(),
                creating: vec![0; n],
                known: HashSet::new(),
                demand: (0..n).map(|_| VecDeque::new()).collect(),
                last_claim: None,
                starting: Vec::new(),
                setups: vec![None; n],
            }),
            wake: tokio::sync::Notify::new(),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle servo of the first class that is exactly `needs`' (with a
    /// set-up: a class holding a cached set-up of the task's key), taken
    /// for one task; None: the task launches cold.
    pub fn claim(&self, id: TaskId, needs: &WarmNeeds) -> Option<Warm> {
        let setups = self.lock().setups.clone();
        let key_is = |c: &WarmClass, s: &SetupNeeds| {
            setups[c.index].as_ref().is_some_and(|held| {
                cache_key(&held.image_id, &s.commands, s.files_digest.as_deref()) == held.key
            })
        };
        let class = class_for(&self.classes, needs, key_is)?.index;
        let setup_key = setups[class].as_ref().map(|s| s.key.clone());
        let claimed = {
            let mut st = self.lock();
            let now = Instant::now();
            st.demand[class].push_back(now);
            let idle = st.idle[class].pop_front();
            if let Some(idle) = &idle {
                st.last_claim = Some(now);
                st.starting.push((idle.socket.clone(), now));
            }
            idle
        };
        self.wake.notify_one();
        self.publish();
        let Some(idle) = claimed else {
            crate::metrics::live().pool_claim(crate::metrics::Claim::Cold);
            info!(task_id = %id, class, "no warm servo idle in the task's class; launching cold");
            return None;
        };
        crate::metrics::live().pool_claim(crate::metrics::Claim::Warm);
        info!(task_id = %id, class, servo = %idle.name, "warm servo claimed");
        Some(Warm {
            name: idle.name,
            socket: Some(idle.socket),
            claimed: Instant::now(),
            disk: needs.disk,
            setup_key: setup_key.filter(|_| needs.setup.is_some()),
        })
    }

    /// A launch no class serves (counted cold, when a pool is on).
    pub fn missed(&self) {
        crate::metrics::live().pool_claim(crate::metrics::Claim::Cold);
    }

    /// How many servos class `i` should keep idle now.
    pub(super) fn target(&self, i: usize) -> usize {
        match self.classes[i].size {
            Concurrency::Fixed(n) => n,
            Concurrency::Auto => {
                let mut st = self.lock();
                let now = Instant::now();
                let d = &mut st.demand[i];
                while d.front().is_some_and(|t| now - *t > DEMAND_WINDOW) {
                    d.pop_front();
                }
                d.len().clamp(1, AUTO_MAX)
            }
        }
    }

    /// When refills may start: now (None), at the end of the lull after
    /// the last warm claim, or, while a claimed servo has not made its
    /// first model call (for [`START_HOLD`] at most), after another look.
    pub(super) fn lull_ends(&self) -> Option<Instant> {
        let starting = self.starts_pending();
        let now = Instant::now();
        let st = self.lock();
        let lull = st
            .last_claim
            .map(|t| t + CLAIM_LULL)
            .filter(|end| *end > now);
        if !starting {
            return lull;
        }
        Some(lull.map_or(now + START_LOOK, |end| end.max(now + START_LOOK)))
    }

    /// Whether a servo claimed warm has not made its first model call yet
    /// (for [`START_HOLD`] at most): the ends of claimed servos wait for
    /// them (`GET end`), as refills do.
    pub(crate) fn starts_pending(&self) -> bool {
        let now = Instant::now();
        let mut st = self.lock();
        st.starting
            .retain(|(socket, at)| !socket.got_going() && now - *at < START_HOLD);
        !st.starting.is_empty()
    }

    /// Idle servos, every class.
    pub fn idle(&self) -> usize {
        self.lock().idle.iter().map(VecDeque::len).sum()
    }

    /// Rings the keeper (the serve loop's admission row, which carries
    /// the idle count to `task status` and the metrics, reads it anew).
    pub(super) fn publish(&self) {
        self.wake.notify_one();
    }

    /// Whether this pool made `name` and has not removed it.
    pub fn knows(&self, name: &str) -> bool {
        self.lock().known.contains(name)
    }

    /// A claimed servo's container went with its task.
    pub fn forget(&self, name: &str) {
        self.lock().known.remove(name);
    }
}

/// Removes a warm servo: container, workspace (image or volume), socket
/// directory. `volume_too`: also a volume of its name when its workspace
/// is an image (one an older foreman made, or the sweeper's listing
/// saw). What is absent already is fine.
pub(crate) async fn remove_warm(
    d: &docker::Docker,
    cfg: &crate::config::Config,
    name: &str,
    volume_too: bool,
) {
    if let Err(e) = docker::remove_container(d, name).await {
        warn!(servo = %name, error = %format!("{e:#}"), "warm servo's container not removed");
    }
    // Only a warm servo's own image, never a task's.
    let image = socket_name(name).and_then(|_| super::home::image_mount(cfg, name));
    let images = image.is_some();
    if let Some(mnt) = image {
        let destroyed =
            tokio::task::spawn_blocking(move || crate::backend::disk::destroy(&mnt)).await;
        if let Ok(Err(e)) = destroyed {
            warn!(servo = %name, error = %format!("{e:#}"), "warm servo's workspace image not removed");
        }
    }
    if (!images || volume_too)
        && let Err(e) = docker::remove_volume(d, name).await
    {
        warn!(servo = %name, error = %format!("{e:#}"), "warm servo's volume not removed");
    }
    let run_dir = cfg.run_dir();
    if let Some(dir) = socket_name(name).map(|s| run_dir.join(s)) {
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                warn!(dir = %dir.display(), error = %e, "warm servo's socket directory not removed");
            }
            _ => {}
        }
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
