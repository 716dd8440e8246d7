//! What the reconciler writes beside a task's collected workspace: the
//! patch right after collection (while the submitted workspace is still
//! kept), the report once the outcome is decided. Neither ever changes an
//! outcome: a failure is logged, and a file the agent planted under the
//! same name is removed, so it cannot pass for Saheeli's.

use std::path::{Path, PathBuf};

use saheeli_protocol::TaskId;
use tracing::{info, warn};

use crate::inputs;
use crate::report;
use crate::state::TaskState;
use crate::store::{Outcome, TaskRow, now_ms};

use super::Ctx;

/// Writes `.saheeli/changes.patch` into the collected `dest` of task `id`
/// (`has_workspace`: its spec named a `workspace:`). Call it before the
/// submitted workspace is removed or handed to a retry.
pub(super) async fn record_changes(
    ctx: &Ctx,
    id: TaskId,
    has_workspace: bool,
    dest: &Path,
    truncated: bool,
) {
    let tar = inputs::workspace_tar(&ctx.cfg.state_dir(), id);
    let submitted = if tar.is_file() {
        Some(tar)
    } else if has_workspace {
        warn!(task_id = %id, "submitted workspace gone; no changes.patch");
        return unplant(id, dest, report::PATCH).await;
    } else {
        None
    };
    if truncated {
        info!(task_id = %id, "results cut at the size cap; no changes.patch");
        return unplant(id, dest, report::PATCH).await;
    }
    let dir = dest.to_path_buf();
    let written =
        tokio::task::spawn_blocking(move || report::write_changes(&dir, submitted.as_deref()))
            .await;
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            warn!(task_id = %id, error = %format!("{e:#}"), "changes.patch not written");
            unplant(id, dest, report::PATCH).await;
        }
        Err(e) => warn!(task_id = %id, error = %e, "changes.patch writer panicked"),
    }
}

/// The outcome of a task whose set-up failed (issue 50): a results
/// directory of its own, so its report (holding the set-up's output) is
/// written; none when it cannot be made.
pub(super) async fn setup_failed_outcome(ctx: &Ctx, id: TaskId) -> Outcome {
    let dest = ctx.cfg.results_dir().join(id.to_string());
    let made = tokio::fs::create_dir_all(&dest).await;
    match made {
        Ok(()) => Outcome {
            results_path: Some(dest.display().to_string()),
            ..Outcome::default()
        },
        Err(e) => {
            warn!(task_id = %id, error = %e, "no results directory for the failed set-up's report");
            Outcome::default()
        }
    }
}

/// Writes `report.md` into the results of task `id` as it is about to be
/// recorded (`to`, with `outcome`): before the record, so whoever sees the
/// task ended finds its report.
pub(super) async fn record_report(ctx: &Ctx, id: TaskId, to: TaskState, outcome: &Outcome) {
    let Some(dest) = outcome.results_path.as_ref().map(PathBuf::from) else {
        return;
    };
    crate::collect::secure_results(&ctx.cfg, &dest);
    let read = ctx
        .db(move |s| {
            let row = s.require(&id.to_string())?;
            let done = s.steps_done(id)?;
            let checks = s.verify_checks(id)?;
            let overrides = s.step_overrides(id)?;
            let children = s.children(id)?;
            let egress = s.egress_of(id)?;
            Ok((row, (done, overrides), (checks, children, egress)))
        })
        .await;
    let (row, steps, (checks, children, egress)) = match read {
        Ok((row, (done, overrides), checks)) => {
            let steps = crate::store::step_status_with(&row.spec.steps, &done, &overrides);
            (ended(row, to, outcome), steps, checks)
        }
        Err(e) => {
            warn!(task_id = %id, error = %format!("{e:#}"), "report.md not written");
            return;
        }
    };
    let dir = dest.clone();
    let synthesis = outcome.synthesis.clone();
    let written = tokio::task::spawn_blocking(move || {
        if row.spec.samples.is_some() {
            // Best-of-N (issue 51): the results are the winner's, its
            // report and verify logs with them; its samples listed below.
            return report::append_children(&dir, &children);
        }
        if row.spec.verifies() {
            report::write_verify_logs(&dir, &checks)?;
        }
        let had_proxy = row.spec.egress.any();
        report::write_report(&row, &dir, steps, checks, synthesis)?;
        report::append_children(&dir, &children)?;
        report::append_egress(&dir, &egress, had_proxy)
    })
    .await;
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            warn!(task_id = %id, error = %format!("{e:#}"), "report.md not written");
            unplant(id, &dest, report::REPORT).await;
        }
        Err(e) => warn!(task_id = %id, error = %e, "report.md writer panicked"),
    }
}

/// The row as [`Store::finish`](crate::store::Store::finish) is about to
/// record it.
fn ended(mut row: TaskRow, to: TaskState, o: &Outcome) -> TaskRow {
    row.state = to;
    row.reason = o.reason.clone();
    row.detail = o.detail.clone();
    row.steps = o.steps;
    row.input_tokens = o.input_tokens;
    row.output_tokens = o.output_tokens;
    row.cost_usd = o.cost_usd;
    row.results_path = o.results_path.clone();
    row.finished_at = Some(now_ms());
    row
}

/// Removes what the agent may have left where Saheeli writes `rel`.
async fn unplant(id: TaskId, dest: &Path, rel: &'static str) {
    let dir = dest.to_path_buf();
    if !dir.is_dir() {
        return;
    }
    let r = tokio::task::spawn_blocking(move || report::remove(&dir, rel)).await;
    if let Ok(Err(e)) = r {
        warn!(task_id = %id, error = %format!("{e:#}"), "could not remove `{rel}` from the results");
    }
}
