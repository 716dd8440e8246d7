//! Replacing key values in every collected file: one streaming pass per
//! file for all keys at once (aho-corasick), and a rewrite only of the
//! files that hold one.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, BufReader, BufWriter, Write};
use std::path::Path;

use aho_corasick::AhoCorasick;
use anyhow::Context;

/// Replaces every `(variable, value)` of `secrets` below `dir` with
/// `[REDACTED:<variable>]`; returns, per variable, how many files had it.
/// Links are not followed (the tree was just collected by us, links kept
/// as links).
pub(super) fn redact_tree(
    dir: &Path,
    secrets: &[(String, String)],
) -> anyhow::Result<BTreeMap<String, usize>> {
    let mut hits = BTreeMap::new();
    let secrets: Vec<&(String, String)> = secrets.iter().filter(|(_, v)| !v.is_empty()).collect();
    if secrets.is_empty() {
        return Ok(hits);
    }
    let finder = AhoCorasick::new(secrets.iter().map(|(_, v)| v.as_bytes()))
        .context("building the key matcher")?;
    let replacements: Vec<Vec<u8>> = secrets
        .iter()
        .map(|(var, _)| format!("[REDACTED:{var}]").into_bytes())
        .collect();
    walk(dir, &mut |path| {
        let found = matches_in(&finder, path)?;
        if found.is_empty() {
            return Ok(());
        }
        rewrite(&finder, &replacements, path)?;
        for i in found {
            *hits.entry(secrets[i].0.clone()).or_insert(0) += 1;
        }
        Ok(())
    })?;
    Ok(hits)
}

/// Calls `f` on every regular file below `dir` (links are not followed).
fn walk(dir: &Path, f: &mut impl FnMut(&Path) -> anyhow::Result<()>) -> anyhow::Result<()> {
    for entry in walkdir::WalkDir::new(dir) {
        let entry = entry.with_context(|| format!("reading `{}`", dir.display()))?;
        if entry.file_type().is_file() {
            f(entry.path())?;
        }
    }
    Ok(())
}

/// Which of the keys a file holds (indices, each once), read as a stream.
fn matches_in(finder: &AhoCorasick, path: &Path) -> anyhow::Result<Vec<usize>> {
    let file = fs::File::open(path).with_context(|| format!("reading `{}`", path.display()))?;
    let mut found = Vec::new();
    for m in finder.stream_find_iter(BufReader::with_capacity(1 << 20, file)) {
        let i = m
            .with_context(|| format!("reading `{}`", path.display()))?
            .pattern()
            .as_usize();
        if !found.contains(&i) {
            found.push(i);
        }
    }
    Ok(found)
}

/// Streams `path` through the replacer into a sibling file, then renames
/// it over the original.
fn rewrite(finder: &AhoCorasick, replacements: &[Vec<u8>], path: &Path) -> anyhow::Result<()> {
    let tmp = path.with_extension("saheeli-redacting");
    let done = (|| -> io::Result<()> {
        let input = BufReader::with_capacity(1 << 20, fs::File::open(path)?);
        let mut out = BufWriter::with_capacity(1 << 20, fs::File::create(&tmp)?);
        finder.try_stream_replace_all(input, &mut out, replacements)?;
        out.flush()?;
        let perms = fs::metadata(path)?.permissions();
        fs::set_permissions(&tmp, perms)?;
        fs::rename(&tmp, path)
    })();
    if done.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    done.with_context(|| format!("redacting `{}`", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_replaced_in_one_pass_and_counted_per_file() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir(d.path().join("sub")).unwrap();
        fs::write(d.path().join("a.txt"), "x sk-one y sk-two z sk-one").unwrap();
        fs::write(d.path().join("sub/b.log"), "sk-two").unwrap();
        fs::write(d.path().join("clean.txt"), "nothing here").unwrap();
        // A key straddling the reader's buffer boundary is still found.
        let mut big = vec![b'.'; (1 << 20) - 3];
        big.extend_from_slice(b"sk-one!");
        fs::write(d.path().join("big.bin"), &big).unwrap();
        let secrets = vec![
            ("ONE".to_string(), "sk-one".to_string()),
            ("TWO".to_string(), "sk-two".to_string()),
            ("EMPTY".to_string(), String::new()),
        ];
        let hits = redact_tree(d.path(), &secrets).unwrap();
        assert_eq!(
            hits,
            BTreeMap::from([("ONE".to_string(), 2), ("TWO".to_string(), 2)])
        );
        assert_eq!(
            fs::read_to_string(d.path().join("a.txt")).unwrap(),
            "x [REDACTED:ONE] y [REDACTED:TWO] z [REDACTED:ONE]"
        );
        assert_eq!(
            fs::read_to_string(d.path().join("sub/b.log")).unwrap(),
            "[REDACTED:TWO]"
        );
        let big = fs::read(d.path().join("big.bin")).unwrap();
        assert!(big.ends_with(b"[REDACTED:ONE]!"));
        assert_eq!(
            fs::read_to_string(d.path().join("clean.txt")).unwrap(),
            "nothing here"
        );
    }
}
