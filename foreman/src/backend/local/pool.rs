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
use crate::backend::facts::Warm;
use crate::config::{Concurrency, WarmClass, WarmNeeds, class_for};
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
            }),
            wake: tokio::sync::Notify::new(),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle servo of the first class that is exactly `needs`', taken
    /// for one task; None: the task launches cold.
    pub fn claim(&self, id: TaskId, needs: &WarmNeeds) -> Option<Warm> {
        let class = class_for(&self.classes, needs)?.index;
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
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A pool config of one class of `size`, and what a task of exactly
    /// that class needs.
    fn one_class(size: usize) -> (Vec<WarmClass>, WarmNeeds) {
        let file: crate::config::ConfigFile =
            serde_yaml::from_str(&format!("pool:\n  - {{ size: {size} }}\n")).unwrap();
        let classes = file.warm_classes();
        let c = &classes[0];
        let needs = WarmNeeds {
            image: c.image.clone(),
            network: c.network,
            memory: c.memory,
            cpus: c.cpus,
            pids: c.pids,
            disk: c.disk,
        };
        (classes, needs)
    }

    #[test]
    fn a_warm_claim_holds_refills_for_a_lull_and_a_cold_one_does_not() {
        let (classes, needs) = one_class(1);
        let pool = Pool::new(classes, "me".into(), std::env::temp_dir());
        assert_eq!(pool.lull_ends(), None, "nothing claimed yet");
        // The pool is empty: the claim goes cold, and refills may start.
        assert!(pool.claim(TaskId::new(), &needs).is_none());
        assert_eq!(pool.lull_ends(), None, "a cold claim holds nothing up");
        pool.lock().last_claim = Some(Instant::now());
        let end = pool.lull_ends().expect("a warm claim just now");
        assert!(end <= Instant::now() + CLAIM_LULL);
        pool.lock().last_claim = Some(Instant::now() - CLAIM_LULL);
        assert_eq!(pool.lull_ends(), None, "the lull is over");
    }

    /// A burst is over for the refills only once its servos got going: a
    /// claimed servo that has not made its first model call holds them
    /// (past the claims' lull), its call lets them go, and one that never
    /// calls holds them for [`START_HOLD`] at most.
    #[tokio::test]
    async fn refills_wait_for_claimed_servos_to_call_the_model() {
        let (classes, needs) = one_class(2);
        let run = tempfile::tempdir().unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(run.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        let pool = Pool::new(classes, "me".into(), run.path().to_path_buf());
        let mut sockets = vec![];
        for _ in 0..2 {
            let name = slot_name(TaskId::new());
            let dir = socket_name(&name).unwrap();
            let socket = WarmSocket::bind(run.path(), &dir, false).unwrap();
            sockets.push(socket.clone());
            pool.lock().idle[0].push_back(Idle {
                name,
                socket,
                born: Instant::now(),
            });
        }
        assert!(pool.claim(TaskId::new(), &needs).is_some());
        pool.lock().last_claim = Some(Instant::now() - CLAIM_LULL);
        let held = pool.lull_ends().expect("its servo has not called yet");
        assert!(held <= Instant::now() + START_LOOK, "looked at again soon");
        sockets[0].went();
        assert_eq!(pool.lull_ends(), None, "its servo called the model");
        // A servo that never calls: held while it is new, not after.
        assert!(pool.claim(TaskId::new(), &needs).is_some());
        pool.lock().last_claim = Some(Instant::now() - CLAIM_LULL);
        assert!(pool.lull_ends().is_some());
        pool.lock().starting[0].1 = Instant::now() - START_HOLD;
        assert_eq!(pool.lull_ends(), None, "held {START_HOLD:?} at most");
        for s in sockets {
            s.discard().await;
        }
    }

    /// `GET end` on a claimed socket, over its unix socket: the status line.
    async fn ask_end(socket: &WarmSocket) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::UnixStream::connect(socket.dir().join("gateway.sock"))
            .await
            .unwrap();
        let ask = format!(
            "GET {} HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n",
            saheeli_protocol::remote::warm::END
        );
        // A connection over the socket's cap is closed at once: no answer.
        let _ = s.write_all(ask.as_bytes()).await;
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer).await;
        answer.lines().next().unwrap_or_default().to_string()
    }

    /// A claimed servo's end (`GET end`) waits while a servo claimed beside
    /// it has not made its first model call, and is answered once it has;
    /// an end with nobody starting, or on a socket the pool does not hold
    /// (adopted after a restart), is answered at once.
    #[tokio::test]
    async fn a_claimed_servos_end_waits_for_the_servos_claimed_beside_it() {
        let (classes, needs) = one_class(3);
        let run = tempfile::tempdir().unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(run.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        let pool = Arc::new(Pool::new(classes, "me".into(), run.path().to_path_buf()));
        let mut sockets = vec![];
        for _ in 0..2 {
            let name = slot_name(TaskId::new());
            let socket = WarmSocket::bind(run.path(), &socket_name(&name).unwrap(), false).unwrap();
            let weak = Arc::downgrade(&pool);
            socket.hold_ends_for(Arc::new(move || {
                weak.upgrade().is_some_and(|p| p.starts_pending())
            }));
            sockets.push(socket.clone());
            pool.lock().idle[0].push_back(Idle {
                name,
                socket,
                born: Instant::now(),
            });
        }
        for s in &sockets {
            assert!(pool.claim(TaskId::new(), &needs).is_some());
            s.claim_for_test();
        }
        // The first ends while the second has not called the model yet.
        let first = sockets[0].clone();
        let mut end = tokio::spawn(async move { ask_end(&first).await });
        let early = tokio::time::timeout(Duration::from_millis(300), &mut end).await;
        assert!(
            early.is_err(),
            "answered while a servo beside it was starting"
        );
        sockets[1].went();
        let answered = tokio::time::timeout(Duration::from_secs(5), end).await;
        let status = answered
            .expect("answered once the other got going")
            .unwrap();
        assert!(status.contains("204"), "{status}");
        // Nobody starting now: the second's own end is answered at once.
        let status = tokio::time::timeout(Duration::from_secs(5), ask_end(&sockets[1]))
            .await
            .expect("nobody to wait for");
        assert!(status.contains("204"), "{status}");
        // A socket with no pool behind it never holds an end.
        let lone = WarmSocket::bind(
            run.path(),
            &socket_name(&slot_name(TaskId::new())).unwrap(),
            false,
        )
        .unwrap();
        lone.claim_for_test();
        let status = tokio::time::timeout(Duration::from_secs(5), ask_end(&lone))
            .await
            .expect("no hold");
        assert!(status.contains("204"), "{status}");
        // A flood of ends while a servo beside them never gets going: the
        // connections over the socket's cap are closed at once, the others
        // held no longer than the longest hold, and the socket still
        // answers afterwards.
        assert!(
            pool.claim(TaskId::new(), &needs).is_none(),
            "the pool is empty"
        );
        let name = slot_name(TaskId::new());
        let stuck = WarmSocket::bind(run.path(), &socket_name(&name).unwrap(), false).unwrap();
        pool.lock().idle[0].push_back(Idle {
            name,
            socket: stuck.clone(),
            born: Instant::now(),
        });
        assert!(pool.claim(TaskId::new(), &needs).is_some());
        let flood: Vec<_> = (0..64)
            .map(|_| {
                let s = sockets[0].clone();
                tokio::spawn(async move { ask_end(&s).await })
            })
            .collect();
        let all = tokio::time::timeout(
            Duration::from_millis(saheeli_protocol::remote::warm::END_HOLD_MS + 4000),
            futures_util::future::join_all(flood),
        )
        .await
        .expect("every end answered or closed within the longest hold");
        let answered = all
            .into_iter()
            .filter(|r| r.as_ref().unwrap().contains("204"))
            .count();
        assert!(
            (1..=crate::listen::GATEWAY_CONNECTIONS).contains(&answered),
            "{answered} held ends answered"
        );
        stuck.went();
        let status = tokio::time::timeout(Duration::from_secs(5), ask_end(&sockets[0]))
            .await
            .expect("the socket answers after the flood");
        assert!(status.contains("204"), "{status}");
        for s in sockets.into_iter().chain([lone, stuck]) {
            s.discard().await;
        }
    }

    #[test]
    fn a_slot_names_its_container_volume_and_socket_and_nothing_else_does() {
        let slot = TaskId::new();
        let name = slot_name(slot);
        assert!(name.starts_with(POOL_PREFIX) && name.len() == POOL_PREFIX.len() + 32);
        let sock = socket_name(&name).unwrap();
        assert_eq!(sock.len(), 34, "shorter than a task's directory (36)");
        for bad in [
            "saheeli-0191d3e2-aaaa-7bbb-8ccc-0123456789ab",
            "saheeli-pool-../../etc",
            "saheeli-pool-",
            "saheeli-pool-0123456789abcdef0123456789abcdeg",
        ] {
            assert_eq!(socket_name(bad), None, "{bad}");
        }
    }
}
