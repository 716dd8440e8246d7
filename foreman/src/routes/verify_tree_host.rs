//! The workspace read where it lies on this host (issue 49: a check's
//! overhead): the local engine's workspace is a directory here (a
//! loop-mounted image's mount point, or a local volume's), so the scan
//! walks it instead of streaming Docker's archive of it, and reads the
//! bytes of only the files it judges. The task's container is paused and
//! the verify container idle while it runs: nothing changes under it.
//!
//! The agent made every entry: directories are opened by handle, one
//! component at a time and never through a link (`collect::Dir`); a link
//! is read as a link, a FIFO or device never opened; a file's bytes are
//! read to one past the compare cap. Sizes count as the archive's would:
//! a file with several hard links once, a sparse file whole.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use anyhow::Context;
use rustix::fs::{AtFlags, FileType};

use super::{Scan, Scanner};
use crate::collect::Dir;
use crate::report::{MAX_COMPARED, Submitted};

/// Deepest directory nesting read (Linux's own path limit is 4096 bytes).
const MAX_DEPTH: usize = 2048;

/// Scans the workspace at `root` (a host directory) against the
/// submitted tree, as `scan` does its archive. Blocking.
pub(super) fn scan_host(
    root: &Path,
    sub: &Submitted,
    pinned: &[std::path::PathBuf],
    max_bytes: u64,
) -> anyhow::Result<Scan> {
    let top = Dir::open(root).with_context(|| format!("opening {}", root.display()))?;
    let mut scanner = Scanner::new(sub, pinned, max_bytes);
    // Inodes with more than one link, counted once.
    let mut linked: HashSet<(u64, u64)> = HashSet::new();
    // Directories still to read, relative to the top.
    let mut pending: Vec<Vec<u8>> = vec![Vec::new()];
    while let Some(prefix) = pending.pop() {
        let dir = top
            .walk(Path::new(OsStr::from_bytes(&prefix)), false)
            .with_context(|| {
                format!(
                    "opening `{}` in the workspace",
                    String::from_utf8_lossy(&prefix)
                )
            })?;
        // Reversed: popped in name order.
        for (name, kind) in dir.entries()?.into_iter().rev() {
            let mut rel = prefix.clone();
            if !rel.is_empty() {
                rel.push(b'/');
            }
            rel.extend_from_slice(name.as_bytes());
            if kind == FileType::Directory {
                if super::under(&scanner.found.remove, &rel) {
                    continue;
                }
                if rel.iter().filter(|&&c| c == b'/').count() >= MAX_DEPTH {
                    anyhow::bail!("the workspace nests directories more than {MAX_DEPTH} deep");
                }
                pending.push(rel);
                continue;
            }
            let st = rustix::fs::statat(&dir, &*name, AtFlags::SYMLINK_NOFOLLOW)?;
            let counted = match FileType::from_raw_mode(st.st_mode) {
                FileType::RegularFile => {
                    st.st_nlink <= 1 || linked.insert((st.st_dev as u64, st.st_ino as u64))
                }
                _ => false,
            };
            if counted {
                scanner.count(st.st_size as u64)?;
            }
            scanner.see(rel, || entry_bytes(&dir, &name, kind))?;
        }
    }
    Ok(scanner.finish())
}

/// An entry's bytes as the archive's scan reads them: a file's to one
/// past the compare cap, a link's target, nothing of anything else.
fn entry_bytes(dir: &Dir, name: &OsStr, kind: FileType) -> anyhow::Result<Vec<u8>> {
    match kind {
        FileType::Symlink => Ok(dir.read_link(name)?.into_os_string().into_vec()),
        FileType::RegularFile => {
            let mut bytes = Vec::new();
            dir.open_file(name)?
                .take(MAX_COMPARED + 1)
                .read_to_end(&mut bytes)?;
            Ok(bytes)
        }
        _ => Ok(Vec::new()),
    }
}
