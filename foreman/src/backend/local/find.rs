//! A task whose foreman stopped: its servo (by label), what a launch that
//! never ran left, and a parked task's kept workspace.

use std::path::Path;

use saheeli_protocol::TaskId;
use tracing::warn;

use super::Local;
use super::collect::copy_local;
use super::pool::socket_name;
use crate::backend::docker;
use crate::backend::facts::{EngineError, Found, Prepared, Reach, Servo, ServoKind, Warm};
use crate::spec::TaskSpec;

impl Local {
    /// Whether the task's servo runs, from its first labelled container,
    /// or the warm servo its row records (`recorded`: claimed for it).
    pub async fn find(&self, id: TaskId, recorded: Option<&str>) -> Found {
        let d = &self.docker;
        if let Some(name) = recorded.filter(|r| socket_name(r).is_some()) {
            return match docker::running(d, name).await {
                Ok(Some(true)) => Found::Running(Servo {
                    task: id,
                    id: name.to_string(),
                    prepared: Prepared {
                        reach: Reach::Warm(Warm {
                            name: name.to_string(),
                            socket: None,
                            claimed: std::time::Instant::now(),
                            disk: self.cfg.file.task.disk.0,
                            setup_key: None,
                        }),
                        suffix: None,
                    },
                    kind: ServoKind::Local,
                }),
                Ok(_) => Found::Gone,
                Err(e) => Found::Unknown(EngineError::of(e)),
            };
        }
        let containers = match docker::task_containers(d, id).await {
            Ok(c) => c,
            Err(e) => return Found::Unknown(EngineError::of(e)),
        };
        let first = match containers.first() {
            Some(cid) => Some((cid.clone(), docker::has_started(d, cid).await)),
            None => None,
        };
        match found(first) {
            Some(Ok(cid)) => Found::Running(Servo {
                task: id,
                id: cid,
                prepared: Prepared::socket(),
                kind: ServoKind::Local,
            }),
            Some(Err(e)) => Found::Unknown(EngineError::of(e)),
            None if containers.is_empty() => Found::Gone,
            None => Found::NeverStarted,
        }
    }

    /// Removes every container of the task (a verify container a crash
    /// left too) and its workspace; first, with `collect_into`, copies what
    /// the workspace holds there (the servo ran, and its foreman removed
    /// the container to collect the workspace, then stopped).
    pub async fn clear_left(
        &self,
        id: TaskId,
        collect_into: Option<&Path>,
        recorded: Option<&str>,
    ) {
        let d = &self.docker;
        if let Some(name) = recorded.filter(|r| socket_name(r).is_some()) {
            // A warm servo claimed for the task: its container and
            // workspace are named, not labelled with the task.
            let _ = docker::remove_container(d, name).await;
            if let Some(dest) = collect_into
                && let Some(src) = self.workspace_dir(name).await
            {
                let secrets = self.secrets.to_vec();
                let cap = self.cfg.file.max_results_size.0;
                if let Err(e) = copy_local(id, src, dest.to_path_buf(), secrets, cap).await {
                    warn!(task_id = %id, error = %format!("{e:#}"), "collecting the left warm volume failed");
                }
            }
            self.cleanup(id, None, name).await;
            self.forget_warm(name);
            return;
        }
        let every = match docker::every_task_container(d, id).await {
            Ok(every) => every,
            Err(_) => docker::task_containers(d, id).await.unwrap_or_default(),
        };
        for cid in &every {
            let _ = docker::remove_container(d, cid).await;
        }
        let name = docker::volume_name(id);
        if let Some(dest) = collect_into
            && let Some(src) = self.workspace_dir(&name).await
        {
            let secrets = self.secrets.to_vec();
            let cap = self.cfg.file.max_results_size.0;
            if let Err(e) = copy_local(id, src, dest.to_path_buf(), secrets, cap).await {
                warn!(task_id = %id, error = %format!("{e:#}"), "collecting the left workspace failed");
            }
        }
        if let Err(e) = self.remove_home(&name).await {
            warn!(task_id = %id, error = %format!("{e:#}"), "the left workspace was not removed");
        }
        // A volume an older foreman bound its image through.
        for v in docker::task_volumes(d, id).await.unwrap_or_default() {
            let _ = docker::remove_volume(d, &v).await;
        }
    }

    /// Collects a parked task's kept workspace on this host, and removes it.
    pub async fn collect_kept(
        &self,
        id: TaskId,
        spec: &TaskSpec,
        dest: &Path,
    ) -> anyhow::Result<crate::collect::Collected> {
        // A container on the kept workspace, never started: the archive
        // API reads through it (or it is removed first for a local copy).
        let volume = docker::volume_name(id);
        let created = docker::create_container(
            &self.docker,
            id,
            spec,
            &docker::ServoImage::own(&self.cfg.file.image),
            &self.home(&volume),
            None,
            None,
            None,
            false,
        )
        .await;
        match created {
            Ok(cid) => {
                let (collected, removed) = self.gather(id, &cid, &volume, dest, false).await;
                // Removed already for a local copy: not asked again.
                let left = if removed { vec![] } else { vec![cid] };
                self.remove_all(id, left, &volume).await;
                collected
            }
            Err(e) => {
                self.cleanup(id, None, &volume).await;
                Err(e)
            }
        }
    }

    /// Removes what a launch made (`keep_workspace`: not the workspace,
    /// all a parked task has).
    pub async fn remove_task(&self, id: TaskId, keep_workspace: bool) {
        if keep_workspace {
            self.remove_containers(id, None).await;
        } else {
            self.cleanup(id, None, &docker::volume_name(id)).await;
        }
    }
}

/// What Docker says of the first container: Some(Ok) started, Some(Err)
/// unknown, None not started. A Docker error means "unknown", never "not
/// started": acting on a guess would remove a running servo's container
/// and volume.
fn found(first: Option<(String, anyhow::Result<bool>)>) -> Option<anyhow::Result<String>> {
    match first {
        Some((cid, Ok(true))) => Some(Ok(cid)),
        Some((_, Err(e))) => Some(Err(e)),
        Some((_, Ok(false))) | None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 9 §6: an error while asking whether the servo started is not
    /// taken for "not started" (which removed a running task's container).
    #[test]
    fn a_docker_error_is_unknown_not_not_started() {
        let err = || Err(anyhow::anyhow!("connection reset"));
        assert!(matches!(found(Some(("c".into(), err()))), Some(Err(_))));
        assert!(matches!(found(Some(("c".into(), Ok(true)))), Some(Ok(c)) if c == "c"));
        assert!(found(Some(("c".into(), Ok(false)))).is_none());
        assert!(found(None).is_none());
    }
}
