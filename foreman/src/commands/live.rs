//! Where a running task's live audit lines are: the servo mirrors each
//! line to stdout, so they are its container's log. On this host that is
//! the container labelled with the task (or the warm servo's the store
//! names, whose labels are its pool's); on a swarm it is the container of
//! the task's current launch on whichever node runs it now (found through
//! the manager from the job service the store names), so a task requeued
//! to another node is followed there.

use bollard::Docker;

use crate::backend::docker;
use crate::config::{BackendKind, Config};
use crate::store::TaskRow;

/// How the live log of a task is reached.
pub(super) enum LiveLog {
    Local(Docker),
    Swarm {
        manager: Docker,
        manager_addr: crate::backend::swarm::Endpoint,
    },
}

impl LiveLog {
    /// The engine `cfg` runs its tasks on.
    pub async fn connect(cfg: &Config) -> anyhow::Result<LiveLog> {
        match (&cfg.file.backend, &cfg.file.swarm) {
            (BackendKind::Swarm, Some(swarm)) => {
                let manager_addr = crate::backend::swarm::Endpoint::manager(cfg, swarm)?;
                Ok(LiveLog::Swarm {
                    manager: manager_addr.connect().await?,
                    manager_addr,
                })
            }
            _ => Ok(LiveLog::Local(docker::connect().await?)),
        }
    }

    /// The containers holding task `t`'s live audit lines now, with their
    /// engines (none when no servo runs now).
    pub async fn containers(&self, t: &TaskRow) -> anyhow::Result<Vec<(Docker, String)>> {
        match self {
            LiveLog::Local(d) => {
                let mut found = docker::task_containers(d, t.id).await?;
                // A warm servo's container carries its pool's labels, not
                // the task's: the store names the one that claimed it.
                if found.is_empty()
                    && let Some(c) = &t.container_id
                {
                    found.push(c.clone());
                }
                Ok(found.into_iter().map(|c| (d.clone(), c)).collect())
            }
            LiveLog::Swarm {
                manager,
                manager_addr,
            } => {
                // The store names the current launch's job service.
                let Some(service) = &t.container_id else {
                    return Ok(Vec::new());
                };
                let engine = crate::backend::TaskEngine::Swarm {
                    manager: manager.clone(),
                    manager_addr: manager_addr.clone(),
                    service: service.clone(),
                };
                Ok(engine.container(t.id).await.ok().into_iter().collect())
            }
        }
    }
}
