//! Why a task ended: one enum that the servo, the gateway, the reconciler,
//! the retry policy, `--json` output and metrics all share.
//!
//! [`Reason::code`] is the machine-readable word from a fixed set (what
//! `retry_on` lists and scripts match on); the human detail of an ending
//! (an error chain, a file name) travels separately.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a task ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A valid complete.json was collected.
    Complete,
    /// `saheeli task cancel`.
    Cancelled,
    /// The foreman was told to stop (a second Ctrl-C).
    Interrupted,
    /// `max_steps` reached without `task_complete`.
    MaxSteps,
    /// The wall-clock limit ran out.
    Timeout,
    /// The container was killed for memory.
    Oom,
    /// The token or cost budget is spent.
    Budget,
    /// The provider refused the key (401/403).
    Auth,
    /// The provider refused the request (400).
    BadRequest,
    /// The LLM could not be reached or kept failing.
    LlmError,
    /// The replay script ran out of turns.
    ReplayExhausted,
    /// The servo was stopped by SIGTERM.
    Terminated,
    /// The servo vanished (its container is gone, or it ended while no
    /// foreman watched and left nothing to go by).
    Lost,
    /// Collection stopped at `max_results_size`.
    ResultsTooLarge,
    /// The servo exited 0 without a complete.json.
    NoCompletion,
    /// complete.json was there but not valid.
    InvalidCompletion,
    /// The servo could not read its task.
    BadTask,
    /// The servo exited with a code that means nothing else.
    Exit(i32),
    /// Saheeli could not collect the workspace.
    Collect,
    /// Saheeli could not launch the servo (e.g. the image is missing).
    Launch,
    /// Docker could not be reached at all.
    Docker,
    /// `verify` kept failing.
    VerificationFailed,
    /// Nobody answered a question in time.
    NoAnswer,
    /// A third-party agent CLI exited non-zero (issue 25).
    AgentFailed,
    /// The assessor said more attempts cannot help (a missing capability,
    /// an environment limit): the task stopped early, its findings in the
    /// report.
    Limited,
    /// A `setup:` (or `maintenance:`) command failed before the agent
    /// started (issue 50); its output is in the report.
    SetupFailed,
    /// The task needs an engine capability the engine that was to run it
    /// lacks (issue 53): refused before launch, never started.
    Unsupported,
    /// Best-of-N (issue 51): every sample ended and none qualified under
    /// the task's `select:` (none completed: verify or the assessor never
    /// passed one); the task ends `incomplete`. Each sample keeps its own
    /// outcome.
    NoSampleQualified,
}

impl Reason {
    /// Every reason word, for help texts and validation of `retry_on`.
    pub const CODES: &[&str] = &[
        "complete",
        "cancelled",
        "interrupted",
        "max_steps",
        "timeout",
        "oom",
        "budget",
        "auth",
        "bad_request",
        "llm_error",
        "replay_exhausted",
        "terminated",
        "lost",
        "results_too_large",
        "no_completion",
        "invalid_completion",
        "bad_task",
        "exit",
        "collect",
        "launch",
        "docker",
        "verification_failed",
        "no_answer",
        "agent_failed",
        "limited",
        "setup_failed",
        "unsupported",
        "no_sample_qualified",
    ];

