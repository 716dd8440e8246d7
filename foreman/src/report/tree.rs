//! The two workspaces a patch compares, as trees of files and links keyed
//! by their path's bytes (in git's order): the submitted one from its tar,
//! the collected one from the results directory. Directories are not
//! entries (git does not track them). Saheeli's own files are left out.
//!
//! The collected tree is the agent's: it is walked without following
//! links, a file is opened without following one (`open_regular`), and
//! nothing is read past [`MAX_DIFF_FILE`] + 1 bytes but to compare two
//! large files.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::patch::{BlobId, Content, Kind, MAX_DIFF_FILE, Side};
use crate::collect::open_regular;

/// One file or link of a tree.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub kind: Kind,
    pub size: u64,
    at: Source,
}

/// Where an entry's bytes are.
#[derive(Clone, Debug)]
enum Source {
    /// In the submitted tar, at this offset.
    Tar(u64),
    Disk(PathBuf),
    /// A link's target.
    Target(Vec<u8>),
}

pub(crate) type Tree = BTreeMap<Vec<u8>, Entry>;

/// The trees' files: the submitted tar (if any) beside the results.
pub(crate) struct Files<'a> {
    pub tar: Option<&'a File>,
}

/// Saheeli's own files at the top of a workspace (they are not the agent's
/// work): its directory, the servo's logs, the prompt it was given, the
/// success signal and the collector's truncation marker.
fn excluded(top: &[u8]) -> bool {
    let servo_file = top.starts_with(b"servo-")
        && (top.ends_with(b"-audit.log")
            || top.ends_with(b"-session.json")
            || top.ends_with(b"-session.journal"));
    servo_file
        || matches!(
            top,
            b".saheeli" | b"prompt.md" | b"complete.json" | b"RESULTS_TRUNCATED.txt"
        )
}

/// Whether `path` (relative) is one of Saheeli's own, or below one.
pub(crate) fn is_saheelis(path: &[u8]) -> bool {
    let top = path.split(|&c| c == b'/').next().unwrap_or(path);
    excluded(top)
}

/// Whether `path` is a `.git` (any case) or below one, at any depth: git's
/// own files are never a change (`git apply` refuses a patch that names
/// one), and a `.git` the agent made is never read for one (issue 52).
pub(crate) fn in_git_dir(path: &[u8]) -> bool {
    path.split(|&c| c == b'/')
        .any(|c| c.eq_ignore_ascii_case(b".git"))
}

/// The files and links of a submitted workspace tar, as `pack` wrote it.
pub(crate) fn tar_tree(tar: &File) -> io::Result<Tree> {
    let mut tree = Tree::new();
    let mut archive = tar::Archive::new(tar);
    for entry in archive.entries_with_seek()? {
        let entry = entry?;
        let raw = entry.path_bytes();
        let path = raw.strip_prefix(b"./").unwrap_or(&raw);
        let path = path.strip_suffix(b"/").unwrap_or(path).to_vec();
        if path.is_empty() || is_saheelis(&path) || in_git_dir(&path) {
            continue;
        }
        let h = entry.header();
        let exec = h.mode().map(|m| m & 0o111 != 0).unwrap_or(false);
        let e = match h.entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => Entry {
                kind: Kind::File { exec },
                size: entry.size(),
                at: Source::Tar(entry.raw_file_position()),
            },
            tar::EntryType::Symlink => {
                let target = entry.link_name_bytes().unwrap_or_default().into_owned();
                Entry {
                    kind: Kind::Link,
                    size: target.len() as u64,
                    at: Source::Target(target),
                }
            }
            _ => continue,
        };
        tree.insert(path, e);
    }
    Ok(tree)
}

