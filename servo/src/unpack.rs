//! A hardened tar unpacker for the workspace (issue 50): a cached set-up's
//! tar, unpacked by the agent's own helper (`servo unpack-setup`), and a
//! warm servo's submitted workspace over a set-up it holds already.
//!
//! Every path is opened one component at a time from the workspace's own
//! directory, each with `O_NOFOLLOW`: nothing is ever written through a
//! link, so nothing lands outside the workspace whatever links the tar or
//! the workspace hold. An absolute path or a `..` refuses the tar; devices,
//! FIFOs and the rest are left out (the agent's user could not make them
//! anyway); a sparse file refuses it too (its size is not its bytes). The
//! bytes of the files and the number of entries are capped. Links are
//! made as they are (a virtual environment's `bin/python` names the
//! system's): only following one when unpacking could do harm.
//!
//! Directories stay open while their entries are written (a file is one
//! `openat`, its bytes, and its times), which is what makes this faster
//! than resolving every path from the top again.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, Timespec, Timestamps};
use rustix::io::Errno;

/// What an unpack may write at most.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caps {
    /// Bytes of file content, summed.
    pub max_bytes: u64,
    /// Entries unpacked.
    pub max_entries: u64,
}

impl Caps {
    pub const NONE: Caps = Caps {
        max_bytes: u64::MAX,
        max_entries: u64::MAX,
    };
}

/// What to do with a path the workspace holds already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Existing {
    /// The tar's entry replaces it (a cached set-up over the submitted
    /// workspace, as Docker's unpacking did).
    Replace,
    /// It stays (a warm servo's submitted workspace over the set-up it
    /// unpacked first: the set-up's files win, as they do cold).
    Keep,
}

/// What an unpack did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Unpacked {
    /// Entries written.
    pub entries: u64,
    /// Bytes of file content written.
    pub bytes: u64,
    /// Entries left out: devices, FIFOs, what `keep` left, what was kept.
    pub left_out: u64,
}

/// Directories held open while their entries are written; never more
/// than this many (the container's descriptors are capped).
const OPEN_DIRS: usize = 256;

fn refused(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("refusing `{}`: {why}", path.display()),
    )
}

fn os(e: Errno, what: &Path, doing: &str) -> io::Error {
    let e = io::Error::from(e);
    io::Error::new(e.kind(), format!("{doing} `{}`: {e}", what.display()))
}

/// The entry's path relative to the workspace (None: the workspace
/// itself); an absolute path or a `..` is refused.
pub(crate) fn plain(path: &Path) -> io::Result<Option<PathBuf>> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err(refused(path, "an absolute path"));
            }
            Component::ParentDir => return Err(refused(path, "a `..` in the path")),
        }
    }
    Ok((!out.as_os_str().is_empty()).then_some(out))
}

/// The workspace's directories, opened without following a link.
struct Dirs {
    root: OwnedFd,
    open: HashMap<PathBuf, OwnedFd>,
}

impl Dirs {
    fn fd(&self, rel: &Path) -> BorrowedFd<'_> {
        if rel.as_os_str().is_empty() {
            return self.root.as_fd();
        }
        self.open.get(rel).expect("ensured").as_fd()
    }

    /// Opens `rel` (made 0755 when absent), each component without
    /// following a link.
    fn ensure(&mut self, rel: &Path) -> io::Result<()> {
        if rel.as_os_str().is_empty() || self.open.contains_key(rel) {
            return Ok(());
        }
        let parent = rel.parent().unwrap_or(Path::new(""));
        self.ensure(parent)?;
        let name = rel.file_name().expect("a plain path");
        let fd = open_dir(self.fd(parent), name, rel, 0o755)?;
        self.open.insert(rel.to_path_buf(), fd);
        Ok(())
    }

    /// Closes every directory once many are open (before an entry, never
    /// while one is being written).
    fn room(&mut self) {
        if self.open.len() >= OPEN_DIRS {
            self.open.clear();
        }
    }
}

