//! The contract between the Saheeli foreman (`saheeli`) and its servos.
//!
//! Everything here crosses the container boundary, so both binaries use the
//! same definitions and cannot drift apart. Nothing here does I/O: no tokio,
//! no Docker, no SQLite, only serde types and pure parsing.
//!
//! # Layout
//!
//! - [`agent`]: which agent runs a task (the built-in loop or a CLI).
//! - [`agent_session`]: a third-party agent's own session, kept and
//!   restored for a retry from the session.
//! - [`task`]: [`TaskId`] and [`ServoTask`], the spec the foreman hands a servo
//!   in `/workspace/.saheeli/task.json`.
//! - [`front_matter`]: the YAML front-matter of a prompt file.
//! - [`completion`]: `complete.json`, the definitive success signal.
//! - [`delegate`]: parent and child tasks: `delegate:`, `spawn_task` and
//!   `wait_tasks` on the gateway socket.
//! - [`context`]: long tasks: `cache:` and `context:` (compaction).
//! - [`audit`]: the JSON-lines audit log and the session file.
//! - [`chat`]: the OpenAI-compatible chat-completions wire format spoken
//!   between the servo and the foreman's gateway.
//! - [`replay`]: scripted assistant turns for the offline `replay:` model.
//! - [`capability`]: MCP tools brokered by the foreman (`name__tool`).
//! - [`exit`]: what a servo's exit code means.
//! - [`human`]: questions, approvals, plans, messages and pauses between
//!   a servo and the humans behind the foreman.
//! - [`live`]: the model's text as it streams in (`llm.delta`), live only.
//! - [`reason`]: [`Reason`], why a task ended.
//! - [`remote`]: a servo on another host (Swarm): its gateway over TCP
//!   with a per-task token, the workspace fetched and uploaded.
//! - [`retry`]: when to try an LLM call again and how long to wait.
//! - [`setup`]: a cached set-up bound into the container and unpacked by
//!   the servo.
//! - [`template`]: a prompt's declared parameters and steps, and the
//!   `step_done` route.
//! - [`tools`]: the built-in tools, one table (name, schema, description,
//!   whether `tools:` may narrow it).
//! - [`verify`]: `verify` and `assess` after `task_complete`: the request,
//!   the checks and the verdict.

pub mod agent;
pub mod agent_session;
pub mod attempt;
pub mod audit;
pub mod capability;
pub mod chat;
pub mod completion;
pub mod context;
pub mod delegate;
pub mod egress;
pub mod exit;
pub mod front_matter;
pub mod human;
pub mod live;
pub mod reason;
pub mod remote;
pub mod replay;
pub mod retry;
pub mod setup;
pub mod snapshot;
pub mod task;
pub mod template;
pub mod tools;
pub mod verify;

pub use agent::{Agent, AgentApi, AgentName, CustomAgent};
pub use audit::{AuditEvent, Session, Timings, Usage};
pub use completion::Completion;
pub use exit::ServoExit;
pub use front_matter::{FrontMatter, FrontMatterError, NetworkMode, PromptFile, Resources};
pub use reason::Reason;
pub use replay::{ReplayError, ReplayScript, ReplayTurn};
pub use task::{LAUNCH_ENV, Launch, ServoTask, TaskId};

/// Where things live inside a servo container.
pub mod paths {
    /// The agent's working directory; everything it may touch is below it.
    pub const WORKSPACE: &str = "/workspace";
    /// The prompt body (front-matter removed).
    pub const PROMPT: &str = "/workspace/prompt.md";
    /// The success signal written by `task_complete`.
    pub const COMPLETE: &str = "/workspace/complete.json";
    /// Saheeli's private directory inside the workspace.
    pub const SAHEELI_DIR: &str = "/workspace/.saheeli";
    /// The [`ServoTask`](crate::ServoTask) as JSON.
    pub const TASK: &str = "/workspace/.saheeli/task.json";
    /// Directory the gateway socket's host directory is mounted on.
    pub const GATEWAY_DIR: &str = "/run/saheeli";
    /// The gateway's unix socket inside the container.
    pub const GATEWAY_SOCKET: &str = "/run/saheeli/gateway.sock";
    /// Why the servo gave up before or outside its loop (it could not
    /// fetch its task, read its prompt, get its session key…), relative to
    /// the workspace: in the servo's own directory, so the agent cannot
    /// write it. The foreman adds it to the ending's detail.
    pub const SERVO_ERROR: &str = ".saheeli/servo-error.txt";
    /// At most this much of [`SERVO_ERROR`] is written, or read.
    pub const MAX_SERVO_ERROR: usize = 2048;

    /// `servo-<task_id>-audit.log`
    pub fn audit_log(task_id: &crate::TaskId) -> String {
        format!("servo-{task_id}-audit.log")
    }

    /// `servo-<task_id>-session.json`
    pub fn session(task_id: &crate::TaskId) -> String {
        format!("servo-{task_id}-session.json")
    }

    /// `servo-<task_id>-session.journal`: what the session gained since it
    /// was last written whole (the servo's own; gone after a clean exit).
    pub fn session_journal(task_id: &crate::TaskId) -> String {
        format!("servo-{task_id}-session.journal")
    }
}

/// Who is who inside a servo container: the servo and the agent never
/// share a uid. The container starts as root with only `CAP_SETUID` and
/// `CAP_SETGID`; the servo becomes [`SERVO`](uids::SERVO) at once (keeping
/// just the right to start agent processes) and every tool, shell and
/// agent CLI runs as [`AGENT`](uids::AGENT), which owns the workspace's
/// files but cannot reach the gateway socket, the servo's process or its
/// session's key.
pub mod uids {
    /// The servo (the trusted supervisor); also its group.
    pub const SERVO: u32 = 999;
    /// The agent: tools, shells, third-party agent CLIs; also its group.
    pub const AGENT: u32 = 1000;
    /// Set to `1` in a container's environment by the foreman: the servo
    /// must start as root and separate itself from the agent (it refuses
    /// to run otherwise). Unset (a servo run by hand or in the servo's own
    /// tests), everything runs as the caller.
    pub const PRIVSEP_ENV: &str = "SAHEELI_PRIVSEP";
    /// [`PRIVSEP_ENV`]'s value for a task with `agent_user: root`: the
    /// servo separates itself as ever, and starts the agent's processes as
    /// uid 0 (gid 0, the agent's group beside) with no capability.
    pub const PRIVSEP_ROOT: &str = "root";
}

/// Seconds since the Unix epoch formatted as RFC 3339 (UTC, seconds).
pub fn rfc3339(time: std::time::SystemTime) -> String {
    humantime::format_rfc3339_seconds(time).to_string()
}
