//! One task's life from `starting`: prepare (how its servo reaches its
//! gateway), the gateway, launch, watch, collect, conclude. The same for
//! every engine; what differs is the engine's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use saheeli_protocol::{Reason, TaskId};
use tracing::{error, info, warn};

use super::collect::collect;
use super::finish::{finish, requeue_or_fail};
use super::gateway::{Gateway, GatewayPlan, Way};
use super::watch::{Llm, watch};
use super::{Ctx, Inbox, Joined, abandon, lease_lost, still_held};
use crate::admission::Report;
use crate::backend::Removal;
use crate::backend::{EngineError, Prepared, Reach, Servo};
use crate::door::{RemoteTask, WarmSocket, WarmTask};
use crate::state::TaskState;
use crate::store::{DbError, Outcome, TaskRow, now_ms};

/// Runs one task from `starting` to a terminal state (or hands it back).
pub(crate) async fn run(ctx: Arc<Ctx>, task: TaskRow, mut inbox: Inbox) -> Joined {
    if task.spec.samples.is_some() {
        // Best-of-N (issue 51): no servo of its own; its samples run.
        return super::samples::run(ctx, task, inbox).await;
    }
    let id = task.id;
    let mut gateway = None;
    let began = tokio::time::Instant::now();
    let launched = launch(&ctx, &task, &inbox, &mut gateway).await;
    if ctx.engine.traits().paces_launches {
        ctx.report_launch(id, report(&launched));
    }
    match launched {
        Ok(Started { servo, running, .. }) => {
            if inbox.stop_requested().is_some() {
                info!(task_id = %id, "cancelled while starting");
            }
            // A parked task's timeout goes on from the work already done.
            let started = now_ms() - task.active_ms;
            let paces = ctx.engine.traits().paces_launches;
            let joined =
                supervise(ctx.clone(), task, servo, gateway, started, running, inbox).await;
            if paces {
                ctx.report_launch(id, Report::Lived(began.elapsed()));
            }
            joined
        }
        Err(failed) => launch_failed(&ctx, &task, gateway, failed, &mut inbox).await,
    }
}

/// Watches a started (or adopted) servo to its end, then collects and
/// concludes.
pub(super) async fn supervise(
    ctx: Arc<Ctx>,
    task: TaskRow,
    servo: Servo,
    gateway: Option<Gateway>,
    started_ms: i64,
    running: bool,
    inbox: Inbox,
) -> Joined {
    let id = task.id;
    let llm = gateway.as_ref().map(|g| Llm {
        meter: g.meter(),
        held: g.llm().held.clone(),
    });
    let watched = watch(&ctx, &task, &servo, llm, started_ms, running, inbox).await;
    // Only the holder collects: a foreman that was paused past its lease
    // must not write into results another one is collecting.
    let Some(watched) = watched else {
        return abandon(id, gateway).await;
    };
    if !still_held(&ctx, id).await {
        return abandon(id, gateway).await;
    }
    collect(&ctx, &task, servo, gateway, started_ms, watched).await
}

/// A started servo.
struct Started {
    servo: Servo,
    /// Recorded `running` already (else the engine reports it later).
    running: bool,
    /// How long the engine took to create and start it, when it measures.
    engine_time: Option<Duration>,
}

/// Why a launch did not start a servo.
#[derive(Debug)]
enum Failed {
    /// Another foreman holds the task now: its launch is not ours to undo.
    LeaseLost,
    /// The engine lacks a capability the task needs (issue 53).
    Unsupported(String),
    Engine(EngineError),
    Other(anyhow::Error),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::LeaseLost => f.write_str("lease lost"),
            Failed::Unsupported(why) => f.write_str(why),
            Failed::Engine(e) => write!(f, "{e}"),
            Failed::Other(e) => write!(f, "{e:#}"),
        }
    }
}

impl From<EngineError> for Failed {
    fn from(e: EngineError) -> Self {
        Failed::Engine(e)
    }
}

/// A store write's failure, sorted.
fn stored(e: DbError) -> Failed {
    if e.lease_lost() {
        Failed::LeaseLost
    } else {
        Failed::Other(e.into())
    }
}

/// What admission learns from a launch.
fn report(launched: &Result<Started, Failed>) -> Report {
    match launched {
        Ok(Started {
            engine_time: Some(t),
            ..
        }) => Report::Launched(*t),
        Err(Failed::Engine(EngineError::Unreachable { fault, .. })) => Report::DaemonFailed(*fault),
        _ => Report::Neutral,
    }
}

