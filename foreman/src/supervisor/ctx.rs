//! What a serve loop shares with the supervisors it spawns: the context,
//! what a supervisor hands back, and its reports to admission.

use std::sync::{Arc, Mutex};

use saheeli_protocol::TaskId;
use tokio::time::Instant;
use tracing::debug;

use crate::admission::{Report, log_change};
use crate::backend::TaskEngine;
use crate::config::Config;
use crate::llm::Upstream;
use crate::state::TaskState;
use crate::store::{DbError, Store};

/// What a serve loop shares with its task supervisors.
pub(crate) struct Ctx {
    pub cfg: Config,
    /// This foreman's lease on the tasks it runs.
    pub lease: crate::store::Lease,
    /// Where the servos run.
    pub engine: crate::backend::Engine,
    pub store: Arc<Mutex<Store>>,
    pub upstream: Arc<Upstream>,
    /// Where the task sockets are served, and each one's connection cap.
    pub sockets: crate::door::Sockets,
    /// Every transition, for subscribers (fed from the event trail).
    pub bus: crate::events::Bus,
    /// The gateways' connection for the human desk: its own, so that the
    /// loop sees their writes (a task starting to wait frees a slot).
    pub desk_store: Arc<Mutex<Store>>,
    /// What `GET /metrics` renders (`metrics.scrape()`).
    pub metrics: crate::metrics::Metrics,
    /// How many tasks may run now, and the circuit breaker.
    pub admission: Mutex<crate::admission::Admission>,
}

impl Ctx {
    /// What a task's routes are built from (each route takes its own
    /// settings from the spec: `routes::app`).
    pub fn route_plan(
        &self,
        spec: &crate::spec::TaskSpec,
        waiting: Arc<std::sync::atomic::AtomicBool>,
        engine: TaskEngine,
        priority: i64,
    ) -> crate::routes::Plan {
        crate::routes::Plan {
            store: self.desk_store.clone(),
            lease: self.lease.clone(),
            bus: self.bus.clone(),
            waiting,
            spec: spec.clone(),
            engine,
            cfg: self.cfg.clone(),
            priority,
        }
    }

    /// Runs a store operation off the async threads.
    /// Its error is typed: a caller branches on `DbError::lease_lost`.
    pub async fn db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> Result<T, crate::store::StoreError> + Send + 'static,
    ) -> Result<T, DbError> {
        let store = self.store.clone();
        let r = tokio::task::spawn_blocking(move || {
            let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut s)
        })
        .await??;
        Ok(r)
    }

    /// What one launch told about the daemon.
    pub fn report_launch(&self, id: TaskId, report: Report) {
        if let Report::DaemonFailed(fault) = report {
            crate::metrics::live().launch_failed(fault.into());
        }
        let mut a = self.admission.lock().unwrap_or_else(|p| p.into_inner());
        let before = a.limit();
        if let Some(c) = a.report(Instant::now(), report) {
            log_change(&a, c);
        } else if a.limit() != before {
            debug!(task_id = %id, limit = a.limit(), "admission: limit raised");
        }
    }
}

/// What a supervisor reports: the terminal state, or None when it handed
/// the task back (put it back in the queue) without finishing it.
pub(crate) type Joined = (TaskId, Option<TaskState>);

/// Infrastructure retries of a task whose servo vanished.
pub(crate) const MAX_REQUEUES: i64 = 3;
