//! Each node's own engine, and removing everything of a task from the
//! swarm: its job service and secret (through the manager), its task
//! container and volume on every node (Docker 20.10 leaves the containers
//! of a removed job service behind: moby/moby#44312).
//!
//! A node's engine is reached as the manager is: the same scheme and port
//! at the node's address (`tcp://<node addr>:2375` for a manager at
//! `tcp://…:2375`). A node that cannot be reached now keeps its leftovers
//! for the next sweep or `saheeli gc`.

use std::collections::{HashMap, HashSet};

use anyhow::Context;
use bollard::Docker;
use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListNodesOptions, ListSecretsOptionsBuilder,
    ListServicesOptionsBuilder, ListVolumesOptionsBuilder, RemoveContainerOptionsBuilder,
    RemoveVolumeOptionsBuilder,
};
use saheeli_protocol::TaskId;
use tracing::{debug, warn};

use crate::backend::docker::TASK_LABEL;

/// The engines of the swarm's reachable nodes, by hostname.
pub(crate) async fn node_engines(
    manager: &Docker,
    manager_addr: &super::Endpoint,
) -> Vec<(String, Docker)> {
    let Ok(nodes) = manager.list_nodes(None::<ListNodesOptions>).await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for n in nodes {
        if let Some((name, at)) = engine_at(n, manager_addr)
            && let Some(d) = reach(&name, &at).await
        {
            out.push((name, d));
        }
    }
    out
}

/// The engines of the reachable nodes that take jobs (availability
/// `active`, not drained or paused), by hostname.
pub(crate) async fn active_node_engines(
    manager: &Docker,
    manager_addr: &super::Endpoint,
) -> Vec<(String, Docker)> {
    let Ok(nodes) = manager.list_nodes(None::<ListNodesOptions>).await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for n in nodes {
        let active = n
            .spec
            .as_ref()
            .and_then(|s| s.availability)
            .is_some_and(|a| a == bollard::models::NodeSpecAvailabilityEnum::ACTIVE);
        if active
            && let Some((name, at)) = engine_at(n, manager_addr)
            && let Some(d) = reach(&name, &at).await
        {
            out.push((name, d));
        }
    }
    out
}

/// The engine of the node named `hostname`: an error says why it cannot
/// be reached now.
pub(crate) async fn node_engine(
    manager: &Docker,
    manager_addr: &super::Endpoint,
    hostname: &str,
) -> anyhow::Result<Docker> {
    let nodes = manager
        .list_nodes(None::<ListNodesOptions>)
        .await
        .context("listing the swarm's nodes")?;
    let (name, at) = nodes
        .into_iter()
        .filter_map(|n| engine_at(n, manager_addr))
        .find(|(name, _)| name == hostname)
        .with_context(|| format!("node `{hostname}` has no address the manager knows"))?;
    reach(&name, &at)
        .await
        .with_context(|| format!("the engine of node `{hostname}` at `{at}` does not answer"))
}

/// A node's hostname and its engine: the manager's scheme, port and TLS
/// at the node's address.
fn engine_at(
    n: bollard::models::Node,
    manager_addr: &super::Endpoint,
) -> Option<(String, super::Endpoint)> {
    let name = n.description.and_then(|d| d.hostname).unwrap_or_default();
    let addr = n.status.and_then(|s| s.addr)?;
    Some((name, manager_addr.at(&addr)?))
}

/// Connects to a node's engine, giving up after 3 s.
async fn reach(name: &str, at: &super::Endpoint) -> Option<Docker> {
    match tokio::time::timeout(std::time::Duration::from_secs(3), at.connect()).await {
        Ok(Ok(d)) => Some(d),
        Ok(Err(e)) => {
            debug!(node = %name, %at, error = %format!("{e:#}"), "node engine not reachable now");
            None
        }
        Err(_) => {
            debug!(node = %name, %at, "node engine not reachable now");
            None
        }
    }
}

fn by_task(id: Option<TaskId>) -> HashMap<&'static str, Vec<String>> {
    let label = match id {
        Some(id) => format!("{TASK_LABEL}={id}"),
        None => TASK_LABEL.to_string(),
    };
    HashMap::from([("label", vec![label])])
}

