//! `setup:` (issue 49): the task's set-up commands, run before the agent
//! in a container of the task's image on the task's workspace — the same
//! hardening as the task's, no network (until egress rules land), the
//! agent's user (root with its group for `agent_user: root`), the
//! workdir — then removed. The servo's container, made
//! already, starts after. The container carries the task's label and
//! `saheeli.role=setup`, so the sweeper and `saheeli gc` find a leftover.

use std::time::Duration;

use anyhow::{Context, bail};
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig};
use saheeli_protocol::TaskId;
use tracing::{info, warn};

use super::{
    DockerOp, ROLE_LABEL, WorkspaceMount, exec_shell, remove_container, task_labels, timed,
};
use crate::task::TaskSpec;

/// Output kept of a failed set-up command (head and tail), for the detail.
const SETUP_OUTPUT_CAP: usize = 4 * 1024;

/// Runs each of `spec.setup` in turn; the first that fails ends it with
/// an error quoting the command's output.
pub(crate) async fn run_setup(
    docker: &Docker,
    id: TaskId,
    image: &str,
    spec: &TaskSpec,
    workspace: &WorkspaceMount,
) -> anyhow::Result<()> {
    let mut labels = task_labels(id);
    labels.insert(ROLE_LABEL.to_string(), "setup".to_string());
    let mut env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    env.push("HOME=/tmp".into());
    let body = ContainerCreateBody {
        image: Some(image.into()),
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
            mounts: Some(vec![workspace.mount(None, true)]),
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
        for command in &spec.setup {
            let r = exec_shell(docker, &created.id, command, limit, SETUP_OUTPUT_CAP).await?;
            info!(task_id = %id, ms = r.duration.as_millis() as u64, exit = ?r.exit_code, "set-up command ran");
            if r.exit_code != Some(0) {
                let how = match r.exit_code {
                    Some(code) => format!("exited with code {code}"),
                    None => format!("did not finish within {}s", limit.as_secs()),
                };
                bail!(
                    "set-up command `{command}` {how}; its output:\n{}",
                    r.output.trim_end()
                );
            }
        }
        Ok(())
    }
    .await;
    if let Err(e) = remove_container(docker, &created.id).await {
        warn!(task_id = %id, error = %format!("{e:#}"), "the set-up container was not removed");
    }
    ran
}
