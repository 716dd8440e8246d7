//! What goes into a task's /workspace before its servo starts: a copy of the
//! `workspace:` directory, taken at submit time, and the launch files
//! (`prompt.md`, `.saheeli/task.json`).
//!
//! Everything is owned by the servo's user (uid 1000) in the archives, so
//! the unprivileged servo can write to its workspace.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use saheeli_protocol::{ServoTask, TaskId};

/// The servo's uid and gid inside the container.
pub(crate) const SERVO_UID: u64 = 1000;

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
pub(crate) async fn remove_workspace(state_dir: &Path, id: TaskId) {
    let path = workspace_tar(state_dir, id);
    if let Err(e) = tokio::fs::remove_file(&path).await
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(task_id = %id, error = %e, "submitted workspace not deleted");
    }
}

/// Why a workspace was not packed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PackError {
    #[error(
        "workspace `{dir}` is larger than `max_workspace_size` ({limit} bytes) in config.yaml: \
         name large files in `.saheeliignore`, or raise `max_workspace_size`"
    )]
    TooLarge { dir: PathBuf, limit: u64 },
    #[error(
        "`{file}` in workspace `{dir}` holds the value of `{var}`: an API key must not enter \
         a container; remove it, or name the file in `.saheeliignore`"
    )]
    Secret {
        dir: PathBuf,
        file: PathBuf,
        var: String,
    },
    #[error("copying workspace `{dir}`: {source}")]
    Io { dir: PathBuf, source: io::Error },
    #[error("copying workspace `{dir}`: {source}")]
    Walk { dir: PathBuf, source: ignore::Error },
}

/// What packing leaves out and watches for.
#[derive(Clone, Debug, Default)]
pub(crate) struct PackOptions {
    /// Copy what `.gitignore` names too (`workspace_include_ignored`).
    pub include_ignored: bool,
    /// Saheeli's own files (state dir, results, database): never copied,
    /// even when the workspace holds them.
    pub exclude: Vec<PathBuf>,
    /// `max_workspace_size`.
    pub max_bytes: u64,
    /// (variable, value) of every key Saheeli knows: a hit refuses the workspace.
    pub secrets: Vec<(String, String)>,
}

/// Names never copied into a container, whatever the ignore files say.
fn always_skipped(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().starts_with(b".env")
}

/// Copies `src` into a private (0600) tar at `dest`: symlinks kept as
/// links, never followed; `.env*`, what `.saheeliignore` and (unless
/// `include_ignored`) `.gitignore` name, and `exclude` left out. The copy is
/// scanned for the `secrets` as it is written; on any error nothing is left
/// on disk. Blocking.
pub(crate) fn pack_workspace(src: &Path, dest: &Path, opts: &PackOptions) -> Result<(), PackError> {
    let root = src.canonicalize().map_err(|source| PackError::Io {
        dir: src.to_path_buf(),
        source,
    })?;
    let io_err = |source| PackError::Io {
        dir: root.clone(),
        source,
    };
    let dir = dest.parent().expect("a workspace tar has a directory");
    std::fs::create_dir_all(dir).map_err(io_err)?;
    let tmp = TempFile(dest.with_extension("tar.tmp"));
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp.0)
            .map_err(io_err)?
    };
    let mut b = tar::Builder::new(io::BufWriter::new(file));
    b.follow_symlinks(false);
    b.mode(tar::HeaderMode::Deterministic);
    append_tree(&mut b, &root, opts)?;
    b.into_inner()
        .and_then(|w| w.into_inner().map_err(|e| e.into_error()))
        .and_then(|f| f.sync_all())
        .map_err(io_err)?;
    std::fs::rename(&tmp.0, dest).map_err(io_err)?;
    tmp.keep();
    Ok(())
}

/// Removed when dropped (every error path), unless kept.
struct TempFile(PathBuf);

