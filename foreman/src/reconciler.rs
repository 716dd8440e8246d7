//! `saheeli serve`: the foreman's loop. SQLite holds the desired state,
//! Docker the actual one; this loop moves tasks from one to the other:
//! queue → launch → monitor → collect.
//!
//! One owner of task state: only this loop and the per-task supervisors it
//! spawns write transitions. Other `saheeli` processes talk to it through
//! the database (`task cancel` sets a flag it polls).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use bollard::Docker;
use saheeli_protocol::{ServoExit, TaskId};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::collect;
use crate::config::Config;
use crate::docker;
use crate::gateway::{Gateway, Upstream};
use crate::inputs;
use crate::state::TaskState;
use crate::store::{Outcome, Store, TaskRow, now_ms};

/// What a serve loop shares with its task supervisors.
pub(crate) struct Ctx {
    pub cfg: Config,
    pub docker: Docker,
    pub store: Arc<Mutex<Store>>,
    pub upstream: Arc<Upstream>,
}

impl Ctx {
    /// Runs a store operation off the async threads.
    pub async fn db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> Result<T, crate::store::StoreError> + Send + 'static,
    ) -> anyhow::Result<T> {
        let store = self.store.clone();
        let r = tokio::task::spawn_blocking(move || {
            let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut s)
        })
        .await
        .context("database thread panicked")??;
        Ok(r)
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ServeOptions {
    /// Return once nothing is queued or running.
    pub drain: bool,
    /// Run only this task and return when it ends (`saheeli run`).
    pub only: Option<TaskId>,
}

/// What a serve loop did.
#[derive(Debug, Default)]
pub(crate) struct ServeSummary {
    pub finished: Vec<(TaskId, TaskState)>,
}

impl ServeSummary {
    pub fn all_complete(&self) -> bool {
        self.finished.iter().all(|(_, s)| *s == TaskState::Complete)
    }
}

/// Why a running task is being stopped early.
#[derive(Clone)]
struct StopHandle {
    token: CancellationToken,
    reason: Arc<Mutex<&'static str>>,
}

impl StopHandle {
    fn new() -> Self {
        StopHandle {
            token: CancellationToken::new(),
            reason: Arc::new(Mutex::new("cancelled")),
        }
    }

    fn stop(&self, reason: &'static str) {
        if !self.token.is_cancelled() {
            *self.reason.lock().unwrap() = reason;
            self.token.cancel();
        }
    }

    fn reason(&self) -> &'static str {
        *self.reason.lock().unwrap()
    }
}

/// The serve loop. `drain` (first Ctrl-C) stops launching and waits for
/// running tasks; `stop` (second Ctrl-C) also stops their containers.
pub(crate) async fn run(
    ctx: Arc<Ctx>,
    opts: ServeOptions,
    drain: CancellationToken,
    stop: CancellationToken,
) -> anyhow::Result<ServeSummary> {
    let concurrency = ctx.cfg.file.concurrency;
    let mut running: JoinSet<(TaskId, TaskState)> = JoinSet::new();
    let mut handles: HashMap<TaskId, StopHandle> = HashMap::new();
    let mut summary = ServeSummary::default();

    if opts.only.is_none() {
        for task in adopt_orphans(&ctx).await? {
            let handle = StopHandle::new();
            handles.insert(task.0, handle.clone());
            let ctx = ctx.clone();
            running.spawn(async move { resume(ctx, task.0, task.1, handle).await });
        }
    }

    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        while !drain.is_cancelled() && running.len() < concurrency {
            let only = opts.only;
            let Some(task) = ctx.db(move |s| s.claim_next(only)).await? else {
                break;
            };
            info!(task_id = %task.id, title = %task.title, "task claimed");
            let handle = StopHandle::new();
            handles.insert(task.id, handle.clone());
            let ctx = ctx.clone();
            running.spawn(async move { supervise(ctx, task, handle).await });
        }

        if running.is_empty() {
            if drain.is_cancelled() {
                break;
            }
            if let Some(id) = opts.only {
                let t = ctx.db(move |s| s.require(&id.to_string())).await?;
                if t.state.is_terminal() {
                    break;
                }
            } else if opts.drain {
                let queued = ctx.db(|s| s.count_in(&[TaskState::Queued])).await?;
                if queued == 0 {
                    break;
                }
            }
        }

        tokio::select! {
            Some(joined) = running.join_next() => match joined {
                Ok((id, state)) => {
                    handles.remove(&id);
                    summary.finished.push((id, state));
                }
                Err(e) => error!(error = %e, "a task supervisor panicked"),
            },
            _ = tick.tick() => {
                if !handles.is_empty() {
                    for id in ctx.db(|s| s.cancel_requests()).await? {
                        if let Some(h) = handles.get(&id) {
                            info!(task_id = %id, "cancel requested");
                            h.stop("cancelled");
                        }
                    }
                }
            }
            _ = stop.cancelled(), if !handles.is_empty() && handles.values().any(|h| !h.token.is_cancelled()) => {
                warn!(running = handles.len(), "stopping running tasks");
                for h in handles.values() {
                    h.stop("interrupted");
                }
            }
            _ = drain.cancelled(), if !drain.is_cancelled() => {}
        }
    }
    Ok(summary)
}

