//! Extracting a tar stream from a container we do not trust: entries
//! that would leave the results directory, devices, FIFOs and hard links are
//! skipped; symlinks are made last, so nothing is written through one; and
//! every directory, file and link is made below a directory handle opened
//! `O_NOFOLLOW` (`Dir`), so an entry whose directory is a link is refused.

use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use anyhow::Context;

use super::{Collected, Dir, collect_into, is_link_or_not_dir, sparse};

/// Reads pieces of an archive sent from the async side.
pub(crate) struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<io::Result<bytes::Bytes>>,
    current: bytes::Bytes,
}

impl ChannelReader {
    pub fn new(rx: tokio::sync::mpsc::Receiver<io::Result<bytes::Bytes>>) -> Self {
        ChannelReader {
            rx,
            current: bytes::Bytes::new(),
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(piece)) => self.current = piece,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        bytes::Buf::advance(&mut self.current, n);
        Ok(n)
    }
}

/// Writes (from a blocking thread) an archive for the async side, in
/// pieces of 64 KiB through a bounded channel: never whole in memory.
pub(crate) struct ChannelWriter {
    tx: tokio::sync::mpsc::Sender<io::Result<bytes::Bytes>>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    const PIECE: usize = 64 << 10;

    pub fn new(tx: tokio::sync::mpsc::Sender<io::Result<bytes::Bytes>>) -> Self {
        ChannelWriter {
            tx,
            buf: Vec::with_capacity(Self::PIECE),
        }
    }
}

impl io::Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(Self::PIECE - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == Self::PIECE {
            self.flush()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let piece = std::mem::replace(&mut self.buf, Vec::with_capacity(Self::PIECE));
        self.tx
            .blocking_send(Ok(piece.into()))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the receiver went away"))
    }
}

/// Extracts a workspace tar into `dest`, writing first to a sibling
/// `.partial` directory and redacting `secrets` (variable, value) there.
/// An existing `dest` is replaced. Past the size cap the stream is still
/// read to its end, for the servo's own evidence wherever it comes
/// (`evidence`); everything else is named in the marker, not written.
pub(crate) fn extract(
    reader: impl Read,
    dest: &Path,
    secrets: &[(String, String)],
    max_bytes: u64,
) -> anyhow::Result<Collected> {
    collect_into(dest, secrets, max_bytes, |partial| {
        extract_into(reader, partial, max_bytes, &super::evidence::names(dest))
    })
}

/// Why an entry's directory could not be had.
fn parent_refused(shown: &str, e: &io::Error) -> String {
    if is_link_or_not_dir(e) {
        format!("{shown}: its directory is a link or a file in the archive; not followed")
    } else {
        format!("{shown}: {e}")
    }
}

pub(super) fn extract_into(
    reader: impl Read,
    root: &Dir,
    max_bytes: u64,
    evidence: &[String],
) -> anyhow::Result<Collected> {
    use super::evidence::{EVIDENCE_MAX, is_evidence};
    let mut archive = tar::Archive::new(reader);
    let mut out = Collected::default();
    let mut symlinks: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut last: Option<(PathBuf, Dir)> = None;
    // What counts against `max_bytes`: all but the evidence.
    let mut counted = 0u64;
    for entry in archive.entries().context("reading the workspace archive")? {
        let mut entry = entry.context("reading the workspace archive")?;
        let raw = entry.path().context("reading an archive entry's path")?;
        let shown = raw.display().to_string();
        let Some(rel) = confined(&raw) else {
            out.skipped
                .push(format!("{shown}: path leaves the workspace"));
            continue;
        };
        let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
            continue; // the workspace directory itself
        };
        let kind = entry.header().entry_type();
        let is_evidence = parent.as_os_str().is_empty() && is_evidence(evidence, name);
        if out.truncated && !is_evidence {
            if kind != tar::EntryType::Directory {
                out.cut.add(shown_rel(&rel));
            }
            continue;
        }
        match kind {
            tar::EntryType::Directory => {
                if let Err(e) = root.walk(&rel, true) {
                    out.skipped.push(parent_refused(&shown, &e));
                }
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = entry.header().size().unwrap_or(0);
                // The evidence has its own cap and takes nothing of the results'.
                let room = match is_evidence {
                    true => EVIDENCE_MAX,
                    false => max_bytes - counted,
                };
                if size > room {
                    match is_evidence {
                        true => out.skipped.push(format!(
                            "{shown}: over the {EVIDENCE_MAX}-byte cap of the servo's own files"
                        )),
                        false => {
                            out.truncated = true;
                            out.cut.add(shown_rel(&rel));
                        }
                    }
                    continue;
                }
                // One component at a time, each opened O_NOFOLLOW; the
                // last directory is kept (a tar lists a directory's files
                // together), and no link exists yet to be swapped in.
                if last.as_ref().is_none_or(|(p, _)| p != parent) {
                    match root.walk(parent, true) {
                        Ok(d) => last = Some((parent.to_path_buf(), d)),
                        Err(e) => {
                            out.skipped.push(parent_refused(&shown, &e));
                            continue;
                        }
                    }
                }
                let dir = &last.as_ref().expect("just set").1;
                let file = match dir.create_file(name, 0o644) {
                    Ok(f) => f,
                    Err(e) => {
                        out.skipped.push(format!("{shown}: {e}"));
                        continue;
                    }
                };
                // Bounded even if the header lied about the size.
                let n = sparse::copy_stream(&mut entry, &file, room)
                    .with_context(|| format!("writing `{shown}`"))?;
                if let Ok(mode) = entry.header().mode()
                    && mode & 0o111 != 0
                {
                    // Keep the executable bits, never setuid/setgid/sticky.
                    let mode = rustix::fs::Mode::from_raw_mode((mode & 0o777) | 0o600);
                    let _ = rustix::fs::fchmod(&file, mode);
                }
                out.files += 1;
                out.bytes += n;
                if !is_evidence {
                    counted += n;
                    if counted > max_bytes {
                        out.truncated = true;
                    }
                }
            }
            tar::EntryType::Symlink => {
                if let Some(to) = entry.link_name().ok().flatten() {
                    symlinks.push((rel.clone(), to.into_owned()));
                }
            }
            other => out
                .skipped
                .push(format!("{shown}: {other:?} entries are not collected")),
        }
    }
    make_links(root, symlinks, &mut out);
    Ok(out)
}

