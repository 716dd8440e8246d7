//! Everything Saheeli asks of Docker, through bollard: build the servo
//! image, create a hardened and labelled container per task, copy files in
//! and out, wait, stop, and clean up.
//!
//! Containers and volumes are found by their `saheeli.task` label, never by
//! name.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountType, MountVolumeOptions, VolumeCreateRequest,
};
use bollard::query_parameters::{
    BuildImageOptionsBuilder, CreateContainerOptionsBuilder, DownloadFromContainerOptionsBuilder,
    ListContainersOptionsBuilder, ListVolumesOptionsBuilder, RemoveContainerOptionsBuilder,
    RemoveImageOptionsBuilder, RemoveVolumeOptionsBuilder, StopContainerOptionsBuilder,
    UploadToContainerOptionsBuilder, WaitContainerOptionsBuilder,
};
use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};
use saheeli_protocol::{TaskId, paths};

use crate::spec::TaskSpec;

/// The label every Saheeli container and volume carries.
pub(crate) const TASK_LABEL: &str = "saheeli.task";

/// Connects to the local daemon (honouring `DOCKER_HOST`) and negotiates the API version.
pub(crate) async fn connect() -> anyhow::Result<Docker> {
    let hint = connect_hint();
    let hint = hint.as_str();
    let docker = Docker::connect_with_local_defaults()
        .with_context(|| format!("connecting to Docker: {hint}"))?;
    let docker = docker
        .negotiate_version()
        .await
        .with_context(|| format!("connecting to Docker: {hint}"))?;
    docker
        .ping()
        .await
        .with_context(|| format!("pinging Docker: {hint}"))?;
    Ok(docker)
}

/// Why connecting may fail, for the error: a socket we may not open is not
/// a daemon that is down.
fn connect_hint() -> String {
    let socket = match std::env::var("DOCKER_HOST") {
        Ok(h) if !h.is_empty() => match h.strip_prefix("unix://") {
            Some(p) => p.to_string(),
            None => return format!("is the Docker daemon at `{h}` (DOCKER_HOST) running?"),
        },
        _ => "/var/run/docker.sock".to_string(),
    };
    match std::os::unix::net::UnixStream::connect(&socket) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => format!(
            "permission denied on the Docker socket `{socket}`: this user may not use Docker; \
             add it to the `docker` group (`sudo usermod -aG docker $USER`, then log in \
             again) or run saheeli as root"
        ),
        _ => format!(
            "is the Docker daemon running? (`docker info` should answer on `{socket}`; \
             `scripts/setup.sh docker` starts one)"
        ),
    }
}

/// The labels on a task's container and volume.
fn labels(id: TaskId) -> HashMap<String, String> {
    HashMap::from([(TASK_LABEL.to_string(), id.to_string())])
}

pub(crate) fn volume_name(id: TaskId) -> String {
    format!("saheeli-{id}")
}

/// Fails with advice when the servo image is missing.
pub(crate) async fn require_image(docker: &Docker, image: &str) -> anyhow::Result<()> {
    match docker.inspect_image(image).await {
        Ok(_) => Ok(()),
        Err(DockerError::DockerResponseServerError {
            status_code: 404, ..
        }) => Err(ImageMissing(image.to_string()).into()),
        Err(e) => Err(e).with_context(|| format!("inspecting image `{image}`")),
    }
}

/// The servo image is not there: no retry can help until it is built.
#[derive(Debug, thiserror::Error)]
#[error("image `{0}` not found; build it with `saheeli build-servo`")]
pub(crate) struct ImageMissing(pub String);

