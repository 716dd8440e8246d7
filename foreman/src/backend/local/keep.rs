//! Keeping the pool warm: each class refilled to its size in the
//! background (a few servos made at once, only while admission's breaker
//! is closed, and only in a lull between warm claims once the claimed
//! servos made their first model call, so refills never
//! crowd out the launches they are there to speed up), idle servos older
//! than `max_idle` replaced, one that dies while idle removed and
//! replaced after a back-off that grows with each death in a row in its
//! class; on stop every idle servo goes. Sweeping what a stopped foreman's pool left is the sweeper's
//! decision (`reconciler::sweep`); listing and removing it is here.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use saheeli_protocol::TaskId;
use saheeli_protocol::attempt::Backoff;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Local;
use super::pool::{Idle, ORPHAN_SLOT_AGE, Pool, remove_warm, slot_name, slot_of, socket_name};
use crate::backend::docker;
use crate::door::WarmSocket;

/// Whether admission lets the pool make servos now.
pub(crate) type Pace = Arc<dyn Fn() -> bool + Send + Sync>;

/// Servos made at once (each is a volume, a create and a start).
const REFILL_AT_ONCE: usize = 4;
/// The wait before a class whose servo died idle is refilled (a servo
/// that cannot start, say a cached set-up that will not unpack, would
/// otherwise be replaced at once, over and over): 1 s, doubling, 60 s at
/// most; after twice that with no death the count starts again.
const DIED_IDLE_BACKOFF: Backoff =
    Backoff::new(Duration::from_secs(1), 2.0, Duration::from_secs(60));
/// How often the keeper looks even when nothing rang.
const LOOK_EVERY: Duration = Duration::from_millis(500);

