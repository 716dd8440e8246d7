//! A task on Docker Swarm: the same shape as the local supervisor
//! (launch, watch, collect, conclude), with a job service instead of a
//! container, Swarm's task states instead of `wait`, and the servo's own
//! upload through the gateway instead of a copy from its volume.
//!
//! A task Swarm loses (its node Down, rejected, orphaned) is requeued with
//! backoff, never counted as an attempt; a servo that ends without
//! uploading its workspace ends `incomplete`, saying so.

use std::sync::Arc;
use std::time::Duration;

use saheeli_protocol::{Reason, TaskId};
use tracing::{error, info, warn};

use crate::backend::Backend;
use crate::backend::swarm::{self, Phase};
use crate::gateway::{Gateway, RemoteTask};
use crate::state::TaskState;
use crate::store::{Outcome, TaskRow, now_ms};

use super::*;

/// How often Swarm is asked how a task is doing.
const OBSERVE_EVERY: Duration = Duration::from_millis(200);

/// The swarm's handles, from the context.
pub(super) struct Swarm<'a> {
    pub manager: &'a bollard::Docker,
    pub manager_addr: &'a str,
    network: &'a str,
    gateway_url: &'a str,
    pub hub: &'a crate::gateway::Hub,
    pub key: &'a [u8],
}

/// Whether this foreman runs its tasks on a swarm.
pub(super) fn handles_swarm(ctx: &Ctx) -> bool {
    handles(ctx).is_some()
}

pub(super) fn handles(ctx: &Ctx) -> Option<Swarm<'_>> {
    match &ctx.backend {
        Backend::Swarm {
            manager,
            manager_addr,
            network,
            gateway_url,
            hub,
            key,
            ..
        } => Some(Swarm {
            manager,
            manager_addr,
            network,
            gateway_url,
            hub,
            key,
        }),
        Backend::Docker => None,
    }
}

/// Runs one task from `starting` to a terminal state on the swarm.
pub(super) async fn supervise_swarm(ctx: Arc<Ctx>, task: TaskRow, inbox: Inbox) -> Joined {
    let id = task.id;
    let sw = handles(&ctx).expect("the swarm supervisor runs only with `backend: swarm`");
    let kept = crate::inputs::parked_dir(&ctx.cfg.state_dir(), id);
    if task.parked && !kept.is_dir() {
        // Starting over from the submitted workspace would silently lose
        // the work and the session the task parked with.
        let detail = format!(
            "the workspace this task parked with (`{}`) is gone, so it cannot go on from its session; submit the task again",
            kept.display()
        );
        return finish(
            &ctx,
            id,
            TaskState::Failed,
            Reason::Launch,
            Outcome::default(),
            &detail,
        )
        .await;
    }
    let suffix = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let token = swarm::token(sw.key, id, &suffix);
    let gateway = match remote_gateway(&ctx, &task, &token, &suffix, &inbox).await {
        Ok(g) => g,
        Err(e) => return launch_failed(&ctx, &task, None, e, inbox).await,
    };
    let plan = swarm::ServicePlan {
        id,
        spec: &task.spec,
        image: &ctx.cfg.file.image,
        network: sw.network,
        gateway_url: sw.gateway_url.to_string(),
        token: &token,
        suffix: &suffix,
        stop_grace: ctx.cfg.file.stop_grace,
    };
    let launched = async {
        let lease = ctx.lease.clone();
        ctx.db(move |s| s.hold(id, &lease)).await?;
        let l = swarm::create_service(sw.manager, &plan).await?;
        let service = l.service_id.clone();
        let lease = ctx.lease.clone();
        ctx.db(move |s| s.set_container(id, &lease, &service))
            .await?;
        anyhow::Ok(l)
    }
    .await;
    match launched {
        Ok(l) => {
            info!(task_id = %id, service = %l.service_id, "job service created");
            let started = now_ms() - task.active_ms;
            watch_and_end(ctx.clone(), task, l.objects, gateway, started, inbox).await
        }
        Err(e) => launch_failed(&ctx, &task, Some(gateway), e, inbox).await,
    }
}

/// The task's gateway on the shared TCP listener.
async fn remote_gateway(
    ctx: &Ctx,
    task: &TaskRow,
    token: &str,
    suffix: &str,
    inbox: &Inbox,
) -> anyhow::Result<Gateway> {
    let sw = handles(ctx).expect("swarm");
    let id = task.id;
    let remote = remote_task(ctx, task, token)?;
    let engine = ctx.task_engine(id, Some(suffix));
    let desk = ctx.desk_link(id, &task.spec, inbox.waiting(), engine);
    Ok(Gateway::start_remote(
        sw.hub,
        id,
        ctx.upstream.clone(),
        &task.spec.model,
        task.spec.budget(),
        desk,
        remote,
    )
    .await)
}

