//! Bringing a finished task's /workspace home: a tar stream from a container
//! we do not trust, extracted into `results/<task_id>/`.
//!
//! The archive is read as it arrives (never held whole in memory) into
//! `results/.<task_id>.partial/`, which is renamed into place only when
//! complete, so a results directory is never half-written. Entries that
//! would land outside the directory (`..`, absolute paths), device files,
//! FIFOs and hard links are skipped and counted; symlinks are created last,
//! so no entry is ever written through one. Before the rename, every file is
//! scanned for the values of the configured API keys, and any hit is
//! replaced by `[REDACTED:<VARIABLE>]`.
//!
//! `volume` copies a stopped task's volume from its host directory instead
//! (with `*at` calls, links never followed); `read` reads files of a
//! collected workspace (`complete.json`, the audit log) without following
//! links and under a cap.

use std::fs;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use anyhow::Context;

mod read;
mod volume;

pub(crate) use read::{
    AuditTotals, Line, MAX_AUDIT_LOG, audit_lines, audit_totals, read_completion,
};
pub(crate) use volume::copy_volume;

/// What was collected.
#[derive(Debug, Default)]
pub(crate) struct Collected {
    pub files: u64,
    pub bytes: u64,
    /// Entries refused (unsafe path or type), with the reason.
    pub skipped: Vec<String>,
    /// Secrets found and redacted: `OPENAI_API_KEY in 2 files`.
    pub redacted: Vec<String>,
    /// The size cap was reached: what was collected is partial, and the
    /// results directory holds `RESULTS_TRUNCATED.txt` saying so.
    pub truncated: bool,
}

/// The marker left in a results directory cut short by the size cap.
pub(crate) const TRUNCATED_MARKER: &str = "RESULTS_TRUNCATED.txt";

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

/// Extracts a workspace tar into `dest`, writing first to a sibling
/// `.partial` directory and redacting `secrets` (variable, value) there.
/// An existing `dest` is replaced.
pub(crate) fn extract(
    reader: impl Read,
    dest: &Path,
    secrets: &[(String, String)],
    max_bytes: u64,
) -> anyhow::Result<Collected> {
    collect_into(dest, secrets, max_bytes, |partial| {
        extract_into(reader, partial, max_bytes)
    })
}

/// Fills a fresh `.partial` sibling of `dest`, marks a truncated result,
/// redacts `secrets`, and renames it into place.
fn collect_into(
    dest: &Path,
    secrets: &[(String, String)],
    max_bytes: u64,
    fill: impl FnOnce(&Path) -> anyhow::Result<Collected>,
) -> anyhow::Result<Collected> {
    let parent = dest.parent().context("results path has no parent")?;
    fs::create_dir_all(parent)
        .with_context(|| format!("creating results directory `{}`", parent.display()))?;
    let name = dest
        .file_name()
        .context("results path has no name")?
        .to_string_lossy();
    let partial = parent.join(format!(".{name}.partial"));
    if partial.exists() {
        fs::remove_dir_all(&partial)
            .with_context(|| format!("clearing `{}`", partial.display()))?;
    }
    fs::create_dir(&partial).with_context(|| format!("creating `{}`", partial.display()))?;
    let mut collected = fill(&partial)?;
    if collected.truncated {
        fs::write(
            partial.join(TRUNCATED_MARKER),
            format!(
                "Collection stopped at the results size cap ({max_bytes} bytes, \
                 `max_results_size` in config.yaml): this directory is partial.\n"
            ),
        )
        .context("marking truncated results")?;
    }
    for (var, value) in secrets {
        let files = redact_tree(
            &partial,
            value.as_bytes(),
            format!("[REDACTED:{var}]").as_bytes(),
        )?;
        if files > 0 {
            collected.redacted.push(format!("{var} in {files} files"));
        }
    }
    if dest.exists() {
        fs::remove_dir_all(dest).with_context(|| format!("replacing `{}`", dest.display()))?;
    }
    fs::rename(&partial, dest)
        .with_context(|| format!("moving results into `{}`", dest.display()))?;
    Ok(collected)
}

