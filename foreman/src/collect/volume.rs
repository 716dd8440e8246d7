//! Copying a task's volume straight from its directory on this host.
//!
//! The directory tree is the agent's, so it is walked with `*at` calls
//! relative to directory handles (rustix), never by joined path strings:
//! each directory is opened with `O_NOFOLLOW | O_DIRECTORY` below the handle
//! of its parent, each file with `O_NOFOLLOW | O_NONBLOCK` and checked with
//! `fstat` on the open handle. A link is read (`readlinkat`) and recreated,
//! never followed; FIFOs, sockets and devices are skipped. The caller walks
//! a volume only once its container is removed, so nothing inside can swap
//! an entry while it is read; the handles make a swap harmless anyway.

use std::ffi::{CStr, OsStr};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::evidence::{self, EVIDENCE_MAX};
use super::{Collected, Dir, collect_into, sparse};

/// Copies a stopped task's volume from its directory on this host (what
/// the archive API would stream, without mounting the container). Links
/// are never followed; FIFOs, sockets and devices are skipped. A sparse
/// file keeps its holes and counts its data, not its length. The servo's
/// own evidence at the root is copied first, outside the cap (`evidence`).
pub(crate) fn copy_volume(
    src: &Path,
    dest: &Path,
    secrets: &[(String, String)],
    max_bytes: u64,
) -> anyhow::Result<Collected> {
    // Fail before touching anything when the directory is not ours to read.
    let root = rustix::fs::open(src, dir_flags(), Mode::empty())
        .with_context(|| format!("opening volume directory `{}`", src.display()))?;
    collect_into(dest, secrets, max_bytes, |partial| {
        let mut walk = Walk {
            max_bytes,
            counted: 0,
            evidence: evidence::names(dest),
            out: Collected::default(),
            links: Vec::new(),
        };
        walk.dir(&root, partial, Path::new(""), 0)?;
        super::make_links(partial, walk.links, &mut walk.out);
        Ok(walk.out)
    })
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

struct Walk {
    max_bytes: u64,
    /// What counts against `max_bytes`: all but the evidence.
    counted: u64,
    /// The evidence files' names at the root.
    evidence: Vec<String>,
    out: Collected,
    /// Links to create once every file is written (relative path, target).
    links: Vec<(PathBuf, PathBuf)>,
}

impl Walk {
    /// Copies the directory open as `fd` into `dst`; `rel` is its path
    /// below the volume (for links and messages).
    fn dir(&mut self, fd: &OwnedFd, dst: &Dir, rel: &Path, depth: usize) -> anyhow::Result<()> {
        if depth > 256 {
            self.out
                .skipped
                .push(format!("{}: nested too deep", rel.display()));
            return Ok(());
        }
        let mut names: Vec<(Vec<u8>, FileType)> = Vec::new();
        let listing = rustix::fs::Dir::read_from(fd)
            .with_context(|| format!("listing `{}`", rel.display()))?;
        for entry in listing {
            let entry = entry.with_context(|| format!("listing `{}`", rel.display()))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            names.push((name.to_vec(), entry.file_type()));
        }
        names.sort_by(|a, b| a.0.cmp(&b.0));
        if depth == 0 {
            evidence::evidence_first(&self.evidence, &mut names);
        }
        for (name, mut kind) in names {
            let os = OsStr::from_bytes(&name).to_os_string();
            let shown = rel.join(&os);
            let is_evidence = depth == 0 && evidence::is_evidence(&self.evidence, &os);
            if self.out.truncated && !is_evidence {
                // Past the cap: named, not walked.
                let slash = if kind == FileType::Directory { "/" } else { "" };
                self.out.cut.add(format!("{}{slash}", shown.display()));
                continue;
            }
            let cname = std::ffi::CString::new(name).expect("directory entries hold no NUL");
            if kind == FileType::Unknown {
                // Some filesystems do not say in the listing: ask, without following.
                match rustix::fs::statat(fd, &cname, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => kind = FileType::from_raw_mode(st.st_mode),
                    Err(e) => {
                        self.out.skipped.push(format!("{}: {e}", shown.display()));
                        continue;
                    }
                }
            }
            match kind {
                FileType::Directory => {
                    let sub = match rustix::fs::openat(fd, &cname, dir_flags(), Mode::empty()) {
                        Ok(sub) => sub,
                        Err(e) => {
                            self.out.skipped.push(format!("{}: {e}", shown.display()));
                            continue;
                        }
                    };
                    rustix::fs::mkdirat(dst, &*os, Mode::from_raw_mode(0o755))
                        .with_context(|| format!("creating `{}`", shown.display()))?;
                    let to = dst
                        .sub(&os)
                        .with_context(|| format!("opening `{}`", shown.display()))?;
                    self.dir(&sub, &to, &shown, depth + 1)?;
                }
                FileType::Symlink => match rustix::fs::readlinkat(fd, &cname, Vec::new()) {
                    Ok(target) => self.links.push((shown, bytes_path(&target))),
                    Err(e) => self.out.skipped.push(format!("{}: {e}", shown.display())),
                },
                FileType::RegularFile => self.file(fd, &cname, dst, &os, &shown, is_evidence)?,
                _ => self.out.skipped.push(format!(
                    "{}: not a regular file, directory or link",
                    shown.display()
                )),
            }
        }
        Ok(())
    }

    fn file(
        &mut self,
        dir: &OwnedFd,
        name: &CStr,
        dst: &Dir,
        to: &OsStr,
        shown: &Path,
        is_evidence: bool,
    ) -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        // O_NOFOLLOW and O_NONBLOCK: never a link, never a FIFO that blocks.
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let file = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
            Ok(fd) => File::from(fd),
            Err(e) => {
                self.out.skipped.push(format!("{}: {e}", shown.display()));
                return Ok(());
            }
        };
        let meta = file.metadata()?;
        if !meta.is_file() {
            self.out
                .skipped
                .push(format!("{}: not a regular file", shown.display()));
            return Ok(());
        }
        // The evidence has its own cap and takes nothing of the results'.
        let room = match is_evidence {
            true => EVIDENCE_MAX,
            false => self.max_bytes - self.counted,
        };
        // What the file occupies, not its length: a hole costs nothing.
        if sparse::allocated(&meta) > room {
            match is_evidence {
                true => self.out.skipped.push(format!(
                    "{}: over the {EVIDENCE_MAX}-byte cap of the servo's own files",
                    shown.display()
                )),
                false => {
                    self.out.truncated = true;
                    self.out.cut.add(shown.display().to_string());
                }
            }
            return Ok(());
        }
        let w = dst
            .create_file(to, 0o644)
            .with_context(|| format!("writing `{}`", shown.display()))?;
        let n = sparse::copy_file(&file, meta.len(), &w, room)
            .with_context(|| format!("copying `{}`", shown.display()))?;
        let mode = meta.permissions().mode();
        if mode & 0o111 != 0 {
            // Keep the executable bits, never setuid/setgid/sticky.
            let _ = rustix::fs::fchmod(&w, Mode::from_raw_mode((mode & 0o777) | 0o600));
        }
        self.out.files += 1;
        self.out.bytes += n;
        if !is_evidence {
            self.counted += n;
            if self.counted > self.max_bytes {
                self.out.truncated = true;
            }
        }
        Ok(())
    }
}

