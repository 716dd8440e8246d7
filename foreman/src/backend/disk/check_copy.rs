//! A throwaway copy-on-write view of a task's workspace, for a check the
//! agent gets its workspace back after (issue 49: a verify attempt with
//! another left, a checked step, on a task with hidden tests).
//!
//! The check runs code of the agent's (the module its tests import) in a
//! container where the hidden tests are bound at /tests: on the workspace
//! itself, that code could copy them into /workspace and the agent read
//! them once its failed attempt was handed back. So the verify container
//! is given an overlay instead: the workspace is its lower layer, read
//! only; whatever the check writes goes to an upper layer that is thrown
//! away after the check. The last attempt needs none (nothing of the
//! agent's runs after it) and keeps the direct mount.
//!
//! Overlayfs forbids changing a lower layer while it is mounted, so the
//! copy is made while the task's container is paused and removed before
//! it runs again. The foreman mounts it (root, by system call, as the
//! workspace images are mounted) at a private directory that is bound into
//! the verify container:
//!
//! ```text
//! <state_dir>/checks/            0700, root's
//!   <task_id>/upper.img          a sparse ext4 image of the workspace's size
//!                                (a size-limited workspace only: what the
//!                                check writes cannot fill the host's disk)
//!   <task_id>/upper/             its mount point (else a plain directory):
//!                                u/ the upper layer, w/ overlayfs's work dir
//!   <task_id>/merged/            the overlay, bound on /workspace
//! ```
//!
//! The directory is named by the task: a crash's leftover is found by
//! [`present`] (the sweeper, `saheeli gc`) and by the foreman adopting the
//! task ([`remove`] before its container runs again).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use saheeli_protocol::TaskId;

/// Where the checks' copies live.
fn root(state_dir: &Path) -> PathBuf {
    state_dir.join("checks")
}

/// Where task `id`'s copy lives.
pub(crate) fn copy_dir(state_dir: &Path, id: TaskId) -> PathBuf {
    root(state_dir).join(id.to_string())
}

/// Makes the copy of the workspace at `lower` (a host directory) for a
/// check of task `id`, returning the directory to bind on /workspace.
/// `capped`: the upper layer is an image of that many bytes, else a plain
/// directory. What an earlier copy of the task left is removed first; on
/// an error, whatever was made is.
pub(crate) fn make(
    state_dir: &Path,
    id: TaskId,
    lower: &Path,
    capped: Option<u64>,
) -> anyhow::Result<PathBuf> {
    remove(state_dir, id)?;
    let made = make_in(state_dir, id, lower, capped);
    if made.is_err() {
        let _ = remove(state_dir, id);
    }
    made.context("making the check's copy-on-write view of the workspace")
}

fn make_in(
    state_dir: &Path,
    id: TaskId,
    lower: &Path,
    capped: Option<u64>,
) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    for p in [lower, state_dir] {
        let text = p.to_str().unwrap_or(",");
        if text.contains([',', ':', '\\']) {
            bail!(
                "`{}` holds a `,`, `:` or `\\`, which overlayfs's options cannot carry",
                p.display()
            );
        }
    }
    let checks = root(state_dir);
    let private = |dir: &Path| {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating `{}`", dir.display()))
    };
    private(&checks)?;
    // Only root may look in: a copy holds a task's workspace.
    std::fs::set_permissions(&checks, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("restricting `{}`", checks.display()))?;
    let dir = copy_dir(state_dir, id);
    let (upper, merged) = (dir.join("upper"), dir.join("merged"));
    private(&upper)?;
    private(&merged)?;
    if let Some(bytes) = capped {
        let image = dir.join("upper.img");
        super::format::write_image(&checks, &image, bytes)?;
        super::attach::mount_image(&image, &upper)?;
    }
    let (u, w) = (upper.join("u"), upper.join("w"));
    private(&u)?;
    private(&w)?;
    // The overlay's root takes the upper layer's owner and mode: the
    // workspace's own (the servo's, shared with the agent's group).
    let top =
        std::fs::metadata(lower).with_context(|| format!("inspecting `{}`", lower.display()))?;
    std::os::unix::fs::chown(&u, Some(top.uid()), Some(top.gid()))
        .with_context(|| format!("sharing `{}`", u.display()))?;
    std::fs::set_permissions(&u, std::fs::Permissions::from_mode(top.mode() & 0o7777))
        .with_context(|| format!("setting the mode of `{}`", u.display()))?;
    let options = std::ffi::CString::new(format!(
        "lowerdir={},upperdir={},workdir={},index=off",
        lower.display(),
        u.display(),
        w.display()
    ))
    .context("a path with a NUL byte")?;
    rustix::mount::mount(
        "overlay",
        &merged,
        "overlay",
        rustix::mount::MountFlags::NOSUID | rustix::mount::MountFlags::NODEV,
        options.as_c_str(),
    )
    .with_context(|| {
        format!(
            "mounting an overlay of `{}` at `{}` (the foreman mounts it: run `saheeli serve` \
             as root on the Docker daemon's host)",
            lower.display(),
            merged.display()
        )
    })?;
    Ok(merged)
}

/// Removes task `id`'s copy: the overlay and the upper layer unmounted
/// (detached when still in use: the kernel frees them when their last user
/// goes), their directories and image deleted. Absent is fine.
pub(crate) fn remove(state_dir: &Path, id: TaskId) -> anyhow::Result<()> {
    let dir = copy_dir(state_dir, id);
    if !dir.exists() {
        return Ok(());
    }
    let (upper, merged) = (dir.join("upper"), dir.join("merged"));
    for m in [&merged, &upper] {
        // Never delete through a mount: the overlay's lower layer is the
        // task's workspace.
        while m.exists() && super::is_mounted(m)? {
            super::attach::unmount(m)?;
        }
    }
    for m in [&merged, &upper] {
        match std::fs::remove_dir_all(m) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing `{}`", m.display())),
        }
    }
    let image = dir.join("upper.img");
    match std::fs::remove_file(&image) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing `{}`", image.display())),
    }
    std::fs::remove_dir(&dir).with_context(|| format!("removing `{}`", dir.display()))
}

/// The tasks a copy is present of under `state_dir`, for the sweeper and
/// `saheeli gc`: a foreman stopped mid-check leaves one.
pub(crate) fn present(state_dir: &Path) -> Vec<TaskId> {
    let Ok(entries) = std::fs::read_dir(root(state_dir)) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

#[cfg(test)]
#[path = "check_copy_tests.rs"]
mod tests;