/// A path cut by the cap, as the marker names it.
fn shown_rel(rel: &Path) -> String {
    rel.display().to_string()
}

/// Creates symlinks (each `rel` below `root`, pointing at its target)
/// last, so that nothing collected was written through one. Each is made
/// with `symlinkat` below its directory opened `O_NOFOLLOW`: a link whose
/// directory is an earlier link (`a -> /etc`, then `a/planted`) is refused
/// and counted, never made through it; so is one whose name is taken.
pub(super) fn make_links(root: &Dir, links: Vec<(PathBuf, PathBuf)>, out: &mut Collected) {
    for (rel, to) in links {
        let shown = rel.display();
        let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
            continue;
        };
        let made = root
            .walk(parent, true)
            .and_then(|dir| dir.symlink(&to, name));
        match made {
            Ok(()) => {}
            Err(e) if is_link_or_not_dir(&e) => out.skipped.push(format!(
                "{shown}: a link below a link or a file; not made (nothing is made through a link)"
            )),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => out.skipped.push(format!(
                "{shown}: a link where a file or directory was collected; not made"
            )),
            Err(e) => out.skipped.push(format!("{shown}: link not made: {e}")),
        }
    }
}

/// The entry's path relative to the workspace, or None when it would leave it.
/// Docker prefixes entries with `workspace/`.
pub(super) fn confined(raw: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    let mut comps = raw.components().peekable();
    if let Some(Component::CurDir) = comps.peek() {
        comps.next();
    }
    match comps.next() {
        Some(Component::Normal(first)) if first == "workspace" => {}
        None => return Some(out),
        _ => return None,
    }
    for c in comps {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod properties {
    use super::*;
    use crate::collect::tests::archive;
    use proptest::prelude::*;
    use std::fs;

    fn entry_path() -> impl Strategy<Value = String> {
        let part = prop_oneof![
            Just("..".to_string()),
            Just(".".to_string()),
            Just("workspace".to_string()),
            Just("link".to_string()),
            Just("tmp".to_string()),
            "[a-z]{1,3}",
        ];
        (any::<bool>(), prop::collection::vec(part, 1..6))
            .prop_map(|(abs, parts)| format!("{}{}", if abs { "/" } else { "" }, parts.join("/")))
    }

    fn entry() -> impl Strategy<Value = (String, tar::EntryType, Option<String>)> {
        (
            entry_path(),
            prop_oneof![
                Just(tar::EntryType::Regular),
                Just(tar::EntryType::Directory),
                Just(tar::EntryType::Symlink),
                Just(tar::EntryType::Link),
                Just(tar::EntryType::Char),
            ],
            // `@out` stands for a directory outside the results (case 42).
            prop_oneof![
                Just(None),
                entry_path().prop_map(Some),
                Just(Some("@out".to_string()))
            ],
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn nothing_is_written_outside_the_results_directory(entries in prop::collection::vec(entry(), 1..12)) {
            let d = tempfile::tempdir().unwrap();
            let outside = d.path().join("outside");
            fs::create_dir(&outside).unwrap();
            let dest = d.path().join("results/t");
            let out_str = outside.to_str().unwrap().to_string();
            let targets: Vec<String> = entries
                .iter()
                .map(|(_, _, l)| l.as_deref().unwrap_or("x").replace("@out", &out_str))
                .collect();
            let list: Vec<(&str, tar::EntryType, &[u8], Option<&str>)> = entries
                .iter()
                .zip(&targets)
                .map(|((p, k, _), t)| (p.as_str(), *k, &b"data"[..], Some(t.as_str())))
                .collect();
            let tar = archive(&list);
            let _ = extract(&tar[..], &dest, &[], 1 << 20);
            // Only `results/` was created, and nothing appeared beside it.
            let top: Vec<_> = fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
            prop_assert_eq!(top.len(), 2, "{:?}", top);
            prop_assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
            let in_results: Vec<_> = fs::read_dir(d.path().join("results")).unwrap().map(|e| e.unwrap().file_name()).collect();
            prop_assert!(in_results.len() <= 1, "{:?}", in_results);
            // No regular file below dest is reached through a symlink.
            fn walk(dir: &Path, root: &Path) -> Result<(), String> {
                for e in fs::read_dir(dir).map_err(|e| e.to_string())? {
                    let e = e.map_err(|e| e.to_string())?;
                    let ft = e.file_type().map_err(|e| e.to_string())?;
                    if ft.is_dir() {
                        walk(&e.path(), root)?;
                    } else if ft.is_file() {
                        let real = e.path().canonicalize().map_err(|e| e.to_string())?;
                        if !real.starts_with(root.canonicalize().unwrap()) {
                            return Err(format!("{} escapes", e.path().display()));
                        }
                    }
                }
                Ok(())
            }
            if dest.is_dir() {
                prop_assert!(walk(&dest, &dest).is_ok());
            }
        }
    }
}
