//! The totals of an eval report over its results: the pass rate and
//! pass@k over the scored results (infra failures left out: issue 49),
//! by category and class, latency, tokens, cost and time by phase.

use std::collections::BTreeMap;

use super::outcome::FailureClass;
use super::report::{CaseResult, EvalReport, Latency, Tally};
use super::suite::Suite;
use crate::store::EvalRunRow;

/// The totals over `cases`.
pub(crate) fn totals(
    run: &EvalRunRow,
    suite: &Suite,
    repeat: u32,
    cases: Vec<CaseResult>,
) -> EvalReport {
    let ended: Vec<&CaseResult> = cases.iter().filter(|c| is_ended(&c.state)).collect();
    let is_infra = |c: &CaseResult| c.failure_class == Some(FailureClass::Infra);
    let passed = cases.iter().filter(|c| c.passed).count();
    let expected: usize = suite.cases.iter().map(|c| c.runs(repeat) as usize).sum();
    let unfinished = expected - ended.len().min(expected);
    // Infra failures are the platform's: never scored.
    let infra_failed = cases.iter().filter(|c| is_infra(c)).count();
    let scored = expected - infra_failed.min(expected);
    let failed = scored - (passed + unfinished).min(scored);
    let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let mut by_category: BTreeMap<String, Tally> = BTreeMap::new();
    let mut case_pass_fraction = BTreeMap::new();
    let mut passes = Vec::new();
    for case in &suite.cases {
        let mine: Vec<&CaseResult> = cases.iter().filter(|c| c.id == case.id).collect();
        let p = mine.iter().filter(|c| c.passed).count();
        let infra = mine.iter().filter(|c| is_infra(c)).count();
        let n = (case.runs(repeat) as usize).saturating_sub(infra);
        let t = by_category.entry(case.category.clone()).or_default();
        t.passed += p;
        t.total += n;
        if n > 0 {
            passes.push((n as u32, p.min(n) as u32));
            case_pass_fraction.insert(case.id.clone(), ratio(p, n));
        }
    }
    let mut failure_classes: BTreeMap<String, usize> = FailureClass::ALL
        .iter()
        .map(|c| (c.as_str().to_string(), 0))
        .collect();
    for c in &cases {
        if let Some(class) = c.failure_class {
            *failure_classes
                .entry(class.as_str().to_string())
                .or_default() += 1;
        }
    }
    let rewards: Vec<f64> = cases
        .iter()
        .filter(|c| !is_infra(c))
        .filter_map(|c| c.reward)
        .collect();
    let mean_reward =
        (!rewards.is_empty()).then(|| rewards.iter().sum::<f64>() / rewards.len() as f64);
    for t in by_category.values_mut() {
        t.pass_rate = ratio(t.passed, t.total);
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
        pass_rate: ratio(passed, scored),
        passed,
        failed,
        unfinished,
        infra_failed,
        infra_failed_rate: ratio(infra_failed, expected),
        failure_classes,
        mean_reward,
        pass_at_1,
        pass_at_k: super::pass_at_k::suite_pass_at_k(&passes),
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
        setup_ms: cases.iter().filter_map(|c| c.setup_ms).sum(),
        agent_ms: cases.iter().filter_map(|c| c.agent_ms).sum(),
        verify_ms: cases.iter().filter_map(|c| c.verify_ms).sum(),
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

    fn result(id: &str, repeat: u32, passed: bool, class: Option<FailureClass>) -> CaseResult {
        CaseResult {
            id: id.into(),
            category: "c".into(),
            repeat,
            passed,
            failure_class: class,
            state: if passed { "complete" } else { "failed" }.into(),
            reward: Some(if passed { 1.0 } else { 0.0 }),
            setup_ms: Some(10),
            agent_ms: Some(100),
            verify_ms: Some(5),
            ..Default::default()
        }
    }

    #[test]
    fn infra_failures_are_not_scored_and_each_case_has_its_own_n() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.yaml");
        let text =
            "name: s\ncases:\n  - { id: a, text: hi, samples: 3 }\n  - { id: b, text: hi }\n";
        let suite = crate::eval::parse(&path, text).unwrap();
        let run = EvalRunRow {
            id: "r".into(),
            suite_name: "s".into(),
            suite_path: "s.yaml".into(),
            suite_digest: "d".into(),
            options: "{}".into(),
            report_dir: "x".into(),
            started_at: 0,
            ended_at: None,
            state: "running".into(),
            alive_until: None,
            pass_rate: None,
        };
        use FailureClass::*;
        // `a`: 3 samples with --repeat 2 = 6 results: 2 passed, 1 agent,
        // 1 verifier, 2 infra (its n is 4); `b`: 1 passed, 1 infra (n 1).
        let cases = vec![
            result("a", 1, true, None),
            result("a", 2, true, None),
            result("a", 3, false, Some(Agent)),
            result("a", 4, false, Some(Verifier)),
            result("a", 5, false, Some(Infra)),
            result("a", 6, false, Some(Infra)),
            result("b", 1, true, None),
            result("b", 2, false, Some(Infra)),
        ];
        let r = totals(&run, &suite, 2, cases);
        assert_eq!(
            (r.passed, r.failed, r.unfinished, r.infra_failed),
            (3, 2, 0, 3)
        );
        assert_eq!(r.pass_rate, 3.0 / 5.0);
        assert_eq!(r.infra_failed_rate, 3.0 / 8.0);
        assert_eq!(r.case_pass_fraction["a"], 0.5);
        assert_eq!(r.case_pass_fraction["b"], 1.0);
        assert_eq!(r.pass_at_1, 0.75);
        assert_eq!(r.pass_at_k.keys().copied().collect::<Vec<_>>(), vec![1]);
        assert_eq!(r.mean_reward, Some(3.0 / 5.0));
        assert_eq!(
            r.failure_classes,
            BTreeMap::from([
                ("agent".to_string(), 1),
                ("infra".to_string(), 3),
                ("verifier".to_string(), 1)
            ])
        );
        assert_eq!(r.by_category["uncategorized"].total, 5);
        assert_eq!((r.setup_ms, r.agent_ms, r.verify_ms), (80, 800, 40));
        // Every result infra: nothing scored, no pass rate to speak of.
        let all_infra = vec![result("b", 1, false, Some(Infra))];
        let text = "name: s\ncases:\n  - { id: b, text: hi }\n";
        let one = crate::eval::parse(&path, text).unwrap();
        let r = totals(&run, &one, 1, all_infra);
        assert_eq!((r.pass_rate, r.infra_failed_rate), (0.0, 1.0));
        assert!(r.pass_at_k.is_empty() && r.case_pass_fraction.is_empty());
        assert_eq!(r.mean_reward, None);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<i64> = (1..=10).collect();
        assert_eq!(percentile(&v, 50), Some(5));
        assert_eq!(percentile(&v, 90), Some(9));
        assert_eq!(percentile(&[7], 90), Some(7));
        assert_eq!(percentile(&[], 50), None);
    }
}
