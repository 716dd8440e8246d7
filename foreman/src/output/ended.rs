//! The foreman's log line when a task ends: INFO when it completed (or
//! was cancelled), WARN with what to do next when it did not.

use std::fmt::Display;
use std::path::Path;

use saheeli_protocol::TaskId;
use tracing::{info, warn};

use crate::state::TaskState;

/// What to do about a task that ended `to`; None when nothing is needed.
pub(crate) fn ended_hint(id: TaskId, to: TaskState, results: &Path) -> Option<String> {
    let report = results.join(id.to_string()).join("report.md");
    match to {
        TaskState::Incomplete => Some(format!(
            "review `{}` (`saheeli task report {id}`), then `saheeli task retry {id}` to try again",
            report.display()
        )),
        TaskState::Failed => Some(format!(
            "Saheeli could not run it: see the reason and this log; `saheeli task retry {id}` once it is fixed"
        )),
        _ => None,
    }
}

/// Logs that task `id` ended `to` for `reason` (a retry by policy is
/// logged where it is made).
pub(crate) fn log_finished(id: TaskId, to: TaskState, reason: &dyn Display, results: &Path) {
    match ended_hint(id, to, results) {
        Some(hint) => warn!(task_id = %id, state = %to, %reason, %hint, "task finished"),
        None => info!(task_id = %id, state = %to, %reason, "task finished"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 24: an incomplete task was an INFO line like any other.
    #[test]
    fn an_ending_that_needs_a_person_says_what_to_do() {
        let id = TaskId::new();
        let results = Path::new("/p/results");
        let cases = [
            (TaskState::Complete, None),
            (TaskState::Cancelled, None),
            (TaskState::Incomplete, Some("report.md")),
            (TaskState::Failed, Some("task retry")),
        ];
        for (to, want) in cases {
            let hint = ended_hint(id, to, results);
            match want {
                None => assert_eq!(hint, None, "{to}"),
                Some(w) => {
                    let h = hint.unwrap_or_default();
                    assert!(h.contains(w), "{to}: {h}");
                    assert!(h.contains(&format!("saheeli task retry {id}")), "{h}");
                }
            }
        }
        let h = ended_hint(id, TaskState::Incomplete, results).unwrap();
        assert!(h.contains(&format!("/p/results/{id}/report.md")), "{h}");
    }
}
