//! Leftovers of tasks on this host: labelled containers and volumes, and
//! workspace images and checks' copies of workspaces (by their directory,
//! named by the task). Which of them
//! belong to ended tasks is the sweeper's to say; a warm slot's image is
//! the pool's sweep (`keep::pool_leftovers`).

use std::collections::{BTreeSet, HashSet};

use tracing::{info, warn};

use super::Local;
use crate::backend::docker;

/// What carries a task's label on this host.
pub(crate) struct LocalLeftovers {
    containers: Vec<(String, String)>,
    volumes: Vec<(String, String)>,
    images: Vec<(saheeli_protocol::TaskId, std::path::PathBuf)>,
    /// Checks' copies of workspaces (`disk::check_copy`) a crash left.
    copies: Vec<saheeli_protocol::TaskId>,
}

impl LocalLeftovers {
    /// The tasks (ids as labelled) something was left of.
    pub fn tasks(&self) -> BTreeSet<String> {
        self.containers
            .iter()
            .chain(self.volumes.iter())
            .map(|(_, t)| t.clone())
            .chain(self.images.iter().map(|(id, _)| id.to_string()))
            .chain(self.copies.iter().map(|id| id.to_string()))
            .collect()
    }
}

impl Local {
    pub async fn leftovers(&self) -> anyhow::Result<LocalLeftovers> {
        let (containers, volumes) = docker::labelled(&self.docker).await?;
        // Workspace images not bound through a volume (every one since
        // issue 28's cut; an older foreman's went with its volume).
        let state_dir = self.cfg.state_dir();
        let (present, copies) = tokio::task::spawn_blocking(move || {
            (
                crate::backend::disk::present(&state_dir),
                crate::backend::disk::check_copy::present(&state_dir),
            )
        })
        .await
        .unwrap_or_default();
        let images = present
            .into_iter()
            .filter(|(id, _)| !volumes.iter().any(|(_, t)| *t == id.to_string()))
            .collect();
        Ok(LocalLeftovers {
            containers,
            volumes,
            images,
            copies,
        })
    }

    /// Removes what was left of the `ended` tasks.
    pub async fn remove_leftovers(&self, left: LocalLeftovers, ended: &HashSet<String>) {
        for (cid, task) in &left.containers {
            if ended.contains(task) {
                info!(task_id = %task, container = %cid, "removing a leftover container");
                let _ = docker::remove_container(&self.docker, cid).await;
            }
        }
        // After the verify containers binding them, before the workspaces
        // they are a view of.
        for id in left.copies {
            if ended.contains(&id.to_string()) {
                info!(task_id = %id, "removing a check's leftover copy of a workspace");
                let removed = docker::remove_check_copy(&self.cfg.state_dir(), id).await;
                if let Err(e) = removed {
                    warn!(task_id = %id, error = %format!("{e:#}"), "a check's copy not removed");
                }
            }
        }
        for (name, task) in &left.volumes {
            if ended.contains(task) {
                info!(task_id = %task, volume = %name, "removing a leftover volume");
                let _ = docker::remove_volume(&self.docker, name).await;
            }
        }
        for (id, mnt) in left.images {
            if !ended.contains(&id.to_string()) {
                continue;
            }
            info!(task_id = %id, "removing a leftover workspace image");
            let removed =
                tokio::task::spawn_blocking(move || crate::backend::disk::destroy(&mnt)).await;
            if let Ok(Err(e)) = removed {
                warn!(task_id = %id, error = %format!("{e:#}"), "workspace image not removed");
            }
        }
    }
}
