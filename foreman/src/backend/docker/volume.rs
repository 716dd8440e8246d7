//! A task's /workspace volume (size-limited through `disk` when enforced).

use std::collections::HashMap;

use anyhow::Context;
use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::models::VolumeCreateRequest;
use bollard::query_parameters::RemoveVolumeOptionsBuilder;
use saheeli_protocol::TaskId;

use super::*;

pub(crate) fn volume_name(id: TaskId) -> String {
    format!("saheeli-{id}")
}

/// Creates the task's named volume (mounted on /workspace). With a disk
/// size, the volume binds a loop-mounted image of that size (see
/// [`crate::disk`]): the volume is created first, so that a crash before
/// the mount leaves a labelled volume the sweeper removes.
pub(crate) async fn create_volume(
    docker: &Docker,
    id: TaskId,
    disk: Option<(std::path::PathBuf, u64)>,
) -> anyhow::Result<String> {
    create_volume_as(docker, volume_name(id), task_labels(id), id, disk).await
}

/// Creates volume `name` with `labels`; a size-limited one binds the
/// workspace image `id` names (a task's, or a warm servo's slot).
pub(crate) async fn create_volume_as(
    docker: &Docker,
    name: String,
    labels: HashMap<String, String>,
    id: TaskId,
    disk: Option<(std::path::PathBuf, u64)>,
) -> anyhow::Result<String> {
    let mut req = VolumeCreateRequest {
        name: Some(name.clone()),
        labels: Some(labels),
        ..Default::default()
    };
    if let Some((state_dir, _)) = &disk {
        let mnt = crate::disk::task_dir(state_dir, id).join("mnt");
        req.driver = Some("local".into());
        req.driver_opts = Some(HashMap::from([
            ("type".to_string(), "none".to_string()),
            ("o".to_string(), "bind".to_string()),
            ("device".to_string(), mnt.display().to_string()),
        ]));
    }
    timed(DockerOp::CreateVolume, async {
        docker
            .create_volume(req)
            .await
            .with_context(|| format!("creating volume `{name}`"))
    })
    .await?;
    if let Some((state_dir, bytes)) = disk {
        tokio::task::spawn_blocking(move || crate::disk::create(&state_dir, id, bytes))
            .await
            .context("the workspace image thread panicked")??;
    }
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

/// The host directory holding a task's volume, when the daemon runs on
/// this host (a unix socket) and the directory is readable by us.
pub(crate) async fn local_volume_dir(docker: &Docker, id: TaskId) -> Option<std::path::PathBuf> {
    local_volume_dir_named(docker, &volume_name(id)).await
}

/// The host directory holding volume `name` (see [`local_volume_dir`]).
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

/// Removes a named volume, and the workspace image it binds if any;
/// absent is fine.
pub(crate) async fn remove_volume(docker: &Docker, name: &str) -> anyhow::Result<()> {
    remove_volume_binding(docker, name, None).await
}

/// [`remove_volume`], with the workspace image it binds when the caller
/// knows it (one inspect less; None: the volume is asked).
pub(crate) async fn remove_volume_binding(
    docker: &Docker,
    name: &str,
    known: Option<std::path::PathBuf>,
) -> anyhow::Result<()> {
    let bound = match known {
        Some(mnt) => Some(mnt),
        None => inspect_volume(docker, name)
            .await
            .ok()
            .and_then(|v| bound_workspace(&v)),
    };
    // The mount goes first: a foreman stopped between the two steps
    // leaves a labelled volume that the sweeper finds (destroying is
    // idempotent), never a mount that nothing points at any more.
    if let Some(mnt) = bound {
        tokio::task::spawn_blocking(move || crate::disk::destroy(&mnt))
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
