//! Verified outcomes: when a task has `verify:` or `assess: true`, the
//! servo's `task_complete` asks the foreman to check the work first
//! (`POST /saheeli/v1/verify` on the gateway socket) and waits for the
//! [`Verdict`].
//!
//! The foreman runs the verify commands inside the task's own container
//! (after restoring `verify_files` from the submitted workspace), then, with
//! `assess: true`, asks an LLM whether the objective is met. One such
//! round is an attempt; the foreman counts them, so a task gets at most
//! `1 + verify_retries` however it calls. A failed round's feedback goes to
//! the model as the result of its `task_complete`, and the loop goes on.

use serde::{Deserialize, Serialize};

/// The servo's route on the gateway socket.
pub mod routes {
    /// `POST` a [`VerifyRequest`](super::VerifyRequest); answered with a
    /// [`Verdict`](super::Verdict) once every check has run.
    pub const VERIFY: &str = "/saheeli/v1/verify";
}

/// The default of `verify_retries`.
pub const DEFAULT_RETRIES: u32 = 2;

/// `POST /saheeli/v1/verify`: the model called `task_complete`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyRequest {
    /// The model's tool call id: asking again with the same id (after the
    /// gateway was away) gets the same verdict, not a new attempt.
    pub call_id: String,
    /// The completion message, for the assessor.
    pub message: String,
}

/// What one check was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckKind {
    /// A `verify:` command, run in the task's container.
    Verify,
    /// The assessor's judgement (`assess: true`).
    Assess,
}

impl CheckKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckKind::Verify => "verify",
            CheckKind::Assess => "assess",
        }
    }
}

/// One check of one attempt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// The attempt (1-based) this check belongs to.
    pub attempt: u32,
    pub kind: CheckKind,
    /// The command as the spec wrote it; for `assess`, `assess`.
    pub command: String,
    /// The command's exit code (None: it was killed at `verify_timeout`,
    /// or it is an assessment).
    #[serde(default)]
    pub exit_code: Option<i64>,
    pub duration_ms: u64,
    pub passed: bool,
    /// Output (stdout and stderr together, head and tail kept when long),
    /// or the assessor's feedback.
    pub output: String,
    /// The assessor answered `limited`: more attempts cannot help.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub limited: bool,
    /// The assessor's findings (what it found, done or not).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<String>,
    /// What a verifier graded (issue 49): its reward and test counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graded: Option<Graded>,
}

/// A verifier's grade: the reward file it wrote (or, without one, 1.0
/// when every command exited 0, else 0.0), and the tests its output counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Graded {
    /// The primary reward: the `reward` key, or the only one.
    pub reward: f64,
    /// Every key the reward file gave (`reward.txt`: `reward` alone).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub rewards: std::collections::BTreeMap<String, f64>,
    /// Where the reward came from: the file's path, or `exit_code`.
    pub source: String,
    /// Per-test counts, when the output has pytest's summary line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests: Option<TestCounts>,
}

/// Tests passed, failed (and errored) and skipped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestCounts {
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
}

/// The answer to a [`VerifyRequest`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Every check passed: write complete.json.
    pub passed: bool,
    /// This attempt's number, and how many the task may make in all.
    pub attempt: u32,
    pub max_attempts: u32,
    /// What the model is told when it did not pass.
    pub feedback: String,
    /// Every check of every attempt so far, this one's last (for
    /// complete.json).
    pub checks: Vec<Check>,
    /// The assessor said `limited`: no further attempt is made, the task
    /// ends `incomplete` with reason `limited`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub limited: bool,
}

impl Verdict {
    /// No attempt is left after this failed one: the task ends
    /// `verification_failed` (or `limited`, when the assessor said so).
    pub fn is_final_failure(&self) -> bool {
        !self.passed && (self.limited || self.attempt >= self.max_attempts)
    }
}

/// What the assessor concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AssessVerdict {
    /// The objective is met.
    Met,
    /// Not met; another attempt may fix it.
    NotMet,
    /// Not met, and more attempts cannot help (a missing capability, an
    /// environment limit): the retries stop here.
    Limited,
}

/// The shape the assessor must answer in:
/// `{"verdict": "met" | "not_met" | "limited", "feedback": "...", "findings": [...]}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assessment {
    pub verdict: AssessVerdict,
    pub feedback: String,
    /// What the assessor found (a list, or one text).
    #[serde(default, deserialize_with = "one_or_many")]
    pub findings: Vec<String>,
    /// How well the objective is met, 0 to 1 (issue 51: `select: assess`
    /// keeps the sample scored highest); optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
}

/// A list of texts, or one text (a list of one).
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) if s.trim().is_empty() => Vec::new(),
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_last_attempt_is_final() {
        let mut v = Verdict {
            passed: false,
            attempt: 2,
            max_attempts: 3,
            feedback: "no".into(),
            checks: vec![],
            limited: false,
        };
        assert!(!v.is_final_failure());
        v.limited = true;
        assert!(v.is_final_failure(), "limited ends it early");
        v.limited = false;
        v.attempt = 3;
        assert!(v.is_final_failure());
        v.passed = true;
        assert!(!v.is_final_failure());
    }

    #[test]
    fn an_assessment_has_a_verdict_feedback_and_findings() {
        let a: Assessment =
            serde_json::from_str(r#"{"verdict": "met", "feedback": "ok"}"#).unwrap();
        assert_eq!(a.verdict, AssessVerdict::Met);
        assert!(a.findings.is_empty());
        let a: Assessment = serde_json::from_str(
            r#"{"verdict": "limited", "feedback": "no network", "findings": "the API is unreachable"}"#,
        )
        .unwrap();
        assert_eq!(a.verdict, AssessVerdict::Limited);
        assert_eq!(a.findings, ["the API is unreachable"]);
        let a: Assessment = serde_json::from_str(
            r#"{"verdict": "not_met", "feedback": "", "findings": ["a", "b"]}"#,
        )
        .unwrap();
        assert_eq!(a.findings, ["a", "b"]);
        assert!(serde_json::from_str::<Assessment>(r#"{"verdict": "met"}"#).is_err());
        assert!(
            serde_json::from_str::<Assessment>(r#"{"verdict": "maybe", "feedback": ""}"#).is_err()
        );
        assert!(
            serde_json::from_str::<Assessment>(r#"{"verdict": "met", "feedback": "", "x": 2}"#)
                .is_err()
        );
    }
}
