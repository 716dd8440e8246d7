//! Pausing the task's container for a check and letting it run again,
//! killing a verify container, and undoing what a crash left of a check
//! (`recover_verify`, for a foreman adopting a running task).

use std::collections::HashMap;

use anyhow::Context;
use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::query_parameters::ListContainersOptionsBuilder;
use saheeli_protocol::TaskId;
use tracing::debug;

use super::verify::{ROLE_LABEL, VERIFY_ROLE};
use super::{DockerOp, TASK_LABEL, remove_container, timed};

/// Kills every process of `container` (gone or stopped already is fine).
pub(super) async fn kill(docker: &Docker, container: &str) -> anyhow::Result<()> {
    let opts = bollard::query_parameters::KillContainerOptionsBuilder::default()
        .signal("KILL")
        .build();
    timed(DockerOp::Kill, async {
        match docker.kill_container(container, Some(opts)).await {
            Ok(())
            | Err(DockerError::DockerResponseServerError {
                status_code: 404 | 409,
                ..
            }) => Ok(()),
            Err(e) => Err(e).context("killing the verify container"),
        }
    })
    .await
}

/// Freezes every process of a container. Already paused is fine.
pub(crate) async fn pause(docker: &Docker, container: &str) -> anyhow::Result<()> {
    match docker.pause_container(container).await {
        Ok(()) => Ok(()),
        Err(DockerError::DockerResponseServerError {
            status_code: 409,
            message,
        }) if message.contains("already paused") => Ok(()),
        Err(e) => Err(e).context("pausing the task's container for verification"),
    }
}

/// Lets a paused container run again, trying three times (a container
/// left paused would hang its task until its timeout). Not paused (or
/// gone) is fine.
pub(crate) async fn unpause(docker: &Docker, container: &str) -> anyhow::Result<()> {
    let mut last = None;
    for wait_ms in [0, 200, 1000] {
        tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
        match docker.unpause_container(container).await {
            Ok(())
            | Err(DockerError::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(()),
            Err(DockerError::DockerResponseServerError {
                status_code: 409,
                message,
            }) if message.contains("not paused") || message.contains("not running") => {
                return Ok(());
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("three tries")).context("resuming the task's container after verification")
}

/// Ids of the verify containers of task `id`, in any state.
pub(crate) async fn verify_containers(docker: &Docker, id: TaskId) -> anyhow::Result<Vec<String>> {
    let filters = HashMap::from([(
        "label",
        vec![
            format!("{TASK_LABEL}={id}"),
            format!("{ROLE_LABEL}={VERIFY_ROLE}"),
        ],
    )]);
    let opts = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    let list = timed(DockerOp::List, async {
        docker
            .list_containers(Some(opts))
            .await
            .context("listing the task's verify containers")
    })
    .await?;
    Ok(list.into_iter().filter_map(|c| c.id).collect())
}

/// Undoes a verify attempt a stopped foreman left midway: its verify
/// containers and its copy of the workspace (under `state_dir`) are
/// removed and the task's container runs again. For a foreman adopting a
/// running task.
pub(crate) async fn recover_verify(
    docker: &Docker,
    id: TaskId,
    task_container: &str,
    state_dir: &std::path::Path,
) -> anyhow::Result<()> {
    remove_verify_containers(docker, id).await?;
    // Before the workspace, its lower layer, changes again; one that could
    // not be removed has no user left and never reaches the workspace: the
    // task runs again whatever happened (the sweeper tries again).
    let uncopied = super::verify_copy::remove(state_dir, id).await;
    let paused = timed(DockerOp::Inspect, async {
        docker
            .inspect_container(task_container, None)
            .await
            .context("inspecting the task's container")
    })
    .await?
    .state
    .and_then(|s| s.paused)
    .unwrap_or(false);
    if paused {
        unpause(docker, task_container).await?;
    }
    uncopied
}

/// Removes the verify containers of task `id` and waits (10 s at most)
/// until none is left: one whose removal its gateway has begun still
/// holds the workspace volume until that ends.
pub(crate) async fn remove_verify_containers(docker: &Docker, id: TaskId) -> anyhow::Result<()> {
    for _ in 0..40 {
        let left = verify_containers(docker, id).await?;
        if left.is_empty() {
            return Ok(());
        }
        for c in &left {
            debug!(task_id = %id, container = %c, "removing a verify container");
            // "Already in progress" is an error here: the next look says.
            let _ = remove_container(docker, c).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    anyhow::bail!("the verify containers of task `{id}` are still there after 10 s")
}