/// Opens the directory `name` in `parent` (making it with `mode` when
/// absent); a link or anything but a directory is refused.
fn open_dir(parent: BorrowedFd<'_>, name: &OsStr, rel: &Path, mode: u32) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(parent, name, flags, Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(Errno::NOENT) => {
            match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(mode)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(os(e, rel, "making the directory")),
            }
            rustix::fs::openat(parent, name, flags, Mode::empty())
                .map_err(|e| os(e, rel, "opening the directory"))
        }
        Err(Errno::LOOP | Errno::NOTDIR) => Err(refused(rel, "a link or a file on the way")),
        Err(e) => Err(os(e, rel, "opening the directory")),
    }
}

/// Unpacks the entries of `tar` that `keep` keeps into the directory
/// `root`, within `caps`; then reads what follows the archive's end (a
/// writer feeding it must never see its reader gone).
pub(crate) fn unpack(
    tar: impl Read,
    root: &Path,
    caps: Caps,
    existing: Existing,
    keep: impl Fn(&Path) -> bool,
) -> io::Result<Unpacked> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let root_fd = rustix::fs::open(root, flags, Mode::empty())
        .map_err(|e| os(e, root, "opening the workspace"))?;
    let mut dirs = Dirs {
        root: root_fd,
        open: HashMap::new(),
    };
    let mut done = Unpacked::default();
    // Directories whose mode would shut their owner out while they fill.
    let mut shut: Vec<(PathBuf, u32)> = Vec::new();
    let mut archive = tar::Archive::new(tar);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let raw = entry.path()?.into_owned();
        let Some(rel) = plain(&raw)? else { continue };
        if !keep(&rel) {
            done.left_out += 1;
            continue;
        }
        dirs.room();
        let kind = entry.header().entry_type();
        let mode = entry.header().mode()? & 0o1777;
        let (parent, name) = (
            rel.parent().unwrap_or(Path::new("")).to_path_buf(),
            rel.file_name().expect("a plain path").to_os_string(),
        );
        let wrote = match kind {
            tar::EntryType::Directory => {
                dirs.ensure(&parent)?;
                let made = make_dir(dirs.fd(&parent), &name, &rel, existing)?;
                if made {
                    dirs.ensure(&rel)?;
                    rustix::fs::fchmod(dirs.fd(&rel), Mode::from_raw_mode(mode | 0o700))
                        .map_err(|e| os(e, &rel, "setting the mode of"))?;
                    if mode & 0o700 != 0o700 {
                        shut.push((rel.clone(), mode));
                    }
                }
                made
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = entry.header().size()?;
                done.bytes = done.bytes.saturating_add(size);
                if done.bytes > caps.max_bytes {
                    return Err(refused(&rel, "past the cap on bytes"));
                }
                let mtime = entry.header().mtime().unwrap_or(0);
                dirs.ensure(&parent)?;
                write_file(
                    dirs.fd(&parent),
                    &name,
                    &rel,
                    mode,
                    mtime,
                    &mut entry,
                    existing,
                )?
            }
            tar::EntryType::Symlink => {
                let Some(target) = entry.link_name_bytes().filter(|t| !t.is_empty()) else {
                    return Err(refused(&rel, "a link to nothing"));
                };
                let target =
                    <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&target).to_os_string();
                dirs.ensure(&parent)?;
                make_link(dirs.fd(&parent), &name, &rel, &target, existing)?
            }
            tar::EntryType::Link => {
                let target = entry.link_name()?.map(|t| t.into_owned());
                let Some(target) = target.as_deref().map(plain).transpose()?.flatten() else {
                    return Err(refused(&rel, "a hard link to nothing"));
                };
                let from = target.parent().unwrap_or(Path::new("")).to_path_buf();
                let from_name = target.file_name().expect("a plain path").to_os_string();
                dirs.ensure(&from)?;
                dirs.ensure(&parent)?;
                hard_link(&dirs, (&from, &from_name), (&parent, &name), &rel, existing)?
            }
            tar::EntryType::GNUSparse => return Err(refused(&rel, "a sparse file")),
            _ => false,
        };
        if wrote {
            done.entries += 1;
            if done.entries > caps.max_entries {
                return Err(refused(&rel, "past the cap on entries"));
            }
        } else {
            done.left_out += 1;
        }
    }
    for (rel, mode) in shut.into_iter().rev() {
        dirs.ensure(&rel)?;
        rustix::fs::fchmod(dirs.fd(&rel), Mode::from_raw_mode(mode))
            .map_err(|e| os(e, &rel, "setting the mode of"))?;
    }
    io::copy(&mut archive.into_inner(), &mut io::sink())?;
    Ok(done)
}

