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
    // The gateway stopped the agent: its budget or (a third-party agent's)
    // `max_steps` in LLM calls ran out. Whatever the agent did after the
    // refusal (a third-party CLI may exit 0, or fail), that is the ending.
    if let Some(r @ (Reason::Budget | Reason::MaxSteps)) = e.gateway_fatal {
        return (TaskState::Incomplete, r);
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

/// Whether a servo exited parked (saved its session to wait for a human)
/// and nothing stopped it: its workspace is kept, the task waits on.
pub(super) fn parked_exit(exit: Option<i64>, timed_out: bool, stopped: Option<Reason>) -> bool {
    !timed_out && stopped.is_none() && exit == Some(i64::from(ServoExit::Parked.code()))
}

/// The state and reason of a servo whose workspace never came back (a
/// remote servo that did not upload): nothing to classify but the stop.
pub(super) fn nothing_collected(
    stopped: Option<Reason>,
    timed_out: bool,
    oom: bool,
) -> (TaskState, Reason) {
    let state = if stopped == Some(Reason::Cancelled) {
        TaskState::Cancelled
    } else {
        TaskState::Incomplete
    };
    let reason = stopped.unwrap_or(if timed_out {
        Reason::Timeout
    } else if oom {
        Reason::Oom
    } else {
        Reason::NoCompletion
    });
    (state, reason)
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
        Some(ServoExit::Limited) => Reason::Limited,
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

    #[test]
    fn a_park_is_a_parked_exit_nothing_stopped() {
        let parked = Some(i64::from(ServoExit::Parked.code()));
        assert!(parked_exit(parked, false, None));
        assert!(!parked_exit(parked, true, None), "timed out");
        assert!(!parked_exit(parked, false, Some(Reason::Cancelled)));
        assert!(!parked_exit(Some(0), false, None));
        assert!(!parked_exit(None, false, None), "the wait failed");
    }

    #[test]
    fn a_servo_that_brought_nothing_back_ends_by_its_stop() {
        let cases = [
            (
                (None, false, false),
                (TaskState::Incomplete, Reason::NoCompletion),
            ),
            ((None, true, true), (TaskState::Incomplete, Reason::Timeout)),
            ((None, false, true), (TaskState::Incomplete, Reason::Oom)),
            (
                (Some(Reason::Cancelled), true, false),
                (TaskState::Cancelled, Reason::Cancelled),
            ),
            (
                (Some(Reason::Interrupted), false, false),
                (TaskState::Incomplete, Reason::Interrupted),
            ),
        ];
        for ((stopped, timed_out, oom), want) in cases {
            assert_eq!(nothing_collected(stopped, timed_out, oom), want);
        }
    }

    fn ended(code: i64) -> Ending {
        Ending {
            exit: Some(code),
            ..Ending::default()
        }
    }

    /// Issue 25: a third-party agent stopped at the gateway (budget spent
    /// mid-stream, or its LLM calls at `max_steps`) ends so whatever it
    /// did next: exit 0 with an answer, or a failure.
    #[test]
    fn a_gateway_stop_is_the_ending_whatever_the_agent_did_next() {
        for fatal in [Reason::Budget, Reason::MaxSteps] {
            for (code, completion) in [
                (0, Completion::Valid),
                (1, Completion::Absent),
                (5, Completion::Absent),
            ] {
                let e = Ending {
                    exit: Some(code),
                    completion,
                    gateway_fatal: Some(fatal),
                    ..Ending::default()
                };
                assert_eq!(classify(&e), (TaskState::Incomplete, fatal), "{code}");
            }
        }
        // A cancel still wins.
        let e = Ending {
            stopped: Some(Reason::Cancelled),
            gateway_fatal: Some(Reason::Budget),
            ..Ending::default()
        };
        assert_eq!(classify(&e).1, Reason::Cancelled);
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
