//! Bringing a finished workspace home: straight from the volume's host
//! directory when possible, else through the Docker archive API; then the
//! task's containers and volume go.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use bollard::Docker;
use saheeli_protocol::TaskId;
use tracing::warn;

use super::{DAEMON_PATIENCE, Local};
use crate::backend::docker;
use crate::backend::facts::{Collected, Servo, Workspace};
use crate::collect;
use crate::metrics::CollectPath;

impl Local {
    /// Brings a stopped servo's workspace home (`parked`: keeps it on its
    /// volume for the next launch instead); its container and volume go.
    /// `ask_oom`: whether to ask the daemon if it was OOM-killed (see
    /// [`crate::backend::seam::may_be_oom`]); `exited`: its end was seen
    /// (nothing runs in it any more).
    pub async fn collect(
        &self,
        servo: &Servo,
        dest: &std::path::Path,
        parked: bool,
        verifies: bool,
        ask_oom: bool,
        exited: bool,
    ) -> Collected {
        let (id, container) = (servo.task, servo.id.as_str());
        if parked && let Some(warm) = servo.warm() {
            return self.park_warm(servo, warm.disk).await;
        }
        if parked {
            if !self.remove_containers(id, Some(container)).await {
                warn!(task_id = %id, "the parked servo's container was not removed; it goes when the task does");
            }
            return Collected {
                workspace: Workspace::Kept,
                oom: false,
                took: std::time::Duration::ZERO,
            };
        }
        let d = &self.docker;
        let t0 = Instant::now();
        let lap = |what: &str| tracing::debug!(task_id = %id, ms = t0.elapsed().as_secs_f64() * 1000.0, "collect: {what}");
        if verifies {
            // A check the servo's end cut short: its container goes before the
            // workspace is read and its volume removed.
            if let Err(e) = docker::remove_verify_containers(d, id).await {
                warn!(task_id = %id, error = %format!("{e:#}"), "verify container not removed");
            }
        }
        lap("verify containers removed");
        let oom = ask_oom && docker::oom_killed(d, container).await;
        let started = Instant::now();
        let volume = servo.volume();
        let (collected, removed) = self.gather(id, container, &volume, dest, exited).await;
        let took = started.elapsed();
        lap("gathered");
        // Removed already for a local copy: not asked again.
        let left = if removed {
            vec![]
        } else {
            vec![container.to_string()]
        };
        // What is left goes in the background (`Removals::done` waits for
        // it before the foreman exits; the sweeper removes what a crash
        // left of an ended task). A daemon that is restarting is waited
        // for: a removal it refused would leave the container.
        let this = self.clone();
        self.cleanups.spawn(async move {
            let known = left.first().map(String::as_str);
            for _ in 0..3 {
                if known.is_none() || this.remove_containers(id, known).await {
                    break;
                }
                docker::await_daemon(&this.docker, DAEMON_PATIENCE).await;
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            this.remove_all(id, Vec::new(), &volume).await;
        });
        lap("removal begun");
        if servo.warm().is_some() {
            self.forget_warm(container);
        }
        Collected {
            workspace: Workspace::Results(collected),
            oom,
            took,
        }
    }

    /// Brings the workspace of a stopped servo into `dest`: straight from the
    /// volume's directory when it is on this host, else through the archive
    /// API (asked again if the daemon restarts mid-stream). Says whether its
    /// container is gone already (a local copy removes it first, unless it
    /// is known to have `exited`).
    pub(super) async fn gather(
        &self,
        id: TaskId,
        container: &str,
        volume: &str,
        dest: &std::path::Path,
        exited: bool,
    ) -> (anyhow::Result<collect::Collected>, bool) {
        let d = &self.docker;
        let secrets = self.secrets.to_vec();
        let cap = self.cfg.file.max_results_size.0;
        let dest = dest.to_path_buf();
        // Local or archive is decided while the container still exists: the
        // archive API needs it. A local copy must not start while anything
        // runs in the container (nothing may swap an entry for a link
        // mid-walk): a container whose end was seen runs nothing (its
        // init's end took every process with it, and nothing starts it
        // again), so it is copied first and removed after, off the task's
        // path; any other (a wait that failed) is removed first. Its named
        // volume or image survives the removal.
        let local = match self.cfg.file.collection {
            crate::config::Collection::Auto => self.workspace_dir(volume).await,
            crate::config::Collection::Archive => None,
        };
        if let Some(src) = local {
            if exited {
                return (copy_local(id, src, dest, secrets, cap).await, false);
            }
            if self.remove_containers(id, Some(container)).await {
                return (copy_local(id, src, dest, secrets, cap).await, true);
            }
        }
        // A container that would not go away is read through the API.
        let started = Instant::now();
        let mut collected =
            collect_workspace(d, container, dest.clone(), secrets.clone(), cap).await;
        for _ in 0..3 {
            if collected.is_ok() || !docker::await_daemon(d, DAEMON_PATIENCE).await {
                break;
            }
            collected = collect_workspace(d, container, dest.clone(), secrets.clone(), cap).await;
        }
        (measured(CollectPath::Archive, started, collected), false)
    }
}

/// Records a collection's time and size (or failure) in the metrics.
fn measured(
    path: CollectPath,
    started: Instant,
    collected: anyhow::Result<collect::Collected>,
) -> anyhow::Result<collect::Collected> {
    let bytes = collected.as_ref().ok().map(|c| c.bytes);
    crate::metrics::live().collection(path, started.elapsed(), bytes);
    collected
}

/// Copies the task's volume from its directory on this host (its container
/// already removed), off the async threads.
pub(super) async fn copy_local(
    id: TaskId,
    src: PathBuf,
    dest: PathBuf,
    secrets: Vec<(String, String)>,
    max_bytes: u64,
) -> anyhow::Result<collect::Collected> {
    let started = Instant::now();
    let copied =
        tokio::task::spawn_blocking(move || collect::copy_volume(&src, &dest, &secrets, max_bytes))
            .await
            .with_context(|| format!("collector thread of task `{id}` panicked"))
            .and_then(|r| r);
    measured(CollectPath::Local, started, copied)
}

impl Local {
    /// Removes the task's containers (not its volume); whether none is left.
    /// The one the caller knows is removed by id, with no listing (a list is
    /// a walk over every container the daemon has, hundreds at scale); the
    /// label is listed only when no id is known. What a crash left beside it
    /// is the sweeper's.
    pub(super) async fn remove_containers(&self, id: TaskId, known: Option<&str>) -> bool {
        let d = &self.docker;
        let containers = match known {
            Some(c) => vec![c.to_string()],
            None => match docker::every_task_container(d, id).await {
                Ok(list) => list,
                Err(_) => return false,
            },
        };
        let mut all = true;
        for c in containers {
            if let Err(e) = docker::remove_container(d, &c).await {
                warn!(task_id = %id, error = %format!("{e:#}"), "container not removed before collection");
                all = false;
            }
        }
        all
    }

