//! A run as a Harbor job directory (`docs/design/benchmark-formats.md`
//! §1.8–1.9), so Harbor's viewer (`harbor view DIR`) reads our runs:
//!
//! ```text
//! DIR/<run id>/config.json   JobConfig     result.json  JobResult (stats.evals)
//!   <case>__<7 of the task id>/            one trial per case × repeat
//!     config.json  TrialConfig  result.json  TrialResult  lock.json  TrialLock
//!     agent/trajectory.json (ATIF v1.8)   verifier/reward.txt, reward.json, test-stdout.txt
//! ```
//!
//! A trial whose outcome is an infrastructure failure has no
//! `verifier_result`: Harbor counts it as an error without a valid reward,
//! out of the mean and pass@k, as we do.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::super::report::EvalReport;
use super::sample::{Sample, Span, iso};

/// Writes the job directory below `out` and returns its path.
pub(crate) fn write(
    report: &EvalReport,
    samples: &[Sample],
    out: &Path,
) -> anyhow::Result<PathBuf> {
    let out = std::path::absolute(out).with_context(|| format!("reading `{}`", out.display()))?;
    let job = out.join(&report.run_id);
    if job.exists() {
        anyhow::bail!(
            "`{}` exists; remove it or give another `--out`",
            job.display()
        );
    }
    std::fs::create_dir_all(&job).with_context(|| format!("making `{}`", job.display()))?;
    let mut trials = Vec::new();
    for s in samples {
        let name = trial_name(s);
        let dir = job.join(&name);
        write_trial(report, s, &job, &name, &dir)?;
        trials.push(name);
    }
    put(&job.join("config.json"), &job_config(report, samples, &out))?;
    put(
        &job.join("result.json"),
        &job_result(report, samples, &trials),
    )?;
    Ok(job)
}

/// `<case id, 32 characters at most>__<the task id's last 7>`.
pub(crate) fn trial_name(s: &Sample) -> String {
    let id = s.task.id.to_string().replace('-', "");
    let case: String = s.case.id.chars().take(32).collect();
    format!("{case}__{}", &id[id.len() - 7..])
}

fn put(path: &Path, v: &Value) -> anyhow::Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(v)? + "\n")
        .with_context(|| format!("writing `{}`", path.display()))
}

fn agent_config(s: &Sample) -> Value {
    let mut a = json!({"name": s.agent});
    if let Some(m) = &s.model {
        a["model_name"] = json!(m);
    }
    a
}

fn job_config(report: &EvalReport, samples: &[Sample], jobs_dir: &Path) -> Value {
    let mut agents: Vec<Value> = samples.iter().map(agent_config).collect();
    agents.dedup();
    agents.sort_by_key(|a| a.to_string());
    agents.dedup();
    let mut tasks: Vec<String> = samples
        .iter()
        .map(|s| s.task_path.display().to_string())
        .collect();
    tasks.sort();
    tasks.dedup();
    json!({
        "job_name": report.run_id,
        "jobs_dir": jobs_dir.display().to_string(),
        "n_attempts": report.repeat,
        "agents": agents,
        "tasks": tasks.iter().map(|p| json!({"path": p})).collect::<Vec<_>>(),
    })
}

/// `stats.evals`' key: `<agent>__<model>__<suite>`, or `<agent>__<suite>`
/// without a model (the oracle).
pub(crate) fn eval_key(s: &Sample, suite: &str) -> String {
    match &s.model {
        Some(m) => format!("{}__{m}__{suite}", s.agent),
        None => format!("{}__{suite}", s.agent),
    }
}