impl TempFile {
    fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Appends what is to be copied below `root`, owned by the servo user.
fn append_tree<W: Write>(
    b: &mut tar::Builder<W>,
    root: &Path,
    opts: &PackOptions,
) -> Result<(), PackError> {
    let exclude: Vec<PathBuf> = opts.exclude.iter().map(|p| canonical(p)).collect();
    let mut walk = ignore::WalkBuilder::new(root);
    walk.standard_filters(false)
        .hidden(false)
        .follow_links(false)
        .parents(true)
        // `.gitignore` applies without a `.git` directory too.
        .require_git(false)
        .git_ignore(!opts.include_ignored)
        .git_exclude(!opts.include_ignored)
        .add_custom_ignore_filename(".saheeliignore")
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(move |e| {
            e.depth() == 0
                || !(always_skipped(e.file_name()) || exclude.iter().any(|x| x == e.path()))
        });
    let mut total = 0u64;
    let io_err = |source| PackError::Io {
        dir: root.to_path_buf(),
        source,
    };
    for entry in walk.build() {
        let entry = entry.map_err(|source| PackError::Walk {
            dir: root.to_path_buf(),
            source,
        })?;
        if entry.depth() == 0 {
            continue;
        }
        let path = entry.path();
        let name = path.strip_prefix(root).expect("walked below the root");
        let meta = std::fs::symlink_metadata(path).map_err(io_err)?;
        let mut h = tar::Header::new_gnu();
        h.set_metadata_in_mode(&meta, tar::HeaderMode::Deterministic);
        h.set_uid(SERVO_UID);
        h.set_gid(SERVO_UID);
        let ft = meta.file_type();
        if ft.is_dir() {
            h.set_size(0);
            b.append_data(&mut h, name, io::empty()).map_err(io_err)?;
        } else if ft.is_file() {
            use std::os::unix::fs::OpenOptionsExt;
            // Opened without following a link someone swapped in since.
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(path)
                .map_err(io_err)?;
            let size = f.metadata().map_err(io_err)?.len();
            total += size;
            if total > opts.max_bytes {
                return Err(PackError::TooLarge {
                    dir: root.to_path_buf(),
                    limit: opts.max_bytes,
                });
            }
            h.set_size(size);
            h.set_cksum();
            // Exactly `size` bytes even if the file grows or shrinks meanwhile.
            let body = f.take(size).chain(io::repeat(0)).take(size);
            let mut scan = Scanning::new(body, &opts.secrets);
            b.append_data(&mut h, name, &mut scan).map_err(io_err)?;
            if let Some(var) = scan.hit {
                return Err(PackError::Secret {
                    dir: root.to_path_buf(),
                    file: name.to_path_buf(),
                    var: var.to_string(),
                });
            }
        } else if ft.is_symlink() {
            let target = std::fs::read_link(path).map_err(io_err)?;
            h.set_size(0);
            b.append_link(&mut h, name, target).map_err(io_err)?;
        }
        // Sockets, FIFOs and devices are not copied.
    }
    Ok(())
}

/// The path with its directory resolved (the file itself may not exist yet).
fn canonical(p: &Path) -> PathBuf {
    if let Ok(c) = p.canonicalize() {
        return c;
    }
    match (
        p.parent().and_then(|d| d.canonicalize().ok()),
        p.file_name(),
    ) {
        (Some(d), Some(n)) => d.join(n),
        _ => p.to_path_buf(),
    }
}

/// Passes a file's bytes through, noting the first secret value seen
/// (also across read boundaries).
struct Scanning<'a, R> {
    inner: R,
    secrets: &'a [(String, String)],
    /// The end of what was read, as long as the longest secret less one.
    tail: Vec<u8>,
    keep: usize,
    hit: Option<&'a str>,
}

impl<'a, R> Scanning<'a, R> {
    fn new(inner: R, secrets: &'a [(String, String)]) -> Self {
        let keep = secrets.iter().map(|(_, v)| v.len()).max().unwrap_or(1) - 1;
        Scanning {
            inner,
            secrets,
            tail: Vec::new(),
            keep,
            hit: None,
        }
    }
}

