//! `complete.json`: written by `task_complete`, Saheeli's definitive success signal.

use serde::{Deserialize, Serialize};

use crate::{TaskId, Usage};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub task_id: TaskId,
    /// The agent's summary of what it did.
    pub message: String,
    pub steps: u32,
    pub usage: Usage,
    /// RFC 3339, UTC.
    pub finished_at: String,
    /// Every verify and assess check, of every attempt (empty when the
    /// task has neither).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verification: Vec<crate::verify::Check>,
}
