//! `report.json`: what an eval run did, case by case and in total. The
//! same shape is printed by `--json`, read back by `eval compare`, and
//! rendered by `html`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::outcome::{FailureClass, Observed, classify, verify_seen};
use super::phases::{Phases, phases};
use super::score::{Score, score};
use super::suite::{Case, Suite};
use crate::store::{EvalLink, EvalRunRow, Store, TaskRow};

pub(crate) use super::totals::{rfc3339, totals};

/// Caps on the texts a report carries (the agent wrote most of them).
const MAX_PROMPT: usize = 64 << 10;
const MAX_MESSAGE: usize = 16 << 10;
const MAX_CHECK_OUTPUT: usize = 16 << 10;
const MAX_CHECKS: usize = 20;

/// The whole report (`results/eval-<run_id>/report.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct EvalReport {
    pub run_id: String,
    /// The suite's name.
    pub suite: String,
    pub suite_path: String,
    pub suite_digest: String,
    /// Every model the cases ran with.
    pub models: Vec<String>,
    /// RFC 3339, UTC.
    pub started: String,
    pub ended: Option<String>,
    pub pass_threshold: f64,
    pub repeat: u32,
    /// Passed results over the scored ones (cases × samples × repeats,
    /// less the infra failures), 0 to 1.
    pub pass_rate: f64,
    pub passed: usize,
    /// Scored results that did not pass (the agent's and the verifier's).
    pub failed: usize,
    /// Results whose task has not ended (an interrupted run).
    pub unfinished: usize,
    /// Results the platform failed (never scored), and their share of all.
    #[serde(default)]
    pub infra_failed: usize,
    #[serde(default)]
    pub infra_failed_rate: f64,
    /// Ended results that did not pass, by whose failure they are
    /// (`agent`, `infra`, `verifier`).
    #[serde(default)]
    pub failure_classes: BTreeMap<String, usize>,
    /// The mean reward over the scored results that have one (None: none has).
    #[serde(default)]
    pub mean_reward: Option<f64>,
    /// The mean over cases of each case's pass fraction.
    pub pass_at_1: f64,
    /// pass@k for k = 1 to the smallest number of scored results of a
    /// case, the unbiased estimator (issue 49).
    #[serde(default)]
    pub pass_at_k: BTreeMap<u32, f64>,
    pub case_pass_fraction: BTreeMap<String, f64>,
    pub by_category: BTreeMap<String, Tally>,
    pub latency_ms: Latency,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub tokens: i64,
    pub cost_usd: f64,
    /// Input read from and written to the provider's prompt cache, the
    /// share of input read, and the servo's compactions (issue 26).
    #[serde(default)]
    pub cache_read_tokens: i64,
    #[serde(default)]
    pub cache_write_tokens: i64,
    #[serde(default)]
    pub cache_hit_rate: f64,
    #[serde(default)]
    pub compactions: i64,
    pub failures_by_reason: BTreeMap<String, usize>,
    pub tool_calls: BTreeMap<String, u64>,
    /// From the run's start to its end.
    pub wall_ms: Option<i64>,
    /// The tasks' durations added up (what the run would take one at a time).
    pub task_ms_sum: i64,
    /// That time by phase, added up over the results: set-up (claimed →
    /// the servo running), the agent, and verify.
    #[serde(default)]
    pub setup_ms: i64,
    #[serde(default)]
    pub agent_ms: i64,
    #[serde(default)]
    pub verify_ms: i64,
    pub cases: Vec<CaseResult>,
}

/// Passed out of total, for a category.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct Tally {
    pub passed: usize,
    pub total: usize,
    pub pass_rate: f64,
}

/// Task durations (ms) over the ended results.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct Latency {
    pub p50: Option<i64>,
    pub p90: Option<i64>,
    pub max: Option<i64>,
}