/// The files and links of a collected workspace: links are read, never
/// followed; FIFOs, sockets and devices (none are collected) are left out.
pub(crate) fn dir_tree(root: &Path) -> io::Result<Tree> {
    let mut tree = Tree::new();
    let walk = walkdir::WalkDir::new(root)
        .follow_links(false)
        .min_depth(1)
        .into_iter()
        .filter_entry(|e| {
            let name = e.file_name().as_bytes();
            !in_git_dir(name) && (e.depth() != 1 || !excluded(name))
        });
    for entry in walk {
        let entry = entry.map_err(io::Error::other)?;
        let rel = entry
            .path()
            .strip_prefix(root)
            .expect("walked below the root")
            .as_os_str()
            .as_bytes()
            .to_vec();
        let ft = entry.file_type();
        let e = if ft.is_file() {
            let meta = entry.metadata().map_err(io::Error::other)?;
            Entry {
                kind: Kind::File {
                    exec: meta.permissions().mode() & 0o111 != 0,
                },
                size: meta.len(),
                at: Source::Disk(entry.path().to_path_buf()),
            }
        } else if ft.is_symlink() {
            let target = std::fs::read_link(entry.path())?;
            let target = target.as_os_str().as_bytes().to_vec();
            Entry {
                kind: Kind::Link,
                size: target.len() as u64,
                at: Source::Target(target),
            }
        } else {
            continue;
        };
        tree.insert(rel, e);
    }
    Ok(tree)
}

impl Files<'_> {
    /// An entry's bytes as a stream (at most its size).
    fn open<'s>(&'s self, e: &'s Entry) -> io::Result<Box<dyn Read + 's>> {
        match &e.at {
            Source::Tar(offset) => {
                let tar = self
                    .tar
                    .ok_or_else(|| io::Error::other("no submitted tar"))?;
                Ok(Box::new(At {
                    file: tar,
                    pos: *offset,
                    end: offset + e.size,
                }))
            }
            Source::Disk(path) => match open_regular(path) {
                Ok(Some(f)) => Ok(Box::new(f.take(e.size))),
                Ok(None) => Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("`{}` vanished", path.display()),
                )),
                Err(err) => Err(io::Error::other(err)),
            },
            Source::Target(t) => Ok(Box::new(&t[..])),
        }
    }

    /// An entry as one side of a change: its content read when under the
    /// cap, else only its size.
    pub fn side(&self, e: &Entry) -> io::Result<Side> {
        if e.size > MAX_DIFF_FILE {
            return Ok(Side {
                kind: e.kind,
                content: Content::TooLarge(e.size),
                oid: self.blob_id(e)?,
            });
        }
        let mut bytes = Vec::with_capacity(e.size as usize);
        self.open(e)?
            .take(MAX_DIFF_FILE + 1)
            .read_to_end(&mut bytes)?;
        Ok(Side {
            kind: e.kind,
            oid: BlobId::of(&bytes),
            content: Content::from_bytes(bytes),
        })
    }

    /// The git blob id of an entry too large to hold, streamed.
    fn blob_id(&self, e: &Entry) -> io::Result<String> {
        let mut id = BlobId::new(e.size);
        let mut r = self.open(e)?;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match r.read(&mut buf)? {
                0 => return Ok(id.hex()),
                n => id.update(&buf[..n]),
            }
        }
    }

    /// Whether two entries hold the same bytes (streamed: either may be
    /// over the cap).
    pub fn same_bytes(&self, a: &Entry, b: &Entry) -> io::Result<bool> {
        if a.size != b.size {
            return Ok(false);
        }
        let (mut ra, mut rb) = (self.open(a)?, self.open(b)?);
        let (mut ba, mut bb) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
        loop {
            let n = read_full(&mut ra, &mut ba)?;
            let m = read_full(&mut rb, &mut bb)?;
            if n != m || ba[..n] != bb[..m] {
                return Ok(false);
            }
            if n == 0 {
                return Ok(true);
            }
        }
    }
}

/// Fills `buf` as far as the stream allows; returns how much was read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// A span of a file read by position (the tar is shared by many entries).
struct At<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf.len().min((self.end - self.pos) as usize);
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saheelis_own_files_are_left_out_at_the_top_only() {
        for own in [
            ".saheeli/task.json",
            "prompt.md",
            "complete.json",
            "servo-0199-audit.log",
            "servo-0199-session.json",
            "RESULTS_TRUNCATED.txt",
        ] {
            assert!(is_saheelis(own.as_bytes()), "{own}");
        }
        for theirs in [
            "docs/prompt.md",
            "src/complete.json",
            "servo-notes.txt",
            "a",
        ] {
            assert!(!is_saheelis(theirs.as_bytes()), "{theirs}");
        }
        for git in [".git/config", "sub/.GIT/hooks/x", ".git"] {
            assert!(in_git_dir(git.as_bytes()), "{git}");
        }
        for not in [".gitignore", "a.git/x", "git/config"] {
            assert!(!in_git_dir(not.as_bytes()), "{not}");
        }
    }
}
