//! Saheeli's containers and volumes carry `saheeli.task=<id>`: found by
//! label after a restart, never by name.

use std::collections::HashMap;

use anyhow::Context;
use bollard::Docker;
use bollard::query_parameters::{ListContainersOptionsBuilder, ListVolumesOptionsBuilder};
use saheeli_protocol::TaskId;

use super::{DockerOp, timed};

/// The label every Saheeli container and volume carries.
pub(crate) const TASK_LABEL: &str = "saheeli.task";

/// The label on a warm servo's container and volume (issue 28): the
/// database whose foreman made it (its id, [`pool_db`]), so that foremen
/// of other databases on the same daemon never touch it. Never
/// `saheeli.task`: nothing of a task is on a warm servo; the claim is in
/// the task's row.
pub(crate) const POOL_LABEL: &str = "saheeli.pool";
/// The foreman whose pool made it (its lease owner).
pub(crate) const POOL_OWNER_LABEL: &str = "saheeli.pool.owner";
/// A warm servo's slot (its container, volume and socket derive from it).
pub(crate) const POOL_SLOT_LABEL: &str = "saheeli.pool.slot";
/// A warm servo's class, its place in `pool:`.
pub(crate) const POOL_CLASS_LABEL: &str = "saheeli.pool.class";

/// The labels on a warm servo's container and volume.
pub(crate) fn pool_labels(
    db: &str,
    owner: &str,
    slot: TaskId,
    class: usize,
) -> HashMap<String, String> {
    HashMap::from([
        (POOL_LABEL.to_string(), db.to_string()),
        (POOL_OWNER_LABEL.to_string(), owner.to_string()),
        (POOL_SLOT_LABEL.to_string(), slot.to_string()),
        (POOL_CLASS_LABEL.to_string(), class.to_string()),
    ])
}

/// A container or volume a pool made: its name (a container's name, not
/// its id: the name is what a claim records), owner and slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PoolObject {
    pub name: String,
    pub owner: String,
    pub slot: String,
    /// A container that runs now (volumes: false).
    pub running: bool,
}

/// A database's id on the pool label: its absolute path, hashed.
pub(crate) fn pool_db(database: &std::path::Path) -> String {
    use sha2::Digest;
    let path = std::path::absolute(database).unwrap_or_else(|_| database.to_path_buf());
    let digest = sha2::Sha256::digest(path.as_os_str().as_encoded_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Every warm servo's container and volume on the daemon that database
/// `db`'s foremen made.
pub(crate) async fn pool_labelled(
    docker: &Docker,
    db: &str,
) -> anyhow::Result<(Vec<PoolObject>, Vec<PoolObject>)> {
    let filter = format!("{POOL_LABEL}={db}");
    let filters = HashMap::from([("label", vec![filter.as_str()])]);
    let opts = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    let containers = timed(DockerOp::List, async {
        docker
            .list_containers(Some(opts))
            .await
            .context("listing warm servos")
    })
    .await?
    .into_iter()
    .filter_map(|c| {
        let labels = c.labels?;
        Some(PoolObject {
            name: c.names?.first()?.trim_start_matches('/').to_string(),
            owner: labels.get(POOL_OWNER_LABEL)?.clone(),
            slot: labels.get(POOL_SLOT_LABEL)?.clone(),
            running: c
                .state
                .is_some_and(|s| matches!(s, bollard::models::ContainerSummaryStateEnum::RUNNING)),
        })
    })
    .collect();
    let opts = ListVolumesOptionsBuilder::default()
        .filters(&filters)
        .build();
    let volumes = timed(DockerOp::List, async {
        docker
            .list_volumes(Some(opts))
            .await
            .context("listing warm servos' volumes")
    })
    .await?
    .volumes
    .unwrap_or_default()
    .into_iter()
    .filter_map(|v| {
        Some(PoolObject {
            owner: v.labels.get(POOL_OWNER_LABEL)?.clone(),
            slot: v.labels.get(POOL_SLOT_LABEL)?.clone(),
            name: v.name,
            running: false,
        })
    })
    .collect();
    Ok((containers, volumes))
}

/// The labels on a task's container and volume.
pub(crate) fn task_labels(id: TaskId) -> HashMap<String, String> {
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
