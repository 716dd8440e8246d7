//! The submitted copies of workspaces under `.saheeli/inputs/`: private,
//! handed from attempt to attempt, deleted once no launch needs them.

use std::io::{self};
use std::path::{Path, PathBuf};

use anyhow::Context;
use saheeli_protocol::TaskId;

/// The agent's uid and gid inside the container: the workspace's files
/// are the agent's.
pub(crate) const AGENT_UID: u64 = saheeli_protocol::uids::AGENT as u64;

/// Where the submitted copy of a task's workspace is kept (from submit
/// until its workspace is collected, or handed to a retry by policy).
pub(crate) fn workspace_tar(state_dir: &Path, id: TaskId) -> PathBuf {
    state_dir.join("inputs").join(format!("{id}.tar"))
}

/// Makes (privately) the directory of [`workspace_tar`] and returns the
/// tar's path.
pub(crate) fn new_workspace_tar(state_dir: &Path, id: TaskId) -> io::Result<PathBuf> {
    Ok(inputs_dir(state_dir)?.join(format!("{id}.tar")))
}

/// The directory holding submitted workspaces: private (0700), as the
/// copies may hold anything the workspace did.
fn inputs_dir(state_dir: &Path) -> io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let dir = state_dir.join("inputs");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    // An older Saheeli made it world-readable.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

/// Gives task `to` the submitted workspace of task `from`, if it had one
/// (a hard link: the copies are never written after they are made).
pub(crate) fn copy_workspace(state_dir: &Path, from: TaskId, to: TaskId) -> anyhow::Result<()> {
    let src = workspace_tar(state_dir, from);
    if src.is_file() {
        let dest = workspace_tar(state_dir, to);
        std::fs::hard_link(&src, &dest)
            .or_else(|_| std::fs::copy(&src, &dest).map(|_| ()))
            .with_context(|| format!("copying the workspace of `{from}`"))?;
    }
    Ok(())
}

/// Hands the submitted workspace of `from` to its retry `to` (a rename:
/// one copy per chain of attempts), off the async threads.
pub(crate) async fn hand_over_workspace(
    state_dir: PathBuf,
    from: TaskId,
    to: TaskId,
) -> anyhow::Result<()> {
    tokio::task::spawn_blocking(move || {
        let src = workspace_tar(&state_dir, from);
        match std::fs::rename(&src, workspace_tar(&state_dir, to)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("handing the workspace of `{from}` to `{to}`"))
            }
            _ => Ok(()),
        }
    })
    .await
    .context("workspace thread panicked")?
}

/// Deletes the submitted workspace of a task no launch needs any more.
/// [`remove_workspace`] for blocking callers.
pub(crate) fn discard_workspace(state_dir: &Path, id: TaskId) {
    let path = workspace_tar(state_dir, id);
    if let Err(e) = std::fs::remove_file(&path)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(task_id = %id, error = %e, "submitted workspace not deleted");
    }
}

pub(crate) async fn remove_workspace(state_dir: &Path, id: TaskId) {
    let path = workspace_tar(state_dir, id);
    if let Err(e) = tokio::fs::remove_file(&path).await
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(task_id = %id, error = %e, "submitted workspace not deleted");
    }
}
