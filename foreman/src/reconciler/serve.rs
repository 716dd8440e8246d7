//! The loop: claim queued tasks up to the concurrency limit, take over
//! tasks whose foreman died, notice cancels, and see every supervisor to
//! its end.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use saheeli_protocol::{Reason, TaskId};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::state::TaskState;
use crate::store::{ClosedBy, PoolGroup, Store};

use super::bell;
use super::gate::{self, Publisher};
use super::lease::renew_leases;
use super::options::{ServeOptions, ServeSummary};
use super::sweep::{sweep, sweep_pool};
use crate::supervisor::{self, Control, Ctx, Joined, channel};

/// How often the loop looks for new work (a cheap `PRAGMA data_version`)
/// when no doorbell rings (no inotify): the bell wakes it at once on any
/// commit, so the timer is only a backstop then (`POLL_WITH_BELL`).
pub(super) const POLL: Duration = Duration::from_millis(20);
pub(super) const POLL_WITH_BELL: Duration = Duration::from_millis(100);

/// The least time between two wakes by the bell: at hundreds of running
/// tasks the foreman's own commits ring it hundreds of times a second.
const BELL_SPACING: Duration = Duration::from_millis(5);

/// How often parked tasks are checked for a cancel or a `human_timeout`.
pub(super) const PARKED_EVERY: Duration = Duration::from_millis(500);

/// How often labelled leftovers of ended tasks are swept.
pub(super) const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// How often warm servos a stopped foreman left are looked for.
const POOL_SWEEP_EVERY: Duration = Duration::from_secs(5);

/// The supervisors' control handles, shared with the lease renewer.
pub(super) type Handles = Arc<Mutex<HashMap<TaskId, Control>>>;

/// The serve loop. `drain` (first Ctrl-C) stops launching and waits for
/// running tasks (launching only their queued children, which they wait
/// on: a best-of-N task's samples); `stop` (second Ctrl-C) also stops
/// their containers.
///
/// Whatever ends the loop, an error included, the tasks already running
/// are seen to their end before this returns: nothing is dropped mid-run.
pub(crate) async fn run(
    ctx: Arc<Ctx>,
    opts: ServeOptions,
    drain: CancellationToken,
    stop: CancellationToken,
) -> anyhow::Result<ServeSummary> {
    let handles: Handles = Arc::default();
    let mut running: JoinSet<Joined> = JoinSet::new();
    let mut summary = ServeSummary::default();
    // Leases are renewed on a timer of their own, so a slow turn of the
    // loop (a hung Docker call, a long sweep) never lets one lapse.
    let renewer_stop = CancellationToken::new();
    // Its own connection too: never queued behind the loop's queries.
    let own = Store::open(&ctx.cfg.database()).context("opening the database for lease renewal")?;
    let renewer = tokio::spawn(renew_leases(
        ctx.clone(),
        Arc::new(Mutex::new(own)),
        handles.clone(),
        renewer_stop.clone(),
    ));
    // The bus is fed from the durable event trail, so subscribers see what
    // every process wrote (submits, cancels, other foremen) in order.
    // It starts from the trail's end as it is now, before the loop writes
    // anything: the loop's first claim is never missed.
    let feeder_stop = CancellationToken::new();
    let after = ctx.db(|s| s.last_event_seq()).await?;
    let feeder = tokio::spawn(crate::events::feed(
        ctx.cfg.database(),
        ctx.bus.clone(),
        Some(after),
        feeder_stop.clone(),
    ));
    // Webhooks go out on their own, never holding the loop up.
    let sender_stop = CancellationToken::new();
    let mailer = match &ctx.cfg.file.smtp {
        Some(smtp) => Some(std::sync::Arc::new(crate::notify::Mailer::new(smtp)?)),
        None => None,
    };
    let sender = tokio::spawn(crate::notify::run(
        ctx.cfg.database(),
        ctx.cfg.file.notify_max_age,
        ctx.lease.owner.clone(),
        mailer,
        sender_stop.clone(),
    ));
    // The warm pool (issue 28) refills beside the loop, paced by
    // admission; `saheeli run` has none (one task would never claim one).
    // A drain (the first Ctrl-C, `--drain`'s end) stops it too.
    let keeper_stop = drain.child_token();
    let queue = gate::QueueWatch::new(opts.drain);
    let keeper = opts.only.is_none().then(|| {
        let (c, pace_ctx, queue) = (ctx.clone(), ctx.clone(), queue.clone());
        let pace: crate::backend::Pace = Arc::new(move || gate::may_refill(&pace_ctx, &queue));
        let stop = keeper_stop.clone();
        tokio::spawn(async move {
            if let Some(pool) = c.engine.pool() {
                pool.keep(pace, stop).await;
            }
        })
    });
    let result = serve_loop(
        &ctx,
        opts,
        &queue,
        &drain,
        &stop,
        &mut running,
        &handles,
        &mut summary,
    )
    .await;
    if let Err(e) = &result {
        error!(error = %format!("{e:#}"), running = running.len(), "serve loop failed; letting running tasks finish");
    }
    // Nothing more is launched: the idle warm servos go (`--drain` too).
    keeper_stop.cancel();
    if let Some(keeper) = keeper {
        let _ = keeper.await;
    }
    let mut stopped = false;
    loop {
        tokio::select! {
            joined = running.join_next() => match joined {
                Some(joined) => record(joined, &handles, &mut summary),
                None => break,
            },
            _ = stop.cancelled(), if !stopped => {
                stopped = true;
                for h in handles.lock().unwrap().values() {
                    h.stop(Reason::Interrupted);
                }
            }
        }
    }
    ctx.engine.removals().done(Duration::from_secs(60)).await;
    renewer_stop.cancel();
    let _ = renewer.await;
    // The feeder publishes what is left before it stops; the sender
    // finishes what it has in flight (what is not sent stays in the outbox).
    feeder_stop.cancel();
    let _ = feeder.await;
    if (opts.drain || opts.only.is_some()) && !stop.is_cancelled() {
        deliver_before_exit(&ctx, &stop).await;
    }
    sender_stop.cancel();
    let _ = sender.await;
    Publisher::retire(&ctx).await;
    result.map(|()| summary)
}

