//! The warm pool on a swarm (issue 53): per `pool:` class, job services
//! started ahead on the swarm's nodes, each a servo made as a cold one is
//! (`service::service_spec`, the same hardening) on its own empty
//! workspace volume, waiting on the gateway's hub for a claim
//! (`door::slots`). Nothing of any task is in one: no environment, no
//! secret but its own slot's token, no workspace. A claim takes one for
//! one task, which makes no service: the servo already runs on a node, so
//! the task skips Swarm's scheduling and dispatch. From then on the job
//! is that task's, removed with it, never idle again.
//!
//! A warm job carries its pool's labels (`saheeli.pool`, `.owner`,
//! `.slot`, `.class`), never a task's: it has none until claimed, and a
//! job service cannot be relabelled (updating a job runs it again). Its
//! service, secret and volume are named `saheeli-pool-<slot hex>`; the
//! claiming task's row records that name as its container, which is how
//! adoption finds it again and the sweeper knows it is in use.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use saheeli_protocol::TaskId;
use tracing::info;

use crate::backend::local::POOL_PREFIX;
use crate::config::{Concurrency, WarmClass, WarmNeeds, class_for};

/// A warm job's service, secret and volume name.
pub(crate) fn warm_name(slot: TaskId) -> String {
    format!("{POOL_PREFIX}{}", slot.as_uuid().simple())
}

/// The slot a warm job's name derives from.
pub(crate) fn slot_of_name(name: &str) -> Option<TaskId> {
    let hex = name.strip_prefix(POOL_PREFIX)?;
    if hex.len() != 32 {
        return None;
    }
    hex.parse().ok()
}

/// What a warm job's token is derived from besides its slot (a cold
/// launch's suffix is 8 hex digits: never this).
pub(crate) const WARM_SUFFIX: &str = "warm";

/// `auto` sizes a class from the launches it served in this window.
const DEMAND_WINDOW: Duration = Duration::from_secs(60);
/// The most jobs `auto` keeps warm in one class.
const AUTO_MAX: usize = 32;
/// Refills start only this long after the last warm claim: a burst of
/// claims is served from the idle jobs first, without services being
/// made beside the claimed servos' starts (the manager, and on a small
/// swarm the same cores, are busy with those).
pub(super) const CLAIM_LULL: Duration = Duration::from_secs(1);

/// An idle warm job.
#[derive(Clone, Debug)]
pub(crate) struct IdleJob {
    pub slot: TaskId,
    /// Its service's id (what the board watches).
    pub service: String,
    pub born: Instant,
}

/// One foreman's pool on a swarm.
pub(crate) struct SwarmPool {
    pub(super) classes: Vec<WarmClass>,
    /// This foreman (its lease owner): the label on what its pool makes.
    pub(super) owner: String,
    /// The database's digest (`docker::pool_db`): whose pools these are.
    pub(super) db: String,
    pub(super) state: Mutex<PoolState>,
    /// Rung when a claim or a death leaves a class short.
    pub(super) wake: tokio::sync::Notify,
}

#[derive(Default)]
pub(super) struct PoolState {
    /// Per class, oldest first.
    pub idle: Vec<VecDeque<IdleJob>>,
    /// Per class, being made now.
    pub creating: Vec<usize>,
    /// Every job this pool made and has not removed (idle, being made,
    /// claimed), by name: the sweeper leaves these alone.
    pub known: HashSet<String>,
    /// Per class, when launches it would serve came (warm or cold).
    pub demand: Vec<VecDeque<Instant>>,
    pub last_claim: Option<Instant>,
    /// The service id of each job made (idle or claimed), by slot.
    pub services: std::collections::HashMap<TaskId, String>,
}

