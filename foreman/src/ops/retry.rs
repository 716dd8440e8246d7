//! `task retry` and the HTTP API's retry: an ended task's prompt queued
//! again as a new task, its workspace copied or packed anew.

use super::error::Error;
use crate::config::Config;
use crate::inputs;
use crate::ops::open_existing_store;
use crate::store::TaskRow;
use saheeli_protocol::TaskId;

/// A task queued again by [`retry_task`].
pub(crate) struct Retried {
    pub id: TaskId,
    pub retry_of: TaskId,
    /// Something the person should know (the workspace was copied anew).
    pub note: Option<String>,
}

/// Queues an ended task's prompt again as a new task (`task retry`, and
/// the HTTP API's retry).
pub(crate) async fn retry_task(cfg: &Config, id_or_prefix: &str) -> Result<Retried, Error> {
    let mut store = open_existing_store(cfg).map_err(Error::Internal)?;
    let old: TaskRow = store.require(id_or_prefix)?;
    if !old.state.is_terminal() {
        return Err(Error::WrongState(format!(
            "task `{}` is {}; only an ended task can be retried (wait for it, or `saheeli task cancel {}` first)",
            old.id,
            old.state,
            old.id.short()
        )));
    }
    let id = TaskId::new();
    let state_dir = cfg.state_dir();
    let had_copy = inputs::workspace_tar(&state_dir, old.id).is_file();
    let mut note = None;
    if had_copy {
        let (from, state_dir) = (old.id, state_dir.clone());
        tokio::task::spawn_blocking(move || inputs::copy_workspace(&state_dir, from, id))
            .await
            .map_err(|e| Error::panicked("copying", e))?
            .map_err(Error::Internal)?;
    } else if let Some(start) = old.spec.git.as_ref().and_then(|g| g.start.clone()) {
        // A repository's checkout (issue 52): the same commit again, from
        // the mirror.
        let (cfg2, mut spec2) = (cfg.clone(), old.spec.clone());
        if let Some(g) = spec2.git.as_mut() {
            g.reference = start.commit;
        }
        tokio::task::spawn_blocking(move || super::git::pack_repository(&cfg2, &mut spec2, id))
            .await
            .map_err(|e| Error::panicked("checking out", e))??;
    } else if let Some(ws) = &old.spec.workspace {
        if ws.is_relative() {
            // A child's files, sent by its parent: packed at spawn, and
            // named by no directory (`spawned-by-…`).
            return Err(Error::Refused(anyhow::anyhow!(
                "task `{}` was spawned with files from its parent, and its copy of them is \
                 gone now that it has run; spawn it again from its parent",
                old.id
            )));
        }
        // The submitted copy is deleted once a task's workspace is
        // collected: copy the directory again, under the same rules, and
        // within the same bounds it was checked against then (N19).
        let bounds = inputs::bounds_of(&old.spec).map_err(Error::Refused)?;
        let (cfg2, ws2, include) = (cfg.clone(), ws.clone(), old.spec.workspace_include_ignored);
        tokio::task::spawn_blocking(move || inputs::pack(&cfg2, &ws2, &bounds, id, include))
            .await
            .map_err(|e| Error::panicked("packing", e))??;
        note = Some(format!(
            "task `{}` has run, so its submitted workspace is gone; copied `{}` again as it is now",
            old.id,
            ws.display()
        ));
    }
    if let Err(e) = store.retry(old.id, id) {
        inputs::remove_workspace(&state_dir, id).await;
        return Err(e.into());
    }
    Ok(Retried {
        id,
        retry_of: old.id,
        note,
    })
}
