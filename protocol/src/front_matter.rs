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
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

/// The keys a prompt's front-matter may set.
/// What a task's report.md holds (`report:`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportMode {
    /// Facts only: what ran, what changed, what was checked.
    #[default]
    Facts,
    /// The facts, and a short "Findings / Partial findings / Limitations"
    /// section written by one metered LLM call from the audit log and the
    /// verification.
    Synthesized,
}

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
    /// A host directory (relative to the prompt file) copied into /workspace.
    pub workspace: Option<PathBuf>,
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
    /// Commands run in the task's container after `task_complete`: one,
    /// or a list. All must exit 0, else the model hears why and goes on.
    pub verify: Option<Commands>,
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
    /// What report.md holds: `facts` (the default) or `synthesized` (one
    /// more metered call adds a short findings section; issue 29).
    pub report: Option<ReportMode>,
    /// Approval gates: `[execute_shell]` (every call of that tool),
    /// `{execute_shell: "regex"}` (calls whose command matches), `[plan]`
    /// (the model proposes a plan with `propose_plan` and waits).
    pub approve: Option<Approve>,
    /// Breakpoints: `[tool_error]` pauses the task when a tool call fails.
    pub pause_on: Option<Vec<PauseOn>>,
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
}

/// One webhook: where task events are POSTed, which, and in what shape.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Notify {
    /// `http://` or `https://`.
    pub url: String,
    /// `task.queued`, `task.started`, `task.waiting_human`, `task.paused`,
    /// `task.blocked`, `task.completed`, `task.incomplete`, `task.failed`,
    /// `task.cancelled`, `step.started`, `step.done`, or `all`.
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
}

/// Every event a webhook can ask for (`all` asks for each).
pub const NOTIFY_EVENTS: &[&str] = &[
    "task.queued",
    "task.started",
    "task.waiting_human",
    "task.paused",
    "task.blocked",
    "task.completed",
    "task.incomplete",
    "task.failed",
    "task.cancelled",
    "step.started",
    "step.done",
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

/// `approve:` as a list of tools or a map of tool to a regular expression.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Approve {
    Tools(Vec<String>),
    Matching(BTreeMap<String, String>),
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
                let mut out = BTreeMap::new();
                while let Some((tool, pattern)) = map.next_entry::<String, String>()? {
                    out.insert(tool, pattern);
                }
                Ok(Approve::Matching(out))
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
        }
    }
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

/// An absolute time, RFC 3339 (`2026-12-01T17:00:00Z`; a space for the
/// `T` and no zone, read as UTC, are accepted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub struct Deadline(pub std::time::SystemTime);

impl Deadline {
    /// Milliseconds since the Unix epoch.
    pub fn unix_ms(self) -> i64 {
        self.0
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }
}

impl From<Deadline> for String {
    fn from(d: Deadline) -> String {
        humantime::format_rfc3339_seconds(d.0).to_string()
    }
}

impl<'de> Deserialize<'de> for Deadline {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_rfc3339_weak(text.trim())
            .map(Deadline)
            .map_err(|e| {
                serde::de::Error::custom(format!(
                    "`{text}` is not a time such as `2026-12-01T17:00:00Z`: {e}"
                ))
            })
    }
}

/// A duration written as `30m` or a number of seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub struct Timeout(pub Duration);

impl From<Timeout> for String {
    fn from(t: Timeout) -> String {
        humantime::format_duration(t.0).to_string()
    }
}

impl<'de> Deserialize<'de> for Timeout {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        parse_duration_value(d).map(Timeout)
    }
}

/// Deserializes `30m`, `1h 30m` or an integer number of seconds.
pub fn parse_duration_value<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = Duration;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a duration such as `90s`, `30m` or `1h 30m`, or a number of seconds")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Duration, E> {
            // 0 would mean "no time at all", never "no limit".
            if v == 0 {
                return Err(E::custom("a duration must be greater than zero"));
            }
            Ok(Duration::from_secs(v))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Duration, E> {
            let v = u64::try_from(v).map_err(|_| E::custom("a duration cannot be negative"))?;
            self.visit_u64(v)
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Duration, E> {
            let d = humantime::parse_duration(v.trim()).map_err(|e| {
                E::custom(format!(
                    "invalid duration `{v}`: {e} (write e.g. `90s`, `30m`, `1h 30m`)"
                ))
            })?;
            if d.is_zero() {
                return Err(E::custom("a duration must be greater than zero"));
            }
            Ok(d)
        }
    }
    d.deserialize_any(V)
}

/// A memory size written as `512m`, `2g`, `1.5g` or bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(into = "u64")]
pub struct Memory(pub u64);

impl From<Memory> for u64 {
    fn from(m: Memory) -> u64 {
        m.0
    }
}

