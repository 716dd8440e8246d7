//! `saheeli task submit --parent ID` and `POST /api/tasks` with `parent`
//! (issue 30): a task queued as a child of another, by a person. The
//! parent's `delegate:` limits are for its model, not for a person; its
//! budget is: the child's is carved out of what the parent has left.

use std::path::Path;

use anyhow::{Context, bail};
use saheeli_protocol::TaskId;

use crate::cli::PromptArgs;
use crate::config::Config;
use crate::spec::TaskSpec;
use crate::store::{ParentBudget, SpawnAsk, Spawned};

use super::*;

/// Queues `spec` (from `prompt`) as a child of `parent` (an id or a
/// unique prefix); returns the new id.
pub(crate) async fn submit_child(
    cfg: &Config,
    prompt: &Path,
    spec: TaskSpec,
    args: &PromptArgs,
    parent: &str,
) -> anyhow::Result<TaskId> {
    let id = TaskId::new();
    crate::spec::require_image(cfg, prompt, &spec.agent).await?;
    let parent_row = open_store(cfg)?
        .require(parent)
        .with_context(|| format!("the parent task `{parent}`"))?;
    let packed = match &spec.workspace {
        Some(ws) => {
            crate::inputs::check_workspace_path(prompt, ws, args.allow_workspace_outside)?;
            let (cfg, ws) = (cfg.clone(), ws.clone());
            let include_ignored = spec.workspace_include_ignored;
            let tar = tokio::task::spawn_blocking(move || pack(&cfg, &ws, id, include_ignored))
                .await
                .context("packing thread panicked")??;
            Some(tar)
        }
        None => None,
    };
    let ask = SpawnAsk {
        parent: parent_row.id,
        call_id: None,
        enforce: false,
        budget: ParentBudget {
            max_tokens: parent_row.spec.max_tokens,
            max_cost: parent_row.spec.max_cost,
            used_tokens: (parent_row.input_tokens + parent_row.output_tokens).max(0) as u64,
            used_cost: parent_row.cost_usd,
        },
        want_tokens: None,
        want_cost: None,
    };
    let priority = args.priority.or(spec.priority).unwrap_or(0);
    let queued = open_store(cfg).and_then(|mut store| {
        store
            .spawn_child(id, spec, priority, &ask)
            .map_err(anyhow::Error::from)
    });
    let outcome = match queued {
        Ok(Spawned::New { id, .. }) => Ok(id),
        Ok(Spawned::Refused(why)) => Err(anyhow::anyhow!(
            "task {} cannot take this child: {why}",
            parent_row.id
        )),
        Ok(Spawned::Again(_)) => unreachable!("a person's submit has no call id"),
        Err(e) => Err(e),
    };
    if let (Err(_), Some(tar)) = (&outcome, packed) {
        let _ = std::fs::remove_file(tar);
    }
    if outcome.is_ok() && parent_row.state.is_terminal() {
        eprintln!(
            "note: the parent {} has ended ({}); the child runs on its own",
            parent_row.id, parent_row.state
        );
    }
    outcome.or_else(|e| bail!("{e:#}"))
}
