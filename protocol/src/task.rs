//! Task identity and the spec a servo runs.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::replay::ReplayScript;

/// A task's id: a UUIDv7, so ids sort by submission time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(Uuid);

impl TaskId {
    /// A fresh, time-ordered id.
    pub fn new() -> Self {
        TaskId(Uuid::now_v7())
    }

    pub fn as_uuid(&self) -> &Uuid {
        &self.0
    }

    /// The last 12 hex digits, for tables. A v7 id starts with its
    /// timestamp, so ids submitted together share a prefix; the tail is
    /// random. `saheeli` accepts either end of an id.
    pub fn short(&self) -> String {
        self.0.simple().to_string()[20..].to_string()
    }
}

impl Default for TaskId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for TaskId {
    type Err = uuid::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(TaskId)
    }
}

/// What the foreman tells a servo, written to `/workspace/.saheeli/task.json`.
///
/// Never contains a secret: keys stay in the foreman's gateway.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServoTask {
    pub task_id: TaskId,
    pub title: String,
    /// The model name as the user wrote it (`gpt-4o-mini`, `replay:script.yaml`).
    pub model: String,
    pub max_steps: u32,
    /// Token budget, so the servo can tell the model what remains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Wall-clock budget in seconds; the servo stops on its own a little
    /// before the foreman's hard timeout.
    pub timeout_s: u64,
    /// The task's `deadline:` (Unix milliseconds): the servo stops by it,
    /// as by its time budget, and the model is told it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<i64>,
    /// Largest tool output returned to the model, in bytes.
    pub max_output_bytes: usize,
    /// Limit on one call to the gateway, in seconds: the foreman's worst
    /// case for one call (upstream timeout × attempts, retry time) plus a
    /// margin, so the servo never abandons, and then repeats, a call the
    /// gateway is still working on. None: the servo's own default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout_s: Option<u64>,
    /// The agent phase has an egress proxy (issue 50): the servo serves
    /// its port on the loopback and gives the agent's processes
    /// `HTTP_PROXY`, `HTTPS_PROXY` and `NO_PROXY`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub egress: bool,
    /// Tool calls that wait for a human's approval (`approve:`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<crate::human::Gate>,
    /// A failed tool call pauses the task (`pause_on: [tool_error]`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pause_on_tool_error: bool,
    /// The gateway looks at the inbox with each of the servo's chat calls
    /// (`human::INBOX_AFTER`): the servo makes no inbox request of its own
    /// before a call it sends there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inbox_on_call: bool,
    /// The task keeps snapshots (`snapshots: every | on_request`, issue
    /// 51): before each call the servo posts a
    /// [`SnapshotPoint`](crate::snapshot::SnapshotPoint) with its step.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub snapshots: bool,
    /// End the task `complete` as soon as the model has proposed a plan.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plan_only: bool,
    /// How long the servo waits for a human before it parks (saves its
    /// session and exits, to be started again on the reply). None: 10 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub park_after_ms: Option<u64>,
    /// The built-in tools offered; None: all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Granted MCP capabilities: their tools come from the gateway.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    /// `delegate:` granted: the model gets `spawn_task` and `wait_tasks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegate: Option<crate::delegate::Delegate>,
    /// The template's steps: the model gets `step_done` and sees the list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<crate::template::Step>,
    /// `task_complete` asks the foreman to verify (and assess) the work
    /// first (`verify:` or `assess: true`); see [`crate::verify`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verify: bool,
    /// The scripted turns when `model` is `replay:…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayScript>,
    /// How the conversation is kept inside the model's window (issue 26).
    #[serde(default)]
    pub context: crate::context::ContextPlan,
    /// A third-party agent CLI the servo supervises instead of running its
    /// own loop (None: the built-in loop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<crate::Agent>,
    /// How long the foreman waits after SIGTERM before it kills the
    /// container (`stop_grace`), so a supervised agent is stopped in time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_grace_ms: Option<u64>,
    /// A retry by policy that goes on from the attempt before it (its
    /// collected workspace, and with `session` its conversation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<crate::attempt::Resume>,
}

/// The environment variable that may carry a [`Launch`] as JSON, sparing
/// the foreman an upload into the container before it starts (an archive
/// upload to a stopped container costs a mount; an environment variable is
/// free). Larger launches are uploaded as files instead.
pub const LAUNCH_ENV: &str = "SAHEELI_LAUNCH";

/// What a servo needs to start: its task and the prompt body. The servo
/// writes both into the workspace (`.saheeli/task.json`, `prompt.md`), so
/// the collected results look the same however they arrived.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    pub task: ServoTask,
    pub prompt: String,
    /// The task's `env:`, for a warm servo (issue 28): its container was
    /// started before the task was known, so the servo gives these to the
    /// agent's processes itself. A cold servo has them in its container's
    /// environment and gets none here.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
}

impl Launch {
    /// Largest launch passed in the environment (Linux caps one variable at 128 KiB).
    pub const MAX_ENV_BYTES: usize = 96 * 1024;
}
