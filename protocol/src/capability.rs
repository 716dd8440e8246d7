//! Capabilities: tools of MCP servers the foreman runs outside the
//! container, offered to a task as `capability__tool` and called through
//! the gateway socket.

use serde::{Deserialize, Serialize};

use crate::chat::ToolSpec;

pub mod routes {
    /// `GET`: the [`Tools`](super::Tools) of the task's granted capabilities.
    pub const TOOLS: &str = "/saheeli/v1/capabilities";
    /// `POST` a [`Call`](super::Call); answered with a [`Result`](super::CallResult).
    pub const CALL: &str = "/saheeli/v1/capability";
}

/// Between a capability's name and its tool's name.
pub const SEP: &str = "__";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tools {
    pub tools: Vec<ToolSpec>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Call {
    /// `capability__tool`, as the model called it.
    pub tool: String,
    /// The arguments exactly as the model sent them (a JSON object).
    pub arguments: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallResult {
    pub ok: bool,
    pub text: String,
}
