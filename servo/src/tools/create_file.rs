//! `create_file`: write a whole file, creating its parent directories.

use serde::Deserialize;

use super::{ToolOutput, Toolbox};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateFile {
    path: String,
    content: String,
}

pub(crate) fn run(tb: &Toolbox, a: CreateFile) -> ToolOutput {
    let path = match tb.ws.resolve(&a.path) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    if path.is_dir() {
        return ToolOutput::error(format!("`{}` is a directory", a.path));
    }
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

#[cfg(test)]
mod tests {
    use crate::tools::tests::toolbox;

    #[tokio::test]
    async fn creates_parents_and_overwrites() {
        let (d, tb) = toolbox();
        let out = tb
            .dispatch(
                "create_file",
                r#"{"path": "src/deep/a.txt", "content": "one\n"}"#,
            )
            .await;
        assert!(out.ok, "{}", out.text);
        assert_eq!(out.text, "wrote src/deep/a.txt (4 bytes)");
        let out = tb
            .dispatch(
                "create_file",
                r#"{"path": "src/deep/a.txt", "content": "two\n"}"#,
            )
            .await;
        assert!(out.ok, "{}", out.text);
        assert_eq!(
            std::fs::read_to_string(d.path().join("src/deep/a.txt")).unwrap(),
            "two\n"
        );
        let out = tb
            .dispatch("create_file", r#"{"path": "src", "content": ""}"#)
            .await;
        assert!(
            !out.ok && out.text.contains("is a directory"),
            "{}",
            out.text
        );
    }
}
