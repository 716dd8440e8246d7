//! Removing containers and volumes of ended tasks.

use std::collections::HashMap;
use std::sync::Arc;

use saheeli_protocol::TaskId;
use tracing::{info, warn};

use crate::docker;

use super::*;

/// Removes containers and volumes of tasks that have ended (left behind
/// when a foreman died mid-cleanup). Tasks this loop is running are skipped.
pub(super) async fn sweep(ctx: Arc<Ctx>, active: Handles) {
    if handles_swarm(&ctx) {
        return sweep_swarm(ctx, active).await;
    }
    let Ok((containers, volumes)) = docker::labelled(&ctx.docker).await else {
        return;
    };
    let mut ended = HashMap::new();
    for task in containers
        .iter()
        .chain(volumes.iter())
        .map(|(_, t)| t.clone())
    {
        if ended.contains_key(&task) {
            continue;
        }
        let lookup = task.clone();
        let is_ended = ctx
            .db(move |s| s.get(&lookup))
            .await
            .ok()
            .flatten()
            .is_some_and(|t| t.state.is_terminal() && !active.lock().unwrap().contains_key(&t.id));
        ended.insert(task, is_ended);
    }
    for (cid, task) in &containers {
        if ended[task] {
            info!(task_id = %task, container = %cid, "removing a leftover container");
            let _ = docker::remove_container(&ctx.docker, cid).await;
        }
    }
    for (name, task) in &volumes {
        if ended[task] {
            info!(task_id = %task, volume = %name, "removing a leftover volume");
            let _ = docker::remove_volume(&ctx.docker, name).await;
        }
    }
    // Workspace images whose volume is gone (a foreman stopped between
    // the two): unmounted and deleted once their task has ended.
    let state_dir = ctx.cfg.state_dir();
    let present = tokio::task::spawn_blocking(move || crate::disk::present(&state_dir))
        .await
        .unwrap_or_default();
    for (id, mnt) in present {
        if volumes.iter().any(|(_, t)| *t == id.to_string()) {
            continue;
        }
        let ended = ctx
            .db(move |s| s.get(&id.to_string()))
            .await
            .ok()
            .flatten()
            .is_some_and(|t| t.state.is_terminal() && !active.lock().unwrap().contains_key(&id));
        if ended {
            info!(task_id = %id, "removing a leftover workspace image");
            let removed = tokio::task::spawn_blocking(move || crate::disk::destroy(&mnt)).await;
            if let Ok(Err(e)) = removed {
                warn!(task_id = %id, error = %format!("{e:#}"), "workspace image not removed");
            }
        }
    }
}

/// Removes the task's containers and volume (found by label).
pub(super) async fn cleanup(ctx: &Ctx, id: TaskId, known: Option<&str>) {
    let d = &ctx.docker;
    // Known ids and names are removed without listing (see
    // `remove_containers`); the sweeper finds anything a crash left.
    let containers = match known {
        Some(c) => vec![c.to_string()],
        None => docker::every_task_container(d, id)
            .await
            .unwrap_or_default(),
    };
    for c in containers {
        if let Err(e) = docker::remove_container(d, &c).await {
            warn!(task_id = %id, error = %format!("{e:#}"), "container not removed");
        }
    }
    let volume = docker::volume_name(id);
    if let Err(e) = docker::remove_volume(d, &volume).await {
        warn!(task_id = %id, error = %format!("{e:#}"), "volume not removed");
    }
}
