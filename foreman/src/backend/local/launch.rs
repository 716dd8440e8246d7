//! From a prepared launch to a started container: workspace, container,
//! inputs, start.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bollard::Docker;
use saheeli_protocol::TaskId;

use super::pool::Pool;
use crate::backend::docker::{self, WorkspaceMount};
use crate::backend::facts::{EngineError, Launched, Prepared, Reach, Servo, ServoKind};
use crate::config::Config;
use crate::inputs;
use crate::spec::TaskSpec;
use crate::task::TaskImage;

/// A lock per task image being made (see `Local::builds`).
pub(crate) type BuildLocks = std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>;

/// This host's engine and what it needs of the configuration.
#[derive(Clone)]
pub(crate) struct Local {
    pub docker: Docker,
    pub(super) cfg: Arc<Config>,
    /// The keys collection redacts from workspaces.
    pub(super) secrets: Arc<Vec<(String, String)>>,
    /// Warm servos (`pool:`, issue 28), when configured.
    pub(super) pool: Option<Arc<Pool>>,
    /// Host copies of the images' servos, bound into their containers
    /// (`docker::ServoCopies`): when the daemon is on this host, as the
    /// workspace images say it is (`limits.disk_enforcement: loop`).
    pub(super) servos: Option<Arc<docker::ServoCopies>>,
    /// One build at a time of each task image (by what it is made from
    /// and its workdir): a suite's cases that share an image build it
    /// once, while different images build side by side.
    pub(super) builds: Arc<std::sync::Mutex<BuildLocks>>,
    /// Each task image's seed (`read_seed`), by its content-named tag.
    pub(super) seeds:
        Arc<std::sync::Mutex<std::collections::HashMap<String, Option<bytes::Bytes>>>>,
    /// What collected launches left, being removed off their tasks' path.
    pub(crate) cleanups: tokio_util::task::TaskTracker,
}

impl Local {
    pub fn new(docker: Docker, cfg: Config, secrets: Vec<(String, String)>) -> Local {
        let servos = (cfg.file.limits.disk_enforcement == crate::config::DiskEnforcement::Loop)
            .then(|| {
                let db = docker::pool_db(&cfg.database());
                Arc::new(docker::ServoCopies::new(
                    docker.clone(),
                    &cfg.state_dir(),
                    db,
                ))
            });
        Local {
            docker,
            cfg: Arc::new(cfg),
            secrets: Arc::new(secrets),
            pool: None,
            servos,
            builds: Arc::default(),
            seeds: Arc::default(),
            cleanups: tokio_util::task::TaskTracker::new(),
        }
    }

    /// What a servo container of `image` runs: the image by id with its
    /// servo's host copy bound in, or (no copies here) the image as named.
    pub(super) async fn servo_image(&self, image: &str) -> docker::ServoImage {
        match &self.servos {
            Some(copies) => copies.resolve(image).await,
            None => docker::ServoImage::own(image),
        }
    }

    /// With the pool `pool:` configures (none: every launch is cold),
    /// its servos labelled as this foreman's (`owner`, its lease owner).
    pub fn with_pool(mut self, owner: &str) -> Local {
        let classes = self.cfg.file.warm_classes();
        if !classes.is_empty() {
            let run_dir = self.cfg.run_dir();
            self.pool = Some(Arc::new(Pool::new(classes, owner.to_string(), run_dir)));
        }
        self
    }

    /// How the servo of a new launch reaches its gateway: a warm servo's
    /// socket when one of the task's class is idle (never for a parked
    /// task: it goes on from its kept volume), else a new socket.
    pub fn prepare(&self, id: TaskId, parked: bool, spec: &TaskSpec) -> Prepared {
        let Some(pool) = &self.pool else {
            return Prepared::socket();
        };
        // A task in its own image, with the oracle's solution bound in or
        // a root agent is never a warm servo's: those run the servo image
        // as is, their agent as uid 1000. A set-up is only when a class
        // holds it cached, and nothing else must run on its reuse (no
        // `maintenance:`; not a retry that goes on from its workspace).
        let setup = !spec.setup.is_empty();
        if parked
            || spec.image.is_some()
            || spec.solution.is_some()
            || spec.root_agent()
            || (setup && !self.warm_setup_allowed(id, spec))
        {
            pool.missed();
            return Prepared::socket();
        }
        let needs = crate::config::WarmNeeds {
            image: crate::spec::image_for(&self.cfg, &spec.agent),
            network: spec.network,
            memory: spec.memory,
            cpus: spec.cpus,
            pids: spec.pids,
            disk: spec.disk.unwrap_or(self.cfg.file.task.disk.0),
            setup: setup.then(|| crate::config::SetupNeeds {
                commands: spec.setup.clone(),
                files_digest: spec.setup_plan.files_digest.clone(),
            }),
        };
        match pool.claim(id, &needs) {
            Some(warm) => Prepared {
                reach: Reach::Warm(warm),
                suffix: None,
            },
            None => Prepared::socket(),
        }
    }

