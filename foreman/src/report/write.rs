//! Writing Saheeli's files into a results directory the agent filled: the
//! agent may have left a link, a directory or a file of its own where one
//! goes, so a file is written under a fresh name (`O_EXCL`, `O_NOFOLLOW`)
//! and renamed over whatever was there (a rename replaces a link, it never
//! writes through it). Nothing else writes to a results directory once it
//! is collected.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// The patch, relative to a results directory.
pub(crate) const PATCH: &str = ".saheeli/changes.patch";
/// The report, relative to a results directory.
pub(crate) const REPORT: &str = "report.md";

/// Writes `rel` (a name, or one directory and a name) below `results`
/// with what `fill` writes, replacing whatever is there.
pub(crate) fn replace_file(
    results: &Path,
    rel: &str,
    fill: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> anyhow::Result<()> {
    let dest = results.join(rel);
    let dir = dest.parent().context("a results file has a directory")?;
    if dir != results {
        real_dir(dir)?;
    }
    let name = dest.file_name().context("a results file has a name")?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        uuid::Uuid::new_v4().simple()
    ));
    let written = write_new(&tmp, fill).and_then(|()| {
        clear_dir(&dest)?;
        fs::rename(&tmp, &dest).with_context(|| format!("moving into `{}`", dest.display()))
    });
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// Creates `path` (never through a link) and fills it.
fn write_new(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> anyhow::Result<()> {
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .with_context(|| format!("creating `{}`", path.display()))?;
    let mut w = BufWriter::new(file);
    fill(&mut w)
        .and_then(|()| w.flush())
        .with_context(|| format!("writing `{}`", path.display()))
}

/// Makes `dir` a real directory: a link or a file the agent put in its
/// place is removed (never followed).
fn real_dir(dir: &Path) -> anyhow::Result<()> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => fs::remove_file(dir).with_context(|| format!("removing `{}`", dir.display()))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading `{}`", dir.display())),
    }
    fs::create_dir(dir).with_context(|| format!("creating `{}`", dir.display()))
}

/// Removes a directory at `path` (a rename cannot replace one).
fn clear_dir(path: &Path) -> anyhow::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            fs::remove_dir_all(path).with_context(|| format!("removing `{}`", path.display()))
        }
        _ => Ok(()),
    }
}

/// Removes what is at `rel` below `results` (a file the agent planted
/// where Saheeli's goes, when Saheeli writes none).
pub(crate) fn remove(results: &Path, rel: &str) -> anyhow::Result<()> {
    let path: PathBuf = results.join(rel);
    clear_dir(&path)?;
    match fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing `{}`", path.display()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_planted_where_a_file_goes_is_replaced_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let outside = d.path().join("outside");
        fs::create_dir(&outside).unwrap();
        let results = d.path().join("results");
        fs::create_dir(&results).unwrap();
        // `.saheeli` is a link to a directory outside; `report.md` a link
        // to a file outside.
        std::os::unix::fs::symlink(&outside, results.join(".saheeli")).unwrap();
        fs::write(outside.join("victim"), "keep").unwrap();
        std::os::unix::fs::symlink(outside.join("victim"), results.join(REPORT)).unwrap();
        replace_file(&results, PATCH, |w| w.write_all(b"patch")).unwrap();
        replace_file(&results, REPORT, |w| w.write_all(b"report")).unwrap();
        assert_eq!(fs::read_to_string(results.join(PATCH)).unwrap(), "patch");
        assert_eq!(fs::read_to_string(results.join(REPORT)).unwrap(), "report");
        assert!(!results.join(REPORT).is_symlink());
        assert_eq!(fs::read_to_string(outside.join("victim")).unwrap(), "keep");
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 1);
        // A directory in the way is replaced too; nothing temporary is left.
        fs::remove_file(results.join(REPORT)).unwrap();
        fs::create_dir_all(results.join(REPORT).join("sub")).unwrap();
        replace_file(&results, REPORT, |w| w.write_all(b"again")).unwrap();
        assert_eq!(fs::read_to_string(results.join(REPORT)).unwrap(), "again");
        let names: Vec<_> = fs::read_dir(&results)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
        remove(&results, PATCH).unwrap();
        assert!(!results.join(PATCH).exists());
    }
}
