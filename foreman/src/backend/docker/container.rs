//! A task's hardened container: create, inputs in, start, wait, stop,
//! workspace out, remove.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount, MountType, ResourcesUlimits,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, DownloadFromContainerOptionsBuilder,
    RemoveContainerOptionsBuilder, StopContainerOptionsBuilder, UploadToContainerOptionsBuilder,
    WaitContainerOptionsBuilder,
};
use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};
use saheeli_protocol::{TaskId, paths};

use crate::spec::TaskSpec;

use super::owner::Owner;
use super::{DockerOp, ImageMissing, WorkspaceMount, task_labels, timed};

/// The capabilities a servo container starts with (and all it ever has).
/// The servo keeps only CAP_SETUID/CAP_SETGID (permitted, not effective)
/// once it is its own user; CAP_KILL stays with the container's init
/// (root, PID 1), which must forward Docker's SIGTERM to the servo: a
/// signal to another uid needs it. The agent's processes have none.
pub(crate) const CONTAINER_CAPS: [&str; 3] = ["CAP_SETUID", "CAP_SETGID", "CAP_KILL"];

/// The label with the image a servo container was launched as, when it is
/// created from that image's id (its servo bound from a host copy).
pub(crate) const IMAGE_LABEL: &str = "saheeli.image";

/// The container log's cap (Docker's json-file `max-size`).
pub(crate) const LOG_MAX_SIZE: &str = "8m";

/// Open files per process in a task container.
pub(crate) const CONTAINER_NOFILE: i64 = 4096;

/// Creates the hardened servo container for a task; does not start it.
/// `setup_tar`: a cached set-up's tar on this host, bound in for the
/// servo to unpack (issue 50); `seed`: the servo copies what the task's
/// image held at `workdir:` into the workspace (issue 49).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn create_container(
    docker: &Docker,
    id: TaskId,
    spec: &TaskSpec,
    run: &super::ServoImage,
    workspace: &WorkspaceMount,
    gateway_dir: Option<&Path>,
    launch_env: Option<String>,
    setup_tar: Option<&Path>,
    seed: bool,
) -> anyhow::Result<String> {
    let mut env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if seed {
        use saheeli_protocol::setup::{SEED_DIR, SEED_ENV};
        env.push(format!("{SEED_ENV}={SEED_DIR}"));
    }
    if let Some(json) = launch_env {
        env.push(format!("{}={json}", saheeli_protocol::LAUNCH_ENV));
    }
    let mut binds: Vec<(std::path::PathBuf, String)> = spec
        .solution
        .iter()
        .map(|s| (s.clone(), "/solution".to_string()))
        .collect();
    if let Some(tar) = setup_tar {
        env.push(setup_env());
        binds.push((tar.to_path_buf(), saheeli_protocol::setup::TAR_PATH.into()));
    }
    create_servo(
        docker,
        ServoContainer {
            name: format!("saheeli-{id}"),
            labels: task_labels(id),
            image: run,
            workspace,
            gateway_dir,
            env,
            network: spec.network,
            memory: spec.memory,
            cpus: spec.cpus,
            pids: spec.pids,
            binds,
            working_dir: spec.workdir.clone(),
            root_agent: spec.root_agent(),
        },
    )
    .await
}

/// The variable that tells a servo to unpack the cached set-up bound at
/// [`saheeli_protocol::setup::TAR_PATH`].
pub(crate) fn setup_env() -> String {
    use saheeli_protocol::setup::{TAR_ENV, TAR_PATH};
    format!("{TAR_ENV}={TAR_PATH}")
}

/// What a servo container is made of: the same hardening for a cold one
/// (a task's) and a warm one (the pool's, issue 28), only the name,
/// labels, environment and limits differ.
pub(crate) struct ServoContainer<'a> {
    pub name: String,
    pub labels: HashMap<String, String>,
    /// The image, and the host copy of its servo bound read-only over
    /// its own (see `servo_copy`; the image is then named by its id).
    pub image: &'a super::ServoImage,
    pub workspace: &'a WorkspaceMount,
    pub gateway_dir: Option<&'a Path>,
    /// Besides `HOME` and the separation flag every servo gets.
    pub env: Vec<String>,
    pub network: saheeli_protocol::NetworkMode,
    pub memory: u64,
    pub cpus: f64,
    pub pids: i64,
    /// Host paths bound read-only at container paths (the oracle's
    /// `/solution`).
    pub binds: Vec<(std::path::PathBuf, String)>,
    /// Where its processes start (`workdir:`; else /workspace).
    pub working_dir: Option<String>,
    /// `agent_user: root`: the agent's processes are uid 0 (with no
    /// capability) and the root file system is writable, root's files
    /// being what such a task installs into (/usr/local, /etc, /root).
    pub root_agent: bool,
}

