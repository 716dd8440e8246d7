//! Where a swarm task's servo runs now: the launch's job service (by its
//! name or id, never a search by task label that could find an earlier
//! launch's leftover), its current Swarm task, that task's node, the
//! node's engine and the container on it. What `verify`, the assessor,
//! OOM detection and `task logs --follow` act on.

use anyhow::Context;
use bollard::Docker;
use saheeli_protocol::TaskId;

use crate::backend::docker::{POOL_SLOT_LABEL, TASK_LABEL};

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
    manager_addr: &super::Endpoint,
    id: TaskId,
    service: &str,
) -> anyhow::Result<Located> {
    let inspected = manager
        .inspect_service(service, None)
        .await
        .with_context(|| format!("the job service `{service}` of task `{id}` is gone"))?;
    let labels = inspected.spec.as_ref().and_then(|s| s.labels.as_ref());
    // A warm job claimed for the task (issue 53) carries its pool's
    // labels, never the task's: named by the task's own launch.
    let slot = labels.and_then(|l| l.get(POOL_SLOT_LABEL).cloned());
    let labelled = labels.and_then(|l| l.get(TASK_LABEL).cloned());
    let container_label = match &slot {
        Some(slot) => format!("{POOL_SLOT_LABEL}={slot}"),
        None => {
            anyhow::ensure!(
                labelled.as_deref() == Some(id.to_string().as_str()),
                "the job service `{service}` is not task `{id}`'s"
            );
            format!("{TASK_LABEL}={id}")
        }
    };
    let name = inspected.spec.and_then(|s| s.name).unwrap_or_default();
    let service_id = inspected.id.unwrap_or_else(|| service.to_string());
    let o = observe(manager, &service_id).await?;
    // The manager hears of a task's start late (its node reports in
    // batches), while its servo already calls: a task still `Waiting` on
    // an assigned node is looked for on that node.
    let (Phase::Running | Phase::Waiting, Some(node)) = (&o.phase, o.node) else {
        anyhow::bail!(
            "the servo of task `{id}` is not running now (Swarm: {:?})",
            o.phase
        );
    };
    let engine = node_engine(manager, manager_addr, &node).await?;
    let container = match o.container {
        Some(c) => c,
        None => running_container(&engine, id, &name, &container_label)
            .await?
            .with_context(|| {
                format!("the servo of task `{id}` has no running container on node `{node}` yet")
            })?,
    };
    Ok(Located { engine, container })
}

/// The running container of job service `name` (its task containers are
/// named `<name>.<slot>.<task>`) labelled `label` (for task `id`), on one
/// engine.
async fn running_container(
    d: &Docker,
    id: TaskId,
    name: &str,
    label: &str,
) -> anyhow::Result<Option<String>> {
    anyhow::ensure!(
        !name.is_empty(),
        "the job service of task `{id}` has no name"
    );
    let filters = std::collections::HashMap::from([
        ("label", vec![label.to_string()]),
        ("name", vec![format!("{name}.")]),
        ("status", vec!["running".to_string()]),
    ]);
    let opts = bollard::query_parameters::ListContainersOptionsBuilder::default()
        .filters(&filters)
        .build();
    let found = d
        .list_containers(Some(opts))
        .await
        .context("listing the task's containers on its node")?;
    Ok(found
        .into_iter()
        // A verify container beside it carries a role: never the servo.
        .filter(|c| {
            let role = c
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(crate::backend::docker::ROLE_LABEL));
            !role
                && c.names
                    .iter()
                    .flatten()
                    .any(|n| n.trim_start_matches('/').starts_with(&format!("{name}.")))
        })
        .find_map(|c| c.id))
}

/// Whether the kernel OOM-killed a process of the task container
/// `container` on node `node` (false when that cannot be seen now).
pub(crate) async fn oom_killed(
    manager: &Docker,
    manager_addr: &super::Endpoint,
    node: &str,
    container: &str,
) -> bool {
    match node_engine(manager, manager_addr, node).await {
        Ok(d) => crate::backend::docker::oom_killed(&d, container).await,
        Err(e) => {
            tracing::warn!(node, error = %format!("{e:#}"), "OOM not checked: node not reachable");
            false
        }
    }
}
