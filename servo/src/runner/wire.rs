//! What the servo and its tool runner say to each other: one JSON object
//! per line, requests on the runner's stdin, replies on its stdout.
//!
//! The runner runs as the agent's user, so the agent can write anything
//! into the reply pipe: the servo reads replies with a size cap and treats
//! a line it cannot parse as a broken runner, never as a crash.

use serde::{Deserialize, Serialize};

use crate::tools::ToolOutput;

/// The longest reply line the servo reads: a tool output is capped at
/// `max_output` (at most a few MiB) before it is sent; JSON escaping can
/// at most sextuple it (`\u0000`).
pub(crate) const MAX_REPLY: usize = 64 << 20;

/// A request from the servo.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Request {
    /// Run one of the workspace tools.
    Tool {
        id: u64,
        name: String,
        arguments: String,
    },
    /// The servo gave up waiting for a tool (SIGTERM, its deadline): stop it.
    Cancel { id: u64 },
    /// The agent's processes go (`stop`: every one of them; else only the
    /// shell), and the model hears that its next command runs in a fresh
    /// shell (`note`, or when a shell was running).
    Reset { id: u64, stop: bool, note: bool },
}

/// The runner's answer to a `Tool` or `Reset` request.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Reply {
    pub id: u64,
    pub text: String,
    pub ok: bool,
    pub exit_code: Option<i32>,
    pub truncated: bool,
}

impl Reply {
    pub fn new(id: u64, out: ToolOutput) -> Reply {
        Reply {
            id,
            text: out.text,
            ok: out.ok,
            exit_code: out.exit_code,
            truncated: out.truncated,
        }
    }

    pub fn into_output(self) -> ToolOutput {
        ToolOutput {
            text: self.text,
            ok: self.ok,
            exit_code: self.exit_code,
            truncated: self.truncated,
            complete: None,
        }
    }
}
