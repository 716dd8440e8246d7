//! A tool call's tool, parsed once (mini-redis `Command::from_frame`): a
//! built-in tool's row in `protocol::tools::BUILT_IN` picks the family by
//! its `offered`, a name with the capability separator is a capability's.
//!
//! The arguments stay text here: a gate decides before they are read (a
//! gated call with bad arguments is still shown to a human, as the model
//! sent it), and a workspace tool's are read in the tool runner.

use saheeli_protocol::capability::SEP;
use saheeli_protocol::chat::{ToolCall, ToolSpec};
use saheeli_protocol::human::BLOCKED;
use saheeli_protocol::tools::{BuiltIn, Offered, PROPOSE_PLAN, built_in};

use super::{ToolOutput, unknown_tool};

/// What a tool call asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Tool {
    /// Run by the toolbox (rows offered `Toolbox` or `Steps`).
    Builtin { tool: Builtin, arguments: String },
    /// Reaches a human (rows offered `Always` or `PlanGate`).
    Human { tool: Human, arguments: String },
    /// Starts or waits for child tasks (rows offered `Delegate`).
    Delegate { tool: Delegate, arguments: String },
    /// A capability's tool (`name__tool`), run through the gateway when
    /// the task was granted it.
    Capability { name: String, arguments: String },
}

/// The toolbox's tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Builtin {
    Shell,
    CreateFile,
    ReadFile,
    EditFile,
    ListFiles,
    Complete,
    StepStart,
    StepDone,
}

/// The tools that wait for a human.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Human {
    /// `ask_user`.
    Ask,
    /// `task_blocked`.
    Blocked,
    /// `propose_plan`.
    Plan,
}

/// `spawn_task` and `wait_tasks` (issue 30).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delegate {
    Spawn,
    Wait,
}

impl Builtin {
    pub const ALL: [Builtin; 8] = [
        Builtin::Shell,
        Builtin::CreateFile,
        Builtin::ReadFile,
        Builtin::EditFile,
        Builtin::ListFiles,
        Builtin::Complete,
        Builtin::StepStart,
        Builtin::StepDone,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Builtin::Shell => "execute_shell",
            Builtin::CreateFile => "create_file",
            Builtin::ReadFile => "read_file",
            Builtin::EditFile => "edit_file",
            Builtin::ListFiles => "list_files",
            Builtin::Complete => "task_complete",
            Builtin::StepStart => "step_start",
            Builtin::StepDone => "step_done",
        }
    }

    /// The toolbox's tool called `name`.
    pub fn named(name: &str) -> Option<Builtin> {
        Builtin::ALL.into_iter().find(|b| b.name() == name)
    }

    /// Its row in the tool table.
    pub fn row(self) -> &'static BuiltIn {
        built_in(self.name()).expect("every toolbox tool has a row")
    }
}

impl Human {
    pub const ALL: [Human; 3] = [Human::Ask, Human::Blocked, Human::Plan];

    pub fn name(self) -> &'static str {
        match self {
            Human::Ask => "ask_user",
            Human::Blocked => BLOCKED,
            Human::Plan => PROPOSE_PLAN,
        }
    }

    fn named(name: &str) -> Option<Human> {
        Human::ALL.into_iter().find(|h| h.name() == name)
    }
}

impl Delegate {
    pub const ALL: [Delegate; 2] = [Delegate::Spawn, Delegate::Wait];

    pub fn name(self) -> &'static str {
        match self {
            Delegate::Spawn => "spawn_task",
            Delegate::Wait => "wait_tasks",
        }
    }

    fn named(name: &str) -> Option<Delegate> {
        Delegate::ALL.into_iter().find(|d| d.name() == name)
    }
}

impl Tool {
    /// The tool `call` names; the answer for the model when it is none
    /// (it names every tool `offered`). Whether the task was offered a
    /// known tool is asked when it runs: a gate comes first.
    pub fn parse(call: &ToolCall, offered: &[ToolSpec]) -> Result<Tool, ToolOutput> {
        Tool::from_call(call).ok_or_else(|| unknown_tool(&call.function.name, offered))
    }

    /// The tool `call` names, if it is a built-in or a capability's.
    pub fn from_call(call: &ToolCall) -> Option<Tool> {
        let name = call.function.name.as_str();
        let arguments = call.function.arguments.clone();
        if let Some(row) = built_in(name) {
            return match row.offered {
                Offered::Toolbox | Offered::Steps => {
                    Builtin::named(name).map(|tool| Tool::Builtin { tool, arguments })
                }
                Offered::Always | Offered::PlanGate => {
                    Human::named(name).map(|tool| Tool::Human { tool, arguments })
                }
                Offered::Delegate => {
                    Delegate::named(name).map(|tool| Tool::Delegate { tool, arguments })
                }
            };
        }
        name.contains(SEP).then(|| Tool::Capability {
            name: name.to_string(),
            arguments,
        })
    }

