//! `verify_files` as they were submitted: the entries of the submitted
//! workspace tar at (or below) those paths, with their parent directories,
//! as a new tar to upload before verify runs. The agent cannot pass by
//! editing the checks: what it made there is removed and this put back.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The largest restore held in memory.
const MAX_RESTORE: u64 = 256 << 20;

/// A tar of the entries of `submitted` that are one of `files`, lie below
/// one, or are a directory above one. Blocking.
pub(crate) fn restore_tar(submitted: &Path, files: &[PathBuf]) -> anyhow::Result<Vec<u8>> {
    let file = std::fs::File::open(submitted)
        .with_context(|| format!("opening the submitted workspace `{}`", submitted.display()))?;
    let mut archive = tar::Archive::new(file);
    let mut out = tar::Builder::new(Vec::new());
    out.follow_symlinks(false);
    let mut total = 0u64;
    for entry in archive
        .entries()
        .context("reading the submitted workspace")?
    {
        let mut entry = entry.context("reading the submitted workspace")?;
        let path: PathBuf = entry
            .path()
            .context("reading an entry's path")?
            .into_owned();
        let wanted = files.iter().any(|f| path.starts_with(f))
            || (entry.header().entry_type().is_dir() && files.iter().any(|f| f.starts_with(&path)));
        if !wanted {
            continue;
        }
        total += entry.size();
        if total > MAX_RESTORE {
            bail!(
                "`verify_files` hold more than {} MiB; name fewer or smaller paths",
                MAX_RESTORE >> 20
            );
        }
        let mut header = entry.header().clone();
        let mut body = Vec::new();
        entry.read_to_end(&mut body).context("reading an entry")?;
        out.append_data(&mut header, &path, body.as_slice())
            .context("writing the restore archive")?;
    }
    out.into_inner().context("finishing the restore archive")
}

/// The arguments naming `files` (and their parents) for commands run in
/// /workspace: `./` in front, so no name reads as an option.
pub(crate) fn workspace_args(files: &[PathBuf]) -> (Vec<String>, Vec<String>) {
    let arg = |p: &Path| format!("./{}", p.display());
    let mut parents: Vec<String> = files
        .iter()
        .flat_map(|f| f.ancestors().skip(1))
        .filter(|a| !a.as_os_str().is_empty())
        .map(arg)
        .collect();
    parents.sort();
    parents.dedup();
    (files.iter().map(|f| arg(f)).collect(), parents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_files_their_contents_and_parents_are_restored() {
        let d = tempfile::tempdir().unwrap();
        let tar_path = d.path().join("ws.tar");
        let mut b = tar::Builder::new(std::fs::File::create(&tar_path).unwrap());
        let mut add = |name: &str, body: Option<&[u8]>| {
            let mut h = tar::Header::new_gnu();
            match body {
                Some(bytes) => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_size(bytes.len() as u64);
                    h.set_mode(0o644);
                    h.set_cksum();
                    b.append_data(&mut h, name, bytes).unwrap();
                }
                None => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_size(0);
                    h.set_mode(0o755);
                    h.set_cksum();
                    b.append_data(&mut h, name, std::io::empty()).unwrap();
                }
            }
        };
        add("src", None);
        add("src/lib.sh", Some(b"code"));
        add("tests", None);
        add("tests/unit", None);
        add("tests/unit/t.sh", Some(b"check"));
        add("tests/other.sh", Some(b"other"));
        add("pytest.ini", Some(b"ini"));
        add("pytest.ini.bak", Some(b"no"));
        b.finish().unwrap();
        drop(b);
        let files = vec![PathBuf::from("tests/unit"), PathBuf::from("pytest.ini")];
        let tar = restore_tar(&tar_path, &files).unwrap();
        let mut names: Vec<String> = tar::Archive::new(tar.as_slice())
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["pytest.ini", "tests", "tests/unit", "tests/unit/t.sh"]
        );
        let (args, parents) = workspace_args(&files);
        assert_eq!(args, ["./tests/unit", "./pytest.ini"]);
        assert_eq!(parents, ["./tests"]);
    }
}
