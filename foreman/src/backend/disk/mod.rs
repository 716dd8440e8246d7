//! A size-limited `/workspace` per task (`resources.disk`).
//!
//! Docker's own ways cannot do it here: the `local` volume driver's `size`
//! option needs XFS project quotas, and its `type`/`device`/`o` options call
//! mount(2) directly, which cannot mount a plain file (no loop device is set
//! up). So the foreman does it: a sparse ext4 image of exactly that size
//! (formatted by mkfs.ext4 from e2fsprogs once per size, see `format`),
//! loop-mounted (as `mount -o loop` does, by system call, see `attach`: the
//! loop device is freed on unmount) at a private directory:
//!
//! ```text
//! <state_dir>/workspaces/            0700, root's
//!   <task_id>/disk.img               the sparse image: never more than its size on disk
//!   <task_id>/mnt/                   its mount point, bound into the container
//!   p-<slot hex>/                    the same, of a warm servo (issue 28)
//! ```
//!
//! The container binds `mnt/` on /workspace directly: no Docker volume
//! stands between them (a volume costs the daemon two calls, a mount and
//! its own files per task). The directory is the workspace's record: its
//! name is the task's id (or the warm slot's), so the sweeper and `gc` find
//! what a crash left with [`present`] and [`present_slots`], and adoption
//! after a foreman restart finds the mount, which outlives the process.
//! Collection reads `mnt/`, which stays mounted after the container goes;
//! [`destroy`] unmounts and deletes it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use saheeli_protocol::TaskId;

mod attach;
pub(crate) mod check_copy;
mod format;

/// Where a task's image and mount point live.
pub(crate) fn task_dir(state_dir: &Path, id: TaskId) -> PathBuf {
    state_dir.join("workspaces").join(id.to_string())
}

/// Where a warm servo's image and mount point live: `slot` is its socket
/// directory's name (`p-<hex>`), never a task's id.
pub(crate) fn slot_dir(state_dir: &Path, slot: &str) -> PathBuf {
    state_dir.join("workspaces").join(slot)
}

/// Whether `name` is a warm slot's directory name: `p-` and 32 hex digits.
pub(crate) fn is_slot(name: &str) -> bool {
    name.strip_prefix("p-")
        .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Whether this process can make loop mounts that the Docker daemon sees:
/// root, a daemon on this host, and mkfs.ext4. The error says what to do.
pub(crate) fn preflight() -> anyhow::Result<()> {
    const OFF: &str = "or set `limits.disk_enforcement: off` in config.yaml to run \
                       without a workspace size limit";
    if let Ok(host) = std::env::var("DOCKER_HOST")
        && !host.is_empty()
        && !host.starts_with("unix://")
    {
        bail!(
            "`resources.disk` cannot be enforced with a remote Docker daemon (DOCKER_HOST \
             `{host}`): the workspace image is mounted on this host; use a local daemon, {OFF}"
        );
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "`resources.disk` is enforced with a loop-mounted image per task, which needs \
             root: run `saheeli serve` as root, {OFF}"
        );
    }
    if which("mkfs.ext4").is_none() {
        bail!(
            "`mkfs.ext4` not found (it makes each task's workspace image): \
             `apt-get install e2fsprogs`, {OFF}"
        );
    }
    Ok(())
}

fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().with_context(|| format!("running {shown}"))?;
    if !out.status.success() {
        bail!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Makes and mounts a workspace of `bytes` in `dir` ([`task_dir`] or
/// [`slot_dir`] under `state_dir`); returns the mount point, owned by the
/// servo's user (1000) and empty. Idempotent: an existing mount is kept
/// (a foreman retrying a launch).
pub(crate) fn create_at(state_dir: &Path, dir: PathBuf, bytes: u64) -> anyhow::Result<PathBuf> {
    let root = state_dir.join("workspaces");
    let image = dir.join("disk.img");
    let mnt = dir.join("mnt");
    mount_point(state_dir, &mnt)?;
    if is_mounted(&mnt)? {
        return Ok(mnt);
    }
    let made = (|| {
        format::write_image(&root, &image, bytes)?;
        attach::mount_image(&image, &mnt)?;
        // The agent would see (and results would carry) an empty lost+found.
        let _ = std::fs::remove_dir(mnt.join("lost+found"));
        share_root(&mnt)?;
        anyhow::Ok(())
    })();
    if let Err(e) = made {
        let _ = destroy(&mnt);
        return Err(e).context("making the task's workspace image (`resources.disk`)");
    }
    Ok(mnt)
}

/// Makes the (empty) mount point `mnt` of a workspace image under
/// `state_dir`, and the directory of them only root may look in: before
/// the image, so a container binding it can be made meanwhile.
pub(crate) fn mount_point(state_dir: &Path, mnt: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let root = state_dir.join("workspaces");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&root)
        .with_context(|| format!("creating `{}`", root.display()))?;
    // Only root may look in: the images hold other tasks' workspaces.
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("restricting `{}`", root.display()))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(mnt)
        .with_context(|| format!("creating `{}`", mnt.display()))
}

