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
    /// This foreman's lease on the tasks it runs.
    pub lease: crate::store::Lease,
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

/// How often the idle loop looks for new work (a cheap `PRAGMA data_version`).
const POLL: Duration = Duration::from_millis(20);
/// How often labelled leftovers of ended tasks are swept.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// What a supervisor reports: the terminal state, or None when it handed
/// the task back (put it back in the queue) without finishing it.
type Joined = (TaskId, Option<TaskState>);

/// The serve loop. `drain` (first Ctrl-C) stops launching and waits for
/// running tasks; `stop` (second Ctrl-C) also stops their containers.
pub(crate) async fn run(
    ctx: Arc<Ctx>,
    opts: ServeOptions,
    drain: CancellationToken,
    stop: CancellationToken,
) -> anyhow::Result<ServeSummary> {
    let concurrency = ctx.cfg.file.concurrency;
    let mut running: JoinSet<Joined> = JoinSet::new();
    let mut handles: HashMap<TaskId, StopHandle> = HashMap::new();
    let mut summary = ServeSummary::default();

    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_renew: Option<tokio::time::Instant> = None;
    let mut last_sweep: Option<tokio::time::Instant> = None;
    let mut seen_version = None;
    let mut look_for_work = true;
    // `saheeli run` follows its task through retries.
    let mut only = opts.only;
    loop {
        // Leases: renew ours; adopt tasks whose foreman died.
        if last_renew.is_none_or(|t| t.elapsed() >= ctx.cfg.file.lease / 5) {
            last_renew = Some(tokio::time::Instant::now());
            // Requeued tasks become claimable later without any write.
            look_for_work = true;
            let lease = ctx.lease.clone();
            ctx.db(move |s| s.renew(&lease)).await?;
            if only.is_none() && !drain.is_cancelled() {
                let lease = ctx.lease.clone();
                for task in ctx.db(move |s| s.take_over_expired(&lease)).await? {
                    info!(task_id = %task.id, state = %task.state, "taking over a task whose foreman stopped");
                    let handle = StopHandle::new();
                    handles.insert(task.id, handle.clone());
                    let ctx = ctx.clone();
                    running.spawn(async move { resume(ctx, task, handle).await });
                }
            }
        }
        if only.is_none() && last_sweep.is_none_or(|t| t.elapsed() >= SWEEP_EVERY) {
            last_sweep = Some(tokio::time::Instant::now());
            sweep(&ctx, &handles).await;
        }

        while look_for_work && !drain.is_cancelled() && running.len() < concurrency {
            let lease = ctx.lease.clone();
            let Some(task) = ctx.db(move |s| s.claim_next(only, &lease)).await? else {
                look_for_work = false;
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
            if let Some(id) = only {
                let t = ctx.db(move |s| s.require(&id.to_string())).await?;
                if t.state.is_terminal() {
                    match ctx.db(move |s| s.retried_as(id)).await? {
                        Some(next) => {
                            only = Some(next.id);
                            look_for_work = true;
                            continue;
                        }
                        None => break,
                    }
                }
            } else if opts.drain {
                // Tasks another foreman holds count too: if it died, they
                // are ours once its lease expires.
                let left = ctx
                    .db(|s| {
                        s.count_in(&[TaskState::Queued, TaskState::Starting, TaskState::Running])
                    })
                    .await?;
                if left == 0 {
                    break;
                }
            }
        }

        tokio::select! {
            Some(joined) = running.join_next() => {
                look_for_work = true;
                match joined {
                    Ok((id, state)) => {
                        handles.remove(&id);
                        if let Some(state) = state {
                            summary.finished.push((id, state));
                        }
                    }
                    Err(e) => error!(error = %e, "a task supervisor panicked"),
                }
            }
            _ = tick.tick() => {
                // Another process wrote (a submit, a cancel): look again.
                let version = ctx.db(|s| s.data_version()).await?;
                if seen_version != Some(version) {
                    seen_version = Some(version);
                    look_for_work = true;
                    if !handles.is_empty() {
                        for id in ctx.db(|s| s.cancel_requests()).await? {
                            if let Some(h) = handles.get(&id) {
                                info!(task_id = %id, "cancel requested");
                                h.stop("cancelled");
                            }
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

/// Removes containers and volumes of tasks that have ended (left behind
/// when a foreman died mid-cleanup). Tasks this loop is running are skipped.
async fn sweep(ctx: &Arc<Ctx>, active: &HashMap<TaskId, StopHandle>) {
    let Ok((containers, volumes)) = docker::labelled(&ctx.docker).await else {
        return;
    };
    let mut ended = HashMap::new();
    for task in containers
        .iter()
        .chain(volumes.iter())
        .map(|(_, t)| t.clone())
    {
        if ended.contains_key(&task) {
            continue;
        }
        let lookup = task.clone();
        let is_ended = ctx
            .db(move |s| s.get(&lookup))
            .await
            .ok()
            .flatten()
            .is_some_and(|t| t.state.is_terminal() && !active.contains_key(&t.id));
        ended.insert(task, is_ended);
    }
    for (cid, task) in &containers {
        if ended[task] {
            info!(task_id = %task, container = %cid, "removing a leftover container");
            let _ = docker::remove_container(&ctx.docker, cid).await;
        }
    }
    for (name, task) in &volumes {
        if ended[task] {
            info!(task_id = %task, volume = %name, "removing a leftover volume");
            let _ = docker::remove_volume(&ctx.docker, name).await;
        }
    }
}

/// Picks up a task whose foreman stopped. A servo that started is
/// supervised again (timeout still counted from its original start); one
/// that never started is put back in the queue; a servo that vanished ends
/// the task from whatever results were collected, else it is requeued
/// (up to 3 times) as an infrastructure failure.
async fn resume(ctx: Arc<Ctx>, task: TaskRow, handle: StopHandle) -> Joined {
    let id = task.id;
    let d = &ctx.docker;
    let containers = match docker::task_containers(d, id).await {
        Ok(c) => c,
        Err(e) => {
            // Docker is not answering: leave the task for the next round.
            warn!(task_id = %id, error = %format!("{e:#}"), "cannot inspect the task's container yet");
            let _ = ctx.db(move |s| s.release(id)).await;
            return (id, None);
        }
    };
    let started = match containers.first() {
        Some(cid) => docker::has_started(d, cid).await,
        None => false,
    };
    if let (Some(cid), true) = (containers.first(), started) {
        info!(task_id = %id, container = %cid, "adopting servo");
        if task.state == TaskState::Starting {
            let detail = format!("container {} (adopted)", &cid[..12.min(cid.len())]);
            if let Err(e) = ctx
                .db(move |s| s.transition(id, TaskState::Running, Some(&detail), None))
                .await
            {
                error!(task_id = %id, error = %format!("{e:#}"), "adopting failed");
            }
        }
        let gateway = if task.spec.is_replay() {
            None
        } else {
            // Budgets go on from what was already spent (the call ledger).
            match Gateway::adopt(
                &ctx.cfg.run_dir(),
                id,
                ctx.upstream.clone(),
                &task.spec.model,
                task.spec.budget(),
                (
                    task.input_tokens as u64,
                    task.output_tokens as u64,
                    task.cost_usd,
                ),
            )
            .await
            {
                Ok(g) => Some(g),
                Err(e) => {
                    warn!(task_id = %id, error = %format!("{e:#}"), "gateway not restarted");
                    None
                }
            }
        };
        let started = task.started_at.unwrap_or_else(now_ms);
        return monitor(ctx.clone(), task, cid.clone(), gateway, started, handle).await;
    }
    // No servo ran (or none is left): clean up what is there.
    for cid in &containers {
        let _ = docker::remove_container(d, cid).await;
    }
    for v in docker::task_volumes(d, id).await.unwrap_or_default() {
        let _ = docker::remove_volume(d, &v).await;
    }
    let dest = ctx.cfg.results_dir().join(id.to_string());
    if task.state == TaskState::Running && dest.is_dir() {
        // Collected, but the foreman stopped before recording it.
        let outcome = Outcome {
            results_path: Some(dest.display().to_string()),
            ..Default::default()
        };
        return match collect::read_completion(&dest, id) {
            Ok(Some(c)) => {
                let outcome = Outcome {
                    steps: c.steps.into(),
                    input_tokens: c.usage.input_tokens as i64,
                    output_tokens: c.usage.output_tokens as i64,
                    ..outcome
                };
                finish(
                    &ctx,
                    id,
                    TaskState::Complete,
                    "complete",
                    outcome,
                    "recorded after a foreman restart",
                )
                .await
            }
            _ => {
                finish(
                    &ctx,
                    id,
                    TaskState::Incomplete,
                    "lost",
                    outcome,
                    "servo ended while the foreman was down",
                )
                .await
            }
        };
    }
    let (detail, retry) = match task.state {
        TaskState::Starting => (
            "the foreman stopped before the servo started; queued again",
            true,
        ),
        _ => (
            "the servo's container vanished; queued again",
            task.requeues < MAX_REQUEUES,
        ),
    };
    if retry {
        info!(task_id = %id, "{detail}");
        match ctx.db(move |s| s.requeue(id, detail, Duration::ZERO)).await {
            Ok(()) => return (id, None),
            Err(e) => error!(task_id = %id, error = %format!("{e:#}"), "requeue failed"),
        }
    }
    finish(
        &ctx,
        id,
        TaskState::Incomplete,
        "lost",
        Outcome::default(),
        "the servo's container vanished",
    )
    .await
}

/// How long a supervisor waits for a restarting Docker daemon.
const DAEMON_PATIENCE: Duration = Duration::from_secs(60);

/// Infrastructure retries of a task whose container vanished.
const MAX_REQUEUES: i64 = 3;

/// Runs one task from `starting` to a terminal state.
async fn supervise(ctx: Arc<Ctx>, task: TaskRow, handle: StopHandle) -> Joined {
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
            // Docker errors are worth another try, later; a missing image is not.
            let image_missing = format!("{e:#}").contains("saheeli build-servo");
            if !image_missing && task.requeues < MAX_REQUEUES && !handle.token.is_cancelled() {
                let delay = Duration::from_secs(1 << task.requeues.clamp(0, 5));
                let detail = format!(
                    "launch failed ({e:#}); queued again in {}s",
                    delay.as_secs()
                );
                match ctx.db(move |s| s.requeue(id, &detail, delay)).await {
                    Ok(()) => return (id, None),
                    Err(e) => error!(task_id = %id, error = %format!("{e:#}"), "requeue failed"),
                }
            }
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
    let t0 = std::time::Instant::now();
    let lap = |what: &str| tracing::debug!(task_id = %id, ms = t0.elapsed().as_secs_f64() * 1000.0, "launch: {what}");
    docker::require_image(d, &image).await?;
    lap("image checked");
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
    lap("volume created");
    // Small launches travel in the environment: no upload before start.
    let mut servo_task = task.spec.servo_task(id);
    servo_task.request_timeout_s = Some(ctx.upstream.servo_request_timeout().as_secs());
    let launch = saheeli_protocol::Launch {
        task: servo_task,
        prompt: task.spec.body.clone(),
    };
    let launch_json = serde_json::to_string(&launch)?;
    let in_env = launch_json.len() <= saheeli_protocol::Launch::MAX_ENV_BYTES;
    let container = docker::create_container(
        d,
        id,
        &task.spec,
        &image,
        &volume,
        gateway.as_ref().map(|g| g.dir()),
        in_env.then_some(launch_json),
    )
    .await?;
    lap("container created");
    let cid = container.clone();
    ctx.db(move |s| s.set_container(id, &cid)).await?;
    let input = inputs::workspace_tar(&ctx.cfg.state_dir(), id);
    if input.is_file() {
        docker::upload_file(d, &container, &input).await?;
    }
    if !in_env {
        let tar = inputs::launch_tar(&launch.prompt, &launch.task)?;
        docker::upload(d, &container, tar.into()).await?;
    }
    lap("uploaded");
    docker::start(d, &container).await?;
    lap("started");
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
) -> Joined {
    let id = task.id;
    let d = ctx.docker.clone();
    let grace = ctx.cfg.file.stop_grace;
    let elapsed = Duration::from_millis((now_ms() - started_ms).max(0) as u64);
    let deadline = Duration::from_secs(task.spec.timeout_s).saturating_sub(elapsed);
    let mut timed_out = false;
    let mut stopped: Option<&'static str> = None;

    let mut wait = Box::pin(docker::wait(&d, &container));
    let mut reconnects = 0;
    let sleep = tokio::time::sleep(deadline);
    tokio::pin!(sleep);
    let mut usage_tick = tokio::time::interval(Duration::from_secs(1));
    let exit = loop {
        tokio::select! {
            r = &mut wait => match r {
                // The daemon went away (a restart?): wait for it, then ask again.
                Err(e) if reconnects < 5 => {
                    reconnects += 1;
                    warn!(task_id = %id, error = %format!("{e:#}"), "lost Docker while waiting; reconnecting");
                    docker::await_daemon(&d, DAEMON_PATIENCE).await;
                    wait = Box::pin(docker::wait(&d, &container));
                }
                r => break r,
            },
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
    let cap = ctx.cfg.file.max_results_size.0;
    let collect_started = std::time::Instant::now();
    let mut collected = match ctx.cfg.file.collection {
        crate::config::Collection::Auto => {
            copy_local(&d, id, dest.clone(), secrets.clone(), cap).await
        }
        crate::config::Collection::Archive => None,
    };
    if collected.is_none() {
        collected =
            Some(collect_workspace(&d, &container, dest.clone(), secrets.clone(), cap).await);
    }
    let mut collected = collected.expect("set above");
    for _ in 0..3 {
        if collected.is_ok() || !docker::await_daemon(&d, DAEMON_PATIENCE).await {
            break;
        }
        collected = collect_workspace(&d, &container, dest.clone(), secrets.clone(), cap).await;
    }
    let collect_ms = collect_started.elapsed().as_millis();
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
        "{exit_desc}; collected {} files, {} bytes in {collect_ms} ms into {}",
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
    if collected.truncated {
        warn!(task_id = %id, cap, "results over the size cap; collection stopped");
        return finish(
            &ctx,
            id,
            TaskState::Incomplete,
            "results_too_large",
            outcome,
            &detail,
        )
        .await;
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

/// Copies the task's volume from its directory on this host, when there is
/// one we can read; None means "use the archive API" (also after an error,
/// which is logged).
async fn copy_local(
    d: &Docker,
    id: TaskId,
    dest: PathBuf,
    secrets: Vec<(String, String)>,
    max_bytes: u64,
) -> Option<anyhow::Result<collect::Collected>> {
    let src = docker::local_volume_dir(d, id).await?;
    let copied =
        tokio::task::spawn_blocking(move || collect::copy_volume(&src, &dest, &secrets, max_bytes))
            .await
            .ok()?;
    match copied {
        Ok(c) => Some(Ok(c)),
        Err(e) => {
            warn!(task_id = %id, error = %format!("{e:#}"), "local copy failed; using the archive API");
            None
        }
    }
}

/// Streams the container's /workspace into `dest` without holding it in
/// memory: an async pump gathers the HTTP chunks into 256 KiB pieces (so the
/// extracting thread is woken per piece, not per 8 KiB frame) and a blocking
/// thread unpacks them as they come.
async fn collect_workspace(
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

/// Removes the task's containers and volume (found by label).
async fn cleanup(ctx: &Ctx, id: TaskId) {
    let d = &ctx.docker;
    for c in docker::task_containers(d, id).await.unwrap_or_default() {
        if let Err(e) = docker::remove_container(d, &c).await {
            warn!(task_id = %id, error = %format!("{e:#}"), "container not removed");
        }
    }
    for v in docker::task_volumes(d, id).await.unwrap_or_default() {
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
) -> Joined {
    outcome.reason = Some(reason.to_string());
    let mut detail = detail.to_string();
    // The retry policy: another attempt, as a new task linked to this one.
    let mut retry = None;
    if to == TaskState::Incomplete
        && let Ok(task) = ctx.db(move |s| s.require(&id.to_string())).await
    {
        let kind = reason.split([' ', ':']).next().unwrap_or(reason);
        let allowed = task.spec.retry_on.iter().any(|r| r == kind);
        if allowed && task.attempt <= i64::from(task.spec.retries) {
            let next = TaskId::new();
            match inputs::copy_workspace(&ctx.cfg.state_dir(), id, next) {
                Ok(()) => {
                    detail.push_str(&format!(
                        "; retried as {next} (attempt {} of {})",
                        task.attempt + 1,
                        task.spec.retries + 1
                    ));
                    retry = Some((next, task));
                }
                Err(e) => warn!(task_id = %id, error = %format!("{e:#}"), "not retried"),
            }
        }
    }
    match ctx
        .db(move |s| s.transition(id, to, Some(&detail), Some(&outcome)))
        .await
    {
        Ok(()) => info!(task_id = %id, state = %to, reason, "task finished"),
        Err(e) => error!(task_id = %id, error = %format!("{e:#}"), "recording the outcome failed"),
    }
    if let Some((next, task)) = retry {
        let attempt = task.attempt + 1;
        match ctx
            .db(move |s| s.submit(next, &task.spec, task.priority, Some(id), attempt))
            .await
        {
            Ok(()) => {
                info!(task_id = %id, retry = %next, attempt, "agent outcome retried by policy");
                // Superseded: the retry reports for both.
                return (id, None);
            }
            Err(e) => {
                error!(task_id = %id, error = %format!("{e:#}"), "submitting the retry failed")
            }
        }
    }
    (id, Some(to))
}
