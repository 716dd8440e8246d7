//! `TaskSpec`'s fields: what a task was queued with, the JSON of the
//! store's `spec` column. How one is made from a prompt file, config.yaml
//! and `--param` (and checked) is `spec/`'s `impl TaskSpec`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use saheeli_protocol::ReplayScript;
use saheeli_protocol::front_matter::NetworkMode;
use saheeli_protocol::human::Gate;
use saheeli_protocol::template::Step;
use serde::{Deserialize, Serialize};

use super::chain::Chain;
use super::params::ParamValue;

/// A task as stored in the queue (JSON in the `spec` column).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct TaskSpec {
    pub title: String,
    /// The prompt file as given, for display.
    pub prompt_path: String,
    /// The prompt body (front-matter removed).
    pub body: String,
    pub model: String,
    pub max_steps: u32,
    #[serde(default)]
    pub max_tokens: Option<u64>,
    #[serde(default)]
    pub max_cost: Option<f64>,
    #[serde(default)]
    pub retries: u32,
    #[serde(default)]
    pub retry_on: Vec<String>,
    pub timeout_s: u64,
    pub network: NetworkMode,
    /// What each phase may reach through the gateway's proxy (`egress:`,
    /// `egress_approval:`; issue 50).
    #[serde(
        default,
        skip_serializing_if = "crate::task::egress::EgressPlan::is_off"
    )]
    pub egress: crate::task::EgressPlan,
    pub memory: u64,
    pub cpus: f64,
    pub pids: i64,
    /// Size of /workspace in bytes (None in tasks queued before it existed).
    #[serde(default)]
    pub disk: Option<u64>,
    /// `disk` was asked for (`resources.disk`, config's `task.disk`), not
    /// the built-in default: an engine without `disk_quota` refuses it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disk_asked: bool,
    pub env: BTreeMap<String, String>,
    pub max_output_bytes: usize,
    /// The script for `replay:` models, read at submit time.
    pub replay: Option<ReplayScript>,
    /// The host directory named by `workspace:`, copied at submit time.
    pub workspace: Option<PathBuf>,
    /// The directory `workspace` had to stay under when it was first
    /// copied (its prompt's, absolute; `/` when a person allowed it
    /// outside with `--allow-workspace-outside`). A retry that copies the
    /// workspace again checks it against this (None: its prompt's
    /// directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_under: Option<PathBuf>,
    /// Pack what `.gitignore` names too (front-matter or config).
    #[serde(default)]
    pub workspace_include_ignored: bool,
    /// `workspace: { git, ref, depth }` (issue 52): the repository, and
    /// the commit it started from once submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<super::GitWorkspace>,
    /// `deliver:` (issue 52), its branch filled in at submit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver: Option<super::DeliverPlan>,
    /// The delivered task whose review this one follows up (issue 52).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_up_of: Option<saheeli_protocol::TaskId>,
    /// The definitions template it was submitted by, and the commit of
    /// the definitions repository it came from (issue 52).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definitions: Option<FromDefinitions>,
    /// Approval gates (`approve:`).
    #[serde(default)]
    pub gates: Vec<Gate>,
    /// `pause_on: [tool_error]`.
    #[serde(default)]
    pub pause_on_tool_error: bool,
    /// `breakpoint: on_subtask`: it pauses each time it spawns a child.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub break_on_subtask: bool,
    /// How long a human may take to reply before the task ends `no_answer`.
    #[serde(default = "default_human_timeout_s")]
    pub human_timeout_s: u64,
    /// How long a waiting servo keeps its container before it parks.
    #[serde(default = "default_park_after_ms")]
    pub park_after_ms: u64,
    /// Nobody will answer: questions get an immediate reply, gates follow
    /// `no_human_approves`.
    #[serde(default)]
    pub no_human: bool,
    #[serde(default)]
    pub no_human_approves: bool,
    /// Stop once the model has proposed its plan (`--plan-only`).
    #[serde(default)]
    pub plan_only: bool,
    /// Webhooks: config.yaml's `notify`, then the front-matter's.
    #[serde(default)]
    pub notify: Vec<saheeli_protocol::front_matter::Notify>,
    /// Granted MCP capabilities (`capabilities:`).
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// The built-in tools offered (`tools:`); None: all.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Parent and child tasks (`delegate:`, issue 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegate: Option<saheeli_protocol::delegate::Delegate>,
    /// A template's parameters, with their values and where each came from.
    #[serde(default)]
    pub parameters: Vec<ParamValue>,
    /// A template's steps (`step_done` marks them done).
    #[serde(default)]
    pub steps: Vec<Step>,
    /// Commands run after `task_complete`, in a fresh container with the
    /// task's workspace (`docker::VerifyBox`).
    #[serde(default)]
    pub verify: Vec<String>,
    /// Paths below /workspace restored from the submitted workspace
    /// before verify runs.
    #[serde(default)]
    pub verify_files: Vec<PathBuf>,
    /// Further attempts after a failed verify or assessment.
    #[serde(default = "default_verify_retries")]
    pub verify_retries: u32,
    /// Limit on each verify command, in seconds.
    #[serde(default = "default_verify_timeout_s")]
    pub verify_timeout_s: u64,
    /// An LLM judges whether the objective is met after verify.
    #[serde(default)]
    pub assess: bool,
    /// What the assessor judges against (None: the title and the body).
    #[serde(default)]
    pub objective: Option<String>,
    /// The provider is asked for per-token log probabilities (`logprobs:`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub logprobs: bool,
    /// What report.md holds (`report:`; issue 29).
    #[serde(default)]
    pub report: saheeli_protocol::front_matter::ReportMode,
    /// When the workspace and session are kept at a step (`snapshots:`;
    /// issue 51).
    #[serde(default)]
    pub snapshots: saheeli_protocol::front_matter::Snapshots,
    // --- long tasks (issue 26) ---
    /// The provider's prompt cache (`cache:`).
    #[serde(default)]
    pub cache: saheeli_protocol::context::Cache,
    /// The conversation's window and compaction (`context:`), resolved.
    #[serde(default)]
    pub context: saheeli_protocol::context::ContextPlan,
    // --- end long tasks ---
    /// Who runs the task (issue 25; `agent`).
    #[serde(default)]
    pub agent: saheeli_protocol::Agent,
    /// Who may decide its tool gates' approvals, and their message
    /// (`approve: { tools, from, message }`, issue 52); off: anyone.
    #[serde(
        default,
        skip_serializing_if = "saheeli_protocol::template::StepApproval::is_off"
    )]
    pub gate_approval: saheeli_protocol::template::StepApproval,
    /// The `agent_types:` entry its defaults came from (issue 52).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_type: Option<String>,
    /// The variable its model's provider key is read from
    /// (`OPENAI_API_KEY`; None: no key, e.g. a replay), for `pools:`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_key: Option<String>,
    /// `deadline:`, Unix milliseconds: the task ends `timeout` by then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<i64>,
    /// `priority:` in the front-matter (`--priority` wins over it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    // --- issue 30: retries that go on ---
    /// Where a retry by policy starts from (None: by the reason).
    #[serde(default)]
    pub retry_from: Option<saheeli_protocol::attempt::RetryFrom>,
    /// How long a retry by policy waits in the queue first.
    #[serde(default)]
    pub retry_backoff: saheeli_protocol::attempt::Backoff,
    /// Budgets are each attempt's own instead of the chain's.
    #[serde(default)]
    pub budget_per_attempt: bool,
    /// Set on a retry by policy: what it goes on from, what the chain used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<Chain>,
    /// Set on a fork (`task fork`, issue 51): the task it was forked
    /// from, at which step, and which of how many forks it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOf>,
    /// Best-of-N (issue 51): the samples this task runs, or (on a
    /// sample) the task it samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<super::Samples>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_of: Option<super::SampleOf>,
    // --- end issue 30 ---
    // --- issue 49: a benchmark's own tasks ---
    /// The task's own image (`image:`) or the directory it is built from
    /// (`environment:`); None: the agent's image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<TaskImage>,
    /// Where the agent works (`workdir:`), a link to /workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// Whom the agent's processes run as (`agent_user:`).
    #[serde(default, skip_serializing_if = "is_agent")]
    pub agent_user: saheeli_protocol::front_matter::AgentUser,
    /// The hidden tests (`verify: { files }`), absolute host paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verify_hidden: Vec<PathBuf>,
    /// The reward file the verify commands write (`verify: { reward }`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_reward: Option<String>,
    /// The verify commands' own environment (`verify: { env }`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub verify_env: BTreeMap<String, String>,
    /// The reward a verify must reach (`pass_reward:`).
    #[serde(default = "one")]
    pub pass_reward: f64,
    /// The oracle's solution directory (`solution:`), absolute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solution: Option<PathBuf>,
    /// Commands run before the agent (`setup:`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub setup: Vec<String>,
    /// Its cache key files, `maintenance:` and `setup_env:` (issue 50).
    #[serde(default, skip_serializing_if = "super::SetupPlan::is_empty")]
    pub setup_plan: super::SetupPlan,
}