/// `/workspace` as the image has it (the Dockerfile): the servo's
/// directory, writable by the agent's group, sticky, so the agent adds and
/// changes its own files there but cannot remove or rename the servo's
/// (its session, its audit log). Owning the directory would let it.
fn share_root(mnt: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::chown(
        mnt,
        Some(saheeli_protocol::uids::SERVO),
        Some(saheeli_protocol::uids::AGENT),
    )
    .with_context(|| format!("sharing `{}` between servo and agent", mnt.display()))?;
    std::fs::set_permissions(mnt, std::fs::Permissions::from_mode(0o1775))
        .with_context(|| format!("setting the mode of `{}`", mnt.display()))
}

/// The task workspaces present under `state_dir` (mounted or not), for the
/// sweeper: a foreman stopped at the wrong moment can leave one behind.
pub(crate) fn present(state_dir: &Path) -> Vec<(TaskId, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(state_dir.join("workspaces")) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let id = e.file_name().to_str()?.parse().ok()?;
            Some((id, e.path().join("mnt")))
        })
        .collect()
}

/// The warm slots' workspaces present under `state_dir`: slot name
/// (`p-<hex>`), mount point, and how long ago the directory was made or
/// last changed (a slot being made has its directory a moment before its
/// container: only an old one without a container is left over).
pub(crate) fn present_slots(state_dir: &Path) -> Vec<(String, PathBuf, std::time::Duration)> {
    let Ok(entries) = std::fs::read_dir(state_dir.join("workspaces")) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_str().filter(|n| is_slot(n))?.to_string();
            let age = e
                .metadata()
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.elapsed().ok())
                .unwrap_or_default();
            Some((name, e.path().join("mnt"), age))
        })
        .collect()
}

/// Whether `path` is a mount point (its device differs from its parent's).
pub(crate) fn is_mounted(path: &Path) -> anyhow::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let here = std::fs::symlink_metadata(path)
        .with_context(|| format!("inspecting `{}`", path.display()))?;
    let parent = path.parent().unwrap_or(Path::new("/"));
    let up = std::fs::symlink_metadata(parent)
        .with_context(|| format!("inspecting `{}`", parent.display()))?;
    Ok(here.dev() != up.dev())
}

