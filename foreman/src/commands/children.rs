//! `saheeli task submit --parent ID` and `POST /api/tasks` with `parent`
//! (issue 30): a task queued as a child of another, by a person. The
//! parent's `delegate:` limits are for its model, not for a person; its
//! budget is: the child's is carved out of what the parent has left.

use std::path::Path;

use saheeli_protocol::TaskId;

use crate::cli::PromptArgs;
use crate::config::Config;
use crate::spec::TaskSpec;
use crate::store::{ParentBudget, SpawnAsk, Spawned, StoreError};

use super::{CommandError, open_store, pack_submitted, require_image};

/// Queues `spec` (from `prompt`) as a child of `parent` (an id or a
/// unique prefix); returns the new id. A parent that is not there, or
/// that cannot take the child, is the request's fault.
pub(crate) async fn submit_child(
    cfg: &Config,
    prompt: &Path,
    mut spec: TaskSpec,
    args: &PromptArgs,
    parent: &str,
) -> Result<TaskId, CommandError> {
    let id = TaskId::new();
    require_image(cfg, prompt, &spec.agent).await?;
    let parent_row = match open_store(cfg)
        .map_err(CommandError::Internal)?
        .require(parent)
    {
        Ok(row) => row,
        Err(e @ (StoreError::TaskNotFound(_) | StoreError::Ambiguous { .. })) => {
            let e = anyhow::Error::from(e).context(format!("the parent task `{parent}`"));
            return Err(CommandError::Refused(e));
        }
        Err(e) => return Err(e.into()),
    };
    let packed = pack_submitted(cfg, prompt, &mut spec, args, id).await?;
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
    let queued = open_store(cfg)
        .map_err(CommandError::Internal)
        .and_then(|mut store| Ok(store.spawn_child(id, spec, priority, &ask)?));
    let outcome = match queued {
        Ok(Spawned::New { id, .. }) => Ok(id),
        Ok(Spawned::Refused(why)) => Err(CommandError::Refused(anyhow::anyhow!(
            "task {} cannot take this child: {why}",
            parent_row.id
        ))),
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
    outcome
}
