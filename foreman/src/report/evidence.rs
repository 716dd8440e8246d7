//! Evidence for the assessor (`assess: true`): the files a workspace
//! changed and its patch, cut to a size an LLM call can carry.

use std::io::Read;
use std::path::Path;

use super::changes::write_changes;
use super::diffstat::Diffstat;
use super::write::PATCH;
use crate::collect::open_regular;

/// What changed in the workspace copy `dir` against `submitted`: the
/// changed paths and the patch's first `cap` bytes (with a note of what
/// was cut). Writes `.saheeli/changes.patch` into `dir`. Blocking.
pub(crate) fn evidence(
    dir: &Path,
    submitted: Option<&Path>,
    cap: usize,
) -> anyhow::Result<(Vec<String>, String)> {
    write_changes(dir, submitted)?;
    let Some(file) = open_regular(&dir.join(PATCH))? else {
        anyhow::bail!("no `{PATCH}` was written");
    };
    let mut bytes = Vec::new();
    let read = file.take(cap as u64 + 1).read_to_end(&mut bytes)?;
    let cut = read > cap;
    bytes.truncate(cap);
    let mut patch = String::from_utf8_lossy(&bytes).into_owned();
    let mut stat = Diffstat::default();
    for line in patch.lines() {
        stat.push(line);
    }
    if cut {
        patch.push_str("\n[… the patch is cut here …]\n");
    }
    Ok((stat.files.into_iter().map(|f| f.path).collect(), patch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_files_and_a_capped_patch() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.txt"), "x\n".repeat(100)).unwrap();
        std::fs::write(d.path().join("b.txt"), "y\n").unwrap();
        let (files, patch) = evidence(d.path(), None, 4096).unwrap();
        assert_eq!(files, ["a.txt", "b.txt"]);
        assert!(patch.contains("+++ b/b.txt"), "{patch}");
        let (_, patch) = evidence(d.path(), None, 64).unwrap();
        assert!(patch.ends_with("[… the patch is cut here …]\n"), "{patch}");
    }
}
