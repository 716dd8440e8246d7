//! What comes back from a job service: the servo's own upload through
//! the gateway (into results, or kept as the parked workspace), and the
//! removals of ended launches, in the background.
//!
//! Parking on a swarm: the servo's volume is node-local, so what it parked
//! with comes home in its upload (marked parked) and is kept as the task's
//! parked workspace (`.saheeli/parked/<id>/`, never as results). The launch
//! after the reply serves that workspace to the new servo, on whichever
//! node, which goes on from the session in it.

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use saheeli_protocol::TaskId;
use tracing::{info, warn};

use super::Swarm;
use super::watch::parts;
use crate::backend::facts::{Collected, Seen, Servo, Workspace};
use crate::collect;
use crate::door::UploadFrom;
use crate::door::Uploaded;
use crate::inputs;

impl Swarm {
    /// Waits for the servo's upload (it uploads before it exits; a slow
    /// stream gets a moment) and puts it where the exit says it belongs.
    pub async fn collect(
        &self,
        servo: &Servo,
        upload: Option<&UploadFrom>,
        parked: bool,
        ask_oom: bool,
    ) -> Collected {
        let id = servo.task;
        let started = Instant::now();
        let grace = self.cfg.file.stop_grace;
        let uploaded = match upload {
            Some(u) => u.wait(grace + Duration::from_secs(5)).await,
            None => None,
        };
        // Asked of its node's engine before the container is removed.
        let Seen { node, container } = parts(servo).1.lock().unwrap().clone();
        let oom = match (node.as_deref(), container.as_deref()) {
            (Some(n), Some(c)) if ask_oom => {
                super::oom_killed(&self.manager, &self.manager_addr, n, c).await
            }
            _ => false,
        };
        let workspace = match uploaded {
            None => Workspace::Nothing,
            Some(u) => match self.settle_upload(id, u, parked).await {
                Ok(_) if parked => Workspace::Kept,
                r => Workspace::Results(r),
            },
        };
        Collected {
            workspace,
            oom,
            took: started.elapsed(),
        }
    }

    /// Puts an upload where the exit says it belongs: the parked workspace
    /// when the servo parked, else results. The servo's own word (its header)
    /// chose where it was extracted; the exit code decides.
    async fn settle_upload(
        &self,
        id: TaskId,
        uploaded: Uploaded,
        parked: bool,
    ) -> anyhow::Result<collect::Collected> {
        let upload = uploaded.map_err(|e| anyhow::anyhow!("the servo's upload: {e}"))?;
        if upload.parked == parked {
            return Ok(upload.collected);
        }
        let kept = inputs::parked_dir(&self.cfg.state_dir(), id);
        let results = self.cfg.results_dir().join(id.to_string());
        let (from, to) = if parked {
            (results, inputs::new_parked_dir(&self.cfg.state_dir(), id)?)
        } else {
            (kept, results)
        };
        warn!(task_id = %id, parked, "the upload's parked mark and the exit disagree; moving it");
        let (secrets, cap) = (self.secrets.to_vec(), self.cfg.file.max_results_size.0);
        tokio::task::spawn_blocking(move || inputs::move_tree(&from, &to, &secrets, cap)).await?
    }

    /// A parked task's kept workspace, collected into `dest` (moved: the
    /// parked copy is gone after).
    pub async fn collect_kept(
        &self,
        id: TaskId,
        dest: &std::path::Path,
    ) -> anyhow::Result<collect::Collected> {
        self.remove_task(id).await;
        let kept = inputs::parked_dir(&self.cfg.state_dir(), id);
        anyhow::ensure!(
            kept.is_dir(),
            "no parked workspace `{}` is kept for this task",
            kept.display()
        );
        let dest = dest.to_path_buf();
        let (secrets, cap) = (self.secrets.to_vec(), self.cfg.file.max_results_size.0);
        tokio::task::spawn_blocking(move || inputs::move_tree(&kept, &dest, &secrets, cap)).await?
    }

    /// Removes the task's service, secret, containers and volumes.
    pub async fn remove_task(&self, id: TaskId) {
        match super::remove_task(&self.manager, &self.manager_addr, Some(id), &|_| false).await {
            Ok(0) => {}
            Ok(n) => warn!(task_id = %id, left = n, "swarm leftovers kept for the sweeper"),
            Err(e) => warn!(task_id = %id, error = %format!("{e:#}"), "swarm cleanup failed"),
        }
    }

    /// Removes an ended launch in the background (`serve` waits for it
    /// before it exits; what fails is left to the sweeper): its service,
    /// secret, container and volume, nothing of another launch.
    pub fn remove_later(&self, servo: Servo) {
        let (objects, seen) = parts(&servo);
        let (launch, node) = (objects.clone(), seen.lock().unwrap().node.clone());
        // A claimed warm job goes with its task: its pool forgets it once
        // it is removed (until then the sweeper leaves it alone).
        let pool = self.pool.clone().filter(|_| launch.slot.is_some());
        let (manager, addr) = (self.manager.clone(), self.manager_addr.clone());
        self.cleanups.spawn(async move {
            let failed = super::remove_launch(&manager, &addr, &launch, node.as_deref()).await;
            if let Some(pool) = pool {
                pool.forget(&launch.name);
            }
            if failed > 0 {
                warn!(task_id = %launch.task, left = failed, "swarm leftovers kept for the sweeper");
            }
        });
    }

    /// Services, secrets, and containers and volumes on every reachable
    /// node (a node that was Down keeps its own until it is back).
    pub async fn leftovers(&self) -> anyhow::Result<SwarmLeftovers> {
        let (engines, objects) = super::leftovers(&self.manager, &self.manager_addr).await?;
        Ok(SwarmLeftovers { engines, objects })
    }

    pub async fn remove_leftovers(&self, left: SwarmLeftovers, ended: &HashSet<String>) {
        let ended: Vec<_> = left
            .objects
            .into_iter()
            .filter(|(task, o)| {
                let is = ended.contains(&task.to_string());
                if is {
                    info!(task_id = %task, object = ?o, "removing a swarm leftover");
                }
                is
            })
            .collect();
        if !ended.is_empty() {
            super::remove_objects(&self.manager, &left.engines, &ended).await;
        }
    }
}

/// What carries Saheeli's labels on the swarm.
pub(crate) struct SwarmLeftovers {
    engines: Vec<(String, bollard::Docker)>,
    objects: Vec<(TaskId, super::Object)>,
}

impl SwarmLeftovers {
    pub fn tasks(&self) -> BTreeSet<String> {
        self.objects.iter().map(|(t, _)| t.to_string()).collect()
    }
}
