//! `recoverable` in `task status --json`: whether something a person can
//! do moves an ended or waiting task on: an answer, an approval, a resume
//! or an unblock (every waiting state), or `task retry` (an ending whose
//! reason another attempt can help). Absent (null) while the task is
//! queued, starting or running: nothing needs doing.

use saheeli_protocol::Reason;

use crate::state::TaskState;

/// The decision, from the state and the reason code it ended with.
pub(crate) fn recoverable(state: TaskState, reason: Option<&str>) -> Option<bool> {
    use TaskState::*;
    match state {
        Queued | Starting | Running => None,
        WaitingHuman | Paused | Blocked => Some(true),
        Complete | Cancelled => Some(false),
        // An unknown or missing reason: a retry is the way to find out.
        Incomplete | Failed => Some(
            reason
                .and_then(|r| r.parse::<Reason>().ok())
                .is_none_or(|r| !r.is_final()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskState::*;

    #[test]
    fn what_a_person_can_move_on() {
        let cases: &[(TaskState, Option<&str>, Option<bool>)] = &[
            (Queued, None, None),
            (Running, None, None),
            (WaitingHuman, None, Some(true)),
            (Paused, None, Some(true)),
            (Blocked, None, Some(true)),
            (Complete, Some("complete"), Some(false)),
            (Cancelled, Some("cancelled"), Some(false)),
            (Incomplete, Some("max_steps"), Some(true)),
            (Incomplete, Some("timeout"), Some(true)),
            (Incomplete, Some("no_answer"), Some(true)),
            (Incomplete, Some("exit 137"), Some(true)),
            (Incomplete, Some("budget"), Some(false)),
            (Incomplete, Some("limited"), Some(false)),
            (Failed, Some("auth"), Some(false)),
            (Failed, Some("launch"), Some(true)),
            (Failed, None, Some(true)),
        ];
        for (state, reason, want) in cases {
            assert_eq!(recoverable(*state, *reason), *want, "{state} {reason:?}");
        }
    }
}
