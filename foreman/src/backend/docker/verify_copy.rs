//! The verify container's view of the workspace for a check the agent
//! gets its workspace back after (issue 49): a copy-on-write overlay
//! (`disk::check_copy`) of the task's loop-mounted image or of its Docker
//! volume's directory on this host, bound on /workspace, thrown away after
//! the check. Made while the task's container is paused and removed before
//! it runs again (`VerifyBox`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use bollard::Docker;
use saheeli_protocol::TaskId;

use super::WorkspaceMount;
use crate::backend::disk::check_copy;

/// Where a check's copy is made, and the most its upper layer holds when
/// the workspace is size-limited (the workspace's own size).
#[derive(Clone, Copy, Debug)]
pub(crate) struct OnCopy<'a> {
    pub state_dir: &'a Path,
    pub bytes: u64,
}

/// Makes task `id`'s copy of `workspace` (the task container's mount):
/// the directory to bind on /workspace. The task's container must be
/// paused.
pub(super) async fn make(
    docker: &Docker,
    id: TaskId,
    workspace: &WorkspaceMount,
    at: OnCopy<'_>,
) -> anyhow::Result<PathBuf> {
    let (lower, capped) = match workspace {
        // A size-limited workspace: so is what the check may write.
        WorkspaceMount::Bind(dir) => (dir.clone(), Some(at.bytes)),
        WorkspaceMount::Volume(name) => {
            let dir = super::local_volume_dir_named(docker, name)
                .await
                .with_context(|| {
                    format!(
                        "the workspace volume `{name}` is not on this host (a check the agent \
                         gets its workspace back after is made on a copy-on-write view of it: \
                         run `saheeli serve` as root beside the Docker daemon)"
                    )
                })?;
            (dir, None)
        }
    };
    let state_dir = at.state_dir.to_path_buf();
    tokio::task::spawn_blocking(move || check_copy::make(&state_dir, id, &lower, capped))
        .await
        .context("the check's copy thread panicked")?
}

/// Removes task `id`'s copy (absent is fine).
pub(crate) async fn remove(state_dir: &Path, id: TaskId) -> anyhow::Result<()> {
    let state_dir = state_dir.to_path_buf();
    tokio::task::spawn_blocking(move || check_copy::remove(&state_dir, id))
        .await
        .context("the check's copy thread panicked")?
        .context("removing the check's copy of the workspace")
}