    /// The image a task's container is made of: its agent's, or its own
    /// with the servo added (built once, then cached).
    async fn task_image(&self, spec: &TaskSpec) -> Result<String, EngineError> {
        let agents = crate::spec::image_for(&self.cfg, &spec.agent);
        let base = match &spec.image {
            None => return Ok(agents),
            Some(TaskImage::Named(name)) => docker::TaskBase::Named(name),
            Some(TaskImage::Dockerfile(dir)) => docker::TaskBase::Built {
                dir,
                map: &self.cfg.file.images.map,
            },
        };
        let key = format!("{:?}|{:?}", spec.image, spec.workdir);
        let lock = self
            .builds
            .lock()
            .expect("builds lock")
            .entry(key)
            .or_default()
            .clone();
        let _one = lock.lock().await;
        docker::task_image(&self.docker, &base, &agents, spec.workdir.as_deref())
            .await
            .map_err(|e| EngineError::of_setup(e.context("the task's image could not be made")))
    }

    /// Copies the seed of `image` (what it kept at `workdir:`) into the
    /// created `container`'s workspace: read from the first container of
    /// the image, kept in memory for the next (the tag names its content).
    async fn seed(&self, image: &str, container: &str, owner: docker::Owner) -> anyhow::Result<()> {
        let known = self.seeds.lock().expect("seeds lock").get(image).cloned();
        let seed = match known {
            Some(s) => s,
            None => {
                let read = docker::read_seed(&self.docker, container).await?;
                // Small seeds are kept (a suite's /app); a large one (a
                // repository) is read again rather than held.
                if read.as_ref().is_none_or(|b| b.len() <= 64 << 20) {
                    self.seeds
                        .lock()
                        .expect("seeds lock")
                        .insert(image.to_string(), read.clone());
                }
                read
            }
        };
        match seed {
            Some(tar) => docker::upload_as(&self.docker, container, tar, owner).await,
            None => Ok(()),
        }
    }

    /// Idle warm servos now (None: no pool).
    pub fn pool_idle(&self) -> Option<usize> {
        self.pool.as_ref().map(|p| p.idle())
    }

    /// Fails when the servo image is missing; else copies its servo for
    /// the first launch (and removes what an earlier foreman's copying
    /// left).
    pub async fn check_image(&self) -> Result<(), EngineError> {
        docker::require_image(&self.docker, &self.cfg.file.image)
            .await
            .map_err(EngineError::of)?;
        if let Some(copies) = &self.servos {
            copies.tidy().await;
            copies.resolve(&self.cfg.file.image).await;
        }
        // Cached set-ups' links an earlier launch left (issue 50).
        self.setup_cache().sweep_bound();
        Ok(())
    }

