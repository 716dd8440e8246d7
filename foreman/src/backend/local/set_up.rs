//! The launch's set-up phase on this host (issue 50): the set-up's
//! secrets read from `.env` now (kept nowhere), the cache as config.yaml
//! sizes it, and a failed command made [`EngineError::SetupFailed`]; or,
//! for a set-up in the cache with a copy on this host, that copy bound
//! into the servo's container for the servo to unpack.

use std::path::{Path, PathBuf};

use anyhow::Context;

use saheeli_protocol::TaskId;

use super::Local;
use crate::backend::docker::{self, ServoImage, SetupCache, SetupPhase, WorkspaceMount};
use crate::backend::facts::EngineError;
use crate::task::{SetupRan, TaskSpec};

impl Local {
    /// The set-up cache of this host's Docker, as config.yaml sizes it.
    pub fn setup_cache(&self) -> SetupCache {
        SetupCache::new(&self.cfg.state_dir(), self.cfg.file.setup_cache.max_bytes.0)
    }

    /// Runs `spec`'s set-up (or reuses it) for the created `servo` of the
    /// task's `image`, in a container of `run` (with the set-up's egress
    /// through `gateway_dir`, when the task lists hosts for it).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn set_up(
        &self,
        id: TaskId,
        image: &str,
        run: &ServoImage,
        gateway_dir: Option<&Path>,
        servo: &str,
        spec: &TaskSpec,
        workspace: &WorkspaceMount,
    ) -> Result<SetupRan, EngineError> {
        // A name `.env` no longer sets fails the set-up, naming it.
        let secrets = self
            .cfg
            .dotenv_values(&spec.setup_plan.env)
            .map_err(|e| EngineError::SetupFailed(format!("{e:#}")))?;
        let phase = SetupPhase {
            id,
            image,
            run,
            gateway_dir,
            servo,
            spec,
            workspace,
            secrets: &secrets,
        };
        match docker::set_up(&self.docker, &self.setup_cache(), phase).await {
            Ok(Ok(ran)) => Ok(ran),
            Ok(Err(why)) => Err(EngineError::SetupFailed(why)),
            Err(e) => Err(EngineError::of_setup(e)),
        }
    }
}

/// A cached set-up bound into a task's container (`Local::bound_setup`):
/// its key, the host file bound, and how long finding it took. Until
/// [`Bound::started`], dropping it removes the link (the launch failed).
pub(super) struct Bound {
    pub key: String,
    pub file: PathBuf,
    pub ms: u64,
    cache: SetupCache,
    name: String,
    armed: bool,
}

impl Bound {
    /// The container is made: its start removes the link.
    pub fn made(mut self) {
        self.armed = false;
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        if self.armed {
            self.cache.unbind(&self.name);
        }
    }
}

impl Local {
    /// Whether a task with a set-up may be a warm servo's that holds it
    /// cached: the cache is on, nothing need run on its reuse (no
    /// `maintenance:`) and it does not go on from an earlier workspace.
    pub(super) fn warm_setup_allowed(&self, id: TaskId, spec: &TaskSpec) -> bool {
        self.cfg.file.setup_cache.max_bytes.0 > 0
            && spec.setup_plan.maintenance.is_empty()
            && !crate::inputs::resume_tar(&self.cfg.state_dir(), id).is_file()
    }

    /// When `spec`'s set-up is in the cache with a copy on this host, and
    /// nothing else need run on its reuse (no `maintenance:`, not a root
    /// agent: those go through the set-up phase), that copy linked for
    /// the task's container; None: the set-up phase runs after the create.
    pub(super) async fn bound_setup(
        &self,
        id: TaskId,
        image: &str,
        spec: &TaskSpec,
    ) -> Result<Option<Bound>, EngineError> {
        if !spec.setup_plan.maintenance.is_empty() || spec.root_agent() {
            return Ok(None);
        }
        let t0 = std::time::Instant::now();
        let cache = self.setup_cache();
        let key = docker::setup_key(&self.docker, &cache, image, spec)
            .await
            .map_err(EngineError::of_setup)?;
        let Some(key) = key else { return Ok(None) };
        if !cache
            .has(&self.docker, &key)
            .await
            .map_err(EngineError::of_setup)?
        {
            return Ok(None);
        }
        let name = id.to_string();
        let Some(file) = cache.bind_copy(&key, &name) else {
            return Ok(None);
        };
        Ok(Some(Bound {
            key,
            file,
            ms: t0.elapsed().as_millis() as u64,
            cache,
            name,
            armed: true,
        }))
    }

    /// The cached set-up a warm class names (`setup_key:`, a key or its
    /// start) and the id of the class's image, with its host copy linked
    /// for the servo `name`: what the pool binds into the servo.
    pub(super) async fn class_setup(
        &self,
        prefix: &str,
        image: &str,
        name: &str,
    ) -> anyhow::Result<(super::pool::ClassSetup, PathBuf)> {
        let cache = self.setup_cache();
        let entries = cache.list(&self.docker).await?;
        let found: Vec<&str> = entries
            .iter()
            .filter(|e| e.key.starts_with(prefix))
            .map(|e| e.key.as_str())
            .collect();
        let key = match found.as_slice() {
            [one] => one.to_string(),
            [] => anyhow::bail!(
                "the pool's `setup_key: {prefix}` is not in the set-up cache (`saheeli cache ls`): \
                 run a task with that set-up first"
            ),
            _ => anyhow::bail!(
                "the pool's `setup_key: {prefix}` starts more than one cached set-up's key: give more of it"
            ),
        };
        let image_id = self
            .docker
            .inspect_image(image)
            .await
            .with_context(|| format!("inspecting image `{image}`"))?
            .id
            .unwrap_or_else(|| image.to_string());
        let Some(file) = cache.bind_copy(&key, name) else {
            anyhow::bail!("the cached set-up `{key}` has no copy on this host");
        };
        Ok((super::pool::ClassSetup { key, image_id }, file))
    }
}
