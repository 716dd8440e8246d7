//! Writing Saheeli's files into a results directory the agent filled: the
//! agent may have left a link, a directory or a file of its own where one
//! goes, so everything is done through directory handles that follow no
//! link (`collect::Dir`): the results directory and `.saheeli/` are opened
//! `O_NOFOLLOW` (a link or file at `.saheeli` is removed and a real
//! directory made), a file is written under a fresh name (`O_EXCL`,
//! `O_NOFOLLOW`) and renamed over whatever was there within the same
//! handle (a rename replaces a link, it never writes through it). Nothing
//! else writes to a results directory once it is collected.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use anyhow::Context;
use rustix::fs::FileType;

use crate::collect::Dir;

/// The patch, relative to a results directory.
pub(crate) const PATCH: &str = ".saheeli/changes.patch";
/// The report, relative to a results directory.
pub(crate) const REPORT: &str = "report.md";

/// The directory handle and the name of `rel` (a name, or one directory
/// and a name) below `results`; the directory is made a real one first
/// when `make` (a link or a file in its place is removed, never followed).
fn locate<'a>(
    results: &Path,
    rel: &'a str,
    make: bool,
) -> anyhow::Result<Option<(Dir, &'a OsStr)>> {
    let root = Dir::open(results).with_context(|| format!("opening `{}`", results.display()))?;
    let rel = Path::new(rel);
    let name = rel.file_name().context("a results file has a name")?;
    let dir = match rel.parent().and_then(Path::file_name) {
        None => root,
        Some(sub) => match root.kind(sub)? {
            Some(FileType::Directory) => root.sub(sub)?,
            other => {
                if !make {
                    return Ok(None);
                }
                if other.is_some() {
                    root.remove(sub)
                        .with_context(|| format!("removing `{}`", results.join(sub).display()))?;
                }
                root.make_dir(sub, 0o755)
                    .with_context(|| format!("creating `{}`", results.join(sub).display()))?
            }
        },
    };
    Ok(Some((dir, name)))
}

/// Writes `rel` (a name, or one directory and a name) below `results`
/// with what `fill` writes, replacing whatever is there.
pub(crate) fn replace_file(
    results: &Path,
    rel: &str,
    fill: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> anyhow::Result<()> {
    let shown = results.join(rel);
    let (dir, name) = locate(results, rel, true)?.context("a results directory was made")?;
    let (tmp, file) = dir
        .temp_file(name)
        .with_context(|| format!("creating a file beside `{}`", shown.display()))?;
    let written = (|| {
        rustix::fs::fchmod(&file, rustix::fs::Mode::from_raw_mode(0o644))?;
        let mut w = BufWriter::new(file);
        fill(&mut w)?;
        w.flush()
    })()
    .with_context(|| format!("writing `{}`", shown.display()))
    .and_then(|()| {
        // A rename cannot replace a directory: one in the way goes first.
        if dir.kind(name)? == Some(FileType::Directory) {
            dir.remove(name)
                .with_context(|| format!("removing `{}`", shown.display()))?;
        }
        dir.rename(&tmp, name)
            .with_context(|| format!("moving into `{}`", shown.display()))
    });
    if written.is_err() {
        let _ = dir.remove(&tmp);
    }
    written
}

/// Removes what is at `rel` below `results` (a file the agent planted
/// where Saheeli's goes, when Saheeli writes none); never through a link.
pub(crate) fn remove(results: &Path, rel: &str) -> anyhow::Result<()> {
    let Some((dir, name)) = locate(results, rel, false)? else {
        return Ok(());
    };
    dir.remove(name)
        .with_context(|| format!("removing `{}`", results.join(rel).display()))
}

/// The names in `results/<sub>` when it is a real directory (a link there
/// is not listed through).
pub(crate) fn names_in(results: &Path, sub: &str) -> anyhow::Result<Vec<String>> {
    let root = Dir::open(results).with_context(|| format!("opening `{}`", results.display()))?;
    let dir = match root.sub(sub.as_ref()) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) if crate::collect::is_link_or_not_dir(&e) => return Ok(Vec::new()),
        Err(e) => {
            return Err(e).with_context(|| format!("opening `{}`", results.join(sub).display()));
        }
    };
    Ok(dir
        .entries()
        .with_context(|| format!("listing `{}`", results.join(sub).display()))?
        .into_iter()
        .map(|(n, _)| n.to_string_lossy().into_owned())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

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

    #[test]
    fn a_saheeli_link_is_neither_listed_nor_cleaned_through() {
        let d = tempfile::tempdir().unwrap();
        let outside = d.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("verify-1.log"), "keep").unwrap();
        let results = d.path().join("results");
        fs::create_dir(&results).unwrap();
        std::os::unix::fs::symlink(&outside, results.join(".saheeli")).unwrap();
        super::super::verification::write_verify_logs(&results, &[]).unwrap();
        assert_eq!(
            fs::read_to_string(outside.join("verify-1.log")).unwrap(),
            "keep"
        );
        remove(&results, ".saheeli/verify-1.log").unwrap();
        assert!(outside.join("verify-1.log").is_file());
    }
}