    /// The machine-readable word (`exit` for every [`Reason::Exit`]).
    pub const fn code(self) -> &'static str {
        match self {
            Reason::Complete => "complete",
            Reason::Cancelled => "cancelled",
            Reason::Interrupted => "interrupted",
            Reason::MaxSteps => "max_steps",
            Reason::Timeout => "timeout",
            Reason::Oom => "oom",
            Reason::Budget => "budget",
            Reason::Auth => "auth",
            Reason::BadRequest => "bad_request",
            Reason::LlmError => "llm_error",
            Reason::ReplayExhausted => "replay_exhausted",
            Reason::Terminated => "terminated",
            Reason::Lost => "lost",
            Reason::ResultsTooLarge => "results_too_large",
            Reason::NoCompletion => "no_completion",
            Reason::InvalidCompletion => "invalid_completion",
            Reason::BadTask => "bad_task",
            Reason::Exit(_) => "exit",
            Reason::Collect => "collect",
            Reason::Launch => "launch",
            Reason::Docker => "docker",
            Reason::VerificationFailed => "verification_failed",
            Reason::NoAnswer => "no_answer",
            Reason::AgentFailed => "agent_failed",
            Reason::Limited => "limited",
            Reason::SetupFailed => "setup_failed",
            Reason::Unsupported => "unsupported",
            Reason::NoSampleQualified => "no_sample_qualified",
        }
    }

    /// Whether another attempt can never help (the retry policy skips
    /// these whatever `retry_on` says).
    pub const fn is_final(self) -> bool {
        matches!(
            self,
            Reason::Complete
                | Reason::Cancelled
                | Reason::Interrupted
                | Reason::Budget
                | Reason::Auth
                | Reason::BadRequest
                | Reason::ResultsTooLarge
                | Reason::Limited
                | Reason::SetupFailed
                | Reason::Unsupported
        )
    }
}

/// `exit 137` for [`Reason::Exit`], else the code.
impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Exit(code) => write!(f, "exit {code}"),
            r => f.write_str(r.code()),
        }
    }
}

/// An unknown reason word.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown reason `{0}`")]
pub struct UnknownReason(pub String);

/// Parses a code, `exit N`, and the older `word: detail` form.
impl FromStr for Reason {
    type Err = UnknownReason;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if let Some(n) = s.strip_prefix("exit ") {
            return n
                .trim()
                .parse()
                .map(Reason::Exit)
                .map_err(|_| UnknownReason(s.to_string()));
        }
        let word = s.split(':').next().unwrap_or(s).trim();
        let r = match word {
            "complete" => Reason::Complete,
            "cancelled" => Reason::Cancelled,
            "interrupted" => Reason::Interrupted,
            "max_steps" => Reason::MaxSteps,
            "timeout" => Reason::Timeout,
            "oom" => Reason::Oom,
            "budget" => Reason::Budget,
            "auth" => Reason::Auth,
            "bad_request" => Reason::BadRequest,
            "llm_error" => Reason::LlmError,
            "replay_exhausted" => Reason::ReplayExhausted,
            "terminated" => Reason::Terminated,
            "lost" => Reason::Lost,
            "results_too_large" => Reason::ResultsTooLarge,
            "no_completion" => Reason::NoCompletion,
            "invalid_completion" => Reason::InvalidCompletion,
            "bad_task" => Reason::BadTask,
            "collect" => Reason::Collect,
            "launch" => Reason::Launch,
            "docker" => Reason::Docker,
            "verification_failed" => Reason::VerificationFailed,
            "no_answer" => Reason::NoAnswer,
            "agent_failed" => Reason::AgentFailed,
            "limited" => Reason::Limited,
            "setup_failed" => Reason::SetupFailed,
            "unsupported" => Reason::Unsupported,
            "no_sample_qualified" => Reason::NoSampleQualified,
            _ => return Err(UnknownReason(s.to_string())),
        };
        Ok(r)
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Reason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips() {
        for code in Reason::CODES {
            let text = if *code == "exit" { "exit 3" } else { code };
            let r: Reason = text.parse().unwrap();
            assert_eq!(r.code(), *code);
            assert_eq!(r.to_string().parse::<Reason>().unwrap(), r);
        }
    }

    #[test]
    fn older_detailed_forms_parse() {
        assert_eq!(
            "invalid_completion: not JSON".parse::<Reason>().unwrap(),
            Reason::InvalidCompletion
        );
        assert_eq!("exit 137".parse::<Reason>().unwrap(), Reason::Exit(137));
        assert!("exit x".parse::<Reason>().is_err());
        assert!("typo".parse::<Reason>().is_err());
    }

    #[test]
    fn serializes_as_its_display() {
        let json = serde_json::to_string(&Reason::Exit(9)).unwrap();
        assert_eq!(json, "\"exit 9\"");
        let back: Reason = serde_json::from_str(&json).unwrap();
        assert_eq!(back, Reason::Exit(9));
    }
}
