//! The built-in tools: one table both sides read.
//!
//! The servo builds the schemas the model sees, its dispatch list, the
//! tool runner's list and the system prompt's tool list from [`BUILT_IN`];
//! the foreman checks `tools:` and `approve:` and shows `--dry-run`'s tool
//! list from it. A new built-in tool is one row here (and its code in
//! `servo/src/tools/`).
//!
//! Capability tools (`name__tool`) are not here: the gateway lists them.

use serde_json::{Value, json};

/// One built-in tool.
#[derive(Debug)]
pub struct BuiltIn {
    pub name: &'static str,
    /// What the model reads in the tool's schema.
    pub description: &'static str,
    /// The few words the system prompt says about it.
    pub summary: &'static str,
    /// Its JSON schema (`None`: built per task, as `step_done`'s names
    /// the task's steps).
    pub parameters: Option<fn() -> Value>,
    /// When the model is offered it.
    pub offered: Offered,
    /// Runs in the tool runner, as the agent's user (workspace tools).
    pub in_runner: bool,
    /// Acts (changes the workspace or ends the task): held back behind a
    /// plan gate until a plan is approved.
    pub acts: bool,
}

/// When a built-in tool is offered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offered {
    /// Always, unless the task's `tools:` leaves it out (the toolbox).
    Toolbox,
    /// Always; `tools:` cannot remove it.
    Always,
    /// Behind a plan gate or in a plan-only run.
    PlanGate,
    /// In a template with `steps:`.
    Steps,
    /// In a task whose front-matter grants `delegate:` (issue 30).
    Delegate,
}

impl BuiltIn {
    /// Whether `tools:` may list it (and leaving it out removes it).
    pub fn narrowable(&self) -> bool {
        self.offered == Offered::Toolbox
    }

    /// Whether an approval gate (`approve:`) may name it: a workspace tool.
    pub fn gateable(&self) -> bool {
        self.in_runner
    }
}

/// The name of the plan gate's tool.
pub const PROPOSE_PLAN: &str = "propose_plan";