/// Swarm objects of Saheeli, by task: services and secrets (manager-wide).
pub(crate) async fn swarm_objects(
    manager: &Docker,
    id: Option<TaskId>,
) -> anyhow::Result<Vec<(TaskId, Object)>> {
    let f = by_task(id);
    let services = manager
        .list_services(Some(
            ListServicesOptionsBuilder::default().filters(&f).build(),
        ))
        .await
        .context("listing Saheeli's job services")?;
    let secrets = manager
        .list_secrets(Some(
            ListSecretsOptionsBuilder::default().filters(&f).build(),
        ))
        .await
        .context("listing Saheeli's secrets")?;
    let task_of = |labels: Option<HashMap<String, String>>| {
        labels.and_then(|l| l.get(TASK_LABEL).and_then(|v| v.parse::<TaskId>().ok()))
    };
    let mut out = Vec::new();
    for s in services {
        if let (Some(t), Some(sid)) = (task_of(s.spec.and_then(|s| s.labels)), s.id) {
            out.push((t, Object::Service(sid)));
        }
    }
    for s in secrets {
        if let (Some(t), Some(sid)) = (task_of(s.spec.and_then(|s| s.labels)), s.id) {
            out.push((t, Object::Secret(sid)));
        }
    }
    Ok(out)
}

/// One thing of Saheeli's in the swarm.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Object {
    Service(String),
    Secret(String),
    /// A task container on a node (hostname, id).
    Container(String, String),
    /// A workspace volume on a node (hostname, name).
    Volume(String, String),
}

/// Containers and volumes labelled for Saheeli on each reachable node.
pub(crate) async fn node_objects(
    engines: &[(String, Docker)],
    id: Option<TaskId>,
) -> Vec<(TaskId, Object)> {
    let f = by_task(id);
    let mut out = Vec::new();
    for (name, d) in engines {
        let opts = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&f)
            .build();
        for c in d.list_containers(Some(opts)).await.unwrap_or_default() {
            let t = c
                .labels
                .as_ref()
                .and_then(|l| l.get(TASK_LABEL)?.parse().ok());
            if let (Some(t), Some(cid)) = (t, c.id) {
                out.push((t, Object::Container(name.clone(), cid)));
            }
        }
        let opts = ListVolumesOptionsBuilder::default().filters(&f).build();
        let vols = d
            .list_volumes(Some(opts))
            .await
            .ok()
            .and_then(|v| v.volumes);
        for v in vols.unwrap_or_default() {
            if let Some(t) = v.labels.get(TASK_LABEL).and_then(|t| t.parse().ok()) {
                out.push((t, Object::Volume(name.clone(), v.name)));
            }
        }
    }
    out
}

/// Removes what is listed: services first (their tasks stop), then the
/// secrets they held, then containers and volumes on the nodes. Returns
/// how many could not be removed now.
pub(crate) async fn remove_objects(
    manager: &Docker,
    engines: &[(String, Docker)],
    objects: &[(TaskId, Object)],
) -> usize {
    let engine = |name: &str| engines.iter().find(|(n, _)| n == name).map(|(_, d)| d);
    let mut failed = 0;
    let mut order: Vec<&(TaskId, Object)> = objects.iter().collect();
    order.sort_by_key(|(_, o)| match o {
        Object::Service(_) => 0,
        Object::Secret(_) => 1,
        Object::Container(..) => 2,
        Object::Volume(..) => 3,
    });
    let mut seen = HashSet::new();
    for (task, o) in order {
        if !seen.insert(o.clone()) {
            continue;
        }
        let r = match o {
            Object::Service(s) => manager.delete_service(s).await.map_err(anyhow::Error::from),
            Object::Secret(s) => manager.delete_secret(s).await.map_err(anyhow::Error::from),
            Object::Container(n, c) => match engine(n) {
                Some(d) => d
                    .remove_container(
                        c,
                        Some(
                            RemoveContainerOptionsBuilder::default()
                                .force(true)
                                .v(true)
                                .build(),
                        ),
                    )
                    .await
                    .map_err(anyhow::Error::from),
                None => Err(anyhow::anyhow!("node `{n}` not reachable")),
            },
            Object::Volume(n, v) => match engine(n) {
                Some(d) => d
                    .remove_volume(
                        v,
                        Some(RemoveVolumeOptionsBuilder::default().force(true).build()),
                    )
                    .await
                    .map_err(anyhow::Error::from),
                None => Err(anyhow::anyhow!("node `{n}` not reachable")),
            },
        };
        if let Err(e) = r {
            failed += 1;
            warn!(task_id = %task, object = ?o, error = %format!("{e:#}"), "swarm leftover not removed");
        }
    }
    failed
}

