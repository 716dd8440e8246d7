//! Directory handles that never follow a link, for every file the foreman
//! (often root) creates, renames, chmods or removes below a results
//! directory or a workspace the agent filled.
//!
//! A path string is resolved again at each use, through whatever links
//! the agent left on the way (`RESULTS_TRUNCATED.txt -> /etc/shadow`,
//! `.saheeli -> /etc`). A [`Dir`] is an open `O_DIRECTORY | O_NOFOLLOW`
//! descriptor instead, and every call below it names one entry of that
//! directory (`*at` calls, rustix): a child directory is opened
//! `O_NOFOLLOW` in its turn, a file is created `O_CREAT | O_EXCL |
//! O_NOFOLLOW` (never opened if something is there), permissions are set
//! on the open descriptor (`fchmod`), and renames stay within one handle.
//! A link met on the way is an error, never a path taken.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// An open directory, reached without following any link.
#[derive(Debug)]
pub(crate) struct Dir {
    fd: OwnedFd,
    /// For messages only: never opened again by name.
    shown: PathBuf,
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// True for the errors an `O_NOFOLLOW | O_DIRECTORY` open gives when the
/// entry is a link (`ELOOP`) or not a directory (`ENOTDIR`).
pub(crate) fn is_link_or_not_dir(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR))
}

impl Dir {
    /// Opens the directory at `path`; its last component must not be a
    /// link (the ones before it are the operator's: the results root).
    pub fn open(path: &Path) -> io::Result<Dir> {
        let fd = rustix::fs::open(path, dir_flags(), Mode::empty())?;
        Ok(Dir {
            fd,
            shown: path.to_path_buf(),
        })
    }

    /// A directory handle already open (for a directory of the user's
    /// own choosing, reached as they named it).
    pub fn from_fd(fd: OwnedFd, shown: PathBuf) -> Dir {
        Dir { fd, shown }
    }

    /// The path this handle was reached by, for messages.
    pub fn shown(&self) -> &Path {
        &self.shown
    }

    /// The child directory `name`, never through a link.
    pub fn sub(&self, name: &OsStr) -> io::Result<Dir> {
        let fd = rustix::fs::openat(&self.fd, name, dir_flags(), Mode::empty())?;
        Ok(Dir {
            fd,
            shown: self.shown.join(name),
        })
    }

    /// The child directory `name`, made (`mode`) when absent. A link or a
    /// file of that name is an error (`ELOOP`/`ENOTDIR`), never followed.
    pub fn make_dir(&self, name: &OsStr, mode: u32) -> io::Result<Dir> {
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        self.sub(name)
    }

    /// The directory at `rel` below this one, one component at a time,
    /// each made when absent if `create`. Only plain names are taken: an
    /// absolute path or `..` is refused (`EINVAL`).
    pub fn walk(&self, rel: &Path, create: bool) -> io::Result<Dir> {
        let mut at = Dir {
            fd: self.fd.try_clone()?,
            shown: self.shown.clone(),
        };
        for c in rel.components() {
            match c {
                Component::Normal(name) => {
                    at = if create {
                        at.make_dir(name, 0o755)?
                    } else {
                        at.sub(name)?
                    };
                }
                Component::CurDir => {}
                _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
            }
        }
        Ok(at)
    }

