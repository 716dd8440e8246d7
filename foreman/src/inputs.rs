//! What goes into a task's /workspace before its servo starts: a copy of the
//! `workspace:` directory, taken at submit time, and the launch files
//! (`prompt.md`, `.saheeli/task.json`).
//!
//! Everything is owned by the servo's user (uid 1000) in the archives, so
//! the unprivileged servo can write to its workspace.

use std::path::{Path, PathBuf};

use anyhow::Context;
use saheeli_protocol::{ServoTask, TaskId};

/// The servo's uid and gid inside the container.
pub(crate) const SERVO_UID: u64 = 1000;

/// Where the submitted copy of a task's workspace is kept.
pub(crate) fn workspace_tar(state_dir: &Path, id: TaskId) -> PathBuf {
    state_dir.join("inputs").join(format!("{id}.tar"))
}

/// Gives task `to` the submitted workspace of task `from`, if it had one.
pub(crate) fn copy_workspace(state_dir: &Path, from: TaskId, to: TaskId) -> anyhow::Result<()> {
    let src = workspace_tar(state_dir, from);
    if src.is_file() {
        std::fs::copy(&src, workspace_tar(state_dir, to))
            .with_context(|| format!("copying the workspace of `{from}`"))?;
    }
    Ok(())
}

/// Forgets the submitted workspace of `id` (a retry that was not queued).
pub(crate) fn remove_workspace(state_dir: &Path, id: TaskId) {
    let _ = std::fs::remove_file(workspace_tar(state_dir, id));
}

/// Copies `src` into a tar at `dest` (symlinks kept as links, never followed).
pub(crate) fn pack_workspace(src: &Path, dest: &Path) -> anyhow::Result<()> {
    if let Some(p) = dest.parent() {
        std::fs::create_dir_all(p).with_context(|| format!("creating `{}`", p.display()))?;
    }
    let tmp = dest.with_extension("tar.tmp");
    let file =
        std::fs::File::create(&tmp).with_context(|| format!("creating `{}`", tmp.display()))?;
    let mut b = tar::Builder::new(std::io::BufWriter::new(file));
    b.follow_symlinks(false);
    b.mode(tar::HeaderMode::Deterministic);
    append_owned(&mut b, src, Path::new(""))
        .with_context(|| format!("copying workspace `{}`", src.display()))?;
    b.into_inner()?
        .into_inner()
        .map_err(|e| e.into_error())?
        .sync_all()?;
    std::fs::rename(&tmp, dest).with_context(|| format!("writing `{}`", dest.display()))?;
    Ok(())
}

/// Appends `dir`'s contents under `prefix`, owned by the servo user.
fn append_owned<W: std::io::Write>(
    b: &mut tar::Builder<W>,
    dir: &Path,
    prefix: &Path,
) -> anyhow::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading `{}`", dir.display()))?
        .collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let name = prefix.join(entry.file_name());
        let meta = std::fs::symlink_metadata(&path)?;
        let mut h = tar::Header::new_gnu();
        h.set_metadata_in_mode(&meta, tar::HeaderMode::Deterministic);
        h.set_uid(SERVO_UID);
        h.set_gid(SERVO_UID);
        let ft = meta.file_type();
        if ft.is_dir() {
            h.set_size(0);
            b.append_data(&mut h, &name, std::io::empty())?;
            append_owned(b, &path, &name)?;
        } else if ft.is_file() {
            let f = std::fs::File::open(&path)
                .with_context(|| format!("reading `{}`", path.display()))?;
            b.append_data(&mut h, &name, f)?;
        } else if ft.is_symlink() {
            let target = std::fs::read_link(&path)?;
            h.set_size(0);
            b.append_link(&mut h, &name, target)?;
        }
        // Sockets, FIFOs and devices are not copied.
    }
    Ok(())
}

/// `prompt.md` and `.saheeli/task.json` as a tar for /workspace.
pub(crate) fn launch_tar(body: &str, task: &ServoTask) -> anyhow::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    let task_json = serde_json::to_vec_pretty(task)?;
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o755);
    dir.set_uid(SERVO_UID);
    dir.set_gid(SERVO_UID);
    dir.set_size(0);
    b.append_data(&mut dir, ".saheeli", std::io::empty())?;
    for (name, data, mode) in [
        ("prompt.md", body.as_bytes(), 0o644),
        (".saheeli/task.json", &task_json[..], 0o444),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_mode(mode);
        h.set_uid(SERVO_UID);
        h.set_gid(SERVO_UID);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, name, data)?;
    }
    Ok(b.into_inner()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_files_dirs_and_links_as_servo_user() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("sub/a.txt"), "a").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.join("link")).unwrap();
        // A symlink loop must not hang packing.
        std::os::unix::fs::symlink("loop", src.join("loop")).unwrap();
        let dest = d.path().join("out/x.tar");
        pack_workspace(&src, &dest).unwrap();
        let mut ar = tar::Archive::new(std::fs::File::open(&dest).unwrap());
        let mut names = vec![];
        for e in ar.entries().unwrap() {
            let e = e.unwrap();
            assert_eq!(e.header().uid().unwrap(), SERVO_UID);
            names.push((
                e.path().unwrap().display().to_string(),
                e.header().entry_type(),
            ));
        }
        assert!(names.contains(&("sub/a.txt".into(), tar::EntryType::Regular)));
        assert!(names.contains(&("link".into(), tar::EntryType::Symlink)));
        assert!(names.contains(&("loop".into(), tar::EntryType::Symlink)));
    }
}