/// Removes everything of task `id` from the swarm (or of every task with
/// `id` None and `keep` filtering the ones still active). Containers are
/// listed after the services are gone, so that a task that was still
/// being started is caught too.
pub(crate) async fn remove_task(
    manager: &Docker,
    manager_addr: &super::Endpoint,
    id: Option<TaskId>,
    keep: &(dyn Fn(TaskId) -> bool + Sync),
) -> anyhow::Result<usize> {
    let objects: Vec<_> = swarm_objects(manager, id)
        .await?
        .into_iter()
        .filter(|(t, _)| !keep(*t))
        .collect();
    let mut failed = remove_objects(manager, &[], &objects).await;
    let engines = node_engines(manager, manager_addr).await;
    let on_nodes: Vec<_> = node_objects(&engines, id)
        .await
        .into_iter()
        .filter(|(t, _)| !keep(*t))
        .collect();
    failed += remove_objects(manager, &engines, &on_nodes).await;
    Ok(failed)
}

/// Everything of Saheeli's in the swarm (manager-wide and on every
/// reachable node), with the engines to remove the node-local part.
pub(crate) async fn leftovers(
    manager: &Docker,
    manager_addr: &super::Endpoint,
) -> anyhow::Result<(Vec<(String, Docker)>, Vec<(TaskId, Object)>)> {
    let mut objects = swarm_objects(manager, None).await?;
    let engines = node_engines(manager, manager_addr).await;
    objects.extend(node_objects(&engines, None).await);
    Ok((engines, objects))
}

/// What one launch of a task made: its job service and secret (ids), and
/// `name`, shared by the service and its workspace volume (its task
/// container's name starts with it).
#[derive(Clone, Debug)]
pub(crate) struct LaunchObjects {
    pub task: TaskId,
    pub service: String,
    pub secret: String,
    pub name: String,
    /// A warm job's slot (issue 53): its container carries the pool's
    /// labels, not the task's.
    pub slot: Option<TaskId>,
}

impl LaunchObjects {
    /// The label its task container carries.
    fn container_label(&self) -> String {
        match self.slot {
            Some(slot) => format!("{}={slot}", crate::backend::docker::POOL_SLOT_LABEL),
            None => format!("{TASK_LABEL}={}", self.task),
        }
    }
}

fn gone(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// Removes one ended launch by what it is (no listing of the swarm's
/// services or secrets): its service, its secret, then its container and
/// volume on `node` (the node it ran on, when known; else every reachable
/// node). Another launch of the same task is never touched. Returns how
/// many could not be removed now (the sweeper and `saheeli gc` retry).
pub(crate) async fn remove_launch(
    manager: &Docker,
    manager_addr: &super::Endpoint,
    l: &LaunchObjects,
    node: Option<&str>,
) -> usize {
    let mut failed = 0;
    let mut note = |what: &str, r: Result<(), bollard::errors::Error>| match r {
        Err(e) if !gone(&e) => {
            failed += 1;
            warn!(task_id = %l.task, what, error = %e, "swarm leftover not removed");
        }
        _ => {}
    };
    note(
        "service",
        manager.delete_service(&l.service).await.map(|_| ()),
    );
    note("secret", manager.delete_secret(&l.secret).await);
    let engines = match node {
        Some(n) => match node_engine(manager, manager_addr, n).await {
            Ok(d) => vec![(n.to_string(), d)],
            Err(_) => Vec::new(),
        },
        None => node_engines(manager, manager_addr).await,
    };
    if engines.is_empty() {
        return failed + 1;
    }
    // The task container's name is `<service name>.<slot>.<swarm task id>`;
    // a verify container (found by its role) may still hold the volume.
    let f = HashMap::from([
        ("label", vec![l.container_label()]),
        ("name", vec![format!("{}.", l.name)]),
    ]);
    let verify = HashMap::from([(
        "label",
        vec![
            format!("{TASK_LABEL}={}", l.task),
            format!(
                "{}={}",
                crate::backend::docker::ROLE_LABEL,
                crate::backend::docker::VERIFY_ROLE
            ),
        ],
    )]);
    for (_, d) in &engines {
        let mut containers = Vec::new();
        let mut listed = true;
        for filters in [&f, &verify] {
            let opts = ListContainersOptionsBuilder::default()
                .all(true)
                .filters(filters)
                .build();
            match d.list_containers(Some(opts)).await {
                Ok(c) => containers.extend(c),
                Err(e) => {
                    note("containers", Err(e));
                    listed = false;
                }
            }
        }
        if !listed {
            continue;
        }
        for c in containers.into_iter().filter_map(|c| c.id) {
            let opts = RemoveContainerOptionsBuilder::default()
                .force(true)
                .v(true)
                .build();
            note("container", d.remove_container(&c, Some(opts)).await);
        }
        let opts = RemoveVolumeOptionsBuilder::default().force(true).build();
        note("volume", d.remove_volume(&l.name, Some(opts)).await);
    }
    failed
}
