//! Which engine holds a task's running container, asked at the moment it
//! is needed (the verify route, the assessor): on this host, the container
//! labelled with the task; on a swarm, the container of the launch's job
//! service, found through the manager on whichever node runs it now.

use bollard::Docker;
use saheeli_protocol::TaskId;

/// Where one launch of a task runs.
#[derive(Clone)]
pub(crate) enum TaskEngine {
    /// This host's engine: the container labelled `saheeli.task=<id>`.
    Local(Docker),
    /// This host's engine: a warm servo claimed for the task (issue 28),
    /// by its name (it carries no task label).
    Container(Docker, String),
    /// A swarm: the job service of this launch (its name), through the
    /// manager (and its address, for reaching the node's engine alike).
    Swarm {
        manager: Docker,
        manager_addr: super::swarm::Endpoint,
        service: String,
    },
}

impl TaskEngine {
    /// The engine and id of task `id`'s container now.
    pub async fn container(&self, id: TaskId) -> anyhow::Result<(Docker, String)> {
        match self {
            TaskEngine::Local(d) => match super::docker::task_containers(d, id).await?.first() {
                Some(c) => Ok((d.clone(), c.clone())),
                None => anyhow::bail!("the task's container is gone"),
            },
            TaskEngine::Container(d, name) => Ok((d.clone(), name.clone())),
            TaskEngine::Swarm {
                manager,
                manager_addr,
                service,
            } => {
                let l = super::swarm::locate(manager, manager_addr, id, service).await?;
                Ok((l.engine, l.container))
            }
        }
    }

    /// The host directory holding the running task's /workspace, to
    /// snapshot it (issue 51): the loop-mounted image or the volume's
    /// directory, when this host holds it; None on a swarm (its workspace
    /// is on a node) or when the container is gone.
    pub async fn workspace_dir(&self, id: TaskId) -> Option<std::path::PathBuf> {
        if matches!(self, TaskEngine::Swarm { .. }) {
            return None;
        }
        let (d, container) = self.container(id).await.ok()?;
        let info = d.inspect_container(&container, None).await.ok()?;
        match super::docker::WorkspaceMount::of(info.mounts?)? {
            super::docker::WorkspaceMount::Bind(dir) => Some(dir),
            super::docker::WorkspaceMount::Volume(name) => {
                super::docker::local_volume_dir_named(&d, &name).await
            }
        }
    }

    /// Undoes a verify attempt a stopped foreman left midway (the task's
    /// container paused, a verify container beside it, a copy of its
    /// workspace under `state_dir`): for adoption.
    /// A task with no running container now has nothing to undo.
    pub async fn recover_verify(
        &self,
        id: TaskId,
        state_dir: &std::path::Path,
    ) -> anyhow::Result<()> {
        let Ok((d, container)) = self.container(id).await else {
            return Ok(());
        };
        super::docker::recover_verify(&d, id, &container, state_dir).await
    }
}
