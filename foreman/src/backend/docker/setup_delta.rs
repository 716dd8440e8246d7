//! What a set-up changed in the workspace (issue 50), from two archives of
//! /workspace as Docker sends them: a listing before the set-up (each
//! entry's kind, mode, owner, link and content digest) and, after it, a
//! tar of only the entries that are new or differ. A cache hit restores
//! that tar, so a later task's own files are overwritten only where the
//! set-up itself wrote.
//!
//! The archives are the workspace's, made by commands we do not trust:
//! nothing here touches the host's file system (entries are read, never
//! extracted, links never followed), and both passes stop at a byte cap.
//! Devices and FIFOs are left out; a hard link is kept only when what it
//! links to is kept. What a set-up deleted is not recorded.

use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};

use anyhow::Context;
use sha2::{Digest, Sha256};
use tar::EntryType;

/// The most entries a listing holds (its memory).
const MAX_ENTRIES: usize = 1_000_000;
/// A same-size file up to this is read whole to compare it; a larger one
/// is kept without comparing (it may have changed).
const COMPARE_IN_MEMORY: u64 = 64 << 20;

/// One entry as it was.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stat {
    kind: u8,
    mode: u32,
    uid: u64,
    gid: u64,
    size: u64,
    link: Option<Vec<u8>>,
    digest: Option<[u8; 32]>,
}

/// The workspace before the set-up, by workspace-relative path.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    entries: HashMap<Vec<u8>, Stat>,
}

/// What a pass found past its cap.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Capped<T> {
    Within(T),
    /// More than the cap would have been read or written.
    Over,
}

/// What [`delta`] wrote.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Delta {
    /// Bytes of the tar written.
    pub bytes: u64,
    /// Entries kept (new or changed).
    pub entries: u64,
    /// Entries left out: devices, FIFOs, links to what was not kept.
    pub left_out: u64,
}

/// The workspace-relative path of an archive entry (Docker's archive of
/// /workspace names them `workspace/...`); None for the root itself or a
/// path that is not plain.
fn relative(raw: &[u8]) -> Option<Vec<u8>> {
    let s = raw.strip_suffix(b"/").unwrap_or(raw);
    let (_, rest) = s.split_at(s.iter().position(|&b| b == b'/')? + 1);
    let plain = !rest.is_empty()
        && rest
            .split(|&b| b == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b"..");
    plain.then(|| rest.to_vec())
}

fn stat_of(h: &tar::Header, link: Option<Vec<u8>>, digest: Option<[u8; 32]>) -> io::Result<Stat> {
    Ok(Stat {
        kind: h.entry_type().as_byte(),
        mode: h.mode()?,
        uid: h.uid()?,
        gid: h.gid()?,
        size: h.size()?,
        link,
        digest,
    })
}

/// Reads `r` to its end into a digest; None past `budget` bytes.
fn digest_of(r: &mut impl Read, budget: &mut u64) -> io::Result<Option<[u8; 32]>> {
    let mut h = Sha256::new();
    let mut buf = vec![0; 64 * 1024];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            return Ok(Some(h.finalize().into()));
        }
        if n as u64 > *budget {
            return Ok(None);
        }
        *budget -= n as u64;
        h.update(&buf[..n]);
    }
}

/// Lists the archive `r` of /workspace, reading at most `max_read` bytes
/// of content.
pub(crate) fn list(r: impl Read, max_read: u64) -> anyhow::Result<Capped<Listing>> {
    let mut archive = tar::Archive::new(r);
    let mut out = Listing::default();
    let mut budget = max_read;
    for entry in archive.entries().context("reading the workspace archive")? {
        let mut entry = entry.context("reading the workspace archive")?;
        let Some(rel) = relative(&entry.path_bytes()) else {
            continue;
        };
        if out.entries.len() >= MAX_ENTRIES {
            return Ok(Capped::Over);
        }
        let link = entry.link_name_bytes().map(|l| l.into_owned());
        let digest = if entry.header().entry_type() == EntryType::Regular {
            match digest_of(&mut entry, &mut budget)? {
                Some(d) => Some(d),
                None => return Ok(Capped::Over),
            }
        } else {
            None
        };
        let stat = stat_of(entry.header(), link, digest)?;
        out.entries.insert(rel, stat);
    }
    Ok(Capped::Within(out))
}

/// Writes to `out` a tar of the entries of `r` (the archive of /workspace
/// after the set-up) that `before` lacks or holds otherwise, paths
/// relative to /workspace; at most `cap` bytes read and written.
pub(crate) fn delta(
    r: impl Read,
    before: &Listing,
    out: impl Write,
    cap: u64,
) -> anyhow::Result<Capped<Delta>> {
    let mut archive = tar::Archive::new(r);
    let mut builder = tar::Builder::new(Counting { inner: out, n: 0 });
    builder.follow_symlinks(false);
    let mut found = Delta::default();
    let mut kept: HashSet<Vec<u8>> = HashSet::new();
    let mut budget = cap;
    for entry in archive.entries().context("reading the workspace archive")? {
        let mut entry = entry.context("reading the workspace archive")?;
        let Some(rel) = relative(&entry.path_bytes()) else {
            continue;
        };
        let path = String::from_utf8_lossy(&rel).into_owned();
        let mut header = entry.header().clone();
        let kind = header.entry_type();
        let link = entry.link_name_bytes().map(|l| l.into_owned());
        let was = before.entries.get(&rel);
        match kind {
            EntryType::Directory | EntryType::Symlink => {
                let now = stat_of(&header, link.clone(), None)?;
                if was == Some(&now) {
                    continue;
                }
                if kind == EntryType::Directory {
                    builder.append_data(&mut header, &path, io::empty())?;
                } else {
                    let target =
                        String::from_utf8_lossy(link.as_deref().unwrap_or_default()).into_owned();
                    builder.append_link(&mut header, &path, &target)?;
                }
            }
            EntryType::Link => {
                let target = link.as_deref().and_then(relative_link);
                match target {
                    Some(t) if kept.contains(&t) => {
                        let t = String::from_utf8_lossy(&t).into_owned();
                        builder.append_link(&mut header, &path, &t)?;
                    }
                    _ => {
                        found.left_out += 1;
                        continue;
                    }
                }
            }
            EntryType::Regular => {
                let size = header.size()?;
                if size > budget {
                    return Ok(Capped::Over);
                }
                let same_shape = was.is_some_and(|w| {
                    w.kind == kind.as_byte()
                        && w.size == size
                        && stat_of(&header, None, w.digest).is_ok_and(|s| s == *w)
                });
                if same_shape && size <= COMPARE_IN_MEMORY {
                    let mut data = Vec::with_capacity(size as usize);
                    entry.read_to_end(&mut data)?;
                    let digest: [u8; 32] = Sha256::digest(&data).into();
                    if was.and_then(|w| w.digest) == Some(digest) {
                        continue;
                    }
                    builder.append_data(&mut header, &path, data.as_slice())?;
                } else {
                    builder.append_data(&mut header, &path, &mut entry)?;
                }
                budget -= size;
            }
            _ => {
                found.left_out += 1;
                continue;
            }
        }
        found.entries += 1;
        kept.insert(rel);
        if builder.get_ref().n > cap {
            return Ok(Capped::Over);
        }
    }
    builder.finish()?;
    found.bytes = builder.get_ref().n;
    Ok(Capped::Within(found))
}

/// A hard link's target as Docker names it (`workspace/...`).
fn relative_link(l: &[u8]) -> Option<Vec<u8>> {
    relative(l)
}

/// A writer that counts what passed.
struct Counting<W> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
#[path = "setup_delta_tests.rs"]
mod tests;
