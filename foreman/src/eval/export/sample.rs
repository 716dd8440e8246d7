//! One sample of a run (a case × repeat) as both exports read it: the
//! report's row for it, and what the store and the results directory hold
//! of its last attempt (the graded reward, the phases' times, the
//! trajectory).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use saheeli_protocol::verify::{CheckKind, TestCounts};
use serde_json::Value;

use super::super::report::{CaseResult, EvalReport};
use crate::state::TaskState;
use crate::store::{EvalRunRow, Store, TaskRow};

/// Reasons taken as infrastructure failures while the report carries no
/// `failure_class` of its own: the launch, Docker, a lost container, the
/// collection, a stop of the foreman, and the provider (the agent could
/// not act: its reward says nothing of it).
const INFRA_REASONS: &[&str] = &[
    "launch",
    "docker",
    "lost",
    "collect",
    "interrupted",
    "terminated",
    "cancelled",
    "llm_error",
    "auth",
];

/// An instant, Unix milliseconds.
pub(crate) type Ms = i64;

/// A phase's start and end.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Span {
    pub start: Ms,
    pub end: Ms,
}

/// Where the last attempt's time went, as far as the records say.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Phases {
    /// From the claim to the container running (image, workspace, start).
    pub environment_setup: Option<Span>,
    /// From the container running to the servo's first line.
    pub agent_setup: Option<Span>,
    /// From the servo's start to its last verify (or its end).
    pub agent_execution: Option<Span>,
    /// The last verify attempt's checks.
    pub verifier: Option<Span>,
}

/// One case × repeat.
#[derive(Clone, Debug)]
pub(crate) struct Sample {
    pub case: CaseResult,
    /// The report's own class of the outcome (`agent`, `infra`,
    /// `verifier`), when it has one.
    pub failure_class: Option<String>,
    pub task: TaskRow,
    /// The last verify attempt's reward; None: nothing graded.
    pub reward: Option<f64>,
    pub rewards: BTreeMap<String, f64>,
    pub tests: Option<TestCounts>,
    /// The last verify attempt's log (`.saheeli/verify-N.log`).
    pub verify_log: Option<String>,
    pub phases: Phases,
    /// The task's directory (its hidden tests' or solution's parent).
    pub task_path: PathBuf,
    /// The agent's name and the model (None: no model, the oracle).
    pub agent: String,
    pub model: Option<String>,
    /// ATIF v1.8, when the servo's session came home.
    pub trajectory: Option<Value>,
}

impl Sample {
    /// The reward a trainer or a viewer counts: the graded one, else 1 or
    /// 0 by the case's verdict.
    pub fn score(&self) -> f64 {
        self.reward
            .unwrap_or(if self.case.passed { 1.0 } else { 0.0 })
    }

    /// Where the reward came from.
    pub fn score_source(&self) -> &'static str {
        if self.reward.is_some() {
            "verifier"
        } else {
            "verdict"
        }
    }

    /// The outcome is not the agent's: left out of rewards. The report's
    /// `failure_class` decides when it has one, else the reason.
    pub fn is_infra(&self) -> bool {
        match &self.failure_class {
            Some(c) => c == "infra",
            None => {
                !self.case.passed
                    && self
                        .case
                        .reason
                        .as_deref()
                        .is_some_and(|r| INFRA_REASONS.contains(&r))
            }
        }
    }

    /// The task has ended.
    pub fn ended(&self) -> bool {
        self.task.state.is_terminal()
    }
}

/// The run's report: report.json as the typed report and as JSON (for
/// fields this build's type does not know, such as `failure_class`).
pub(crate) fn read_report(run: &EvalRunRow) -> anyhow::Result<(EvalReport, Value)> {
    let path = Path::new(&run.report_dir).join("report.json");
    if run.state == "running" || !path.exists() {
        anyhow::bail!(
            "eval run `{}` has no report yet; finish it with `saheeli eval --resume {}`",
            run.id,
            run.id
        );
    }
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading `{}`", path.display()))?;
    let typed: EvalReport =
        serde_json::from_str(&text).with_context(|| format!("reading `{}`", path.display()))?;
    let raw: Value =
        serde_json::from_str(&text).with_context(|| format!("reading `{}`", path.display()))?;
    Ok((typed, raw))
}

/// Every sample of the report, in its order. Blocking.
pub(crate) fn gather(
    store: &Store,
    report: &EvalReport,
    raw: &Value,
    calls_dir: &Path,
) -> anyhow::Result<Vec<Sample>> {
    let suite_dir = Path::new(&report.suite_path)
        .parent()
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let mut out = Vec::new();
    for (i, case) in report.cases.iter().enumerate() {
        let class = raw["cases"][i]["failure_class"]
            .as_str()
            .map(str::to_string);
        out.push(sample(store, case, class, &suite_dir, calls_dir)?);
    }
    Ok(out)
}

