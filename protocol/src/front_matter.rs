//! Prompt files: Markdown with optional YAML front-matter.
//!
//! ```markdown
//! ---
//! title: Make the failing test pass
//! model: gpt-4o-mini
//! ---
//! The test `parser::tests::dates` fails. Find out why and fix it.
//! ```
//!
//! Every key is optional and overrides config.yaml for this task. Unknown
//! keys and wrong types are errors that name the line.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize};

mod bench;
mod git;
mod named;
mod report;
mod samples;
mod setup;
mod snapshots;
mod values;

pub use bench::{AgentUser, Environment, Verify};
pub use git::{Deliver, DeliverOn, GitSource, Workspace};
pub use named::NamedGates;
pub use report::ReportMode;
pub use samples::{MAX_SAMPLES, Select};
pub use setup::Setup;
pub use snapshots::Snapshots;

pub use values::{Deadline, Memory, Timeout, parse_duration_value};

/// The keys a prompt's front-matter may set.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FrontMatter {
    pub title: Option<String>,
    /// `gpt-4o-mini`, an Anthropic model, or `replay:FILE`.
    pub model: Option<String>,
    pub max_steps: Option<u32>,
    /// Token budget (input + output), enforced by the gateway.
    pub max_tokens: Option<u64>,
    /// Cost budget in USD, enforced by the gateway.
    pub max_cost: Option<f64>,
    /// Wall-clock limit: `90s`, `30m`, `1h 30m`, or a number of seconds.
    pub timeout: Option<Timeout>,
    /// An absolute time the task must end by (`2026-12-01T17:00:00Z`),
    /// beside `timeout:`; enforced and told to the model like it.
    pub deadline: Option<Deadline>,
    /// Higher runs first (as `--priority`, which wins over it).
    pub priority: Option<i64>,
    /// A host directory (relative to the prompt file) copied into
    /// /workspace, or a Git repository at a ref (`{ git, ref, depth }`).
    pub workspace: Option<Workspace>,
    /// Commit the changes on a branch and push it (`{ branch, push, on }`).
    pub deliver: Option<Deliver>,
    /// Copy what `.gitignore` names into /workspace too (`.env*` and what
    /// `.saheeliignore` names never are).
    pub workspace_include_ignored: Option<bool>,
    pub resources: Option<Resources>,
    pub network: Option<NetworkMode>,
    /// Environment for the servo's shell commands. Never secrets.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Further attempts when the agent ends incomplete (Kubernetes Job
    /// `backoffLimit`); each attempt is a new task linked to the last.
    pub retries: Option<u32>,
    /// Which incomplete reasons are retried (`timeout`, `max_steps`, …).
    pub retry_on: Option<Vec<String>>,
    /// Where a retry starts from: `session` (the collected workspace and
    /// the saved conversation), `workspace` (the collected workspace, a
    /// fresh conversation) or `scratch` (the submitted workspace). Unset:
    /// `session` after `oom`, `timeout`, `terminated`, `lost`, `llm_error`,
    /// else `scratch`.
    pub retry_from: Option<crate::attempt::RetryFrom>,
    /// How long a retry waits in `queued` first: `{ initial: 10s,
    /// multiplier: 2, max: 10m }`, with jitter.
    pub retry_backoff: Option<crate::attempt::Backoff>,
    /// `max_steps`, `max_tokens` and `max_cost` are each attempt's own,
    /// instead of spanning the chain of attempts.
    pub budget_per_attempt: Option<bool>,
    /// Commands run in a fresh container after `task_complete`: one, a
    /// list, or `{ run, files, reward, timeout, env }` with the tests
    /// hidden until then. All must pass, else the model hears why and goes on.
    pub verify: Option<Verify>,
    /// The reward a verify's reward file must reach for `complete`
    /// (default 1.0).
    pub pass_reward: Option<f64>,
    /// Paths (files or directories, relative to the workspace) restored
    /// from the submitted workspace before verify runs: the agent cannot
    /// pass by editing the checks.
    pub verify_files: Option<Vec<PathBuf>>,
    /// Further attempts after a failed verify or assessment (default 2).
    pub verify_retries: Option<u32>,
    /// Limit on each verify command (default 10m).
    pub verify_timeout: Option<Timeout>,
    /// After verify passes (or without one), an LLM judges whether the
    /// objective is met; not met is a failed attempt.
    pub assess: Option<bool>,
    /// What the assessor judges against (default: the title and the body).
    pub objective: Option<String>,
    /// Ask the provider for each answer's per-token log probabilities
    /// (OpenAI-compatible chat), kept per call for the RL export.
    pub logprobs: Option<bool>,
    /// Keep the workspace and session at each step (`every`), when asked
    /// (`on_request`) or never (`off`, the default); issue 51's forks.
    pub snapshots: Option<Snapshots>,
    /// What report.md holds: `facts` (the default) or `synthesized` (one
    /// more metered call adds a short findings section; issue 29).
    pub report: Option<ReportMode>,
    /// Approval gates: `[execute_shell]` (every call of that tool),
    /// `{execute_shell: "regex"}` (calls whose command matches), `[plan]`
    /// (the model proposes a plan with `propose_plan` and waits).
    pub approve: Option<Approve>,
    /// Breakpoints: `[tool_error]` pauses the task when a tool call fails.
    pub pause_on: Option<Vec<PauseOn>>,
    /// `breakpoint: on_subtask`: the task pauses each time its model
    /// spawns a child task (`spawn_task`).
    pub breakpoint: Option<TaskBreakpoint>,
    /// How long a question or pause may wait for a human before the task
    /// ends `incomplete` with reason `no_answer`.
    pub human_timeout: Option<Timeout>,
    /// How long a waiting servo keeps its container before it parks.
    pub park_after: Option<Timeout>,
    /// Webhooks for this task's events, added to config.yaml's `notify`.
    pub notify: Option<Vec<Notify>>,
    /// MCP capabilities (config.yaml `capabilities:`) this task may use;
    /// their tools are offered as `name__tool`.
    pub capabilities: Option<Vec<String>>,
    /// The built-in tools offered (all when unset), e.g. a read-only review:
    /// `[read_file, list_files, task_complete]`.
    pub tools: Option<Vec<String>>,
    /// Parent and child tasks (issue 30): the task may spawn up to
    /// `max_children` children (`spawn_task`), `max_depth` levels deep.
    pub delegate: Option<crate::delegate::Delegate>,
    /// Declared parameters: the prompt is a template, and `{{ name }}` in
    /// its text is replaced by the value (see [`crate::template`]).
    #[serde(default)]
    pub parameters: Vec<crate::template::Parameter>,
    /// A checklist the model ticks off with `step_done`.
    #[serde(default)]
    pub steps: Vec<crate::template::Step>,
    // --- long tasks (issue 26) ---
    /// The provider's prompt cache: `5m` (default), `1h` or `off`.
    pub cache: Option<crate::context::Cache>,
    /// The model's window and how the conversation is kept inside it.
    pub context: Option<crate::context::ContextSettings>,
    // --- end long tasks ---
    // --- issue 25: third-party agents -------------------------------------
    /// Who runs the task: `saheeli` (the built-in loop), `claude-code`,
    /// `codex`, `mini-swe-agent`, `aider`, or `{ command, api }`.
    pub agent: Option<crate::Agent>,
    /// A kind of worker config.yaml's `agent_types:` names (issue 52): its
    /// agent, model, image, budgets and tools are this task's defaults,
    /// under what the front-matter itself sets.
    pub agent_type: Option<String>,
    // --- issue 49: a benchmark's own tasks --------------------------------
    /// The task's own image (a local tag or id); the servo is added on
    /// top of it, once per image.
    pub image: Option<String>,
    /// Build the task's image from a directory with a Dockerfile.
    pub environment: Option<Environment>,
    /// Where the agent works (`/app`): that path is the task's workspace.
    pub workdir: Option<String>,
    /// Whom the agent's processes run as: `agent` (default) or `root`.
    pub agent_user: Option<AgentUser>,
    /// A directory with `solve.sh`: with `agent: oracle`, mounted
    /// read-only at /solution and run instead of a model.
    pub solution: Option<PathBuf>,
    /// Commands run before the agent, in a container of the task's image
    /// on its workspace (offline, the agent's user, the workdir): a list,
    /// or `{ run: [...], key_files: [...] }` (issue 50); the result is
    /// cached by the image, the commands and the key files' content.
    pub setup: Option<Setup>,
    // --- issue 50: set-up secrets and the set-up cache ---
    /// Run instead of `setup:` when a cached set-up is reused.
    pub maintenance: Option<Commands>,
    /// Names of variables in the `.env` beside config.yaml given only to
    /// the set-up (and maintenance) commands, never to the agent.
    pub setup_env: Option<Vec<String>>,
    // --- issue 50: egress ----------------------------------------------------
    /// The hosts each phase may reach through the gateway's proxy:
    /// `{ setup: [pypi.org], agent: [], verify: [] }`.
    pub egress: Option<crate::egress::Egress>,
    /// A host no list names: `deny` (a 403 at once) or `ask` (the task
    /// waits for a person to approve or deny that host).
    pub egress_approval: Option<crate::egress::Approval>,
    /// Best-of-N (issue 51): K samples, the winner's pick, `samples.rs`.
    pub samples: Option<u32>,
    pub select: Option<Select>,
    pub fork_at: Option<u64>,
}

