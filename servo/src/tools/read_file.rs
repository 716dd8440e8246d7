//! `read_file`: a text file with line numbers, a window of it for large
//! files (`offset` is the 1-based first line, `limit` the number of lines).

use serde::Deserialize;

use super::{ToolOutput, Toolbox};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadFile {
    path: String,
    offset: Option<usize>,
    limit: Option<usize>,
}

const DEFAULT_LIMIT: usize = 2000;

pub(crate) fn run(tb: &Toolbox, a: ReadFile) -> ToolOutput {
    let path = match tb.ws.resolve(&a.path) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    if path.is_dir() {
        return ToolOutput::error(format!(
            "`{}` is a directory; use list_files to see what it holds",
            a.path
        ));
    }
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => return ToolOutput::error(format!("reading `{}`: {e}", a.path)),
    };
    let text = String::from_utf8_lossy(&bytes);
    let offset = a.offset.unwrap_or(1).max(1);
    let limit = a.limit.unwrap_or(DEFAULT_LIMIT).max(1);
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
    // Whole lines up to the output limit (less room for the note), so a
    // long file is paged rather than cut in the middle.
    let room = tb.max_output.saturating_sub(120);
    let mut out = String::new();
    let mut last = offset - 1;
    for (i, line) in text.lines().enumerate().skip(offset - 1).take(limit) {
        let numbered = format!("{:>6}\t{line}\n", i + 1);
        if !out.is_empty() && out.len() + numbered.len() > room {
            break;
        }
        out.push_str(&numbered);
        last = i + 1;
    }
    if last < total {
        out.push_str(&format!(
            "[lines {offset}-{last} of {total}; read more with offset={}]\n",
            last + 1
        ));
    }
    ToolOutput::ok(out)
}

#[cfg(test)]
mod tests {
    use crate::tools::tests::toolbox;

    #[tokio::test]
    async fn offset_and_limit_select_lines() {
        let (d, tb) = toolbox();
        std::fs::write(d.path().join("a.txt"), "one\ntwo\nthree\n").unwrap();
        let out = tb.dispatch("read_file", r#"{"path": "a.txt"}"#).await;
        assert_eq!(out.text, "     1\tone\n     2\ttwo\n     3\tthree\n");

        let out = tb
            .dispatch("read_file", r#"{"path": "a.txt", "offset": 2, "limit": 1}"#)
            .await;
        assert!(out.ok);
        assert_eq!(
            out.text,
            "     2\ttwo\n[lines 2-2 of 3; read more with offset=3]\n"
        );

        let out = tb
            .dispatch("read_file", r#"{"path": "a.txt", "offset": 3}"#)
            .await;
        assert_eq!(out.text, "     3\tthree\n");

        let out = tb
            .dispatch("read_file", r#"{"path": "a.txt", "offset": 9}"#)
            .await;
        assert!(!out.ok && out.text.contains("past the end of `a.txt` (3 lines)"));

        let out = tb
            .dispatch("read_file", r#"{"path": "a.txt", "offset": -1}"#)
            .await;
        assert!(
            !out.ok && out.text.contains("invalid value"),
            "{}",
            out.text
        );

        let out = tb.dispatch("read_file", r#"{"path": "nope.txt"}"#).await;
        assert!(
            !out.ok && out.text.contains("reading `nope.txt`"),
            "{}",
            out.text
        );
    }

    #[tokio::test]
    async fn long_files_are_paged_not_cut() {
        let (d, tb) = toolbox();
        let text: String = (1..=5000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(d.path().join("big.txt"), text).unwrap();
        let out = tb.dispatch("read_file", r#"{"path": "big.txt"}"#).await;
        assert!(out.ok && !out.truncated, "{}", out.text);
        assert!(out.text.len() <= 4096);
        assert!(out.text.starts_with("     1\tline 1\n"));
        assert!(
            out.text.contains("of 5000; read more with offset="),
            "{}",
            out.text
        );
    }
}
