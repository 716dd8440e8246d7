//! `list_files`: a recursive, sorted, bounded listing below a path,
//! skipping `.git`. Symlinks are shown with their target, never followed.

use std::path::Path;

use serde::Deserialize;

use super::{ToolOutput, Toolbox};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListFiles {
    path: Option<String>,
}

const MAX_LISTED: usize = 1000;

pub(crate) fn run(tb: &Toolbox, a: ListFiles) -> ToolOutput {
    let raw = a.path.unwrap_or_else(|| ".".into());
    let path = match tb.ws.resolve(&raw) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    if !path.is_dir() {
        return ToolOutput::error(format!("`{raw}` is not a directory"));
    }
    let mut lines = Vec::new();
    let mut more = 0usize;
    walk(&path, &path, &mut lines, &mut more);
    if lines.is_empty() {
        return ToolOutput::ok(format!("{} is empty", tb.ws.display(&path)));
    }
    let mut out = lines.join("\n");
    out.push('\n');
    if more > 0 {
        out.push_str(&format!(
            "[… and {more} more entries; list a subdirectory to see them]\n"
        ));
    }
    ToolOutput::ok(out)
}

/// Depth-first, sorted, directories marked with `/`.
fn walk(base: &Path, dir: &Path, out: &mut Vec<String>, more: &mut usize) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = rd.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        if e.file_name() == ".git" {
            continue;
        }
        let Ok(ft) = e.file_type() else {
            continue;
        };
        if out.len() >= MAX_LISTED {
            // Counted, not listed; a directory counts as one.
            *more += 1;
            continue;
        }
        let p = e.path();
        let rel = p.strip_prefix(base).unwrap_or(&p).display().to_string();
        if ft.is_dir() {
            out.push(format!("{rel}/"));
            walk(base, &p, out, more);
        } else if ft.is_symlink() {
            let to = std::fs::read_link(&p)
                .map(|t| t.display().to_string())
                .unwrap_or_default();
            out.push(format!("{rel} -> {to}"));
        } else {
            out.push(rel);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::tools::tests::toolbox;

    #[tokio::test]
    async fn lists_recursively_skipping_git() {
        let (d, tb) = toolbox();
        std::fs::create_dir_all(d.path().join("src/sub")).unwrap();
        std::fs::write(d.path().join("src/a.txt"), "").unwrap();
        std::fs::write(d.path().join("src/sub/b.txt"), "").unwrap();
        std::fs::create_dir_all(d.path().join(".git/objects")).unwrap();
        std::os::unix::fs::symlink("/etc", d.path().join("link")).unwrap();
        let out = tb.dispatch("list_files", "{}").await;
        assert_eq!(
            out.text,
            "link -> /etc\nsrc/\nsrc/a.txt\nsrc/sub/\nsrc/sub/b.txt\n"
        );
        let out = tb.dispatch("list_files", r#"{"path": "src/sub"}"#).await;
        assert_eq!(out.text, "b.txt\n");
        let out = tb.dispatch("list_files", r#"{"path": "src/a.txt"}"#).await;
        assert!(!out.ok && out.text.contains("not a directory"));
    }

    #[tokio::test]
    async fn long_listings_are_bounded() {
        let (d, tb) = toolbox();
        for i in 0..1005 {
            std::fs::write(d.path().join(format!("f{i:04}")), "").unwrap();
        }
        let out = tb.dispatch("list_files", "{}").await;
        assert!(
            out.text.contains("[… and 5 more entries"),
            "{}",
            &out.text[out.text.len() - 200..]
        );
    }
}
