//! The container a `verify` attempt runs in: new, from the task's image,
//! with the task's workspace on /workspace and nothing else of the
//! agent's (HOSTILE.md case 27: a `.pth` file in the agent's `$HOME`, its
//! own tmpfs, made `python3 -m unittest` pass with the work undone).
//!
//! A fresh `/tmp` (and so `$HOME`), the task container's hardening (cap-drop
//! ALL, no-new-privileges, read-only root, user 1000:1000, init; for
//! `agent_user: root` user 0:0 with the agent's group and a writable root), its
//! declared `env:` and limits, no gateway socket and no launch settings
//! (with `egress.verify`, issue 50: the gateway directory, for the servo's
//! egress bridge on the verify phase's socket, exec'd as the servo's uid).
//! It idles (`sleep infinity`) so that the restore of `verify_files` and
//! each command run in it by exec, under [`super::exec`]'s caps.
//!
//! While it is used, the task's own container is **paused** (the cgroup
//! freezer): every process of the agent, whatever it did to escape the
//! servo's `kill(-1)` (a `setsid`, ignoring signals, a shell that posts
//! to the verify route itself), is frozen and cannot touch the workspace
//! mid-check. Paused rather than killed: the servo in that container is
//! waiting for the verdict and carries on after it (a failed attempt is
//! fed back and the agent fixes its work), which a kill would end; a
//! freeze is also atomic (no process can outrun it) and undone exactly.
//!
//! A check the agent gets its workspace back after, on a task with hidden
//! tests, is given a throwaway copy-on-write view of the workspace instead
//! (`verify_copy`): made once the task's container is paused, removed
//! before it runs again, so nothing the checked code writes reaches it.
//!
//! The verify container carries the task's label and `saheeli.role=verify`:
//! [`super::task_containers`] never takes it for the servo's, while the
//! sweeper and `saheeli gc` (which list by the task label alone) remove a
//! leftover of an ended task, and [`recover_verify`] one of a task a restarted
//! foreman adopts.

use std::collections::HashMap;

use anyhow::Context;
use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig};
use bollard::query_parameters::CreateContainerOptionsBuilder;
use saheeli_protocol::{NetworkMode, TaskId, paths};
use tracing::warn;

use super::verify_copy::OnCopy;
use super::verify_undo::{pause, unpause};
use super::{DockerOp, WorkspaceMount, remove_container, task_labels, timed};

/// The label saying what a container of a task is for (absent on the
/// servo's own container).
pub(crate) const ROLE_LABEL: &str = "saheeli.role";

/// Where a verify container sees the task's hidden tests.
pub(crate) const TESTS_DIR: &str = "/tests";

/// [`ROLE_LABEL`]'s value on a verify container.
pub(crate) const VERIFY_ROLE: &str = "verify";

/// What a verify container takes from the task's spec.
#[derive(Clone, Debug)]
pub(crate) struct Sandbox {
    /// The task's declared `env:` (`K=V`), nothing of the servo's.
    pub env: Vec<String>,
    pub memory: u64,
    pub cpus: f64,
    pub pids: i64,
    pub network: VerifyNetwork,
    /// Where the commands start (`workdir:`; else /workspace).
    pub working_dir: Option<String>,
    /// `egress.verify` lists hosts (issue 50): the servo's egress bridge
    /// runs in the container, on the verify phase's socket.
    pub egress: bool,
    /// `agent_user: root`: the checks run as root too (no capability), on
    /// a writable root, as the task's own verifier expects.
    pub root: bool,
}

impl Sandbox {
    /// What a check of `spec`'s work takes from it: its `env:` and the
    /// verify's own, its limits, its workdir.
    pub fn of(spec: &crate::task::TaskSpec, network: VerifyNetwork) -> Sandbox {
        Sandbox {
            env: spec
                .env
                .iter()
                .chain(spec.verify_env.iter())
                .map(|(k, v)| format!("{k}={v}"))
                .collect(),
            memory: spec.memory,
            cpus: spec.cpus,
            pids: spec.pids,
            network,
            working_dir: spec.workdir.clone(),
            egress: !spec.egress.verify.is_empty(),
            root: spec.root_agent(),
        }
    }
}

/// The user of a task's set-up and checking containers: the agent's, or
/// root (with no capability) for `agent_user: root`.
pub(crate) fn user_of(root: bool) -> &'static str {
    if root { "0:0" } else { "1000:1000" }
}

