//! Snapshots of a running task's workspace at its steps (issue 51), kept
//! in the foreman's state, never where a container can see them:
//!
//! ```text
//! <state_dir>/snapshots/                 0700, the foreman's
//!   <task_id>/                           0700
//!     step-000002/                       the workspace as step 2 left it (its session file too)
//!     cost-000002, stamps                what each added on disk, the newest's per-file
//!                                        record (`snapshot_record`)
//!     requested                          `task snapshot ID` asked for one (`on_request`)
//! ```
//!
//! A snapshot is a plain directory tree, so a fork packs it as a retry
//! packs collected results. It is incremental: a file whose stamp (inode,
//! size, mtime, ctime, mode) is the one it had at the snapshot before, and
//! whose ctime is older than that snapshot's start, is hard-linked to the
//! copy that snapshot made instead of copied again (snapshots are never
//! written after they are made, so sharing an inode is safe). The agent
//! cannot set a ctime, so it cannot make a changed file pass for an
//! unchanged one. Only the files a step changed cost disk; each snapshot
//! costs its directories and one name per file. `bench --only fork`
//! measures this against a whole copy per step and a copy of the sparse
//! workspace image (there is no copy-on-write clone on ext4).
//!
//! The workspace is the agent's and its container runs while the snapshot
//! is made, so the tree is walked as `volume` walks a stopped one: `*at`
//! calls below directory handles opened `O_NOFOLLOW`, files opened
//! `O_NOFOLLOW | O_NONBLOCK` and checked with `fstat`; a link is recreated
//! as a link, never followed; FIFOs, sockets and devices are skipped. A
//! swap mid-walk only changes what the agent's own snapshot holds.

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use saheeli_protocol::TaskId;

use super::{Dir, snapshot_record, sparse};

/// The directory every task's snapshots are under.
pub(crate) fn root(state_dir: &Path) -> PathBuf {
    state_dir.join("snapshots")
}

/// Task `id`'s snapshots.
pub(crate) fn task_dir(state_dir: &Path, id: TaskId) -> PathBuf {
    root(state_dir).join(id.to_string())
}

pub(super) fn step_name(step: u32) -> String {
    format!("step-{step:06}")
}

/// The snapshot of task `id` at `step`, when one is kept.
pub(crate) fn at_step(state_dir: &Path, id: TaskId, step: u32) -> Option<PathBuf> {
    let dir = task_dir(state_dir, id).join(step_name(step));
    let m = std::fs::symlink_metadata(&dir).ok()?;
    m.is_dir().then_some(dir)
}

/// The steps task `id` has snapshots of, in order.
pub(crate) fn steps(state_dir: &Path, id: TaskId) -> Vec<u32> {
    let Ok(list) = std::fs::read_dir(task_dir(state_dir, id)) else {
        return vec![];
    };
    let mut steps: Vec<u32> = list
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("step-")?.parse().ok())
        .collect();
    steps.sort_unstable();
    steps
}

/// Removes every snapshot of task `id` (with the task, or by `gc`).
/// Absent is fine; nothing below is followed (`remove_dir_all` opens
/// each directory without following links).
pub(crate) fn remove(state_dir: &Path, id: TaskId) -> std::io::Result<()> {
    match std::fs::remove_dir_all(task_dir(state_dir, id)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// The task directories under [`root`] whose task is not in `known`
/// that `keep` does not keep (ended, or unknown to this database), for `gc`.
pub(crate) fn leftovers(state_dir: &Path, keep: &dyn Fn(TaskId) -> bool) -> Vec<TaskId> {
    let Ok(list) = std::fs::read_dir(root(state_dir)) else {
        return vec![];
    };
    list.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<TaskId>().ok())
        .filter(|id| !keep(*id))
        .collect()
}

const REQUESTED: &str = "requested";

/// Asks for a snapshot at task `id`'s next step (`snapshots: on_request`).
pub(crate) fn request(state_dir: &Path, id: TaskId) -> std::io::Result<()> {
    let dir = own_dir(state_dir, id)?;
    match dir.create_file(OsStr::new(REQUESTED), 0o600) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        r => r.map(drop),
    }
}

/// Whether a snapshot was asked for (the request is taken).
pub(crate) fn take_request(state_dir: &Path, id: TaskId) -> bool {
    std::fs::remove_file(task_dir(state_dir, id).join(REQUESTED)).is_ok()
}