impl Memory {
    pub fn parse(s: &str) -> Result<Memory, String> {
        let s = s.trim().to_ascii_lowercase();
        let s = s.strip_suffix('b').unwrap_or(&s);
        let s = s.strip_suffix('i').unwrap_or(s);
        let (num, mult) = match s.chars().last() {
            Some('k') => (&s[..s.len() - 1], 1u64 << 10),
            Some('m') => (&s[..s.len() - 1], 1 << 20),
            Some('g') => (&s[..s.len() - 1], 1 << 30),
            Some('t') => (&s[..s.len() - 1], 1 << 40),
            _ => (s, 1),
        };
        let n: f64 = num
            .trim()
            .parse()
            .map_err(|_| format!("invalid memory size `{s}` (write e.g. `512m` or `2g`)"))?;
        if !(n.is_finite() && n > 0.0) {
            return Err(format!("memory size `{s}` must be greater than zero"));
        }
        let bytes = (n * mult as f64) as u64;
        if bytes == 0 {
            return Err(format!("memory size `{s}` must be at least one byte"));
        }
        Ok(Memory(bytes))
    }
}

/// The shortest exact form: `2g`, `512m`, `64k`, else bytes.
impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        for (unit, shift) in [("t", 40), ("g", 30), ("m", 20), ("k", 10)] {
            if n != 0 && n.trailing_zeros() >= shift {
                return write!(f, "{}{unit}", n >> shift);
            }
        }
        write!(f, "{n}")
    }
}