/// Tasks a previous foreman left `starting` or `running`.
async fn adopt_orphans(ctx: &Arc<Ctx>) -> anyhow::Result<Vec<(TaskId, TaskRow)>> {
    let mut out = Vec::new();
    for state in [TaskState::Starting, TaskState::Running] {
        for t in ctx.db(move |s| s.in_state(state)).await? {
            out.push((t.id, t));
        }
    }
    Ok(out)
}

/// Picks up a task left behind by a foreman that stopped: a running
/// container is supervised again; anything else is cleaned up and the task
/// ends `incomplete` (reason `lost`) with whatever workspace remains.
async fn resume(
    ctx: Arc<Ctx>,
    id: TaskId,
    task: TaskRow,
    handle: StopHandle,
) -> (TaskId, TaskState) {
    let containers = docker::task_containers(&ctx.docker, Some(id))
        .await
        .unwrap_or_default();
    let Some(container) = containers.into_iter().next() else {
        info!(task_id = %id, "no container left for an interrupted task");
        let _ = docker::remove_volume(&ctx.docker, &docker::volume_name(id)).await;
        return finish(
            &ctx,
            id,
            TaskState::Incomplete,
            "lost",
            Outcome::default(),
            "container vanished while the foreman was down",
        )
        .await;
    };
    if task.state == TaskState::Starting {
        // It never started: launch again from scratch.
        let _ = docker::remove_container(&ctx.docker, &container).await;
        let _ = docker::remove_volume(&ctx.docker, &docker::volume_name(id)).await;
        return finish(
            &ctx,
            id,
            TaskState::Incomplete,
            "lost",
            Outcome::default(),
            "foreman stopped while starting the task",
        )
        .await;
    }
    info!(task_id = %id, container = %container, "adopting running servo");
    let gateway = if task.spec.is_replay() {
        None
    } else {
        Gateway::start(
            &ctx.cfg.run_dir(),
            id,
            ctx.upstream.clone(),
            &task.spec.model,
            task.spec.budget(),
        )
        .await
        .ok()
    };
    let started = task.started_at.unwrap_or_else(now_ms);
    monitor(ctx, task, container, gateway, started, handle).await
}

/// Runs one task from `starting` to a terminal state.
async fn supervise(ctx: Arc<Ctx>, task: TaskRow, handle: StopHandle) -> (TaskId, TaskState) {
    let id = task.id;
    let mut gateway = None;
    let launched = launch(&ctx, &task, &mut gateway).await;
    match launched {
        Ok(container) => {
            if handle.token.is_cancelled() {
                info!(task_id = %id, "cancelled while starting");
            }
            monitor(ctx, task, container, gateway, now_ms(), handle).await
        }
        Err(e) => {
            error!(task_id = %id, error = %format!("{e:#}"), "launch failed");
            if let Some(g) = gateway {
                g.stop().await;
            }
            cleanup(&ctx, id).await;
            let reason = format!("launch: {e:#}");
            finish(
                &ctx,
                id,
                TaskState::Failed,
                &reason,
                Outcome::default(),
                &reason,
            )
            .await
        }
    }
}