/// What the remote servo of `task` fetches, and where its upload goes.
pub(super) fn remote_task(ctx: &Ctx, task: &TaskRow, token: &str) -> anyhow::Result<RemoteTask> {
    let id = task.id;
    let mut servo_task = task.spec.servo_task(id);
    servo_task.request_timeout_s = Some(ctx.upstream.servo_request_timeout().as_secs());
    let launch = serde_json::to_string(&saheeli_protocol::Launch {
        task: servo_task,
        prompt: task.spec.body.clone(),
    })?;
    let input = crate::inputs::workspace_tar(&ctx.cfg.state_dir(), id);
    // A parked task goes on from the workspace it parked with.
    let kept = crate::inputs::parked_dir(&ctx.cfg.state_dir(), id);
    let remote = RemoteTask {
        token: token.to_string(),
        launch,
        input: input.is_file().then_some(input),
        resume_from: kept.is_dir().then(|| kept.clone()),
        dest: ctx.cfg.results_dir().join(id.to_string()),
        parked_dest: kept,
        secrets: ctx.upstream.providers.secrets(),
        max_bytes: ctx.cfg.file.max_results_size.0,
    };
    Ok(remote)
}

/// Removes what the launch made; requeues (infrastructure) or fails.
async fn launch_failed(
    ctx: &Ctx,
    task: &TaskRow,
    gateway: Option<Gateway>,
    e: anyhow::Error,
    mut inbox: Inbox,
) -> Joined {
    let id = task.id;
    if let Some(g) = gateway {
        g.stop().await;
    }
    remove_all(ctx, id).await;
    if lease_lost(&e) {
        return (id, None);
    }
    error!(task_id = %id, error = %format!("{e:#}"), "swarm launch failed");
    let detail = format!("launch on the swarm failed ({e:#})");
    requeue_or_fail(
        ctx,
        task,
        &detail,
        Reason::Launch,
        inbox.stop_requested().is_some(),
    )
    .await
}

/// Infrastructure failures go back to the queue with backoff (not an
/// attempt), up to the limit; after that the task fails with `reason`.
pub(super) async fn requeue_or_fail(
    ctx: &Ctx,
    task: &TaskRow,
    detail: &str,
    reason: Reason,
    stopping: bool,
) -> Joined {
    let id = task.id;
    if task.requeues < MAX_REQUEUES && !stopping {
        let delay = Duration::from_secs(1 << task.requeues.clamp(0, 5));
        let detail = format!("{detail}; queued again in {}s", delay.as_secs());
        warn!(task_id = %id, %detail, "requeued");
        let lease = ctx.lease.clone();
        match ctx.db(move |s| s.requeue(id, &lease, &detail, delay)).await {
            Ok(()) => return (id, None),
            Err(e) if lease_lost(&e) => return (id, None),
            Err(e) => error!(task_id = %id, error = %format!("{e:#}"), "requeue failed"),
        }
    }
    let state = if stopping {
        TaskState::Cancelled
    } else {
        TaskState::Failed
    };
    finish(ctx, id, state, reason, Outcome::default(), detail).await
}

/// Removes the task's service, secret, containers and volumes.
pub(super) async fn remove_all(ctx: &Ctx, id: TaskId) {
    let Some(sw) = handles(ctx) else { return };
    match swarm::remove_task(sw.manager, sw.manager_addr, Some(id), &|_| false).await {
        Ok(0) => {}
        Ok(n) => warn!(task_id = %id, left = n, "swarm leftovers kept for the sweeper"),
        Err(e) => warn!(task_id = %id, error = %format!("{e:#}"), "swarm cleanup failed"),
    }
}

/// Removes an ended launch in the background (`serve` waits for it
/// before it exits; what fails is left to the sweeper).
pub(super) fn clean_up_later(ctx: &Ctx, launch: swarm::LaunchObjects, node: Option<String>) {
    let Backend::Swarm {
        manager,
        manager_addr,
        cleanups,
        ..
    } = &ctx.backend
    else {
        return;
    };
    let (manager, addr) = (manager.clone(), manager_addr.clone());
    cleanups.spawn(async move {
        let failed = swarm::remove_launch(&manager, &addr, &launch, node.as_deref()).await;
        if failed > 0 {
            warn!(task_id = %launch.task, left = failed, "swarm leftovers kept for the sweeper");
        }
    });
}