    /// Creates the workspace and container and uploads the inputs (not
    /// started: only the lease's holder starts it). A parked task gets a
    /// new container on its kept workspace, nothing uploaded: the servo goes
    /// on from the session it saved there.
    #[allow(clippy::too_many_arguments)]
    pub async fn launch(
        &self,
        id: TaskId,
        spec: &TaskSpec,
        parked: bool,
        prepared: Prepared,
        gateway_dir: Option<&Path>,
        launch: &saheeli_protocol::Launch,
    ) -> Result<Launched, EngineError> {
        if let Reach::Warm(_) = &prepared.reach {
            return Ok(self.warm_launched(id, prepared));
        }
        let d = &self.docker;
        let t0 = Instant::now();
        let lap = |what: &str| tracing::debug!(task_id = %id, ms = t0.elapsed().as_secs_f64() * 1000.0, "launch: {what}");
        let name = docker::volume_name(id);
        // Small launches travel in the environment: no upload before start.
        let launch_json = serde_json::to_string(launch).map_err(anyhow::Error::from)?;
        let in_env = launch_json.len() <= saheeli_protocol::Launch::MAX_ENV_BYTES;
        let input = inputs::start_tar(&self.cfg.state_dir(), id);
        let creating = Instant::now();
        // A workspace image's mount point is known before it is made: the
        // container is made meanwhile (Docker binds the directory when it
        // starts, by then mounted). A volume must exist first.
        // What the task's image holds at `workdir:` starts its workspace
        // (a retry that goes on from a collected workspace has it already).
        let resumes = inputs::resume_tar(&self.cfg.state_dir(), id).is_file();
        // `setup:` runs on the workspace before the agent (not again for a
        // parked task or a retry that goes on); a cached one with a copy
        // here is bound in, and the servo unpacks it as it starts.
        let sets_up = !spec.setup.is_empty() && !parked && !resumes;
        // What the task's image holds at `workdir:` starts a fresh
        // workspace: the servo copies it as it starts (as the agent's
        // user); it is uploaded before the start for a root agent, and for
        // a set-up that runs here (on the seeded workspace).
        let seeds = spec.workdir.is_some() && spec.image.is_some() && !parked && !resumes;
        let home = self.home(&name);
        let beside = !parked && self.prepare_mount_point(&home)?;
        let make_home = async {
            if parked {
                return Ok(self.home(&name));
            }
            let bytes = spec.disk.unwrap_or(self.cfg.file.task.disk.0);
            let made = self.make_home(&name, bytes, docker::task_labels(id)).await;
            lap("workspace ready");
            made
        };
        let make_container = |workspace: WorkspaceMount| async move {
            // A third-party agent runs in its own image (issue 25); a
            // benchmark's task in its own, with the servo added (issue 49).
            let image = self.task_image(spec).await?;
            lap("image ready");
            let run = self.servo_image(&image).await;
            let bound = match sets_up {
                true => self.bound_setup(id, &image, spec).await?,
                false => None,
            };
            let servo_seeds = seeds && !spec.root_agent() && (!sets_up || bound.is_some());
            let container = docker::create_container(
                d,
                id,
                spec,
                &run,
                &workspace,
                gateway_dir,
                in_env.then_some(launch_json),
                bound.as_ref().map(|b| b.file.as_path()),
                servo_seeds,
            )
            .await?;
            Ok::<_, EngineError>((image, run, bound, container, servo_seeds))
        };
        // The image was checked when serve started; one removed since fails
        // the create with `ImageMissing`.
        let (workspace, (image, run, bound, container, servo_seeds)) = if beside {
            let (workspace, made) = tokio::join!(make_home, make_container(home));
            (workspace?, made?)
        } else {
            let workspace = make_home.await?;
            let made = make_container(workspace.clone()).await?;
            (workspace, made)
        };
        let engine_time = creating.elapsed();
        lap("container created");
        // A root agent's files are root's (the container's user, 0:0):
        // root without a capability may write only what it owns.
        let owner = docker::Owner::of(spec);
        if seeds && !servo_seeds {
            self.seed(&image, &container, owner).await?;
        }
        // A retry that goes on from the attempt before it starts on that
        // attempt's collected workspace (issue 30).
        if input.is_file() && !parked {
            docker::upload_file(d, &container, &input, owner).await?;
        }
        if !in_env && !parked {
            let tar = inputs::launch_tar(&launch.prompt, &launch.task)?;
            docker::upload(d, &container, tar.into()).await?;
        }
        lap("uploaded");
        let setup = if let Some(b) = bound {
            let ran = crate::task::SetupRan {
                key: Some(b.key.clone()),
                hit: true,
                ms: b.ms,
                ..Default::default()
            };
            self.setup_cache().count_hit(&b.key);
            tracing::info!(task_id = %id, key = %b.key, "set-up reused from the cache; the servo unpacks it");
            b.made();
            Some(ran)
        } else if sets_up {
            let ran = self
                .set_up(id, &image, &run, gateway_dir, &container, spec, &workspace)
                .await?;
            lap("set up");
            Some(ran)
        } else {
            None
        };
        Ok(Launched {
            servo: Servo {
                task: id,
                id: container,
                prepared,
                kind: ServoKind::Local,
            },
            engine_time: Some(engine_time),
            setup,
        })
    }

    /// A warm servo's launch: started already, waiting for the task, so
    /// nothing is made; its set-up, when it holds the task's, is reused.
    fn warm_launched(&self, id: TaskId, prepared: Prepared) -> Launched {
        let (name, setup) = match &prepared.reach {
            Reach::Warm(warm) => {
                let setup = warm.setup_key.as_ref().map(|key| {
                    self.setup_cache().count_hit(key);
                    tracing::info!(task_id = %id, key = %key, "set-up reused from the cache, unpacked in the warm servo");
                    crate::task::SetupRan {
                        key: Some(key.clone()),
                        hit: true,
                        ..Default::default()
                    }
                });
                (warm.name.clone(), setup)
            }
            _ => (String::new(), None),
        };
        Launched {
            servo: Servo {
                task: id,
                id: name,
                prepared,
                kind: ServoKind::Local,
            },
            engine_time: None,
            setup,
        }
    }

    /// Starts the created container; a warm servo runs already, and is
    /// given its task's launch now.
    pub async fn start(&self, servo: &Servo) -> Result<(), EngineError> {
        if let Some(warm) = servo.warm() {
            if let Some(socket) = &warm.socket {
                socket.release();
            }
            crate::metrics::live().pool_claim_took(warm.claimed.elapsed());
            return Ok(());
        }
        let started = docker::start(&self.docker, &servo.id).await;
        // A cached set-up bound in is held by the container's mount now
        // (or it will never run): its link goes.
        self.setup_cache().unbind(&servo.task.to_string());
        Ok(started?)
    }
}