/// Creates the volume and container, uploads the inputs, starts the servo.
async fn launch(
    ctx: &Ctx,
    task: &TaskRow,
    gateway: &mut Option<Gateway>,
) -> anyhow::Result<String> {
    let id = task.id;
    let d = &ctx.docker;
    let image = ctx.cfg.file.image.clone();
    docker::require_image(d, &image).await?;
    if !task.spec.is_replay() {
        *gateway = Some(
            Gateway::start(
                &ctx.cfg.run_dir(),
                id,
                ctx.upstream.clone(),
                &task.spec.model,
                task.spec.budget(),
            )
            .await?,
        );
    }
    let volume = docker::create_volume(d, id).await?;
    let container = docker::create_container(
        d,
        id,
        &task.spec,
        &image,
        &volume,
        gateway.as_ref().map(|g| g.dir()),
    )
    .await?;
    let cid = container.clone();
    ctx.db(move |s| s.set_container(id, &cid)).await?;
    let input = inputs::workspace_tar(&ctx.cfg.state_dir(), id);
    if input.is_file() {
        docker::upload_file(d, &container, &input).await?;
    }
    let launch = inputs::launch_tar(&task.spec.body, &task.spec.servo_task(id))?;
    docker::upload(d, &container, launch.into()).await?;
    docker::start(d, &container).await?;
    let detail = format!("container {}", &container[..12.min(container.len())]);
    ctx.db(move |s| s.transition(id, TaskState::Running, Some(&detail), None))
        .await?;
    info!(task_id = %id, "servo running");
    Ok(container)
}

/// Waits for the servo (enforcing the timeout and cancel), collects the
/// workspace, decides the outcome and cleans up.
async fn monitor(
    ctx: Arc<Ctx>,
    task: TaskRow,
    container: String,
    gateway: Option<Gateway>,
    started_ms: i64,
    handle: StopHandle,
) -> (TaskId, TaskState) {
    let id = task.id;
    let d = ctx.docker.clone();
    let grace = ctx.cfg.file.stop_grace;
    let elapsed = Duration::from_millis((now_ms() - started_ms).max(0) as u64);
    let deadline = Duration::from_secs(task.spec.timeout_s).saturating_sub(elapsed);
    let mut timed_out = false;
    let mut stopped: Option<&'static str> = None;

    let wait = docker::wait(&d, &container);
    tokio::pin!(wait);
    let sleep = tokio::time::sleep(deadline);
    tokio::pin!(sleep);
    let mut usage_tick = tokio::time::interval(Duration::from_secs(1));
    let exit = loop {
        tokio::select! {
            r = &mut wait => break r,
            _ = &mut sleep, if !timed_out && stopped.is_none() => {
                warn!(task_id = %id, timeout_s = task.spec.timeout_s, "timeout: stopping servo");
                timed_out = true;
                let _ = docker::stop(&d, &container, grace).await;
            }
            _ = handle.token.cancelled(), if stopped.is_none() && !timed_out => {
                let reason = handle.reason();
                info!(task_id = %id, reason, "stopping servo");
                stopped = Some(reason);
                let _ = docker::stop(&d, &container, grace).await;
            }
            _ = usage_tick.tick(), if gateway.is_some() => {
                if let Some(m) = gateway.as_ref().map(|g| Metered::read(g.meter()))
                    && m.calls > 0
                {
                    let _ = ctx
                        .db(move |s| s.set_usage(id, m.calls, m.input, m.output, m.cost))
                        .await;
                }
            }
        }
    };
    let oom = docker::oom_killed(&d, &container).await;
    let metered = gateway.as_ref().map(|g| Metered::read(g.meter()));

    let dest = ctx.cfg.results_dir().join(id.to_string());
    let secrets = ctx.upstream.providers.secrets();
    let collected = collect_workspace(&d, &container, dest.clone(), secrets).await;
    cleanup(&ctx, id).await;
    // Only now: Docker needs the bind-mounted socket directory to exist
    // for as long as the container does (copying out included).
    if let Some(g) = gateway {
        g.stop().await;
    }

    let mut outcome = Outcome {
        results_path: Some(dest.display().to_string()),
        ..Default::default()
    };
    let (steps, usage) = collect::audit_totals(&dest, id);
    outcome.steps = steps.into();
    outcome.input_tokens = usage.input_tokens as i64;
    outcome.output_tokens = usage.output_tokens as i64;

    let collected = match collected {
        Ok(c) => c,
        Err(e) => {
            let reason = format!("collect: {e:#}");
            error!(task_id = %id, error = %reason, "collection failed");
            outcome.results_path = None;
            return finish(&ctx, id, TaskState::Failed, &reason, outcome, &reason).await;
        }
    };
    if !collected.skipped.is_empty() {
        warn!(task_id = %id, skipped = collected.skipped.len(), first = %collected.skipped[0], "unsafe entries not collected");
    }
    let exit_desc = match &exit {
        Ok(code) => format!("exit {code}"),
        Err(e) => format!("wait failed: {e:#}"),
    };
    let mut detail = format!(
        "{exit_desc}; collected {} files, {} bytes into {}",
        collected.files,
        collected.bytes,
        dest.display()
    );
    if !collected.redacted.is_empty() {
        warn!(task_id = %id, redacted = %collected.redacted.join(", "), "API key found in the workspace; redacted");
        detail.push_str(&format!("; redacted {}", collected.redacted.join(", ")));
    }

    let completion = collect::read_completion(&dest, id);
    if let Ok(Some(c)) = &completion {
        outcome.steps = c.steps.into();
        outcome.input_tokens = c.usage.input_tokens as i64;
        outcome.output_tokens = c.usage.output_tokens as i64;
    }
    // What the gateway counted beats what the servo says it used.
    if let Some(m) = &metered {
        outcome.input_tokens = m.input;
        outcome.output_tokens = m.output;
        outcome.cost_usd = m.cost;
    }

    if let Some(reason) = stopped {
        return finish(&ctx, id, TaskState::Cancelled, reason, outcome, &detail).await;
    }
    match completion {
        Ok(Some(_)) => finish(&ctx, id, TaskState::Complete, "complete", outcome, &detail).await,
        Ok(None) => {
            let reason = if timed_out {
                "timeout".to_string()
            } else if oom {
                "oom".to_string()
            } else {
                match exit {
                    Ok(code) => match ServoExit::from_code(code) {
                        Some(ServoExit::Complete) => "no_completion".to_string(),
                        // The gateway knows why the LLM failed for good.
                        Some(ServoExit::LlmError) => metered
                            .and_then(|m| m.fatal)
                            .unwrap_or("llm_error")
                            .to_string(),
                        Some(e) => e.reason().to_string(),
                        None => format!("exit {code}"),
                    },
                    Err(_) => "lost".to_string(),
                }
            };
            finish(&ctx, id, TaskState::Incomplete, &reason, outcome, &detail).await
        }
        Err(why) => {
            let reason = format!("invalid_completion: {why}");
            finish(&ctx, id, TaskState::Incomplete, &reason, outcome, &detail).await
        }
    }
}