fn extract_into(reader: impl Read, root: &Path, max_bytes: u64) -> anyhow::Result<Collected> {
    let mut archive = tar::Archive::new(reader);
    let mut out = Collected::default();
    let mut symlinks: Vec<(PathBuf, PathBuf)> = Vec::new();
    // Directories known to exist: spares a create_dir_all per file.
    let mut dirs: std::collections::HashSet<PathBuf> = std::collections::HashSet::new();
    dirs.insert(root.to_path_buf());
    for entry in archive.entries().context("reading the workspace archive")? {
        let mut entry = entry.context("reading the workspace archive")?;
        let raw = entry.path().context("reading an archive entry's path")?;
        let shown = raw.display().to_string();
        let Some(rel) = confined(&raw) else {
            out.skipped
                .push(format!("{shown}: path leaves the workspace"));
            continue;
        };
        if rel.as_os_str().is_empty() {
            continue; // the workspace directory itself
        }
        let target = root.join(&rel);
        let kind = entry.header().entry_type();
        match kind {
            tar::EntryType::Directory => match fs::create_dir_all(&target) {
                Ok(()) => {
                    dirs.insert(target);
                }
                Err(e) => out.skipped.push(format!("{shown}: {e}")),
            },
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = entry.header().size().unwrap_or(0);
                if out.bytes + size > max_bytes {
                    out.truncated = true;
                    break;
                }
                if let Some(p) = target.parent()
                    && !dirs.contains(p)
                {
                    if let Err(e) = fs::create_dir_all(p) {
                        out.skipped.push(format!("{shown}: {e}"));
                        continue;
                    }
                    dirs.insert(p.to_path_buf());
                }
                let mut file = match fs::File::create(&target) {
                    Ok(f) => f,
                    Err(e) => {
                        out.skipped.push(format!("{shown}: {e}"));
                        continue;
                    }
                };
                // Bounded even if the header lied about the size.
                let n = io::copy(
                    &mut (&mut entry).take((max_bytes - out.bytes).saturating_add(1)),
                    &mut file,
                )
                .with_context(|| format!("writing `{}`", target.display()))?;
                if let Ok(mode) = entry.header().mode()
                    && mode & 0o111 != 0
                {
                    use std::os::unix::fs::PermissionsExt;
                    // Keep the executable bits, never setuid/setgid/sticky.
                    let _ =
                        file.set_permissions(fs::Permissions::from_mode((mode & 0o777) | 0o600));
                }
                out.files += 1;
                out.bytes += n;
                if out.bytes > max_bytes {
                    out.truncated = true;
                    break;
                }
            }
            tar::EntryType::Symlink => {
                if let Some(to) = entry.link_name().ok().flatten() {
                    symlinks.push((target, to.into_owned()));
                }
            }
            other => out
                .skipped
                .push(format!("{shown}: {other:?} entries are not collected")),
        }
    }
    make_links(symlinks)?;
    Ok(out)
}

/// Creates symlinks last, so that nothing collected was written through one.
fn make_links(links: Vec<(PathBuf, PathBuf)>) -> anyhow::Result<()> {
    for (at, to) in links {
        if let Some(p) = at.parent() {
            fs::create_dir_all(p).ok();
        }
        if at.symlink_metadata().is_err() {
            std::os::unix::fs::symlink(&to, &at)
                .with_context(|| format!("creating symlink `{}`", at.display()))?;
        }
    }
    Ok(())
}

