//! The submitted copies of workspaces under `.saheeli/inputs/`: private,
//! handed from attempt to attempt, deleted once no launch needs them.

use std::io::{self};
use std::path::{Path, PathBuf};

use anyhow::Context;
use saheeli_protocol::TaskId;

use super::{PackError, PackOptions};

/// The agent's uid and gid inside the container: the workspace's files
/// are the agent's.
pub(crate) const AGENT_UID: u64 = saheeli_protocol::uids::AGENT as u64;

/// Where the submitted copy of a task's workspace is kept (from submit
/// until its workspace is collected, or handed to a retry by policy).
pub(crate) fn workspace_tar(state_dir: &Path, id: TaskId) -> PathBuf {
    state_dir.join("inputs").join(format!("{id}.tar"))
}

/// Where a retry that goes on from the attempt before it (issue 30:
/// `retry_from: session | workspace`) keeps that attempt's collected
/// workspace, packed: its launch uploads this instead of the submitted
/// copy, which stays for `changes.patch` and `verify_files`.
pub(crate) fn resume_tar(state_dir: &Path, id: TaskId) -> PathBuf {
    state_dir.join("inputs").join(format!("{id}.resume.tar"))
}

/// What a launch of task `id` uploads into /workspace: the workspace it
/// goes on from when it has one, else the submitted copy.
pub(crate) fn start_tar(state_dir: &Path, id: TaskId) -> PathBuf {
    let resume = resume_tar(state_dir, id);
    if resume.is_file() {
        resume
    } else {
        workspace_tar(state_dir, id)
    }
}

/// Packs the collected workspace `results` of an ended attempt as the
/// workspace its retry `to` starts on ([`resume_tar`]): links kept as
/// links, never followed; Saheeli's `.saheeli/` and the attempt's
/// `complete.json` left out; the size cap and key scan of a submitted
/// workspace. Blocking.
pub(crate) fn pack_resume(
    state_dir: &Path,
    results: &Path,
    to: TaskId,
    max_bytes: u64,
    secrets: Vec<(String, String)>,
) -> Result<(), PackError> {
    pack_resume_with(state_dir, results, to, max_bytes, secrets, None)
}

/// [`pack_resume`], with the agent's kept session `agent_session` (its
/// checked directory in `results`) brought along at
/// `saheeli_protocol::agent_session::STAGED` for the servo to restore
/// (issue 51).
pub(crate) fn pack_resume_with(
    state_dir: &Path,
    results: &Path,
    to: TaskId,
    max_bytes: u64,
    secrets: Vec<(String, String)>,
    agent_session: Option<&Path>,
) -> Result<(), PackError> {
    inputs_dir(state_dir).map_err(|source| PackError::Io {
        dir: results.to_path_buf(),
        source,
    })?;
    let opts = PackOptions {
        include_ignored: true,
        exclude: vec![results.join("complete.json")],
        max_bytes,
        secrets,
        no_parent_rules: false,
    };
    let staged = Path::new(saheeli_protocol::agent_session::STAGED);
    super::pack_workspace_with(
        results,
        &resume_tar(state_dir, to),
        &opts,
        agent_session.map(|dir| (dir, staged)),
    )
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
    for path in [workspace_tar(state_dir, id), resume_tar(state_dir, id)] {
        if let Err(e) = std::fs::remove_file(&path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(task_id = %id, error = %e, "submitted workspace not deleted");
        }
    }
}

pub(crate) async fn remove_workspace(state_dir: &Path, id: TaskId) {
    for path in [workspace_tar(state_dir, id), resume_tar(state_dir, id)] {
        if let Err(e) = tokio::fs::remove_file(&path).await
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(task_id = %id, error = %e, "submitted workspace not deleted");
        }
    }
}
