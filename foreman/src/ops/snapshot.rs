//! `task snapshot ID` and `POST /api/tasks/ID/snapshot` (issue 51): asks
//! a running task with `snapshots: on_request` to keep its workspace and
//! session at its next step (the servo's next snapshot point, before its
//! next call); `task fork ID --at-step N` then goes on from it.

use saheeli_protocol::TaskId;
use saheeli_protocol::front_matter::Snapshots;

use super::error::Error;
use crate::collect::snapshot;
use crate::config::Config;
use crate::ops::open_existing_store;

/// What asking did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Asked {
    /// Kept at the task's next step.
    Next(TaskId),
    /// The task keeps one at every step already.
    Every(TaskId),
}

/// Asks task `id_or_prefix` for a snapshot at its next step; the steps it
/// keeps now are `collect::snapshot::steps`.
pub(crate) fn request_snapshot(cfg: &Config, id_or_prefix: &str) -> Result<Asked, Error> {
    let store = open_existing_store(cfg).map_err(Error::Internal)?;
    let task = store.require(id_or_prefix)?;
    if task.state.is_terminal() {
        return Err(Error::WrongState(format!(
            "task `{}` is {}: it takes no more steps; its last step is in its results (`task \
             fork {}` goes on from it)",
            task.id,
            task.state,
            task.id.short()
        )));
    }
    match task.spec.snapshots {
        Snapshots::Every => Ok(Asked::Every(task.id)),
        Snapshots::Off => Err(Error::Refused(anyhow::anyhow!(
            "task `{}` keeps no snapshots (`snapshots: off`); submit it with `snapshots: \
             on_request` (or `every`) in its front-matter to snapshot it",
            task.id
        ))),
        Snapshots::OnRequest => {
            snapshot::request(&cfg.state_dir(), task.id)
                .map_err(|e| Error::Internal(anyhow::anyhow!("asking for a snapshot: {e}")))?;
            Ok(Asked::Next(task.id))
        }
    }
}

/// The snapshots task `id` keeps, for `task status` (issue 51).
pub(crate) fn kept_snapshots(cfg: &Config, id: TaskId) -> Vec<crate::output::SnapshotView> {
    crate::collect::snapshot_record::kept(&cfg.state_dir(), id)
        .into_iter()
        .map(|k| crate::output::SnapshotView {
            step: k.step,
            bytes: k.bytes,
        })
        .collect()
}