/// Replaces `secret` in every regular file below `dir`; returns how many
/// files had it. Files are scanned in chunks and only rewritten on a hit.
fn redact_tree(dir: &Path, secret: &[u8], with: &[u8]) -> anyhow::Result<usize> {
    let mut hits = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let ft = entry.file_type()?;
        let path = entry.path();
        if ft.is_dir() {
            hits += redact_tree(&path, secret, with)?;
        } else if ft.is_file() && contains(&path, secret)? {
            let data = fs::read(&path)?;
            let mut out = Vec::with_capacity(data.len());
            let mut rest = &data[..];
            while let Some(i) = memchr::memmem::find(rest, secret) {
                out.extend_from_slice(&rest[..i]);
                out.extend_from_slice(with);
                rest = &rest[i + secret.len()..];
            }
            out.extend_from_slice(rest);
            fs::write(&path, out).with_context(|| format!("redacting `{}`", path.display()))?;
            hits += 1;
        }
    }
    Ok(hits)
}

/// Whether a file contains `needle`, reading 1 MiB at a time.
fn contains(path: &Path, needle: &[u8]) -> io::Result<bool> {
    let mut f = fs::File::open(path)?;
    let finder = memchr::memmem::Finder::new(needle);
    let keep = needle.len().saturating_sub(1);
    let mut buf = vec![0u8; (1 << 20) + keep];
    let mut have = 0;
    loop {
        let n = f.read(&mut buf[have..])?;
        if n == 0 {
            return Ok(false);
        }
        have += n;
        if finder.find(&buf[..have]).is_some() {
            return Ok(true);
        }
        // Keep the tail in case the secret straddles two reads.
        let from = have.saturating_sub(keep);
        buf.copy_within(from..have, 0);
        have -= from;
    }
}