fn sample(
    store: &Store,
    case: &CaseResult,
    failure_class: Option<String>,
    suite_dir: &Path,
    calls_dir: &Path,
) -> anyhow::Result<Sample> {
    let task = store
        .require(&case.task_id)
        .with_context(|| format!("case `{}` #{}", case.id, case.repeat))?;
    let checks = store.verify_checks(task.id)?;
    let last = checks.last().map(|c| c.attempt);
    let graded = checks
        .iter()
        .filter(|c| Some(c.attempt) == last && c.kind == CheckKind::Verify)
        .filter_map(|c| c.graded.clone())
        .next_back();
    let results = task.results_path.as_deref().map(Path::new);
    let verify_log = match (results, last) {
        (Some(dir), Some(n)) => read_capped(&dir.join(crate::report::verify_log(n))),
        _ => None,
    };
    let verify_ms: u64 = checks
        .iter()
        .filter(|c| Some(c.attempt) == last)
        .map(|c| c.duration_ms)
        .sum();
    let audit =
        results.and_then(|d| read_capped(&d.join(saheeli_protocol::paths::audit_log(&task.id))));
    let phases = phases(store, &task, audit.as_deref(), verify_ms)?;
    let oracle =
        task.spec.agent == saheeli_protocol::Agent::Named(saheeli_protocol::AgentName::Oracle);
    let trajectory = results.and_then(|d| {
        let session = read_capped(&d.join(saheeli_protocol::paths::session(&task.id)))?;
        // The gateway's line per call: the logprobs a provider returned.
        let calls = read_capped(&calls_dir.join(format!("{}.jsonl", task.id)));
        super::atif::from_session(
            &task,
            &session,
            audit.as_deref().unwrap_or(""),
            calls.as_deref().unwrap_or(""),
        )
    });
    Ok(Sample {
        failure_class,
        reward: graded.as_ref().map(|g| g.reward),
        rewards: graded
            .as_ref()
            .map(|g| {
                let mut m = g.rewards.clone();
                m.entry("reward".into()).or_insert(g.reward);
                m
            })
            .unwrap_or_default(),
        tests: graded.and_then(|g| g.tests),
        verify_log,
        phases,
        task_path: task_path(&task, suite_dir, &case.id),
        agent: task.spec.agent.label(),
        model: (!oracle).then(|| task.spec.model.clone()),
        trajectory,
        case: case.clone(),
        task,
    })
}

/// The task's directory: the parent of its hidden tests or its solution
/// (an imported task's folder), else `<suite dir>/<case id>`.
fn task_path(task: &TaskRow, suite_dir: &Path, case: &str) -> PathBuf {
    task.spec
        .verify_hidden
        .first()
        .or(task.spec.solution.as_ref())
        .and_then(|p| p.parent())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| suite_dir.join(case))
}

/// Most bytes of a log or session read.
const MAX_READ: u64 = 64 << 20;

fn read_capped(path: &Path) -> Option<String> {
    use std::io::Read;
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut s = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_READ)
        .read_to_string(&mut s)
        .ok()?;
    Some(s)
}

/// The phases of `task`'s last attempt: the claim and the first
/// `running` event from the store, the servo's start from its audit log,
/// the last verify attempt from its `verified` event less its checks'
/// time, and the end.
fn phases(
    store: &Store,
    task: &TaskRow,
    audit: Option<&str>,
    verify_ms: u64,
) -> anyhow::Result<Phases> {
    let (Some(start), Some(end)) = (task.started_at, task.finished_at) else {
        return Ok(Phases::default());
    };
    let events = store.events(task.id)?;
    let running = events
        .iter()
        .find(|e| e.to == TaskState::Running && e.from != Some(TaskState::Running))
        .map(|e| e.at);
    let verified = events
        .iter()
        .rev()
        .find(|e| e.kind.as_deref() == Some("verified"))
        .map(|e| e.at);
    let servo_start = audit
        .and_then(first_ts)
        .filter(|t| running.is_none_or(|r| *t >= r - 1000));
    let span = |a: Option<Ms>, b: Option<Ms>| match (a, b) {
        (Some(a), Some(b)) if b >= a => Some(Span { start: a, end: b }),
        _ => None,
    };
    let verifier = verified.map(|v| Span {
        start: (v - verify_ms as i64).max(start),
        end: v,
    });
    // The audit log's times are whole seconds: never before the container ran.
    let agent_start = match (servo_start, running) {
        (Some(s), Some(r)) => Some(s.max(r)),
        (s, r) => s.or(r),
    };
    Ok(Phases {
        environment_setup: span(Some(start), running),
        agent_setup: span(running, agent_start),
        agent_execution: span(agent_start, verifier.map(|v| v.start).or(Some(end))),
        verifier,
    })
}

/// The time of the audit log's first line (its `start`), in ms.
fn first_ts(audit: &str) -> Option<Ms> {
    let line: Value = serde_json::from_str(audit.lines().next()?).ok()?;
    parse_ts(line["ts"].as_str()?)
}

/// An RFC 3339 time in Unix ms.
pub(crate) fn parse_ts(ts: &str) -> Option<Ms> {
    let t = humantime::parse_rfc3339_weak(ts.trim_end_matches('Z')).ok()?;
    Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as Ms)
}

/// Unix ms as RFC 3339 with milliseconds, UTC.
pub(crate) fn iso(ms: Ms) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}