/// Waits (up to `patience`) for the removals of ended launches.
pub(super) async fn cleanups_done(ctx: &Ctx, patience: Duration) {
    if let Backend::Swarm { cleanups, .. } = &ctx.backend {
        cleanups.close();
        if tokio::time::timeout(patience, cleanups.wait())
            .await
            .is_err()
        {
            warn!(
                left = cleanups.len(),
                "swarm cleanups still running; the sweeper finishes them"
            );
        }
    }
}

/// How watching a job service ended.
enum Seen {
    Exited(i64),
    Lost(String),
    /// Another foreman holds the task now.
    Gone,
}

/// Watches the service until its task ends, then collects and concludes.
pub(super) async fn watch_and_end(
    ctx: Arc<Ctx>,
    task: TaskRow,
    launch: swarm::LaunchObjects,
    gateway: Gateway,
    started_ms: i64,
    mut inbox: Inbox,
) -> Joined {
    let id = task.id;
    let sw = handles(&ctx).expect("swarm");
    let service = launch.service.clone();
    let grace = ctx.cfg.file.stop_grace;
    let mut deadline = tokio::time::Instant::now()
        + Duration::from_secs(task.spec.timeout_s)
            .saturating_sub(Duration::from_millis((now_ms() - started_ms).max(0) as u64));
    // Time spent waiting for a human does not count against the timeout.
    let waiting = inbox.waiting();
    let mut waited = Duration::ZERO;
    let mut last_tick = tokio::time::Instant::now();
    let mut timed_out = false;
    let mut stopped: Option<Reason> = None;
    let mut running = task.state == TaskState::Running;
    let mut node = None;
    let mut container = None;
    let lost = inbox.lost();
    let mut tick = tokio::time::interval(OBSERVE_EVERY);
    let seen = loop {
        tokio::select! {
            _ = lost.cancelled() => break Seen::Gone,
            command = inbox.recv(), if stopped.is_none() && !timed_out => {
                let Command::Stop(reason) = command;
                info!(task_id = %id, %reason, "stopping servo");
                stopped = Some(reason);
                stop(&ctx, node.as_deref(), container.as_deref(), &service, grace).await;
            }
            _ = tokio::time::sleep_until(deadline), if !timed_out && stopped.is_none() => {
                warn!(task_id = %id, timeout_s = task.spec.timeout_s, "timeout: stopping servo");
                timed_out = true;
                stop(&ctx, node.as_deref(), container.as_deref(), &service, grace).await;
            }
            _ = tick.tick() => {
                let now = tokio::time::Instant::now();
                if waiting.load(std::sync::atomic::Ordering::Relaxed) && !timed_out {
                    waited += now - last_tick;
                    deadline += now - last_tick;
                }
                last_tick = now;
                let o = match swarm::observe(sw.manager, &service).await {
                    Ok(o) => o,
                    Err(e) => {
                        warn!(task_id = %id, error = %format!("{e:#}"), "swarm not answering; asking again");
                        continue;
                    }
                };
                node = o.node.clone().or(node);
                container = o.container.clone().or(container);
                match o.phase {
                    Phase::Waiting => {}
                    Phase::Running => {
                        if !running {
                            running = true;
                            if mark_running(&ctx, id, &service, node.as_deref()).await.is_err() {
                                break Seen::Gone;
                            }
                        }
                        record_usage(&ctx, id, &gateway).await;
                    }
                    // A servo quicker than one look is still recorded as
                    // having run (`starting` cannot end `complete`).
                    Phase::Exited(code) if !running => {
                        if mark_running(&ctx, id, &service, node.as_deref()).await.is_err() {
                            break Seen::Gone;
                        }
                        break Seen::Exited(code);
                    }
                    Phase::Exited(code) => break Seen::Exited(code),
                    Phase::Lost(why) => break Seen::Lost(why),
                }
            }
        }
    };
    let code = match seen {
        Seen::Gone => return abandon(id, Some(gateway)).await,
        Seen::Lost(why) => {
            gateway.stop().await;
            remove_all(&ctx, id).await;
            let detail = format!("infrastructure: {why}");
            return requeue_or_fail(&ctx, &task, &detail, Reason::Lost, stopped.is_some()).await;
        }
        Seen::Exited(code) => code,
    };
    // The servo uploads before it exits; give a slow stream a moment.
    let uploaded = gateway.upload(grace + Duration::from_secs(5)).await;
    // Asked of its node's engine before the container is removed.
    let oom = match (node.as_deref(), container.as_deref()) {
        (Some(n), Some(c)) => swarm::oom_killed(sw.manager, sw.manager_addr, n, c).await,
        _ => false,
    };
    let parked = parked_exit(code, timed_out, stopped);
    let uploaded = match uploaded {
        Some(u) => Some(settle_upload(&ctx, id, u, parked).await),
        None => None,
    };
    if parked && matches!(uploaded, Some(Ok(_))) && still_held(&ctx, id).await {
        let active = now_ms() - started_ms - waited.as_millis() as i64 - task.active_ms;
        gateway.stop().await;
        clean_up_later(&ctx, launch, node);
        return park_swarm(&ctx, &task, active).await;
    }
    let metered = Some(Metered::read(gateway.meter()));
    gateway.stop().await;
    // The slot is free once the task is concluded; this launch's service,
    // secret, container and volume go meanwhile (nothing of another launch).
    clean_up_later(&ctx, launch, node.clone());
    if !still_held(&ctx, id).await {
        return (id, None);
    }
    let dest = ctx.cfg.results_dir().join(id.to_string());
    let watched = Watched {
        exit: Ok(code),
        timed_out,
        stopped,
        waited_ms: waited.as_millis() as i64,
    };
    let collected = match uploaded {
        None => {
            let state = if stopped == Some(Reason::Cancelled) {
                TaskState::Cancelled
            } else {
                TaskState::Incomplete
            };
            let reason = stopped.unwrap_or(if timed_out {
                Reason::Timeout
            } else if oom {
                Reason::Oom
            } else {
                Reason::NoCompletion
            });
            let oomed = if oom { " (OOM-killed)" } else { "" };
            let detail = format!(
                "exit {code}{oomed} on node {}; the servo uploaded no workspace, nothing collected",
                node.as_deref().unwrap_or("?")
            );
            return finish(&ctx, id, state, reason, Outcome::default(), &detail).await;
        }
        Some(Ok(c)) => {
            record_changes(&ctx, id, task.spec.workspace.is_some(), &dest, c.truncated).await;
            Ok(c)
        }
        Some(Err(e)) => Err(e),
    };
    if task.attempt > i64::from(task.spec.retries) {
        crate::inputs::remove_workspace(&ctx.cfg.state_dir(), id).await;
    }
    let seen = monitor::Seen {
        watched,
        oom,
        metered,
        collect_ms: 0,
    };
    conclude(&ctx, id, &dest, collected, seen).await
}

