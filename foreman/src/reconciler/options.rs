//! How a serve loop is asked to run, and what it did.

use saheeli_protocol::TaskId;

use crate::state::TaskState;

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ServeOptions {
    /// Return once nothing is queued or running.
    pub drain: bool,
    /// Run only this task and return when it ends (`saheeli run`).
    pub only: Option<TaskId>,
}

/// What a serve loop did.
#[derive(Debug, Default)]
pub(crate) struct ServeSummary {
    pub finished: Vec<(TaskId, TaskState)>,
}

impl ServeSummary {
    pub fn all_complete(&self) -> bool {
        self.finished.iter().all(|(_, s)| *s == TaskState::Complete)
    }
}