/// Unmounts a task's workspace and deletes its image. `mnt` must be a
/// `<task_id>/mnt` or `p-<hex>/mnt` directory made by [`create_at`];
/// anything else is refused (the path may come from a Docker volume's
/// options or a container's mounts). Absent is fine.
pub(crate) fn destroy(mnt: &Path) -> anyhow::Result<()> {
    let dir = mnt.parent().context("a workspace mount has a parent")?;
    let ours = mnt.file_name().is_some_and(|n| n == "mnt")
        && dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.parse::<TaskId>().is_ok() || is_slot(n))
        && dir
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n == "workspaces");
    if !ours {
        bail!(
            "`{}` is not a Saheeli workspace mount; not removing it",
            mnt.display()
        );
    }
    if !mnt.exists() {
        let _ = std::fs::remove_file(dir.join("disk.img"));
        let _ = std::fs::remove_dir(dir);
        return Ok(());
    }
    // Still held (a container being removed), it is detached: the kernel
    // frees it when the last user goes (`attach::unmount`).
    if is_mounted(mnt)? {
        attach::unmount(mnt)?;
    }
    std::fs::remove_dir(mnt).with_context(|| format!("removing `{}`", mnt.display()))?;
    let image = dir.join("disk.img");
    match std::fs::remove_file(&image) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing `{}`", image.display())),
    }
    let _ = std::fs::remove_dir(dir);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loop devices whose backing file is under `dir`.
    fn loops_backed_by(dir: &Path) -> Vec<String> {
        let mut found = Vec::new();
        for e in std::fs::read_dir("/sys/block").unwrap().flatten() {
            let backing = e.path().join("loop/backing_file");
            if let Ok(b) = std::fs::read_to_string(&backing)
                && b.trim().starts_with(dir.to_str().unwrap())
            {
                found.push(e.file_name().to_string_lossy().into_owned());
            }
        }
        found
    }

    /// A workspace is a mounted, empty filesystem of exactly its size,
    /// shared between servo and agent as the image's /workspace is; a
    /// second one of the same size (from the kept format) is its own
    /// filesystem; destroying unmounts it, frees its loop device and
    /// leaves nothing. Needs root, as `serve` with a disk limit does (the
    /// suite runs as root).
    #[test]
    fn a_workspace_is_its_own_filesystem_of_its_size_and_goes_away_whole() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        assert_eq!(unsafe { libc::geteuid() }, 0, "run the suite as root");
        let state = tempfile::tempdir().unwrap();
        let bytes = 48 << 20;
        let a = create_at(state.path(), task_dir(state.path(), TaskId::new()), bytes).unwrap();
        let b = create_at(
            state.path(),
            slot_dir(state.path(), "p-0123456789abcdef0123456789abcdef"),
            bytes,
        )
        .unwrap();
        for mnt in [&a, &b] {
            assert!(is_mounted(mnt).unwrap());
            let m = std::fs::metadata(mnt).unwrap();
            assert_eq!((m.uid(), m.gid()), (999, 1000));
            assert_eq!(m.permissions().mode() & 0o7777, 0o1775);
            assert_eq!(std::fs::read_dir(mnt).unwrap().count(), 0, "empty");
        }
        assert_ne!(
            std::fs::metadata(&a).unwrap().dev(),
            std::fs::metadata(&b).unwrap().dev()
        );
        assert_eq!(loops_backed_by(state.path()).len(), 2);
        // Idempotent: the existing mount is kept.
        std::fs::write(a.join("kept"), "x").unwrap();
        let again = create_at(state.path(), a.parent().unwrap().to_path_buf(), bytes).unwrap();
        assert!(again.join("kept").exists());
        // Its size is the limit: writing past it fails.
        let big = vec![1u8; 1 << 20];
        let mut f = std::fs::File::create(a.join("fill")).unwrap();
        let mut written = 0u64;
        let full = loop {
            match std::io::Write::write_all(&mut f, &big) {
                Ok(()) => written += big.len() as u64,
                Err(e) => break e,
            }
            assert!(written <= bytes, "wrote past the limit");
        };
        assert_eq!(full.raw_os_error(), Some(libc::ENOSPC));
        drop(f);
        // The other workspace is untouched by this one filling up.
        assert!(!b.join("fill").exists());
        // Destroyed while a file is held open: detached, then freed.
        let held = std::fs::File::open(a.join("kept")).unwrap();
        destroy(&a).unwrap();
        destroy(&b).unwrap();
        drop(held);
        assert!(!a.parent().unwrap().exists() && !b.parent().unwrap().exists());
        for _ in 0..100 {
            if loops_backed_by(state.path()).is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(loops_backed_by(state.path()), Vec::<String>::new());
        let left: Vec<_> = std::fs::read_dir(state.path().join("workspaces"))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn destroy_refuses_paths_it_did_not_make() {
        for p in [
            "/etc",
            "/tmp/x/mnt",
            "/tmp/workspaces/not-an-id/mnt",
            "/tmp/workspaces/p-../mnt",
            "/tmp/workspaces/p-0123456789abcdef0123456789abcdeg/mnt",
            "/tmp/elsewhere/p-0123456789abcdef0123456789abcdef/mnt",
        ] {
            assert!(destroy(Path::new(p)).is_err(), "{p}");
        }
    }

    #[test]
    fn a_slot_directory_is_p_and_32_hex_digits_and_nothing_else() {
        assert!(is_slot("p-0123456789abcdef0123456789abcdef"));
        for bad in [
            "p-",
            "p-0123456789abcdef0123456789abcde",
            "p-0123456789abcdef0123456789abcdef0",
            "0191d3e2-aaaa-7bbb-8ccc-0123456789ab",
            "p-../../etc",
        ] {
            assert!(!is_slot(bad), "{bad}");
        }
    }
}
