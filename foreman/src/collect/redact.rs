//! Replacing key values in every collected file: one streaming pass per
//! file for all keys at once (aho-corasick), and a rewrite only of the
//! files that hold one.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Seek, Write};
use std::path::Path;

use aho_corasick::AhoCorasick;
use anyhow::Context;
use rustix::fs::FileType;

use super::Dir;

/// Replaces every `(variable, value)` of `secrets` below `dir` with
/// `[REDACTED:<variable>]`; returns, per variable, how many files had it.
/// The tree is walked by directory handles: links are neither followed
/// nor rewritten, and each rewrite goes to a temporary file of a name the
/// agent cannot guess, renamed over the original within its directory.
pub(super) fn redact_tree(
    dir: &Dir,
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
    walk(dir, 0, &mut |dir, name| {
        let shown = dir.shown().join(name);
        let mut file = dir
            .open_file(name)
            .with_context(|| format!("reading `{}`", shown.display()))?;
        let found = matches_in(&finder, &file, &shown)?;
        if found.is_empty() {
            return Ok(());
        }
        file.rewind()
            .with_context(|| format!("reading `{}`", shown.display()))?;
        rewrite(&finder, &replacements, dir, name, &file)
            .with_context(|| format!("redacting `{}`", shown.display()))?;
        for i in found {
            *hits.entry(secrets[i].0.clone()).or_insert(0) += 1;
        }
        Ok(())
    })?;
    Ok(hits)
}

/// Calls `f` on every regular file below `dir` (links are not followed).
fn walk(
    dir: &Dir,
    depth: usize,
    f: &mut impl FnMut(&Dir, &OsStr) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    if depth > 4096 {
        anyhow::bail!("`{}` is nested too deep", dir.shown().display());
    }
    let entries = dir
        .entries()
        .with_context(|| format!("reading `{}`", dir.shown().display()))?;
    for (name, kind) in entries {
        match kind {
            FileType::RegularFile => f(dir, &name)?,
            FileType::Directory => {
                let sub = dir
                    .sub(&name)
                    .with_context(|| format!("reading `{}`", dir.shown().join(&name).display()))?;
                walk(&sub, depth + 1, f)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Which of the keys a file holds (indices, each once), read as a stream.
fn matches_in(finder: &AhoCorasick, file: &File, shown: &Path) -> anyhow::Result<Vec<usize>> {
    let mut found = Vec::new();
    for m in finder.stream_find_iter(BufReader::with_capacity(1 << 20, file)) {
        let i = m
            .with_context(|| format!("reading `{}`", shown.display()))?
            .pattern()
            .as_usize();
        if !found.contains(&i) {
            found.push(i);
        }
    }
    Ok(found)
}

/// Streams `input` (the file `name` of `dir`) through the replacer into a
/// fresh temporary file of that directory (`O_EXCL | O_NOFOLLOW`, a random
/// name), gives it the original's mode on its descriptor, then renames it
/// over the original: no step goes by a path the agent could have planted.
fn rewrite(
    finder: &AhoCorasick,
    replacements: &[Vec<u8>],
    dir: &Dir,
    name: &OsStr,
    input: &File,
) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let (tmp, out) = dir.temp_file(name)?;
    let done = (|| -> io::Result<()> {
        let mut w = BufWriter::with_capacity(1 << 20, &out);
        finder.try_stream_replace_all(
            BufReader::with_capacity(1 << 20, input),
            &mut w,
            replacements,
        )?;
        w.flush()?;
        drop(w);
        // Never setuid, setgid or sticky: the bits we collect with.
        let mode = input.metadata()?.permissions().mode() & 0o777;
        rustix::fs::fchmod(&out, rustix::fs::Mode::from_raw_mode(mode))?;
        dir.rename(&tmp, name)
    })();
    if done.is_err() {
        let _ = dir.remove(&tmp);
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

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
        let hits = redact_tree(&Dir::open(d.path()).unwrap(), &secrets).unwrap();
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
