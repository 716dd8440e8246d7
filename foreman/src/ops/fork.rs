//! `task fork` and the HTTP API's fork (issue 51): K new tasks, each going
//! on from a task's conversation (its sealed session) and workspace at a
//! step, optionally with another model and a note the model reads first:
//! an ended task's collected results at its last step, or a snapshot
//! (`snapshots:`, `collect::snapshot`) at any step it kept, the task ended
//! or running. Forks are ordinary tasks linked by `forked_from`; the
//! parent is never touched (a running one is only read from its
//! snapshots, in the foreman's state).

use std::path::PathBuf;

use saheeli_protocol::TaskId;
use saheeli_protocol::attempt::RetryFrom;
use saheeli_protocol::front_matter::Snapshots;

use super::error::Error;
use crate::collect::snapshot;
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
    /// Best-of-N's `fork_at`: the forks are samples 2 to K of the task
    /// of this title (the parent is its sample 1), numbered so.
    pub samples_of: Option<String>,
}

/// Queues `count` forks of task `parent` going on from its step `step`
/// (a snapshot of it, or the last step of an ended task); their ids, in
/// order. The one call best-of-N's `samples:` / `fork_at:` needs.
// Best-of-N (issue 51's `samples:`, built beside this) is its caller.
#[allow(dead_code)]
pub(crate) async fn fork_at(
    cfg: &Config,
    parent: TaskId,
    step: u64,
    count: u32,
) -> Result<Vec<TaskId>, Error> {
    let fork = Fork {
        at_step: Some(step),
        count,
        ..Fork::default()
    };
    fork_task(cfg, &parent.to_string(), fork).await
}