    pub fn name(&self) -> &str {
        match self {
            Tool::Builtin { tool, .. } => tool.name(),
            Tool::Human { tool, .. } => tool.name(),
            Tool::Delegate { tool, .. } => tool.name(),
            Tool::Capability { name, .. } => name,
        }
    }

    /// The arguments as the model sent them.
    pub fn arguments(&self) -> &str {
        match self {
            Tool::Builtin { arguments, .. }
            | Tool::Human { arguments, .. }
            | Tool::Delegate { arguments, .. }
            | Tool::Capability { arguments, .. } => arguments,
        }
    }

    /// Its row in the tool table (None: a capability's).
    pub fn row(&self) -> Option<&'static BuiltIn> {
        built_in(self.name())
    }

    /// Whether it acts (changes the workspace or ends the task): held
    /// back behind a plan gate until a plan is approved.
    pub fn acts(&self) -> bool {
        self.row().is_some_and(|t| t.acts)
    }

    pub fn is_shell(&self) -> bool {
        matches!(
            self,
            Tool::Builtin {
                tool: Builtin::Shell,
                ..
            }
        )
    }

    /// The file a file tool (create, edit, read) names.
    pub fn path(&self) -> Option<String> {
        let Tool::Builtin { tool, arguments } = self else {
            return None;
        };
        if !matches!(
            tool,
            Builtin::CreateFile | Builtin::EditFile | Builtin::ReadFile
        ) {
            return None;
        }
        serde_json::from_str::<serde_json::Value>(arguments)
            .ok()
            .and_then(|v| v.get("path")?.as_str().map(String::from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use saheeli_protocol::chat::FunctionCall;
    use saheeli_protocol::tools::BUILT_IN;

    fn call(name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: "c".into(),
            kind: "function".into(),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
            },
        }
    }

    /// Every row of the table parses into the variant its `offered` says,
    /// and every variant has a row.
    #[test]
    fn every_row_has_one_variant_and_every_variant_a_row() {
        for row in BUILT_IN {
            let tool = Tool::from_call(&call(row.name, "{}"))
                .unwrap_or_else(|| panic!("`{}` parses into no variant", row.name));
            assert_eq!(tool.name(), row.name);
            assert_eq!(tool.row().map(|r| r.name), Some(row.name));
            let family = match (&tool, row.offered) {
                (Tool::Builtin { .. }, Offered::Toolbox | Offered::Steps) => "builtin",
                (Tool::Human { .. }, Offered::Always | Offered::PlanGate) => "human",
                (Tool::Delegate { .. }, Offered::Delegate) => "delegate",
                other => panic!("`{}` parsed into the wrong family: {other:?}", row.name),
            };
            assert!(!family.is_empty());
        }
        let names: Vec<&str> = Builtin::ALL
            .iter()
            .map(|b| b.name())
            .chain(Human::ALL.iter().map(|h| h.name()))
            .chain(Delegate::ALL.iter().map(|d| d.name()))
            .collect();
        assert_eq!(names.len(), BUILT_IN.len(), "{names:?}");
        for n in names {
            assert!(built_in(n).is_some(), "`{n}` has no row");
        }
        for b in Builtin::ALL {
            assert_eq!(b.row().name, b.name());
        }
    }

    #[test]
    fn capabilities_and_unknown_names() {
        let cap = Tool::parse(&call("git__status", "{}"), &[]).unwrap();
        assert_eq!(
            cap,
            Tool::Capability {
                name: "git__status".into(),
                arguments: "{}".into()
            }
        );
        assert!(cap.row().is_none() && !cap.acts());
        let out = Tool::parse(&call("launch_missiles", "{}"), &[]).unwrap_err();
        assert!(!out.ok && out.text.contains("unknown tool `launch_missiles`"));
    }

    #[test]
    fn shell_and_paths() {
        let shell = Tool::from_call(&call("execute_shell", r#"{"command":"ls"}"#)).unwrap();
        assert!(shell.is_shell() && shell.acts());
        assert_eq!(shell.path(), None);
        for (name, want) in [
            ("create_file", Some("a.rs")),
            ("edit_file", Some("a.rs")),
            ("read_file", Some("a.rs")),
            ("list_files", None),
        ] {
            let t = Tool::from_call(&call(name, r#"{"path":"a.rs"}"#)).unwrap();
            assert_eq!(t.path().as_deref(), want, "{name}");
            assert!(!t.is_shell());
        }
    }
}