impl Local {
    /// Keeps the pool warm until `stop`, then removes its idle servos
    /// (claimed ones are their tasks'). No pool: returns at once.
    pub async fn keep_warm(&self, pace: Pace, stop: CancellationToken) {
        let Some(pool) = self.pool.clone() else {
            return;
        };
        info!(classes = pool.classes.len(), "keeping the pool warm");
        let mut making: JoinSet<(usize, anyhow::Result<Idle>)> = JoinSet::new();
        let mut watching: JoinSet<String> = JoinSet::new();
        let mut failures = 0u32;
        let mut calm_until = Instant::now();
        let mut deaths = Deaths::new(pool.classes.len());
        loop {
            self.expire(&pool);
            // A burst of claims goes first: refills wait for its lull and
            // for its servos to get going.
            let lull = pool.lull_ends();
            if lull.is_none() && pace() && Instant::now() >= calm_until {
                for class in 0..pool.classes.len() {
                    if deaths.calm(class) {
                        continue;
                    }
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
                        Ok(idle) => {
                            failures = 0;
                            let (d, name) = (self.docker.clone(), idle.name.clone());
                            watching.spawn(async move {
                                let _ = docker::wait(&d, &name).await;
                                name
                            });
                            pool.lock().idle[class].push_back(idle);
                            pool.publish();
                        }
                        Err(e) => {
                            failures += 1;
                            let pause = Duration::from_millis(250 << failures.min(7));
                            calm_until = Instant::now() + pause;
                            warn!(class, error = %format!("{e:#}"), pause_ms = pause.as_millis() as u64, "making a warm servo failed");
                        }
                    }
                }
                Some(dead) = watching.join_next() => {
                    if let Ok(name) = dead
                        && let Some(class) = self.died_idle(&pool, &name).await
                    {
                        let pause = deaths.died(class);
                        crate::metrics::live().pool_died_idle();
                        warn!(servo = %name, class, pause_ms = pause.as_millis() as u64, "a warm servo died while idle; its class refills after a pause");
                    }
                }
                _ = pool.wake.notified() => {}
                _ = tokio::time::sleep(lull.map_or(LOOK_EVERY, |t| t.saturating_duration_since(Instant::now()))) => {}
                _ = stop.cancelled() => break,
            }
        }
        // Those being made are waited for, then every idle one goes.
        while let Some(made) = making.join_next().await {
            if let Ok((class, made)) = made {
                pool.lock().creating[class] -= 1;
                if let Ok(idle) = made {
                    pool.lock().idle[class].push_back(idle);
                }
            }
        }
        watching.abort_all();
        let idle: Vec<Idle> = pool
            .lock()
            .idle
            .iter_mut()
            .flat_map(|q| q.drain(..))
            .collect();
        pool.publish();
        info!(idle = idle.len(), "removing the idle warm servos");
        let removals = idle.into_iter().map(|i| self.discard(&pool, i));
        futures_util::future::join_all(removals).await;
    }

    /// One warm servo of class `class`, started and waiting for a claim.
    async fn make(&self, pool: &Arc<Pool>, class: usize) -> anyhow::Result<Idle> {
        let c = &pool.classes[class];
        let slot = TaskId::new();
        let name = slot_name(slot);
        let sock = socket_name(&name).expect("a slot's name has a socket");
        pool.lock().known.insert(name.clone());
        let d = &self.docker;
        let db = docker::pool_db(&self.cfg.database());
        let labels = docker::pool_labels(&db, &pool.owner, slot, class);
        let mut socket = None;
        let mut held = None;
        let made = async {
            let workspace = self.make_home(&name, c.disk, labels.clone()).await?;
            let s = socket.insert(WarmSocket::bind(&pool.run_dir, &sock, false)?);
            // Its end waits for the servos claimed beside it to get going
            // (weakly: the pool holds its sockets).
            let weak = Arc::downgrade(pool);
            s.hold_ends_for(Arc::new(move || {
                weak.upgrade().is_some_and(|p| p.starts_pending())
            }));
            let mut env = vec![format!("{}=1", saheeli_protocol::remote::warm::WARM_ENV)];
            let run = self.servo_image(&c.image).await;
            // A class holding a cached set-up (issue 50): its host copy
            // bound in, unpacked by the servo while it waits for a claim.
            let mut binds = Vec::new();
            if let Some(prefix) = &c.setup_key {
                let (setup, file) = self.class_setup(prefix, &c.image, &name).await?;
                env.push(docker::setup_env());
                binds.push((file, saheeli_protocol::setup::TAR_PATH.to_string()));
                held = Some(setup);
            }
            docker::create_servo(
                d,
                docker::ServoContainer {
                    name: name.clone(),
                    labels,
                    image: &run,
                    workspace: &workspace,
                    gateway_dir: Some(s.dir()),
                    env,
                    network: c.network,
                    memory: c.memory,
                    cpus: c.cpus,
                    pids: c.pids,
                    binds,
                    working_dir: None,
                    root_agent: false,
                },
            )
            .await?;
            docker::start(d, &name).await
        }
        .await;
        if held.is_some() {
            // Held by the container's mount now, or never needed.
            self.setup_cache().unbind(&name);
        }
        match made {
            Ok(()) => {
                if let Some(setup) = held {
                    pool.lock().setups[class] = Some(setup);
                }
                Ok(Idle {
                    name,
                    socket: socket.expect("bound before the container"),
                    born: Instant::now(),
                })
            }
            Err(e) => {
                if let Some(s) = socket {
                    s.discard().await;
                }
                remove_warm(d, &self.cfg, &name, false).await;
                pool.forget(&name);
                Err(e)
            }
        }
    }

    /// Idle servos past their class's `max_idle` go (the refill replaces them).
    fn expire(&self, pool: &Arc<Pool>) {
        let mut old = Vec::new();
        {
            let mut st = pool.lock();
            for (class, q) in st.idle.iter_mut().enumerate() {
                let max = pool.classes[class].max_idle;
                while q.front().is_some_and(|i| i.born.elapsed() >= max) {
                    old.extend(q.pop_front());
                }
            }
        }
        if old.is_empty() {
            return;
        }
        pool.publish();
        for idle in old {
            info!(servo = %idle.name, "warm servo idle past max_idle; replacing it");
            let (me, pool) = (self.clone(), pool.clone());
            tokio::spawn(async move { me.discard(&pool, idle).await });
        }
    }

    /// A watched servo's container stopped: if it was idle, it died idle
    /// and is removed; its class.
    async fn died_idle(&self, pool: &Pool, name: &str) -> Option<usize> {
        let idle = {
            let mut st = pool.lock();
            st.idle.iter_mut().enumerate().find_map(|(class, q)| {
                let at = q.iter().position(|i| i.name == name)?;
                q.remove(at).map(|i| (class, i))
            })
        };
        // Not idle: claimed, and its task's supervisor watches it.
        let (class, idle) = idle?;
        pool.publish();
        self.discard(pool, idle).await;
        pool.wake.notify_one();
        Some(class)
    }

    /// Removes an idle servo and forgets it.
    async fn discard(&self, pool: &Pool, idle: Idle) {
        idle.socket.discard().await;
        remove_warm(&self.docker, &self.cfg, &idle.name, false).await;
        pool.forget(&idle.name);
    }

    /// Every warm servo on the daemon (containers and volumes by name)
    /// and every slot workspace on this host that no container has (its
    /// owner unknown: ""), and whether this foreman's pool knows it (it is
    /// idle, being made, or claimed by one of its tasks).
    pub async fn pool_leftovers(&self) -> anyhow::Result<BTreeMap<String, (String, bool)>> {
        let db = docker::pool_db(&self.cfg.database());
        let (containers, volumes) = docker::pool_labelled(&self.docker, &db).await?;
        let mut left: BTreeMap<String, (String, bool)> = containers
            .into_iter()
            .chain(volumes)
            .map(|o| (o.name, (o.owner, false)))
            .collect();
        let state_dir = self.cfg.state_dir();
        let slots =
            tokio::task::spawn_blocking(move || crate::backend::disk::present_slots(&state_dir))
                .await
                .unwrap_or_default();
        for (slot, _, age) in slots {
            if let Some(name) = slot_of(&slot)
                && age >= ORPHAN_SLOT_AGE
            {
                left.entry(name).or_insert_with(|| (String::new(), false));
            }
        }
        for (name, (_, mine)) in left.iter_mut() {
            *mine = self.pool.as_ref().is_some_and(|p| p.knows(name));
        }
        Ok(left)
    }

    /// Removes warm servos a stopped foreman left (by name).
    pub async fn remove_pool_leftovers(&self, names: &[String]) {
        for name in names {
            info!(servo = %name, "removing a warm servo a stopped foreman left");
            remove_warm(&self.docker, &self.cfg, name, true).await;
        }
    }
}

