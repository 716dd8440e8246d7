//! Keeping the swarm's pool warm (issue 53): each class refilled to its
//! size in the background (a few jobs made at once, only while admission
//! lets the pool make servos, and a moment after the last claim), a job
//! counted idle once its servo runs on a node, idle jobs older than
//! `max_idle` replaced, one that ends while idle removed and replaced; on
//! stop every idle job goes. What a stopped foreman's pool left is listed
//! and removed here; deciding what goes is the sweeper's
//! (`reconciler::sweep`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListSecretsOptionsBuilder, ListServicesOptionsBuilder,
    ListVolumesOptionsBuilder,
};
use saheeli_protocol::TaskId;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Swarm;
use super::observe::Phase as Swarmed;
use super::pool::{IdleJob, SwarmPool, WARM_SUFFIX, slot_of_name, warm_name};
use super::service::{Job, ServicePlan};
use crate::backend::Pace;
use crate::backend::docker::{POOL_LABEL, POOL_OWNER_LABEL, POOL_SLOT_LABEL, pool_labels};

/// Jobs made at once (each a secret and a service).
const REFILL_AT_ONCE: usize = 4;
/// How often the keeper looks even when nothing rang.
const LOOK_EVERY: Duration = Duration::from_millis(500);
/// How often an idle job is asked for (removed by `saheeli gc`).
const ENDED_LOOK: Duration = Duration::from_secs(2);
/// How long a new job may take to run on a node before it is given up.
const START_PATIENCE: Duration = Duration::from_secs(120);

impl Swarm {
    /// Keeps the pool warm until `stop`, then removes its idle jobs
    /// (claimed ones are their tasks'). No pool: returns at once.
    pub async fn keep_warm(&self, pace: Pace, stop: CancellationToken) {
        let Some(pool) = self.pool.clone() else {
            return;
        };
        info!(
            classes = pool.classes.len(),
            "keeping the swarm's pool warm"
        );
        let mut making: JoinSet<(usize, anyhow::Result<IdleJob>)> = JoinSet::new();
        let mut watching: JoinSet<(TaskId, Option<IdleJob>)> = JoinSet::new();
        let mut failures = 0u32;
        let mut calm_until = Instant::now();
        loop {
            self.expire(&pool);
            let lull = pool.lull_ends();
            if lull.is_none() && pace() && Instant::now() >= calm_until {
                for class in 0..pool.classes.len() {
                    let target = pool.target(class);
                    loop {
                        let short = {
                            let mut st = pool.lock();
                            let have = st.idle[class].len() + st.creating[class];
                            let short = have < target && making.len() < REFILL_AT_ONCE;
                            if short {
                                st.creating[class] += 1;
                            }
                            short
                        };
                        if !short {
                            break;
                        }
                        let (me, pool) = (self.clone(), pool.clone());
                        making.spawn(async move { (class, me.make(&pool, class).await) });
                    }
                }
            }
            tokio::select! {
                Some(made) = making.join_next() => {
                    let Ok((class, made)) = made else { continue };
                    pool.lock().creating[class] -= 1;
                    match made {
                        Ok(job) => {
                            failures = 0;
                            info!(class, job = %warm_name(job.slot), "warm job idle");
                            let (me, watched, p) = (self.clone(), job.clone(), pool.clone());
                            watching.spawn(async move {
                                me.ended(&watched.service).await;
                                // Out of the idle ones at once: its node's
                                // other jobs die with it, and a task lost
                                // there and queued again must not claim one.
                                (watched.slot, p.take_idle(watched.slot))
                            });
                            pool.lock().idle[class].push_back(job);
                        }
                        Err(e) => {
                            failures += 1;
                            let pause = Duration::from_millis(250 << failures.min(7));
                            calm_until = Instant::now() + pause;
                            warn!(class, error = %format!("{e:#}"), pause_ms = pause.as_millis() as u64, "making a warm job failed");
                        }
                    }
                }
                Some(dead) = watching.join_next() => {
                    if let Ok((slot, Some(job))) = dead {
                        self.died_idle(&pool, slot, job).await;
                    }
                }
                _ = pool.wake.notified() => {}
                _ = tokio::time::sleep(lull.map_or(LOOK_EVERY, |t| t.saturating_duration_since(Instant::now()))) => {}
                _ = stop.cancelled() => break,
            }
        }
        while let Some(made) = making.join_next().await {
            if let Ok((class, made)) = made {
                pool.lock().creating[class] -= 1;
                if let Ok(job) = made {
                    pool.lock().idle[class].push_back(job);
                }
            }
        }
        watching.abort_all();
        let idle: Vec<IdleJob> = pool
            .lock()
            .idle
            .iter_mut()
            .flat_map(|q| q.drain(..))
            .collect();
        info!(idle = idle.len(), "removing the idle warm jobs");
        let removals = idle.into_iter().map(|j| self.discard(&pool, j));
        futures_util::future::join_all(removals).await;
    }

