//! What a task's snapshots keep beside them (issue 51), in its snapshot
//! directory, the foreman's alone (0700):
//!
//! ```text
//! <state_dir>/snapshots/<task_id>/
//!   step-000002/        the snapshot (`snapshot`)
//!   cost-000002         what it added on disk: `<copied bytes> <directories> <files> <linked>`
//!   stamps              the newest snapshot's per-file record, for the next one's links
//! ```
//!
//! The record makes a foreman's first snapshot after a restart as
//! incremental as the ones before: it links what the newest snapshot
//! copied instead of copying the whole workspace again. It is removed
//! before a snapshot is put in place and written after, so it never
//! describes a snapshot other than the one of its step; one that is
//! missing, over [`MAX_STAMPS`] files or not well formed is simply not
//! used (the next snapshot copies everything, as a first one does). Every
//! file here is opened without following links and read with a cap.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use saheeli_protocol::TaskId;
use tracing::warn;

use super::Dir;
use super::snapshot::{Stamp, Taken, step_name, steps, task_dir};

/// The most files the record keeps (beyond: none is kept).
pub(crate) const MAX_STAMPS: usize = 200_000;

/// The record's largest size (beyond: none is kept).
const MAX_BYTES: usize = 64 << 20;

/// The record's longest path.
const MAX_PATH: usize = 4096;

const STAMPS: &str = "stamps";
const MAGIC: &[u8] = b"saheeli-stamps-1\n";

/// What a directory costs on disk beyond its files' bytes.
pub(crate) const DIR_BYTES: u64 = 4096;

/// One kept snapshot, as `task status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Kept {
    pub step: u32,
    /// What it added on disk (files copied and its directories; unchanged
    /// files are links to the one before); None when not recorded.
    pub bytes: Option<u64>,
}

fn cost_name(step: u32) -> String {
    format!("cost-{step:06}")
}

/// A small file of this directory, read without following a link and
/// with a cap; None when absent, not a regular file or too long.
fn read_small(dir: &Dir, name: &str, cap: u64) -> Option<Vec<u8>> {
    let file = dir.open_file(OsStr::new(name)).ok()?;
    let mut out = Vec::new();
    file.take(cap + 1).read_to_end(&mut out).ok()?;
    (out.len() as u64 <= cap).then_some(out)
}

/// Writes `name` whole (a temporary file renamed into place).
fn write_whole(dir: &Dir, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let (tmp, mut f) = dir.temp_file(OsStr::new(name))?;
    let written = f.write_all(bytes).and_then(|()| f.sync_data());
    drop(f);
    match written.and_then(|()| dir.rename(&tmp, OsStr::new(name))) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = dir.remove(&tmp);
            Err(e)
        }
    }
}

/// The snapshots task `id` keeps, in order, with what each added on disk.
pub(crate) fn kept(state_dir: &Path, id: TaskId) -> Vec<Kept> {
    let dir = Dir::open(&task_dir(state_dir, id)).ok();
    steps(state_dir, id)
        .into_iter()
        .map(|step| Kept {
            step,
            bytes: dir.as_ref().and_then(|d| cost(d, step)),
        })
        .collect()
}

fn cost(dir: &Dir, step: u32) -> Option<u64> {
    let text = read_small(dir, &cost_name(step), 128)?;
    let mut words = std::str::from_utf8(&text).ok()?.split_whitespace();
    let copied: u64 = words.next()?.parse().ok()?;
    let dirs: u64 = words.next()?.parse().ok()?;
    Some(copied.saturating_add(dirs.saturating_mul(DIR_BYTES)))
}

/// The snapshot `t` is made, not yet in place: the record of the one
/// before goes (it may be of this very step, taken again).
pub(super) fn forget(dir: &Dir) {
    let _ = dir.remove(OsStr::new(STAMPS));
}

/// The snapshot `t` is in place: its cost and its record are written
/// (a failure only costs the next foreman's first snapshot its links).
pub(super) fn record(dir: &Dir, t: &Taken) {
    let line = format!("{} {} {} {}\n", t.copied, t.dirs, t.files, t.linked);
    if let Err(e) = write_whole(dir, &cost_name(t.step), line.as_bytes()) {
        warn!(step = t.step, error = %e, "the snapshot's cost not recorded");
    }
    if t.stamps.len() > MAX_STAMPS {
        return;
    }
    let mut out = Vec::with_capacity(MAGIC.len() + 12 + t.stamps.len() * 80);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&t.step.to_le_bytes());
    push_i64(&mut out, t.began.0);
    push_i64(&mut out, t.began.1);
    out.extend_from_slice(&(t.stamps.len() as u64).to_le_bytes());
    for (path, s) in &t.stamps {
        let p = path.as_os_str().as_bytes();
        out.extend_from_slice(&(p.len() as u32).to_le_bytes());
        out.extend_from_slice(p);
        out.extend_from_slice(&s.ino.to_le_bytes());
        for n in [s.size, s.mtime.0, s.mtime.1, s.ctime.0, s.ctime.1] {
            push_i64(&mut out, n);
        }
        out.extend_from_slice(&s.mode.to_le_bytes());
    }
    if out.len() > MAX_BYTES {
        return;
    }
    if let Err(e) = write_whole(dir, STAMPS, &out) {
        warn!(step = t.step, error = %e, "the snapshot's record not written");
    }
}

