//! Whose failure an eval result is (issue 49): `agent`, `infra` or
//! `verifier`, a pure function of what the store recorded, so every case
//! is tested here (the shape of supervisor/outcome.rs).
//!
//! - `infra`: the platform failed the task — it ended `failed` (a launch
//!   error: a Docker error, an image that could not be made, a `setup:`
//!   that failed (`setup_failed`: no agent ran); a lost servo;
//!   a collection that failed), or its servo was `lost`, or the foreman was
//!   stopped under it (`interrupted`), or its last verify could not run for
//!   the platform's sake (the verify container or the hidden tests could
//!   not be made, a command could not be started, the verify run crashed).
//! - `verifier`: the verify ran but could not grade — a reward file that
//!   does not parse, a reward file `verify.reward` named that is missing,
//!   the verify timing out, or the workspace not read within its timeout.
//! - `agent`: everything else (`max_steps`, `timeout`, a failed verify, an
//!   expectation that did not hold, …).
//!
//! Infra results are retried by policy (`--infra-retries`) and never
//! scored; verifier results are scored (as failures) but counted apart.

use saheeli_protocol::verify::{Check, CheckKind};
use serde::{Deserialize, Serialize};

use crate::state::TaskState;

/// Whose failure a result is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FailureClass {
    Agent,
    Infra,
    Verifier,
}

impl FailureClass {
    pub const ALL: [FailureClass; 3] = [
        FailureClass::Agent,
        FailureClass::Infra,
        FailureClass::Verifier,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Agent => "agent",
            FailureClass::Infra => "infra",
            FailureClass::Verifier => "verifier",
        }
    }
}

/// How a task's last verify attempt went, as far as classing goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum VerifySeen {
    /// No verify, or it ran and graded (pass or fail).
    #[default]
    Graded,
    /// It could not run for the platform's sake.
    NotRun,
    /// It ran but could not grade.
    Ungraded,
}

/// What the store recorded of one ended attempt.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Observed<'a> {
    /// The case's verdict (its state and `expect:`).
    pub passed: bool,
    pub state: TaskState,
    pub reason: Option<&'a str>,
    /// The last verify attempt.
    pub verify: VerifySeen,
}

/// The reasons that are the platform's whatever the state.
const INFRA_REASONS: &[&str] = &["launch", "docker", "lost", "collect", "interrupted"];

/// The class of a result; None for a pass.
pub(crate) fn classify(o: &Observed) -> Option<FailureClass> {
    if o.passed {
        return None;
    }
    if o.state == TaskState::Failed || o.reason.is_some_and(|r| INFRA_REASONS.contains(&r)) {
        return Some(FailureClass::Infra);
    }
    // A verify that could not run or grade ended the task only when it
    // is why the task ended.
    if o.state == TaskState::Incomplete && o.reason == Some("verification_failed") {
        match o.verify {
            VerifySeen::NotRun => return Some(FailureClass::Infra),
            VerifySeen::Ungraded => return Some(FailureClass::Verifier),
            VerifySeen::Graded => {}
        }
    }
    Some(FailureClass::Agent)
}

/// What routes/verify.rs says of a check it could not run for the
/// platform's sake (`not_run`: no exit code, no time taken).
const NOT_RUN: &[&str] = &[
    "the verify container could not be made",
    "the hidden tests could not be staged",
    "the tree to verify could not be made",
    "`verify_files` could not be restored",
    "could not be run: ",
    "the verify run failed: ",
];
/// What routes/verify.rs says of a workspace it could not read in time.
const NOT_READ: &str = "the workspace could not be read within `verify_timeout`";
/// What routes/verify_hidden.rs appends, as the last line of the output,
/// when a reward file does not parse.
const REWARD_TROUBLE: &str = "[saheeli] ";

/// How the last verify attempt among `checks` went: `timeout_ms` is the
/// task's `verify_timeout`, `reward_named` whether `verify.reward` named
/// the reward file (then grading by exit code means it was missing).
pub(crate) fn verify_seen(checks: &[Check], timeout_ms: u64, reward_named: bool) -> VerifySeen {
    let Some(last) = checks.iter().map(|c| c.attempt).max() else {
        return VerifySeen::Graded;
    };
    let mine = checks
        .iter()
        .filter(|c| c.attempt == last && c.kind == CheckKind::Verify);
    for c in mine {
        if c.exit_code.is_none() && c.duration_ms == 0 {
            if c.output.starts_with(NOT_READ) {
                return VerifySeen::Ungraded;
            }
            if NOT_RUN.iter().any(|p| c.output.starts_with(p)) {
                return VerifySeen::NotRun;
            }
        }
        if c.exit_code.is_none() && c.duration_ms >= timeout_ms {
            return VerifySeen::Ungraded;
        }
        let last_line = c.output.trim_end().rsplit('\n').next().unwrap_or("");
        if !c.passed && c.graded.is_none() && last_line.starts_with(REWARD_TROUBLE) {
            return VerifySeen::Ungraded;
        }
        if reward_named && c.graded.as_ref().is_some_and(|g| g.source == "exit_code") {
            return VerifySeen::Ungraded;
        }
    }
    VerifySeen::Graded
}

#[cfg(test)]
mod tests {
    use super::FailureClass::*;
    use super::*;
    use saheeli_protocol::verify::Graded;

