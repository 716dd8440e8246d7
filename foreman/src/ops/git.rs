//! A task's repository at submit (issue 52): fetched into the foreman's
//! mirror, the ref's commit checked out (or found checked out already)
//! and packed as the task's submitted workspace (so `changes.patch` is
//! against that commit), the start commit and the delivery's branch
//! recorded in its spec.

use std::path::PathBuf;

use anyhow::Context;
use saheeli_protocol::TaskId;

use super::error::Error;
use crate::config::Config;
use crate::git::{Creds, Mirror};
use crate::inputs;
use crate::spec::TaskSpec;
use crate::task::{GitStart, branch_name};

/// Packs the repository of `spec` (which has `workspace: { git }`) as
/// task `id`'s submitted workspace; returns the tar. Blocking.
pub(crate) fn pack_repository(
    cfg: &Config,
    spec: &mut TaskSpec,
    id: TaskId,
) -> Result<PathBuf, Error> {
    let title = spec.title.clone();
    let prompt = spec.prompt_path.clone();
    let g = spec.git.as_mut().expect("a repository workspace");
    let mirror = Mirror::of(&cfg.state_dir(), &g.fetch);
    let fetched = mirror
        .fetch(&g.reference, g.depth, &Creds::of(cfg))
        .map_err(|e| Error::Refused(e.context(format!("{prompt}: `workspace.git`"))))?;
    tracing::info!(task_id = %id, url = %g.url, commit = %fetched.commit, cold = fetched.cold, ms = fetched.ms, "repository fetched");
    let state = cfg.state_dir();
    let tar = inputs::new_workspace_tar(&state, id)
        .with_context(|| format!("creating the inputs directory in `{}`", state.display()))
        .map_err(Error::Internal)?;
    // The commit's files, checked out once and kept for the next task on it.
    let packed = mirror.lock().map_err(Error::Internal).and_then(|_lock| {
        let tree = mirror.tree(&fetched.commit).map_err(Error::Internal)?;
        let mut opts = inputs::pack_options(cfg, true);
        opts.no_parent_rules = true;
        inputs::pack_workspace(&tree, &tar, &opts).map_err(Error::from)
    });
    packed?;
    g.start = Some(GitStart {
        url: g.url.clone(),
        reference: g.reference.clone(),
        commit: fetched.commit,
        cold: fetched.cold,
        fetch_ms: fetched.ms,
    });
    if let Some(d) = spec.deliver.as_mut() {
        d.branch = branch_name(&d.branch, id, &title);
    }
    Ok(tar)
}
