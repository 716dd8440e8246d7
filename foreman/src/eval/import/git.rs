//! The `git` CLI for the SWE-bench importer: find a commit in a local
//! clone, read the files a patch touches and apply it to them (in a
//! scratch repository, never the clone), and check a commit out as a fresh
//! one-commit repository. Unified-diff headers are read here too.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// `git` with the caller's repository variables cleared (a `GIT_DIR` in
/// the environment would point every call at another repository).
fn git() -> Command {
    let mut c = Command::new("git");
    for var in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
    ] {
        c.env_remove(var);
    }
    c.env("GIT_TERMINAL_PROMPT", "0").stdin(Stdio::null());
    c
}

/// Runs `c`; `Err` says what failed with git's own words.
fn run(mut c: Command, what: &str) -> Result<Output, String> {
    let out = c
        .output()
        .map_err(|e| format!("{what}: running `git`: {e} (is git installed?)"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{what}: {}", err.trim()));
    }
    Ok(out)
}

/// Whether `dir` is a git repository (a clone or a bare one).
pub(crate) fn is_repo(dir: &Path) -> bool {
    let mut c = git();
    c.arg("-C").arg(dir).args(["rev-parse", "--git-dir"]);
    c.stdout(Stdio::null()).stderr(Stdio::null());
    c.status().is_ok_and(|s| s.success())
}

/// The full id of `commit` in `repo`, if it has it.
pub(crate) fn resolve(repo: &Path, commit: &str) -> Option<String> {
    let mut c = git();
    c.arg("-C")
        .arg(repo)
        .args(["rev-parse", "--verify", "--quiet"])
        .arg(format!("{commit}^{{commit}}"));
    let out = run(c, "rev-parse").ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The bytes of `path` at `commit`, or `None` when it has no such file.
fn show(repo: &Path, commit: &str, path: &str) -> Option<Vec<u8>> {
    let mut c = git();
    c.arg("-C")
        .arg(repo)
        .args(["cat-file", "blob"])
        .arg(format!("{commit}:{path}"));
    run(c, "cat-file").ok().map(|o| o.stdout)
}

/// A directory removed when dropped.
pub(crate) struct Scratch(pub PathBuf);

impl Scratch {
    pub(crate) fn new() -> std::io::Result<Scratch> {
        use std::os::unix::fs::DirBuilderExt;
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "saheeli-import-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A file a patch touched: its path and its bytes after (`None`: deleted).
pub(crate) type Patched = (String, Option<Vec<u8>>);

/// The files `patch` touches (see [`touched`]) after applying it to their
/// state at `commit`: `(path, Some(bytes))`, or `None` for one it deletes.
/// `Err`: it does not apply (git's message).
pub(crate) fn patched(repo: &Path, commit: &str, patch: &str) -> Result<Vec<Patched>, String> {
    let scratch = Scratch::new().map_err(|e| format!("making a scratch directory: {e}"))?;
    let root = &scratch.0;
    let mut c = git();
    c.arg("init").arg("-q").arg(root);
    run(c, "git init")?;
    let paths = touched(patch);
    for path in &paths {
        if let Some(bytes) = show(repo, commit, path) {
            let file = root.join(path);
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent).map_err(|e| format!("writing `{path}`: {e}"))?;
            }
            std::fs::write(&file, bytes).map_err(|e| format!("writing `{path}`: {e}"))?;
        }
    }
    let mut c = git();
    c.arg("-C")
        .arg(root)
        .args(["apply", "--whitespace=nowarn", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().map_err(|e| format!("running `git apply`: {e}"))?;
    let mut stdin = child.stdin.take().expect("piped");
    let body = patch.as_bytes().to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&body));
    let out = child
        .wait_with_output()
        .map_err(|e| format!("running `git apply`: {e}"))?;
    let _ = writer.join();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    let mut files = Vec::new();
    for path in paths {
        let file = root.join(&path);
        let bytes = if file.is_file() {
            Some(std::fs::read(&file).map_err(|e| format!("reading `{path}`: {e}"))?)
        } else {
            None
        };
        files.push((path, bytes));
    }
    Ok(files)
}

/// Writes every file of `commit` (as `git archive` would, but ignoring
/// `export-ignore`) into the new directory `dest`, then makes it a fresh
/// repository with that tree as its one commit, `message`.
pub(crate) fn checkout(
    repo: &Path,
    commit: &str,
    dest: &Path,
    message: &str,
) -> Result<(), String> {
    let scratch = Scratch::new().map_err(|e| format!("making a scratch directory: {e}"))?;
    let index = scratch.0.join("index");
    std::fs::create_dir_all(dest).map_err(|e| format!("making `{}`: {e}", dest.display()))?;
    let dest = std::path::absolute(dest).map_err(|e| format!("`{}`: {e}", dest.display()))?;
    let mut c = git();
    c.env("GIT_INDEX_FILE", &index)
        .arg("-C")
        .arg(repo)
        .args(["read-tree", commit]);
    run(c, "git read-tree")?;
    let mut prefix = dest.clone().into_os_string();
    prefix.push("/");
    let mut c = git();
    c.env("GIT_INDEX_FILE", &index)
        .arg("-C")
        .arg(repo)
        .args(["checkout-index", "-a", "-f"])
        .arg({
            let mut arg = std::ffi::OsString::from("--prefix=");
            arg.push(&prefix);
            arg
        });
    run(c, "git checkout-index")?;
    let mut c = git();
    c.arg("init").arg("-q").arg(&dest);
    run(c, "git init")?;
    let mut c = git();
    c.arg("-C").arg(&dest).args(["add", "-A", "-f"]);
    run(c, "git add")?;
    let mut c = git();
    c.arg("-C").arg(&dest).args([
        "-c",
        "user.name=saheeli import",
        "-c",
        "user.email=import@saheeli.invalid",
        "-c",
        "commit.gpgsign=false",
        "commit",
        "-q",
        "--no-verify",
        "--allow-empty",
        "-m",
        message,
    ]);
    run(c, "git commit")?;
    Ok(())
}

/// The `a/` and `b/` paths of a unified diff's `diff --git` headers, in
/// order, each once.
pub(crate) fn touched(patch: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (a, b) in headers(patch) {
        for p in [a, b] {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// The `(a, b)` paths of each `diff --git a/X b/Y` header.
pub(crate) fn headers(patch: &str) -> Vec<(String, String)> {
    patch
        .lines()
        .filter_map(|l| l.strip_prefix("diff --git "))
        .filter_map(header_paths)
        .collect()
}

fn header_paths(rest: &str) -> Option<(String, String)> {
    if rest.starts_with('"') {
        let (a, rest) = quoted(rest)?;
        let rest = rest.trim_start();
        let b = if rest.starts_with('"') {
            quoted(rest)?.0
        } else {
            rest.to_string()
        };
        return Some((a.strip_prefix("a/")?.into(), b.strip_prefix("b/")?.into()));
    }
    let rest = rest.strip_prefix("a/")?;
    if let Some(i) = rest.find(" \"b/") {
        return Some((rest[..i].into(), quoted(&rest[i + 1..])?.0[2..].into()));
    }
    // `a/X b/X`: split where both halves agree, else at the last ` b/`.
    let splits: Vec<usize> = rest.match_indices(" b/").map(|(i, _)| i).collect();
    let i = splits
        .iter()
        .copied()
        .find(|&i| rest[..i] == rest[i + 3..])
        .or(splits.last().copied())?;
    Some((rest[..i].into(), rest[i + 3..].into()))
}

/// A C-quoted path as git writes one (`"a/sp ace\303\251"`) and what follows.
fn quoted(s: &str) -> Option<(String, &str)> {
    let body = s.strip_prefix('"')?;
    let mut bytes = Vec::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((String::from_utf8_lossy(&bytes).into_owned(), &body[i + 1..])),
            '\\' => {
                let (_, e) = chars.next()?;
                match e {
                    'n' => bytes.push(b'\n'),
                    't' => bytes.push(b'\t'),
                    '0'..='7' => {
                        let mut n = e.to_digit(8)?;
                        for _ in 0..2 {
                            n = n * 8 + chars.next()?.1.to_digit(8)?;
                        }
                        bytes.push(u8::try_from(n).ok()?);
                    }
                    other => bytes.extend(other.to_string().as_bytes()),
                }
            }
            other => bytes.extend(other.to_string().as_bytes()),
        }
    }
    None
}

/// Whether a path from a patch is safe to write below a directory:
/// relative, without `..`, not inside `.git`.
pub(crate) fn safe_path(path: &str) -> bool {
    let p = Path::new(path);
    !path.is_empty()
        && p.is_relative()
        && p.components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
        && !p.components().any(|c| c.as_os_str() == ".git")
}

#[cfg(test)]
#[path = "git_tests.rs"]
mod tests;
