//! Saheeli's containers and volumes carry `saheeli.task=<id>`: found by
//! label after a restart, never by name.

use std::collections::HashMap;

use anyhow::Context;
use bollard::Docker;
use bollard::query_parameters::{ListContainersOptionsBuilder, ListVolumesOptionsBuilder};
use saheeli_protocol::TaskId;

use super::*;

/// The label every Saheeli container and volume carries.
pub(crate) const TASK_LABEL: &str = "saheeli.task";

/// The labels on a task's container and volume.
pub(super) fn task_labels(id: TaskId) -> HashMap<String, String> {
    HashMap::from([(TASK_LABEL.to_string(), id.to_string())])
}

/// Ids of the task's servo containers: labelled with the task, and with
/// no role (a verify container is never taken for the servo's).
pub(crate) async fn task_containers(docker: &Docker, id: TaskId) -> anyhow::Result<Vec<String>> {
    Ok(listed(docker, id)
        .await?
        .into_iter()
        .filter(|c| !has_role(c))
        .filter_map(|c| c.id)
        .collect())
}

/// Ids of every container labelled with a task (its servo's and any
/// verify container), for removing them all.
pub(crate) async fn every_task_container(
    docker: &Docker,
    id: TaskId,
) -> anyhow::Result<Vec<String>> {
    Ok(listed(docker, id)
        .await?
        .into_iter()
        .filter_map(|c| c.id)
        .collect())
}

fn has_role(c: &bollard::models::ContainerSummary) -> bool {
    c.labels
        .as_ref()
        .is_some_and(|l| l.contains_key(super::ROLE_LABEL))
}

async fn listed(
    docker: &Docker,
    id: TaskId,
) -> anyhow::Result<Vec<bollard::models::ContainerSummary>> {
    let filter = format!("{TASK_LABEL}={id}");
    let opts = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&HashMap::from([("label", vec![filter.as_str()])]))
        .build();
    timed(DockerOp::List, async {
        docker
            .list_containers(Some(opts))
            .await
            .context("listing Saheeli containers")
    })
    .await
}

/// Ids of the task's servo containers, oldest first (a task's
/// containers run one after another: after parking, a new one goes on).
pub(crate) async fn task_containers_in_order(
    docker: &Docker,
    id: TaskId,
) -> anyhow::Result<Vec<String>> {
    let filter = format!("{TASK_LABEL}={id}");
    let opts = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&HashMap::from([("label", vec![filter.as_str()])]))
        .build();
    let mut list = docker
        .list_containers(Some(opts))
        .await
        .context("listing Saheeli containers")?;
    list.retain(|c| !has_role(c));
    list.sort_by_key(|c| c.created.unwrap_or(0));
    Ok(list.into_iter().filter_map(|c| c.id).collect())
}

/// Names of the volumes labelled with a task.
pub(crate) async fn task_volumes(docker: &Docker, id: TaskId) -> anyhow::Result<Vec<String>> {
    let filter = format!("{TASK_LABEL}={id}");
    let opts = ListVolumesOptionsBuilder::default()
        .filters(&HashMap::from([("label", vec![filter.as_str()])]))
        .build();
    let list = timed(DockerOp::List, async {
        docker
            .list_volumes(Some(opts))
            .await
            .context("listing Saheeli volumes")
    })
    .await?;
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
    let containers = timed(DockerOp::List, async {
        docker
            .list_containers(Some(opts))
            .await
            .context("listing Saheeli containers")
    })
    .await?
    .into_iter()
    .filter_map(|c| Some((c.id?, c.labels?.get(TASK_LABEL)?.clone())))
    .collect();
    let opts = ListVolumesOptionsBuilder::default()
        .filters(&filters)
        .build();
    let volumes = timed(DockerOp::List, async {
        docker
            .list_volumes(Some(opts))
            .await
            .context("listing Saheeli volumes")
    })
    .await?
    .volumes
    .unwrap_or_default()
    .into_iter()
    .filter_map(|v| Some((v.name, v.labels.get(TASK_LABEL)?.clone())))
    .collect();
    Ok((containers, volumes))
}
