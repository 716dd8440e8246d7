//! A swarm task's parked workspace under `.saheeli/parked/<id>/`: what its
//! servo uploaded when it parked to wait for a human (its session
//! included), kept here, private, because the node's volume is not
//! reachable. The next launch's servo fetches it (packed again as a tar,
//! links stored as links, never followed); a parked task that ends is
//! collected from it; it is removed when the task ends.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use saheeli_protocol::TaskId;

/// Where the parked workspace of a task is kept.
pub(crate) fn parked_dir(state_dir: &Path, id: TaskId) -> PathBuf {
    state_dir.join("parked").join(id.to_string())
}

/// The tasks that have a parked workspace kept.
pub(crate) fn parked_tasks(state_dir: &Path) -> Vec<TaskId> {
    let Ok(entries) = std::fs::read_dir(state_dir.join("parked")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// Makes (privately: the workspace may hold anything) the directory the
/// parked workspaces are kept in, and returns the task's path in it.
pub(crate) fn new_parked_dir(state_dir: &Path, id: TaskId) -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = state_dir.join("parked");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    Ok(parked_dir(state_dir, id))
}

/// Writes the tree at `src` into `w` as a tar whose entries are relative
/// to it (what the servo unpacks into `/workspace`): directories, regular
/// files, and links stored as links (never followed). Anything else (a
/// FIFO, a device: collection never makes one) is left out, never opened.
pub(crate) fn pack_dir(src: &Path, w: impl Write) -> io::Result<()> {
    let mut b = tar::Builder::new(w);
    b.follow_symlinks(false);
    let mut dirs = vec![PathBuf::new()];
    while let Some(rel) = dirs.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(src.join(&rel))?.collect::<io::Result<_>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = rel.join(e.file_name());
            let kind = e.file_type()?;
            if kind.is_dir() {
                b.append_dir(&name, e.path())?;
                dirs.push(name);
            } else if kind.is_file() || kind.is_symlink() {
                b.append_path_with_name(e.path(), &name)?;
            } else {
                tracing::warn!(path = %e.path().display(), "not a file, directory or link: left out of the parked workspace");
            }
        }
    }
    b.into_inner()?.flush()
}

/// Moves a kept workspace to `dest` (results, or back to being parked):
/// a rename when both are on one filesystem, else a copy that follows no
/// link (`collect::copy_volume`, with its caps), and the source removed.
pub(crate) fn move_tree(
    src: &Path,
    dest: &Path,
    secrets: &[(String, String)],
    max_bytes: u64,
) -> anyhow::Result<crate::collect::Collected> {
    if dest.exists() {
        std::fs::remove_dir_all(dest).with_context(|| format!("removing `{}`", dest.display()))?;
    }
    if let Some(parent) = dest.parent() {
        // A parent made here is this user's only (HOSTILE.md 57): `state_dir`'s
        // parked tree, or results_dir, which serve makes first as `file_access` says.
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .with_context(|| format!("creating `{}`", parent.display()))?;
    }
    let collected = match std::fs::rename(src, dest) {
        Ok(()) => count(dest),
        Err(_) => crate::collect::copy_volume(src, dest, secrets, max_bytes)?,
    };
    remove_tree(src);
    Ok(collected)
}

/// Files and bytes of a tree (links not followed), as a collection reports.
fn count(root: &Path) -> crate::collect::Collected {
    let mut out = crate::collect::Collected::default();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => dirs.push(e.path()),
                Ok(t) if t.is_file() => {
                    // What it occupies, as a copy counts it (a hole is free).
                    out.files += 1;
                    out.bytes += e
                        .metadata()
                        .map(|m| crate::collect::allocated(&m))
                        .unwrap_or(0);
                }
                _ => {}
            }
        }
    }
    out
}

/// Removes the parked workspace of a task that ended, if it had one.
pub(crate) async fn remove_parked(state_dir: &Path, id: TaskId) {
    let dir = parked_dir(state_dir, id);
    if dir.exists() {
        let _ = tokio::task::spawn_blocking(move || remove_tree(&dir)).await;
    }
}

/// Removes a tree if it is there (a parked workspace no launch needs).
pub(crate) fn remove_tree(path: &Path) {
    if let Err(e) = std::fs::remove_dir_all(path)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "kept workspace not removed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_reads_through_no_link_device_or_fifo() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("parked");
        std::fs::create_dir_all(&src).unwrap();
        for (name, to) in [
            ("zero", "/dev/zero"),
            ("root", "/proc/self/root"),
            ("host", "/etc"),
        ] {
            std::os::unix::fs::symlink(to, src.join(name)).unwrap();
        }
        let fifo = std::ffi::CString::new(src.join("pipe").to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        // Nothing is opened: a FIFO with no writer or /dev/zero would hang
        // or never end if it were. The FIFO is left out.
        let mut tar_bytes = Vec::new();
        pack_dir(&src, &mut tar_bytes).unwrap();
        assert!(tar_bytes.len() < 64 << 10, "{} bytes", tar_bytes.len());
        let mut kinds = Vec::new();
        for e in tar::Archive::new(&tar_bytes[..]).entries().unwrap() {
            let e = e.unwrap();
            assert_eq!(e.header().size().unwrap(), 0);
            kinds.push((
                e.path().unwrap().display().to_string(),
                e.header().entry_type(),
            ));
        }
        kinds.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            kinds,
            [
                ("host".to_string(), tar::EntryType::Symlink),
                ("root".to_string(), tar::EntryType::Symlink),
                ("zero".to_string(), tar::EntryType::Symlink),
            ]
        );
    }

    #[test]
    fn a_parked_tree_packs_with_links_as_links_and_moves_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("parked");
        std::fs::create_dir_all(src.join("sub/deep")).unwrap();
        std::fs::write(src.join("a.txt"), "a").unwrap();
        std::fs::write(src.join("sub/deep/b.txt"), "bb").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.join("link")).unwrap();
        let mut tar_bytes = Vec::new();
        pack_dir(&src, &mut tar_bytes).unwrap();
        let mut names = Vec::new();
        for e in tar::Archive::new(&tar_bytes[..]).entries().unwrap() {
            let e = e.unwrap();
            let kind = e.header().entry_type();
            names.push((e.path().unwrap().display().to_string(), kind));
        }
        assert!(names.contains(&("a.txt".into(), tar::EntryType::Regular)));
        assert!(names.contains(&("sub/deep/b.txt".into(), tar::EntryType::Regular)));
        assert!(
            names.contains(&("link".into(), tar::EntryType::Symlink)),
            "{names:?}"
        );
        let dest = tmp.path().join("results/x");
        let c = move_tree(&src, &dest, &[], 1 << 20).unwrap();
        assert_eq!((c.files, c.bytes), (2, 3));
        assert!(!src.exists());
        assert_eq!(
            std::fs::read_to_string(dest.join("sub/deep/b.txt")).unwrap(),
            "bb"
        );
        assert!(dest.join("link").symlink_metadata().unwrap().is_symlink());
    }
}
