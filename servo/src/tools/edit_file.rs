//! `edit_file`: replace one exact, unique span of text.

use serde::Deserialize;

use super::{ToolOutput, Toolbox};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EditFile {
    path: String,
    old_str: String,
    new_str: String,
}

pub(crate) fn run(tb: &Toolbox, a: EditFile) -> ToolOutput {
    let path = match tb.ws.resolve(&a.path) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    if a.old_str.is_empty() {
        return ToolOutput::error(
            "`old_str` is empty; give the exact text to replace (use create_file to write a whole file)",
        );
    }
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => return ToolOutput::error(format!("reading `{}`: {e}", a.path)),
    };
    match text.matches(a.old_str.as_str()).count() {
        0 => ToolOutput::error(format!(
            "`old_str` was not found in `{}`; read the file and copy the text exactly, whitespace included",
            a.path
        )),
        1 => {
            let new = text.replacen(a.old_str.as_str(), &a.new_str, 1);
            match std::fs::write(&path, new) {
                Ok(()) => ToolOutput::ok(format!(
                    "edited {}: replaced 1 occurrence",
                    tb.ws.display(&path)
                )),
                Err(e) => ToolOutput::error(format!("writing `{}`: {e}", a.path)),
            }
        }
        n => ToolOutput::error(format!(
            "`old_str` occurs {n} times in `{}`; include more surrounding text so it matches exactly once",
            a.path
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::tools::tests::toolbox;

    #[tokio::test]
    async fn replaces_a_unique_span_only() {
        let (d, tb) = toolbox();
        std::fs::write(d.path().join("f.py"), "a = 1\nb = 1\n").unwrap();
        let out = tb
            .dispatch(
                "edit_file",
                r#"{"path": "f.py", "old_str": "= 1", "new_str": "= 2"}"#,
            )
            .await;
        assert!(
            !out.ok && out.text.contains("occurs 2 times"),
            "{}",
            out.text
        );
        let out = tb
            .dispatch(
                "edit_file",
                r#"{"path": "f.py", "old_str": "c = 1", "new_str": "x"}"#,
            )
            .await;
        assert!(!out.ok && out.text.contains("not found"), "{}", out.text);
        let out = tb
            .dispatch(
                "edit_file",
                r#"{"path": "f.py", "old_str": "b = 1", "new_str": "b = 2"}"#,
            )
            .await;
        assert!(out.ok, "{}", out.text);
        assert_eq!(
            std::fs::read_to_string(d.path().join("f.py")).unwrap(),
            "a = 1\nb = 2\n"
        );
        let out = tb
            .dispatch(
                "edit_file",
                r#"{"path": "f.py", "old_str": "", "new_str": "x"}"#,
            )
            .await;
        assert!(!out.ok && out.text.contains("empty"));
    }
}
