//! Which paths `changes.patch` leaves out as ignored: [`DEFAULT_IGNORED`]
//! (bytecode, tools' caches) and every `.gitignore` in the collected
//! workspace, read as git reads them. A `.gitignore` applies to the
//! directory it is in and below, its patterns relative to that directory;
//! the deepest one that says anything about a path decides (so a nested
//! `!pattern` re-includes what a shallower file ignored); and a path in an
//! ignored directory is ignored whatever a deeper file says.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::patch::Kind;
use super::tree::Tree;

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

/// Largest `.gitignore` read (the agent's file: read without following a
/// link, and capped).
pub(super) const MAX_GITIGNORE: u64 = 1 << 20;

/// Most `.gitignore` files read from one workspace.
const MAX_GITIGNORES: usize = 1000;

/// The rules of one collected workspace.
pub(super) struct Ignored {
    /// Each directory with a `.gitignore` (relative; "" is the top, which
    /// also holds [`DEFAULT_IGNORED`], below its own lines), deepest first.
    rules: Vec<(PathBuf, Cow<'static, Gitignore>)>,
}

impl Ignored {
    /// The rules of the workspace collected in `results`, whose files are
    /// `tree` (where its `.gitignore` files are found).
    pub fn of(results: &Path, tree: &Tree) -> Ignored {
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
                let rules = read_rules(results, &dir);
                (dir, rules)
            })
            .collect();
        Ignored { rules }
    }

    /// Whether the patch leaves `path` out (a file or link, relative).
    pub fn ignores(&self, path: &[u8]) -> bool {
        let path = Path::new(OsStr::from_bytes(path));
        let mut prefix = PathBuf::new();
        let parts: Vec<_> = path.components().collect();
        for (i, part) in parts.iter().enumerate() {
            prefix.push(part);
            // Each leading directory first: an ignored one hides all below.
            let dir = i + 1 < parts.len();
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

/// The `.gitignore` of `dir` in `results` (the top's after
/// [`DEFAULT_IGNORED`]); a line git would refuse is skipped, as git skips
/// it. Paths are matched relative to `dir`, so the rules do not depend on
/// where `results` is.
fn read_rules(results: &Path, dir: &Path) -> Cow<'static, Gitignore> {
    let top = dir.as_os_str().is_empty();
    let root = results.join(dir);
    let file = match crate::collect::open_regular(&root.join(".gitignore")) {
        Ok(Some(f)) => Some(f),
        _ if top => return Cow::Borrowed(&DEFAULTS_ONLY),
        _ => None,
    };
    let defaults: &[&str] = if top { DEFAULT_IGNORED } else { &[] };
    let mut b = GitignoreBuilder::new(&root);
    for rule in defaults {
        let _ = b.add_line(None, rule);
    }
    if let Some(f) = file {
        let mut text = String::new();
        if f.take(MAX_GITIGNORE).read_to_string(&mut text).is_ok() {
            for line in text.lines() {
                let _ = b.add_line(None, line);
            }
        }
    }
    Cow::Owned(b.build().unwrap_or_else(|_| Gitignore::empty()))
}
