//! The swarm as an engine: its handles, a launch's token and suffix, the
//! job service created (Swarm starts it).

use std::path::Path;
use std::sync::Arc;

use bollard::Docker;
use saheeli_protocol::TaskId;
use tracing::{info, warn};

use crate::backend::facts::{EngineError, Launched, Prepared, Reach, Servo, ServoKind};
use crate::config::Config;
use crate::spec::TaskSpec;

/// A swarm: its manager, its address (for reaching the nodes alike), and
/// the TCP gateway the remote servos call.
#[derive(Clone)]
pub(crate) struct Swarm {
    pub manager: Docker,
    pub manager_addr: super::Endpoint,
    pub(super) network: String,
    pub(super) gateway_url: String,
    pub(super) hub: crate::door::Hub,
    /// What launch tokens are derived from (`token_key`).
    pub(super) key: Arc<Vec<u8>>,
    /// Removals of ended launches, run after their slot is free; `serve`
    /// waits for them before it exits.
    pub(crate) cleanups: tokio_util::task::TaskTracker,
    pub(super) cfg: Arc<Config>,
    pub(super) secrets: Arc<Vec<(String, String)>>,
    /// What Swarm says of every watched job, in one look.
    pub(super) board: super::board::Board,
    /// Warm jobs (`pool:`, issue 53), when configured.
    pub(super) pool: Option<Arc<super::pool::SwarmPool>>,
}

/// What a swarm engine is made of (`swarm:` in config.yaml, resolved).
pub(crate) struct SwarmParts {
    pub manager: Docker,
    pub manager_addr: super::Endpoint,
    pub network: String,
    pub gateway_url: String,
    pub hub: crate::door::Hub,
    pub key: Vec<u8>,
}

impl Swarm {
    pub fn new(parts: SwarmParts, cfg: Config, secrets: Vec<(String, String)>) -> Swarm {
        Swarm {
            manager_addr: parts.manager_addr,
            network: parts.network,
            gateway_url: parts.gateway_url,
            hub: parts.hub,
            key: Arc::new(parts.key),
            cleanups: tokio_util::task::TaskTracker::new(),
            cfg: Arc::new(cfg),
            secrets: Arc::new(secrets),
            board: super::board::Board::new(parts.manager.clone()),
            manager: parts.manager,
            pool: None,
        }
    }

    /// With the pool `pool:` configures (none: every launch is cold),
    /// its jobs labelled as this foreman's (`owner`, its lease owner).
    pub fn with_pool(mut self, owner: &str) -> Swarm {
        let classes = self.cfg.file.warm_classes();
        if !classes.is_empty() {
            let db = crate::backend::docker::pool_db(&self.cfg.database());
            self.pool = Some(Arc::new(super::pool::SwarmPool::new(
                classes,
                owner.to_string(),
                db,
            )));
        }
        self
    }

    /// A launch's suffix and token; a parked task's kept workspace must be
    /// there (starting over from the submitted workspace would silently
    /// lose the work and the session the task parked with).
    pub fn prepare(
        &self,
        id: TaskId,
        parked: bool,
        spec: &TaskSpec,
    ) -> Result<Prepared, EngineError> {
        let kept = crate::inputs::parked_dir(&self.cfg.state_dir(), id);
        if parked && !kept.is_dir() {
            return Err(EngineError::Gone(format!(
                "the workspace this task parked with (`{}`) is gone, so it cannot go on from its session; submit the task again",
                kept.display()
            )));
        }
        if let Some(job) = self.claim_warm(id, parked, spec) {
            return Ok(self.prepared_warm(job.slot));
        }
        let suffix = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
        Ok(self.prepared(id, suffix))
    }

    /// An idle warm job of the task's class (issue 53), never for a parked
    /// task (it goes on from the workspace it parked with) or one a warm
    /// job cannot be (its own image, the oracle's solution, a set-up).
    fn claim_warm(
        &self,
        id: TaskId,
        parked: bool,
        spec: &TaskSpec,
    ) -> Option<super::pool::IdleJob> {
        let pool = self.pool.as_ref()?;
        if parked || spec.image.is_some() || spec.solution.is_some() || spec.root_agent() {
            return pool.missed();
        }
        let needs = crate::config::WarmNeeds {
            image: crate::spec::image_for(&self.cfg, &spec.agent),
            network: spec.network,
            memory: spec.memory,
            cpus: spec.cpus,
            pids: spec.pids,
            disk: spec.disk.unwrap_or(self.cfg.file.task.disk.0),
            setup: (!spec.setup.is_empty()).then(|| crate::config::SetupNeeds {
                commands: spec.setup.clone(),
                files_digest: spec.setup_plan.files_digest.clone(),
            }),
        };
        pool.claim(id, &needs)
    }

