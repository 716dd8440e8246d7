//! The tree a verify attempt runs in is what `changes.patch` delivers: the
//! submitted workspace plus the agent's changes the patch carries
//! (HOSTILE.md N25: a planted `unittest/` that the agent's own `.gitignore`
//! of `*` hid from the patch made `python3 -m unittest` pass). Before the
//! commands run (the task's container is paused), the workspace is read
//! whole and compared with the submitted tar: where it lies on this host
//! (the local engine's, or its copy-on-write view on a check that has
//! one: walked by handles that never follow a link, `verify_tree_host`), else through Docker's archive of the verify
//! container's /workspace (a swarm node's):
//!
//! - what the patch leaves out as ignored (paths the agent added that the
//!   submitted `.gitignore` files or Saheeli's defaults name: bytecode,
//!   caches, an ignored `node_modules/` or `target/`) is removed from the
//!   workspace, for good (the agent finds it gone after a failed attempt,
//!   and results do not hold it). On a check with hidden tests the agent
//!   gets its workspace back after (`VerifyLink::on_copy`), the container's
//!   /workspace is a throwaway copy-on-write view: the removal keeps the
//!   check from seeing those paths, and the real workspace keeps them
//!   (they never reach `changes.patch`; results hold them if that attempt
//!   passes). Deleting the agent's paths from the host as root, outside
//!   the container's confinement, is not worth that;
//! - then each path the agent added or changed outside `verify_files`
//!   (restored as submitted anyway) is judged by `shadow::look`: a module,
//!   plugin, configuration or hook that changes what the command runs
//!   refuses the attempt before anything runs, each path named with why.
//!
//! A file over 1 MiB is named in the patch rather than diffed ("over
//! 1 MiB"), and stays: it is the agent's work, and the checks above see it
//! as any other.

use std::collections::{BTreeSet, HashSet};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use base64::Engine;
use bollard::Docker;
use futures_util::StreamExt;

use super::shadow::{self, Change, Look};
use crate::backend::docker;
use crate::report::{MAX_COMPARED, Submitted, is_saheelis};

/// Paths named in a refusal (the rest are counted).
const MAX_NAMED: usize = 20;

/// Bytes of base64 in one removal command (an argument is at most 128 KiB).
const REMOVAL_BATCH: usize = 96 * 1024;

/// What the scan of the agent's workspace found.
#[derive(Debug, Default, PartialEq, Eq)]
struct Scan {
    /// What to remove (relative), highest first.
    remove: BTreeSet<Vec<u8>>,
    /// Each refused path, with why.
    refused: Vec<String>,
}

/// An added or changed path kept for judging.
struct Kept {
    path: Vec<u8>,
    change: Change,
    /// Its bytes, when a configuration's are compared.
    bytes: Option<Vec<u8>>,
}

/// Makes the verify container's /workspace what the patch delivers.
/// Ok(Some(why)) refuses the attempt (nothing was changed); Ok(None): the
/// commands may run. `host`: the workspace's directory on this host,
/// read in place (`host::scan_host`); else Docker's archive is read.
pub(crate) async fn prepare(
    d: &Docker,
    container: &str,
    host: Option<&Path>,
    submitted: &Path,
    pinned: &[PathBuf],
    max_bytes: u64,
) -> anyhow::Result<Option<String>> {
    let found = match host {
        Some(dir) => {
            let (dir, submitted, pinned) =
                (dir.to_path_buf(), submitted.to_path_buf(), pinned.to_vec());
            tokio::task::spawn_blocking(move || {
                let sub = Submitted::open(&submitted)?;
                host::scan_host(&dir, &sub, &pinned, max_bytes)
            })
            .await
            .context("the workspace scan panicked")?
            .context("reading the workspace to verify")?
        }
        None => scan_archive(d, container, submitted, pinned, max_bytes).await?,
    };
    if !found.refused.is_empty() {
        return Ok(Some(refusal(&found.refused)));
    }
    remove(d, container, &found.remove).await?;
    Ok(None)
}