/// The entry's path relative to the workspace, or None when it would leave it.
/// Docker prefixes entries with `workspace/`.
fn confined(raw: &Path) -> Option<PathBuf> {
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
mod tests {
    use super::*;

    fn header(path: &str, kind: tar::EntryType, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(0o644);
        // Bypass tar's own path checks: we are the hostile side here.
        let name = &mut h.as_old_mut().name;
        name[..path.len()].copy_from_slice(path.as_bytes());
        h.set_cksum();
        h
    }

    pub(super) fn archive(entries: &[(&str, tar::EntryType, &[u8], Option<&str>)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, data, link) in entries {
            let mut h = header(path, *kind, data.len() as u64);
            if let Some(l) = link {
                h.set_link_name(l).unwrap();
                h.set_cksum();
            }
            b.append(&h, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn extracts_normal_workspace() {
        let d = tempfile::tempdir().unwrap();
        let tar = archive(&[
            ("workspace/", tar::EntryType::Directory, b"", None),
            ("workspace/a/b.txt", tar::EntryType::Regular, b"hi", None),
            (
                "workspace/link",
                tar::EntryType::Symlink,
                b"",
                Some("a/b.txt"),
            ),
        ]);
        let dest = d.path().join("results/t1");
        let c = extract(&tar[..], &dest, &[], u64::MAX).unwrap();
        assert_eq!(c.files, 1);
        assert_eq!(fs::read_to_string(dest.join("a/b.txt")).unwrap(), "hi");
        assert_eq!(fs::read_to_string(dest.join("link")).unwrap(), "hi");
        assert!(!d.path().join("results/.t1.partial").exists());
    }

    #[test]
    fn hostile_entries_stay_inside() {
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("r/t");
        let tar = archive(&[
            (
                "workspace/../../escape.txt",
                tar::EntryType::Regular,
                b"x",
                None,
            ),
            ("/etc/evil", tar::EntryType::Regular, b"x", None),
            ("workspace/out", tar::EntryType::Symlink, b"", Some("/")),
            (
                "workspace/out/tmp/through-link",
                tar::EntryType::Regular,
                b"x",
                None,
            ),
            ("workspace/dev", tar::EntryType::Char, b"", None),
            (
                "workspace/hard",
                tar::EntryType::Link,
                b"",
                Some("/etc/passwd"),
            ),
        ]);
        let c = extract(&tar[..], &dest, &[], u64::MAX).unwrap();
        assert!(!d.path().join("escape.txt").exists());
        assert!(!d.path().join("r/escape.txt").exists());
        assert!(!Path::new("/tmp/through-link").exists());
        // The write under `out/` went into a real directory, and the
        // symlink was then not created over it.
        assert!(dest.join("out/tmp/through-link").is_file());
        assert!(!dest.join("out").is_symlink());
        assert!(!dest.join("dev").exists());
        assert!(!dest.join("hard").exists());
        assert_eq!(c.skipped.len(), 4, "{:?}", c.skipped);
    }

    #[test]
    fn secrets_are_redacted_before_results_are_final() {
        let d = tempfile::tempdir().unwrap();
        let secret = "sk-live-abcdefghijklmnop";
        let big = format!("{}{secret}{}", "x".repeat((1 << 20) - 5), "y".repeat(100));
        let tar = archive(&[
            (
                "workspace/log.txt",
                tar::EntryType::Regular,
                format!("key={secret} and {secret}\n").as_bytes(),
                None,
            ),
            (
                "workspace/big.bin",
                tar::EntryType::Regular,
                big.as_bytes(),
                None,
            ),
            (
                "workspace/clean.txt",
                tar::EntryType::Regular,
                b"nothing here",
                None,
            ),
        ]);
        let dest = d.path().join("r/t");
        let secrets = vec![("OPENAI_API_KEY".to_string(), secret.to_string())];
        let c = extract(&tar[..], &dest, &secrets, u64::MAX).unwrap();
        assert_eq!(c.redacted, vec!["OPENAI_API_KEY in 2 files".to_string()]);
        assert_eq!(
            fs::read_to_string(dest.join("log.txt")).unwrap(),
            "key=[REDACTED:OPENAI_API_KEY] and [REDACTED:OPENAI_API_KEY]\n"
        );
        assert!(
            !fs::read_to_string(dest.join("big.bin"))
                .unwrap()
                .contains(secret)
        );
        assert_eq!(
            fs::read_to_string(dest.join("clean.txt")).unwrap(),
            "nothing here"
        );
    }

    #[test]
    fn the_size_cap_stops_collection_and_marks_it() {
        let d = tempfile::tempdir().unwrap();
        let tar = archive(&[
            ("workspace/a", tar::EntryType::Regular, &[b'a'; 600], None),
            ("workspace/b", tar::EntryType::Regular, &[b'b'; 600], None),
            ("workspace/c", tar::EntryType::Regular, &[b'c'; 10], None),
        ]);
        let dest = d.path().join("r/t");
        let c = extract(&tar[..], &dest, &[], 1000).unwrap();
        assert!(c.truncated);
        assert_eq!((c.files, c.bytes), (1, 600));
        assert!(dest.join("a").is_file() && !dest.join("b").exists());
        assert!(dest.join(TRUNCATED_MARKER).is_file());
    }

    #[test]
    fn a_file_over_a_directory_is_skipped_not_fatal() {
        let d = tempfile::tempdir().unwrap();
        let tar = archive(&[
            ("workspace/x/", tar::EntryType::Directory, b"", None),
            ("workspace/x", tar::EntryType::Regular, b"file", None),
            ("workspace/y", tar::EntryType::Regular, b"fine", None),
        ]);
        let dest = d.path().join("r/t");
        let c = extract(&tar[..], &dest, &[], u64::MAX).unwrap();
        assert_eq!(c.skipped.len(), 1, "{:?}", c.skipped);
        assert_eq!(fs::read_to_string(dest.join("y")).unwrap(), "fine");
    }
}

#[cfg(test)]
mod properties {
    use super::tests::archive;
    use super::*;
    use proptest::prelude::*;

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
            prop_oneof![Just(None), entry_path().prop_map(Some)],
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
            let list: Vec<(&str, tar::EntryType, &[u8], Option<&str>)> = entries
                .iter()
                .map(|(p, k, l)| (p.as_str(), *k, &b"data"[..], l.as_deref().or(Some("x"))))
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
