//! `setup:` (issue 49): the task's set-up commands, run before the agent
//! in a container of the task's image on the task's workspace — the same
//! hardening as the task's, no network, the agent's user (root with its
//! group for `agent_user: root`), the workdir — then removed. The servo's
//! container, made already, starts after. The container carries the task's
//! label and `saheeli.role=setup`, so the sweeper and `saheeli gc` find a
//! leftover.
//!
//! With `egress.setup` (issue 50) the servo's egress bridge is exec'd in it
//! as the servo's uid (the gateway directory mounted read-only): the
//! commands, exec'd as the container's (the agent's) user, reach the listed
//! hosts through `HTTP_PROXY` and the set-up phase's proxy, which the
//! foreman serves only while the launch runs.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail};
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig};
use saheeli_protocol::TaskId;
use tracing::{info, warn};

use super::{
    DockerOp, ROLE_LABEL, SERVO_PATH, ServoImage, WorkspaceMount, exec_shell, exec_shell_env,
    remove_container, task_labels, timed,
};
use crate::task::TaskSpec;

/// Output kept of a failed set-up command (head and tail), for the detail.
const SETUP_OUTPUT_CAP: usize = 4 * 1024;

/// Runs each of `commands` in turn, `secrets` in their processes' own
/// environment (not the container's); the first that fails ends it:
/// Ok(Some(why)), quoting its output with the secrets' values masked.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run_setup(
    docker: &Docker,
    id: TaskId,
    run: &ServoImage,
    spec: &TaskSpec,
    workspace: &WorkspaceMount,
    gateway_dir: Option<&std::path::Path>,
    commands: &[String],
    secrets: &BTreeMap<String, String>,
) -> anyhow::Result<Option<String>> {
    let mut labels = task_labels(id);
    labels.insert(ROLE_LABEL.to_string(), "setup".to_string());
    let mut env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    env.push("HOME=/tmp".into());
    let mut mounts = vec![workspace.mount(None, true)];
    let egress = gateway_dir.filter(|_| !spec.egress.setup.is_empty());
    if let Some(dir) = egress {
        mounts.push(super::read_only_bind(
            &dir.display().to_string(),
            saheeli_protocol::paths::GATEWAY_DIR,
        ));
        if let Some(copy) = &run.servo {
            mounts.push(super::read_only_bind(
                &copy.display().to_string(),
                SERVO_PATH,
            ));
        }
        let proxy = saheeli_protocol::egress::proxy_env();
        env.extend(proxy.into_iter().map(|(k, v)| format!("{k}={v}")));
    }
    let body = ContainerCreateBody {
        image: Some(run.image.clone()),
        entrypoint: Some(vec!["sleep".into()]),
        cmd: Some(vec!["infinity".into()]),
        user: Some(super::verify::user_of(spec.root_agent()).into()),
        working_dir: Some(
            spec.workdir
                .clone()
                .unwrap_or_else(|| saheeli_protocol::paths::WORKSPACE.into()),
        ),
        env: Some(env),
        labels: Some(labels),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            mounts: Some(mounts),
            log_config: Some(HostConfigLogConfig {
                typ: Some("none".into()),
                config: None,
            }),
            readonly_rootfs: Some(!spec.root_agent()),
            group_add: super::verify::groups_of(spec.root_agent()),
            ..super::hardened(spec.memory, spec.cpus, spec.pids)
        }),
        ..Default::default()
    };
    let created = timed(DockerOp::CreateContainer, async {
        docker
            .create_container(None, body)
            .await
            .context("creating the set-up container")
    })
    .await?;
    let ran = async {
        timed(DockerOp::Start, async {
            docker
                .start_container(&created.id, None)
                .await
                .context("starting the set-up container")
        })
        .await?;
        let limit = Duration::from_secs(spec.timeout_s.max(1));
        if egress.is_some() {
            let socket = saheeli_protocol::egress::SETUP_SOCKET;
            start_bridge(docker, &created.id, socket).await?;
        }
        let env: Vec<String> = secrets.iter().map(|(k, v)| format!("{k}={v}")).collect();
        for command in commands {
            let r = exec_shell_env(docker, &created.id, command, limit, SETUP_OUTPUT_CAP, env.clone())
                .await?;
            info!(task_id = %id, ms = r.duration.as_millis() as u64, exit = ?r.exit_code, "set-up command ran");
            if r.exit_code != Some(0) {
                let how = match r.exit_code {
                    Some(code) => format!("exited with code {code}"),
                    None => format!("did not finish within {}s", limit.as_secs()),
                };
                let output = super::setup_phase::masked(&r.output, secrets);
                return Ok(Some(format!(
                    "set-up command `{command}` {how}; its output:\n{}",
                    output.trim_end()
                )));
            }
        }
        Ok(None)
    }
    .await;
    if let Err(e) = remove_container(docker, &created.id).await {
        warn!(task_id = %id, error = %format!("{e:#}"), "the set-up container was not removed");
    }
    ran
}

/// Starts the servo's egress bridge in a running set-up or verify
/// container, as the servo's uid (the only one that can open the phase's
/// socket; the commands run as the container's user), and waits until it
/// listens.
pub(crate) async fn start_bridge(
    docker: &Docker,
    container: &str,
    socket: &str,
) -> anyhow::Result<()> {
    let argv = vec![
        SERVO_PATH.to_string(),
        "egress-bridge".to_string(),
        format!("{}/{socket}", saheeli_protocol::paths::GATEWAY_DIR),
    ];
    let servo = saheeli_protocol::uids::SERVO;
    super::exec::spawn_as(docker, container, argv, &format!("{servo}:{servo}")).await?;
    bridge_listening(docker, container).await
}

/// Waits until the egress bridge listens on the proxy's port (read from
/// the container's own `/proc/net/tcp`: no connection is made), so the
/// first command finds it.
async fn bridge_listening(docker: &Docker, container: &str) -> anyhow::Result<()> {
    let port = format!("{:04X}", saheeli_protocol::egress::PROXY_PORT);
    let script = format!(
        "for i in $(seq 200); do grep -q ':{port} 00000000:0000 0A' /proc/net/tcp && exit 0; \
         sleep 0.02; done; exit 1"
    );
    let r = exec_shell(docker, container, &script, Duration::from_secs(10), 1024).await?;
    if r.exit_code != Some(0) {
        bail!(
            "the egress bridge did not listen on 127.0.0.1:{} within 4s",
            saheeli_protocol::egress::PROXY_PORT
        );
    }
    Ok(())
}
