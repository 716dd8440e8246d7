//! The servo's audit trail (`servo-<id>-audit.log`, JSON lines) and its
//! session file (`servo-<id>-session.json`, the whole conversation).

use serde::{Deserialize, Serialize};

use crate::TaskId;
use crate::chat::ChatMessage;

/// Token usage, summed over a task or for one call. `input_tokens`
/// includes cached ones; `cache_read_tokens` and `cache_write_tokens` are
/// the parts of it the provider read from or wrote to its prompt cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }
}

/// One line of the audit log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AuditEvent {
    /// The servo started.
    Start {
        ts: String,
        task_id: TaskId,
        model: String,
        max_steps: u32,
        timeout_s: u64,
        /// The third-party agent the servo supervises (issue 25); None:
        /// the built-in loop.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
    },
    /// One request to the model.
    LlmCall {
        ts: String,
        step: u32,
        model: String,
        latency_ms: u64,
        usage: Usage,
        /// Set when the call failed; the servo may retry or stop.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// What the model wrote this turn, at most
        /// `live::MAX_AUDIT_TEXT` bytes (issue 29; its tool calls are the
        /// `tool_call` lines that follow).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// How many bytes of the text were cut off (none: kept whole).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text_cut: Option<u64>,
    },
    /// The gateway cannot be reached (the foreman restarting): the servo
    /// keeps trying, with capped backoff, for as long as its deadline allows.
    GatewayWait {
        ts: String,
        step: u32,
        error: String,
    },
    /// The gateway answered again after a [`AuditEvent::GatewayWait`].
    GatewayBack {
        ts: String,
        step: u32,
        waited_ms: u64,
    },
    /// One tool invocation.
    ToolCall {
        ts: String,
        step: u32,
        tool: String,
        /// The arguments exactly as the model sent them.
        arguments: String,
        ok: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        result_bytes: usize,
        truncated: bool,
        duration_ms: u64,
    },
    /// The model asked a human something (a question, an approval, a plan).
    Asked {
        ts: String,
        step: u32,
        call_id: String,
        waiting: crate::human::Waiting,
    },
    /// A human (or the no-human policy) replied.
    Replied {
        ts: String,
        step: u32,
        call_id: String,
        reply: crate::human::Reply,
        waited_ms: u64,
    },
    /// A message a human injected reached the model.
    Noted {
        ts: String,
        step: u32,
        id: i64,
        by: String,
        text: String,
    },
    /// The servo paused before an LLM call.
    Paused { ts: String, step: u32 },
    /// A pause ended.
    Resumed {
        ts: String,
        step: u32,
        waited_ms: u64,
    },
    /// The servo saved its session and exits to wait without a container.
    Parked { ts: String, step: u32 },
    /// A parked servo was started again and goes on from its session.
    Unparked { ts: String, step: u32 },
    /// The foreman checked the work after `task_complete` (`verify`,
    /// `assess`): this attempt's checks and whether they passed.
    Verified {
        ts: String,
        step: u32,
        attempt: u32,
        max_attempts: u32,
        passed: bool,
        checks: Vec<crate::verify::Check>,
    },
    /// The servo compacted its conversation to keep it inside the model's
    /// window (issue 26). The session file keeps the full history.
    Compacted {
        ts: String,
        step: u32,
        /// `mask` or `summarize`: what was done this time.
        strategy: String,
        /// `threshold` (the estimate passed it) or `context_error` (the
        /// provider answered that the context is too long).
        cause: String,
        /// The conversation's estimated size before and after, in tokens.
        tokens_before: u64,
        tokens_after: u64,
    },
    /// The servo is about to exit.
    Finish {
        ts: String,
        /// `complete`, `max_steps`, `timeout`, `llm_error`, …
        outcome: String,
        steps: u32,
        usage: Usage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        /// Where this start of the servo spent its time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timings: Option<Timings>,
    },
}

/// Where a servo's time went, in microseconds, summed over one start of it
/// (a parked task that starts again counts afresh). What the parts leave
/// of `total_us` is the servo's own work: building requests, reading
/// answers, its bookkeeping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timings {
    /// From the start of the loop to its end.
    pub total_us: u64,
    /// Waiting for LLM answers through the gateway, retries included.
    pub llm_us: u64,
    /// Looking at the human desk's inbox before each LLM call.
    pub inbox_us: u64,
    /// Running tools (a shell command from start to its exit code).
    pub tools_us: u64,
    /// Writing the audit log and the session file.
    pub writes_us: u64,
}

/// The whole conversation: enough to read, resume or replay a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub task_id: TaskId,
    pub model: String,
    pub steps: u32,
    pub usage: Usage,
    pub messages: Vec<ChatMessage>,
    /// Set when the servo parked: what it waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked: Option<crate::human::Parked>,
    /// Time spent working (waits for humans excluded), over every start.
    #[serde(default)]
    pub active_ms: u64,
    /// Injected messages already in `messages`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<i64>,
    /// The plan gate was passed (a plan was approved).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plan_approved: bool,
    /// The template's steps this servo heard start (a gated step's
    /// `step_done` asks for an approval unless its step is here).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps_started: Vec<String>,
    /// Every compaction, in order (issue 26): what the model was sent
    /// instead of `messages` after each. The last one is in force; a
    /// replay of this session answers its summary calls from them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compactions: Vec<crate::context::ContextState>,
}
