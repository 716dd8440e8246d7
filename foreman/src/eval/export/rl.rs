//! A run as JSON lines a trainer reads (`--format rl`): one line per
//! sample (case × repeat) with its reward, outcome, usage and trajectory.
//! Samples whose outcome is an infrastructure failure are left out (their
//! reward says nothing of the agent), and so are samples that have not
//! ended.

use serde_json::{Value, json};

use super::super::report::EvalReport;
use super::sample::Sample;

/// What the export wrote and left out.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Written {
    pub lines: usize,
    pub infra: usize,
    pub unfinished: usize,
}

/// The lines of `samples` (each one JSON object, no newline inside).
pub(crate) fn lines(report: &EvalReport, samples: &[Sample]) -> (Vec<String>, Written) {
    let mut out = Vec::new();
    let mut w = Written::default();
    for s in samples {
        if !s.ended() {
            w.unfinished += 1;
        } else if s.is_infra() {
            w.infra += 1;
        } else {
            out.push(line(report, s).to_string());
        }
    }
    w.lines = out.len();
    (out, w)
}

fn line(report: &EvalReport, s: &Sample) -> Value {
    let c = &s.case;
    let mut v = json!({
        "run_id": report.run_id,
        "suite": report.suite,
        "case_id": c.id,
        "category": c.category,
        "repeat": c.repeat,
        "task_id": c.task_id,
        "attempts": c.attempts,
        "agent": s.agent,
        "model": s.model,
        "prompt": c.prompt,
        "reward": s.score(),
        "rewards": if s.rewards.is_empty() { json!({"reward": s.score()}) } else { json!(s.rewards) },
        "reward_source": s.score_source(),
        "passed": c.passed,
        "outcome": {"state": c.state, "reason": c.reason, "detail": c.detail},
        "tokens": {
            "input": c.input_tokens,
            "output": c.output_tokens,
            "cache_read": c.cache_read_tokens,
            "total": c.tokens,
        },
        "cost_usd": c.cost_usd,
        "duration_ms": c.duration_ms,
        "trajectory": s.trajectory,
    });
    if let Some(t) = &s.tests {
        v["tests"] = json!(t);
    }
    if let Some(class) = &s.failure_class {
        v["failure_class"] = json!(class);
    }
    v
}