fn push_i64(out: &mut Vec<u8>, n: i64) {
    out.extend_from_slice(&n.to_le_bytes());
}

/// What a foreman that did not take task `id`'s snapshots goes on from:
/// the newest one's record (when kept and still of a snapshot there) and
/// what they all added on disk so far (for the task's cap).
pub(crate) fn load(state_dir: &Path, id: TaskId) -> (Option<Taken>, u64) {
    let Ok(dir) = Dir::open(&task_dir(state_dir, id)) else {
        return (None, 0);
    };
    let kept: u64 = kept(state_dir, id).iter().filter_map(|k| k.bytes).sum();
    let taken = read_small(&dir, STAMPS, MAX_BYTES as u64)
        .and_then(|b| parse(&b))
        .filter(|t| dir.sub(OsStr::new(&step_name(t.step))).is_ok());
    (taken, kept)
}

/// Reads a record back; None when it is not one.
fn parse(bytes: &[u8]) -> Option<Taken> {
    let mut r = Reader(bytes.strip_prefix(MAGIC)?);
    let step = u32::from_le_bytes(r.take()?);
    let began = (r.i64()?, r.i64()?);
    let n = usize::try_from(u64::from_le_bytes(r.take()?)).ok()?;
    if n > MAX_STAMPS {
        return None;
    }
    let mut t = Taken::empty(step, began);
    for _ in 0..n {
        let len = u32::from_le_bytes(r.take()?) as usize;
        if len > MAX_PATH {
            return None;
        }
        let path = PathBuf::from(OsStr::from_bytes(r.bytes(len)?));
        let ino = u64::from_le_bytes(r.take()?);
        let (size, m0, m1, c0, c1) = (r.i64()?, r.i64()?, r.i64()?, r.i64()?, r.i64()?);
        let mode = u32::from_le_bytes(r.take()?);
        let stamp = Stamp {
            ino,
            size,
            mtime: (m0, m1),
            ctime: (c0, c1),
            mode,
        };
        t.stamps.insert(path, stamp);
    }
    r.0.is_empty().then_some(t)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N)?.try_into().ok()
    }

    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take()?))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::collect::snapshot::{at_step, take};

    fn ws() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("ws");
        let state = d.path().join("state");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("big.bin"), vec![7u8; 64 << 10]).unwrap();
        std::fs::write(src.join("sub/b.txt"), "two").unwrap();
        // Older than the margin of the first walk: linked by the next.
        std::thread::sleep(std::time::Duration::from_millis(80));
        (d, src, state)
    }

    #[test]
    fn a_foreman_that_did_not_take_the_snapshots_goes_on_from_their_record() {
        let (_d, src, state) = ws();
        let id = TaskId::new();
        let s0 = take(&src, &state, id, 0, None, 1 << 20).unwrap();
        take(&src, &state, id, 1, Some(&s0), 1 << 20).unwrap();
        // A new foreman: nothing in memory, the record on disk.
        let (prev, bytes) = load(&state, id);
        let prev = prev.expect("the record of step 1");
        assert_eq!(prev.step, 1);
        assert_eq!(prev.stamps.len(), 2);
        assert_eq!(bytes, (64 << 10) + 3 + 2 * 2 * DIR_BYTES);
        std::fs::write(src.join("new.txt"), "after step 1").unwrap();
        let s2 = take(&src, &state, id, 2, Some(&prev), 1 << 20).unwrap();
        assert_eq!((s2.files, s2.linked, s2.copied), (3, 2, 12), "{s2:?}");
        let ino = |step: u32| {
            std::fs::metadata(at_step(&state, id, step).unwrap().join("big.bin"))
                .unwrap()
                .ino()
        };
        assert_eq!(ino(2), ino(0));
        assert_eq!(
            kept(&state, id),
            [
                Kept {
                    step: 0,
                    bytes: Some((64 << 10) + 3 + 2 * DIR_BYTES)
                },
                Kept {
                    step: 1,
                    bytes: Some(2 * DIR_BYTES)
                },
                Kept {
                    step: 2,
                    bytes: Some(12 + 2 * DIR_BYTES)
                },
            ]
        );
    }

    #[test]
    fn a_record_that_is_not_one_or_is_a_link_is_not_used() {
        let (d, src, state) = ws();
        let id = TaskId::new();
        take(&src, &state, id, 0, None, 1 << 20).unwrap();
        let dir = task_dir(&state, id);
        assert!(load(&state, id).0.is_some());
        // Cut short: not used.
        let whole = std::fs::read(dir.join(STAMPS)).unwrap();
        std::fs::write(dir.join(STAMPS), &whole[..whole.len() - 3]).unwrap();
        assert!(load(&state, id).0.is_none());
        // A link planted where it was: never followed.
        std::fs::remove_file(dir.join(STAMPS)).unwrap();
        let elsewhere = d.path().join("elsewhere");
        std::fs::write(&elsewhere, &whole).unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.join(STAMPS)).unwrap();
        assert!(load(&state, id).0.is_none());
        // Of a snapshot no longer there: not used.
        std::fs::remove_file(dir.join(STAMPS)).unwrap();
        std::fs::write(dir.join(STAMPS), &whole).unwrap();
        std::fs::remove_dir_all(dir.join(step_name(0))).unwrap();
        assert!(load(&state, id).0.is_none());
        assert!(parse(b"not a record").is_none());
    }
}
