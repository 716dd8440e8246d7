//! What Swarm says about a task's job service, mapped onto what the
//! reconciler acts on: still waiting, running (on which node), exited with
//! a code, or lost to the infrastructure (a node Down, a task rejected or
//! orphaned), which is requeued and never counted as an attempt.

use std::collections::HashMap;

use anyhow::Context;
use bollard::Docker;
use bollard::models::{NodeState, TaskState};
use bollard::query_parameters::{ListNodesOptions, ListTasksOptionsBuilder};

/// Where a job service's one task is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Created, not yet running (scheduling, pulling, starting).
    Waiting,
    Running,
    /// The servo exited with this code.
    Exited(i64),
    /// Swarm lost it, or could not start it: not the agent's doing.
    Lost(String),
}

/// A job service seen from the manager.
#[derive(Clone, Debug)]
pub(crate) struct Observed {
    pub phase: Phase,
    /// The hostname of the node the task was given to.
    pub node: Option<String>,
    /// The task's container on that node.
    pub container: Option<String>,
}

/// Maps a Swarm task state onto a [`Phase`] (pure). `node_down`: the
/// manager marks the task's node Down; Swarm never reschedules a job's
/// task, and its state stays `running` forever, so the task is lost.
pub(crate) fn phase_of(
    state: Option<TaskState>,
    exit_code: Option<i64>,
    err: Option<&str>,
    node_down: Option<&str>,
) -> Phase {
    let why = |what: &str| match err {
        Some(e) if !e.is_empty() => format!("swarm task {what}: {e}"),
        _ => format!("swarm task {what}"),
    };
    match state {
        None
        | Some(
            TaskState::NEW
            | TaskState::ALLOCATED
            | TaskState::PENDING
            | TaskState::ASSIGNED
            | TaskState::ACCEPTED
            | TaskState::PREPARING
            | TaskState::READY
            | TaskState::STARTING
            | TaskState::RUNNING,
        ) if node_down.is_some() => Lost(format!("node `{}` is down", node_down.unwrap_or(""))),
        None => Waiting,
        Some(TaskState::RUNNING) => Running,
        Some(TaskState::COMPLETE) => Exited(exit_code.unwrap_or(0)),
        // A servo that exited non-zero is `failed` with its exit code; a
        // `failed` task without one never ran (no such image, no mount).
        Some(TaskState::FAILED | TaskState::SHUTDOWN) => match exit_code {
            Some(code) => Exited(code),
            None => Lost(why("failed before the servo ran")),
        },
        Some(TaskState::REJECTED) => Lost(why("rejected by its node")),
        Some(TaskState::ORPHANED) => Lost(why("orphaned (its node is gone)")),
        Some(TaskState::REMOVE) => Lost(why("removed")),
        Some(_) => Waiting,
    }
}

use Phase::*;

/// The latest task of a job service, with its node's name and state.
pub(crate) async fn observe(manager: &Docker, service_id: &str) -> anyhow::Result<Observed> {
    let opts = ListTasksOptionsBuilder::default()
        .filters(&HashMap::from([("service", vec![service_id])]))
        .build();
    let tasks = manager
        .list_tasks(Some(opts))
        .await
        .context("listing the swarm tasks of a job service")?;
    let Some(task) = tasks
        .into_iter()
        .max_by_key(|t| t.version.as_ref().and_then(|v| v.index).unwrap_or(0))
    else {
        return Ok(Observed {
            phase: Waiting,
            node: None,
            container: None,
        });
    };
    let nodes = nodes_by_id(manager).await?;
    let node = task.node_id.as_ref().and_then(|n| nodes.get(n));
    let status = task.status.unwrap_or_default();
    let cs = status.container_status.unwrap_or_default();
    let down = node.filter(|n| n.1).map(|n| n.0.as_str());
    Ok(Observed {
        phase: phase_of(status.state, cs.exit_code, status.err.as_deref(), down),
        node: node.map(|n| n.0.clone()),
        container: cs.container_id,
    })
}

/// Every node's hostname and whether the manager has it Down, by id.
pub(super) async fn nodes_by_id(
    manager: &Docker,
) -> anyhow::Result<HashMap<String, (String, bool)>> {
    let nodes = manager
        .list_nodes(None::<ListNodesOptions>)
        .await
        .context("listing the swarm's nodes")?;
    Ok(nodes
        .into_iter()
        .filter_map(|n| {
            let id = n.id?;
            let name = n
                .description
                .and_then(|d| d.hostname)
                .unwrap_or_else(|| id.clone());
            let down = matches!(
                n.status.and_then(|s| s.state),
                Some(NodeState::DOWN | NodeState::DISCONNECTED)
            );
            Some((id, (name, down)))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swarm_task_states_map_onto_waiting_running_exited_or_lost() {
        assert_eq!(phase_of(None, None, None, None), Waiting);
        assert_eq!(
            phase_of(Some(TaskState::PREPARING), None, None, None),
            Waiting
        );
        assert_eq!(
            phase_of(Some(TaskState::RUNNING), None, None, None),
            Running
        );
        assert_eq!(
            phase_of(Some(TaskState::COMPLETE), Some(0), None, None),
            Exited(0)
        );
        assert_eq!(
            phase_of(Some(TaskState::FAILED), Some(3), Some("x"), None),
            Exited(3)
        );
        assert!(matches!(
            phase_of(Some(TaskState::FAILED), None, Some("No such image"), None),
            Lost(w) if w.contains("No such image")
        ));
        assert!(matches!(
            phase_of(Some(TaskState::REJECTED), None, None, None),
            Lost(_)
        ));
        assert!(matches!(
            phase_of(Some(TaskState::ORPHANED), None, None, None),
            Lost(_)
        ));
        // A Down node's task stays `running` in Swarm's eyes: it is lost.
        assert!(matches!(
            phase_of(Some(TaskState::RUNNING), None, None, Some("n2")),
            Lost(w) if w.contains("`n2` is down")
        ));
        // A finished task is what it is, whatever became of its node.
        assert_eq!(
            phase_of(Some(TaskState::COMPLETE), Some(0), None, Some("n2")),
            Exited(0)
        );
    }
}