fn job_result(report: &EvalReport, samples: &[Sample], trials: &[String]) -> Value {
    let mut groups: BTreeMap<String, Vec<(&Sample, &String)>> = BTreeMap::new();
    for (s, t) in samples.iter().zip(trials) {
        groups
            .entry(eval_key(s, &report.suite))
            .or_default()
            .push((s, t));
    }
    let evals: serde_json::Map<String, Value> = groups
        .into_iter()
        .map(|(k, g)| (k, eval_stats(&g)))
        .collect();
    let ended = samples.iter().filter(|s| s.ended()).count();
    let errored = samples.iter().filter(|s| exception(s).is_some()).count();
    let cancelled = samples
        .iter()
        .filter(|s| s.case.state == "cancelled")
        .count();
    let sum = |f: fn(&Sample) -> i64| samples.iter().map(f).sum::<i64>();
    json!({
        "id": uuid_of(&report.run_id),
        "started_at": report.started.clone(),
        "updated_at": report.ended.clone().unwrap_or_else(|| report.started.clone()),
        "finished_at": report.ended,
        "n_total_trials": samples.len(),
        "stats": {
            "n_completed_trials": ended,
            "n_errored_trials": errored,
            "n_running_trials": 0,
            "n_pending_trials": samples.len() - ended,
            "n_cancelled_trials": cancelled,
            "n_retries": samples.iter().map(|s| s.case.attempts.saturating_sub(1)).sum::<usize>(),
            "n_input_tokens": sum(|s| s.case.input_tokens),
            "n_cache_tokens": sum(|s| s.case.cache_read_tokens),
            "n_output_tokens": sum(|s| s.case.output_tokens),
            "cost_usd": samples.iter().map(|s| s.case.cost_usd).sum::<f64>(),
            "evals": evals,
        },
        "trial_results": [],
    })
}

/// One `AgentDatasetStats`: over the trials with a valid reward.
fn eval_stats(group: &[(&Sample, &String)]) -> Value {
    let valid: Vec<&(&Sample, &String)> = group
        .iter()
        .filter(|(s, _)| s.ended() && !s.is_infra())
        .collect();
    let mean = if valid.is_empty() {
        0.0
    } else {
        valid.iter().map(|(s, _)| s.score()).sum::<f64>() / valid.len() as f64
    };
    let mut reward_stats: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for (s, t) in &valid {
        for (k, v) in rewards(s) {
            reward_stats
                .entry(k)
                .or_default()
                .entry(format!("{v:?}"))
                .or_default()
                .push((*t).clone());
        }
    }
    let mut exception_stats: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (s, t) in group {
        if let Some(e) = exception(s) {
            exception_stats.entry(e.0).or_default().push((*t).clone());
        }
    }
    json!({
        "n_trials": valid.len(),
        "n_errors": exception_stats.values().map(Vec::len).sum::<usize>(),
        "metrics": [{"mean": mean}],
        "pass_at_k": pass_at_k(&valid.iter().map(|(s, _)| *s).collect::<Vec<_>>()),
        "reward_stats": reward_stats,
        "exception_stats": exception_stats,
    })
}

/// pass@k for k = 1 to the fewest valid trials of a task, when every
/// reward is 0 or 1 (as Harbor computes it).
fn pass_at_k(valid: &[&Sample]) -> BTreeMap<String, f64> {
    let mut by_case: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    for s in valid {
        let score = s.score();
        if score != 0.0 && score != 1.0 {
            return BTreeMap::new();
        }
        let e = by_case.entry(&s.case.id).or_default();
        e.0 += 1;
        e.1 += score as u32;
    }
    let Some(n_min) = by_case.values().map(|(n, _)| *n).min() else {
        return BTreeMap::new();
    };
    (1..=n_min)
        .map(|k| {
            let sum: f64 = by_case
                .values()
                .map(|&(n, c)| super::super::pass_at_k::pass_at_k(n, c, k))
                .sum();
            (k.to_string(), sum / by_case.len() as f64)
        })
        .collect()
}

/// The rewards a trial reports: the graded map, else `reward` by verdict.
fn rewards(s: &Sample) -> BTreeMap<String, f64> {
    if s.rewards.is_empty() {
        BTreeMap::from([("reward".to_string(), s.score())])
    } else {
        s.rewards.clone()
    }
}