    /// One warm job of class `class`, its servo running on a node and
    /// waiting for a claim.
    async fn make(&self, pool: &Arc<SwarmPool>, class: usize) -> anyhow::Result<IdleJob> {
        let c = &pool.classes[class];
        let slot = TaskId::new();
        let name = warm_name(slot);
        pool.lock().known.insert(name.clone());
        let token = super::token(&self.key, slot, WARM_SUFFIX);
        // Known to the hub before its servo can ask.
        self.hub.add_warm(slot, token.clone());
        let plan = ServicePlan {
            job: Job::Warm {
                slot,
                labels: pool_labels(&pool.db, &pool.owner, slot, class),
            },
            image: &c.image,
            network: &self.network,
            gateway_url: self.gateway_url.clone(),
            token: &token,
            env: Vec::new(),
            memory: c.memory,
            cpus: c.cpus,
            pids: c.pids,
            stop_grace: self.cfg.file.stop_grace,
        };
        let made = async {
            let l = super::create_service(&self.manager, &plan).await?;
            self.running(&l.service_id).await?;
            anyhow::Ok(l.service_id)
        }
        .await;
        match made {
            Ok(service) => {
                pool.lock().services.insert(slot, service.clone());
                Ok(IdleJob {
                    slot,
                    service,
                    born: Instant::now(),
                })
            }
            Err(e) => {
                self.remove_warm(slot).await;
                pool.forget(&name);
                Err(e)
            }
        }
    }

    /// Waits until job service `service`'s servo runs on a node.
    async fn running(&self, service: &str) -> anyhow::Result<()> {
        let mut w = self.board.watch(service);
        let waited = tokio::time::timeout(START_PATIENCE, async {
            loop {
                if w.looks.changed().await.is_err() {
                    w = w.again();
                    continue;
                }
                let look = w.looks.borrow_and_update().clone();
                match look.seen.get(service).map(|o| o.phase.clone()) {
                    Some(Swarmed::Running) => return Ok(()),
                    Some(Swarmed::Exited(code)) => {
                        anyhow::bail!("the warm job exited ({code}) before any claim")
                    }
                    Some(Swarmed::Lost(why)) => anyhow::bail!("the warm job was lost: {why}"),
                    _ => {}
                }
            }
        })
        .await;
        waited.unwrap_or_else(|_| {
            anyhow::bail!(
                "the warm job did not run on a node within {}s",
                START_PATIENCE.as_secs()
            )
        })
    }

    /// Returns once job service `service` ended or is lost (seen in the
    /// board's look, the one its claiming task's supervisor would read), or
    /// is gone (a `saheeli gc` removes idle jobs).
    async fn ended(&self, service: &str) {
        let mut w = self.board.watch(service);
        let mut gone = tokio::time::interval(ENDED_LOOK);
        gone.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                changed = w.looks.changed() => {
                    if changed.is_err() {
                        w = w.again();
                        continue;
                    }
                    let look = w.looks.borrow_and_update().clone();
                    let phase = look.seen.get(service).map(|o| &o.phase);
                    if matches!(phase, Some(Swarmed::Exited(_) | Swarmed::Lost(_))) {
                        return;
                    }
                }
                _ = gone.tick() => {
                    if let Err(bollard::errors::Error::DockerResponseServerError {
                        status_code: 404, ..
                    }) = self.manager.inspect_service(service, None).await
                    {
                        return;
                    }
                }
            }
        }
    }

    /// Idle jobs past their class's `max_idle` go (the refill replaces them).
    fn expire(&self, pool: &Arc<SwarmPool>) {
        let mut old = Vec::new();
        {
            let mut st = pool.lock();
            for (class, q) in st.idle.iter_mut().enumerate() {
                let max = pool.classes[class].max_idle;
                while q.front().is_some_and(|j| j.born.elapsed() >= max) {
                    old.extend(q.pop_front());
                }
            }
        }
        for job in old {
            info!(job = %warm_name(job.slot), "warm job idle past max_idle; replacing it");
            let (me, pool) = (self.clone(), pool.clone());
            tokio::spawn(async move { me.discard(&pool, job).await });
        }
    }

    /// A watched job ended while idle (taken out of the idle ones already).
    async fn died_idle(&self, pool: &SwarmPool, slot: TaskId, job: IdleJob) {
        let said = self.last_words(slot).await;
        warn!(job = %warm_name(slot), servo = %said, "a warm job ended while idle; replacing it");
        self.discard(pool, job).await;
        pool.wake.notify_one();
    }

    /// The last lines a warm job's servo wrote to stderr (why it ended),
    /// from its container on whichever node.
    async fn last_words(&self, slot: TaskId) -> String {
        let label = format!("{POOL_SLOT_LABEL}={slot}");
        let f = HashMap::from([("label", vec![label.as_str()])]);
        for (_, d) in super::nodes::node_engines(&self.manager, &self.manager_addr).await {
            let opts = ListContainersOptionsBuilder::default()
                .all(true)
                .filters(&f)
                .build();
            let found = d.list_containers(Some(opts)).await.unwrap_or_default();
            let Some(id) = found.into_iter().find_map(|c| c.id) else {
                continue;
            };
            let opts = bollard::query_parameters::LogsOptionsBuilder::default()
                .stderr(true)
                .tail("3")
                .build();
            use futures_util::StreamExt;
            let lines: Vec<String> = d
                .logs(&id, Some(opts))
                .filter_map(|l| std::future::ready(l.ok().map(|l| l.to_string())))
                .collect()
                .await;
            return lines.concat().trim().chars().take(500).collect();
        }
        String::new()
    }

    /// Removes an idle job and forgets it.
    async fn discard(&self, pool: &SwarmPool, job: IdleJob) {
        self.remove_warm(job.slot).await;
        pool.forget(&warm_name(job.slot));
    }

    /// Removes a warm job: its service, secret, container and volume (on
    /// whichever node), and its slot on the hub.
    pub(super) async fn remove_warm(&self, slot: TaskId) {
        self.hub.remove_warm(slot);
        let failed = remove_warm_job(&self.manager, &self.manager_addr, slot).await;
        if failed > 0 {
            warn!(job = %warm_name(slot), left = failed, "warm job's leftovers kept for the sweeper");
        }
    }

    /// Every warm job of this database's pools on the swarm, by name: the
    /// owner its label names, and whether this foreman's pool knows it.
    pub async fn pool_leftovers(&self) -> anyhow::Result<BTreeMap<String, (String, bool)>> {
        let db = crate::backend::docker::pool_db(&self.cfg.database());
        let jobs = warm_jobs(&self.manager, &self.manager_addr, &db).await?;
        Ok(jobs
            .into_iter()
            .map(|(name, owner)| {
                let mine = self.pool.as_ref().is_some_and(|p| p.knows(&name));
                (name, (owner, mine))
            })
            .collect())
    }

    /// Removes warm jobs a stopped foreman left (by name).
    pub async fn remove_pool_leftovers(&self, names: &[String]) {
        for name in names {
            if let Some(slot) = slot_of_name(name) {
                info!(job = %name, "removing a warm job a stopped foreman left");
                self.remove_warm(slot).await;
            }
        }
    }

    /// Idle warm jobs now (None: no pool).
    pub fn pool_idle(&self) -> Option<usize> {
        self.pool.as_ref().map(|p| p.idle())
    }
}

