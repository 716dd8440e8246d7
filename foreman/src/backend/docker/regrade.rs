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
use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount, MountType};
use saheeli_protocol::TaskId;
use tracing::warn;

use super::{
    DockerOp, ROLE_LABEL, Sandbox, TESTS_DIR, WorkspaceMount, remove_container, remove_volume,
    task_labels, timed,
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
        let mut mounts =
            vec![WorkspaceMount::Volume(volume.clone()).mount(Some(labels.clone()), false)];
        if let Some(dir) = tests {
            mounts.push(Mount {
                target: Some(TESTS_DIR.into()),
                source: Some(dir.display().to_string()),
                typ: Some(MountType::BIND),
                read_only: Some(true),
                ..Default::default()
            });
        }
        let mut hardened = super::hardened(sandbox.memory, sandbox.cpus, sandbox.pids);
        if let Some(t) = hardened.tmpfs.as_mut() {
            t.insert(
                "/logs/verifier".to_string(),
                "rw,nosuid,nodev,size=64m,mode=1777".to_string(),
            );
        }
        let body = ContainerCreateBody {
            image: Some(image.into()),
            entrypoint: Some(vec!["sleep".into()]),
            cmd: Some(vec!["infinity".into()]),
            user: Some("1000:1000".into()),
            working_dir: Some(
                sandbox
                    .working_dir
                    .clone()
                    .unwrap_or_else(|| saheeli_protocol::paths::WORKSPACE.into()),
            ),
            env: Some(
                sandbox
                    .env
                    .iter()
                    .cloned()
                    .chain(["HOME=/tmp".to_string()])
                    .collect(),
            ),
            labels: Some(labels),
            network_disabled: Some(true),
            host_config: Some(HostConfig {
                network_mode: Some("none".into()),
                mounts: Some(mounts),
                log_config: Some(HostConfigLogConfig {
                    typ: Some("none".into()),
                    config: None,
                }),
                ..hardened
            }),
            ..Default::default()
        };
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
            super::upload_file(docker, &b.container, workspace).await?;
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
