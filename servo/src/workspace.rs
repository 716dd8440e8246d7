//! Path confinement: every path a tool touches resolves inside the
//! workspace, `..`, absolute paths and symlinks included.

use std::path::{Component, Path, PathBuf};

#[derive(Clone, Debug)]
pub(crate) struct Workspace {
    /// Canonical (symlink-free) root.
    root: PathBuf,
}

impl Workspace {
    pub fn new(root: &Path) -> std::io::Result<Workspace> {
        Ok(Workspace {
            root: root.canonicalize()?,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves a path given by the model (relative to the workspace, or
    /// absolute under it) to a real path inside the workspace. The target
    /// need not exist; whatever part of it exists must, after following
    /// symlinks, still be inside.
    pub fn resolve(&self, raw: &str) -> Result<PathBuf, String> {
        let outside = || {
            format!(
                "`{raw}` is outside the workspace; use paths inside {}",
                self.root.display()
            )
        };
        let given = Path::new(raw.trim());
        let joined = if given.is_absolute() {
            given.to_path_buf()
        } else {
            self.root.join(given)
        };
        // Lexical normalisation first: `..` may not climb above the root.
        let mut norm = PathBuf::new();
        for c in joined.components() {
            match c {
                Component::ParentDir => {
                    if !norm.pop() || !norm.starts_with(&self.root) {
                        return Err(outside());
                    }
                }
                Component::CurDir => {}
                other => norm.push(other),
            }
        }
        if !norm.starts_with(&self.root) {
            return Err(outside());
        }
        // Then the real path of the longest existing prefix.
        let mut existing = norm.as_path();
        let mut rest = Vec::new();
        while existing.symlink_metadata().is_err() {
            rest.push(existing.file_name().ok_or_else(outside)?.to_os_string());
            existing = existing.parent().ok_or_else(outside)?;
        }
        let real = existing.canonicalize().map_err(|e| {
            format!(
                "`{raw}`: {e} (`{}` is a symlink whose target is missing or loops)",
                self.display(existing)
            )
        })?;
        if !real.starts_with(&self.root) {
            return Err(outside());
        }
        let mut out = real;
        for part in rest.into_iter().rev() {
            out.push(part);
        }
        Ok(out)
    }

    /// The path as the model should see it: relative to the workspace.
    pub fn display(&self, p: &Path) -> String {
        match p.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => p.display().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let d = tempfile::tempdir().unwrap();
        let w = Workspace::new(d.path()).unwrap();
        (d, w)
    }

    #[test]
    fn relative_and_absolute_inside_are_fine() {
        let (_d, w) = ws();
        assert_eq!(w.resolve("a/b.txt").unwrap(), w.root().join("a/b.txt"));
        let abs = w.root().join("x").display().to_string();
        assert_eq!(w.resolve(&abs).unwrap(), w.root().join("x"));
        assert_eq!(w.resolve("a/../b").unwrap(), w.root().join("b"));
        assert_eq!(w.resolve("").unwrap(), w.root());
        assert_eq!(w.resolve(".").unwrap(), w.root());
        assert_eq!(w.resolve("./a//b/").unwrap(), w.root().join("a/b"));
    }

    #[test]
    fn paths_that_do_not_exist_yet_are_fine() {
        let (_d, w) = ws();
        std::fs::create_dir(w.root().join("src")).unwrap();
        assert_eq!(
            w.resolve("src/new/deeper/f.rs").unwrap(),
            w.root().join("src/new/deeper/f.rs")
        );
        assert_eq!(
            w.resolve("not/there/either").unwrap(),
            w.root().join("not/there/either")
        );
    }

    #[test]
    fn escapes_are_refused() {
        let (_d, w) = ws();
        for p in ["..", "../x", "a/../../x", "/etc/passwd", "/"] {
            let e = w.resolve(p).unwrap_err();
            assert!(e.contains("outside the workspace"), "{p}: {e}");
        }
    }

    #[test]
    fn symlinks_leading_out_are_refused() {
        let (_d, w) = ws();
        std::os::unix::fs::symlink("/etc", w.root().join("etc")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", w.root().join("pw")).unwrap();
        std::fs::create_dir(w.root().join("in")).unwrap();
        std::os::unix::fs::symlink(w.root().join("in"), w.root().join("inlink")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/dir", w.root().join("dangling")).unwrap();
        // A symlinked file, a symlinked directory (existing and new files
        // below it), and the same through an absolute path.
        for p in [
            "pw",
            "etc",
            "etc/passwd",
            "etc/new/file",
            "etc/../etc/hosts",
        ] {
            let e = w.resolve(p).unwrap_err();
            assert!(e.contains("outside the workspace"), "{p}: {e}");
        }
        let abs = w.root().join("etc/passwd").display().to_string();
        assert!(w.resolve(&abs).is_err());
        let e = w.resolve("dangling/f").unwrap_err();
        assert!(e.contains("symlink whose target is missing"), "{e}");
        // Links that stay inside are followed.
        assert_eq!(w.resolve("inlink/f").unwrap(), w.root().join("in/f"));
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    /// Paths built from parts that tend to escape: `..`, `/`, symlinks.
    fn hostile_path() -> impl Strategy<Value = String> {
        let part = prop_oneof![
            Just("..".to_string()),
            Just(".".to_string()),
            Just("".to_string()),
            Just("out".to_string()),
            Just("in".to_string()),
            Just("loop".to_string()),
            Just("etc".to_string()),
            "[a-z]{1,3}",
        ];
        (any::<bool>(), prop::collection::vec(part, 0..8))
            .prop_map(|(abs, parts)| format!("{}{}", if abs { "/" } else { "" }, parts.join("/")))
    }

    proptest! {
        #[test]
        fn resolved_paths_never_leave_the_workspace(raw in hostile_path()) {
            let d = tempfile::tempdir().unwrap();
            let root = d.path().join("ws");
            std::fs::create_dir_all(root.join("in/deeper")).unwrap();
            std::os::unix::fs::symlink("/etc", root.join("out")).unwrap();
            std::os::unix::fs::symlink("../..", root.join("in/deeper/up")).unwrap();
            std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
            let ws = Workspace::new(&root).unwrap();
            if let Ok(p) = ws.resolve(&raw) {
                prop_assert!(p.starts_with(ws.root()), "{raw} -> {}", p.display());
                // The part that exists really is inside, links followed.
                let mut existing = p.as_path();
                while existing.symlink_metadata().is_err() {
                    existing = existing.parent().unwrap();
                }
                let real = existing.canonicalize().unwrap();
                prop_assert!(real.starts_with(ws.root()), "{raw} -> {}", real.display());
            }
        }
    }
}