/// Makes the directory `name` (a non-directory there is replaced, or
/// kept); whether its mode is the entry's to set (made, or there already
/// and replaced).
fn make_dir(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    rel: &Path,
    existing: Existing,
) -> io::Result<bool> {
    let mode = Mode::from_raw_mode(0o700);
    match rustix::fs::mkdirat(parent, name, mode) {
        Ok(()) => Ok(true),
        Err(Errno::EXIST) if existing == Existing::Keep => Ok(false),
        Err(Errno::EXIST) => {
            let st = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| os(e, rel, "looking at"))?;
            if rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir() {
                return Ok(true);
            }
            rustix::fs::unlinkat(parent, name, AtFlags::empty())
                .map_err(|e| os(e, rel, "replacing"))?;
            rustix::fs::mkdirat(parent, name, mode)
                .map_err(|e| os(e, rel, "making the directory"))?;
            Ok(true)
        }
        Err(e) => Err(os(e, rel, "making the directory")),
    }
}

/// Runs `make` for `name`; when something is there already, removes it
/// and runs it again (`Replace`), or leaves it (`Keep`: false).
fn or_replace(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    rel: &Path,
    existing: Existing,
    make: impl Fn() -> rustix::io::Result<()>,
) -> io::Result<bool> {
    match make() {
        Ok(()) => Ok(true),
        Err(Errno::EXIST) if existing == Existing::Keep => Ok(false),
        Err(Errno::EXIST) => {
            rustix::fs::unlinkat(parent, name, AtFlags::empty())
                .map_err(|e| os(e, rel, "replacing"))?;
            make().map_err(|e| os(e, rel, "writing"))?;
            Ok(true)
        }
        Err(e) => Err(os(e, rel, "writing")),
    }
}

fn write_file(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    rel: &Path,
    mode: u32,
    mtime: u64,
    data: &mut impl Read,
    existing: Existing,
) -> io::Result<bool> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let opened = std::cell::RefCell::new(None);
    let made = or_replace(parent, name, rel, existing, || {
        let fd = rustix::fs::openat(parent, name, flags, Mode::from_raw_mode(0o600))?;
        *opened.borrow_mut() = Some(fd);
        Ok(())
    })?;
    let Some(fd) = opened.into_inner().filter(|_| made) else {
        return Ok(false);
    };
    let mut file = std::fs::File::from(fd);
    io::copy(data, &mut file)
        .map_err(|e| io::Error::new(e.kind(), format!("writing `{}`: {e}", rel.display())))?;
    rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))
        .map_err(|e| os(e, rel, "setting the mode of"))?;
    let at = Timespec {
        tv_sec: i64::try_from(mtime).unwrap_or(0).max(1),
        tv_nsec: 0,
    };
    let times = Timestamps {
        last_access: at,
        last_modification: at,
    };
    rustix::fs::futimens(&file, &times).map_err(|e| os(e, rel, "setting the times of"))?;
    Ok(true)
}

fn make_link(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    rel: &Path,
    target: &OsStr,
    existing: Existing,
) -> io::Result<bool> {
    or_replace(parent, name, rel, existing, || {
        rustix::fs::symlinkat(target, parent, name)
    })
}

/// A hard link at `to` of the entry `from` (both opened from the
/// workspace's top, never through a link; a link itself is linked, not
/// what it names).
fn hard_link(
    dirs: &Dirs,
    from: (&Path, &OsStr),
    to: (&Path, &OsStr),
    rel: &Path,
    existing: Existing,
) -> io::Result<bool> {
    let (src_dir, dst_dir) = (dirs.fd(from.0), dirs.fd(to.0));
    or_replace(dst_dir, to.1, rel, existing, || {
        rustix::fs::linkat(src_dir, from.1, dst_dir, to.1, AtFlags::empty())
    })
}

#[cfg(test)]
#[path = "unpack_tests.rs"]
mod tests;