/// Scans the verify container's /workspace through Docker's archive.
async fn scan_archive(
    d: &Docker,
    container: &str,
    submitted: &Path,
    pinned: &[PathBuf],
    max_bytes: u64,
) -> anyhow::Result<Scan> {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(8);
    let mut stream = Box::pin(docker::download_workspace(d, container));
    let pump = async move {
        while let Some(item) = stream.next().await {
            let failed = item.is_err();
            if tx.send(item).await.is_err() || failed {
                return;
            }
        }
    };
    let (submitted, pinned) = (submitted.to_path_buf(), pinned.to_vec());
    let scanning = tokio::task::spawn_blocking(move || {
        let sub = Submitted::open(&submitted)?;
        scan(
            crate::collect::ChannelReader::new(rx),
            &sub,
            &pinned,
            max_bytes,
        )
    });
    let ((), scanned) = tokio::join!(pump, scanning);
    scanned
        .context("the workspace scan panicked")?
        .context("reading the workspace to verify")
}

/// The refusal the model and the report read.
fn refusal(refused: &[String]) -> String {
    let mut out = String::from(
        "refused before running it: the agent's changes reach into what the command runs, \
         so passing would not say the work is done:\n",
    );
    for line in refused.iter().take(MAX_NAMED) {
        out.push_str(&format!("- {line}\n"));
    }
    if refused.len() > MAX_NAMED {
        out.push_str(&format!("- and {} more\n", refused.len() - MAX_NAMED));
    }
    out.push_str(
        "Undo these changes (or rename the module) and call task_complete again. Verify runs \
         on the submitted workspace plus the changes `changes.patch` carries.",
    );
    out
}

/// What a scan keeps as it goes through the workspace's entries.
struct Scanner<'a> {
    sub: &'a Submitted,
    pinned: &'a [PathBuf],
    max_bytes: u64,
    found: Scan,
    total: u64,
    kept: Vec<Kept>,
    /// Directories holding an `__init__.py` (packages: Python does not
    /// search them for top-level modules).
    packages: HashSet<Vec<u8>>,
}

impl<'a> Scanner<'a> {
    fn new(sub: &'a Submitted, pinned: &'a [PathBuf], max_bytes: u64) -> Scanner<'a> {
        Scanner {
            sub,
            pinned,
            max_bytes,
            found: Scan::default(),
            total: 0,
            kept: Vec::new(),
            packages: HashSet::new(),
        }
    }

    /// Counts `size` bytes against the workspace's size.
    fn count(&mut self, size: u64) -> anyhow::Result<()> {
        self.total = self.total.saturating_add(size);
        if self.total > self.max_bytes {
            anyhow::bail!(
                "the workspace's files hold more than {} MiB (sparse files counted whole), more \
                 than its size: remove the largest",
                self.max_bytes >> 20
            );
        }
        Ok(())
    }

    /// One entry that is not a directory, at `rel`; `bytes` reads it (a
    /// link's target) when it must be judged.
    fn see(
        &mut self,
        rel: Vec<u8>,
        bytes: impl FnOnce() -> anyhow::Result<Vec<u8>>,
    ) -> anyhow::Result<()> {
        if is_saheelis(&rel) || under(&self.found.remove, &rel) {
            return Ok(());
        }
        if let Some(root) = self.sub.left_out(&rel) {
            self.found.remove.insert(root);
            return Ok(());
        }
        if let Some(dir) = rel.strip_suffix(b"__init__.py")
            && (dir.is_empty() || dir.ends_with(b"/"))
        {
            self.packages
                .insert(dir.strip_suffix(b"/").unwrap_or(dir).to_vec());
        }
        let as_path = Path::new(std::ffi::OsStr::from_bytes(&rel));
        if self.pinned.iter().any(|p| as_path.starts_with(p)) {
            return Ok(());
        }
        let change = if self.sub.has(&rel) {
            Change::Changed
        } else {
            Change::Added
        };
        let wanted = shadow::look(&rel, change, &|_| false) != Look::Fine;
        let bytes = if wanted { Some(bytes()?) } else { None };
        if change == Change::Changed {
            // Unchanged: nothing to judge.
            let same = match (&bytes, self.sub.bytes(&rel)) {
                (Some(new), Some(old)) => *new == old,
                _ => !wanted,
            };
            if same {
                return Ok(());
            }
        }
        self.kept.push(Kept {
            path: rel,
            change,
            bytes,
        });
        Ok(())
    }

    /// What was found, each kept path judged.
    fn finish(self) -> Scan {
        let Scanner {
            sub,
            mut found,
            mut kept,
            packages,
            ..
        } = self;
        let searched = |dir: &[u8]| dir.is_empty() || !packages.contains(dir);
        // Named in git's order, whatever order the entries came in.
        kept.sort_by(|a, b| a.path.cmp(&b.path));
        for k in kept {
            let why = match shadow::look(&k.path, k.change, &searched) {
                Look::Fine => continue,
                Look::Refused(why) => why,
                Look::Compare(c) => {
                    let new = k.bytes.as_deref().unwrap_or_default();
                    if !shadow::config_differs(c, sub.bytes(&k.path).as_deref(), new) {
                        continue;
                    }
                    shadow::config_why(c).to_string()
                }
            };
            let change = match k.change {
                Change::Added => "added",
                Change::Changed => "changed",
            };
            let path = String::from_utf8_lossy(&k.path);
            found.refused.push(format!("`{path}` ({change}): {why}"));
        }
        found
    }
}