impl SwarmPool {
    pub fn new(classes: Vec<WarmClass>, owner: String, db: String) -> SwarmPool {
        let n = classes.len();
        SwarmPool {
            classes,
            owner,
            db,
            state: Mutex::new(PoolState {
                idle: (0..n).map(|_| VecDeque::new()).collect(),
                creating: vec![0; n],
                demand: (0..n).map(|_| VecDeque::new()).collect(),
                ..Default::default()
            }),
            wake: tokio::sync::Notify::new(),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle job of the first class that is exactly `needs`', taken for
    /// task `id`; None: the task launches cold. A class holding a set-up
    /// never serves here (a swarm has no set-up cache).
    pub fn claim(&self, id: TaskId, needs: &WarmNeeds) -> Option<IdleJob> {
        if needs.setup.is_some() {
            return self.missed();
        }
        let Some(class) = class_for(&self.classes, needs, |_, _| false).map(|c| c.index) else {
            return self.missed();
        };
        let claimed = {
            let mut st = self.lock();
            let now = Instant::now();
            st.demand[class].push_back(now);
            let idle = st.idle[class].pop_front();
            if idle.is_some() {
                st.last_claim = Some(now);
            }
            idle
        };
        self.wake.notify_one();
        let Some(job) = claimed else {
            crate::metrics::live().pool_claim(crate::metrics::Claim::Cold);
            info!(task_id = %id, class, "no warm job idle in the task's class; launching cold");
            return None;
        };
        crate::metrics::live().pool_claim(crate::metrics::Claim::Warm);
        info!(task_id = %id, class, job = %warm_name(job.slot), "warm job claimed");
        Some(job)
    }

    /// A launch no class serves (counted cold).
    pub fn missed(&self) -> Option<IdleJob> {
        crate::metrics::live().pool_claim(crate::metrics::Claim::Cold);
        None
    }

    /// How many jobs class `i` should keep idle now.
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

    /// When refills may start again after a claim (None: now).
    pub(super) fn lull_ends(&self) -> Option<Instant> {
        let now = Instant::now();
        self.lock()
            .last_claim
            .map(|t| t + CLAIM_LULL)
            .filter(|end| *end > now)
    }

    /// Idle jobs, every class.
    pub fn idle(&self) -> usize {
        self.lock().idle.iter().map(VecDeque::len).sum()
    }

    /// Whether this pool made `name` and has not removed it.
    pub fn knows(&self, name: &str) -> bool {
        self.lock().known.contains(name)
    }

    /// A claimed job went with its task.
    pub fn forget(&self, name: &str) {
        let mut st = self.lock();
        st.known.remove(name);
        if let Some(slot) = slot_of_name(name) {
            st.services.remove(&slot);
        }
    }

    /// Job `slot` taken out of the idle ones, if it was idle (not
    /// claimed).
    pub fn take_idle(&self, slot: TaskId) -> Option<IdleJob> {
        let mut st = self.lock();
        st.idle.iter_mut().find_map(|q| {
            let at = q.iter().position(|j| j.slot == slot)?;
            q.remove(at)
        })
    }

    /// The service id of job `slot`, made by this pool.
    pub fn service_of(&self, slot: TaskId) -> Option<String> {
        self.lock().services.get(&slot).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warm_jobs_name_gives_its_slot_back() {
        let slot = TaskId::new();
        let name = warm_name(slot);
        assert!(name.starts_with("saheeli-pool-"));
        assert_eq!(slot_of_name(&name), Some(slot));
        assert_eq!(slot_of_name("saheeli-pool-xyz"), None);
        assert_eq!(slot_of_name(&format!("saheeli-{slot}-abcd1234")), None);
    }

    #[test]
    fn a_claim_takes_an_idle_job_of_the_tasks_class_once() {
        let f: crate::config::ConfigFile =
            serde_yaml::from_str("pool:\n  - { size: 1 }\n").unwrap();
        let pool = SwarmPool::new(f.warm_classes(), "me".into(), "db".into());
        let t = &f.task;
        let needs = WarmNeeds {
            image: f.image.clone(),
            network: t.network,
            memory: t.memory.0,
            cpus: t.cpus,
            pids: t.pids,
            disk: t.disk.0,
            setup: None,
        };
        assert!(pool.claim(TaskId::new(), &needs).is_none(), "none idle");
        let slot = TaskId::new();
        pool.lock().idle[0].push_back(IdleJob {
            slot,
            service: "sid".into(),
            born: Instant::now(),
        });
        let other = WarmNeeds {
            memory: t.memory.0 * 2,
            ..needs.clone()
        };
        assert!(pool.claim(TaskId::new(), &other).is_none(), "not its class");
        assert_eq!(
            pool.claim(TaskId::new(), &needs).map(|j| j.slot),
            Some(slot)
        );
        assert!(pool.claim(TaskId::new(), &needs).is_none(), "used once");
        assert!(pool.lull_ends().is_some());
    }
}