/// Root's groups besides its own there: the agent's, which may add files
/// to the sticky /workspace (the servo's, writable by that group), as a
/// root agent's processes have it.
pub(crate) fn groups_of(root: bool) -> Option<Vec<String>> {
    root.then(|| vec![saheeli_protocol::uids::AGENT.to_string()])
}

/// The network a verify container gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VerifyNetwork {
    /// The task's declared mode, in a network namespace of its own
    /// (the local engine).
    Declared(NetworkMode),
    /// The task container's namespace (a swarm: its overlay, which a
    /// container outside the service cannot join). Its processes are
    /// frozen while the check runs.
    OfTask,
}

/// A verify container, made (`make`), then used with the task container
/// paused ([`freeze`], then [`VerifyBox::held_already`]). Close it with [`VerifyBox::close`] or [`VerifyBox::release`]; [`recover_verify`] undoes one a crash left.
pub(crate) struct VerifyBox {
    docker: Docker,
    task_container: String,
    container: String,
    /// The task's workspace, bound on its /workspace.
    workspace: WorkspaceMount,
    /// Whether the task's container is paused for it ([`VerifyBox::held_already`]).
    held: bool,
    /// The state directory its copy-on-write view of the workspace is
    /// under, when the agent gets its workspace back after the check
    /// (`verify_copy`; `workspace` is then the view).
    copy: Option<std::path::PathBuf>,
    id: TaskId,
}