/// Creates a hardened servo container; does not start it.
pub(crate) async fn create_servo(docker: &Docker, c: ServoContainer<'_>) -> anyhow::Result<String> {
    let ServoContainer {
        name,
        mut labels,
        image,
        workspace,
        gateway_dir,
        mut env,
        network,
        memory,
        cpus,
        pids,
        binds,
        working_dir,
        root_agent,
    } = c;
    let mut mounts = vec![workspace.mount(Some(labels.clone()), false)];
    if let Some(dir) = gateway_dir {
        mounts.push(read_only_bind(
            &dir.display().to_string(),
            paths::GATEWAY_DIR,
        ));
    }
    for (source, target) in &binds {
        mounts.push(read_only_bind(&source.display().to_string(), target));
    }
    if let Some(copy) = &image.servo {
        // The tag it was launched as, beside the id `Config.Image` shows.
        labels.insert(IMAGE_LABEL.to_string(), image.named.clone());
        mounts.push(read_only_bind(
            &copy.display().to_string(),
            super::SERVO_PATH,
        ));
    }
    env.push("HOME=/tmp".into());
    let privsep = if root_agent {
        saheeli_protocol::uids::PRIVSEP_ROOT
    } else {
        "1"
    };
    env.push(format!("{}={privsep}", saheeli_protocol::uids::PRIVSEP_ENV));
    let mut hardened = hardened(memory, cpus, pids);
    // Root's files are the image's: a read-only root would leave a root
    // agent nothing to write that the agent's user could not.
    hardened.readonly_rootfs = Some(!root_agent);
    let host_config = HostConfig {
        // The servo starts as root with these only, becomes its own user
        // at once and keeps two (not effective) just to start the agent's
        // processes as another user, which get none (`privsep` in the
        // servo). no-new-privileges: nothing regains one by `exec`.
        cap_add: Some(CONTAINER_CAPS.iter().map(|c| c.to_string()).collect()),
        // The container's log is a side door to the host's disk (anything
        // the servo prints): capped. `task logs` reads the audit log.
        log_config: Some(HostConfigLogConfig {
            typ: Some("json-file".into()),
            config: Some(HashMap::from([
                ("max-size".to_string(), LOG_MAX_SIZE.to_string()),
                ("max-file".to_string(), "1".to_string()),
            ])),
        }),
        // A servo needs a handful of descriptors, an agent's tools some
        // hundreds; the foreman's own limit is not the container's.
        ulimits: Some(vec![ResourcesUlimits {
            name: Some("nofile".into()),
            soft: Some(CONTAINER_NOFILE),
            hard: Some(CONTAINER_NOFILE),
        }]),
        network_mode: Some(network.as_str().into()),
        mounts: Some(mounts),
        ..hardened
    };
    let body = ContainerCreateBody {
        image: Some(image.image.clone()),
        // Root only until the servo separates itself (see cap_add).
        user: Some("0:0".into()),
        working_dir: Some(working_dir.unwrap_or_else(|| paths::WORKSPACE.into())),
        env: Some(env),
        labels: Some(labels),
        network_disabled: Some(network == saheeli_protocol::NetworkMode::None),
        stop_signal: Some("SIGTERM".into()),
        host_config: Some(host_config),
        ..Default::default()
    };
    let opts = CreateContainerOptionsBuilder::default().name(&name).build();
    let created = timed(DockerOp::CreateContainer, async {
        let created = match docker.create_container(Some(opts), body.clone()).await {
            // A stale container may hold the short name; names are cosmetic, so retry without one.
            Err(DockerError::DockerResponseServerError {
                status_code: 409, ..
            }) => docker.create_container(None, body).await,
            other => other,
        };
        match created {
            Ok(created) => Ok(created),
            // The image is checked once per serve, not per launch: one
            // removed since is found here, and no retry can help.
            Err(DockerError::DockerResponseServerError {
                status_code: 404,
                message,
            }) if message.contains("image") => Err(ImageMissing(image.named.clone()).into()),
            Err(e) => {
                let named = &image.named;
                Err(e).with_context(|| format!("creating the servo container from image `{named}`"))
            }
        }
    })
    .await?;
    Ok(created.id)
}

/// Extracts a tar archive into the container's /workspace.
pub(crate) async fn upload(docker: &Docker, container: &str, tar: Bytes) -> anyhow::Result<()> {
    upload_as(docker, container, tar, Owner::Archive).await
}

/// Extracts a tar archive of the agent's files into /workspace, owned by `owner`.
pub(crate) async fn upload_as(
    docker: &Docker,
    container: &str,
    tar: Bytes,
    owner: Owner,
) -> anyhow::Result<()> {
    let tar = owner.bytes(tar).await?;
    let opts = UploadToContainerOptionsBuilder::default()
        .path(paths::WORKSPACE)
        .build();
    timed(DockerOp::Upload, async {
        docker
            .upload_to_container(container, Some(opts), bollard::body_full(tar))
            .await
            .context("uploading into /workspace")
    })
    .await
}

