//! From a prepared launch to a started container: volume, container,
//! inputs, start.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bollard::Docker;
use saheeli_protocol::TaskId;

use crate::backend::facts::{EngineError, Launched, Prepared, Servo, ServoKind};
use crate::config::Config;
use crate::docker;
use crate::inputs;
use crate::spec::TaskSpec;

/// This host's engine and what it needs of the configuration.
#[derive(Clone)]
pub(crate) struct Local {
    pub docker: Docker,
    pub(super) cfg: Arc<Config>,
    /// The keys collection redacts from workspaces.
    pub(super) secrets: Arc<Vec<(String, String)>>,
}

impl Local {
    pub fn new(docker: Docker, cfg: Config, secrets: Vec<(String, String)>) -> Local {
        Local {
            docker,
            cfg: Arc::new(cfg),
            secrets: Arc::new(secrets),
        }
    }

    pub async fn check_image(&self) -> Result<(), EngineError> {
        docker::require_image(&self.docker, &self.cfg.file.image)
            .await
            .map_err(EngineError::of)
    }

    /// Creates the volume and container and uploads the inputs (not
    /// started: only the lease's holder starts it). A parked task gets a
    /// new container on its kept volume, nothing uploaded: the servo goes
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
        let d = &self.docker;
        let t0 = Instant::now();
        let lap = |what: &str| tracing::debug!(task_id = %id, ms = t0.elapsed().as_secs_f64() * 1000.0, "launch: {what}");
        // The image was checked when serve started; one removed since fails
        // the create with `ImageMissing`.
        let volume = if parked {
            docker::volume_name(id)
        } else {
            docker::create_volume(d, id, crate::disk::for_task(&self.cfg, spec)).await?
        };
        lap("volume ready");
        // Small launches travel in the environment: no upload before start.
        let launch_json = serde_json::to_string(launch).map_err(anyhow::Error::from)?;
        let in_env = launch_json.len() <= saheeli_protocol::Launch::MAX_ENV_BYTES;
        let creating = Instant::now();
        // A third-party agent runs in its own image (issue 25).
        let image = crate::spec::image_for(&self.cfg, &spec.agent);
        let container = docker::create_container(
            d,
            id,
            spec,
            &image,
            &volume,
            gateway_dir,
            in_env.then_some(launch_json),
        )
        .await?;
        let engine_time = creating.elapsed();
        lap("container created");
        // A retry that goes on from the attempt before it starts on that
        // attempt's collected workspace (issue 30).
        let input = inputs::start_tar(&self.cfg.state_dir(), id);
        if input.is_file() && !parked {
            docker::upload_file(d, &container, &input).await?;
        }
        if !in_env && !parked {
            let tar = inputs::launch_tar(&launch.prompt, &launch.task)?;
            docker::upload(d, &container, tar.into()).await?;
        }
        lap("uploaded");
        Ok(Launched {
            servo: Servo {
                task: id,
                id: container,
                prepared,
                kind: ServoKind::Local,
            },
            engine_time: Some(engine_time),
        })
    }

    /// Starts the created container.
    pub async fn start(&self, servo: &Servo) -> Result<(), EngineError> {
        Ok(docker::start(&self.docker, &servo.id).await?)
    }
}
