//! The toolbox: schemas the model sees, and dispatch from a tool call to
//! its implementation. A bad call (unknown tool, invalid JSON, missing or
//! extra argument) becomes an error text for the model, never a crash.

mod call;
mod create_file;
mod edit_file;
mod execute_shell;
mod list_files;
mod output;
mod read_file;
mod shell;
mod step_done;
mod step_start;
mod task_complete;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use saheeli_protocol::chat::{FunctionSpec, ToolSpec};
use saheeli_protocol::template::Step;
use saheeli_protocol::tools::{BUILT_IN, Offered};
use serde::de::DeserializeOwned;

use crate::desk::Desk;
use crate::workspace::Workspace;

pub(crate) use call::{Builtin, Delegate, Human, Tool};
pub(crate) use output::ToolOutput;
pub(crate) use step_done::{
    instructions as step_instructions, needs_approval as step_done_needs_approval,
    spec_for as step_spec,
};
pub(crate) use step_start::{named as step_named, spec_for as step_start_spec};

/// What tools need to know.
#[derive(Clone)]
pub(crate) struct Toolbox {
    pub ws: Workspace,
    /// Cap on any one tool output, in bytes.
    pub max_output: usize,
    /// Default for `execute_shell` without `timeout_s`.
    pub shell_timeout: Duration,
    /// The template's steps (`step_done`); empty for most tasks.
    pub steps: Vec<Step>,
    /// Where `step_done` records a step (the foreman's gateway).
    pub desk: Option<Arc<Desk>>,
    /// The steps this task has started, as far as this servo heard (a
    /// `step_start`, or a `step_done` that reached the step): a gated
    /// step's `step_done` waits for an approval unless its step is here.
    /// The foreman decides either way; this only asks at the right time.
    pub steps_started: Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
    /// The persistent shell `execute_shell` runs in, started at its first
    /// call (None until then, and while a command runs).
    pub shell: Arc<tokio::sync::Mutex<Option<shell::Shell>>>,
    /// Set when a shell the model used is gone (a parked session started
    /// again, or processes stopped for verification): the next command
    /// tells the model it has a fresh one.
    pub shell_reset: Arc<AtomicBool>,
    /// Where the workspace tools run: the agent's tool runner (the servo),
    /// or here (the runner itself, and unit tests).
    pub runner: Option<Arc<crate::runner::Link>>,
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

/// The schema of a built-in tool with a fixed one.
fn table_spec(t: &saheeli_protocol::tools::BuiltIn) -> Option<ToolSpec> {
    t.parameters.map(|p| spec(t.name, t.description, p()))
}

/// The tools that reach a human: `ask_user` always, `propose_plan` when
/// the task has a plan gate (or is a plan-only run).
pub(crate) fn human_specs(plan: bool) -> Vec<ToolSpec> {
    BUILT_IN
        .iter()
        .filter(|t| t.offered == Offered::Always || (plan && t.offered == Offered::PlanGate))
        .filter_map(table_spec)
        .collect()
}

/// `spawn_task` and `wait_tasks`, for a task granted `delegate:`.
pub(crate) fn delegate_specs() -> Vec<ToolSpec> {
    BUILT_IN
        .iter()
        .filter(|t| t.offered == Offered::Delegate)
        .filter_map(table_spec)
        .collect()
}

/// The toolbox's schemas, as OpenAI `tools` (the built-in tools `tools:`
/// may narrow).
pub(crate) fn specs() -> Vec<ToolSpec> {
    BUILT_IN
        .iter()
        .filter(|t| t.offered == Offered::Toolbox)
        .filter_map(table_spec)
        .collect()
}

/// The answer to a call of a tool the task was not offered: it names every
/// tool that was (built-in, `ask_user`, `step_done`, capabilities'), so
/// the model can pick one (it listed a fixed six, issue 27).
pub(crate) fn unknown_tool(name: &str, offered: &[ToolSpec]) -> ToolOutput {
    let names: Vec<&str> = offered.iter().map(|t| t.function.name.as_str()).collect();
    ToolOutput::error(format!(
        "unknown tool `{name}`: it is not one of this task's tools, which are {}",
        names.join(", ")
    ))
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
    /// Whether this servo heard step `name` start.
    pub fn started(&self, name: &str) -> bool {
        self.steps_started.lock().unwrap().contains(name)
    }

    pub fn mark_started(&self, name: &str) {
        self.steps_started.lock().unwrap().insert(name.to_string());
    }

    /// Runs one tool call by name (the tool runner's requests, tests).
    pub async fn dispatch(&self, name: &str, arguments: &str) -> ToolOutput {
        match Builtin::named(name) {
            Some(tool) => self.run(tool, arguments).await,
            None => self.capped(unknown_tool(name, &specs())),
        }
    }

    /// Runs one of the toolbox's tools. Whatever the model sent, the
    /// answer is text for it; the output is capped at `max_output` bytes.
    pub async fn run(&self, tool: Builtin, arguments: &str) -> ToolOutput {
        let name = tool.name();
        if let Some(runner) = &self.runner
            && tool.row().in_runner
        {
            return self.capped(runner.call(name, arguments).await);
        }
        let out = match tool {
            Builtin::Shell => match parse(name, arguments) {
                Ok(a) => execute_shell::run(self, a).await,
                Err(e) => e,
            },
            Builtin::CreateFile => match parse(name, arguments) {
                Ok(a) => self.off_runtime(move |tb| create_file::run(tb, a)).await,
                Err(e) => e,
            },
            Builtin::ReadFile => match parse(name, arguments) {
                Ok(a) => self.off_runtime(move |tb| read_file::run(tb, a)).await,
                Err(e) => e,
            },
            Builtin::EditFile => match parse(name, arguments) {
                Ok(a) => self.off_runtime(move |tb| edit_file::run(tb, a)).await,
                Err(e) => e,
            },
            Builtin::ListFiles => match parse(name, arguments) {
                Ok(a) => self.off_runtime(move |tb| list_files::run(tb, a)).await,
                Err(e) => e,
            },
            Builtin::Complete => match parse(name, arguments) {
                Ok(a) => task_complete::run(a),
                Err(e) => e,
            },
            // The agent answers a tool it did not offer before this (with
            // the offered list); here only a step tool of a task without steps.
            Builtin::StepDone | Builtin::StepStart if self.steps.is_empty() => {
                unknown_tool(name, &specs())
            }
            Builtin::StepDone => match parse(name, arguments) {
                Ok(a) => step_done::run(self, a).await,
                Err(e) => e,
            },
            Builtin::StepStart => match parse(name, arguments) {
                Ok(a) => step_start::run(self, a).await,
                Err(e) => e,
            },
        };
        self.capped(out)
    }

    /// Stops the agent's shell (with `stop`, every process the agent left
    /// running); the model hears at its next command that its shell is
    /// new when one was running, or when `note`.
    pub async fn reset_agent(&self, stop: bool, note: bool) {
        if let Some(runner) = &self.runner {
            return runner.reset(stop, note).await;
        }
        let had = self.shell.lock().await.take().is_some();
        if had || note {
            self.shell_reset
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The model's next command is to hear that its shell is new (a
    /// parked session started again in a new container).
    pub fn note_fresh_shell(&self) {
        match &self.runner {
            Some(runner) => runner.note_fresh(),
            None => self
                .shell_reset
                .store(true, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Runs a file tool on a blocking thread. The servo's runtime has one
    /// thread, which also runs the SIGTERM handler and the time budget: a
    /// file call that blocks (a FIFO, a hung mount) must not stop those.
    /// When the loop is abandoned (SIGTERM, deadline) the thread is left
    /// behind; the process exits without waiting for it.
    async fn off_runtime(
        &self,
        f: impl FnOnce(&Toolbox) -> ToolOutput + Send + 'static,
    ) -> ToolOutput {
        let tb = self.clone();
        tokio::task::spawn_blocking(move || f(&tb))
            .await
            .unwrap_or_else(|e| ToolOutput::error(format!("the tool failed: {e}")))
    }

    pub(crate) fn capped(&self, mut out: ToolOutput) -> ToolOutput {
        let (text, cut) = output::cap(&out.text, self.max_output);
        if cut {
            out.text = text;
            out.truncated = true;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn toolbox() -> (tempfile::TempDir, Toolbox) {
        let d = tempfile::tempdir().unwrap();
        let tb = Toolbox {
            ws: Workspace::new(d.path()).unwrap(),
            max_output: 4096,
            shell_timeout: Duration::from_secs(10),
            steps: Vec::new(),
            desk: None,
            shell: Arc::default(),
            shell_reset: Arc::default(),
            steps_started: Arc::default(),
            runner: None,
        };
        (d, tb)
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

    #[tokio::test]
    async fn long_output_of_any_tool_is_capped() {
        let (d, tb) = toolbox();
        std::fs::write(d.path().join("one-long-line"), "x".repeat(10_000)).unwrap();
        let out = tb
            .dispatch("read_file", r#"{"path": "one-long-line"}"#)
            .await;
        assert!(out.ok && out.truncated);
        assert!(out.text.len() <= tb.max_output);
        assert!(out.text.contains("bytes cut"));
    }

    /// Issue 27 item 8: the unknown-tool answer listed a fixed six tools,
    /// not `ask_user`, `step_done` or a capability's.
    #[test]
    fn unknown_tool_lists_every_tool_offered() {
        let mut offered = specs();
        offered.extend(human_specs(false));
        offered.push(spec(
            "git__status",
            "A capability's tool.",
            json!({"type": "object"}),
        ));
        let names: Vec<String> = offered.iter().map(|t| t.function.name.clone()).collect();
        assert!(names.iter().any(|n| n == "ask_user"), "{names:?}");
        let out = unknown_tool("launch_missiles", &offered);
        assert!(!out.ok);
        assert!(
            out.text.contains("unknown tool `launch_missiles`"),
            "{}",
            out.text
        );
        assert!(out.text.contains("is not one of this task's tools"));
        for n in &names {
            assert!(out.text.contains(n.as_str()), "{n} missing: {}", out.text);
        }
    }

    #[tokio::test]
    async fn every_spec_is_an_object_schema_with_a_dispatch() {
        let names: Vec<_> = specs().into_iter().map(|s| s.function.name).collect();
        assert_eq!(
            names,
            [
                "execute_shell",
                "create_file",
                "read_file",
                "edit_file",
                "list_files",
                "task_complete"
            ]
        );
        let (_d, tb) = toolbox();
        for s in specs() {
            assert_eq!(s.kind, "function");
            assert_eq!(s.function.parameters["type"], "object");
            // Every advertised tool reaches its own code (empty arguments
            // are answered by that tool, not as an unknown one).
            let out = tb.dispatch(&s.function.name, "{}").await;
            assert!(
                !out.text.contains("unknown tool"),
                "{}: {}",
                s.function.name,
                out.text
            );
        }
    }
}
