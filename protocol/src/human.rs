//! Humans in the loop: what a servo asks (a question, an approval of one
//! tool call, a plan) and what it is told (a reply, injected messages, a
//! pause), spoken over the gateway socket.
//!
//! The servo never decides for the human: it asks the foreman's desk
//! (`POST /saheeli/v1/ask`), waits for the reply (`GET /saheeli/v1/ask/{call}`)
//! for a short grace, and otherwise saves its session and exits *parked*;
//! the foreman starts a new container on the same workspace once the reply
//! is there. Questions and replies are rows in the foreman's database.

use serde::{Deserialize, Serialize};

/// The servo's routes on the gateway socket, besides chat completions.
pub mod routes {
    /// `POST` an [`Ask`](super::Ask); answered with an [`Asked`](super::Asked).
    pub const ASK: &str = "/saheeli/v1/ask";
    /// `GET /saheeli/v1/ask/{call_id}?wait_ms=N`: a [`Replied`](super::Replied).
    pub const ASK_PREFIX: &str = "/saheeli/v1/ask/";
    /// `GET ?wait_ms=N&after=ID`: the [`Inbox`](super::Inbox) (messages
    /// after note `ID`, the newest the servo has; pause).
    pub const INBOX: &str = "/saheeli/v1/inbox";
    /// `POST` a [`Delivered`](super::Delivered): messages now in the session.
    pub const DELIVERED: &str = "/saheeli/v1/inbox/delivered";
    /// `POST` a [`Breakpoint`](super::Breakpoint) (`pause_on`).
    pub const BREAKPOINT: &str = "/saheeli/v1/breakpoint";
    /// `GET`: a [`SessionKey`](super::SessionKey), the key the servo seals
    /// its session with (derived by the foreman for this task).
    pub const SESSION_KEY: &str = "/saheeli/v1/session-key";
}

/// The key a servo seals its session file with (hex, 32 bytes), given only
/// through the gateway socket the agent cannot open.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionKey {
    pub key: String,
    /// The key of the attempt a retry goes on from (issue 30), to check
    /// the seal of that attempt's session file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_key: Option<String>,
}

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKey(***)")
    }
}

/// Longest wait one `GET` may ask for; the servo asks again.
pub const MAX_WAIT_MS: u64 = 30_000;

/// An approval gate: calls of `tool` (every call, or those whose main
/// argument matches `pattern`) wait for a human. `tool: plan` is the plan
/// gate: the model must propose a plan with `propose_plan` before acting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    pub tool: String,
    /// A regular expression searched in the call's main argument: the
    /// command of `execute_shell`, the path of the file tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
}

/// The tool name of the plan gate.
pub const PLAN: &str = "plan";

/// What a servo waits for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Waiting {
    /// `ask_user`: a free-text answer.
    Answer { question: String },
    /// A gated tool call: approve (it runs) or deny (it does not).
    Approval { tool: String, arguments: String },
    /// `propose_plan`: accept, or reject with feedback.
    Plan { plan: Vec<String> },
    /// `task_blocked`: the model cannot go on without something only a
    /// person can give; the task is `blocked` until one answers (with
    /// `task answer`, `task inject` or `task resume`) or cancels it.
    Blocked { reason: String, needed: String },
    /// Egress (issue 50, `egress_approval: ask`): a process of the task
    /// asked for a host no list names; approve (that host and port for
    /// the rest of the task) or deny.
    Egress {
        host: String,
        port: u16,
        /// `setup`, `agent` or `verify`.
        phase: String,
    },
}

/// The tool the model calls when it is blocked.
pub const BLOCKED: &str = "task_blocked";

/// `POST /saheeli/v1/ask`: one question, keyed by the model's tool call
/// id so that asking again (after a restart) never asks twice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ask {
    pub call_id: String,
    pub waiting: Waiting,
}

/// How a human (or the no-human policy) decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Answer,
    Approve,
    Deny,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Answer => "answer",
            Decision::Approve => "approve",
            Decision::Deny => "deny",
        }
    }
}

/// The reply to an [`Ask`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    pub decision: Decision,
    /// The answer, or why a call or plan was denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Who decided (a user name, or `saheeli` for the no-human policy).
    pub by: String,
}

/// Answer to `POST /saheeli/v1/ask`: the reply at once when the task runs
/// without a human (or the question was already answered).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Asked {
    #[serde(default)]
    pub reply: Option<Reply>,
}

/// Answer to `GET /saheeli/v1/ask/{call_id}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replied {
    #[serde(default)]
    pub reply: Option<Reply>,
    /// What was asked, as the foreman recorded it (with a reply): the
    /// human decided on this, so an approved call runs only if it is this
    /// call (the servo's own record of it may have been tampered with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
}

/// A header of the servo's own chat call (`POST /v1/chat/completions`):
/// the newest note it has. The gateway looks at the inbox as the call
/// arrives, exactly as [`routes::INBOX`] would, and answers HTTP 409
/// [`InboxFirst`] instead of calling the model when a message or a pause
/// waits, so the look costs the servo no request of its own. Sent only
/// when the task's launch says its gateway looks (`inbox_on_call`).
pub const INBOX_AFTER: &str = "x-saheeli-inbox-after";

/// The answer to a chat call that must wait for the inbox: the error
/// envelope (`gateway_error::INBOX`) and the inbox itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InboxFirst {
    pub error: crate::chat::ErrorDetail,
    pub inbox: Inbox,
}

/// A message a human injected, for the model to read before its next call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    pub id: i64,
    pub text: String,
    pub by: String,
}

/// `GET /saheeli/v1/inbox`: messages not yet delivered, and whether the
/// servo must pause before its next LLM call.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inbox {
    #[serde(default)]
    pub notes: Vec<Note>,
    #[serde(default)]
    pub pause: bool,
}

/// `POST /saheeli/v1/inbox/delivered`: these notes are in the saved session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Delivered {
    pub ids: Vec<i64>,
}

/// `POST /saheeli/v1/breakpoint`: a tool failed and the task pauses there
/// (only when its spec has `pause_on: [tool_error]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Breakpoint {
    pub tool: String,
    pub error: String,
}

/// What a parked servo left in its session: how to go on when started again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Parked {
    /// Waiting for the reply to this tool call (the rest of the turn's
    /// calls, if any, follow it).
    Reply {
        call_id: String,
        tool: String,
        arguments: String,
        /// The turn's calls after this one, still to run.
        #[serde(default)]
        rest: Vec<crate::chat::ToolCall>,
    },
    /// Paused before an LLM call.
    Pause,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_is_tagged_by_kind() {
        let w = Waiting::Answer {
            question: "which branch?".into(),
        };
        let v = serde_json::to_value(&w).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"kind": "answer", "question": "which branch?"})
        );
        let w = Waiting::Approval {
            tool: "execute_shell".into(),
            arguments: "{}".into(),
        };
        assert_eq!(serde_json::to_value(&w).unwrap()["kind"], "approval");
        let back: Waiting =
            serde_json::from_value(serde_json::json!({"kind": "plan", "plan": ["a"]})).unwrap();
        assert_eq!(
            back,
            Waiting::Plan {
                plan: vec!["a".into()]
            }
        );
        let blocked = Waiting::Blocked {
            reason: "no access to the registry".into(),
            needed: "a mirror URL".into(),
        };
        assert_eq!(
            serde_json::to_value(&blocked).unwrap(),
            serde_json::json!({"kind": "blocked", "reason": "no access to the registry",
                               "needed": "a mirror URL"})
        );
    }
}
