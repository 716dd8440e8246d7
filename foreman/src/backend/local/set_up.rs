//! The launch's set-up phase on this host (issue 50): the set-up's
//! secrets read from `.env` now (kept nowhere), the cache as config.yaml
//! sizes it, and a failed command made [`EngineError::SetupFailed`].

use std::path::Path;

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