    /// Removes the task's containers and its volume `volume`.
    pub(super) async fn cleanup(&self, id: TaskId, known: Option<&str>, volume: &str) {
        let containers = match known {
            Some(c) => vec![c.to_string()],
            None => docker::every_task_container(&self.docker, id)
                .await
                .unwrap_or_default(),
        };
        self.remove_all(id, containers, volume).await;
    }

    /// Removes `containers` (ids or names; known ones are removed without
    /// listing, see `remove_containers`: the sweeper finds anything a crash
    /// left) and the volume `volume`.
    pub(super) async fn remove_all(&self, id: TaskId, containers: Vec<String>, volume: &str) {
        let d = &self.docker;
        for c in containers {
            if let Err(e) = docker::remove_container(d, &c).await {
                warn!(task_id = %id, error = %format!("{e:#}"), "container not removed");
            }
        }
        if let Err(e) = self.remove_home(volume).await {
            warn!(task_id = %id, error = %format!("{e:#}"), "workspace not removed");
        }
        if let Some(dir) = super::pool::socket_name(volume) {
            // A warm servo's socket directory, when its gateway left it.
            let _ = std::fs::remove_dir_all(self.cfg.run_dir().join(dir));
        }
    }

    /// A claimed warm servo went with its task: its pool forgets it.
    pub(super) fn forget_warm(&self, name: &str) {
        if let Some(pool) = &self.pool {
            pool.forget(name);
        }
    }

    /// A warm servo whose task parked: its workspace is copied into the
    /// task's own workspace (of the task's disk size), which the next,
    /// cold, launch goes on from; the warm servo goes.
    async fn park_warm(&self, servo: &Servo, disk: u64) -> Collected {
        let (id, name) = (servo.task, servo.id.as_str());
        let kept = async {
            anyhow::ensure!(
                self.remove_containers(id, Some(name)).await,
                "the parked warm servo's container was not removed"
            );
            let src = self
                .workspace_dir(name)
                .await
                .context("the warm servo's workspace is not readable on this host")?;
            let own = docker::volume_name(id);
            self.make_home(&own, disk, docker::task_labels(id)).await?;
            let dest = self
                .workspace_dir(&own)
                .await
                .context("the task's new workspace is not readable on this host")?;
            // Links copied as links, never followed; nothing runs in either.
            let copied = tokio::process::Command::new("cp")
                .arg("-a")
                .arg(src.join("."))
                .arg(&dest)
                .status()
                .await
                .context("running cp")?;
            anyhow::ensure!(copied.success(), "cp exited with {copied}");
            Ok(())
        }
        .await;
        self.cleanup(id, None, name).await;
        self.forget_warm(name);
        Collected {
            workspace: match kept {
                Ok(()) => Workspace::Kept,
                Err(e) => Workspace::Results(Err(e.context("keeping a parked warm workspace"))),
            },
            oom: false,
            took: std::time::Duration::ZERO,
        }
    }
}

/// Streams the container's /workspace into `dest` without holding it in
/// memory: an async pump gathers the HTTP chunks into 256 KiB pieces (so the
/// extracting thread is woken per piece, not per 8 KiB frame) and a blocking
/// thread unpacks them as they come.
pub(crate) async fn collect_workspace(
    d: &Docker,
    container: &str,
    dest: PathBuf,
    secrets: Vec<(String, String)>,
    max_bytes: u64,
) -> anyhow::Result<collect::Collected> {
    use futures_util::StreamExt;
    const PIECE: usize = 256 * 1024;
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(8);
    let mut stream = Box::pin(docker::download_workspace(d, container));
    let pump = async move {
        let mut piece = bytes::BytesMut::with_capacity(PIECE * 2);
        while let Some(item) = stream.next().await {
            match item {
                Ok(chunk) => {
                    piece.extend_from_slice(&chunk);
                    if piece.len() >= PIECE && tx.send(Ok(piece.split().freeze())).await.is_err() {
                        return; // the extractor stopped (size cap or error)
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            }
        }
        if !piece.is_empty() {
            let _ = tx.send(Ok(piece.freeze())).await;
        }
    };
    let extract = tokio::task::spawn_blocking(move || {
        collect::extract(collect::ChannelReader::new(rx), &dest, &secrets, max_bytes)
    });
    let ((), extracted) = tokio::join!(pump, extract);
    extracted.context("collector thread panicked")?
}
