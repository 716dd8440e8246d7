//! `task_defaults:` in config.yaml: what every task gets unless its
//! front-matter says otherwise, and the retry defaults beside them.

use std::path::PathBuf;
use std::time::Duration;

use saheeli_protocol::front_matter::{
    Approve, Commands, Memory, NetworkMode, PauseOn, parse_duration_value,
};
use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct TaskDefaults {
    pub model: String,
    pub max_steps: u32,
    #[serde(deserialize_with = "parse_duration_value")]
    pub timeout: Duration,
    pub network: NetworkMode,
    /// What each phase may reach through the gateway's proxy (issue 50).
    pub egress: saheeli_protocol::egress::Egress,
    /// A host no list names: refused at once, or asked for.
    pub egress_approval: saheeli_protocol::egress::Approval,
    pub memory: Memory,
    pub cpus: f64,
    pub pids: i64,
    /// Size of each task's /workspace.
    pub disk: Memory,
    /// Largest tool output handed back to the model, in bytes.
    pub max_output_bytes: usize,
    /// Token budget per task (input + output); none when unset.
    pub max_tokens: Option<u64>,
    /// Cost budget per task in USD (needs `prices` for the model).
    pub max_cost: Option<f64>,
    /// Further attempts when the agent ends incomplete (0: none).
    pub retries: u32,
    /// The incomplete reasons that are retried.
    pub retry_on: Vec<String>,
    /// Where a retry starts from (unset: by the reason, see
    /// `RetryFrom::default_for`).
    pub retry_from: Option<saheeli_protocol::attempt::RetryFrom>,
    /// How long a retry waits in the queue first.
    pub retry_backoff: saheeli_protocol::attempt::Backoff,
    /// Budgets are each attempt's own instead of the chain's.
    pub budget_per_attempt: bool,
    /// Copy what `.gitignore` names into /workspace too.
    pub workspace_include_ignored: bool,
    /// Approval gates (see the front-matter key `approve`).
    pub approve: Option<Approve>,
    /// Breakpoints (`[tool_error]`).
    pub pause_on: Vec<PauseOn>,
    /// A question or pause waits this long for a human, then the task
    /// ends `incomplete` with reason `no_answer`.
    #[serde(deserialize_with = "parse_duration_value")]
    pub human_timeout: Duration,
    /// A waiting servo keeps its container this long, then parks.
    #[serde(deserialize_with = "parse_duration_value")]
    pub park_after: Duration,
    /// Run with nobody to ask: `ask_user` is answered at once and gates
    /// follow `no_human_gates` (also `--no-human`).
    pub no_human: bool,
    /// What a gate does when no human is there: `deny` or `approve`.
    pub no_human_gates: GateDefault,
    /// Commands run after `task_complete`, in a fresh container with the
    /// task's workspace (`docker::VerifyBox`).
    pub verify: Commands,
    /// Paths restored from the submitted workspace before verify runs.
    pub verify_files: Vec<PathBuf>,
    /// Further attempts after a failed verify or assessment.
    pub verify_retries: u32,
    /// Limit on each verify command.
    #[serde(deserialize_with = "parse_duration_value")]
    pub verify_timeout: Duration,
    /// An LLM judges whether the objective is met after verify.
    pub assess: bool,
    /// What the assessor judges against (default: the title and body).
    pub objective: Option<String>,
    /// What report.md holds: `facts` or `synthesized`.
    pub report: saheeli_protocol::front_matter::ReportMode,
    /// When the workspace and session are kept at a step (issue 51).
    pub snapshots: saheeli_protocol::front_matter::Snapshots,
    // --- long tasks (issue 26) ---
    /// The provider's prompt cache: `5m`, `1h` or `off`.
    pub cache: saheeli_protocol::context::Cache,
    /// The model's window and the compaction strategy (the window's
    /// default comes from `windows:` and the provider).
    pub context: saheeli_protocol::context::ContextSettings,
    // --- end long tasks ---
    // --- issue 25: third-party agents -------------------------------------
    /// Who runs tasks (see the front-matter key `agent`).
    pub agent: saheeli_protocol::Agent,
}

/// What an approval gate does in a run without a human.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum GateDefault {
    Deny,
    Approve,
}

/// `requeue_backoff`'s default: 1 s, doubling, at most 32 s.
pub(crate) const REQUEUE_BACKOFF: saheeli_protocol::attempt::Backoff =
    saheeli_protocol::attempt::Backoff::new(Duration::from_secs(1), 2.0, Duration::from_secs(32));

/// Reasons an agent attempt may end incomplete that a retry can help with.
pub(crate) const RETRYABLE: &[&str] = &[
    "timeout",
    "max_steps",
    "llm_error",
    "oom",
    "exit",
    "terminated",
    "lost",
    "replay_exhausted",
    "no_completion",
    "invalid_completion",
];

impl Default for TaskDefaults {
    fn default() -> Self {
        TaskDefaults {
            model: "gpt-4o-mini".into(),
            max_steps: 50,
            timeout: Duration::from_secs(30 * 60),
            network: NetworkMode::None,
            egress: Default::default(),
            egress_approval: Default::default(),
            memory: Memory(2 << 30),
            cpus: 1.0,
            pids: 512,
            disk: Memory(2 << 30),
            max_output_bytes: 16 * 1024,
            max_tokens: None,
            max_cost: None,
            retries: 0,
            retry_on: RETRYABLE.iter().map(|s| s.to_string()).collect(),
            retry_from: None,
            retry_backoff: saheeli_protocol::attempt::Backoff::default(),
            budget_per_attempt: false,
            workspace_include_ignored: false,
            approve: None,
            pause_on: Vec::new(),
            human_timeout: Duration::from_secs(24 * 3600),
            park_after: Duration::from_secs(10),
            no_human: false,
            no_human_gates: GateDefault::Deny,
            verify: Commands::default(),
            verify_files: Vec::new(),
            verify_retries: saheeli_protocol::verify::DEFAULT_RETRIES,
            verify_timeout: Duration::from_secs(600),
            assess: false,
            objective: None,
            report: Default::default(),
            snapshots: Default::default(),
            cache: saheeli_protocol::context::Cache::default(),
            context: saheeli_protocol::context::ContextSettings::default(),
            agent: saheeli_protocol::Agent::default(),
        }
    }
}