/// One webhook: where task events are POSTed, which, and in what shape.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Notify {
    /// `http://` or `https://` (a webhook); stored as `mailto:ADDRESS` for
    /// an `email` channel.
    #[serde(default)]
    pub url: String,
    /// An address the events are mailed to through config.yaml's `smtp:`
    /// relay, instead of a `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// `task.queued`, `task.started`, `task.waiting_human`, `task.paused`,
    /// `task.blocked`, `task.completed`, `task.incomplete`, `task.failed`,
    /// `task.cancelled`, `step.started`, `step.done`, `definitions.rejected`
    /// (config.yaml's webhooks only), or `all`.
    #[serde(default = "all_events")]
    pub events: Vec<String>,
    #[serde(default)]
    pub format: NotifyFormat,
}

fn all_events() -> Vec<String> {
    vec!["all".to_string()]
}

/// The body of a webhook delivery.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NotifyFormat {
    /// Saheeli's own JSON event.
    #[default]
    Json,
    /// A Slack incoming-webhook message (`{"text": …}`).
    Slack,
    /// A plain-text email (an `email:` channel).
    Email,
}

/// Every event a webhook can ask for (`all` asks for each).
#[rustfmt::skip]
pub const NOTIFY_EVENTS: &[&str] = &[
    "task.queued", "task.started", "task.waiting_human", "task.paused", "task.blocked",
    "task.completed", "task.incomplete", "task.failed", "task.cancelled",
    "step.started", "step.done",
    "definitions.rejected", // the foreman's own: config.yaml's `notify:` only
];

