//! `task fork` and the HTTP API's fork (issue 51): K new tasks, each going
//! on from an ended task's conversation (its sealed session) and its
//! collected workspace, optionally with another model and a note the
//! model reads first. Forks are ordinary tasks linked by `forked_from`;
//! the parent is never touched.

use std::path::{Path, PathBuf};

use saheeli_protocol::TaskId;
use saheeli_protocol::attempt::RetryFrom;

use super::error::Error;
use crate::config::Config;
use crate::inputs;
use crate::ops::open_existing_store;
use crate::store::TaskRow;
use crate::task::{Chain, ForkOf, Used};

/// The most forks one request makes.
pub(crate) const MAX_FORKS: u32 = 16;

/// Longest `--note`, in bytes.
const MAX_NOTE: usize = 16 * 1024;

/// What a fork asks besides the task: plain data (the CLI's flags, the
/// API's body).
#[derive(Clone, Debug, Default)]
pub(crate) struct Fork {
    /// The parent's step to go on from (None: its last).
    pub at_step: Option<u64>,
    pub count: u32,
    /// Another model for the forks (None: the parent's).
    pub model: Option<String>,
    /// Told to each fork's model before its first call.
    pub note: Option<String>,
}

/// Queues `fork.count` forks of an ended task; their ids, in order.
pub(crate) async fn fork_task(
    cfg: &Config,
    id_or_prefix: &str,
    fork: Fork,
) -> Result<Vec<TaskId>, Error> {
    let mut store = open_existing_store(cfg).map_err(Error::Internal)?;
    let parent: TaskRow = store.require(id_or_prefix)?;
    let session = check(cfg, &parent, &fork)?;
    let step = parent.steps.max(0) as u64;
    let results = session
        .parent()
        .expect("a session file is in its results")
        .to_path_buf();
    let mut forks = Vec::new();
    for index in 1..=fork.count {
        let id = TaskId::new();
        let mut spec = parent.spec.clone();
        if let Some(m) = &fork.model {
            spec.model = m.clone();
        }
        spec.forked_from = Some(ForkOf {
            task: parent.id,
            step,
            index,
            count: fork.count,
            cache_key: parent.spec.cache_key(parent.id),
        });
        // Each fork has the parent's budgets for its own steps.
        spec.chain = Some(Chain {
            from: parent.id,
            mode: RetryFrom::Session,
            note: note(&parent, step, index, fork.count, fork.note.as_deref()),
            used: Used::default(),
        });
        forks.push((id, spec));
    }
    let state_dir = cfg.state_dir();
    let max = cfg.file.max_workspace_size.0;
    let secrets = crate::config::Providers::from_config(cfg).secrets();
    let ids: Vec<TaskId> = forks.iter().map(|(id, _)| *id).collect();
    let (dir, packed_ids) = (state_dir.clone(), ids.clone());
    let packed = tokio::task::spawn_blocking(move || -> Result<(), Error> {
        for id in packed_ids {
            inputs::pack_resume(&dir, &results, id, max, secrets.clone()).map_err(|e| {
                Error::Refused(anyhow::anyhow!(
                    "the collected workspace of task `{}` cannot be forked: {e}",
                    parent.id
                ))
            })?;
        }
        Ok(())
    })
    .await
    .map_err(|e| Error::panicked("packing", e))?;
    if let Err(e) = packed {
        for id in &ids {
            inputs::remove_workspace(&state_dir, *id).await;
        }
        return Err(e);
    }
    if let Err(e) = store.submit_forks(&forks, parent.priority) {
        for id in &ids {
            inputs::remove_workspace(&state_dir, *id).await;
        }
        return Err(e.into());
    }
    Ok(ids)
}

/// Refuses what cannot be forked, saying why; else the parent's session
/// file (in its collected results).
fn check(cfg: &Config, parent: &TaskRow, fork: &Fork) -> Result<PathBuf, Error> {
    let refuse = |why: String| Err(Error::Refused(anyhow::anyhow!(why)));
    if fork.count == 0 || fork.count > MAX_FORKS {
        return refuse(format!("`--count` must be 1 to {MAX_FORKS}"));
    }
    if fork.note.as_ref().is_some_and(|n| n.len() > MAX_NOTE) {
        return refuse(format!("`--note` must be at most {} KiB", MAX_NOTE / 1024));
    }
    if !parent.state.is_terminal() {
        return Err(Error::WrongState(format!(
            "task `{}` is {}; only an ended task can be forked for now (forking a running one \
             needs snapshots, not built yet): wait for it, or fork it once it ends",
            parent.id, parent.state
        )));
    }
    let last = parent.steps.max(0) as u64;
    if let Some(n) = fork.at_step
        && n != last
    {
        return refuse(format!(
            "task `{}` ended at step {last}; `--at-step {n}` needs the workspace as it was at \
             step {n}, which is kept only with snapshots (not built yet): fork at step {last}",
            parent.id
        ));
    }
    if !parent.spec.agent.is_builtin() {
        return refuse(format!(
            "task `{}` ran `agent: {}`, whose own session is not restored yet; only the built-in \
             agent's tasks can be forked",
            parent.id,
            parent.spec.agent.label()
        ));
    }
    if let Some(m) = &fork.model {
        check_model(cfg, parent, m)?;
    }
    let Some(results) = &parent.results_path else {
        return refuse(format!(
            "task `{}` has no collected results to fork from",
            parent.id
        ));
    };
    let session = Path::new(results).join(format!("servo-{}-session.json", parent.id));
    // Never followed: a link the agent left there is not a session.
    match std::fs::symlink_metadata(&session) {
        Ok(m) if m.file_type().is_file() => Ok(session),
        _ => refuse(format!(
            "task `{}` left no session in its results (`{}`) to go on from",
            parent.id,
            session.display()
        )),
    }
}

/// A model the forks may switch to: one a configured provider serves, of
/// the same kind as the parent's (a replay script is the parent's own).
fn check_model(cfg: &Config, parent: &TaskRow, model: &str) -> Result<(), Error> {
    let refuse = |why: String| Err(Error::Refused(anyhow::anyhow!(why)));
    if model.trim().is_empty() || model.len() > 200 {
        return refuse("`--model` must be 1 to 200 characters".into());
    }
    let replay = |m: &str| m.starts_with("replay:");
    if replay(model) || replay(&parent.spec.model) {
        return refuse(format!(
            "task `{}` and its forks must both use a provider's model to switch (`replay:` \
             scripts are read at submit): leave `--model` out",
            parent.id
        ));
    }
    let providers = crate::config::Providers::from_config(cfg);
    let r = providers.route(model);
    if !cfg.file.providers.contains_key(&r.provider.name) && r.provider.key.is_none() {
        return refuse(format!(
            "`--model {model}` goes to provider `{}`, which is not configured (add it under \
             `providers:` in {}, or set ${})",
            r.provider.name,
            cfg.describe_source(),
            r.provider.key_env.as_deref().unwrap_or("its key")
        ));
    }
    Ok(())
}

/// What each fork's model reads after the parent's conversation.
fn note(parent: &TaskRow, step: u64, index: u32, count: u32, extra: Option<&str>) -> String {
    let mut s = format!(
        "[saheeli] This conversation is fork {index} of {count} of task {}, going on from its \
         step {step} with the workspace as that task left it (it ended {}).",
        parent.id.short(),
        parent.state
    );
    if let Some(extra) = extra.filter(|e| !e.trim().is_empty()) {
        s.push_str("\n\n");
        s.push_str(extra);
    }
    s
}
