//! The container a regrade (`saheeli eval regrade`, issue 49) verifies in:
//! the task has ended, so there is no task container to pause. A new
//! workspace volume holds the collected workspace, and a container made
//! like a verify attempt's (the task's image, its hardening and limits, no
//! network, the hidden tests read-only at /tests, /logs/verifier writable)
//! idles while the commands run by exec. Both carry the task's label and
//! `saheeli.role=regrade`: `saheeli gc` removes a leftover.

use std::path::Path;

use anyhow::Context;
use bollard::Docker;
use saheeli_protocol::TaskId;
use tracing::warn;

use super::{
    DockerOp, ROLE_LABEL, Sandbox, WorkspaceMount, remove_container, remove_volume, task_labels,
    timed,
};

/// [`ROLE_LABEL`]'s value on a regrade's container and volume.
pub(crate) const REGRADE_ROLE: &str = "regrade";

/// A regrade's container and volume; close it with [`RegradeBox::close`].
pub(crate) struct RegradeBox {
    docker: Docker,
    container: String,
    volume: String,
}

impl RegradeBox {
    /// Makes a volume holding `workspace` (a tar file) and a started container
    /// of `image` on it.
    pub async fn open(
        docker: &Docker,
        id: TaskId,
        image: &str,
        sandbox: &Sandbox,
        tests: Option<&Path>,
        workspace: &Path,
    ) -> anyhow::Result<RegradeBox> {
        let mut labels = task_labels(id);
        labels.insert(ROLE_LABEL.to_string(), REGRADE_ROLE.to_string());
        let volume = format!("saheeli-regrade-{}", uuid::Uuid::new_v4().simple());
        let mount = WorkspaceMount::Volume(volume.clone()).mount(Some(labels.clone()), false);
        let body = super::checking_body(image, sandbox, mount, tests, labels);
        let created = timed(DockerOp::CreateContainer, async {
            docker
                .create_container(None, body)
                .await
                .with_context(|| format!("creating the regrade container from image `{image}`"))
        })
        .await?;
        let b = RegradeBox {
            docker: docker.clone(),
            container: created.id,
            volume,
        };
        let ready = async {
            let owner = if sandbox.root {
                super::Owner::Root
            } else {
                super::Owner::Archive
            };
            super::upload_file(docker, &b.container, workspace, owner).await?;
            timed(DockerOp::Start, async {
                docker
                    .start_container(&b.container, None)
                    .await
                    .context("starting the regrade container")
            })
            .await
        }
        .await;
        match ready {
            Ok(()) => Ok(b),
            Err(e) => {
                if let Err(undo) = b.close().await {
                    warn!(task_id = %id, error = %format!("{undo:#}"), "regrade container not removed");
                }
                Err(e)
            }
        }
    }

    pub fn container(&self) -> &str {
        &self.container
    }

    /// Removes the container, then its volume.
    pub async fn close(self) -> anyhow::Result<()> {
        let removed = remove_container(&self.docker, &self.container).await;
        let volume = remove_volume(&self.docker, &self.volume).await;
        removed.and(volume)
    }
}
