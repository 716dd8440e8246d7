//! Where a task's or warm servo's /workspace lives on this host: the
//! loop-mounted image `crate::backend::disk` makes, bound straight into the
//! container (`limits.disk_enforcement: loop`, the default), or a named
//! Docker volume (`off`). Either is named by the workspace's name, the
//! task's volume name `saheeli-<id>` or the warm servo's `saheeli-pool-<hex>`,
//! so every path (launch, collection, adoption, the sweeper) finds it
//! without asking the daemon.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::Context;
use saheeli_protocol::TaskId;

use super::Local;
use super::pool::socket_name;
use crate::backend::docker::{self, WorkspaceMount};
use crate::config::{Config, DiskEnforcement};

/// The mount point of workspace `name`'s image (whether mounted or not);
/// None: not a name of ours, or no images (`off`).
pub(super) fn image_mount(cfg: &Config, name: &str) -> Option<PathBuf> {
    if cfg.file.limits.disk_enforcement != DiskEnforcement::Loop {
        return None;
    }
    let dir = match socket_name(name) {
        Some(slot) => crate::backend::disk::slot_dir(&cfg.state_dir(), &slot),
        None => {
            let id = name.strip_prefix("saheeli-")?.parse::<TaskId>().ok()?;
            crate::backend::disk::task_dir(&cfg.state_dir(), id)
        }
    };
    Some(dir.join("mnt"))
}

impl Local {
    fn image_mount(&self, name: &str) -> Option<PathBuf> {
        image_mount(&self.cfg, name)
    }

    /// Workspace `name` as a container mounts it.
    pub(super) fn home(&self, name: &str) -> WorkspaceMount {
        match self.image_mount(name) {
            Some(mnt) => WorkspaceMount::Bind(mnt),
            None => WorkspaceMount::Volume(name.to_string()),
        }
    }

    /// Makes the mount point of workspace image `home` ahead of the image,
    /// so a container binding it can be made meanwhile; false for a volume
    /// (it must exist before a container names it).
    pub(super) fn prepare_mount_point(&self, home: &WorkspaceMount) -> anyhow::Result<bool> {
        let WorkspaceMount::Bind(mnt) = home else {
            return Ok(false);
        };
        crate::backend::disk::mount_point(&self.cfg.state_dir(), mnt)?;
        Ok(true)
    }

    /// Makes workspace `name`, empty: an image of `bytes` mounted (made
    /// first, so a crash before the container leaves a directory the
    /// sweeper finds), or a volume labelled `labels`.
    pub(super) async fn make_home(
        &self,
        name: &str,
        bytes: u64,
        labels: HashMap<String, String>,
    ) -> anyhow::Result<WorkspaceMount> {
        match self.image_mount(name) {
            Some(mnt) => {
                let state_dir = self.cfg.state_dir();
                let dir = mnt.parent().context("a workspace mount has a parent")?;
                let dir = dir.to_path_buf();
                let mnt = tokio::task::spawn_blocking(move || {
                    crate::backend::disk::create_at(&state_dir, dir, bytes)
                })
                .await
                .context("the workspace image thread panicked")??;
                Ok(WorkspaceMount::Bind(mnt))
            }
            None => {
                docker::create_volume_as(&self.docker, name.to_string(), labels).await?;
                Ok(WorkspaceMount::Volume(name.to_string()))
            }
        }
    }

    /// Removes workspace `name`: unmounts and deletes its image, or
    /// removes its volume. Absent is fine.
    pub(super) async fn remove_home(&self, name: &str) -> anyhow::Result<()> {
        match self.image_mount(name) {
            Some(mnt) => tokio::task::spawn_blocking(move || crate::backend::disk::destroy(&mnt))
                .await
                .context("the workspace image thread panicked")?
                .with_context(|| format!("removing the workspace image of `{name}`")),
            None => docker::remove_volume(&self.docker, name).await,
        }
    }

    /// The host directory holding workspace `name`, to read it without
    /// the daemon: the mounted image (no call at all: two fewer per task
    /// at a thousand tasks), else the volume's directory as the daemon says.
    pub(super) async fn workspace_dir(&self, name: &str) -> Option<PathBuf> {
        match self.image_mount(name) {
            Some(mnt) => crate::backend::disk::is_mounted(&mnt).ok()?.then_some(mnt),
            None => docker::local_volume_dir_named(&self.docker, name).await,
        }
    }
}
