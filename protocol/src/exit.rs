//! What a servo's exit code means to the foreman.

/// Why a servo process ended. The numeric codes are the contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServoExit {
    /// `task_complete` was called and complete.json written.
    Complete,
    /// The servo could not start: unreadable prompt or task.json.
    BadTask,
    /// `max_steps` reached without `task_complete`.
    MaxSteps,
    /// The servo's own time budget ran out.
    TimeLimit,
    /// The LLM could not be reached or kept failing.
    LlmError,
    /// The replay script ran out of turns.
    ReplayExhausted,
    /// The gateway refused a call: the token or cost budget is spent.
    Budget,
    /// Terminated by SIGTERM (the foreman's timeout or a cancel).
    Terminated,
    /// Not an ending: the servo waits for a human without a container. Its
    /// session holds what it waits for; the foreman keeps the workspace
    /// and starts a new servo on it once the human replied.
    Parked,
    /// `verify` (or `assess`) did not pass on the last allowed attempt.
    VerificationFailed,
    /// A third-party agent CLI exited non-zero, or ended without an answer.
    AgentFailed,
    /// The assessor answered `limited`: no attempt is made after it.
    Limited,
}

impl ServoExit {
    pub const ALL: [ServoExit; 12] = [
        ServoExit::Complete,
        ServoExit::BadTask,
        ServoExit::MaxSteps,
        ServoExit::TimeLimit,
        ServoExit::LlmError,
        ServoExit::ReplayExhausted,
        ServoExit::Budget,
        ServoExit::Terminated,
        ServoExit::Parked,
        ServoExit::VerificationFailed,
        ServoExit::AgentFailed,
        ServoExit::Limited,
    ];

    pub const fn code(self) -> i32 {
        match self {
            ServoExit::Complete => 0,
            ServoExit::BadTask => 2,
            ServoExit::MaxSteps => 3,
            ServoExit::TimeLimit => 4,
            ServoExit::LlmError => 5,
            ServoExit::ReplayExhausted => 6,
            ServoExit::Budget => 7,
            ServoExit::Terminated => 143,
            ServoExit::Parked => 8,
            ServoExit::VerificationFailed => 9,
            ServoExit::AgentFailed => 10,
            ServoExit::Limited => 11,
        }
    }

    pub fn from_code(code: i64) -> Option<Self> {
        Self::ALL.into_iter().find(|e| i64::from(e.code()) == code)
    }

    /// Why the task ended, as the servo knows it.
    pub const fn reason(self) -> crate::Reason {
        use crate::Reason;
        match self {
            ServoExit::Complete => Reason::Complete,
            ServoExit::BadTask => Reason::BadTask,
            ServoExit::MaxSteps => Reason::MaxSteps,
            ServoExit::TimeLimit => Reason::Timeout,
            ServoExit::LlmError => Reason::LlmError,
            ServoExit::ReplayExhausted => Reason::ReplayExhausted,
            ServoExit::Budget => Reason::Budget,
            ServoExit::Terminated => Reason::Terminated,
            ServoExit::VerificationFailed => Reason::VerificationFailed,
            ServoExit::AgentFailed => Reason::AgentFailed,
            ServoExit::Limited => Reason::Limited,
            // The foreman never ends a task on a park; were it to see one
            // where no park can be (an old foreman), it is an odd exit.
            ServoExit::Parked => Reason::Exit(8),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for e in ServoExit::ALL {
            assert_eq!(ServoExit::from_code(e.code().into()), Some(e));
        }
        assert_eq!(ServoExit::from_code(1), None);
    }
}
