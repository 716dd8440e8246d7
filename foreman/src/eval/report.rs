//! `report.json`: what an eval run did, case by case and in total. The
//! same shape is printed by `--json`, read back by `eval compare`, and
//! rendered by `html`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::score::{Score, score};
use super::suite::{Case, Suite};
use crate::store::{EvalLink, EvalRunRow, Store, TaskRow};

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
    /// Passed results over all results (cases × repeats), 0 to 1.
    pub pass_rate: f64,
    pub passed: usize,
    pub failed: usize,
    /// Results whose task has not ended (an interrupted run).
    pub unfinished: usize,
    /// The mean over cases of each case's pass fraction.
    pub pass_at_1: f64,
    /// pass@k for k = 1 to `repeat`, the unbiased estimator (issue 49).
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
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct CaseResult {
    pub id: String,
    pub category: String,
    /// 1-based.
    pub repeat: u32,
    pub passed: bool,
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
        for r in 1..=repeat {
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
    let verify = store
        .verify_checks(last.id)?
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

/// The totals over `cases`.
pub(crate) fn totals(
    run: &EvalRunRow,
    suite: &Suite,
    repeat: u32,
    cases: Vec<CaseResult>,
) -> EvalReport {
    let ended: Vec<&CaseResult> = cases.iter().filter(|c| is_ended(&c.state)).collect();
    let passed = cases.iter().filter(|c| c.passed).count();
    let expected = suite.cases.len() * repeat as usize;
    let unfinished = expected - ended.len().min(expected);
    let failed = expected - passed - unfinished;
    let pass_rate = if expected == 0 {
        0.0
    } else {
        passed as f64 / expected as f64
    };
    let mut by_category: BTreeMap<String, Tally> = BTreeMap::new();
    let mut case_pass_fraction = BTreeMap::new();
    let mut passes = Vec::new();
    for case in &suite.cases {
        let mine: Vec<&CaseResult> = cases.iter().filter(|c| c.id == case.id).collect();
        let p = mine.iter().filter(|c| c.passed).count();
        passes.push(p.min(repeat as usize) as u32);
        case_pass_fraction.insert(case.id.clone(), p as f64 / repeat.max(1) as f64);
        let t = by_category.entry(case.category.clone()).or_default();
        t.passed += p;
        t.total += repeat as usize;
    }
    for t in by_category.values_mut() {
        t.pass_rate = if t.total == 0 {
            0.0
        } else {
            t.passed as f64 / t.total as f64
        };
    }
    let pass_at_1 = if case_pass_fraction.is_empty() {
        0.0
    } else {
        case_pass_fraction.values().sum::<f64>() / case_pass_fraction.len() as f64
    };
    let mut durations: Vec<i64> = ended.iter().filter_map(|c| c.duration_ms).collect();
    durations.sort_unstable();
    let mut failures_by_reason: BTreeMap<String, usize> = BTreeMap::new();
    for c in cases.iter().filter(|c| !c.passed && is_ended(&c.state)) {
        let key = if c.state_ok {
            "expect_failed".to_string()
        } else {
            c.reason.clone().unwrap_or_else(|| c.state.clone())
        };
        *failures_by_reason.entry(key).or_default() += 1;
    }
    let mut tool_calls = BTreeMap::new();
    for c in &cases {
        for (t, n) in &c.tool_calls {
            *tool_calls.entry(t.clone()).or_insert(0) += n;
        }
    }
    let mut models: Vec<String> = cases.iter().map(|c| c.model.clone()).collect();
    models.sort();
    models.dedup();
    EvalReport {
        run_id: run.id.clone(),
        suite: suite.name.0.clone(),
        suite_path: run.suite_path.clone(),
        suite_digest: run.suite_digest.clone(),
        models,
        started: rfc3339(run.started_at),
        ended: run.ended_at.map(rfc3339),
        pass_threshold: suite.pass_threshold.0,
        repeat,
        pass_rate,
        passed,
        failed,
        unfinished,
        pass_at_1,
        pass_at_k: super::pass_at_k::suite_pass_at_k(repeat, &passes),
        case_pass_fraction,
        by_category,
        latency_ms: Latency {
            p50: percentile(&durations, 50),
            p90: percentile(&durations, 90),
            max: durations.last().copied(),
        },
        input_tokens: cases.iter().map(|c| c.input_tokens).sum(),
        output_tokens: cases.iter().map(|c| c.output_tokens).sum(),
        tokens: cases.iter().map(|c| c.tokens).sum(),
        cost_usd: cases.iter().map(|c| c.cost_usd).sum(),
        cache_read_tokens: cases.iter().map(|c| c.cache_read_tokens).sum(),
        cache_write_tokens: cases.iter().map(|c| c.cache_write_tokens).sum(),
        cache_hit_rate: crate::output::hit_rate(
            cases.iter().map(|c| c.cache_read_tokens).sum(),
            cases.iter().map(|c| c.input_tokens).sum(),
        ),
        compactions: cases.iter().map(|c| c.compactions).sum(),
        failures_by_reason,
        tool_calls,
        wall_ms: run.ended_at.map(|e| e - run.started_at),
        task_ms_sum: durations.iter().sum(),
        cases,
    }
}

fn is_ended(state: &str) -> bool {
    state
        .parse::<crate::state::TaskState>()
        .is_ok_and(|s| s.is_terminal())
}

/// The nearest-rank percentile of sorted values.
pub(crate) fn percentile(sorted: &[i64], p: usize) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    Some(sorted[rank - 1])
}

pub(crate) fn rfc3339(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<i64> = (1..=10).collect();
        assert_eq!(percentile(&v, 50), Some(5));
        assert_eq!(percentile(&v, 90), Some(9));
        assert_eq!(percentile(&[7], 90), Some(7));
        assert_eq!(percentile(&[], 50), None);
    }

    #[test]
    fn cap_cuts_at_a_character() {
        assert_eq!(cap("héllo", 10), "héllo");
        assert!(cap("héllo", 2).starts_with("h\n[… 5 more bytes cut]"));
    }
}
