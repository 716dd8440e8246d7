//! How a retry by policy goes on from the attempt before it (issue 30):
//! where it starts from (`retry_from`), how long it waits first
//! (`retry_backoff`), and what its servo is told about the attempt that
//! ended.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::TaskId;
use crate::front_matter::Timeout;

/// Where a retry by policy starts from (`retry_from`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RetryFrom {
    /// The ended attempt's collected workspace, and its saved conversation:
    /// the model goes on where the attempt fell.
    Session,
    /// The ended attempt's collected workspace, with a fresh conversation.
    Workspace,
    /// The submitted workspace and a fresh conversation (a clean restart).
    Scratch,
}

impl RetryFrom {
    pub const fn as_str(self) -> &'static str {
        match self {
            RetryFrom::Session => "session",
            RetryFrom::Workspace => "workspace",
            RetryFrom::Scratch => "scratch",
        }
    }

    /// What an unset `retry_from` means for an attempt that ended with
    /// `reason` (a code of [`crate::Reason`]): a crash, a kill or a lost
    /// servo goes on from its session; a failed verification starts over
    /// (its conversation led to work that did not pass); anything else
    /// starts over too, as retries always did.
    pub fn default_for(reason: &str) -> RetryFrom {
        match reason {
            "oom" | "timeout" | "terminated" | "lost" | "llm_error" => RetryFrom::Session,
            _ => RetryFrom::Scratch,
        }
    }
}

impl std::fmt::Display for RetryFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How long a retry waits in the queue (`retry_backoff`, and the
/// foreman's `requeue_backoff` for infrastructure requeues): `initial`,
/// times `multiplier` for each retry before it, at most `max`, spread by
/// jitter.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backoff {
    #[serde(default = "default_initial")]
    pub initial: Timeout,
    #[serde(default = "default_multiplier")]
    pub multiplier: f64,
    #[serde(default = "default_max")]
    pub max: Timeout,
}

fn default_initial() -> Timeout {
    Timeout(Duration::from_secs(10))
}

fn default_multiplier() -> f64 {
    2.0
}

fn default_max() -> Timeout {
    Timeout(Duration::from_secs(600))
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: default_initial(),
            multiplier: default_multiplier(),
            max: default_max(),
        }
    }
}

impl Backoff {
    pub const fn new(initial: Duration, multiplier: f64, max: Duration) -> Backoff {
        Backoff {
            initial: Timeout(initial),
            multiplier,
            max: Timeout(max),
        }
    }

    /// Why these numbers cannot be used, if they cannot.
    pub fn problem(&self) -> Option<&'static str> {
        if !(self.multiplier.is_finite() && self.multiplier >= 1.0 && self.multiplier <= 100.0) {
            return Some("`multiplier` must be a number from 1 to 100");
        }
        if self.max.0 < self.initial.0 {
            return Some("`max` must not be less than `initial`");
        }
        None
    }

    /// The wait before wait number `n` (1-based: the first retry waits
    /// `initial`): `initial × multiplier^(n-1)`, at most `max`, then spread
    /// over ±20 % by `jitter` (a number in [0, 1), random in use) so that
    /// tasks that fell together do not come back together; never past `max`.
    pub fn delay(&self, n: u32, jitter: f64) -> Duration {
        let exp = i32::try_from(n.saturating_sub(1))
            .unwrap_or(i32::MAX)
            .min(64);
        let base = self.initial.0.as_secs_f64() * self.multiplier.powi(exp);
        let max = self.max.0.as_secs_f64();
        let spread = base.min(max) * (0.8 + jitter.clamp(0.0, 1.0) * 0.4);
        Duration::from_secs_f64(spread.min(max).max(0.0))
    }
}

/// What a retry's servo is told about the attempt it goes on from
/// (`ServoTask::resume`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resume {
    /// The ended attempt: its session file is `servo-<from>-session.json`
    /// in the workspace, sealed with its key (the gateway gives that key
    /// as `SessionKey::resume_key`).
    pub from: TaskId,
    /// `session` or `workspace` (a `scratch` retry is not a resume).
    pub mode: RetryFrom,
    /// What ended the attempt, how long it ran and the budget left, for
    /// the model; the servo adds the last tool call from the session.
    pub note: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_by_reason() {
        for r in ["oom", "timeout", "terminated", "lost", "llm_error"] {
            assert_eq!(RetryFrom::default_for(r), RetryFrom::Session, "{r}");
        }
        for r in ["verification_failed", "max_steps", "exit", "no_completion"] {
            assert_eq!(RetryFrom::default_for(r), RetryFrom::Scratch, "{r}");
        }
    }

    #[test]
    fn backoff_grows_is_capped_and_spread() {
        let b = Backoff::default();
        let secs = |n, j| b.delay(n, j).as_secs_f64();
        assert_eq!(secs(1, 0.5), 10.0);
        assert_eq!(secs(2, 0.5), 20.0);
        assert_eq!(secs(3, 0.5), 40.0);
        assert_eq!(secs(7, 0.5), 600.0, "capped at max");
        assert_eq!(secs(1000, 0.5), 600.0, "no overflow");
        assert_eq!(secs(1, 0.0), 8.0);
        assert!((secs(1, 0.999_999) - 12.0).abs() < 1e-3);
        assert_eq!(secs(9, 0.999_999), 600.0, "jitter never passes max");
        let flat = Backoff::new(Duration::from_secs(1), 1.0, Duration::from_secs(1));
        assert_eq!(flat.delay(5, 0.0), Duration::from_millis(800));
    }

    #[test]
    fn backoff_parses_with_defaults_and_checks() {
        let b: Backoff = serde_yaml::from_str("{ initial: 1s, max: 1m }").unwrap();
        assert_eq!(
            b,
            Backoff::new(Duration::from_secs(1), 2.0, Duration::from_secs(60))
        );
        assert!(serde_yaml::from_str::<Backoff>("{ intial: 1s }").is_err());
        let bad = Backoff::new(Duration::from_secs(60), 2.0, Duration::from_secs(1));
        assert!(bad.problem().is_some());
        let bad = Backoff::new(Duration::from_secs(1), 0.5, Duration::from_secs(1));
        assert!(bad.problem().is_some());
    }
}