/// One case and repeat.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct CaseResult {
    pub id: String,
    pub category: String,
    /// 1-based: which of the case's `samples` × `--repeat` results.
    pub repeat: u32,
    pub passed: bool,
    /// Whose failure it is (`agent`, `infra`, `verifier`); None for a
    /// pass and until the task ends. Infra results are not scored.
    #[serde(default)]
    pub failure_class: Option<FailureClass>,
    /// The attempts of its chain the platform failed (each infra retry
    /// is one more attempt).
    #[serde(default)]
    pub infra_attempts: u32,
    /// The last graded verify check's reward, every key of its reward
    /// file, and its test counts.
    #[serde(default)]
    pub reward: Option<f64>,
    #[serde(default)]
    pub rewards: Option<BTreeMap<String, f64>>,
    #[serde(default)]
    pub tests: Option<saheeli_protocol::verify::TestCounts>,
    /// The last attempt's task (retries by policy are new tasks).
    pub task_id: String,
    pub state: String,
    pub reason: Option<String>,
    pub detail: Option<String>,
    /// The fraction of the case's checks that held, and each check.
    pub score: f64,
    pub why: Vec<String>,
    /// The task ended in the expected state (when not passed: an
    /// expectation on files or the message failed).
    pub state_ok: bool,
    pub title: String,
    pub model: String,
    pub attempts: usize,
    pub duration_ms: Option<i64>,
    /// `duration_ms` by phase (every attempt's added up), once ended.
    #[serde(default)]
    pub setup_ms: Option<i64>,
    #[serde(default)]
    pub agent_ms: Option<i64>,
    #[serde(default)]
    pub verify_ms: Option<i64>,
    pub queue_wait_ms: Option<i64>,
    pub steps: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub tokens: i64,
    pub cost_usd: f64,
    #[serde(default)]
    pub cache_read_tokens: i64,
    #[serde(default)]
    pub cache_write_tokens: i64,
    #[serde(default)]
    pub compactions: i64,
    pub tool_calls: BTreeMap<String, u64>,
    pub verify_attempts: u32,
    pub verify: Vec<VerifyCheck>,
    pub prompt: String,
    /// The agent's completion message.
    pub message: Option<String>,
    /// Paths: the collected workspace, its report.md and changes.patch.
    pub results: Option<String>,
    pub report: Option<String>,
    pub patch: Option<String>,
}

/// One verify command or assessment the foreman ran.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct VerifyCheck {
    pub attempt: u32,
    pub command: String,
    pub exit_code: Option<i64>,
    pub passed: bool,
    pub output: String,
}

/// The report of `run` as the store has it now. Blocking.
pub(crate) fn gather(
    store: &Store,
    run: &EvalRunRow,
    suite: &Suite,
    repeat: u32,
) -> anyhow::Result<EvalReport> {
    let links = store.eval_links(&run.id)?;
    let mut cases = Vec::new();
    for case in &suite.cases {
        for r in 1..=case.runs(repeat) {
            let Some(link) = links.iter().find(|l| l.case_id == case.id && l.repeat == r) else {
                continue;
            };
            cases.push(case_result(store, case, link)?);
        }
    }
    Ok(totals(run, suite, repeat, cases))
}

/// Whether a case's task chain has ended, and its last attempt.
pub(crate) fn last_attempt(
    store: &Store,
    id: saheeli_protocol::TaskId,
) -> anyhow::Result<(Vec<TaskRow>, bool)> {
    let chain = store.attempts(id)?;
    let ended = chain.last().is_some_and(|t| t.state.is_terminal());
    Ok((chain, ended))
}

