//! A mirror's checked-out trees, one directory per commit, kept for the
//! next task on the same commit (the newest [`KEEP`] by use): the hundredth
//! task at a commit copies a directory that is already there, as a
//! directory workspace does, instead of writing the commit's files out
//! again. Made and pruned under the mirror's lock; only the foreman writes
//! them (from git's objects), and a task gets a copy, never the directory.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::mirror::Mirror;

/// Trees kept per repository.
pub(crate) const KEEP: usize = 4;

impl Mirror {
    /// The directory of `commit`'s files (a full commit id), checked out
    /// when absent. Call it holding the mirror's lock, and copy from it
    /// before letting go.
    pub fn tree(&self, commit: &str) -> anyhow::Result<PathBuf> {
        if commit.len() != 40 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
            anyhow::bail!("`{commit}` is not a commit id");
        }
        let trees = self.dir.with_extension("trees");
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&trees)
                .with_context(|| format!("creating `{}`", trees.display()))?;
        }
        let dir = trees.join(commit);
        if !dir.is_dir() {
            let tmp = trees.join(format!(".new-{}", uuid::Uuid::new_v4().simple()));
            if let Err(e) = self.checkout(commit, &tmp) {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(e);
            }
            std::fs::rename(&tmp, &dir)
                .with_context(|| format!("moving the checkout to `{}`", dir.display()))?;
        }
        // Its use is its time: the least recently used go first.
        let now = std::time::SystemTime::now();
        if let Ok(f) = std::fs::File::open(&dir) {
            let _ = f.set_modified(now);
        }
        prune(&trees, &dir);
        Ok(dir)
    }
}

/// Removes all but the newest [`KEEP`] trees (never `keep`), and any
/// half-made one (a checkout that was cut off).
fn prune(trees: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(trees) else {
        return;
    };
    let mut dirs: Vec<(std::time::SystemTime, PathBuf)> = vec![];
    for e in entries.flatten() {
        let path = e.path();
        if e.file_name().as_encoded_bytes().starts_with(b".new-") {
            let _ = std::fs::remove_dir_all(&path);
        } else if path != keep
            && let Ok(m) = e.metadata()
        {
            dirs.push((m.modified().unwrap_or(std::time::UNIX_EPOCH), path));
        }
    }
    dirs.sort_by_key(|d| std::cmp::Reverse(d.0));
    for (_, old) in dirs.into_iter().skip(KEEP - 1) {
        let _ = std::fs::remove_dir_all(old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=T",
                "-c",
                "user.email=t@x",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    #[test]
    fn a_commits_tree_is_kept_for_the_next_task_and_old_ones_pruned() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        let m = Mirror::of(&d.path().join("state"), repo.to_str().unwrap());
        let mut made = vec![];
        for i in 0..(KEEP + 2) {
            std::fs::write(repo.join("f.txt"), format!("{i}\n")).unwrap();
            git(&repo, &["add", "-A"]);
            git(&repo, &["commit", "-qm", &format!("c{i}")]);
            let f = m
                .fetch("main", None, &crate::git::Creds::default())
                .unwrap();
            let _lock = m.lock().unwrap();
            let tree = m.tree(&f.commit).unwrap();
            assert_eq!(
                std::fs::read_to_string(tree.join("f.txt")).unwrap(),
                format!("{i}\n")
            );
            assert!(!tree.join(".git").exists());
            made.push(tree);
        }
        let kept = std::fs::read_dir(made[0].parent().unwrap())
            .unwrap()
            .count();
        assert_eq!(kept, KEEP);
        assert!(made.last().unwrap().is_dir() && !made[0].exists());
        // The same commit again: the same directory, not checked out anew.
        std::fs::write(made.last().unwrap().join("marker"), "").unwrap();
        let again = m
            .tree(made.last().unwrap().file_name().unwrap().to_str().unwrap())
            .unwrap();
        assert!(again.join("marker").exists());
        assert!(m.tree("../../etc").is_err());
    }
}