/// Removes warm job `slot`: its service, secret, and its container and
/// volume on every reachable node. Returns how many could not be removed
/// now.
pub(crate) async fn remove_warm_job(
    manager: &bollard::Docker,
    manager_addr: &super::Endpoint,
    slot: TaskId,
) -> usize {
    let objects = super::LaunchObjects::warm(slot, slot, &warm_name(slot));
    super::remove_launch(manager, manager_addr, &objects, None).await
}

/// Every warm job database `db`'s foremen made on the swarm (services and
/// secrets through the manager, containers and volumes on every reachable
/// node), by name, with the owner its label names.
pub(crate) async fn warm_jobs(
    manager: &bollard::Docker,
    manager_addr: &super::Endpoint,
    db: &str,
) -> anyhow::Result<BTreeMap<String, String>> {
    let filter = format!("{POOL_LABEL}={db}");
    let f = HashMap::from([("label", vec![filter.as_str()])]);
    let mut left: BTreeMap<String, String> = BTreeMap::new();
    let mut note = |labels: Option<&HashMap<String, String>>| {
        let Some(l) = labels else { return };
        let slot = l
            .get(POOL_SLOT_LABEL)
            .and_then(|s| s.parse::<TaskId>().ok());
        if let Some(slot) = slot {
            let owner = l.get(POOL_OWNER_LABEL).cloned().unwrap_or_default();
            left.entry(warm_name(slot)).or_insert(owner);
        }
    };
    let services = manager
        .list_services(Some(
            ListServicesOptionsBuilder::default().filters(&f).build(),
        ))
        .await?;
    for s in &services {
        note(s.spec.as_ref().and_then(|s| s.labels.as_ref()));
    }
    let secrets = manager
        .list_secrets(Some(
            ListSecretsOptionsBuilder::default().filters(&f).build(),
        ))
        .await?;
    for s in &secrets {
        note(s.spec.as_ref().and_then(|s| s.labels.as_ref()));
    }
    for (_, d) in super::nodes::node_engines(manager, manager_addr).await {
        let opts = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&f)
            .build();
        for c in d.list_containers(Some(opts)).await.unwrap_or_default() {
            note(c.labels.as_ref());
        }
        let opts = ListVolumesOptionsBuilder::default().filters(&f).build();
        let vols = d
            .list_volumes(Some(opts))
            .await
            .ok()
            .and_then(|v| v.volumes);
        for v in vols.unwrap_or_default() {
            note(Some(&v.labels));
        }
    }
    Ok(left)
}