impl<'de> Deserialize<'de> for Memory {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Memory;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a memory size such as `512m` or `2g`")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Memory, E> {
                // Docker reads a memory limit of 0 as "unlimited"; a size of
                // 0 never means that here.
                if v == 0 {
                    return Err(E::custom(
                        "a size must be greater than zero (0 does not mean unlimited)",
                    ));
                }
                Ok(Memory(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Memory, E> {
                let v = u64::try_from(v).map_err(|_| E::custom("a size cannot be negative"))?;
                self.visit_u64(v)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Memory, E> {
                Memory::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
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
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<PromptFile, FrontMatterError> {
        PromptFile::parse("p.md", text)
    }

    #[test]
    fn no_front_matter_is_all_body() {
        let p = parse("Fix the bug.\n").unwrap();
        assert_eq!(p.front_matter, FrontMatter::default());
        assert_eq!(p.body, "Fix the bug.\n");
    }

    #[test]
    fn all_keys_parse() {
        let p = parse(
            "---\ntitle: T\nmodel: gpt-4o-mini\nmax_steps: 60\ntimeout: 30m\nworkspace: ./repo\n\
             resources: { memory: 2g, cpus: 1.5, pids: 512 }\nnetwork: none\nenv: { RUST_LOG: info }\n---\nBody\n",
        )
        .unwrap();
        let fm = p.front_matter;
        assert_eq!(fm.title.as_deref(), Some("T"));
        assert_eq!(fm.max_steps, Some(60));
        assert_eq!(fm.timeout, Some(Timeout(Duration::from_secs(1800))));
        let r = fm.resources.unwrap();
        assert_eq!(r.memory, Some(Memory(2 << 30)));
        assert_eq!(r.cpus, Some(1.5));
        assert_eq!(fm.network, Some(NetworkMode::None));
        assert_eq!(fm.env["RUST_LOG"], "info");
        assert_eq!(p.body, "Body\n");
    }

    #[test]
    fn unknown_key_names_line_and_key() {
        let e = parse("---\ntitle: x\nmodle: gpt\n---\nBody\n").unwrap_err();
        assert_eq!(e.line, Some(3));
        assert!(e.message.contains("unknown field `modle`"), "{}", e.message);
        assert!(e.to_string().starts_with("p.md:3: "), "{e}");
    }

    #[test]
    fn wrong_type_names_line() {
        let e = parse("---\nmax_steps: lots\n---\nBody\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.message.contains("max_steps"), "{}", e.message);
    }

    #[test]
    fn approve_takes_a_list_or_a_map_and_says_so_otherwise() {
        let p = parse("---\napprove: [shell, write_file]\n---\nBody\n").unwrap();
        assert_eq!(
            p.front_matter.approve,
            Some(Approve::Tools(vec!["shell".into(), "write_file".into()]))
        );
        let p = parse("---\napprove: { shell: \"^git push\" }\n---\nBody\n").unwrap();
        let Some(Approve::Matching(m)) = p.front_matter.approve else {
            panic!("a map of patterns");
        };
        assert_eq!(m["shell"], "^git push");
        let e = parse("---\ntitle: x\napprove: shell\n---\nBody\n").unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("a list of tool names"), "{}", e.message);
        assert!(!e.message.contains("untagged"), "{}", e.message);
    }

    #[test]
    fn bad_duration_is_explained() {
        let e = parse("---\ntimeout: soon\n---\nBody\n").unwrap_err();
        assert!(
            e.message.contains("invalid duration `soon`"),
            "{}",
            e.message
        );
    }

    #[test]
    fn empty_body_is_an_error() {
        let e = parse("---\ntitle: x\n---\n\n  \n").unwrap_err();
        assert!(e.message.contains("prompt is empty"));
    }

    #[test]
    fn unclosed_front_matter_is_an_error() {
        let e = parse("---\ntitle: x\nBody\n").unwrap_err();
        assert_eq!(e.line, Some(1));
    }

    #[test]
    fn verify_is_one_command_or_a_list() {
        let fm = parse("---\nverify: sh test.sh\n---\nB\n")
            .unwrap()
            .front_matter;
        assert_eq!(fm.verify, Some(Commands(vec!["sh test.sh".into()])));
        let fm = parse("---\nverify: [a, 'b c']\nverify_files: [tests/]\nverify_retries: 0\nverify_timeout: 30s\nassess: true\nobjective: O\n---\nB\n")
            .unwrap()
            .front_matter;
        assert_eq!(fm.verify, Some(Commands(vec!["a".into(), "b c".into()])));
        assert_eq!(fm.verify_files, Some(vec![PathBuf::from("tests/")]));
        assert_eq!(fm.verify_retries, Some(0));
        assert_eq!(fm.verify_timeout, Some(Timeout(Duration::from_secs(30))));
        assert_eq!(fm.assess, Some(true));
        let e = parse("---\nverify: {a: b}\n---\nB\n").unwrap_err();
        assert!(
            e.message.contains("a command, or a list of commands"),
            "{}",
            e.message
        );
        assert_eq!(e.line, Some(2));
    }

    #[test]
    fn memory_sizes() {
        assert_eq!(Memory::parse("512m").unwrap(), Memory(512 << 20));
        assert_eq!(Memory::parse("1.5G").unwrap(), Memory(3 << 29));
        assert_eq!(Memory::parse("2gib").unwrap(), Memory(2 << 30));
        assert!(Memory::parse("-1g").is_err());
        assert!(Memory::parse("lots").is_err());
        assert_eq!(Memory(2 << 30).to_string(), "2g");
        assert_eq!(Memory(1536 << 20).to_string(), "1536m");
        assert_eq!(Memory(1000).to_string(), "1000");
    }

    #[test]
    fn zero_is_never_unlimited() {
        let e = parse("---\nresources: { memory: 0 }\n---\nBody\n").unwrap_err();
        assert!(e.message.contains("greater than zero"), "{}", e.message);
        assert!(parse("---\nresources: { disk: 0 }\n---\nBody\n").is_err());
        assert!(parse("---\ntimeout: 0\n---\nBody\n").is_err());
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the bytes, parsing answers (never panics) and an error
        /// names a line that exists.
        #[test]
        fn any_text_parses_or_fails_cleanly(text in "(---\n)?([a-z_]{0,8}: ?[^\n]{0,12}\n){0,6}(---\n)?[^\u{0}]{0,40}") {
            match PromptFile::parse("p.md", &text) {
                Ok(p) => prop_assert!(!p.body.trim().is_empty()),
                Err(e) => {
                    if let Some(line) = e.line {
                        prop_assert!(line >= 1 && line <= text.lines().count().max(1), "{e}");
                    }
                }
            }
        }

        /// Valid front-matter round-trips its values.
        #[test]
        fn valid_front_matter_round_trips(title in "[A-Za-z][A-Za-z ]{0,20}", steps in 1u32..10_000, secs in 1u64..100_000) {
            let text = format!("---\ntitle: {title}\nmax_steps: {steps}\ntimeout: {secs}\n---\nGo.\n");
            let p = PromptFile::parse("p.md", &text).unwrap();
            prop_assert_eq!(p.front_matter.title.as_deref(), Some(title.trim()));
            prop_assert_eq!(p.front_matter.max_steps, Some(steps));
            prop_assert_eq!(p.front_matter.timeout, Some(Timeout(Duration::from_secs(secs))));
        }
    }

    #[test]
    fn alias_bombs_are_refused() {
        // Nine levels of nine-fold aliases inside one value: 9^9 strings if expanded.
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
        let mut parts = vec![format!("&a [{}]", ["\"lol\""; 9].join(","))];
        for w in names.windows(2) {
            let refs = vec![format!("*{}", w[0]); 9].join(",");
            parts.push(format!("&{} [{refs}]", w[1]));
        }
        let mut text = format!("---\ntitle: [{}]\n", parts.join(", "));
        text.push_str("---\nGo.\n");
        let started = std::time::Instant::now();
        assert!(PromptFile::parse("p.md", &text).is_err());
        assert!(started.elapsed().as_secs() < 5);
    }
}
