//! From `starting` to a running servo: gateway, volume, container, inputs.

use std::sync::Arc;
use std::time::Duration;

use saheeli_protocol::Reason;
use tracing::{error, info, warn};

use crate::docker;
use crate::gateway::Gateway;
use crate::inputs;
use crate::state::TaskState;
use crate::store::{Outcome, TaskRow, now_ms};

use super::*;

/// Runs one task from `starting` to a terminal state.
pub(super) async fn supervise(ctx: Arc<Ctx>, task: TaskRow, mut inbox: Inbox) -> Joined {
    let id = task.id;
    let mut gateway = None;
    let desk = ctx.desk_link(
        task.id,
        &task.spec,
        inbox.waiting(),
        ctx.task_engine(task.id, None),
    );
    let launched = launch(&ctx, &task, &mut gateway, desk).await;
    ctx.report_launch(id, launch_report(&launched));
    match launched {
        Ok(Launched { container, .. }) => {
            if inbox.stop_requested().is_some() {
                info!(task_id = %id, "cancelled while starting");
            }
            // A parked task's timeout goes on from the work already done.
            let started = now_ms() - task.active_ms;
            monitor(ctx, task, container, gateway, started, inbox).await
        }
        Err(e) if lease_lost(&e) => {
            // The container is the other foreman's now; so is the socket
            // directory it is mounted from.
            warn!(task_id = %id, "lease lost while launching; letting go");
            if let Some(g) = gateway {
                g.abandon().await;
            }
            (id, None)
        }
        Err(e) => {
            error!(task_id = %id, error = %format!("{e:#}"), "launch failed");
            if let Some(g) = gateway {
                g.stop().await;
            }
            if task.parked {
                // The workspace is all a parked task has: keep it.
                remove_containers(&ctx, id, None).await;
            } else {
                cleanup(&ctx, id, None).await;
            }
            // The daemon's failures are not the task's: it waits in the
            // queue, uncounted, while the admission breaker paces launches.
            if let Some(fault) = docker::daemon_fault(&e)
                && inbox.stop_requested().is_none()
            {
                let detail = format!(
                    "launch failed for the Docker daemon's sake ({}: {e:#}); queued again, not counted",
                    <&str>::from(fault)
                );
                let lease = ctx.lease.clone();
                match ctx
                    .db(move |s| s.requeue_for_daemon(id, &lease, &detail, DAEMON_REQUEUE_DELAY))
                    .await
                {
                    Ok(()) => return (id, None),
                    Err(e) if lease_lost(&e) => return (id, None),
                    Err(e) => error!(task_id = %id, error = %format!("{e:#}"), "requeue failed"),
                }
            }
            // Other Docker errors are worth another try, later; a missing image is not.
            let image_missing = e.downcast_ref::<docker::ImageMissing>().is_some();
            if !image_missing && task.requeues < MAX_REQUEUES && inbox.stop_requested().is_none() {
                let delay = Duration::from_secs(1 << task.requeues.clamp(0, 5));
                let detail = format!(
                    "launch failed ({e:#}); queued again in {}s",
                    delay.as_secs()
                );
                let lease = ctx.lease.clone();
                match ctx.db(move |s| s.requeue(id, &lease, &detail, delay)).await {
                    Ok(()) => return (id, None),
                    Err(e) if lease_lost(&e) => return (id, None),
                    Err(e) => error!(task_id = %id, error = %format!("{e:#}"), "requeue failed"),
                }
            }
            let detail = format!("launch: {e:#}");
            finish(
                &ctx,
                id,
                TaskState::Failed,
                Reason::Launch,
                Outcome::default(),
                &detail,
            )
            .await
        }
    }
}

/// A task whose launch failed for the daemon's sake is claimable again
/// this long after (the breaker decides when launching resumes).
const DAEMON_REQUEUE_DELAY: Duration = Duration::from_millis(500);

/// A started servo.
pub(super) struct Launched {
    pub container: String,
    /// How long creating and starting its container took (what admission
    /// watches).
    pub docker_time: Duration,
}

/// Creates the volume and container, uploads the inputs, starts the servo.
/// A parked task gets a new container on its kept volume, nothing uploaded:
/// the servo goes on from the session it saved there.
pub(super) async fn launch(
    ctx: &Ctx,
    task: &TaskRow,
    gateway: &mut Option<Gateway>,
    desk: crate::gateway::DeskLink,
) -> anyhow::Result<Launched> {
    let id = task.id;
    let d = &ctx.docker;
    let image = crate::spec::image_for(&ctx.cfg, &task.spec.agent);
    let t0 = std::time::Instant::now();
    let lap = |what: &str| tracing::debug!(task_id = %id, ms = t0.elapsed().as_secs_f64() * 1000.0, "launch: {what}");
    // The image was checked when serve started; one removed since fails
    // the create with `ImageMissing`.
    // Every task gets a gateway: replay tasks too reach the human desk.
    *gateway = Some(
        Gateway::start(
            &ctx.cfg.run_dir(),
            id,
            ctx.upstream.clone(),
            &task.spec.model,
            task.spec.budget(),
            desk,
        )
        .await?,
    );
    let volume = if task.parked {
        docker::volume_name(id)
    } else {
        docker::create_volume(d, id, crate::disk::for_task(&ctx.cfg, &task.spec)).await?
    };
    lap("volume ready");
    // Small launches travel in the environment: no upload before start.
    let mut servo_task = task.spec.servo_task(id);
    servo_task.request_timeout_s = Some(ctx.upstream.servo_request_timeout().as_secs());
    servo_task.stop_grace_ms = Some(ctx.cfg.file.stop_grace.as_millis() as u64);
    let launch = saheeli_protocol::Launch {
        task: servo_task,
        prompt: task.spec.body.clone(),
    };
    let launch_json = serde_json::to_string(&launch)?;
    let in_env = launch_json.len() <= saheeli_protocol::Launch::MAX_ENV_BYTES;
    let creating = std::time::Instant::now();
    let container = docker::create_container(
        d,
        id,
        &task.spec,
        &image,
        &volume,
        gateway.as_ref().and_then(|g| g.dir()),
        in_env.then_some(launch_json),
    )
    .await?;
    let mut docker_time = creating.elapsed();
    lap("container created");
    let cid = container.clone();
    let lease = ctx.lease.clone();
    ctx.db(move |s| s.set_container(id, &lease, &cid)).await?;
    let input = inputs::workspace_tar(&ctx.cfg.state_dir(), id);
    if input.is_file() && !task.parked {
        docker::upload_file(d, &container, &input).await?;
    }
    if !in_env && !task.parked {
        let tar = inputs::launch_tar(&launch.prompt, &launch.task)?;
        docker::upload(d, &container, tar.into()).await?;
    }
    lap("uploaded");
    // Only the holder starts the servo.
    let lease = ctx.lease.clone();
    ctx.db(move |s| s.hold(id, &lease)).await?;
    let starting = std::time::Instant::now();
    docker::start(d, &container).await?;
    docker_time += starting.elapsed();
    lap("started");
    let detail = format!("container {}", &container[..12.min(container.len())]);
    let lease = ctx.lease.clone();
    ctx.db(move |s| s.started(id, &lease, &detail)).await?;
    info!(task_id = %id, "servo running");
    Ok(Launched {
        container,
        docker_time,
    })
}
