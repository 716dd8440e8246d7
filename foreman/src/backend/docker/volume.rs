//! A task's /workspace: the loop-mounted image `disk` makes, bound
//! directly, or a named Docker volume when no size limit is enforced.

use std::collections::HashMap;

use anyhow::Context;
use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::models::{Mount, MountType, MountVolumeOptions, VolumeCreateRequest};
use bollard::query_parameters::RemoveVolumeOptionsBuilder;
use saheeli_protocol::TaskId;

use super::{DockerOp, timed};

pub(crate) fn volume_name(id: TaskId) -> String {
    format!("saheeli-{id}")
}

/// What a servo's (or a verify container's) /workspace is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WorkspaceMount {
    /// A named Docker volume: no size limit (`limits.disk_enforcement:
    /// off`), or one a foreman before issue 28's cut made.
    Volume(String),
    /// The loop-mounted workspace image on this host (`crate::backend::disk`),
    /// bound directly: no volume between.
    Bind(std::path::PathBuf),
}

impl WorkspaceMount {
    /// The container's mount on /workspace. `labels` go on a volume the
    /// mount creates; `no_copy`: an existing volume is not filled with the
    /// image's /workspace (a bind never is).
    pub(crate) fn mount(&self, labels: Option<HashMap<String, String>>, no_copy: bool) -> Mount {
        let target = Some(saheeli_protocol::paths::WORKSPACE.to_string());
        match self {
            WorkspaceMount::Volume(name) => Mount {
                target,
                source: Some(name.clone()),
                typ: Some(MountType::VOLUME),
                volume_options: Some(MountVolumeOptions {
                    labels,
                    no_copy: no_copy.then_some(true),
                    ..Default::default()
                }),
                ..Default::default()
            },
            WorkspaceMount::Bind(dir) => Mount {
                target,
                source: Some(dir.display().to_string()),
                typ: Some(MountType::BIND),
                ..Default::default()
            },
        }
    }

    /// The /workspace of a container, from its inspection's mounts.
    pub(crate) fn of(mounts: Vec<bollard::models::MountPoint>) -> Option<WorkspaceMount> {
        let m = mounts
            .into_iter()
            .find(|m| m.destination.as_deref() == Some(saheeli_protocol::paths::WORKSPACE))?;
        match m.typ.as_deref()? {
            "volume" => m.name.map(WorkspaceMount::Volume),
            "bind" => m.source.map(|s| WorkspaceMount::Bind(s.into())),
            _ => None,
        }
    }
}

/// Creates volume `name` with `labels` (a task's, or a warm servo's slot).
pub(crate) async fn create_volume_as(
    docker: &Docker,
    name: String,
    labels: HashMap<String, String>,
) -> anyhow::Result<String> {
    let req = VolumeCreateRequest {
        name: Some(name.clone()),
        labels: Some(labels),
        ..Default::default()
    };
    timed(DockerOp::CreateVolume, async {
        docker
            .create_volume(req)
            .await
            .with_context(|| format!("creating volume `{name}`"))
    })
    .await?;
    Ok(name)
}

/// The loop-mounted workspace a volume binds, if it is one of ours.
pub(super) fn bound_workspace(v: &bollard::models::Volume) -> Option<std::path::PathBuf> {
    let o = &v.options;
    (o.get("type").map(String::as_str) == Some("none")
        && o.get("o").map(String::as_str) == Some("bind"))
    .then(|| o.get("device").map(std::path::PathBuf::from))
    .flatten()
}

/// The host directory holding volume `name`, when the daemon runs on
/// this host (a unix socket) and the directory is readable by us.
pub(crate) async fn local_volume_dir_named(
    docker: &Docker,
    name: &str,
) -> Option<std::path::PathBuf> {
    let local = std::env::var("DOCKER_HOST").map_or(true, |h| h.starts_with("unix://"));
    if !local {
        return None;
    }
    let v = inspect_volume(docker, name).await.ok()?;
    // A size-limited workspace: its own mount stays when the driver's bind
    // of it (the volume's mountpoint) goes away as the container stops.
    let dir = bound_workspace(&v).unwrap_or_else(|| std::path::PathBuf::from(v.mountpoint));
    std::fs::read_dir(&dir).ok().map(|_| dir)
}

/// Removes a named volume, and the workspace image it binds if any (a
/// foreman before issue 28's cut bound each image through a volume);
/// absent is fine.
pub(crate) async fn remove_volume(docker: &Docker, name: &str) -> anyhow::Result<()> {
    let bound = inspect_volume(docker, name)
        .await
        .ok()
        .and_then(|v| bound_workspace(&v));
    // The mount goes first: a foreman stopped between the two steps
    // leaves a labelled volume that the sweeper finds (destroying is
    // idempotent), never a mount that nothing points at any more.
    if let Some(mnt) = bound {
        tokio::task::spawn_blocking(move || crate::backend::disk::destroy(&mnt))
            .await
            .context("the workspace image thread panicked")?
            .with_context(|| format!("removing the workspace image of volume `{name}`"))?;
    }
    let opts = RemoveVolumeOptionsBuilder::default().force(true).build();
    timed(DockerOp::RemoveVolume, async {
        match docker.remove_volume(name, Some(opts)).await {
            Ok(())
            | Err(DockerError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(()),
            Err(e) => Err(e).with_context(|| format!("removing volume `{name}`")),
        }
    })
    .await
}

async fn inspect_volume(docker: &Docker, name: &str) -> anyhow::Result<bollard::models::Volume> {
    timed(DockerOp::InspectVolume, async {
        docker
            .inspect_volume(name)
            .await
            .with_context(|| format!("inspecting volume `{name}`"))
    })
    .await
}