    fn check(attempt: u32, exit: Option<i64>, ms: u64, output: &str) -> Check {
        Check {
            attempt,
            kind: CheckKind::Verify,
            command: "bash /tests/test.sh".into(),
            exit_code: exit,
            duration_ms: ms,
            passed: exit == Some(0),
            output: output.into(),
            limited: false,
            findings: Vec::new(),
            graded: None,
        }
    }

    fn graded(mut c: Check, source: &str, reward: f64) -> Check {
        c.graded = Some(Graded {
            reward,
            source: source.into(),
            ..Default::default()
        });
        c
    }

    #[test]
    fn every_ending_has_its_class() {
        use TaskState::*;
        use VerifySeen::*;
        let vf = Some("verification_failed");
        type Row<'a> = (
            bool,
            TaskState,
            Option<&'a str>,
            VerifySeen,
            Option<FailureClass>,
        );
        #[rustfmt::skip]
        let table: &[Row] = &[
            (true, Complete, Some("complete"), Graded, None),
            // An expected `incomplete` passes: nothing to class.
            (true, Incomplete, Some("max_steps"), Graded, None),
            // The platform's.
            (false, Failed, Some("launch"), Graded, Some(Infra)),
            (false, Failed, Some("docker"), Graded, Some(Infra)),
            (false, Failed, Some("lost"), Graded, Some(Infra)),
            (false, Failed, Some("collect"), Graded, Some(Infra)),
            // The task's own set-up failed (issue 50): no agent ran.
            (false, Failed, Some("setup_failed"), Graded, Some(Infra)),
            (false, Failed, None, Graded, Some(Infra)),
            (false, Incomplete, Some("lost"), Graded, Some(Infra)),
            (false, Cancelled, Some("interrupted"), Graded, Some(Infra)),
            (false, Incomplete, vf, NotRun, Some(Infra)),
            // The verifier's.
            (false, Incomplete, vf, Ungraded, Some(Verifier)),
            // The agent's.
            (false, Incomplete, vf, Graded, Some(Agent)),
            (false, Incomplete, Some("max_steps"), Graded, Some(Agent)),
            (false, Incomplete, Some("max_steps"), NotRun, Some(Agent)),
            (false, Incomplete, Some("timeout"), Ungraded, Some(Agent)),
            (false, Incomplete, Some("no_completion"), Graded, Some(Agent)),
            (false, Incomplete, Some("llm_error"), Graded, Some(Agent)),
            (false, Cancelled, Some("cancelled"), Graded, Some(Agent)),
            // Ended as expected, an expectation failed.
            (false, Complete, Some("complete"), Graded, Some(Agent)),
        ];
        for &(passed, state, reason, verify, want) in table {
            let o = Observed {
                passed,
                state,
                reason,
                verify,
            };
            assert_eq!(classify(&o), want, "{o:?}");
        }
    }

    #[test]
    fn the_last_verify_attempt_says_whether_it_ran_and_graded() {
        use VerifySeen::*;
        let t = 60_000;
        let table: Vec<(Vec<Check>, bool, VerifySeen)> = vec![
            (vec![], false, Graded),
            (vec![check(1, Some(1), 40, "FAILED test_x")], false, Graded),
            (
                vec![graded(
                    check(1, Some(0), 40, "ok"),
                    "/logs/verifier/reward.txt",
                    1.0,
                )],
                true,
                Graded,
            ),
            (
                vec![check(
                    1,
                    None,
                    0,
                    "the verify container could not be made: 409",
                )],
                false,
                NotRun,
            ),
            (
                vec![check(
                    1,
                    None,
                    0,
                    "the hidden tests could not be staged: EIO",
                )],
                false,
                NotRun,
            ),
            (
                vec![check(1, None, 0, "could not be run: exec failed")],
                false,
                NotRun,
            ),
            (vec![check(1, None, t, "")], false, Ungraded),
            (
                vec![check(
                    1,
                    None,
                    0,
                    "the workspace could not be read within `verify_timeout` (1m)",
                )],
                false,
                Ungraded,
            ),
            // A reward file that does not parse fails the check.
            (
                vec![Check {
                    passed: false,
                    ..check(
                        1,
                        Some(0),
                        40,
                        "ok\n[saheeli] the reward file `/l/reward.txt` is empty\n",
                    )
                }],
                false,
                Ungraded,
            ),
            // A named reward file that was not there: graded by exit code.
            (
                vec![graded(check(1, Some(0), 40, "ok"), "exit_code", 1.0)],
                true,
                Ungraded,
            ),
            (
                vec![graded(check(1, Some(0), 40, "ok"), "exit_code", 1.0)],
                false,
                Graded,
            ),
            // Only the last attempt counts.
            (
                vec![
                    check(1, None, 0, "the verify container could not be made: 409"),
                    check(2, Some(1), 40, "FAILED"),
                ],
                false,
                Graded,
            ),
            // The agent's own text never looks like the platform's.
            (
                vec![check(1, Some(1), 0, "could not be run: x")],
                false,
                Graded,
            ),
        ];
        for (checks, named, want) in table {
            assert_eq!(verify_seen(&checks, t, named), want, "{checks:?}");
        }
    }
}
