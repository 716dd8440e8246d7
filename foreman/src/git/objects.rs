//! Reading a commit's files straight from a mirror's objects (issue 52,
//! definitions from Git): `ls-tree` names them and `cat-file` reads each
//! blob, so nothing is checked out and no link on the host is followed.
//! A symbolic link or a submodule in the tree is refused by name, and
//! every read is capped: the count of files, each one's size, the total.

use std::collections::BTreeMap;

use anyhow::bail;

use super::mirror::Mirror;
use super::run::git_ok;

/// The most a tree read may hold.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caps {
    pub files: usize,
    pub file_bytes: u64,
    pub total_bytes: u64,
}

/// One entry `ls-tree -l -z` lists: its mode, type, object, size, path.
type Entry = (String, String, String, u64, String);

fn entries(raw: &[u8]) -> anyhow::Result<Vec<Entry>> {
    let mut out = Vec::new();
    for rec in raw.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let text = std::str::from_utf8(rec)
            .map_err(|_| anyhow::anyhow!("a path in the tree is not UTF-8; rename it"))?;
        let Some((meta, path)) = text.split_once('\t') else {
            bail!("`git ls-tree` printed `{text}`, not an entry");
        };
        let mut f = meta.split_whitespace();
        let (Some(mode), Some(kind), Some(oid), Some(size)) =
            (f.next(), f.next(), f.next(), f.next())
        else {
            bail!("`git ls-tree` printed `{text}`, not an entry");
        };
        let size = size.parse().unwrap_or(0);
        out.push((mode.into(), kind.into(), oid.into(), size, path.into()));
    }
    Ok(out)
}

impl Mirror {
    /// The regular files of `commit` below `paths` (directories or
    /// files; absent ones are no error), path to bytes. Err names the
    /// first entry refused: a link, a submodule, or one over `caps`.
    pub fn files(
        &self,
        commit: &str,
        paths: &[&str],
        caps: Caps,
    ) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
        if commit.len() != 40 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!("`{commit}` is not a commit id");
        }
        let mut args = vec!["ls-tree", "-r", "-l", "-z", "--full-tree", commit, "--"];
        args.extend(paths);
        let listed = entries(&git_ok(&self.dir, &args, &[])?.stdout)?;
        if listed.len() > caps.files {
            bail!(
                "{} files, more than the {} allowed; keep fewer",
                listed.len(),
                caps.files
            );
        }
        let mut total = 0u64;
        let mut out = BTreeMap::new();
        for (mode, kind, oid, size, path) in listed {
            match (mode.as_str(), kind.as_str()) {
                ("100644" | "100755", "blob") => {}
                ("120000", _) => bail!(
                    "`{path}` is a symbolic link: definitions are read as regular files only; \
                     commit the file itself"
                ),
                (_, "commit") => bail!("`{path}` is a submodule: commit its files instead"),
                _ => bail!("`{path}` is not a regular file (mode {mode})"),
            }
            if size > caps.file_bytes {
                bail!(
                    "`{path}` is {size} bytes, more than the {} allowed for one file",
                    caps.file_bytes
                );
            }
            total += size;
            if total > caps.total_bytes {
                bail!(
                    "the files up to `{path}` are more than the {} bytes allowed in all",
                    caps.total_bytes
                );
            }
            let mut blob = git_ok(&self.dir, &["cat-file", "blob", &oid], &[])?.stdout;
            blob.truncate(caps.file_bytes as usize);
            out.insert(path, blob);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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

    const CAPS: Caps = Caps {
        files: 10,
        file_bytes: 100,
        total_bytes: 150,
    };

    #[test]
    fn files_come_from_objects_and_links_or_big_ones_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        std::fs::create_dir_all(repo.join("templates")).unwrap();
        git(&repo, &["init", "-q"]);
        std::fs::write(repo.join("templates/a.md"), "hello").unwrap();
        std::fs::write(repo.join("other.txt"), "not read").unwrap();
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-qm", "one"]);
        let m = Mirror::of(&d.path().join("state"), repo.to_str().unwrap());
        let c = m
            .fetch("main", None, &crate::git::Creds::default())
            .unwrap()
            .commit;
        let got = m.files(&c, &["templates", "saheeli.yaml"], CAPS).unwrap();
        assert_eq!(got.keys().collect::<Vec<_>>(), ["templates/a.md"]);
        assert_eq!(got["templates/a.md"], b"hello");
        // A link to a host file: refused by name, never followed.
        std::os::unix::fs::symlink("/etc/passwd", repo.join("templates/b.md")).unwrap();
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-qm", "link"]);
        let c = m
            .fetch("main", None, &crate::git::Creds::default())
            .unwrap()
            .commit;
        let e = m.files(&c, &["templates"], CAPS).unwrap_err().to_string();
        assert!(e.contains("`templates/b.md` is a symbolic link"), "{e}");
        std::fs::remove_file(repo.join("templates/b.md")).unwrap();
        std::fs::write(repo.join("templates/b.md"), "x".repeat(101)).unwrap();
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-qm", "big"]);
        let c = m
            .fetch("main", None, &crate::git::Creds::default())
            .unwrap()
            .commit;
        let e = m.files(&c, &["templates"], CAPS).unwrap_err().to_string();
        assert!(e.contains("`templates/b.md` is 101 bytes"), "{e}");
        assert!(m.files("../x", &["templates"], CAPS).is_err());
    }
}