fn bytes_path(target: &CStr) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(target.to_bytes()))
}

#[cfg(test)]
mod tests {
    use super::super::TRUNCATED_MARKER;
    use super::*;
    use std::fs;

    #[test]
    fn a_volume_directory_is_copied_without_following_anything() {
        let d = tempfile::tempdir().unwrap();
        let vol = d.path().join("vol");
        fs::create_dir_all(vol.join("sub/deeper")).unwrap();
        fs::write(vol.join("sub/deeper/a.txt"), "a").unwrap();
        fs::write(vol.join("run.sh"), "#!/bin/sh").unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(vol.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("/etc", vol.join("etc-link")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", vol.join("passwd-link")).unwrap();
        let fifo = std::ffi::CString::new(vol.join("pipe").to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let dest = d.path().join("r/t");
        let secrets = vec![("K".to_string(), "sk-secret-123456".to_string())];
        fs::write(vol.join("leak.txt"), "sk-secret-123456").unwrap();
        let c = copy_volume(&vol, &dest, &secrets, u64::MAX).unwrap();
        assert_eq!(c.files, 3);
        assert_eq!(
            fs::read_to_string(dest.join("sub/deeper/a.txt")).unwrap(),
            "a"
        );
        assert_eq!(
            fs::metadata(dest.join("run.sh"))
                .unwrap()
                .permissions()
                .mode()
                & 0o111,
            0o111
        );
        assert!(dest.join("etc-link").is_symlink() && dest.join("passwd-link").is_symlink());
        assert_eq!(
            fs::read_link(dest.join("etc-link")).unwrap(),
            Path::new("/etc")
        );
        assert!(!dest.join("pipe").exists());
        assert_eq!(c.skipped.len(), 1, "{:?}", c.skipped);
        assert_eq!(
            fs::read_to_string(dest.join("leak.txt")).unwrap(),
            "[REDACTED:K]"
        );
        // The size cap applies here too.
        let c = copy_volume(&vol, &d.path().join("r/u"), &[], 10).unwrap();
        assert!(c.truncated && d.path().join("r/u").join(TRUNCATED_MARKER).is_file());
        // A directory we cannot read fails before anything is written.
        assert!(copy_volume(&d.path().join("nope"), &d.path().join("r/v"), &[], 10).is_err());
        assert_eq!(
            crate::collect::results::partial_dirs(&d.path().join("r")),
            0,
            "a .partial directory was left"
        );
    }

    #[test]
    fn a_volume_root_that_is_a_link_is_refused() {
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc", d.path().join("vol")).unwrap();
        assert!(copy_volume(&d.path().join("vol"), &d.path().join("r/t"), &[], 1 << 20).is_err());
    }
}