/// Creates the task's named volume (mounted on /workspace). With a disk
/// size, the volume binds a loop-mounted image of that size (see
/// [`crate::disk`]): the volume is created first, so that a crash before
/// the mount leaves a labelled volume the sweeper removes.
pub(crate) async fn create_volume(
    docker: &Docker,
    id: TaskId,
    disk: Option<(std::path::PathBuf, u64)>,
) -> anyhow::Result<String> {
    let name = volume_name(id);
    let mut req = VolumeCreateRequest {
        name: Some(name.clone()),
        labels: Some(labels(id)),
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
    docker
        .create_volume(req)
        .await
        .with_context(|| format!("creating volume `{name}`"))?;
    if let Some((state_dir, bytes)) = disk {
        tokio::task::spawn_blocking(move || crate::disk::create(&state_dir, id, bytes))
            .await
            .context("the workspace image thread panicked")??;
    }
    Ok(name)
}

/// The loop-mounted workspace a volume binds, if it is one of ours.
fn bound_workspace(v: &bollard::models::Volume) -> Option<std::path::PathBuf> {
    let o = &v.options;
    (o.get("type").map(String::as_str) == Some("none")
        && o.get("o").map(String::as_str) == Some("bind"))
    .then(|| o.get("device").map(std::path::PathBuf::from))
    .flatten()
}

/// Creates the hardened servo container for a task; does not start it.
pub(crate) async fn create_container(
    docker: &Docker,
    id: TaskId,
    spec: &TaskSpec,
    image: &str,
    volume: &str,
    gateway_dir: Option<&Path>,
    launch_env: Option<String>,
) -> anyhow::Result<String> {
    let mut mounts = vec![Mount {
        target: Some(paths::WORKSPACE.into()),
        source: Some(volume.into()),
        typ: Some(MountType::VOLUME),
        volume_options: Some(MountVolumeOptions {
            labels: Some(labels(id)),
            ..Default::default()
        }),
        ..Default::default()
    }];
    if let Some(dir) = gateway_dir {
        mounts.push(Mount {
            target: Some(paths::GATEWAY_DIR.into()),
            source: Some(dir.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        });
    }
    let mut env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    env.push("HOME=/tmp".into());
    if let Some(json) = launch_env {
        env.push(format!("{}={json}", saheeli_protocol::LAUNCH_ENV));
    }
    let memory = i64::try_from(spec.memory).unwrap_or(i64::MAX);
    let host_config = HostConfig {
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        privileged: Some(false),
        readonly_rootfs: Some(true),
        tmpfs: Some(HashMap::from([(
            "/tmp".to_string(),
            "rw,nosuid,nodev,size=256m".to_string(),
        )])),
        memory: Some(memory),
        memory_swap: Some(memory),
        nano_cpus: Some((spec.cpus * 1e9) as i64),
        pids_limit: Some(spec.pids),
        init: Some(true),
        network_mode: Some(spec.network.as_str().into()),
        mounts: Some(mounts),
        ..Default::default()
    };
    let body = ContainerCreateBody {
        image: Some(image.into()),
        user: Some("1000:1000".into()),
        working_dir: Some(paths::WORKSPACE.into()),
        env: Some(env),
        labels: Some(labels(id)),
        network_disabled: Some(spec.network == saheeli_protocol::NetworkMode::None),
        stop_signal: Some("SIGTERM".into()),
        host_config: Some(host_config),
        ..Default::default()
    };
    let opts = CreateContainerOptionsBuilder::default()
        .name(&format!("saheeli-{id}"))
        .build();
    let created = match docker.create_container(Some(opts), body.clone()).await {
        // A stale container may hold the short name; names are cosmetic, so retry without one.
        Err(DockerError::DockerResponseServerError {
            status_code: 409, ..
        }) => docker.create_container(None, body).await,
        other => other,
    }
    .with_context(|| format!("creating the servo container from image `{image}`"))?;
    Ok(created.id)
}

/// Extracts a tar archive into the container's /workspace.
pub(crate) async fn upload(docker: &Docker, container: &str, tar: Bytes) -> anyhow::Result<()> {
    let opts = UploadToContainerOptionsBuilder::default()
        .path(paths::WORKSPACE)
        .build();
    docker
        .upload_to_container(container, Some(opts), bollard::body_full(tar))
        .await
        .context("uploading into /workspace")
}

/// Streams a tar file from disk into the container's /workspace.
pub(crate) async fn upload_file(
    docker: &Docker,
    container: &str,
    tar: &Path,
) -> anyhow::Result<()> {
    let file = tokio::fs::File::open(tar)
        .await
        .with_context(|| format!("opening `{}`", tar.display()))?;
    let stream = tokio_util::io::ReaderStream::new(file);
    let opts = UploadToContainerOptionsBuilder::default()
        .path(paths::WORKSPACE)
        .build();
    docker
        .upload_to_container(container, Some(opts), bollard::body_try_stream(stream))
        .await
        .context("uploading the workspace into /workspace")
}

pub(crate) async fn start(docker: &Docker, container: &str) -> anyhow::Result<()> {
    docker
        .start_container(container, None)
        .await
        .context("starting the servo container")
}

/// Waits for the container to exit and returns its exit code.
pub(crate) async fn wait(docker: &Docker, container: &str) -> anyhow::Result<i64> {
    let opts = WaitContainerOptionsBuilder::default()
        .condition("not-running")
        .build();
    let mut stream = docker.wait_container(container, Some(opts));
    match stream.next().await {
        Some(Ok(r)) => Ok(r.status_code),
        // bollard reports a non-zero exit as an error carrying the code.
        Some(Err(DockerError::DockerContainerWaitError { code, .. })) => Ok(code),
        Some(Err(e)) => Err(e).context("waiting for the servo container"),
        None => anyhow::bail!("the Docker wait stream ended without a status"),
    }
}

/// Whether the kernel OOM-killed the container's process.
pub(crate) async fn oom_killed(docker: &Docker, container: &str) -> bool {
    docker
        .inspect_container(container, None)
        .await
        .ok()
        .and_then(|c| c.state)
        .and_then(|s| s.oom_killed)
        .unwrap_or(false)
}

/// After a Docker error: pings with backoff until the daemon answers again
/// (it may be restarting), for up to `limit`. Returns whether it did.
pub(crate) async fn await_daemon(docker: &Docker, limit: Duration) -> bool {
    let started = std::time::Instant::now();
    let mut wait = Duration::from_millis(250);
    loop {
        if docker.ping().await.is_ok() {
            return true;
        }
        if started.elapsed() + wait > limit {
            return false;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(5));
    }
}

/// The host directory holding a task's volume, when the daemon runs on
/// this host (a unix socket) and the directory is readable by us.
pub(crate) async fn local_volume_dir(docker: &Docker, id: TaskId) -> Option<std::path::PathBuf> {
    let local = std::env::var("DOCKER_HOST").map_or(true, |h| h.starts_with("unix://"));
    if !local {
        return None;
    }
    let v = docker.inspect_volume(&volume_name(id)).await.ok()?;
    // A size-limited workspace: its own mount stays when the driver's bind
    // of it (the volume's mountpoint) goes away as the container stops.
    let dir = bound_workspace(&v).unwrap_or_else(|| std::path::PathBuf::from(v.mountpoint));
    std::fs::read_dir(&dir).ok().map(|_| dir)
}

/// Whether the container was ever started (running, exited or dead, as
/// opposed to only created).
/// An error means "unknown, ask again", never "not started".
pub(crate) async fn has_started(docker: &Docker, container: &str) -> anyhow::Result<bool> {
    let c = docker
        .inspect_container(container, None)
        .await
        .context("inspecting the servo container")?;
    Ok(c.state
        .and_then(|s| s.started_at)
        .is_some_and(|t| !t.starts_with("0001-01-01")))
}

/// SIGTERM, then SIGKILL after `grace`.
pub(crate) async fn stop(docker: &Docker, container: &str, grace: Duration) -> anyhow::Result<()> {
    let opts = StopContainerOptionsBuilder::default()
        .t(grace.as_secs().max(1) as i32)
        .build();
    match docker.stop_container(container, Some(opts)).await {
        Ok(())
        | Err(DockerError::DockerResponseServerError {
            status_code: 304, ..
        }) => Ok(()),
        Err(e) => Err(e).context("stopping the servo container"),
    }
}

/// SIGKILL, when a stop did not take. A container that is not running
/// (any more) is not an error.
pub(crate) async fn kill(docker: &Docker, container: &str) -> anyhow::Result<()> {
    match docker
        .kill_container(
            container,
            None::<bollard::query_parameters::KillContainerOptions>,
        )
        .await
    {
        Ok(())
        | Err(DockerError::DockerResponseServerError {
            status_code: 304 | 404 | 409,
            ..
        }) => Ok(()),
        Err(e) => Err(e).context("killing the servo container"),
    }
}

/// The container's /workspace as a tar stream (entries prefixed `workspace/`).
pub(crate) fn download_workspace(
    docker: &Docker,
    container: &str,
) -> impl Stream<Item = std::io::Result<Bytes>> + use<> {
    let opts = DownloadFromContainerOptionsBuilder::default()
        .path(paths::WORKSPACE)
        .build();
    docker
        .download_from_container(container, Some(opts))
        .map_err(std::io::Error::other)
}

/// Removes a container (and its anonymous volumes); absent is fine.
pub(crate) async fn remove_container(docker: &Docker, container: &str) -> anyhow::Result<()> {
    let opts = RemoveContainerOptionsBuilder::default()
        .force(true)
        .v(true)
        .build();
    match docker.remove_container(container, Some(opts)).await {
        Ok(())
        | Err(DockerError::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing container `{container}`")),
    }
}

/// Removes a named volume, and the workspace image it binds if any;
/// absent is fine.
pub(crate) async fn remove_volume(docker: &Docker, name: &str) -> anyhow::Result<()> {
    let bound = docker
        .inspect_volume(name)
        .await
        .ok()
        .and_then(|v| bound_workspace(&v));
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
    match docker.remove_volume(name, Some(opts)).await {
        Ok(())
        | Err(DockerError::DockerResponseServerError {
            status_code: 404, ..
        }) => {}
        Err(e) => return Err(e).with_context(|| format!("removing volume `{name}`")),
    }
    Ok(())
}

/// Ids of the containers labelled with a task.
pub(crate) async fn task_containers(docker: &Docker, id: TaskId) -> anyhow::Result<Vec<String>> {
    let filter = format!("{TASK_LABEL}={id}");
    let opts = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&HashMap::from([("label", vec![filter.as_str()])]))
        .build();
    let list = docker
        .list_containers(Some(opts))
        .await
        .context("listing Saheeli containers")?;
    Ok(list.into_iter().filter_map(|c| c.id).collect())
}

/// Names of the volumes labelled with a task.
pub(crate) async fn task_volumes(docker: &Docker, id: TaskId) -> anyhow::Result<Vec<String>> {
    let filter = format!("{TASK_LABEL}={id}");
    let opts = ListVolumesOptionsBuilder::default()
        .filters(&HashMap::from([("label", vec![filter.as_str()])]))
        .build();
    let list = docker
        .list_volumes(Some(opts))
        .await
        .context("listing Saheeli volumes")?;
    Ok(list
        .volumes
        .unwrap_or_default()
        .into_iter()
        .map(|v| v.name)
        .collect())
}

/// Every Saheeli container (id, task) and volume (name, task) on the daemon.
pub(crate) async fn labelled(
    docker: &Docker,
) -> anyhow::Result<(Vec<(String, String)>, Vec<(String, String)>)> {
    let filters = HashMap::from([("label", vec![TASK_LABEL])]);
    let opts = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    let containers = docker
        .list_containers(Some(opts))
        .await
        .context("listing Saheeli containers")?
        .into_iter()
        .filter_map(|c| Some((c.id?, c.labels?.get(TASK_LABEL)?.clone())))
        .collect();
    let opts = ListVolumesOptionsBuilder::default()
        .filters(&filters)
        .build();
    let volumes = docker
        .list_volumes(Some(opts))
        .await
        .context("listing Saheeli volumes")?
        .volumes
        .unwrap_or_default()
        .into_iter()
        .filter_map(|v| Some((v.name, v.labels.get(TASK_LABEL)?.clone())))
        .collect();
    Ok((containers, volumes))
}

/// Progress of an image build, for the caller to display.
pub(crate) enum BuildProgress {
    Line(String),
}

/// Builds an image from a context tar with the classic builder; never pulls.
/// Returns the new image id. The image it replaces under `tag`, if any and
/// now dangling, is removed.
pub(crate) async fn build_image(
    docker: &Docker,
    context: Bytes,
    tag: &str,
    base_image: &str,
    no_cache: bool,
    mut progress: impl FnMut(BuildProgress),
) -> anyhow::Result<String> {
    require_image(docker, base_image).await.map_err(|_| {
        anyhow::anyhow!(
            "base image `{base_image}` not found; make it with `scripts/setup.sh base` \
             (no registry is used)"
        )
    })?;
    let previous = docker.inspect_image(tag).await.ok().and_then(|i| i.id);
    let buildargs = HashMap::from([("BASE".to_string(), base_image.to_string())]);
    let opts = BuildImageOptionsBuilder::default()
        .dockerfile("Dockerfile")
        .t(tag)
        .rm(true)
        .forcerm(true)
        .nocache(no_cache)
        .networkmode("none")
        .buildargs(&buildargs)
        .build();
    let mut stream = docker.build_image(opts, None, Some(bollard::body_full(context)));
    let mut image_id = None;
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| match e {
            DockerError::DockerStreamError { error } => {
                anyhow::anyhow!("image build failed: {error}")
            }
            e => anyhow::Error::new(e).context("building the servo image"),
        })?;
        if let Some(detail) = info.error_detail {
            anyhow::bail!("image build failed: {}", detail.message.unwrap_or_default());
        }
        if let Some(s) = info.stream {
            for line in s.lines().map(str::trim_end).filter(|l| !l.is_empty()) {
                progress(BuildProgress::Line(line.to_string()));
            }
        }
        if let Some(aux) = info.aux
            && let Some(id) = aux.id
        {
            image_id = Some(id);
        }
    }
    let new_id = match image_id {
        Some(id) => id,
        None => docker
            .inspect_image(tag)
            .await
            .context("inspecting the built image")?
            .id
            .unwrap_or_default(),
    };
    if let Some(old) = previous
        && old != new_id
    {
        let opts = RemoveImageOptionsBuilder::default().noprune(false).build();
        // Only removes it when nothing else uses it; failure is harmless.
        let _ = docker.remove_image(&old, Some(opts), None).await;
    }
    Ok(new_id)
}
