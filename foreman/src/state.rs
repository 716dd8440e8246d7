//! The task lifecycle: one enum, one `transition` check.
//!
//! `queued → starting → running → complete | incomplete | failed | cancelled`,
//! and `running ⇄ waiting_human | paused | blocked` while a human is asked,
//! pauses it, or must unblock it (a parked task goes back through `queued`
//! when the human replied).

use serde::Serialize;

/// `as_str`, `Display` and `FromStr` use the snake_case names stored in
/// the database and printed in `--json`.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    strum::IntoStaticStr,
    strum::Display,
    strum::EnumString,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub(crate) enum TaskState {
    Queued,
    Starting,
    Running,
    /// Waiting for a human's answer, approval or plan review.
    WaitingHuman,
    /// Paused by a human (or a `pause_on` breakpoint).
    Paused,
    /// The model said it cannot go on (`task_blocked`): waits for a person
    /// to unblock it (`task answer`, `inject`, `resume`) or cancel it.
    Blocked,
    Complete,
    Incomplete,
    Failed,
    Cancelled,
}

impl TaskState {
    /// Held by a foreman while its servo may run: what a lease fences.
    pub const HELD: [TaskState; 5] = [
        TaskState::Starting,
        TaskState::Running,
        TaskState::WaitingHuman,
        TaskState::Paused,
        TaskState::Blocked,
    ];
    /// A servo is launched or runs, no human asked.
    pub const ACTIVE: [TaskState; 2] = [TaskState::Starting, TaskState::Running];
    /// Waiting for a human (no concurrency slot is held).
    pub const WAITING: [TaskState; 3] = [
        TaskState::WaitingHuman,
        TaskState::Paused,
        TaskState::Blocked,
    ];
    /// Not ended.
    pub const UNENDED: [TaskState; 6] = [
        TaskState::Queued,
        TaskState::Starting,
        TaskState::Running,
        TaskState::WaitingHuman,
        TaskState::Paused,
        TaskState::Blocked,
    ];

    /// Ended: nothing moves it again.
    pub const TERMINAL: [TaskState; 4] = [
        TaskState::Complete,
        TaskState::Incomplete,
        TaskState::Failed,
        TaskState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Waiting for a human (no concurrency slot is held).
    pub fn is_waiting(self) -> bool {
        Self::WAITING.contains(&self)
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
                | (Running, WaitingHuman | Paused | Blocked)
                // The servo's first call can reach the desk before the
                // launch has written `running`.
                | (Starting, WaitingHuman | Paused | Blocked)
                // Replied to, resumed or unblocked: the servo goes on, or
                // (parked) the task is queued for a new container on its
                // workspace.
                | (WaitingHuman | Paused | Blocked, Running | Queued)
                // An ending always wins over a wait: a servo that asked
                // (or whose shell asked, case 22) and then finished is
                // recorded as it ended; its open question is moot.
                | (WaitingHuman | Paused | Blocked, Complete | Incomplete | Failed | Cancelled)
        )
    }
}

/// An SQL list of `states` for `IN`: `('starting', 'running')`. The
/// store builds every state list of its queries from the lists above, so
/// a new state is one edit here.
pub(crate) fn sql_list(states: &[TaskState]) -> String {
    let names: Vec<String> = states.iter().map(|s| format!("'{s}'")).collect();
    format!("({})", names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::TaskState::*;
    use super::*;
    use strum::IntoEnumIterator;

    #[test]
    fn terminal_states_are_final() {
        for from in TaskState::iter().filter(|s| s.is_terminal()) {
            for to in TaskState::iter() {
                assert!(!from.can_become(to), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn complete_only_from_running_or_a_wait() {
        for from in TaskState::iter() {
            assert_eq!(
                from.can_become(Complete),
                matches!(from, Running | WaitingHuman | Paused | Blocked),
                "{from}"
            );
        }
    }

    #[test]
    fn the_state_lists_agree_with_the_predicates() {
        let all: Vec<TaskState> = TaskState::iter().collect();
        let of = |f: &dyn Fn(TaskState) -> bool| -> Vec<TaskState> {
            all.iter().copied().filter(|s| f(*s)).collect()
        };
        assert_eq!(TaskState::UNENDED.to_vec(), of(&|s| !s.is_terminal()));
        assert_eq!(TaskState::TERMINAL.to_vec(), of(&|s| s.is_terminal()));
        assert_eq!(TaskState::WAITING.to_vec(), of(&|s| s.is_waiting()));
        assert_eq!(
            TaskState::HELD.to_vec(),
            of(&|s| !s.is_terminal() && s != Queued)
        );
        assert_eq!(
            TaskState::ACTIVE.to_vec(),
            of(&|s| !s.is_terminal() && s != Queued && !s.is_waiting())
        );
        assert_eq!(sql_list(&TaskState::ACTIVE), "('starting', 'running')");
    }

    #[test]
    fn blocked_is_a_wait_like_the_others() {
        assert!(Blocked.is_waiting());
        assert!(Running.can_become(Blocked) && Blocked.can_become(Running));
        assert!(Blocked.can_become(Queued) && Blocked.can_become(Cancelled));
        assert!(!Queued.can_become(Blocked));
    }

    #[test]
    fn names_round_trip() {
        for s in TaskState::iter() {
            assert_eq!(s.as_str().parse::<TaskState>().unwrap(), s);
        }
    }
}
