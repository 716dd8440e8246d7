//! `create_file`, `read_file` and `list_files`.

use std::path::Path;

use serde::Deserialize;

use super::{ToolOutput, Toolbox};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateFile {
    path: String,
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadFile {
    path: String,
    offset: Option<usize>,
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListFiles {
    path: Option<String>,
}

pub(crate) fn create_file(tb: &Toolbox, a: CreateFile) -> ToolOutput {
    let path = match tb.ws.resolve(&a.path) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    if let Some(parent) = path.parent()
        && let Err(e) = std::fs::create_dir_all(parent)
    {
        return ToolOutput::error(format!("creating the directories of `{}`: {e}", a.path));
    }
    match std::fs::write(&path, a.content.as_bytes()) {
        Ok(()) => ToolOutput::ok(format!(
            "wrote {} ({} bytes)",
            tb.ws.display(&path),
            a.content.len()
        )),
        Err(e) => ToolOutput::error(format!("writing `{}`: {e}", a.path)),
    }
}

const DEFAULT_READ_LINES: usize = 2000;

pub(crate) fn read_file(tb: &Toolbox, a: ReadFile) -> ToolOutput {
    let path = match tb.ws.resolve(&a.path) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => return ToolOutput::error(format!("reading `{}`: {e}", a.path)),
    };
    let text = String::from_utf8_lossy(&bytes);
    let offset = a.offset.unwrap_or(1).max(1);
    let limit = a.limit.unwrap_or(DEFAULT_READ_LINES).max(1);
    let total = text.lines().count();
    if total == 0 {
        return ToolOutput::ok(format!("{} is empty", tb.ws.display(&path)));
    }
    if offset > total {
        return ToolOutput::error(format!(
            "offset {offset} is past the end of `{}` ({total} lines)",
            a.path
        ));
    }
    let mut out = String::new();
    for (i, line) in text.lines().enumerate().skip(offset - 1).take(limit) {
        out.push_str(&format!("{:>6}\t{line}\n", i + 1));
    }
    let last = (offset - 1 + limit).min(total);
    if last < total {
        out.push_str(&format!(
            "[lines {offset}-{last} of {total}; read more with offset={}]\n",
            last + 1
        ));
    }
    ToolOutput::ok(out)
}

const MAX_LISTED: usize = 1000;

pub(crate) fn list_files(tb: &Toolbox, a: ListFiles) -> ToolOutput {
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
        out.push_str(&format!("[… and {more} more entries]\n"));
    }
    ToolOutput::ok(out)
}

/// Depth-first, sorted, directories marked with `/`; symlinks are listed, not followed.
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
        let p = e.path();
        let rel = p.strip_prefix(base).unwrap_or(&p).display().to_string();
        let ft = match e.file_type() {
            Ok(ft) => ft,
            Err(_) => continue,
        };
        if out.len() >= MAX_LISTED {
            *more += 1;
            continue;
        }
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
    async fn create_read_and_list() {
        let (d, tb) = toolbox();
        let out = tb
            .dispatch(
                "create_file",
                r#"{"path": "src/a.txt", "content": "one\ntwo\nthree\n"}"#,
            )
            .await;
        assert!(out.ok, "{}", out.text);
        assert_eq!(
            std::fs::read_to_string(d.path().join("src/a.txt")).unwrap(),
            "one\ntwo\nthree\n"
        );

        let out = tb
            .dispatch(
                "read_file",
                r#"{"path": "src/a.txt", "offset": 2, "limit": 1}"#,
            )
            .await;
        assert!(out.ok);
        assert!(
            out.text.contains("2\ttwo") && !out.text.contains("one"),
            "{}",
            out.text
        );
        assert!(out.text.contains("offset=3"), "{}", out.text);

        let out = tb
            .dispatch("read_file", r#"{"path": "src/a.txt", "offset": 9}"#)
            .await;
        assert!(!out.ok && out.text.contains("past the end"));

        std::fs::create_dir_all(d.path().join(".git/objects")).unwrap();
        let out = tb.dispatch("list_files", "{}").await;
        assert_eq!(out.text, "src/\nsrc/a.txt\n");
    }

    #[tokio::test]
    async fn escapes_are_refused_by_every_file_tool() {
        let (_d, tb) = toolbox();
        for (name, args) in [
            ("create_file", r#"{"path": "../x", "content": ""}"#),
            ("read_file", r#"{"path": "/etc/passwd"}"#),
            ("list_files", r#"{"path": "/"}"#),
            (
                "edit_file",
                r#"{"path": "../../etc/hosts", "old_str": "a", "new_str": "b"}"#,
            ),
        ] {
            let out = tb.dispatch(name, args).await;
            assert!(
                !out.ok && out.text.contains("outside the workspace"),
                "{name}: {}",
                out.text
            );
        }
    }
}