/// The snapshot directory of task `id`, made private when absent.
fn own_dir(state_dir: &Path, id: TaskId) -> std::io::Result<Dir> {
    std::fs::create_dir_all(state_dir)?;
    let state = Dir::open(state_dir)?;
    let root = state.make_dir(OsStr::new("snapshots"), 0o700)?;
    root.make_dir(OsStr::new(&id.to_string()), 0o700)
}

/// What a file was when it was copied: if it is still that, the copy is
/// linked into the next snapshot instead of made again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stamp {
    pub ino: u64,
    pub size: i64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
    pub mode: u32,
}

impl Stamp {
    fn of(st: &rustix::fs::Stat) -> Stamp {
        Stamp {
            ino: st.st_ino,
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec as i64),
            ctime: (st.st_ctime, st.st_ctime_nsec as i64),
            mode: st.st_mode,
        }
    }
}

/// A snapshot made: what the next one links from.
#[derive(Debug)]
pub(crate) struct Taken {
    pub step: u32,
    /// Regular files in it, links and directories not counted.
    pub files: u64,
    /// Of which linked to the snapshot before.
    pub linked: u64,
    /// Bytes copied (what it costs on disk beyond names and directories).
    pub copied: u64,
    /// Directories made, its own included.
    pub dirs: u64,
    pub took: std::time::Duration,
    pub(super) stamps: HashMap<PathBuf, Stamp>,
    /// When the walk began (less a margin, see `now`): a file whose ctime
    /// is later may have changed under the same stamp, so it is copied.
    pub(super) began: (i64, i64),
}

impl Taken {
    /// A snapshot of `step` begun at `began`, nothing in it yet.
    pub(super) fn empty(step: u32, began: (i64, i64)) -> Taken {
        Taken {
            step,
            files: 0,
            linked: 0,
            copied: 0,
            dirs: 1,
            took: Default::default(),
            stamps: HashMap::new(),
            began,
        }
    }
}

/// Snapshots the workspace at `src` (a running task's, on this host) as
/// task `id`'s step `step`, linking what `prev` copied and has not
/// changed since; at most `max_bytes` copied. A snapshot of that step
/// already there is replaced. Blocking.
pub(crate) fn take(
    src: &Path,
    state_dir: &Path,
    id: TaskId,
    step: u32,
    prev: Option<&Taken>,
    max_bytes: u64,
) -> anyhow::Result<Taken> {
    let t0 = Instant::now();
    let began = now();
    let source = rustix::fs::open(src, dir_flags(), Mode::empty())
        .with_context(|| format!("opening the workspace `{}`", src.display()))?;
    let dir = own_dir(state_dir, id).context("making the snapshot directory")?;
    let name = step_name(step);
    let tmp = format!(".{name}.partial");
    let _ = remove_entry(&dir, &tmp);
    let out = dir
        .make_dir(OsStr::new(&tmp), 0o700)
        .context("making the snapshot directory")?;
    let before = prev.and_then(|p| dir.sub(OsStr::new(&step_name(p.step))).ok());
    let mut walk = Walk {
        prev,
        max_bytes,
        taken: Taken::empty(step, began),
    };
    let walked = walk.dir(&source, &out, before.as_ref(), Path::new(""), 0);
    if let Err(e) = walked {
        let _ = remove_entry(&dir, &tmp);
        return Err(e);
    }
    // The record of the snapshot before goes first: it may be of this
    // very step, about to be replaced.
    snapshot_record::forget(&dir);
    let _ = remove_entry(&dir, &name);
    dir.rename(OsStr::new(&tmp), OsStr::new(&name))
        .context("putting the snapshot in place")?;
    walk.taken.took = t0.elapsed();
    snapshot_record::record(&dir, &walk.taken);
    Ok(walk.taken)
}

fn remove_entry(dir: &Dir, name: &str) -> std::io::Result<()> {
    std::fs::remove_dir_all(dir.shown().join(name))
}

/// When a walk begins, less a margin: file times come from the kernel's
/// coarse clock, which lags the real one by up to a tick, so a file
/// changed this close to a snapshot is copied again by the next.
fn now() -> (i64, i64) {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_sub(std::time::Duration::from_millis(50));
    (t.as_secs() as i64, i64::from(t.subsec_nanos()))
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

struct Walk<'a> {
    prev: Option<&'a Taken>,
    max_bytes: u64,
    taken: Taken,
}