impl VerifyBox {
    /// Creates and starts the verify container of attempt `attempt` beside
    /// `task_container`, which goes on running until the check [`freeze`]s it:
    /// made ahead of the check (the agent cannot reach it: no process of
    /// its runs there, and the tests are bound in this container only).
    /// `copy`: the check sees a copy-on-write view of the workspace
    /// (`verify_copy`), made now: the task's container must be paused
    /// already (the view's lower layer must not change under it). On an
    /// error, whatever was made is undone.
    pub async fn make(
        docker: &Docker,
        id: TaskId,
        task_container: &str,
        sandbox: &Sandbox,
        (attempt, copy): (u32, Option<OnCopy<'_>>),
        tests: Option<&std::path::Path>,
    ) -> anyhow::Result<VerifyBox> {
        let (image, volume, egress) = task_image_and_volume(docker, task_container).await?;
        let egress = egress.filter(|_| sandbox.egress);
        let mut b = VerifyBox {
            docker: docker.clone(),
            task_container: task_container.to_string(),
            container: String::new(),
            workspace: volume,
            held: false,
            copy: None,
            id,
        };
        let made = async {
            if let Some(at) = copy {
                b.copy = Some(at.state_dir.to_path_buf());
                let view = super::verify_copy::make(docker, id, &b.workspace, at).await?;
                b.workspace = WorkspaceMount::Bind(view);
            }
            b.container = create(
                docker,
                id,
                task_container,
                (&image, &b.workspace),
                sandbox,
                attempt,
                (tests, egress.as_ref()),
            )
            .await?;
            timed(DockerOp::Start, async {
                docker
                    .start_container(&b.container, None)
                    .await
                    .context("starting the verify container")
            })
            .await?;
            if egress.is_some() {
                let socket = saheeli_protocol::egress::VERIFY_SOCKET;
                super::setup::start_bridge(docker, &b.container, socket).await?;
            }
            anyhow::Ok(())
        }
        .await;
        match made {
            Ok(()) => Ok(b),
            Err(e) => {
                if let Err(undo) = b.close().await {
                    warn!(task_id = %id, error = %format!("{undo:#}"), "verify container not undone");
                }
                Err(e)
            }
        }
    }

    /// The task's container was paused for this check by [`freeze`] (while
    /// this container was still being made): it is resumed on release.
    pub fn held_already(&mut self) {
        self.held = true;
    }

    /// The verify container's id.
    pub fn container(&self) -> &str {
        &self.container
    }

    /// The workspace's directory on this host, when the daemon is this
    /// host's (a local volume's mount point, or the workspace image's).
    pub async fn host_workspace(&self) -> Option<std::path::PathBuf> {
        match &self.workspace {
            WorkspaceMount::Bind(dir) => Some(dir.clone()),
            WorkspaceMount::Volume(name) => super::local_volume_dir_named(&self.docker, name).await,
        }
    }

    /// The task's container it checks.
    pub fn task_container(&self) -> &str {
        &self.task_container
    }

    /// Ends the check at once: every process of the verify container is
    /// killed (Docker's kill of SIGKILL returns once it has stopped), its
    /// copy of the workspace removed, then the task's container runs
    /// again. `ends`: the check passed and the task ends now (no assessor
    /// follows), so its container runs again while the kill goes on (what
    /// is left of the check is gone before the workspace is collected: the
    /// collection removes every verify container first); not with a copy,
    /// which goes first. The removal (unmounting its root takes longest)
    /// goes on in the returned task, which the caller awaits before the
    /// workspace is collected or removed.
    pub async fn release(
        self,
        ends: bool,
    ) -> (
        anyhow::Result<()>,
        tokio::task::JoinHandle<anyhow::Result<()>>,
    ) {
        let resume = async {
            match self.held {
                true => unpause(&self.docker, &self.task_container).await,
                false => Ok(()),
            }
        };
        let kill = async {
            match self.container.is_empty() {
                true => Ok(()),
                false => super::verify_undo::kill(&self.docker, &self.container).await,
            }
        };
        let (killed, uncopied, resumed) = match &self.copy {
            None if ends => {
                let (killed, resumed) = tokio::join!(kill, resume);
                (killed, Ok(()), resumed)
            }
            // The copy's overlay goes before its lower layer, the
            // workspace, changes again; one that could not be removed has
            // no user left and never reaches the workspace, so the task
            // runs again whatever happened.
            copy => {
                let killed = kill.await;
                let uncopied = match copy {
                    Some(state_dir) => super::verify_copy::remove(state_dir, self.id).await,
                    None => Ok(()),
                };
                (killed, uncopied, resume.await)
            }
        };
        let (docker, container) = (self.docker, self.container);
        let removing = tokio::spawn(async move {
            if container.is_empty() {
                return Ok(());
            }
            remove_container(&docker, &container).await
        });
        (killed.and(uncopied).and(resumed), removing)
    }

    /// Removes the verify container (what it left running goes with it),
    /// then lets the task container run again.
    pub async fn close(self) -> anyhow::Result<()> {
        let (released, removing) = self.release(false).await;
        let removed = match removing.await {
            Ok(r) => r,
            Err(e) => Err(anyhow::anyhow!(
                "the removal of the verify container failed: {e}"
            )),
        };
        released.and(removed)
    }
}

/// Pauses a task's container (the cgroup freezer) for a check, while its
/// verify container may still be being made (then
/// [`VerifyBox::held_already`]); [`thaw`] undoes it when no check follows.
pub(crate) async fn freeze(docker: &Docker, task_container: &str) -> anyhow::Result<()> {
    pause(docker, task_container).await
}

/// Resumes a task's container [`freeze`] paused, when its check failed to
/// get a verify container.
pub(crate) async fn thaw(docker: &Docker, task_container: &str) -> anyhow::Result<()> {
    unpause(docker, task_container).await
}

/// What a verify container needs of the task's for its egress bridge
/// (issue 50): the gateway directory and, when the servo is bound from a
/// host copy, that copy.
#[derive(Clone, Debug)]
pub(crate) struct BridgeMounts {
    pub gateway_dir: String,
    pub servo: Option<String>,
}

/// The image (its id: exactly what the servo runs), the /workspace of the
/// task's container, and its gateway directory and servo binds.
async fn task_image_and_volume(
    docker: &Docker,
    container: &str,
) -> anyhow::Result<(String, WorkspaceMount, Option<BridgeMounts>)> {
    let c = timed(DockerOp::Inspect, async {
        docker
            .inspect_container(container, None)
            .await
            .context("inspecting the task's container")
    })
    .await?;
    let image = c.image.context("the task's container has no image id")?;
    let mounts = c.mounts.unwrap_or_default();
    let bind = |to: &str| {
        mounts
            .iter()
            .find(|m| m.destination.as_deref() == Some(to))
            .and_then(|m| m.source.clone())
    };
    let bridge = bind(paths::GATEWAY_DIR).map(|gateway_dir| BridgeMounts {
        gateway_dir,
        servo: bind(super::SERVO_PATH),
    });
    let volume = WorkspaceMount::of(mounts).with_context(|| {
        format!(
            "the task's container has no workspace on {}: nothing to verify",
            paths::WORKSPACE
        )
    })?;
    Ok((image, volume, bridge))
}

fn verify_labels(id: TaskId) -> HashMap<String, String> {
    let mut labels = task_labels(id);
    labels.insert(ROLE_LABEL.to_string(), VERIFY_ROLE.to_string());
    labels
}

/// The verify container (created, not started).
async fn create(
    docker: &Docker,
    id: TaskId,
    task_container: &str,
    (image, volume): (&str, &WorkspaceMount),
    sandbox: &Sandbox,
    attempt: u32,
    (tests, egress): (Option<&std::path::Path>, Option<&BridgeMounts>),
) -> anyhow::Result<String> {
    // The workspace exists: an emptied one must stay empty, not be filled
    // with the image's /workspace.
    let mount = volume.mount(None, true);
    let (network_mode, disabled) = match sandbox.network {
        VerifyNetwork::Declared(m) => (m.as_str().to_string(), m == NetworkMode::None),
        VerifyNetwork::OfTask => (format!("container:{task_container}"), false),
    };
    let mut body = checking_body(image, sandbox, mount, tests, verify_labels(id));
    if let Some(b) = egress {
        with_bridge(&mut body, b);
    }
    body.network_disabled = Some(disabled);
    if let Some(h) = body.host_config.as_mut() {
        h.network_mode = Some(network_mode);
    }
    let opts = CreateContainerOptionsBuilder::default()
        .name(&format!("saheeli-{id}-verify-{attempt}"))
        .build();
    let created = timed(DockerOp::CreateContainer, async {
        match docker.create_container(Some(opts), body.clone()).await {
            // A leftover may hold the name; names are cosmetic.
            Err(DockerError::DockerResponseServerError {
                status_code: 409, ..
            }) => docker.create_container(None, body).await,
            other => other,
        }
        .with_context(|| format!("creating the verify container from image `{image}`"))
    })
    .await?;
    Ok(created.id)
}

/// A container that checks a workspace (a verify attempt's, a regrade's):
/// `image` idling as the agent's user in the workdir, the task's
/// hardening, env and limits, no network, `workspace` on /workspace, the
/// hidden tests read-only at /tests, /logs/verifier writable, no log.
pub(crate) fn checking_body(
    image: &str,
    sandbox: &Sandbox,
    workspace: bollard::models::Mount,
    tests: Option<&std::path::Path>,
    labels: HashMap<String, String>,
) -> ContainerCreateBody {
    let mut mounts = vec![workspace];
    // The hidden tests (issue 49): read-only, in this container only.
    if let Some(dir) = tests {
        mounts.push(super::read_only_bind(&dir.display().to_string(), TESTS_DIR));
    }
    let mut hardened = super::hardened(sandbox.memory, sandbox.cpus, sandbox.pids);
    // Where a verifier writes its reward (Harbor's /logs/verifier).
    if let Some(t) = hardened.tmpfs.as_mut() {
        t.insert(
            "/logs/verifier".to_string(),
            "rw,nosuid,nodev,size=64m,mode=1777".to_string(),
        );
    }
    let mut env = sandbox.env.clone();
    env.push("HOME=/tmp".into());
    ContainerCreateBody {
        image: Some(image.into()),
        entrypoint: Some(vec!["sleep".into()]),
        cmd: Some(vec!["infinity".into()]),
        user: Some(user_of(sandbox.root).into()),
        working_dir: Some(
            sandbox
                .working_dir
                .clone()
                .unwrap_or_else(|| paths::WORKSPACE.into()),
        ),
        env: Some(env),
        labels: Some(labels),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            mounts: Some(mounts),
            // Output is read through the exec, never the container's log: a
            // command writing to /proc/1/fd/1 fills no file on the host.
            log_config: Some(HostConfigLogConfig {
                typ: Some("none".into()),
                config: None,
            }),
            readonly_rootfs: Some(!sandbox.root),
            group_add: groups_of(sandbox.root),
            ..hardened
        }),
        ..Default::default()
    }
}

/// Gives the verify container what the servo's egress bridge needs (the
/// gateway directory, the servo when bound from a host copy) and the
/// proxy's environment; the bridge is exec'd once it runs.
fn with_bridge(body: &mut ContainerCreateBody, b: &BridgeMounts) {
    use saheeli_protocol::egress::proxy_env;
    if let Some(h) = body.host_config.as_mut() {
        let mounts = h.mounts.get_or_insert_with(Vec::new);
        mounts.push(super::read_only_bind(&b.gateway_dir, paths::GATEWAY_DIR));
        if let Some(servo) = &b.servo {
            mounts.push(super::read_only_bind(servo, super::SERVO_PATH));
        }
    }
    body.env
        .get_or_insert_with(Vec::new)
        .extend(proxy_env().into_iter().map(|(k, v)| format!("{k}={v}")));
}