    /// How warm job `slot` reaches its gateway: as its slot, by its token.
    pub(super) fn prepared_warm(&self, slot: TaskId) -> Prepared {
        Prepared {
            reach: Reach::Remote {
                hub: self.hub.clone(),
                token: super::token(&self.key, slot, super::pool::WARM_SUFFIX),
                slot: Some(slot),
            },
            suffix: None,
        }
    }

    /// How launch `suffix` of task `id` reaches its gateway.
    pub(super) fn prepared(&self, id: TaskId, suffix: String) -> Prepared {
        Prepared {
            reach: Reach::Remote {
                hub: self.hub.clone(),
                token: super::token(&self.key, id, &suffix),
                slot: None,
            },
            suffix: Some(suffix),
        }
    }

    /// Starts pulling the agents' images onto every node (`prepull`).
    /// With an overlay, keeps its sandbox up on every node, with the image
    /// pulled there (`overlay`; a swarm that refuses only costs speed).
    /// With `network: none`, the gateway's relay on every node (`relay`),
    /// which jobs cannot run without, on nodes whose engines have no
    /// default bridge.
    pub async fn check_image(&self) -> Result<(), EngineError> {
        // The agents' images onto every node, in the background.
        tokio::spawn(super::prepull::pull_everywhere(
            self.manager.clone(),
            self.manager_addr.clone(),
            super::prepull::agent_images(&self.cfg),
        ));
        if self.network == super::relay::NONE {
            let bridged =
                super::relay::nodes_with_a_bridge(&self.manager, &self.manager_addr).await;
            if !bridged.is_empty() {
                return Err(EngineError::Other(anyhow::anyhow!(
                    "`swarm.network: none`, but the engine of node(s) {} has a default bridge, \
                     which a job with no network would join: set `\"bridge\": \"none\"` in \
                     their daemon.json, or use an attachable overlay as `swarm.network`",
                    bridged.join(", ")
                )));
            }
            let gateway = self.gateway_url.trim_start_matches("http://");
            super::relay::keep(&self.manager, &self.cfg.file.image, gateway)
                .await
                .map_err(EngineError::Other)?;
            return Ok(());
        }
        if let Err(e) =
            super::overlay::keep(&self.manager, &self.cfg.file.image, &self.network).await
        {
            warn!(error = %format!("{e:#}"), "no overlay keeper: each node sets the overlay up again after its last task");
        }
        Ok(())
    }

    /// Creates the task's job service (Swarm starts it on some node).
    pub async fn launch(
        &self,
        id: TaskId,
        spec: &TaskSpec,
        prepared: Prepared,
        _gateway_dir: Option<&Path>,
    ) -> Result<Launched, EngineError> {
        if let Reach::Remote {
            slot: Some(slot), ..
        } = &prepared.reach
        {
            return Ok(self.launch_warm(id, *slot, prepared.clone()));
        }
        let (Reach::Remote { token, .. }, Some(suffix)) = (&prepared.reach, &prepared.suffix)
        else {
            return Err(EngineError::Other(anyhow::anyhow!(
                "a swarm launch needs a token and a suffix (prepared by the swarm engine)"
            )));
        };
        // A third-party agent runs in its own image (`agents:`), pushed
        // to the swarm's registry as the servo's is.
        let image = crate::spec::image_for(&self.cfg, &spec.agent);
        let plan = super::ServicePlan::task(
            id,
            suffix,
            spec,
            &image,
            &self.network,
            self.gateway_url.clone(),
            token,
            self.cfg.file.stop_grace,
        );
        let l = super::create_service(&self.manager, &plan).await?;
        info!(task_id = %id, service = %l.service_id, "job service created");
        Ok(Launched {
            servo: Servo {
                task: id,
                id: l.service_id,
                prepared,
                kind: ServoKind::Swarm {
                    objects: l.objects,
                    seen: Arc::default(),
                },
            },
            engine_time: None,
            setup: None,
        })
    }
}

impl Swarm {
    /// A warm job claimed for task `id`: its servo runs on a node already,
    /// so nothing is made; the row records the job's name.
    fn launch_warm(&self, id: TaskId, slot: TaskId, prepared: Prepared) -> Launched {
        let name = super::warm_name(slot);
        // The board watches a service by its id: the pool knew it.
        let service = self
            .pool
            .as_ref()
            .and_then(|p| p.service_of(slot))
            .unwrap_or_else(|| name.clone());
        info!(task_id = %id, job = %name, "warm job given the task");
        Launched {
            servo: Servo {
                task: id,
                id: name,
                prepared,
                kind: ServoKind::Swarm {
                    objects: super::LaunchObjects::warm(id, slot, &service),
                    seen: Arc::default(),
                },
            },
            engine_time: None,
            setup: None,
        }
    }

    /// Gives a claimed warm job its task; a cold job starts on its own.
    pub fn start(&self, servo: &Servo) {
        if let Reach::Remote {
            slot: Some(slot), ..
        } = &servo.prepared.reach
        {
            self.hub.release_warm(*slot);
        }
    }
}
