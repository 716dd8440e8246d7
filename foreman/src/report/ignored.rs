//! Which paths `changes.patch` leaves out as ignored (and a verify attempt
//! removes before it runs, `routes::verify_tree`): [`DEFAULT_IGNORED`]
//! (bytecode, tools' caches) and every `.gitignore` of the **submitted**
//! workspace, as submitted, read as git reads them. A `.gitignore` the
//! agent wrote or changed says nothing (HOSTILE.md N25, N26: a `*` beside
//! a planted module hid it, and `calc.py` appended to `.gitignore` hid the
//! change to a submitted file). A `.gitignore` applies to the directory it
//! is in and below, its patterns relative to that directory; the deepest
//! one that says anything about a path decides (so a nested `!pattern`
//! re-includes what a shallower file ignored); and a path in an ignored
//! directory is ignored whatever a deeper file says. Only added paths are
//! ever left out: a submitted path is tracked, as git tracks its index.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::patch::{Content, Kind};
use super::tree::{Files, Tree};

/// What a patch leaves out whatever the workspace's `.gitignore` says:
/// bytecode and tools' caches, which a task's test run leaves behind.
pub(crate) const DEFAULT_IGNORED: &[&str] = &[
    "__pycache__/",
    "*.py[cod]",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".tox/",
    "node_modules/.cache/",
    ".DS_Store",
];

/// Most `.gitignore` files read from one workspace.
const MAX_GITIGNORES: usize = 1000;

/// The rules of one submitted workspace.
pub(crate) struct Ignored {
    /// Each directory with a `.gitignore` (relative; "" is the top, which
    /// also holds [`DEFAULT_IGNORED`], below its own lines), deepest first.
    rules: Vec<(PathBuf, Cow<'static, Gitignore>)>,
}

impl Ignored {
    /// The rules of the submitted workspace `tree` (its `.gitignore` files
    /// read from `files`, the submitted tar; a link is never followed).
    pub fn of(files: &Files<'_>, tree: &Tree) -> Ignored {
        let mut dirs: Vec<PathBuf> = tree
            .iter()
            .filter(|(_, e)| matches!(e.kind, Kind::File { .. }))
            .filter_map(|(path, _)| {
                let path = Path::new(OsStr::from_bytes(path));
                (path.file_name()? == ".gitignore").then(|| path.parent().map(Path::to_path_buf))?
            })
            .take(MAX_GITIGNORES)
            .collect();
        if !dirs.iter().any(|d| d.as_os_str().is_empty()) {
            dirs.push(PathBuf::new());
        }
        // Deepest first; the top last.
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        let rules = dirs
            .into_iter()
            .map(|dir| {
                let rules = read_rules(files, tree, &dir);
                (dir, rules)
            })
            .collect();
        Ignored { rules }
    }

    /// Whether the patch leaves `path` out if it is added (a file or
    /// link, relative).
    pub fn ignores(&self, path: &[u8]) -> bool {
        self.ignores_as(path, false)
    }

    /// Whether the rules ignore `path`, a directory when `is_dir` (and so
    /// everything below it), a file or link otherwise.
    pub fn ignores_as(&self, path: &[u8], is_dir: bool) -> bool {
        let path = Path::new(OsStr::from_bytes(path));
        let mut prefix = PathBuf::new();
        let parts: Vec<_> = path.components().collect();
        for (i, part) in parts.iter().enumerate() {
            prefix.push(part);
            // Each leading directory first: an ignored one hides all below.
            let dir = i + 1 < parts.len() || is_dir;
            if self.decides(&prefix, dir) == Some(true) {
                return true;
            }
        }
        false
    }

    /// What the deepest `.gitignore` that names `path` says (Some(true):
    /// ignored, Some(false): re-included), None when none does.
    fn decides(&self, path: &Path, dir: bool) -> Option<bool> {
        self.rules
            .iter()
            .filter_map(|(base, rules)| {
                // A directory's own `.gitignore` speaks of what is below it.
                let rel = path
                    .strip_prefix(base)
                    .ok()
                    .filter(|r| !r.as_os_str().is_empty())?;
                match rules.matched(rel, dir) {
                    Match::None => None,
                    Match::Ignore(_) => Some(true),
                    Match::Whitelist(_) => Some(false),
                }
            })
            .next()
    }
}

/// The rules of [`DEFAULT_IGNORED`] alone: a workspace with no top-level
/// `.gitignore` (most tasks') is matched against these, built once rather
/// than compiled to a glob set again for every task collected.
static DEFAULTS_ONLY: LazyLock<Gitignore> = LazyLock::new(|| {
    let mut b = GitignoreBuilder::new("");
    for rule in DEFAULT_IGNORED {
        let _ = b.add_line(None, rule);
    }
    b.build().unwrap_or_else(|_| Gitignore::empty())
});

/// The `.gitignore` of `dir` in the submitted `tree` (the top's after
/// [`DEFAULT_IGNORED`]); a line git would refuse is skipped, as git skips
/// it. Paths are matched relative to `dir`.
fn read_rules(files: &Files<'_>, tree: &Tree, dir: &Path) -> Cow<'static, Gitignore> {
    let top = dir.as_os_str().is_empty();
    let key = dir.join(".gitignore").into_os_string().into_encoded_bytes();
    let text = tree
        .get(&key)
        .filter(|e| matches!(e.kind, Kind::File { .. }))
        .and_then(|e| files.side(e).ok())
        .and_then(|side| match side.content {
            Content::Text(t) => Some(t),
            Content::Binary(b) => Some(String::from_utf8_lossy(&b).into_owned()),
            Content::TooLarge(_) => None,
        });
    let Some(text) = text else {
        return if top {
            Cow::Borrowed(&DEFAULTS_ONLY)
        } else {
            Cow::Owned(Gitignore::empty())
        };
    };
    let defaults: &[&str] = if top { DEFAULT_IGNORED } else { &[] };
    // Matched with paths relative to `dir`: no root to strip.
    let mut b = GitignoreBuilder::new("");
    for rule in defaults {
        let _ = b.add_line(None, rule);
    }
    for line in text.lines() {
        let _ = b.add_line(None, line);
    }
    Cow::Owned(b.build().unwrap_or_else(|_| Gitignore::empty()))
}