/// Reads the workspace archive (entries prefixed `workspace/`) against
/// the submitted tree, refusing one whose files hold more than `max_bytes`
/// (the workspace's size: only sparse files exceed it, and the archive
/// carries their holes whole). Blocking.
fn scan(
    reader: impl Read,
    sub: &Submitted,
    pinned: &[PathBuf],
    max_bytes: u64,
) -> anyhow::Result<Scan> {
    let mut scanner = Scanner::new(sub, pinned, max_bytes);
    let mut archive = tar::Archive::new(reader);
    for entry in archive.entries()? {
        let mut entry = entry?;
        scanner.count(entry.size())?;
        let raw = entry.path_bytes().into_owned();
        let Some(rel) = relative(&raw) else { continue };
        if entry.header().entry_type().is_dir() {
            continue;
        }
        scanner.see(rel, || entry_bytes(&mut entry))?;
    }
    Ok(scanner.finish())
}

/// An entry's path below /workspace (None for /workspace itself).
fn relative(raw: &[u8]) -> Option<Vec<u8>> {
    let rel = raw.splitn(2, |&c| c == b'/').nth(1)?;
    let rel = rel.strip_suffix(b"/").unwrap_or(rel);
    (!rel.is_empty()).then(|| rel.to_vec())
}

/// Whether `path` is at or below one of `roots`.
fn under(roots: &BTreeSet<Vec<u8>>, path: &[u8]) -> bool {
    let prefixes = path
        .iter()
        .enumerate()
        .filter(|&(_, &c)| c == b'/')
        .map(|(i, _)| &path[..i]);
    prefixes.chain([path]).any(|p| roots.contains(p))
}

/// A file's bytes (a link's target), read to one past the compare cap: a
/// larger one never equals a submitted file held under it.
fn entry_bytes(entry: &mut tar::Entry<'_, impl Read>) -> anyhow::Result<Vec<u8>> {
    if entry.header().entry_type().is_symlink() {
        return Ok(entry.link_name_bytes().unwrap_or_default().into_owned());
    }
    let mut bytes = Vec::new();
    entry
        .by_ref()
        .take(MAX_COMPARED + 1)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Removes `paths` (relative) in the container as the servo's user: the
/// names go NUL-separated through base64 (any byte but NUL survives), in
/// batches. A directory the agent made unwritable is made writable first.
async fn remove(d: &Docker, container: &str, paths: &BTreeSet<Vec<u8>>) -> anyhow::Result<()> {
    let mut batch: Vec<u8> = Vec::new();
    let mut it = paths.iter().peekable();
    while let Some(p) = it.next() {
        batch.extend_from_slice(b"./");
        batch.extend_from_slice(p);
        batch.push(0);
        if batch.len() * 4 / 3 >= REMOVAL_BATCH || it.peek().is_none() {
            let names = base64::engine::general_purpose::STANDARD.encode(&batch);
            let command = format!(
                "printf %s {names} | base64 -d | xargs -0r chmod -R u+rwX -- 2>/dev/null; \
                 printf %s {names} | base64 -d | xargs -0r rm -rf --"
            );
            let ran =
                docker::exec_shell(d, container, &command, Duration::from_secs(120), 4096).await?;
            if ran.exit_code != Some(0) {
                anyhow::bail!(
                    "removing what `changes.patch` leaves out as ignored failed: {}",
                    ran.output.trim()
                );
            }
            batch.clear();
        }
    }
    Ok(())
}

#[path = "verify_tree_host.rs"]
mod host;

#[cfg(test)]
#[path = "verify_tree_tests.rs"]
mod tests;
