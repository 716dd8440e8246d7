//! The files `spawn_task`'s `workspace` copies from this workspace into a
//! child's. The workspace is the agent's, so it is hostile: a path must be
//! relative and stay inside, no link on the way is followed (a link met
//! while walking a directory is left out), only regular UTF-8 files are
//! read (FIFOs and devices are never opened), and counts and sizes are
//! capped. The foreman checks all of it again.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use saheeli_protocol::delegate::{File, MAX_FILE_BYTES, MAX_FILES, MAX_FILES_BYTES};

/// Reads `paths` (files or directories, relative to `root`). Blocking.
pub(super) fn collect(root: &Path, paths: &[String]) -> Result<Vec<File>, String> {
    let mut out = Collected::default();
    for raw in paths {
        let rel = relative(raw)?;
        // Every component but the last must be a real directory, the last
        // a file or a directory: no link anywhere on the way.
        let mut at = root.to_path_buf();
        for c in rel.components() {
            at.push(c);
            let meta = at
                .symlink_metadata()
                .map_err(|e| format!("workspace path `{raw}`: {e}"))?;
            if meta.file_type().is_symlink() {
                return Err(format!(
                    "workspace path `{raw}` goes through a symbolic link; links are not copied"
                ));
            }
        }
        out.walk(root, &rel, raw)?;
    }
    Ok(out.files)
}

/// A model's path as a relative one with no `..`, or why not.
fn relative(raw: &str) -> Result<PathBuf, String> {
    let p = Path::new(raw.trim());
    let p = p.strip_prefix("/workspace").unwrap_or(p);
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => {
                return Err(format!(
                    "workspace path `{raw}` must be relative to /workspace, without `..`"
                ));
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err(format!(
            "workspace path `{raw}` names the whole workspace; list the files or directories to copy"
        ));
    }
    Ok(out)
}

#[derive(Default)]
struct Collected {
    files: Vec<File>,
    bytes: usize,
}

impl Collected {
    fn walk(&mut self, root: &Path, rel: &Path, raw: &str) -> Result<(), String> {
        let path = root.join(rel);
        let meta = path
            .symlink_metadata()
            .map_err(|e| format!("workspace path `{raw}`: {e}"))?;
        if meta.is_dir() {
            let mut names: Vec<_> = std::fs::read_dir(&path)
                .map_err(|e| format!("reading `{}`: {e}", rel.display()))?
                .filter_map(|e| e.ok().map(|e| e.file_name()))
                .collect();
            names.sort();
            for name in names {
                let child = rel.join(&name);
                let m = root.join(&child).symlink_metadata();
                // Links and anything not a file or directory are left out.
                if m.is_ok_and(|m| m.is_dir() || m.is_file()) {
                    self.walk(root, &child, raw)?;
                }
            }
            return Ok(());
        }
        if !meta.is_file() {
            return Err(format!("workspace path `{raw}` is not a regular file"));
        }
        if self.files.len() >= MAX_FILES {
            return Err(format!(
                "more than {MAX_FILES} files to copy; name fewer paths"
            ));
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| format!("opening `{}`: {e}", rel.display()))?;
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("reading `{}`: {e}", rel.display()))?;
        if bytes.len() > MAX_FILE_BYTES {
            return Err(format!(
                "`{}` is larger than {} KiB; copy smaller files",
                rel.display(),
                MAX_FILE_BYTES / 1024
            ));
        }
        self.bytes += bytes.len();
        if self.bytes > MAX_FILES_BYTES {
            return Err(format!(
                "the files to copy pass {} MiB; name fewer",
                MAX_FILES_BYTES / (1024 * 1024)
            ));
        }
        let content = String::from_utf8(bytes).map_err(|_| {
            format!(
                "`{}` is not UTF-8 text; only text files are copied",
                rel.display()
            )
        })?;
        self.files.push(File {
            path: rel.to_string_lossy().into_owned(),
            content,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_and_directories_are_read_links_are_not() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join("src/sub")).unwrap();
        std::fs::write(root.join("src/a.txt"), "a").unwrap();
        std::fs::write(root.join("src/sub/b.txt"), "b").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("src/passwd")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("etc")).unwrap();
        let got = collect(root, &["src".into()]).unwrap();
        let names: Vec<_> = got.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(names, ["src/a.txt", "src/sub/b.txt"]);
        for bad in ["../x", "/etc/passwd", "etc/passwd", "src/passwd", "."] {
            let e = collect(root, &[bad.into()]).unwrap_err();
            assert!(
                e.contains("relative") || e.contains("link") || e.contains("whole"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn binary_and_large_files_are_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("bin"), [0xff, 0xfe, 0]).unwrap();
        std::fs::write(d.path().join("big"), vec![b'x'; MAX_FILE_BYTES + 1]).unwrap();
        assert!(
            collect(d.path(), &["bin".into()])
                .unwrap_err()
                .contains("UTF-8")
        );
        assert!(
            collect(d.path(), &["big".into()])
                .unwrap_err()
                .contains("larger")
        );
    }
}