/// A snapshot of a gateway's meter.
#[derive(Clone, Copy, Debug)]
struct Metered {
    calls: i64,
    input: i64,
    output: i64,
    cost: f64,
    fatal: Option<&'static str>,
}

impl Metered {
    fn read(m: &crate::gateway::Meter) -> Metered {
        use std::sync::atomic::Ordering::Relaxed;
        Metered {
            calls: m.calls.load(Relaxed) as i64,
            input: m.input_tokens.load(Relaxed) as i64,
            output: m.output_tokens.load(Relaxed) as i64,
            cost: m.cost(),
            fatal: m.fatal(),
        }
    }
}

/// Streams the container's /workspace into `dest` without buffering it.
async fn collect_workspace(
    d: &Docker,
    container: &str,
    dest: PathBuf,
    secrets: Vec<(String, String)>,
) -> anyhow::Result<collect::Collected> {
    let stream = docker::download_workspace(d, container);
    let reader = tokio_util::io::StreamReader::new(stream);
    let sync = tokio_util::io::SyncIoBridge::new(reader);
    tokio::task::spawn_blocking(move || collect::extract(sync, &dest, &secrets))
        .await
        .context("collector thread panicked")?
}

/// Removes the task's containers and volume (found by label).
async fn cleanup(ctx: &Ctx, id: TaskId) {
    let d = &ctx.docker;
    for c in docker::task_containers(d, Some(id))
        .await
        .unwrap_or_default()
    {
        if let Err(e) = docker::remove_container(d, &c).await {
            warn!(task_id = %id, error = %format!("{e:#}"), "container not removed");
        }
    }
    for v in docker::task_volumes(d, Some(id)).await.unwrap_or_default() {
        if let Err(e) = docker::remove_volume(d, &v).await {
            warn!(task_id = %id, error = %format!("{e:#}"), "volume not removed");
        }
    }
}

/// Records the terminal state; returns what the loop reports.
async fn finish(
    ctx: &Ctx,
    id: TaskId,
    to: TaskState,
    reason: &str,
    mut outcome: Outcome,
    detail: &str,
) -> (TaskId, TaskState) {
    outcome.reason = Some(reason.to_string());
    let detail = detail.to_string();
    match ctx
        .db(move |s| s.transition(id, to, Some(&detail), Some(&outcome)))
        .await
    {
        Ok(()) => info!(task_id = %id, state = %to, reason, "task finished"),
        Err(e) => error!(task_id = %id, error = %format!("{e:#}"), "recording the outcome failed"),
    }
    (id, to)
}