pub(crate) fn case_result(
    store: &Store,
    case: &Case,
    link: &EvalLink,
) -> anyhow::Result<CaseResult> {
    let (chain, ended) = last_attempt(store, link.task_id)?;
    let last = chain.last().expect("a task has at least one attempt");
    let results = last.results_path.as_deref().map(Path::new);
    let message = results
        .and_then(|d| crate::collect::read_completion(d, last.id).ok().flatten())
        .map(|c| c.message);
    let verdict = if ended {
        score(
            &case.expect,
            last.state,
            last.reason.as_deref(),
            results,
            message.as_deref(),
        )
    } else {
        Score {
            passed: false,
            score: 0.0,
            why: vec![format!("not ended ({})", last.state)],
            state_ok: false,
        }
    };
    let mut tool_calls = BTreeMap::new();
    let mut verify_attempts = 0;
    let mut infra_attempts = 0;
    let mut time: Option<Phases> = Some(Phases::default());
    let mut last_checks = Vec::new();
    let (mut input_tokens, mut output_tokens, mut steps) = (0i64, 0i64, 0i64);
    let (mut cost_usd, mut duration) = (0.0f64, None::<i64>);
    let (mut cache_read_tokens, mut cache_write_tokens, mut compactions) = (0i64, 0i64, 0i64);
    for t in &chain {
        if let Some(dir) = t.results_path.as_deref()
            && let Ok(counts) = crate::report::tool_counts(Path::new(dir), t)
        {
            for c in counts {
                *tool_calls.entry(c.tool).or_insert(0) += c.calls;
            }
        }
        verify_attempts += store.verify_attempts(t.id)?;
        let checks = store.verify_checks(t.id)?;
        let verify_ms = checks.iter().map(|c| c.duration_ms as i64).sum();
        let p = phases(&store.state_changes(t.id)?, t.finished_at, verify_ms);
        time = time.zip(p).map(|(mut a, b)| {
            a += b;
            a
        });
        let is_last = t.id == last.id;
        let class = if is_last {
            ended
                .then(|| class_of(t, verdict.passed, &checks))
                .flatten()
        } else {
            class_of(t, false, &checks)
        };
        infra_attempts += u32::from(class == Some(FailureClass::Infra));
        if is_last {
            last_checks = checks;
        }
        input_tokens += t.input_tokens;
        output_tokens += t.output_tokens;
        cost_usd += t.cost_usd;
        cache_read_tokens += t.cache_read_tokens;
        cache_write_tokens += t.cache_write_tokens;
        compactions += t.compactions;
        steps += t.steps;
        if let (Some(s), Some(f)) = (t.started_at, t.finished_at) {
            duration = Some(duration.unwrap_or(0) + (f - s).max(0));
        }
    }
    let first = &chain[0];
    let failure_class = ended
        .then(|| class_of(last, verdict.passed, &last_checks))
        .flatten();
    let grade = last_checks.iter().rev().find_map(|c| c.graded.clone());
    let time = time.filter(|_| ended);
    let verify = last_checks
        .into_iter()
        .rev()
        .take(MAX_CHECKS)
        .rev()
        .map(|c| VerifyCheck {
            attempt: c.attempt,
            command: cap(&c.command, MAX_CHECK_OUTPUT),
            exit_code: c.exit_code,
            passed: c.passed,
            output: cap(&c.output, MAX_CHECK_OUTPUT),
        })
        .collect();
    let file = |name: &str| {
        results
            .map(|d| d.join(name))
            .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
            .map(|p| p.display().to_string())
    };
    Ok(CaseResult {
        id: case.id.clone(),
        category: case.category.clone(),
        repeat: link.repeat,
        passed: verdict.passed,
        failure_class,
        infra_attempts,
        reward: grade.as_ref().map(|g| g.reward),
        rewards: grade
            .as_ref()
            .map(|g| g.rewards.clone())
            .filter(|r| !r.is_empty()),
        tests: grade.and_then(|g| g.tests),
        task_id: last.id.to_string(),
        state: last.state.to_string(),
        reason: last.reason.clone(),
        detail: last.detail.as_deref().map(|d| cap(d, MAX_MESSAGE)),
        score: verdict.score,
        why: verdict.why,
        state_ok: verdict.state_ok,
        title: last.title.clone(),
        model: last.spec.model.clone(),
        attempts: chain.len(),
        duration_ms: duration.filter(|_| ended),
        setup_ms: time.map(|t| t.setup_ms),
        agent_ms: time.map(|t| t.agent_ms),
        verify_ms: time.map(|t| t.verify_ms),
        queue_wait_ms: first.started_at.map(|s| (s - first.created_at).max(0)),
        steps,
        input_tokens,
        output_tokens,
        tokens: input_tokens + output_tokens,
        cost_usd,
        cache_read_tokens,
        cache_write_tokens,
        compactions,
        tool_calls,
        verify_attempts,
        verify,
        prompt: cap(&last.spec.body, MAX_PROMPT),
        message: message.map(|m| cap(&m, MAX_MESSAGE)),
        results: last.results_path.clone(),
        report: file(crate::report::REPORT),
        patch: file(crate::report::PATCH),
    })
}

/// The class of an ended attempt whose verdict is `passed`.
fn class_of(
    t: &TaskRow,
    passed: bool,
    checks: &[saheeli_protocol::verify::Check],
) -> Option<FailureClass> {
    let timeout_ms = t.spec.verify_timeout_s.saturating_mul(1000);
    classify(&Observed {
        passed,
        state: t.state,
        reason: t.reason.as_deref(),
        verify: verify_seen(checks, timeout_ms, t.spec.verify_reward.is_some()),
    })
}

/// At most `max` bytes of `text` (cut at a character boundary, the cut said).
pub(crate) fn cap(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[… {} more bytes cut]", &text[..end], text.len() - end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_cuts_at_a_character() {
        assert_eq!(cap("héllo", 10), "héllo");
        assert!(cap("héllo", 2).starts_with("h\n[… 5 more bytes cut]"));
    }
}
