//! One look at the swarm for every watched job: a loop asks the manager
//! for the tasks of all the services being watched and for its nodes, in
//! two calls every 200 ms however many tasks run, and each watcher reads
//! its own service's [`Observed`] from the latest look. (Each watcher
//! asking for itself made two calls per task per look: 120 calls a second
//! at concurrency 12, on a manager whose node also runs tasks.)
//!
//! The loop starts with the first watcher and ends when the last is gone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use bollard::Docker;
use bollard::query_parameters::ListTasksOptionsBuilder;
use tokio::sync::watch;
use tracing::warn;

use super::observe::{Observed, Phase, nodes_by_id, phase_of};

/// How often Swarm is asked how its tasks are doing.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// The latest look: each watched service's task, or why there is none.
#[derive(Clone, Default)]
pub(crate) struct Look {
    pub seen: Arc<HashMap<String, Observed>>,
    /// The look failed (the manager not answering): watchers wait.
    pub failed: bool,
}

/// Shared by every clone of a swarm engine.
#[derive(Clone)]
pub(crate) struct Board(Arc<Shared>);

struct Shared {
    manager: Docker,
    inner: Mutex<Inner>,
}

struct Inner {
    /// Watchers per service.
    watched: HashMap<String, usize>,
    looks: Option<watch::Sender<Look>>,
}

/// A watcher of one service; unwatches when dropped.
pub(crate) struct Watching {
    board: Board,
    pub service: String,
    pub looks: watch::Receiver<Look>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        let mut inner = self.board.0.inner.lock().unwrap();
        if let Some(n) = inner.watched.get_mut(&self.service) {
            *n -= 1;
            if *n == 0 {
                inner.watched.remove(&self.service);
            }
        }
    }
}

impl Watching {
    /// The same service watched anew.
    pub fn again(&self) -> Watching {
        self.board.watch(&self.service)
    }
}

impl Board {
    pub fn new(manager: Docker) -> Board {
        Board(Arc::new(Shared {
            manager,
            inner: Mutex::new(Inner {
                watched: HashMap::new(),
                looks: None,
            }),
        }))
    }

    /// Watches `service` (the loop starts if it is not running).
    pub fn watch(&self, service: &str) -> Watching {
        let mut inner = self.0.inner.lock().unwrap();
        *inner.watched.entry(service.to_string()).or_default() += 1;
        let looks = match &inner.looks {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = watch::channel(Look::default());
                inner.looks = Some(tx.clone());
                tokio::spawn(run(self.clone(), tx));
                rx
            }
        };
        Watching {
            board: self.clone(),
            service: service.to_string(),
            looks,
        }
    }

    fn services(&self) -> Vec<String> {
        self.0
            .inner
            .lock()
            .unwrap()
            .watched
            .keys()
            .cloned()
            .collect()
    }
}

/// Looks until nothing is watched, then ends (the next watcher starts
/// another loop).
async fn run(board: Board, tx: watch::Sender<Look>) {
    let mut tick = tokio::time::interval(LOOK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let services = board.services();
        if services.is_empty() {
            let mut inner = board.0.inner.lock().unwrap();
            if inner.watched.is_empty() {
                inner.looks = None;
                return;
            }
            continue;
        }
        let look = match look(&board.0.manager, &services).await {
            Ok(seen) => Look {
                seen: Arc::new(seen),
                failed: false,
            },
            Err(e) => {
                warn!(error = %format!("{e:#}"), "swarm not answering; asking again");
                Look {
                    seen: tx.borrow().seen.clone(),
                    failed: true,
                }
            }
        };
        tx.send_replace(look);
    }
}

/// The latest task of each of `services`, with its node's name and state.
async fn look(manager: &Docker, services: &[String]) -> anyhow::Result<HashMap<String, Observed>> {
    let ids: Vec<&str> = services.iter().map(String::as_str).collect();
    let opts = ListTasksOptionsBuilder::default()
        .filters(&HashMap::from([("service", ids)]))
        .build();
    let tasks = manager
        .list_tasks(Some(opts))
        .await
        .context("listing the swarm tasks of the watched job services")?;
    let nodes = nodes_by_id(manager).await?;
    let mut latest: HashMap<String, bollard::models::Task> = HashMap::new();
    for t in tasks {
        let Some(service) = t.service_id.clone() else {
            continue;
        };
        let index = |t: &bollard::models::Task| t.version.as_ref().and_then(|v| v.index);
        if latest.get(&service).is_none_or(|o| index(o) < index(&t)) {
            latest.insert(service, t);
        }
    }
    let mut seen = HashMap::new();
    for s in services {
        // A service with no task yet is waiting (so is one removed: its
        // watcher learns that from the stop it asked for).
        let o = match latest.remove(s) {
            Some(task) => {
                let node = task.node_id.as_ref().and_then(|n| nodes.get(n));
                let status = task.status.unwrap_or_default();
                let cs = status.container_status.unwrap_or_default();
                let down = node.filter(|n| n.1).map(|n| n.0.as_str());
                Observed {
                    phase: phase_of(status.state, cs.exit_code, status.err.as_deref(), down),
                    node: node.map(|n| n.0.clone()),
                    container: cs.container_id,
                }
            }
            None => Observed {
                phase: Phase::Waiting,
                node: None,
                container: None,
            },
        };
        seen.insert(s.clone(), o);
    }
    Ok(seen)
}
