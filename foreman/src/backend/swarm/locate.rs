//! Where a swarm task's servo runs now: the launch's job service (by its
//! name or id, never a search by task label that could find an earlier
//! launch's leftover), its current Swarm task, that task's node, the
//! node's engine and the container on it. What `verify`, the assessor,
//! OOM detection and `task logs --follow` act on.

use anyhow::Context;
use bollard::Docker;
use saheeli_protocol::TaskId;

use crate::docker::TASK_LABEL;

use super::{Phase, node_engine, observe};

/// A running servo of a swarm task.
pub(crate) struct Located {
    /// That node's engine.
    pub engine: Docker,
    /// Its container there.
    pub container: String,
}

/// The name of the job service of one launch (`suffix`) of task `id`.
pub(crate) fn service_name(id: TaskId, suffix: &str) -> String {
    format!("saheeli-{id}-{suffix}")
}

/// The running servo of task `id` in job service `service` (its name or
/// id). An error says why there is none now: the service is gone, is not
/// this task's, or its task is not running.
pub(crate) async fn locate(
    manager: &Docker,
    manager_addr: &str,
    id: TaskId,
    service: &str,
) -> anyhow::Result<Located> {
    let inspected = manager
        .inspect_service(service, None)
        .await
        .with_context(|| format!("the job service `{service}` of task `{id}` is gone"))?;
    let labelled = inspected
        .spec
        .and_then(|s| s.labels)
        .and_then(|l| l.get(TASK_LABEL).cloned());
    anyhow::ensure!(
        labelled.as_deref() == Some(id.to_string().as_str()),
        "the job service `{service}` is not task `{id}`'s"
    );
    let service_id = inspected.id.unwrap_or_else(|| service.to_string());
    let o = observe(manager, &service_id).await?;
    let (Phase::Running, Some(node), Some(container)) = (&o.phase, o.node, o.container) else {
        anyhow::bail!(
            "the servo of task `{id}` is not running now (Swarm: {:?})",
            o.phase
        );
    };
    let engine = node_engine(manager, manager_addr, &node).await?;
    Ok(Located { engine, container })
}

/// Whether the kernel OOM-killed a process of the task container
/// `container` on node `node` (false when that cannot be seen now).
pub(crate) async fn oom_killed(
    manager: &Docker,
    manager_addr: &str,
    node: &str,
    container: &str,
) -> bool {
    match node_engine(manager, manager_addr, node).await {
        Ok(d) => crate::docker::oom_killed(&d, container).await,
        Err(e) => {
            tracing::warn!(node, error = %format!("{e:#}"), "OOM not checked: node not reachable");
            false
        }
    }
}