/// Where a fork starts: its parent's conversation and workspace at a step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ForkOf {
    pub task: saheeli_protocol::TaskId,
    /// The parent's step the fork goes on from.
    pub step: u64,
    /// Which fork this is (1-based), of `count` made together.
    pub index: u32,
    pub count: u32,
    /// The provider cache key its calls carry: the one of the task whose
    /// conversation it goes on (a fork reads the prefix its parent's
    /// calls cached; issue 51).
    #[serde(default)]
    pub cache_key: String,
}

/// What a task's own image is made from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TaskImage {
    /// An image Docker has.
    Named(String),
    /// A directory with a Dockerfile (absolute).
    Dockerfile(PathBuf),
}

impl TaskSpec {
    /// The provider cache key task `id`'s calls carry (OpenAI's
    /// `prompt_cache_key`): its own id, or a fork's parent's key.
    pub(crate) fn cache_key(&self, id: saheeli_protocol::TaskId) -> String {
        self.forked_from
            .as_ref()
            .map(|f| f.cache_key.clone())
            .filter(|k| !k.is_empty())
            .unwrap_or_else(|| id.to_string())
    }

    /// `agent_user: root`: the agent's processes are uid 0, with no capability.
    pub(crate) fn root_agent(&self) -> bool {
        self.agent_user == saheeli_protocol::front_matter::AgentUser::Root
    }
}

fn is_agent(u: &saheeli_protocol::front_matter::AgentUser) -> bool {
    *u == saheeli_protocol::front_matter::AgentUser::Agent
}

fn one() -> f64 {
    1.0
}

fn default_verify_retries() -> u32 {
    saheeli_protocol::verify::DEFAULT_RETRIES
}

fn default_verify_timeout_s() -> u64 {
    600
}

fn default_human_timeout_s() -> u64 {
    24 * 3600
}

fn default_park_after_ms() -> u64 {
    10_000
}

/// A task submitted by template name (issue 52): which template, from
/// which commit of the definitions repository.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FromDefinitions {
    pub template: String,
    pub commit: String,
}