/// Prepares the launch, opens its gateway (every task gets one: replay
/// tasks too reach the human desk), creates the servo and, holding the
/// lease, starts it.
async fn launch(
    ctx: &Ctx,
    task: &TaskRow,
    inbox: &Inbox,
    gateway: &mut Option<Gateway>,
) -> Result<Started, Failed> {
    let id = task.id;
    let engine = &ctx.engine;
    // Queued under another engine, or before it lost a capability: never
    // launched to fail.
    if let Some(why) = engine.refusal(&task.spec) {
        return Err(Failed::Unsupported(why));
    }
    let prepared = engine.prepare(id, task.parked, &task.spec)?;
    let routes = ctx.route_plan(
        &task.spec,
        inbox.waiting(),
        engine.task_engine(id, &prepared),
        task.priority,
    );
    let doc = servo_launch(ctx, task);
    let way = way(ctx, task, &prepared).map_err(Failed::Other)?;
    *gateway = Some(
        Gateway::open(GatewayPlan {
            task_id: id,
            upstream: ctx.upstream.clone(),
            model: task.spec.model.clone(),
            budget: task.spec.budget(),
            routes,
            way,
            adopted: None,
        })
        .await
        .map_err(Failed::Other)?,
    );
    let dir = gateway.as_ref().and_then(|g| g.dir());
    // A warm servo runs already: its launch makes nothing, so one fenced
    // write (its container, the lease renewed) is all that precedes its
    // release, the one hold a cold launch needs before and after making.
    let warm = matches!(prepared.reach, Reach::Warm(_));
    if !warm {
        let lease = ctx.lease.clone();
        ctx.db(move |s| s.hold(id, &lease)).await.map_err(stored)?;
    }
    let launched = engine
        .launch(id, &task.spec, task.parked, prepared, dir, &doc)
        .await;
    // Set-up ran inside the launch: its egress ends before the agent's
    // container starts.
    if let Some(g) = gateway.as_mut() {
        g.end_setup();
    }
    let launched = launched?;
    if let Some(g) = gateway.as_ref() {
        g.servo_created();
    }
    let (servo, mut engine_time) = (launched.servo, launched.engine_time);
    if let Some(ran) = launched.setup {
        let lease = ctx.lease.clone();
        ctx.db(move |s| s.set_setup(id, &lease, &ran))
            .await
            .map_err(stored)?;
    }
    let (lease, sid) = (ctx.lease.clone(), servo.id.clone());
    if warm {
        ctx.db(move |s| s.hold_container(id, &lease, &sid))
            .await
            .map_err(stored)?;
    } else {
        ctx.db(move |s| s.set_container(id, &lease, &sid))
            .await
            .map_err(stored)?;
        // Only the holder starts the servo.
        let lease = ctx.lease.clone();
        ctx.db(move |s| s.hold(id, &lease)).await.map_err(stored)?;
    }
    let starting = Instant::now();
    let running = engine.start(&servo).await?;
    if let Some(t) = engine_time.as_mut() {
        *t += starting.elapsed();
    }
    if running {
        let (lease, detail) = (ctx.lease.clone(), servo.running_detail());
        ctx.db(move |s| s.started(id, &lease, &detail))
            .await
            .map_err(stored)?;
        info!(task_id = %id, "servo running");
    }
    Ok(Started {
        servo,
        running,
        engine_time,
    })
}

/// What the servo is given: its task (with the gateway's request timeout)
/// and prompt.
fn servo_launch(ctx: &Ctx, task: &TaskRow) -> saheeli_protocol::Launch {
    let mut servo_task = task.spec.servo_task(task.id);
    servo_task.request_timeout_s = Some(ctx.upstream.servo_request_timeout().as_secs());
    servo_task.stop_grace_ms = Some(ctx.cfg.file.stop_grace.as_millis() as u64);
    // No window from config or the known models: the one the provider's
    // server reported at `serve` start, if any (issue 27).
    if servo_task.context.window.is_none() {
        let route = ctx.upstream.providers.route(&task.spec.model);
        servo_task.context.window = ctx
            .upstream
            .served
            .window(&route.provider.name, &route.model);
    }
    saheeli_protocol::Launch {
        task: servo_task,
        prompt: task.spec.body.clone(),
        env: Default::default(),
    }
}

/// How the servo of `prepared` reaches its gateway.
pub(super) fn way(ctx: &Ctx, task: &TaskRow, prepared: &Prepared) -> anyhow::Result<Way> {
    Ok(match &prepared.reach {
        Reach::Socket => Way::Socket {
            sockets: ctx.sockets.clone(),
        },
        Reach::Remote { hub, token, slot } => Way::Remote {
            hub: hub.clone(),
            task: remote_task(ctx, task, token, *slot)?,
        },
        Reach::Warm(warm) => Way::Warm {
            socket: match &warm.socket {
                Some(s) => s.clone(),
                // Adopted: bound again where its container has it mounted.
                None => WarmSocket::bind(&ctx.cfg.run_dir(), &warm.socket_name()?, true)?,
            },
            task: warm_task(ctx, task)?,
        },
    })
}

/// What a warm servo claimed for `task` fetches: its launch, with the
/// task's `env:` (a cold servo has it in its container's environment).
fn warm_task(ctx: &Ctx, task: &TaskRow) -> anyhow::Result<WarmTask> {
    let mut launch = servo_launch(ctx, task);
    launch.env = task.spec.env.clone();
    let input = crate::inputs::workspace_tar(&ctx.cfg.state_dir(), task.id);
    Ok(WarmTask {
        launch: serde_json::to_string(&launch)?,
        input: input.is_file().then_some(input),
        resume_from: task.spec.resume().map(|r| r.from),
    })
}

