//! How a servo's ending becomes a task's state and reason: a pure
//! function of what the supervisor observed, so every case is tested here.

use saheeli_protocol::{Reason, ServoExit};

use crate::state::TaskState;

/// What the supervisor saw when a servo ended.
#[derive(Clone, Debug, Default)]
pub(super) struct Ending {
    /// The loop asked for a stop (cancel, second Ctrl-C).
    pub stopped: Option<Reason>,
    /// Collection stopped at the size cap.
    pub truncated: bool,
    /// complete.json: present and valid, absent, or invalid (why).
    pub completion: Completion,
    pub timed_out: bool,
    pub oom: bool,
    /// The servo's exit code; None when waiting for it failed.
    pub exit: Option<i64>,
    /// Why the gateway refused or failed a call for good.
    pub gateway_fatal: Option<Reason>,
    /// For a task with `verify:` or `assess: true`: whether its last
    /// attempt passed (the foreman's own record) and the servo then ended
    /// on that (exit 0). None: the task is not verified.
    pub verified: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) enum Completion {
    Valid,
    #[default]
    Absent,
    Invalid(String),
}

/// The terminal state and reason for an ending.
pub(super) fn classify(e: &Ending) -> (TaskState, Reason) {
    if let Some(r) = e.stopped {
        return (TaskState::Cancelled, r);
    }
    if e.truncated {
        return (TaskState::Incomplete, Reason::ResultsTooLarge);
    }
    match &e.completion {
        // A complete.json the checks never passed (the agent wrote it, or
        // went on after they passed) is not a success.
        Completion::Valid if e.verified == Some(false) => {
            let reason = match why_incomplete(e) {
                Reason::NoCompletion => Reason::VerificationFailed,
                r => r,
            };
            (TaskState::Incomplete, reason)
        }
        // complete.json counts when the servo said so by its exit: the
        // agent can write a file of that name, never the servo's exit code.
        Completion::Valid if e.exit.is_some_and(|c| c != 0) => {
            (TaskState::Incomplete, why_incomplete(e))
        }
        Completion::Valid => (TaskState::Complete, Reason::Complete),
        Completion::Invalid(_) => (TaskState::Incomplete, Reason::InvalidCompletion),
        Completion::Absent => (TaskState::Incomplete, why_incomplete(e)),
    }
}

fn why_incomplete(e: &Ending) -> Reason {
    if e.timed_out {
        return Reason::Timeout;
    }
    if e.oom {
        return Reason::Oom;
    }
    let Some(code) = e.exit else {
        return Reason::Lost;
    };
    match ServoExit::from_code(code) {
        Some(ServoExit::Complete) => Reason::NoCompletion,
        // The gateway knows why the LLM failed for good.
        Some(ServoExit::LlmError) => e.gateway_fatal.unwrap_or(Reason::LlmError),
        Some(ServoExit::BadTask) => Reason::BadTask,
        Some(ServoExit::MaxSteps) => Reason::MaxSteps,
        Some(ServoExit::TimeLimit) => Reason::Timeout,
        Some(ServoExit::ReplayExhausted) => Reason::ReplayExhausted,
        Some(ServoExit::Budget) => Reason::Budget,
        Some(ServoExit::Terminated) => Reason::Terminated,
        Some(ServoExit::VerificationFailed) => Reason::VerificationFailed,
        // An agent that stopped because the gateway refused it for good
        // (its budget) ends for that reason.
        Some(ServoExit::AgentFailed) => e.gateway_fatal.unwrap_or(Reason::AgentFailed),
        // A park is handled before an ending is classified; one seen here
        // (the servo parked while being stopped) is an exit like another.
        Some(ServoExit::Parked) | None => Reason::Exit(code as i32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(code: i64) -> Ending {
        Ending {
            exit: Some(code),
            ..Ending::default()
        }
    }

    #[test]
    fn complete_needs_a_valid_completion() {
        let mut e = ended(0);
        assert_eq!(classify(&e), (TaskState::Incomplete, Reason::NoCompletion));
        e.completion = Completion::Valid;
        assert_eq!(classify(&e), (TaskState::Complete, Reason::Complete));
        e.completion = Completion::Invalid("not JSON".into());
        assert_eq!(
            classify(&e),
            (TaskState::Incomplete, Reason::InvalidCompletion)
        );
    }

    #[test]
    fn a_completion_the_servo_did_not_end_on_is_not_a_success() {
        // Issue 23: the agent's shell wrote complete.json, then the servo
        // ran out of steps (or was killed): the servo's exit decides.
        for (code, want) in [
            (3, Reason::MaxSteps),
            (5, Reason::LlmError),
            (137, Reason::Exit(137)),
        ] {
            let mut e = ended(code);
            e.completion = Completion::Valid;
            assert_eq!(classify(&e), (TaskState::Incomplete, want), "{code}");
        }
        // A servo whose exit is unknown (lost) is judged by the file.
        let e = Ending {
            completion: Completion::Valid,
            ..Ending::default()
        };
        assert_eq!(classify(&e), (TaskState::Complete, Reason::Complete));
    }

    #[test]
    fn a_verified_task_completes_only_when_its_checks_passed() {
        let mut e = ended(0);
        e.completion = Completion::Valid;
        e.verified = Some(true);
        assert_eq!(classify(&e), (TaskState::Complete, Reason::Complete));
        // complete.json without a passing attempt (the agent wrote it).
        e.verified = Some(false);
        assert_eq!(
            classify(&e),
            (TaskState::Incomplete, Reason::VerificationFailed)
        );
        // ... and the servo ended otherwise: that is the reason.
        let mut e = ended(3);
        e.completion = Completion::Valid;
        e.verified = Some(false);
        assert_eq!(classify(&e), (TaskState::Incomplete, Reason::MaxSteps));
        // The last attempt failed: the servo exits 9.
        let e = ended(9);
        assert_eq!(
            classify(&e),
            (TaskState::Incomplete, Reason::VerificationFailed)
        );
    }

    #[test]
    fn a_stop_or_the_size_cap_beats_everything() {
        let mut e = ended(0);
        e.completion = Completion::Valid;
        e.truncated = true;
        assert_eq!(classify(&e).1, Reason::ResultsTooLarge);
        e.stopped = Some(Reason::Cancelled);
        assert_eq!(classify(&e), (TaskState::Cancelled, Reason::Cancelled));
    }

    #[test]
    fn why_a_servo_ended_without_completing() {
        let cases = [
            (ended(3), Reason::MaxSteps),
            (ended(4), Reason::Timeout),
            (ended(5), Reason::LlmError),
            (ended(6), Reason::ReplayExhausted),
            (ended(7), Reason::Budget),
            (ended(143), Reason::Terminated),
            (ended(137), Reason::Exit(137)),
            (Ending::default(), Reason::Lost),
            (
                Ending {
                    gateway_fatal: Some(Reason::Auth),
                    ..ended(5)
                },
                Reason::Auth,
            ),
            (
                Ending {
                    oom: true,
                    ..ended(137)
                },
                Reason::Oom,
            ),
            (
                Ending {
                    timed_out: true,
                    oom: true,
                    ..ended(143)
                },
                Reason::Timeout,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(classify(&e), (TaskState::Incomplete, want), "{e:?}");
        }
    }
}