/// `verify:`: one command, or a list of them, run in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Commands(pub Vec<String>);

impl<'de> Deserialize<'de> for Commands {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Commands;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a command, or a list of commands")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Commands, E> {
                Ok(Commands(vec![v.to_string()]))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Commands, A::Error> {
                let mut out = Vec::new();
                while let Some(c) = seq.next_element::<String>()? {
                    out.push(c);
                }
                Ok(Commands(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// `approve:` as a list of tools or a map of tool to a regular expression,
/// or with named approvers and a message (issue 52).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Approve {
    Tools(Vec<String>),
    Matching(BTreeMap<String, String>),
    Named(NamedGates),
}

/// Either shape, with an error that shows both (serde's untagged enums
/// only say that no variant matched).
impl<'de> Deserialize<'de> for Approve {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Approve;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a list of tool names (`approve: [shell]`) or a map of tool name to \
                     a regular expression its input must match (`approve: {shell: \"^git push\"}`)",
                )
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Approve, A::Error> {
                let mut out = Vec::new();
                while let Some(tool) = seq.next_element::<String>()? {
                    out.push(tool);
                }
                Ok(Approve::Tools(out))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Approve, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, named::Value>()? {
                    entries.push(entry);
                }
                match named::read(entries).map_err(serde::de::Error::custom)? {
                    (g, true) => Ok(Approve::Named(g)),
                    (g, false) => Ok(Approve::Matching(g.matching)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl Approve {
    /// The gates, in a stable order.
    pub fn gates(&self) -> Vec<crate::human::Gate> {
        match self {
            Approve::Tools(t) => t
                .iter()
                .map(|tool| crate::human::Gate {
                    tool: tool.clone(),
                    pattern: None,
                })
                .collect(),
            Approve::Matching(m) => m
                .iter()
                .map(|(tool, p)| crate::human::Gate {
                    tool: tool.clone(),
                    pattern: Some(p.clone()),
                })
                .collect(),
            Approve::Named(g) => {
                let mut gates = Approve::Tools(g.tools.clone()).gates();
                gates.extend(Approve::Matching(g.matching.clone()).gates());
                gates
            }
        }
    }

    /// Who may decide these gates and what they are shown (issue 52);
    /// None: anyone, no message.
    pub fn named(&self) -> Option<&NamedGates> {
        match self {
            Approve::Named(g) => Some(g),
            _ => None,
        }
    }
}

/// What a task-wide `breakpoint:` may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskBreakpoint {
    /// Each child the model spawns pauses the parent.
    OnSubtask,
}

/// What `pause_on:` may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseOn {
    /// A tool call failed (a command exited non-zero, a file tool erred).
    ToolError,
}

/// Container limits; each overrides config.yaml's value.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// `512m`, `2g`, or bytes.
    pub memory: Option<Memory>,
    pub cpus: Option<f64>,
    pub pids: Option<i64>,
    /// Size of /workspace (`10g`): writes past it fail with ENOSPC.
    pub disk: Option<Memory>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    None,
    Bridge,
    Host,
}

impl NetworkMode {
    pub fn as_str(&self) -> &'static str {
        match self {
            NetworkMode::None => "none",
            NetworkMode::Bridge => "bridge",
            NetworkMode::Host => "host",
        }
    }
}

/// A parsed prompt file.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptFile {
    pub front_matter: FrontMatter,
    /// The Markdown after the front-matter.
    pub body: String,
}

/// A prompt file that cannot be used, with the line at fault when known.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct FrontMatterError {
    pub path: PathBuf,
    /// 1-based line in the prompt file.
    pub line: Option<usize>,
    pub message: String,
}

