//! The task lifecycle: one enum, one `transition` check.
//!
//! `queued → starting → running → complete | incomplete | failed | cancelled`

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TaskState {
    Queued,
    Starting,
    Running,
    Complete,
    Incomplete,
    Failed,
    Cancelled,
}

impl TaskState {
    pub const ALL: [TaskState; 7] = [
        TaskState::Queued,
        TaskState::Starting,
        TaskState::Running,
        TaskState::Complete,
        TaskState::Incomplete,
        TaskState::Failed,
        TaskState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Queued => "queued",
            TaskState::Starting => "starting",
            TaskState::Running => "running",
            TaskState::Complete => "complete",
            TaskState::Incomplete => "incomplete",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Complete | TaskState::Incomplete | TaskState::Failed | TaskState::Cancelled
        )
    }

    /// Whether `self → to` is a legal step of the lifecycle.
    pub fn can_become(self, to: TaskState) -> bool {
        use TaskState::*;
        matches!(
            (self, to),
            (Queued, Starting | Cancelled | Failed)
                // Requeued after an infrastructure failure.
                | (Starting | Running, Queued)
                | (Starting, Running | Incomplete | Failed | Cancelled)
                | (Running, Complete | Incomplete | Failed | Cancelled)
        )
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskState::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| format!("unknown task state `{s}`"))
    }
}

#[cfg(test)]
mod tests {
    use super::TaskState::*;
    use super::*;

    #[test]
    fn terminal_states_are_final() {
        for from in TaskState::ALL.into_iter().filter(|s| s.is_terminal()) {
            for to in TaskState::ALL {
                assert!(!from.can_become(to), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn complete_only_from_running() {
        for from in TaskState::ALL {
            assert_eq!(from.can_become(Complete), from == Running, "{from}");
        }
    }

    #[test]
    fn names_round_trip() {
        for s in TaskState::ALL {
            assert_eq!(s.as_str().parse::<TaskState>().unwrap(), s);
        }
    }
}