impl Walk<'_> {
    fn dir(
        &mut self,
        fd: &OwnedFd,
        dst: &Dir,
        before: Option<&Dir>,
        rel: &Path,
        depth: usize,
    ) -> anyhow::Result<()> {
        if depth > 256 {
            bail!("`{}` is nested too deep to snapshot", rel.display());
        }
        let mut names: Vec<(Vec<u8>, FileType)> = Vec::new();
        for entry in rustix::fs::Dir::read_from(fd)
            .with_context(|| format!("listing `{}`", rel.display()))?
        {
            let entry = entry.with_context(|| format!("listing `{}`", rel.display()))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push((name.to_vec(), entry.file_type()));
            }
        }
        for (name, kind) in names {
            let os = OsStr::from_bytes(&name).to_os_string();
            let shown = rel.join(&os);
            let cname = CString::new(name).expect("directory entries hold no NUL");
            // Asked again without following: the listing's type may be
            // unknown, and the entry may have changed since.
            let Ok(st) = rustix::fs::statat(fd, &cname, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            let _ = kind;
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => {
                    let Ok(sub) = rustix::fs::openat(fd, &cname, dir_flags(), Mode::empty()) else {
                        continue;
                    };
                    let to = dst
                        .make_dir(&os, 0o755)
                        .with_context(|| format!("copying `{}`", shown.display()))?;
                    self.taken.dirs += 1;
                    let was = before.and_then(|b| b.sub(&os).ok());
                    self.dir(&sub, &to, was.as_ref(), &shown, depth + 1)?;
                }
                FileType::Symlink => {
                    if let Ok(target) = rustix::fs::readlinkat(fd, &cname, Vec::new()) {
                        dst.symlink(Path::new(OsStr::from_bytes(target.to_bytes())), &os)
                            .with_context(|| format!("copying link `{}`", shown.display()))?;
                    }
                }
                FileType::RegularFile => self.file(fd, &cname, &st, dst, before, &shown)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn file(
        &mut self,
        dir: &OwnedFd,
        name: &CString,
        st: &rustix::fs::Stat,
        dst: &Dir,
        before: Option<&Dir>,
        shown: &Path,
    ) -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let os = OsStr::from_bytes(name.as_bytes());
        let stamp = Stamp::of(st);
        if let (Some(prev), Some(b)) = (self.prev, before)
            && prev.stamps.get(shown) == Some(&stamp)
            && stamp.ctime < prev.began
            && rustix::fs::linkat(b, os, dst, os, AtFlags::empty()).is_ok()
        {
            self.taken.files += 1;
            self.taken.linked += 1;
            self.taken.stamps.insert(shown.to_path_buf(), stamp);
            return Ok(());
        }
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let Ok(fd) = rustix::fs::openat(dir, name, flags, Mode::empty()) else {
            return Ok(());
        };
        let file = File::from(fd);
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Ok(());
        }
        // Stamped as opened: a change while it is copied changes the
        // ctime, so the next snapshot copies it again.
        let stamp = rustix::fs::fstat(&file).map(|s| Stamp::of(&s))?;
        let room = self.max_bytes.saturating_sub(self.taken.copied);
        if sparse::allocated(&meta) > room {
            bail!(
                "the workspace is over the {}-byte cap of a snapshot (at `{}`)",
                self.max_bytes,
                shown.display()
            );
        }
        let w = dst
            .create_file(os, 0o644)
            .with_context(|| format!("copying `{}`", shown.display()))?;
        let n = sparse::copy_file(&file, meta.len(), &w, room)
            .with_context(|| format!("copying `{}`", shown.display()))?;
        let mode = meta.permissions().mode();
        if mode & 0o111 != 0 {
            // The executable bits, never setuid/setgid/sticky.
            let _ = rustix::fs::fchmod(&w, Mode::from_raw_mode((mode & 0o777) | 0o600));
        }
        self.taken.files += 1;
        self.taken.copied += n;
        self.taken.stamps.insert(shown.to_path_buf(), stamp);
        Ok(())
    }
}

/// What task `id`'s snapshots hold on disk: each inode's allocated bytes
/// once (linked files are shared), for the cap and the bench.
pub(crate) fn disk_use(state_dir: &Path, id: TaskId) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let mut total = 0u64;
    for e in walkdir::WalkDir::new(task_dir(state_dir, id))
        .follow_links(false)
        .into_iter()
        .filter_map(|e| e.ok())
    {
        if let Ok(m) = e.metadata()
            && seen.insert(m.ino())
        {
            total += m.blocks() * 512;
        }
    }
    total
}

#[cfg(test)]
#[path = "snapshot_tests.rs"]
mod tests;