/// What a remote servo of `task` fetches, and where its upload goes; a
/// warm job's (`slot`) gets the task's `env:` in its launch (a cold job
/// has it in its container's environment).
fn remote_task(
    ctx: &Ctx,
    task: &TaskRow,
    token: &str,
    slot: Option<TaskId>,
) -> anyhow::Result<RemoteTask> {
    let id = task.id;
    let mut launch = servo_launch(ctx, task);
    if slot.is_some() {
        launch.env = task.spec.env.clone();
    }
    let launch = serde_json::to_string(&launch)?;
    let input = crate::inputs::start_tar(&ctx.cfg.state_dir(), id);
    // A parked task goes on from the workspace it parked with.
    let kept = crate::inputs::parked_dir(&ctx.cfg.state_dir(), id);
    Ok(RemoteTask {
        token: token.to_string(),
        launch,
        input: input.is_file().then_some(input),
        resume_from: kept.is_dir().then(|| kept.clone()),
        dest: ctx.cfg.results_dir().join(id.to_string()),
        parked_dest: kept,
        secrets: ctx.upstream.providers.secrets(),
        max_bytes: ctx.cfg.file.max_results_size.0,
        slot,
    })
}

/// A task whose launch failed for the daemon's sake is claimable again
/// this long after (the breaker decides when launching resumes).
const DAEMON_REQUEUE_DELAY: Duration = Duration::from_millis(500);

/// Uncounted requeues for the daemon's sake a task gets; past them its
/// launch failures count as any other's (backoff, then `failed`): a 5xx
/// the daemon gives this task every time (its image's runtime config, say)
/// must not keep it queued forever.
const MAX_DAEMON_REQUEUES: i64 = 50;

/// How an uncounted daemon requeue's detail starts (the store counts them).
const DAEMON_REQUEUED: &str = "launch failed for the Docker daemon's sake";

/// Removes what the launch made; queues the task again (the engine's
/// fault, uncounted; other failures with backoff) or ends it.
async fn launch_failed(
    ctx: &Ctx,
    task: &TaskRow,
    gateway: Option<Gateway>,
    failed: Failed,
    inbox: &mut Inbox,
) -> Joined {
    let id = task.id;
    if let Failed::LeaseLost = failed {
        // The servo is the other foreman's now; so is the socket
        // directory it is mounted from.
        warn!(task_id = %id, "lease lost while launching; letting go");
        if let Some(g) = gateway {
            g.abandon().await;
        }
        return (id, None);
    }
    error!(task_id = %id, error = %failed, "launch failed");
    if let Some(g) = gateway {
        g.stop().await;
    }
    // The workspace is all a parked task has: keep it.
    ctx.engine
        .remove_task(
            id,
            if task.parked {
                Removal::KeepWorkspace
            } else {
                Removal::All
            },
        )
        .await;
    let stopping = inbox.stop_requested().is_some();
    // The daemon's failures are not the task's: it waits in the queue,
    // uncounted, while the admission breaker paces launches.
    if let Failed::Engine(EngineError::Unreachable { fault, .. }) = &failed
        && ctx.engine.traits().paces_launches
        && !stopping
        && ctx
            .db(move |s| s.requeues_with(id, DAEMON_REQUEUED))
            .await
            .is_ok_and(|n| n < MAX_DAEMON_REQUEUES)
    {
        let detail = format!(
            "{DAEMON_REQUEUED} ({}: {failed}); queued again, not counted",
            <&str>::from(*fault)
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
    match &failed {
        // The engine cannot run it: no retry helps, nothing was made.
        Failed::Unsupported(why) => {
            finish(
                ctx,
                id,
                TaskState::Failed,
                Reason::Unsupported,
                Outcome::default(),
                why,
            )
            .await
        }
        // A set-up command failed: the task's own doing, its output the
        // detail and the report's.
        Failed::Engine(EngineError::SetupFailed(why)) => {
            let outcome = super::record::setup_failed_outcome(ctx, id).await;
            finish(
                ctx,
                id,
                TaskState::Failed,
                Reason::SetupFailed,
                outcome,
                why,
            )
            .await
        }
        // What is gone says why itself, and no retry helps.
        Failed::Engine(e @ EngineError::Gone(_)) => {
            let detail = e.to_string();
            finish(
                ctx,
                id,
                TaskState::Failed,
                Reason::Launch,
                Outcome::default(),
                &detail,
            )
            .await
        }
        // A missing image is not worth another try either.
        Failed::Engine(e) if e.is_final() => {
            let detail = format!("launch: {failed}");
            finish(
                ctx,
                id,
                TaskState::Failed,
                Reason::Launch,
                Outcome::default(),
                &detail,
            )
            .await
        }
        _ => {
            let detail = format!("launch failed ({failed})");
            requeue_or_fail(ctx, task, &detail, Reason::Launch, stopping).await
        }
    }
}
