//! `setup:` (issue 49): the task's set-up commands, run before the agent
//! in a container of the task's image on the task's workspace — the same
//! hardening as the task's, no network, the agent's user, the workdir —
//! then removed. The servo's container, made already, starts after. The
//! container carries the task's label and `saheeli.role=setup`, so the
//! sweeper and `saheeli gc` find a leftover.
//!
//! With `egress.setup` (issue 50) the container's main process is the
//! servo's egress bridge (as the servo's uid, the gateway directory
//! mounted read-only): the commands, exec'd as the agent's uid, reach the
//! listed hosts through `HTTP_PROXY` and the set-up phase's proxy, which
//! the foreman serves only while the launch runs.

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
    let (entrypoint, cmd, user) = match egress {
        Some(dir) => {
            use saheeli_protocol::egress::{SETUP_SOCKET, proxy_env};
            let bind = |source: String, target: &str| bollard::models::Mount {
                target: Some(target.into()),
                source: Some(source),
                typ: Some(bollard::models::MountType::BIND),
                read_only: Some(true),
                ..Default::default()
            };
            mounts.push(bind(
                dir.display().to_string(),
                saheeli_protocol::paths::GATEWAY_DIR,
            ));
            if let Some(copy) = &run.servo {
                mounts.push(bind(copy.display().to_string(), SERVO_PATH));
            }
            env.extend(proxy_env().into_iter().map(|(k, v)| format!("{k}={v}")));
            let socket = format!("{}/{SETUP_SOCKET}", saheeli_protocol::paths::GATEWAY_DIR);
            (
                vec![SERVO_PATH.to_string(), "egress-bridge".into()],
                vec![socket],
                saheeli_protocol::uids::SERVO,
            )
        }
        None => (
            vec!["sleep".into()],
            vec!["infinity".into()],
            saheeli_protocol::uids::AGENT,
        ),
    };
    let body = ContainerCreateBody {
        image: Some(run.image.clone()),
        entrypoint: Some(entrypoint),
        cmd: Some(cmd),
        user: Some(format!("{0}:{0}", user)),
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
            bridge_listening(docker, &created.id).await?;
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

/// Waits until the egress bridge listens on the proxy's port (read from
/// the container's own `/proc/net/tcp`: no connection is made), so the
/// first command finds it.
pub(crate) async fn bridge_listening(docker: &Docker, container: &str) -> anyhow::Result<()> {
    let port = format!("{:04X}", saheeli_protocol::egress::PROXY_PORT);
    let script = format!(
        "for i in $(seq 200); do grep -q ':{port} 00000000:0000 0A' /proc/net/tcp && exit 0; \
         sleep 0.02; done; exit 1"
    );
    let r = exec_shell(docker, container, &script, Duration::from_secs(10), 1024).await?;
    if r.exit_code != Some(0) {
        bail!(
            "the set-up container's egress bridge did not listen on 127.0.0.1:{} within 4s",
            saheeli_protocol::egress::PROXY_PORT
        );
    }
    Ok(())
}