impl PromptFile {
    /// Splits and parses a prompt file's text. `path` only names the file in errors.
    pub fn parse(path: impl Into<PathBuf>, text: &str) -> Result<PromptFile, FrontMatterError> {
        let path = path.into();
        let err = |line: Option<usize>, message: String| FrontMatterError {
            path: path.clone(),
            line,
            message,
        };
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut lines = text.split_inclusive('\n');
        let first = lines.next().unwrap_or("");
        let (front_matter, body) = if first.trim_end() == "---" {
            let mut yaml = String::new();
            let mut closed = None;
            let mut consumed = first.len();
            for (i, line) in lines.by_ref().enumerate() {
                consumed += line.len();
                if matches!(line.trim_end(), "---" | "...") {
                    closed = Some(i);
                    break;
                }
                yaml.push_str(line);
            }
            if closed.is_none() {
                return Err(err(
                    Some(1),
                    "front-matter opened with `---` is never closed; add a line `---` after it"
                        .into(),
                ));
            }
            let fm = if yaml.trim().is_empty() {
                FrontMatter::default()
            } else {
                serde_yaml::from_str::<FrontMatter>(&yaml).map_err(|e| {
                    // The YAML starts on line 2 of the file.
                    let line = e.location().map(|l| l.line() + 1);
                    let msg = e.to_string();
                    // yaml_serde appends " at line N column M"; our prefix already says where.
                    let msg = match msg.find(" at line ") {
                        Some(i) => msg[..i].to_string(),
                        None => msg,
                    };
                    err(line.or(Some(2)), format!("front-matter: {msg}"))
                })?
            };
            (fm, &text[consumed..])
        } else {
            (FrontMatter::default(), text)
        };
        if body.trim().is_empty() {
            return Err(err(
                None,
                "the prompt is empty; write the task for the agent below the front-matter".into(),
            ));
        }
        Ok(PromptFile {
            front_matter,
            body: body.to_string(),
        })
    }
}

#[cfg(test)]
mod tests;
