//! The toolbox: schemas the model sees, and dispatch from a tool call to
//! its implementation. A bad call (unknown tool, invalid JSON, missing or
//! extra argument) becomes an error text for the model, never a crash.

mod edit_file;
mod execute_shell;
mod files;

use std::time::Duration;

use saheeli_protocol::chat::{FunctionSpec, ToolSpec};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::workspace::Workspace;

/// What a tool hands back.
#[derive(Debug, Default)]
pub(crate) struct ToolOutput {
    pub text: String,
    pub ok: bool,
    pub exit_code: Option<i32>,
    pub truncated: bool,
    /// Set by `task_complete`: the agent's final message.
    pub complete: Option<String>,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            ok: true,
            ..Default::default()
        }
    }

    pub fn error(text: impl Into<String>) -> Self {
        ToolOutput {
            text: format!("error: {}", text.into()),
            ok: false,
            ..Default::default()
        }
    }
}

/// What tools need to know.
pub(crate) struct Toolbox {
    pub ws: Workspace,
    /// Cap on any one tool output, in bytes.
    pub max_output: usize,
    /// Default for `execute_shell` without `timeout_s`.
    pub shell_timeout: Duration,
}

fn spec(name: &str, description: &str, parameters: serde_json::Value) -> ToolSpec {
    ToolSpec {
        kind: "function".into(),
        function: FunctionSpec {
            name: name.into(),
            description: description.into(),
            parameters,
        },
    }
}

/// The tool schemas, as OpenAI `tools`.
pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        spec(
            "execute_shell",
            "Run a bash command in /workspace and return its combined stdout and stderr and exit code. \
             Output longer than the limit keeps its head and tail.",
            json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "The bash command line."},
                "timeout_s": {"type": "integer", "description": "Kill the command after this many seconds (default 120)."}
            }, "required": ["command"], "additionalProperties": false}),
        ),
        spec(
            "create_file",
            "Create or overwrite a file with the given content. Parent directories are created.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Path relative to /workspace."},
                "content": {"type": "string"}
            }, "required": ["path", "content"], "additionalProperties": false}),
        ),
        spec(
            "read_file",
            "Read a text file, with line numbers. Use offset (1-based line) and limit (lines) for large files.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "offset": {"type": "integer", "minimum": 1},
                "limit": {"type": "integer", "minimum": 1}
            }, "required": ["path"], "additionalProperties": false}),
        ),
        spec(
            "edit_file",
            "Replace one exact occurrence of old_str with new_str in a file. old_str must occur exactly once: \
             include enough surrounding lines to make it unique.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "old_str": {"type": "string"},
                "new_str": {"type": "string"}
            }, "required": ["path", "old_str", "new_str"], "additionalProperties": false}),
        ),
        spec(
            "list_files",
            "List files and directories below a path (default: the workspace), recursively, skipping .git.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"}
            }, "additionalProperties": false}),
        ),
        spec(
            "task_complete",
            "Call when the task is done, with a summary of what you did. This ends the session.",
            json!({"type": "object", "properties": {
                "message": {"type": "string", "description": "What was done, and how it was checked."}
            }, "required": ["message"], "additionalProperties": false}),
        ),
    ]
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskComplete {
    message: String,
}

fn parse<T: DeserializeOwned>(tool: &str, arguments: &str) -> Result<T, ToolOutput> {
    let raw = if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    };
    serde_json::from_str(raw).map_err(|e| {
        ToolOutput::error(format!(
            "invalid arguments for `{tool}`: {e}. Send a JSON object matching the tool's schema."
        ))
    })
}

impl Toolbox {
    /// Runs one tool call.
    pub async fn dispatch(&self, name: &str, arguments: &str) -> ToolOutput {
        let out = match name {
            "execute_shell" => match parse(name, arguments) {
                Ok(a) => execute_shell::run(self, a).await,
                Err(e) => e,
            },
            "create_file" => match parse(name, arguments) {
                Ok(a) => files::create_file(self, a),
                Err(e) => e,
            },
            "read_file" => match parse(name, arguments) {
                Ok(a) => files::read_file(self, a),
                Err(e) => e,
            },
            "edit_file" => match parse(name, arguments) {
                Ok(a) => edit_file::run(self, a),
                Err(e) => e,
            },
            "list_files" => match parse(name, arguments) {
                Ok(a) => files::list_files(self, a),
                Err(e) => e,
            },
            "task_complete" => match parse::<TaskComplete>(name, arguments) {
                Ok(a) => ToolOutput {
                    complete: Some(a.message),
                    ..ToolOutput::ok("Task marked complete.")
                },
                Err(e) => e,
            },
            other => ToolOutput::error(format!(
                "unknown tool `{other}`; the tools are execute_shell, create_file, read_file, \
                 edit_file, list_files and task_complete"
            )),
        };
        self.capped(out)
    }

    fn capped(&self, mut out: ToolOutput) -> ToolOutput {
        let (text, cut) = cap(&out.text, self.max_output);
        if cut {
            out.text = text;
            out.truncated = true;
        }
        out
    }
}

/// Keeps the head and tail of `text` within `max` bytes, stating the cut.
pub(crate) fn cap(text: &str, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text.to_string(), false);
    }
    let half = max / 2;
    let mut head_end = half;
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = text.len() - half;
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    let cut = tail_start - head_end;
    (
        format!(
            "{}\n[… {cut} bytes cut: output is limited to {max} bytes; head and tail kept …]\n{}",
            &text[..head_end],
            &text[tail_start..]
        ),
        true,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn toolbox() -> (tempfile::TempDir, Toolbox) {
        let d = tempfile::tempdir().unwrap();
        let tb = Toolbox {
            ws: Workspace::new(d.path()).unwrap(),
            max_output: 4096,
            shell_timeout: Duration::from_secs(10),
        };
        (d, tb)
    }

    #[test]
    fn cap_keeps_head_and_tail_on_char_boundaries() {
        let text = "é".repeat(1000); // 2000 bytes
        let (out, cut) = cap(&text, 101);
        assert!(cut);
        assert!(out.starts_with('é') && out.ends_with('é'));
        assert!(out.contains("bytes cut"));
        assert_eq!(cap("short", 100), ("short".into(), false));
    }

    #[tokio::test]
    async fn bad_calls_become_error_text() {
        let (_d, tb) = toolbox();
        for (name, args, needle) in [
            (
                "create_file",
                "{not json",
                "invalid arguments for `create_file`",
            ),
            ("create_file", r#"{"path": "a"}"#, "missing field `content`"),
            (
                "read_file",
                r#"{"path": "a", "extra": 1}"#,
                "unknown field `extra`",
            ),
            ("execute_shell", r#"{"command": 5}"#, "invalid type"),
            ("launch_missiles", "{}", "unknown tool `launch_missiles`"),
            ("task_complete", "{}", "missing field `message`"),
        ] {
            let out = tb.dispatch(name, args).await;
            assert!(!out.ok, "{name} {args}");
            assert!(out.text.contains(needle), "{name} {args}: {}", out.text);
            assert!(out.complete.is_none());
        }
    }

    #[tokio::test]
    async fn task_complete_carries_the_message() {
        let (_d, tb) = toolbox();
        let out = tb.dispatch("task_complete", r#"{"message": "done"}"#).await;
        assert!(out.ok);
        assert_eq!(out.complete.as_deref(), Some("done"));
    }
}