/// A trial that did not end by its verifier's grade: (type, message).
/// Harbor's own class names where one means the same.
fn exception(s: &Sample) -> Option<(String, String)> {
    if s.case.passed || s.case.state == "complete" {
        return None;
    }
    let reason = s
        .case
        .reason
        .clone()
        .unwrap_or_else(|| s.case.state.clone());
    if reason == "verification_failed" {
        return None;
    }
    let kind = match reason.as_str() {
        "timeout" => "AgentTimeoutError".to_string(),
        "agent_failed" => "NonZeroAgentExitCodeError".to_string(),
        "cancelled" => "CancelledError".to_string(),
        other => {
            let mut k: String = other
                .split(|c: char| !c.is_ascii_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(|w| w[..1].to_ascii_uppercase() + &w[1..])
                .collect();
            if !k.ends_with("Error") {
                k.push_str("Error");
            }
            k
        }
    };
    let message = match &s.case.detail {
        Some(d) => format!("{reason}: {d}"),
        None => reason,
    };
    Some((kind, message))
}

fn timing(span: Option<Span>) -> Value {
    span.map_or(
        Value::Null,
        |s| json!({"started_at": iso(s.start), "finished_at": iso(s.end)}),
    )
}

fn write_trial(
    report: &EvalReport,
    s: &Sample,
    job: &Path,
    name: &str,
    dir: &Path,
) -> anyhow::Result<()> {
    for sub in ["agent", "verifier"] {
        std::fs::create_dir_all(dir.join(sub))
            .with_context(|| format!("making `{}`", dir.join(sub).display()))?;
    }
    let task_path = s.task_path.display().to_string();
    let checksum = hex(&Sha256::digest(format!(
        "{}\n{}",
        report.suite_digest, s.case.id
    )));
    let config = json!({
        "task": {"path": task_path},
        "trial_name": name,
        "trials_dir": job.display().to_string(),
        "agent": agent_config(s),
    });
    let mut model_info = Value::Null;
    if let Some(m) = &s.model {
        model_info = json!({"name": m});
    }
    let mut result = json!({
        "schema_version": 1,
        "id": s.task.id.to_string(),
        "task_name": s.case.id,
        "trial_name": name,
        "trial_uri": format!("file://{}", dir.display()),
        "task_id": {"path": task_path},
        "source": report.suite,
        "task_checksum": checksum,
        "config": config,
        "agent_info": {"name": s.agent, "version": env!("CARGO_PKG_VERSION"), "model_info": model_info},
        "agent_result": {
            "n_input_tokens": s.case.input_tokens,
            "n_cache_tokens": s.case.cache_read_tokens,
            "n_output_tokens": s.case.output_tokens,
            "cost_usd": s.case.cost_usd,
            "metadata": {"saheeli_task_id": s.task.id.to_string(), "repeat": s.case.repeat,
                         "state": s.case.state, "reason": s.case.reason},
        },
        "started_at": s.task.started_at.map(iso),
        "finished_at": s.task.finished_at.map(iso),
        "environment_setup": timing(s.phases.environment_setup),
        "agent_setup": timing(s.phases.agent_setup),
        "agent_execution": timing(s.phases.agent_execution),
        "verifier": timing(s.phases.verifier),
    });
    if let Some(lp) = s
        .trajectory
        .as_ref()
        .and_then(super::atif::rollout_logprobs)
    {
        result["agent_result"]["rollout_details"] = json!([{ "logprobs": lp }]);
    }
    if s.ended() && !s.is_infra() {
        result["verifier_result"] = json!({"rewards": rewards(s)});
        let primary = s.score();
        std::fs::write(dir.join("verifier/reward.txt"), format!("{primary}\n"))?;
        if s.rewards.len() > 1 {
            put(&dir.join("verifier/reward.json"), &json!(s.rewards))?;
        }
    }
    if let Some((kind, message)) = exception(s) {
        result["exception_info"] = json!({
            "exception_type": kind,
            "exception_message": message,
            "exception_traceback": "",
            "occurred_at": s.task.finished_at.map(iso),
        });
    }
    if let Some(log) = &s.verify_log {
        std::fs::write(dir.join("verifier/test-stdout.txt"), log)?;
    }
    if let Some(t) = &s.trajectory {
        put(&dir.join("agent/trajectory.json"), t)?;
    }
    put(&dir.join("config.json"), &config)?;
    put(&dir.join("result.json"), &result)?;
    let lock = json!({
        "task": {"name": s.case.id, "type": "local", "digest": format!("sha256:{checksum}"),
                 "path": task_path},
        "agent": agent_config(s),
        "environment": {"type": "docker"},
        "verifier": {},
    });
    put(&dir.join("lock.json"), &lock)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The run's id as a UUID (it is one; anything else gets a v5-like hash).
fn uuid_of(run_id: &str) -> String {
    match uuid::Uuid::parse_str(run_id) {
        Ok(u) => u.to_string(),
        Err(_) => {
            let d = Sha256::digest(run_id.as_bytes());
            uuid::Builder::from_random_bytes(d[..16].try_into().expect("16 bytes"))
                .into_uuid()
                .to_string()
        }
    }
}
