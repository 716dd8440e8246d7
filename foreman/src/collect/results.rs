//! A results directory comes to be whole or not at all: filled under a
//! private `.partial` name, marked when truncated, redacted, then renamed.

use std::fs;
use std::path::Path;

use anyhow::Context;

use crate::config::Config;

use super::{Dir, redact_tree};

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
    /// What the size cap left out, named in the marker.
    pub cut: super::evidence::Cut,
}

/// The marker left in a results directory cut short by the size cap.
pub(crate) const TRUNCATED_MARKER: &str = "RESULTS_TRUNCATED.txt";

/// Fills a fresh `.partial` sibling of `dest`, marks a truncated result,
/// redacts `secrets`, and renames it into place.
pub(super) fn collect_into(
    dest: &Path,
    secrets: &[(String, String)],
    max_bytes: u64,
    fill: impl FnOnce(&Dir) -> anyhow::Result<Collected>,
) -> anyhow::Result<Collected> {
    let parent = dest.parent().context("results path has no parent")?;
    fs::create_dir_all(parent)
        .with_context(|| format!("creating results directory `{}`", parent.display()))?;
    let name = dest
        .file_name()
        .context("results path has no name")?
        .to_string_lossy();
    // Private to this collector: two never share one (a foreman that lost
    // its lease must not write into another's collection). Only the lease
    // holder collects, so what an earlier collector of this task left
    // (it was stopped mid-way) is cleared first.
    let stale_prefix = format!(".{name}.");
    if let Ok(entries) = fs::read_dir(parent) {
        for e in entries.flatten() {
            let n = e.file_name();
            let n = n.to_string_lossy();
            if n.starts_with(&stale_prefix) && n.ends_with(".partial") {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
    let partial = parent.join(format!(".{name}.{}.partial", uuid::Uuid::new_v4().simple()));
    fs::create_dir(&partial).with_context(|| format!("creating `{}`", partial.display()))?;
    let filled = (|| {
        // Everything below is written through this handle, never by path.
        let root =
            Dir::open(&partial).with_context(|| format!("opening `{}`", partial.display()))?;
        let mut collected = fill(&root)?;
        if collected.truncated {
            mark_truncated(&root, max_bytes, &collected.cut)
                .context("marking truncated results")?;
        }
        for (var, files) in redact_tree(&root, secrets)? {
            collected.redacted.push(format!("{var} in {files} files"));
        }
        anyhow::Ok(collected)
    })();
    let collected = filled.inspect_err(|_| {
        let _ = fs::remove_dir_all(&partial);
    })?;
    if dest.exists() {
        fs::remove_dir_all(dest).with_context(|| format!("replacing `{}`", dest.display()))?;
    }
    fs::rename(&partial, dest)
        .with_context(|| format!("moving results into `{}`", dest.display()))?;
    Ok(collected)
}

/// Writes the marker of a truncated result: whatever the agent left at
/// its name (a link to a host file, a directory) is removed first, and the
/// marker made afresh (`O_EXCL | O_NOFOLLOW`), so nothing is written
/// through a link.
fn mark_truncated(root: &Dir, max_bytes: u64, cut: &super::evidence::Cut) -> anyhow::Result<()> {
    use std::io::Write;
    let name = std::ffi::OsStr::new(TRUNCATED_MARKER);
    root.remove(name)
        .with_context(|| format!("removing the collected `{TRUNCATED_MARKER}`"))?;
    let mut f = root
        .create_file(name, 0o644)
        .with_context(|| format!("creating `{TRUNCATED_MARKER}`"))?;
    write!(
        f,
        "Collection stopped at the results size cap ({max_bytes} bytes, \
         `max_results_size` in config.yaml): this directory is partial. The servo's \
         own files (complete.json, its audit log and session) are collected first and \
         outside the cap.\n{}",
        cut.lines()
    )
    .with_context(|| format!("writing `{TRUNCATED_MARKER}`"))
}

/// Gives a task's freshly collected results directory `file_access`'s
/// directory mode (never through a link).
pub(crate) fn secure_results(cfg: &Config, dest: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if std::fs::symlink_metadata(dest).is_ok_and(|m| m.is_dir()) {
        let mode = cfg.file.file_access.dir_mode();
        if let Err(e) = std::fs::set_permissions(dest, std::fs::Permissions::from_mode(mode)) {
            tracing::warn!(dir = %dest.display(), error = %e, "setting the mode of a results directory");
        }
    }
}

/// How many `.partial` directories are in `dir` (tests: none may be left).
#[cfg(test)]
pub(super) fn partial_dirs(dir: &Path) -> usize {
    fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().ends_with(".partial")
        })
        .count()
}