/// Streams a tar file of the agent's files from disk into the container's
/// /workspace, owned by `owner`.
pub(crate) async fn upload_file(
    docker: &Docker,
    container: &str,
    tar: &Path,
    owner: Owner,
) -> anyhow::Result<()> {
    let opened = || format!("opening `{}`", tar.display());
    let (file, rewrite) = match owner {
        Owner::Archive => (tokio::fs::File::open(tar).await.with_context(opened)?, None),
        Owner::Root => {
            let (file, done) = super::owner::root_stream(tar).with_context(opened)?;
            (file, Some(done))
        }
    };
    let stream = tokio_util::io::ReaderStream::new(file);
    let opts = UploadToContainerOptionsBuilder::default()
        .path(paths::WORKSPACE)
        .build();
    timed(DockerOp::Upload, async {
        docker
            .upload_to_container(container, Some(opts), bollard::body_try_stream(stream))
            .await
            .context("uploading the workspace into /workspace")
    })
    .await?;
    if let Some(done) = rewrite {
        done.await?
            .with_context(|| format!("giving the files of `{}` to root", tar.display()))?;
    }
    Ok(())
}

pub(crate) async fn start(docker: &Docker, container: &str) -> anyhow::Result<()> {
    timed(DockerOp::Start, async {
        docker
            .start_container(container, None)
            .await
            .context("starting the servo container")
    })
    .await
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
    inspect(docker, container)
        .await
        .ok()
        .and_then(|c| c.state)
        .and_then(|s| s.oom_killed)
        .unwrap_or(false)
}

/// Whether the container was ever started (running, exited or dead, as
/// opposed to only created).
/// An error means "unknown, ask again", never "not started".
pub(crate) async fn has_started(docker: &Docker, container: &str) -> anyhow::Result<bool> {
    let c = inspect(docker, container).await?;
    Ok(c.state
        .and_then(|s| s.started_at)
        .is_some_and(|t| !t.starts_with("0001-01-01")))
}

/// Whether the container runs now; None when there is no such container.
/// An error means "unknown, ask again".
pub(crate) async fn running(docker: &Docker, container: &str) -> anyhow::Result<Option<bool>> {
    let inspected = timed(DockerOp::Inspect, async {
        match docker.inspect_container(container, None).await {
            Err(DockerError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(None),
            other => other.map(Some).context("inspecting the servo container"),
        }
    })
    .await?;
    Ok(inspected.map(|c| c.state.and_then(|s| s.running).unwrap_or(false)))
}

async fn inspect(
    docker: &Docker,
    container: &str,
) -> anyhow::Result<bollard::models::ContainerInspectResponse> {
    timed(DockerOp::Inspect, async {
        docker
            .inspect_container(container, None)
            .await
            .context("inspecting the servo container")
    })
    .await
}

/// SIGTERM, then SIGKILL after `grace`.
pub(crate) async fn stop(docker: &Docker, container: &str, grace: Duration) -> anyhow::Result<()> {
    let opts = StopContainerOptionsBuilder::default()
        .t(grace.as_secs().max(1) as i32)
        .build();
    timed(DockerOp::Stop, async {
        match docker.stop_container(container, Some(opts)).await {
            Ok(())
            | Err(DockerError::DockerResponseServerError {
                status_code: 304, ..
            }) => Ok(()),
            Err(e) => Err(e).context("stopping the servo container"),
        }
    })
    .await
}

/// SIGKILL, when a stop did not take. A container that is not running
/// (any more) is not an error.
pub(crate) async fn kill(docker: &Docker, container: &str) -> anyhow::Result<()> {
    timed(DockerOp::Kill, async {
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
    })
    .await
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
    timed(DockerOp::RemoveContainer, async {
        match docker.remove_container(container, Some(opts)).await {
            Ok(())
            | Err(DockerError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(()),
            Err(e) => Err(e).with_context(|| format!("removing container `{container}`")),
        }
    })
    .await
}

/// What every container of a task shares, its servo's and a verify's:
/// no capability, no-new-privileges, a read-only root with a small
/// `/tmp`, an init, and the task's memory (no swap), CPU and pids limits.
pub(crate) fn hardened(memory: u64, cpus: f64, pids: i64) -> HostConfig {
    let memory = i64::try_from(memory).unwrap_or(i64::MAX);
    HostConfig {
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        privileged: Some(false),
        readonly_rootfs: Some(true),
        tmpfs: Some(HashMap::from([(
            "/tmp".to_string(),
            // `exec`: Docker's tmpfs is noexec unless asked, and tasks build
            // and run programs there (Go's GOTMPDIR, a test's scratch
            // binary); the workspace can run them anyway.
            "rw,exec,nosuid,nodev,size=256m".to_string(),
        )])),
        memory: Some(memory),
        memory_swap: Some(memory),
        nano_cpus: Some((cpus * 1e9) as i64),
        pids_limit: Some(pids),
        init: Some(true),
        ..Default::default()
    }
}

/// A read-only bind of the host path `source` at `target`: the gateway
/// directory, a servo copied to this host, the hidden tests.
pub(crate) fn read_only_bind(source: &str, target: &str) -> Mount {
    Mount {
        target: Some(target.into()),
        source: Some(source.into()),
        typ: Some(MountType::BIND),
        read_only: Some(true),
        ..Default::default()
    }
}
