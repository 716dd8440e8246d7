//! The verify container made ahead (issue 49: a task's overhead). A
//! fresh container per attempt (HOSTILE.md case 27) costs its creation
//! and start; made while the agent works, they are off the check's path.
//! The first is made once the task's servo container exists (beside its
//! start: an agent that finishes at once finds it ready), the next after a
//! failed attempt with attempts left. A spare is the same container
//! `VerifyBox::make` always made: from the task's image, with the task's
//! hardening, its workspace and (bound in it alone) the attempt's hidden
//! tests, idling; the agent has no process in it and cannot reach it.
//! Only taking it for a check pauses the task's container.
//!
//! Whatever is made is removed when the gateway stops (`drain`), with the
//! removals a check left running: before the workspace is collected.
//!
//! A check on a copy of the workspace (`VerifyLink::on_copy`: hidden tests,
//! and the agent gets its workspace back after it) has no spare: the copy
//! is made once the task's container is paused, and so is its container.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use saheeli_protocol::TaskId;
use tokio::task::JoinHandle;
use tracing::warn;

use super::verify_hidden;
use super::verify_link::VerifyLink;
use crate::backend::TaskEngine;
use crate::backend::docker::VerifyBox;

/// A verify container made, with the hidden tests staged for it.
pub(crate) struct Made {
    pub vbox: VerifyBox,
    pub staged: Option<PathBuf>,
    /// The workspace's directory on this host (the local engine's), which
    /// the check reads in place (`verify_tree`).
    pub host: Option<PathBuf>,
}

impl Made {
    /// Removes the container, then its staged tests.
    async fn undo(self, id: TaskId) {
        if let Err(e) = self.vbox.close().await {
            warn!(task_id = %id, error = %format!("{e:#}"), "a spare verify container was not removed");
        }
        if let Some(dir) = self.staged {
            let _ = tokio::fs::remove_dir_all(&dir).await;
        }
    }
}

/// A task's spare verify container (at most one) and the removals its
/// checks left running.
#[derive(Default)]
pub(crate) struct Spares {
    next: Mutex<Option<JoinHandle<anyhow::Result<Made>>>>,
    removing: Mutex<Vec<JoinHandle<anyhow::Result<()>>>>,
    /// The last attempt whose check began: a spare for it or an earlier
    /// one is never made after (a fast agent's check can begin before
    /// the foreman has seen its servo running).
    checked: AtomicU32,
}

impl Spares {
    /// Keeps a verify container's removal, to be awaited by `drain`.
    pub fn removing(&self, removal: JoinHandle<anyhow::Result<()>>) {
        let mut list = self.removing.lock().expect("spares lock");
        list.retain(|h| !h.is_finished());
        list.push(removal);
    }

    /// Removes the spare (made or being made) and waits for every removal
    /// begun: nothing of a check outlives its task's gateway.
    pub async fn drain(&self, id: TaskId) {
        let next = self.next.lock().expect("spares lock").take();
        if let Some(h) = next {
            match tokio::time::timeout(std::time::Duration::from_secs(30), h).await {
                Ok(Ok(Ok(made))) => made.undo(id).await,
                Ok(_) => {}
                // The sweeper removes what a stuck daemon made.
                Err(_) => {
                    warn!(task_id = %id, "a spare verify container was still being made after 30 s")
                }
            }
        }
        let removing = std::mem::take(&mut *self.removing.lock().expect("spares lock"));
        for h in removing {
            match h.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    warn!(task_id = %id, error = %format!("{e:#}"), "a verify container was not removed");
                }
                Err(e) => warn!(task_id = %id, error = %e, "a verify container's removal failed"),
            }
        }
    }
}

/// Removes what the task's checks made (`Spares::drain`) and a copy of
/// its workspace a check stopped midway left (`VerifyLink::on_copy`;
/// detached: a check still running keeps its view until its container is
/// killed, and the workspace changes under neither, its container being
/// paused until then).
pub(crate) async fn drain(link: &VerifyLink, id: TaskId) {
    link.spares.drain(id).await;
    if !link.hidden.is_empty()
        && let Err(e) = crate::backend::docker::remove_check_copy(&link.state_dir, id).await
    {
        warn!(task_id = %id, error = %format!("{e:#}"), "a check's copy of the workspace was not removed");
    }
}

/// Begins making a spare verify container for attempt `attempt` of task
/// `id`, unless one is there: on this host only (a swarm's verify joins
/// its task's node, found at check time), and only for commands.
pub(crate) fn prewarm(link: &Arc<VerifyLink>, id: TaskId, attempt: u32) {
    // A check on a copy of the workspace makes its container once the
    // task's is paused (`VerifyLink::on_copy`).
    if link.commands.is_empty()
        || matches!(link.engine, TaskEngine::Swarm { .. })
        || link.on_copy(attempt).is_some()
    {
        return;
    }
    let mut next = link.spares.next.lock().expect("spares lock");
    if next.is_some() || attempt <= link.spares.checked.load(Ordering::SeqCst) {
        return;
    }
    let link = link.clone();
    *next = Some(tokio::spawn(async move {
        let (d, task_container) = link.engine.container(id).await?;
        make(&link, id, attempt, &d, &task_container).await
    }));
}

/// A new verify container for attempt `attempt` beside `task_container`,
/// its hidden tests staged (removed again when it cannot be made).
pub(crate) async fn make(
    link: &VerifyLink,
    id: TaskId,
    attempt: u32,
    d: &bollard::Docker,
    task_container: &str,
) -> anyhow::Result<Made> {
    use anyhow::Context;
    let staged = verify_hidden::stage_for(link, id, attempt)
        .await
        .context("the hidden tests could not be staged")?;
    let made = VerifyBox::make(
        d,
        id,
        task_container,
        &link.sandbox,
        (attempt, link.on_copy(attempt)),
        staged.as_deref(),
    )
    .await
    .context("the verify container could not be made");
    match made {
        Ok(vbox) => {
            let host = match link.engine {
                TaskEngine::Swarm { .. } => None,
                _ => vbox.host_workspace().await,
            };
            Ok(Made { vbox, staged, host })
        }
        Err(e) => {
            if let Some(dir) = staged {
                let _ = tokio::fs::remove_dir_all(&dir).await;
            }
            Err(e)
        }
    }
}

/// The spare, when one was made beside `task_container` (the container
/// the check is for): else None, and a spare of another is removed.
/// Marks attempt `attempt`'s check begun, so no spare is made for it
/// after.
pub(crate) async fn take(
    link: &VerifyLink,
    id: TaskId,
    attempt: u32,
    task_container: &str,
) -> Option<Made> {
    let next = {
        let mut next = link.spares.next.lock().expect("spares lock");
        link.spares.checked.fetch_max(attempt, Ordering::SeqCst);
        next.take()?
    };
    match next.await {
        Ok(Ok(made)) if made.vbox.task_container() == task_container => Some(made),
        Ok(Ok(other)) => {
            other.undo(id).await;
            None
        }
        Ok(Err(e)) => {
            warn!(task_id = %id, error = %format!("{e:#}"), "no spare verify container; making one now");
            None
        }
        Err(_) => None,
    }
}