/// Every built-in tool, in the order the model is offered them.
pub const BUILT_IN: &[BuiltIn] = &[
    BuiltIn {
        name: "execute_shell",
        description: "Run a bash command and return its combined stdout and stderr and exit code. \
            Commands share one persistent shell that starts in /workspace: cd, variables and \
            functions carry over. Output longer than the limit keeps its head and tail.",
        summary: "run a bash command in /workspace",
        parameters: Some(|| {
            json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "The bash command line."},
                "timeout_s": {"type": "integer", "description": "Kill the command after this many seconds (default 120)."}
            }, "required": ["command"], "additionalProperties": false})
        }),
        offered: Offered::Toolbox,
        in_runner: true,
        acts: true,
    },
    BuiltIn {
        name: "create_file",
        description: "Create or overwrite a file with the given content. Parent directories are created.",
        summary: "write a whole file",
        parameters: Some(|| {
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Path relative to /workspace."},
                "content": {"type": "string"}
            }, "required": ["path", "content"], "additionalProperties": false})
        }),
        offered: Offered::Toolbox,
        in_runner: true,
        acts: true,
    },
    BuiltIn {
        name: "read_file",
        description: "Read a text file, with line numbers. Use offset (1-based line) and limit \
            (lines) for large files.",
        summary: "read a file with line numbers",
        parameters: Some(|| {
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "offset": {"type": "integer", "minimum": 1},
                "limit": {"type": "integer", "minimum": 1}
            }, "required": ["path"], "additionalProperties": false})
        }),
        offered: Offered::Toolbox,
        in_runner: true,
        acts: false,
    },
    BuiltIn {
        name: "edit_file",
        description: "Replace one exact occurrence of old_str with new_str in a file. old_str must \
            occur exactly once: include enough surrounding lines to make it unique.",
        summary: "replace one exact, unique span of text",
        parameters: Some(|| {
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "old_str": {"type": "string"},
                "new_str": {"type": "string"}
            }, "required": ["path", "old_str", "new_str"], "additionalProperties": false})
        }),
        offered: Offered::Toolbox,
        in_runner: true,
        acts: true,
    },
    BuiltIn {
        name: "list_files",
        description: "List files and directories below a path (default: the workspace), \
            recursively, skipping .git.",
        summary: "list a directory recursively",
        parameters: Some(|| {
            json!({"type": "object", "properties": {
                "path": {"type": "string"}
            }, "additionalProperties": false})
        }),
        offered: Offered::Toolbox,
        in_runner: true,
        acts: false,
    },
    BuiltIn {
        name: "task_complete",
        description: "Call when the task is done, with a summary of what you did. This ends the session.",
        summary: "say the task is done",
        parameters: Some(|| {
            json!({"type": "object", "properties": {
                "message": {"type": "string", "description": "What was done, and how it was checked."}
            }, "required": ["message"], "additionalProperties": false})
        }),
        offered: Offered::Toolbox,
        in_runner: false,
        acts: true,
    },
    BuiltIn {
        name: "ask_user",
        description: "Ask the user a question and wait for the answer (it may take a while). Use \
            it when you are missing information only the user has, instead of guessing or giving up.",
        summary: "ask the user a question and wait for the answer",
        parameters: Some(|| {
            json!({"type": "object", "properties": {
                "question": {"type": "string", "description": "One clear question."}
            }, "required": ["question"], "additionalProperties": false})
        }),
        offered: Offered::Always,
        in_runner: false,
        acts: false,
    },
    BuiltIn {
        name: crate::human::BLOCKED,
        description: "Say that you cannot go on: something outside your reach stops you (a \
            missing credential, service, file or decision). It ends your turn (other calls in it \
            are not run) and the task waits, blocked, until a person unblocks it; their answer \
            comes back as this call's result.",
        summary: "say you cannot go on, why, and what you need",
        parameters: Some(|| {
            json!({"type": "object", "properties": {
                "reason": {"type": "string", "description": "What stops you, with the evidence."},
                "needed": {"type": "string", "description": "What a person must give or do for you to go on."}
            }, "required": ["reason", "needed"], "additionalProperties": false})
        }),
        offered: Offered::Always,
        in_runner: false,
        acts: false,
    },
    BuiltIn {
        name: PROPOSE_PLAN,
        description: "Propose your plan before acting and wait for the user's approval. If they \
            reject it, revise it using their feedback and propose again. Until a plan is \
            approved, only read_file, list_files and ask_user can be used.",
        summary: "propose your plan and wait for approval",
        parameters: Some(|| {
            json!({"type": "object", "properties": {
                "steps": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                          "description": "The steps you will take, in order."}
            }, "required": ["steps"], "additionalProperties": false})
        }),
        offered: Offered::PlanGate,
        in_runner: false,
        acts: false,
    },
    BuiltIn {
        name: "step_start",
        description: "Start one of the task's steps (before its work); some steps wait for a \
            person's approval first.",
        summary: "start one of the task's steps",
        parameters: None,
        offered: Offered::Steps,
        in_runner: false,
        acts: false,
    },
    BuiltIn {
        name: "step_done",
        description: "Mark one of the task's steps done once its done-when condition holds, with \
            the evidence (what you ran or saw that shows it). Mark each step as you finish it, in order.",
        summary: "mark one of the task's steps done",
        parameters: None,
        offered: Offered::Steps,
        in_runner: false,
        acts: false,
    },
    BuiltIn {
        name: "spawn_task",
        description: "Start a child task that runs on its own, in its own container, and return \
            its id at once. Give `prompt` (the child's instructions) or `template` (a prompt file \
            beside yours) with `params`. `workspace` lists paths (files or directories) copied \
            from your workspace into the child's. Its token and cost budget is carved out of \
            yours (`max_tokens`, `max_cost`; by default an even share of what is left); what it \
            does not use comes back to you. Collect its outcome with wait_tasks.",
        summary: "start a child task and get its id",
        parameters: Some(|| {
            json!({"type": "object", "properties": {
                "prompt": {"type": "string", "description": "The child's instructions."},
                "template": {"type": "string", "description": "A prompt file beside yours, instead of prompt."},
                "params": {"type": "object", "additionalProperties": {"type": "string"},
                           "description": "The template's parameters."},
                "model": {"type": "string", "description": "The child's model (default: yours)."},
                "workspace": {"type": "array", "items": {"type": "string"},
                              "description": "Paths in your workspace copied into the child's."},
                "max_tokens": {"type": "integer", "minimum": 1},
                "max_cost": {"type": "number", "exclusiveMinimum": 0}
            }, "additionalProperties": false})
        }),
        offered: Offered::Delegate,
        in_runner: false,
        acts: true,
    },
    BuiltIn {
        name: "wait_tasks",
        description: "Wait until child tasks have ended (all your children when `ids` is left \
            out) and get each one's outcome: its state, its task_complete message and its \
            changes as a patch. Each outcome is handed over once.",
        summary: "wait for child tasks and get their outcomes",
        parameters: Some(|| {
            json!({"type": "object", "properties": {
                "ids": {"type": "array", "items": {"type": "string"},
                        "description": "Child task ids from spawn_task (default: all)."}
            }, "additionalProperties": false})
        }),
        offered: Offered::Delegate,
        in_runner: false,
        acts: false,
    },
];