impl<R: Read> Read for Scanning<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if self.hit.is_none() && !self.secrets.is_empty() && n > 0 {
            self.tail.extend_from_slice(&buf[..n]);
            self.hit = self
                .secrets
                .iter()
                .find(|(_, v)| memchr::memmem::find(&self.tail, v.as_bytes()).is_some())
                .map(|(k, _)| k.as_str());
            let cut = self.tail.len().saturating_sub(self.keep);
            self.tail.drain(..cut);
        }
        Ok(n)
    }
}

/// Refuses a `workspace` that is the whole host, a home directory (or holds
/// one), or, unless `allow_outside`, outside the prompt's directory tree.
pub(crate) fn check_workspace_path(
    prompt: &Path,
    workspace: &Path,
    allow_outside: bool,
) -> anyhow::Result<()> {
    let ws = workspace
        .canonicalize()
        .with_context(|| format!("{}: resolving `workspace`", prompt.display()))?;
    if ws == Path::new("/") {
        bail!(
            "{}: `workspace` is `/`, the whole host: point it at the project directory the agent should work on",
            prompt.display()
        );
    }
    if let Some(home) = homes().into_iter().find(|h| h.starts_with(&ws)) {
        bail!(
            "{}: `workspace` `{}` is {} home directory `{}`: homes hold keys and private files; \
             point it at a project directory",
            prompt.display(),
            ws.display(),
            if home == ws { "a" } else { "above the" },
            home.display()
        );
    }
    let parent = prompt
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let dir = std::path::absolute(parent)
        .and_then(|d| d.canonicalize())
        .with_context(|| format!("resolving the directory of `{}`", prompt.display()))?;
    if !allow_outside && !ws.starts_with(&dir) {
        bail!(
            "{}: `workspace` `{}` is outside the prompt's directory `{}`: keep the prompt beside \
             or above its workspace, or pass `--allow-workspace-outside` if you mean it",
            prompt.display(),
            ws.display(),
            dir.display()
        );
    }
    Ok(())
}

/// `$HOME` and the home directories of root and of people (uid ≥ 1000).
fn homes() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::env::var_os("HOME")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    if let Ok(passwd) = std::fs::read_to_string("/etc/passwd") {
        for line in passwd.lines() {
            let f: Vec<&str> = line.split(':').collect();
            if let (Some(uid), Some(home)) =
                (f.get(2).and_then(|u| u.parse::<u32>().ok()), f.get(5))
                && (uid == 0 || (1000..65534).contains(&uid))
            {
                out.push(PathBuf::from(home));
            }
        }
    }
    out.into_iter()
        .filter_map(|h| h.canonicalize().ok())
        .filter(|h| h != Path::new("/"))
        .collect()
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

    fn opts() -> PackOptions {
        PackOptions {
            max_bytes: u64::MAX,
            ..Default::default()
        }
    }

    #[test]
    fn a_secret_is_found_across_reads_and_nothing_is_left() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        std::fs::create_dir_all(&src).unwrap();
        let secret = "sk-abcdefghijklmnopqrstuvwxyz";
        // Straddles the 8 KiB pieces tar copies in.
        let mut body = vec![b'x'; 8192 - 5];
        body.extend_from_slice(secret.as_bytes());
        std::fs::write(src.join("big.txt"), &body).unwrap();
        let dest = d.path().join("out/x.tar");
        let o = PackOptions {
            secrets: vec![("K".into(), secret.into())],
            ..opts()
        };
        let e = pack_workspace(&src, &dest, &o).unwrap_err();
        assert!(
            matches!(&e, PackError::Secret { file, var, .. } if file == Path::new("big.txt") && var == "K"),
            "{e}"
        );
        assert_eq!(std::fs::read_dir(d.path().join("out")).unwrap().count(), 0);
        // And the size cap.
        let o = PackOptions {
            max_bytes: 100,
            ..opts()
        };
        assert!(matches!(
            pack_workspace(&src, &dest, &o),
            Err(PackError::TooLarge { .. })
        ));
        assert_eq!(std::fs::read_dir(d.path().join("out")).unwrap().count(), 0);
    }

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
        pack_workspace(&src, &dest, &opts()).unwrap();
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
