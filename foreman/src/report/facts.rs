//! Gathering a report's facts once a task's outcome is recorded: the task
//! row, the collected audit log (tool calls), `complete.json` (the agent's
//! message), `changes.patch` (the diffstat) and the steps done (given by
//! the caller, from the store); then writing `report.md`.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use saheeli_protocol::AuditEvent;
use saheeli_protocol::verify::Check;

use super::diffstat::{Diffstat, FileStat};
use super::markdown::{Report, ToolCount};
use super::patch::MAX_DIFF_FILE;
use super::write::{PATCH, REPORT, replace_file};
use crate::collect::{self, CappedLines, Line, TRUNCATED_MARKER, open_regular};
use crate::store::{StepStatus, TaskRow};

/// How many distinct tool names are counted (a model may invent any).
const MAX_TOOLS: usize = 256;

/// Writes `report.md` into the results of the ended task `row` (`steps`:
/// its template steps and where each stands; `checks`: its verification,
/// the foreman's rows). Blocking.
pub(crate) fn write_report(
    row: &TaskRow,
    results: &Path,
    steps: Vec<StepStatus>,
    checks: Vec<Check>,
    synthesis: Option<Result<String, String>>,
) -> anyhow::Result<()> {
    let mut report = gather(row, results);
    report.template_steps = steps;
    report.synthesis = synthesis;
    if row.spec.verifies() {
        report.verification = Some((checks, row.spec.max_verify_attempts()));
    }
    replace_file(results, REPORT, |w| {
        w.write_all(report.to_markdown().as_bytes())
    })
}

/// The report of `row` from what its results hold.
fn gather(row: &TaskRow, results: &Path) -> Report {
    let agent_message = match collect::read_completion(results, row.id) {
        Ok(Some(c)) => Some(c.message),
        _ => None,
    };
    Report {
        id: row.id,
        title: row.title.clone(),
        objective: row.spec.body.clone(),
        state: row.state.to_string(),
        reason: row.reason.clone(),
        detail: row.detail.clone(),
        attempt: row.attempt,
        model: row.spec.model.clone(),
        agent: (!row.spec.agent.is_builtin()).then(|| row.spec.agent.label()),
        steps: row.steps,
        max_steps: row.spec.max_steps,
        tools: tool_counts(results, row),
        input_tokens: row.input_tokens,
        output_tokens: row.output_tokens,
        cost_usd: row.cost_usd,
        cached: (row.cache_read_tokens, row.cache_write_tokens),
        compactions: row.compactions,
        started_at: row.started_at,
        finished_at: row.finished_at,
        changes: changed_files(results),
        agent_message,
        replaced_own: std::fs::symlink_metadata(results.join(REPORT)).is_ok(),
        template_steps: Vec::new(),
        verification: None,
        synthesis: None,
        notes: notes(row, results),
    }
}

/// The set-up's summary, the commit it started from, what it was forked
/// from and its delivery.
fn notes(row: &TaskRow, results: &Path) -> Vec<String> {
    let mut out = vec![];
    if let Some(f) = &row.spec.forked_from {
        let mut line = format!(
            "Fork {} of {} of task `{}` at step {}",
            f.index, f.count, f.task, f.step
        );
        if let Some(u) = first_call(results, row) {
            line.push_str(&format!(
                "; its first call read {} of {} input tokens from the prompt cache",
                u.cache_read_tokens, u.input_tokens
            ));
        }
        out.push(line);
    }
    if let Some(r) = &row.setup {
        out.push(format!("Set-up: {}", r.summary()));
    }
    if let Some(g) = &row.git {
        out.push(format!(
            "Started from: `{}` at `{}`, commit `{}`",
            g.url, g.reference, g.commit
        ));
    }
    if let Some(f) = row.follow_up_of {
        out.push(format!("Follows up: task `{f}`"));
    }
    match &row.delivered {
        Some(d) if d.pushed => out.push(format!(
            "Delivered: branch `{}`, commit `{}`",
            d.branch,
            d.commit.as_deref().unwrap_or("-")
        )),
        Some(d) => out.push(format!(
            "Not delivered: branch `{}`{}: {}",
            d.branch,
            d.commit
                .as_deref()
                .map(|c| format!(" (commit `{c}`)"))
                .unwrap_or_default(),
            d.error.as_deref().unwrap_or("`push: false`")
        )),
        None => {}
    }
    out
}

/// The usage of the task's first LLM call, from the collected audit log.
fn first_call(results: &Path, row: &TaskRow) -> Option<saheeli_protocol::Usage> {
    let lines = collect::audit_lines(results, row.id).ok()??;
    for line in lines {
        let Ok(Line::Text(line)) = line else {
            return None;
        };
        if let Ok(AuditEvent::LlmCall {
            usage, error: None, ..
        }) = serde_json::from_str(&line)
        {
            return Some(usage);
        }
    }
    None
}

/// Tool calls by tool from the collected audit log, most called first.
pub(crate) fn tool_counts(results: &Path, row: &TaskRow) -> Result<Vec<ToolCount>, String> {
    let Some(lines) = collect::audit_lines(results, row.id).map_err(|e| e.to_string())? else {
        return Err("the servo left no audit log".into());
    };
    let mut by_tool: HashMap<String, ToolCount> = HashMap::new();
    for line in lines {
        let Line::Text(line) = line.map_err(|e| format!("reading the audit log: {e}"))? else {
            continue;
        };
        let Ok(AuditEvent::ToolCall { tool, ok, .. }) = serde_json::from_str(&line) else {
            continue;
        };
        let key = if by_tool.len() < MAX_TOOLS || by_tool.contains_key(&tool) {
            tool
        } else {
            "(other tools)".to_string()
        };
        let count = by_tool.entry(key.clone()).or_insert(ToolCount {
            tool: key,
            ..ToolCount::default()
        });
        count.calls += 1;
        count.failed += u64::from(!ok);
    }
    let mut tools: Vec<ToolCount> = by_tool.into_values().collect();
    tools.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.tool.cmp(&b.tool)));
    Ok(tools)
}

/// The diffstat of the results' `changes.patch`.
fn changed_files(results: &Path) -> Result<Vec<FileStat>, String> {
    let path = results.join(PATCH);
    let file = match open_regular(&path) {
        Ok(Some(f)) => f,
        Ok(None) if std::fs::symlink_metadata(results.join(TRUNCATED_MARKER)).is_ok() => {
            return Err(format!(
                "the results were cut at the size cap (`max_results_size`), so they are not \
                 compared with the submitted workspace; no `{PATCH}`"
            ));
        }
        Ok(None) => {
            return Err(format!(
                "no `{PATCH}` was written (the log of `saheeli serve` says why)"
            ));
        }
        Err(e) => return Err(e.to_string()),
    };
    let mut stat = Diffstat::default();
    // Patch lines are file lines (at most MAX_DIFF_FILE) plus a prefix.
    for line in CappedLines::new(file, MAX_DIFF_FILE as usize + 64, u64::MAX) {
        match line.map_err(|e| format!("reading `{PATCH}`: {e}"))? {
            Line::Text(l) => stat.push(&l),
            Line::TooLong(_) | Line::Truncated => {}
        }
    }
    Ok(stat.files)
}