/// Queues `fork.count` forks of a task; their ids, in order.
pub(crate) async fn fork_task(
    cfg: &Config,
    id_or_prefix: &str,
    fork: Fork,
) -> Result<Vec<TaskId>, Error> {
    let mut store = open_existing_store(cfg).map_err(Error::Internal)?;
    let parent: TaskRow = store.require(id_or_prefix)?;
    let from = check(cfg, &parent, &fork)?;
    let script = match &fork.model {
        Some(m) => check_model(cfg, &parent, m)?,
        None => None,
    };
    let (step, results) = (from.step, from.dir.clone());
    let mut forks = Vec::new();
    for index in 1..=fork.count {
        let id = TaskId::new();
        let mut spec = parent.spec.clone();
        if let Some(m) = &fork.model {
            spec.model = m.clone();
        }
        if let Some(s) = &script {
            spec.replay = Some(s.clone());
        }
        if let Some(title) = &fork.samples_of {
            spec.number_sample(title, index + 1, fork.count + 1);
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
            note: note(&parent, &from, index, fork.count, fork.note.as_deref()),
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
                    "the workspace of task `{}` at step {step} cannot be forked: {e}",
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

/// Where forks go on from: a directory holding the parent's workspace
/// and session file at `step`.
struct From {
    dir: PathBuf,
    step: u64,
    /// A snapshot (else the collected results of an ended task).
    snapshot: bool,
}

/// Refuses what cannot be forked, saying why; else where the forks go
/// on from.
fn check(cfg: &Config, parent: &TaskRow, fork: &Fork) -> Result<From, Error> {
    let refuse = |why: String| Err(Error::Refused(anyhow::anyhow!(why)));
    if fork.count == 0 || fork.count > MAX_FORKS {
        return refuse(format!("`--count` must be 1 to {MAX_FORKS}"));
    }
    if fork.note.as_ref().is_some_and(|n| n.len() > MAX_NOTE) {
        return refuse(format!("`--note` must be at most {} KiB", MAX_NOTE / 1024));
    }
    if !parent.spec.agent.is_builtin() {
        return refuse(format!(
            "task `{}` ran `agent: {}`, whose own session is not restored yet; only the built-in \
             agent's tasks can be forked",
            parent.id,
            parent.spec.agent.label()
        ));
    }
    let ended = parent.state.is_terminal();
    let last = parent.steps.max(0) as u64;
    let from = match fork.at_step {
        // An ended task's last step: its collected results.
        Some(n) if ended && n == last => None,
        None if ended => None,
        Some(n) => Some(n),
        None => match snapshot::steps(&cfg.state_dir(), parent.id).last() {
            Some(n) => Some(u64::from(*n)),
            None => return Err(no_snapshot(parent, None, &[])),
        },
    };
    let (dir, step, snapshot) = match from {
        None => match &parent.results_path {
            Some(r) => (PathBuf::from(r), last, false),
            None => {
                return refuse(format!(
                    "task `{}` has no collected results to fork from",
                    parent.id
                ));
            }
        },
        Some(n) => {
            let at = u32::try_from(n).ok();
            match at.and_then(|n| snapshot::at_step(&cfg.state_dir(), parent.id, n)) {
                Some(dir) => (dir, n, true),
                None => {
                    let kept = snapshot::steps(&cfg.state_dir(), parent.id);
                    return Err(no_snapshot(parent, Some(n), &kept));
                }
            }
        }
    };
    let session = dir.join(format!("servo-{}-session.json", parent.id));
    // Never followed: a link the agent left there is not a session.
    match std::fs::symlink_metadata(&session) {
        Ok(m) if m.file_type().is_file() => Ok(From {
            dir,
            step,
            snapshot,
        }),
        _ => refuse(format!(
            "task `{}` left no session at step {step} (`{}`) to go on from",
            parent.id,
            session.display()
        )),
    }
}

/// Why there is nothing to fork at step `n` (None: the task's latest).
fn no_snapshot(parent: &TaskRow, n: Option<u64>, kept: &[u32]) -> Error {
    let (id, state) = (parent.id, parent.state);
    let at = match n {
        Some(n) => format!("at step {n}"),
        None => "yet".into(),
    };
    let why = if parent.spec.snapshots == Snapshots::Off {
        let then = match state.is_terminal() {
            true => format!("fork it at its last step ({})", parent.steps.max(0)),
            false => "fork it once it ends".into(),
        };
        format!(
            "task `{id}` is {state} and keeps no snapshots (`snapshots: off`), so there is no \
             workspace {at} to fork from: {then}, or run it with `snapshots: every`"
        )
    } else if kept.is_empty() {
        format!("task `{id}` is {state} and has no snapshot {at} (it has kept none yet)")
    } else {
        let list: Vec<String> = kept.iter().map(u32::to_string).collect();
        format!(
            "task `{id}` is {state} and has no snapshot {at}; it has snapshots at steps {}",
            list.join(", ")
        )
    };
    if state.is_terminal() || n.is_some() {
        Error::Refused(anyhow::anyhow!(why))
    } else {
        Error::WrongState(why)
    }
}

/// A model the forks may switch to: one a configured provider serves, of
/// the same kind as the parent's; or, for a `replay:` task, another
/// script (its first turns, as many as the conversation has, are skipped
/// as on any resume), read now: its turns.
fn check_model(
    cfg: &Config,
    parent: &TaskRow,
    model: &str,
) -> Result<Option<saheeli_protocol::ReplayScript>, Error> {
    let refuse = |why: String| Err(Error::Refused(anyhow::anyhow!(why)));
    if model.trim().is_empty() || model.len() > 200 {
        return refuse("`--model` must be 1 to 200 characters".into());
    }
    let replay = |m: &str| m.starts_with("replay:");
    if replay(model) && replay(&parent.spec.model) {
        let file = model.trim_start_matches("replay:");
        return crate::spec::read_replay_here(file)
            .map(Some)
            .map_err(Error::Refused);
    }
    if replay(model) || replay(&parent.spec.model) {
        return refuse(format!(
            "task `{}` and its forks must both use a provider's model, or both a `replay:` \
             script, to switch: leave `--model` out",
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
    Ok(None)
}

/// What each fork's model reads after the parent's conversation.
fn note(parent: &TaskRow, from: &From, index: u32, count: u32, extra: Option<&str>) -> String {
    let how = match from.snapshot {
        true => format!(
            "the workspace as it was at that step (the task was {} when forked)",
            parent.state
        ),
        false => format!(
            "the workspace as that task left it (it ended {})",
            parent.state
        ),
    };
    let mut s = format!(
        "[saheeli] This conversation is fork {index} of {count} of task {}, going on from its \
         step {} with {how}.",
        parent.id.short(),
        from.step
    );
    if let Some(extra) = extra.filter(|e| !e.trim().is_empty()) {
        s.push_str("\n\n");
        s.push_str(extra);
    }
    s
}