/// `running`, naming the service and node (what `task status` shows);
/// Err when another foreman holds the task now.
async fn mark_running(ctx: &Ctx, id: TaskId, service: &str, node: Option<&str>) -> Result<(), ()> {
    let node = node.unwrap_or("?");
    let detail = format!(
        "service {} on node {node}",
        &service[..12.min(service.len())]
    );
    info!(task_id = %id, node, "servo running");
    let lease = ctx.lease.clone();
    let r = ctx.db(move |s| s.started(id, &lease, &detail)).await;
    match r {
        Err(e) if lease_lost(&e) => Err(()),
        Err(e) => {
            warn!(task_id = %id, error = %format!("{e:#}"), "running not recorded");
            Ok(())
        }
        Ok(_) => Ok(()),
    }
}

/// The gateway's live usage into the store.
async fn record_usage(ctx: &Ctx, id: TaskId, gateway: &Gateway) {
    let m = Metered::read(gateway.meter());
    if m.calls > 0 {
        let lease = ctx.lease.clone();
        let _ = ctx
            .db(move |s| s.set_usage(id, &lease, m.calls, m.input, m.output, m.cost, m.cached))
            .await;
    }
}

/// Asks the servo to stop: SIGTERM with the grace through its node's
/// engine (it then uploads), else removing the service (no upload).
async fn stop(
    ctx: &Ctx,
    node: Option<&str>,
    container: Option<&str>,
    service: &str,
    grace: Duration,
) {
    let Some(sw) = handles(ctx) else { return };
    if let (Some(node), Some(container)) = (node, container)
        && let Ok(d) = swarm::node_engine(sw.manager, sw.manager_addr, node).await
        && crate::docker::stop(&d, container, grace).await.is_ok()
    {
        return;
    }
    if let Err(e) = sw.manager.delete_service(service).await {
        warn!(service, error = %e, "stopping the job service failed");
    }
}
