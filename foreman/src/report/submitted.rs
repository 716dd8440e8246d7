//! The submitted workspace as a verify attempt sees it: its paths and the
//! ignore rules `changes.patch` follows (`ignored`), so that the tree a
//! verify command runs in is what the patch delivers
//! (`routes::verify_tree`).

use std::fs::File;
use std::io;
use std::path::Path;

use anyhow::Context;

use super::ignored::Ignored;
use super::patch::{Content, MAX_DIFF_FILE};
use super::tree::{Files, Tree, tar_tree};

pub(crate) use super::tree::is_saheelis;

/// The submitted workspace's tree and rules.
pub(crate) struct Submitted {
    tar: Option<File>,
    tree: Tree,
    ignored: Ignored,
}

impl Submitted {
    /// Reads the submitted tar `tar` (absent: a task without `workspace:`,
    /// which started from an empty tree). Blocking.
    pub fn open(tar: &Path) -> anyhow::Result<Submitted> {
        let tar = match File::open(tar) {
            Ok(f) => Some(f),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(e).with_context(|| format!("opening `{}`", tar.display()));
            }
        };
        let tree = match &tar {
            Some(f) => tar_tree(f).context("reading the submitted workspace")?,
            None => Tree::new(),
        };
        let ignored = Ignored::of(&Files { tar: tar.as_ref() }, &tree);
        Ok(Submitted { tar, tree, ignored })
    }

    /// Whether `path` (a file or link, relative) was submitted.
    pub fn has(&self, path: &[u8]) -> bool {
        self.tree.contains_key(path)
    }

    /// Whether a submitted path lies below directory `dir`.
    fn holds_below(&self, dir: &[u8]) -> bool {
        let mut from = dir.to_vec();
        from.push(b'/');
        self.tree
            .range(from.clone()..)
            .next()
            .is_some_and(|(p, _)| p.starts_with(&from))
    }

    /// For a path the patch leaves out as ignored (added, and named by the
    /// submitted rules or the defaults): what to remove so that it is gone,
    /// its highest ignored directory holding nothing submitted, or itself.
    /// None when the patch carries it.
    pub fn left_out(&self, path: &[u8]) -> Option<Vec<u8>> {
        if self.has(path) || !self.ignored.ignores(path) {
            return None;
        }
        let dirs = path
            .iter()
            .enumerate()
            .filter(|&(_, &c)| c == b'/')
            .map(|(i, _)| &path[..i]);
        for dir in dirs {
            if self.ignored.ignores_as(dir, true) && !self.holds_below(dir) {
                return Some(dir.to_vec());
            }
        }
        Some(path.to_vec())
    }

    /// The submitted bytes of `path` (a link: its target); None when it
    /// was not submitted or is over the diff cap.
    pub fn bytes(&self, path: &[u8]) -> Option<Vec<u8>> {
        let e = self.tree.get(path)?;
        let side = Files {
            tar: self.tar.as_ref(),
        }
        .side(e)
        .ok()?;
        match side.content {
            Content::Text(t) => Some(t.into_bytes()),
            Content::Binary(b) => Some(b),
            Content::TooLarge(_) => None,
        }
    }
}

/// The most of one file a verify attempt reads to compare it.
pub(crate) const MAX_COMPARED: u64 = MAX_DIFF_FILE;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::{PackOptions, pack_workspace};

    #[test]
    fn only_added_paths_the_submitted_rules_name_are_left_out() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        let put = |rel: &str, text: &str| {
            let p = ws.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        put(".gitignore", "build/\n*.log\n");
        put("calc.py", "x\n");
        put("vendor/.gitignore", "*\n!keep.txt\n");
        put("vendor/keep.txt", "k\n");
        let tar = d.path().join("t.tar");
        let opts = PackOptions {
            max_bytes: u64::MAX,
            include_ignored: true,
            ..Default::default()
        };
        put("build/old.o", "o\n");
        pack_workspace(&ws, &tar, &opts).unwrap();
        let s = Submitted::open(&tar).unwrap();
        let cases: &[(&str, Option<&str>)] = &[
            ("calc.py", None),
            ("new.py", None),
            ("x.log", Some("x.log")),
            ("a/b/x.log", Some("a/b/x.log")),
            // An ignored directory holding nothing submitted goes whole.
            ("lib/build/deep/y.txt", Some("lib/build")),
            // One holding a submitted file: only what was added.
            ("build/new.o", Some("build/new.o")),
            ("build/old.o", None),
            ("__pycache__/calc.cpython-311.pyc", Some("__pycache__")),
            ("vendor/keep.txt", None),
            ("vendor/other.txt", Some("vendor/other.txt")),
        ];
        for (path, want) in cases {
            let got = s.left_out(path.as_bytes());
            assert_eq!(got.as_deref(), want.map(str::as_bytes), "{path}");
        }
        assert_eq!(s.bytes(b"calc.py").as_deref(), Some(&b"x\n"[..]));
        assert_eq!(s.bytes(b"nope"), None);
        let none = Submitted::open(&d.path().join("absent.tar")).unwrap();
        assert!(!none.has(b"calc.py"));
        assert_eq!(none.left_out(b"a.pyc").as_deref(), Some(&b"a.pyc"[..]));
        assert_eq!(none.left_out(b"a.py"), None);
    }
}