/// The row of `name`, when it is a built-in tool.
pub fn built_in(name: &str) -> Option<&'static BuiltIn> {
    BUILT_IN.iter().find(|t| t.name == name)
}

/// The names of the tools matching `keep`, in table order.
pub fn names(keep: impl Fn(&BuiltIn) -> bool) -> Vec<&'static str> {
    BUILT_IN
        .iter()
        .filter(|t| keep(t))
        .map(|t| t.name)
        .collect()
}

/// Whether `tools:` (None: every tool) leaves `name` offered: tools it
/// cannot narrow always are.
pub fn allowed_by(tools: Option<&[String]>, name: &str) -> bool {
    match (tools, built_in(name)) {
        (Some(list), Some(t)) if t.narrowable() => list.iter().any(|l| l == name),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_schemas_are_objects() {
        let mut seen = std::collections::BTreeSet::new();
        for t in BUILT_IN {
            assert!(seen.insert(t.name), "`{}` twice", t.name);
            assert!(
                !t.name.contains("__"),
                "`{}` looks like a capability tool",
                t.name
            );
            if let Some(p) = t.parameters {
                assert_eq!(p()["type"], "object", "{}", t.name);
            }
            // A tool behind a plan gate cannot act before approval.
            assert!(!(t.acts && t.offered == Offered::PlanGate));
        }
    }

    #[test]
    fn tools_narrows_only_the_toolbox() {
        let read_only = ["read_file".to_string(), "task_complete".to_string()];
        let cases = [
            (None, "execute_shell", true),
            (Some(&read_only[..]), "execute_shell", false),
            (Some(&read_only[..]), "read_file", true),
            (Some(&read_only[..]), "ask_user", true),
            (Some(&read_only[..]), "step_done", true),
            (Some(&read_only[..]), "cap__tool", true),
        ];
        for (tools, name, want) in cases {
            assert_eq!(allowed_by(tools, name), want, "{name} with {tools:?}");
        }
    }

    #[test]
    fn the_lists_derived_from_the_table() {
        assert_eq!(
            names(BuiltIn::narrowable),
            [
                "execute_shell",
                "create_file",
                "read_file",
                "edit_file",
                "list_files",
                "task_complete"
            ]
        );
        assert_eq!(
            names(BuiltIn::gateable),
            [
                "execute_shell",
                "create_file",
                "read_file",
                "edit_file",
                "list_files"
            ]
        );
        assert_eq!(
            names(|t| t.acts),
            [
                "execute_shell",
                "create_file",
                "edit_file",
                "task_complete",
                "spawn_task"
            ]
        );
    }
}
