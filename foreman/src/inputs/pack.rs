//! Packing a workspace directory into a tar: ignore files honoured, `.env*`
//! and Saheeli's own files left out, links kept as links, key values refused,
//! a size cap.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use super::AGENT_UID;

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
    /// (`pack` only) The path is not fit to be a workspace: the whole
    /// host, a home, outside its prompt's directory.
    #[error(transparent)]
    Outside(anyhow::Error),
    /// (`pack` only) The inputs directory in `state_dir` could not be made.
    #[error(transparent)]
    Inputs(anyhow::Error),
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
    /// Read no ignore file above the workspace (a repository's checkout:
    /// what is in it is the commit's, whatever the directories above say).
    pub no_parent_rules: bool,
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
    pack_workspace_with(src, dest, opts, None)
}

/// [`pack_workspace`], and the tree `extra.0` added below the name
/// `extra.1` (walked as the workspace is, with no ignore file above it):
/// a retry's agent session (issue 51).
pub(crate) fn pack_workspace_with(
    src: &Path,
    dest: &Path,
    opts: &PackOptions,
    extra: Option<(&Path, &Path)>,
) -> Result<(), PackError> {
    let root = src.canonicalize().map_err(|source| PackError::Io {
        dir: src.to_path_buf(),
        source,
    })?;
    let io_err = |source| PackError::Io {
        dir: root.clone(),
        source,
    };
    let dir = dest.parent().expect("a workspace tar has a directory");
    {
        // Below `state_dir`: this user's only (HOSTILE.md 57).
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io_err)?;
    }
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
    append_tree(&mut b, &root, opts, None)?;
    if let Some((tree, name)) = extra {
        let more = PackOptions {
            no_parent_rules: true,
            ..opts.clone()
        };
        append_tree(&mut b, tree, &more, Some(name))?;
    }
    b.into_inner()
        .and_then(|w| w.into_inner().map_err(|e| e.into_error()))
        .and_then(|f| f.sync_all())
        .map_err(io_err)?;
    std::fs::rename(&tmp.0, dest).map_err(io_err)?;
    tmp.keep();
    Ok(())
}

/// What a workspace would pack into: regular files and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct PackedSize {
    pub files: u64,
    pub bytes: u64,
}

/// Walks `src` exactly as [`pack_workspace`] does (the same ignore rules,
/// size cap and key scan) but writes the archive nowhere: `--dry-run`'s
/// check. Blocking.
pub(crate) fn check_workspace(src: &Path, opts: &PackOptions) -> Result<PackedSize, PackError> {
    let root = src.canonicalize().map_err(|source| PackError::Io {
        dir: src.to_path_buf(),
        source,
    })?;
    let mut b = tar::Builder::new(io::sink());
    b.follow_symlinks(false);
    b.mode(tar::HeaderMode::Deterministic);
    append_tree(&mut b, &root, opts, None)
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

/// Appends what is to be copied below `root` (named below `prefix`, when
/// given), owned by the servo user; returns how many regular files and
/// bytes that was.
fn append_tree<W: Write>(
    b: &mut tar::Builder<W>,
    root: &Path,
    opts: &PackOptions,
    prefix: Option<&Path>,
) -> Result<PackedSize, PackError> {
    let exclude: Vec<PathBuf> = opts.exclude.iter().map(|p| canonical(p)).collect();
    let mut walk = ignore::WalkBuilder::new(root);
    walk.standard_filters(false)
        .hidden(false)
        .follow_links(false)
        .parents(!opts.no_parent_rules)
        // `.gitignore` applies without a `.git` directory too.
        .require_git(false)
        .git_ignore(!opts.include_ignored)
        .git_exclude(!opts.include_ignored)
        .add_custom_ignore_filename(".saheeliignore")
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(move |e| {
            e.depth() == 0
                || !(always_skipped(e.file_name())
                    // The container's `.saheeli/` is the servo's own.
                    || (e.depth() == 1 && e.file_name() == ".saheeli")
                    || exclude.iter().any(|x| x == e.path()))
        });
    let mut total = 0u64;
    let mut files = 0u64;
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
            if let Some(p) = prefix {
                // The tree's own directory, the agent's.
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_uid(AGENT_UID);
                h.set_gid(AGENT_UID);
                h.set_size(0);
                b.append_data(&mut h, p, io::empty()).map_err(io_err)?;
            }
            continue;
        }
        let path = entry.path();
        let name = path.strip_prefix(root).expect("walked below the root");
        let prefixed;
        let name = match prefix {
            Some(p) => {
                prefixed = p.join(name);
                prefixed.as_path()
            }
            None => name,
        };
        let meta = std::fs::symlink_metadata(path).map_err(io_err)?;
        let mut h = tar::Header::new_gnu();
        h.set_metadata_in_mode(&meta, tar::HeaderMode::Deterministic);
        h.set_uid(AGENT_UID);
        h.set_gid(AGENT_UID);
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
            files += 1;
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
    Ok(PackedSize {
        files,
        bytes: total,
    })
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