/// Per class, the warm servos that died idle lately, and until when the
/// class is not refilled ([`DIED_IDLE_BACKOFF`]).
struct Deaths {
    /// Per class: deaths in a row, the last one's time, refills resume at.
    classes: Vec<(u32, Option<Instant>, Instant)>,
}

impl Deaths {
    fn new(n: usize) -> Deaths {
        Deaths {
            classes: vec![(0, None, Instant::now()); n],
        }
    }

    /// Whether class `class` waits out a back-off now.
    fn calm(&self, class: usize) -> bool {
        Instant::now() < self.classes[class].2
    }

    /// A servo of class `class` died idle: the pause before its refill.
    fn died(&mut self, class: usize) -> Duration {
        let now = Instant::now();
        let (count, last, until) = &mut self.classes[class];
        if last.is_some_and(|t| now - t > DIED_IDLE_BACKOFF.max.0 * 2) {
            *count = 0;
        }
        *count += 1;
        *last = Some(now);
        let pause = DIED_IDLE_BACKOFF.delay(*count, fastrand::f64());
        *until = now + pause;
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_death_in_a_row_pauses_its_class_longer() {
        let mut d = Deaths::new(2);
        assert!(!d.calm(0) && !d.calm(1));
        let pauses: Vec<Duration> = (0..8).map(|_| d.died(0)).collect();
        // 1 s, 2 s, 4 s… within ±20 %, at most 60 s.
        for (n, p) in pauses.iter().enumerate().take(5) {
            let base = 1u64 << n;
            assert!(
                *p >= Duration::from_millis(base * 800) && *p <= Duration::from_millis(base * 1200),
                "death {}: {p:?}",
                n + 1
            );
        }
        assert!(pauses.iter().all(|p| *p <= Duration::from_secs(60)));
        assert!(d.calm(0), "its class waits");
        assert!(!d.calm(1), "another class does not");
    }
}