/// `serve --drain` and `run`: the webhooks of what just ended go out before it
/// exits. Waits while a delivery is being sent or due within 5 s (a
/// receiver that is down is tried at 1, 2 and 4 s), 30 s at most, or
/// until Ctrl-C; what is left stays in the outbox for the next serve.
async fn deliver_before_exit(ctx: &Ctx, stop: &CancellationToken) {
    const SOON_MS: i64 = 5_000;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (pending, soon) = match ctx.db(|s| s.pending_deliveries(SOON_MS)).await {
            Ok(n) => n,
            Err(e) => return warn!(error = %format!("{e:#}"), "webhook outbox not read"),
        };
        if pending == 0 {
            return;
        }
        if soon == 0 || tokio::time::Instant::now() >= deadline || stop.is_cancelled() {
            return warn!(
                pending,
                "webhook deliveries left in the outbox; the next serve sends them"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Notes what a supervisor reported.
pub(super) fn record(
    joined: Result<Joined, tokio::task::JoinError>,
    handles: &Handles,
    summary: &mut ServeSummary,
) {
    match joined {
        Ok((id, state)) => {
            handles.lock().unwrap().remove(&id);
            if let Some(state) = state {
                summary.finished.push((id, state));
            }
        }
        Err(e) => error!(error = %e, "a task supervisor panicked"),
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn serve_loop(
    ctx: &Arc<Ctx>,
    opts: ServeOptions,
    queue: &gate::QueueWatch,
    drain: &CancellationToken,
    stop: &CancellationToken,
    running: &mut JoinSet<Joined>,
    handles: &Handles,
    summary: &mut ServeSummary,
) -> anyhow::Result<()> {
    let mut publisher = Publisher::default();
    let mut bell = bell::Bell::watch(&ctx.cfg.database());
    let mut tick = tokio::time::interval(if bell.works() { POLL_WITH_BELL } else { POLL });
    let mut last_bell = tokio::time::Instant::now();
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_takeover: Option<tokio::time::Instant> = None;
    let mut last_sweep: Option<tokio::time::Instant> = None;
    let mut sweeping: Option<tokio::task::JoinHandle<()>> = None;
    let mut last_pool_sweep: Option<tokio::time::Instant> = None;
    let mut pool_sweeping: Option<tokio::task::JoinHandle<()>> = None;
    let mut seen_version = None;
    let mut look_for_work = true;
    let pools = Arc::new(std::sync::Mutex::new(super::pools::LivePools::new(
        ctx.cfg.file.pools.clone(),
    )));
    let mut last_parked = tokio::time::Instant::now() - PARKED_EVERY;
    // `saheeli run` follows its task through retries.
    let mut only = opts.only;
    loop {
        // Adopt tasks whose foreman died.
        if last_takeover.is_none_or(|t| t.elapsed() >= ctx.cfg.file.lease / 5) {
            last_takeover = Some(tokio::time::Instant::now());
            // Requeued tasks become claimable later without any write.
            look_for_work = true;
            if only.is_none() && !drain.is_cancelled() {
                take_over(ctx, handles, running).await?;
            }
        }
        // Sweeping talks to Docker, which may hang: never inside the loop.
        if only.is_none()
            && sweeping.as_ref().is_none_or(|s| s.is_finished())
            && last_sweep.is_none_or(|t| t.elapsed() >= SWEEP_EVERY)
        {
            last_sweep = Some(tokio::time::Instant::now());
            sweeping = Some(tokio::spawn(sweep(ctx.clone(), handles.clone())));
        }
        // Warm servos a stopped foreman left go soon after its heartbeat
        // stops (one listing by label).
        if only.is_none()
            && pool_sweeping.as_ref().is_none_or(|s| s.is_finished())
            && last_pool_sweep.is_none_or(|t| t.elapsed() >= POOL_SWEEP_EVERY)
        {
            last_pool_sweep = Some(tokio::time::Instant::now());
            pool_sweeping = Some(tokio::spawn(sweep_pool(ctx.clone())));
        }

        // Tasks waiting for a human hold no slot; admission sets the
        // limit (fixed or `auto`) and may pause launching (its breaker).
        // A drain claims only what the running tasks wait on: their
        // queued children (a best-of-N task's samples).
        while look_for_work
            && (!drain.is_cancelled() || !running.is_empty())
            && gate::may_launch(ctx, busy(running, handles))
        {
            let under_held = drain.is_cancelled();
            let (lease, caps) = (ctx.lease.clone(), pools.clone());
            let claimed = ctx
                .db(move |s| {
                    // `pools:` (issue 52): none, no count.
                    let caps = caps.lock().unwrap_or_else(|p| p.into_inner()).current(s)?;
                    let f = |g: &[PoolGroup]| crate::admission::pools::closed(&caps, g);
                    let closed: Option<ClosedBy<'_>> =
                        if caps.is_empty() { None } else { Some(&f) };
                    s.claim_within(only, under_held, &lease, closed)
                })
                .await?;
            // A drain's look is not at the whole queue.
            if !under_held {
                queue.found(claimed.is_some());
            }
            let Some(task) = claimed else {
                look_for_work = false;
                break;
            };
            gate::admitted(ctx);
            info!(task_id = %task.id, title = %task.title, "task claimed");
            let (control, inbox) = channel();
            handles.lock().unwrap().insert(task.id, control);
            let ctx = ctx.clone();
            running.spawn(async move { supervisor::run(ctx, task, inbox).await });
        }

        if running.is_empty() {
            match idle(ctx, opts, drain, only).await? {
                Idle::Done => break,
                Idle::Follow(next) => {
                    only = Some(next);
                    look_for_work = true;
                    continue;
                }
                Idle::Wait => {}
            }
        }

        publisher.publish(ctx, busy(running, handles)).await;
        let stoppable = handles.lock().unwrap().values().any(|h| !h.is_stopping());
        tokio::select! {
            Some(joined) = running.join_next() => {
                look_for_work = true;
                record(joined, handles, summary);
            }
            _ = bell.rung() => {
                // Something committed (a submit, a cancel): look now.
                tokio::time::sleep_until(last_bell + BELL_SPACING).await;
                last_bell = tokio::time::Instant::now();
                if look_again(ctx, handles, &mut seen_version).await? {
                    look_for_work = true;
                }
            }
            _ = tick.tick() => {
                if look_again(ctx, handles, &mut seen_version).await? {
                    look_for_work = true;
                }
                if last_parked.elapsed() >= PARKED_EVERY {
                    last_parked = tokio::time::Instant::now();
                    if !drain.is_cancelled() {
                        end_parked_tasks(ctx, only, handles, running).await?;
                    }
                }
            }
            _ = stop.cancelled(), if stoppable => {
                let handles = handles.lock().unwrap();
                warn!(running = handles.len(), "stopping running tasks");
                for h in handles.values() {
                    h.stop(Reason::Interrupted);
                }
            }
            _ = drain.cancelled(), if !drain.is_cancelled() => {}
        }
    }
    Ok(())
}

/// Whether another connection wrote since the last look (a submit, a
/// cancel); passes cancels on when so.
async fn look_again(
    ctx: &Arc<Ctx>,
    handles: &Handles,
    seen_version: &mut Option<i64>,
) -> anyhow::Result<bool> {
    let version = ctx.db(|s| s.data_version()).await?;
    if *seen_version == Some(version) {
        return Ok(false);
    }
    *seen_version = Some(version);
    pass_on_cancels(ctx, handles).await?;
    Ok(true)
}

/// Supervisors holding a slot: those not waiting for a human, nor
/// frozen (issue 51: a frozen servo uses no CPU).
fn busy(running: &JoinSet<Joined>, handles: &Handles) -> usize {
    let waiting = handles
        .lock()
        .unwrap()
        .values()
        .filter(|h| h.is_waiting() || h.is_frozen())
        .count();
    running.len().saturating_sub(waiting)
}

/// Ends parked tasks that were cancelled or waited past `human_timeout`.
async fn end_parked_tasks(
    ctx: &Arc<Ctx>,
    only: Option<TaskId>,
    handles: &Handles,
    running: &mut JoinSet<Joined>,
) -> anyhow::Result<()> {
    for (id, cancelled) in ctx.db(|s| s.parked_to_end()).await? {
        if only.is_some_and(|o| o != id) {
            continue;
        }
        let lease = ctx.lease.clone();
        let Some(task) = ctx.db(move |s| s.hold_parked(id, &lease)).await? else {
            continue;
        };
        let (control, _inbox) = channel();
        handles.lock().unwrap().insert(task.id, control);
        let ctx = ctx.clone();
        running.spawn(async move { supervisor::end_parked(ctx, task, cancelled).await });
    }
    Ok(())
}

/// Takes over the tasks whose foreman stopped (their lease expired).
async fn take_over(
    ctx: &Arc<Ctx>,
    handles: &Handles,
    running: &mut JoinSet<Joined>,
) -> anyhow::Result<()> {
    let lease = ctx.lease.clone();
    for task in ctx.db(move |s| s.take_over_expired(&lease)).await? {
        info!(task_id = %task.id, state = %task.state, "taking over a task whose foreman stopped");
        let (control, inbox) = channel();
        handles.lock().unwrap().insert(task.id, control);
        let ctx = ctx.clone();
        running.spawn(async move { supervisor::adopt(ctx, task, inbox).await });
    }
    Ok(())
}

/// What an idle loop (nothing running) does next.
enum Idle {
    /// Return: drained, the followed task ended, or the queue is empty.
    Done,
    /// `saheeli run` follows its task's retry.
    Follow(TaskId),
    /// Wait for work.
    Wait,
}

async fn idle(
    ctx: &Arc<Ctx>,
    opts: ServeOptions,
    drain: &CancellationToken,
    only: Option<TaskId>,
) -> anyhow::Result<Idle> {
    if drain.is_cancelled() {
        return Ok(Idle::Done);
    }
    if let Some(id) = only {
        let t = ctx.db(move |s| s.require(&id.to_string())).await?;
        if !t.state.is_terminal() {
            return Ok(Idle::Wait);
        }
        return Ok(match ctx.db(move |s| s.retried_as(id)).await? {
            Some(next) => Idle::Follow(next.id),
            None => Idle::Done,
        });
    }
    if opts.drain {
        // Tasks another foreman holds count too: if it died, they are ours
        // once its lease expires.
        let left = ctx
            .db(|s| s.count_in(&[TaskState::Queued, TaskState::Starting, TaskState::Running]))
            .await?;
        if left == 0 {
            return Ok(Idle::Done);
        }
    }
    Ok(Idle::Wait)
}

/// Tells the supervisors of tasks someone asked to cancel.
async fn pass_on_cancels(ctx: &Arc<Ctx>, handles: &Handles) -> anyhow::Result<()> {
    if handles.lock().unwrap().is_empty() {
        return Ok(());
    }
    for id in ctx.db(|s| s.cancel_requests()).await? {
        if let Some(h) = handles.lock().unwrap().get(&id) {
            info!(task_id = %id, "cancel requested");
            h.stop(Reason::Cancelled);
        }
    }
    Ok(())
}