    /// What `name` is (a link is a link), None when absent.
    pub fn kind(&self, name: &OsStr) -> io::Result<Option<FileType>> {
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(FileType::from_raw_mode(st.st_mode))),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Creates the file `name`, which must not exist (`O_EXCL`; a link
    /// there is not followed but an error), with `mode`.
    pub fn create_file(&self, name: &OsStr, mode: u32) -> io::Result<File> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(mode))?;
        Ok(File::from(fd))
    }

    /// Creates a file of a name nobody can guess (`.<stem>.<random>.tmp`,
    /// `O_EXCL`), mode 0600; returns its name and the open file.
    pub fn temp_file(&self, stem: &OsStr) -> io::Result<(OsString, File)> {
        let stem = String::from_utf8_lossy(stem.as_bytes());
        // Long names are cut: the temporary name must fit NAME_MAX.
        let stem: String = stem.chars().take(64).collect();
        loop {
            let name = OsString::from(format!(".{stem}.{}.tmp", uuid::Uuid::new_v4().simple()));
            match self.create_file(&name, 0o600) {
                Ok(f) => return Ok((name, f)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Opens the regular file `name` for reading: never through a link,
    /// never blocking on a FIFO, and a regular file once open.
    pub fn open_file(&self, name: &OsStr) -> io::Result<File> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let file = File::from(rustix::fs::openat(&self.fd, name, flags, Mode::empty())?);
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        Ok(file)
    }

    /// Renames `from` to `to`, both entries of this directory (a link at
    /// `to` is replaced, never written through).
    pub fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        Ok(rustix::fs::renameat(&self.fd, from, &self.fd, to)?)
    }

    /// Makes the link `name -> target` (its target is never looked at).
    pub fn symlink(&self, target: &Path, name: &OsStr) -> io::Result<()> {
        Ok(rustix::fs::symlinkat(target, &self.fd, name)?)
    }

    /// Reads the link `name`.
    pub fn read_link(&self, name: &OsStr) -> io::Result<PathBuf> {
        let target = rustix::fs::readlinkat(&self.fd, name, Vec::new())?;
        Ok(PathBuf::from(OsStr::from_bytes(target.to_bytes())))
    }

    /// Removes whatever `name` is (a directory with all it holds; a link
    /// as a link); absent is fine.
    pub fn remove(&self, name: &OsStr) -> io::Result<()> {
        match self.kind(name)? {
            None => Ok(()),
            Some(FileType::Directory) => {
                self.sub(name)?.clear(0)?;
                Ok(rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR)?)
            }
            Some(_) => match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
                Err(e) => Err(e.into()),
            },
        }
    }

    /// Removes everything in this directory, depth first, by handles.
    fn clear(&self, depth: usize) -> io::Result<()> {
        if depth > 4096 {
            return Err(io::Error::other("directory nested too deep to remove"));
        }
        for (name, kind) in self.entries()? {
            if kind == FileType::Directory {
                self.sub(&name)?.clear(depth + 1)?;
                rustix::fs::unlinkat(&self.fd, &*name, AtFlags::REMOVEDIR)?;
            } else {
                rustix::fs::unlinkat(&self.fd, &*name, AtFlags::empty())?;
            }
        }
        Ok(())
    }

    /// The entries of this directory (without `.` and `..`), sorted by
    /// name, each with its type as a link-free `lstat` would say.
    pub fn entries(&self) -> io::Result<Vec<(OsString, FileType)>> {
        let mut out = Vec::new();
        for entry in rustix::fs::Dir::read_from(&self.fd)? {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let name = OsStr::from_bytes(name).to_os_string();
            let mut kind = entry.file_type();
            if kind == FileType::Unknown {
                // Some filesystems do not say in the listing: ask, without following.
                kind = self.kind(&name)?.unwrap_or(FileType::Unknown);
            }
            out.push((name, kind));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::io::Write;

    #[test]
    fn no_call_goes_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        let outside = d.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("victim"), "keep").unwrap();
        let root = d.path().join("root");
        fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("dir-link")).unwrap();
        std::os::unix::fs::symlink(outside.join("victim"), root.join("file-link")).unwrap();
        let dir = Dir::open(&root).unwrap();
        // Opening the root through a link is refused too.
        assert!(Dir::open(&root.join("dir-link")).is_err());
        for e in [
            dir.sub("dir-link".as_ref()).unwrap_err(),
            dir.make_dir("dir-link".as_ref(), 0o755).unwrap_err(),
            dir.walk(Path::new("dir-link/deeper"), true).unwrap_err(),
        ] {
            assert!(is_link_or_not_dir(&e), "{e}");
        }
        assert!(dir.walk(Path::new("../x"), true).is_err());
        assert!(dir.create_file("file-link".as_ref(), 0o644).is_err());
        assert!(dir.open_file("file-link".as_ref()).is_err());
        let (tmp, mut f) = dir.temp_file("file-link".as_ref()).unwrap();
        f.write_all(b"mine").unwrap();
        dir.rename(&tmp, "file-link".as_ref()).unwrap();
        assert_eq!(fs::read_to_string(root.join("file-link")).unwrap(), "mine");
        dir.symlink(&outside, "again".as_ref()).unwrap();
        dir.remove("again".as_ref()).unwrap();
        dir.walk(Path::new("a/b"), true).unwrap();
        fs::write(root.join("a/b/c"), "c").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("a/b/out")).unwrap();
        dir.remove("a".as_ref()).unwrap();
        dir.remove("absent".as_ref()).unwrap();
        assert_eq!(fs::read_to_string(outside.join("victim")).unwrap(), "keep");
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 1);
        let names: Vec<_> = dir.entries().unwrap().into_iter().map(|e| e.0).collect();
        assert_eq!(names, ["dir-link", "file-link"]);
    }
}
