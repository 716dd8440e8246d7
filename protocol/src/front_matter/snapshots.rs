//! `snapshots:` (issue 51): whether a task keeps its state at its steps,
//! so that `task fork --at-step N` can go on from any of them.

use serde::{Deserialize, Serialize};

/// When a task's workspace and session are kept at a step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Snapshots {
    /// At every step: before each call, the workspace as the last step
    /// left it (its session file included).
    Every,
    /// At the next step after `saheeli task snapshot ID` asks.
    OnRequest,
    /// Never (the default).
    #[default]
    Off,
}

impl Snapshots {
    pub fn as_str(self) -> &'static str {
        match self {
            Snapshots::Every => "every",
            Snapshots::OnRequest => "on_request",
            Snapshots::Off => "off",
        }
    }
}
