//! The one loop that watches a running servo, whatever the engine: its
//! phases, the timeout (not counting time spent waiting for a human), a
//! stop asked by the loop, stop escalation (SIGTERM, then SIGKILL sent
//! again until the servo is gone), live usage, and the lease (a lost one
//! ends the watch without touching anything).

use std::sync::Arc;
use std::time::Duration;

use saheeli_protocol::{Reason, TaskId};
use tracing::{info, warn};

use super::freeze::{Freezer, Next};
use super::{Command, Ctx, Inbox, lease_lost, still_held};
use crate::backend::{Engine, EngineError, Phase, Servo, Stop};
use crate::store::{TaskRow, now_ms};

/// How a watched servo ended.
#[derive(Debug)]
pub(super) enum Ended {
    Exited(i64),
    /// Watching it failed (the daemon never came back): its exit is unknown.
    WaitFailed(EngineError),
    /// The infrastructure lost it: not the agent's doing.
    Lost(String),
}

/// How watching a servo ended (unless the task was lost to another foreman).
#[derive(Debug)]
pub(super) struct Watched {
    pub ended: Ended,
    pub timed_out: bool,
    pub stopped: Option<Reason>,
    /// How long the task waited for a human meanwhile (not working time).
    pub waited_ms: i64,
}

impl Watched {
    /// The servo's exit code, when it exited.
    pub fn exit(&self) -> Option<i64> {
        match self.ended {
            Ended::Exited(code) => Some(code),
            _ => None,
        }
    }
}

/// What the watch reads of the task's gateway: its meter (live usage)
/// and the model calls it holds (`llm::held`, for the freezer).
pub(super) struct Llm<'a> {
    pub meter: &'a crate::llm::Meter,
    pub held: Arc<crate::llm::held::Held>,
}

/// Rings when the gateway's held calls change; never without a gateway.
async fn calls_moved(bell: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    if let Some(rx) = bell
        && rx.changed().await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

/// Watches `servo` until it ends. `started_ms`: when its working time
/// began (the timeout counts from there); `running`: the task is recorded
/// `running` already. None: another foreman holds the task now.
pub(super) async fn watch(
    ctx: &Ctx,
    task: &TaskRow,
    servo: &Servo,
    llm: Option<Llm<'_>>,
    started_ms: i64,
    mut running: bool,
    mut inbox: Inbox,
) -> Option<Watched> {
    let id = task.id;
    let engine = &ctx.engine;
    let grace = ctx.cfg.file.stop_grace;
    let elapsed = Duration::from_millis((now_ms() - started_ms).max(0) as u64);
    let deadline = Duration::from_secs(task.spec.timeout_s).saturating_sub(elapsed);
    let mut timed_out = false;
    let mut stopped: Option<Reason> = None;
    // Set once the servo was asked to stop: when to ask again, harder.
    let mut escalate_at: Option<tokio::time::Instant> = None;
    let mut escalations = 0u32;

    let mut phases = engine.phase_change(servo);
    let sleep = tokio::time::sleep(deadline);
    tokio::pin!(sleep);
    let mut usage_tick = tokio::time::interval(Duration::from_secs(1));
    let far = tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
    // `deadline:` is a time of day: waits for a human do not move it.
    let by_deadline = match task.spec.deadline_ms {
        Some(at) => {
            tokio::time::Instant::now() + Duration::from_millis((at - now_ms()).max(0) as u64)
        }
        None => far,
    };
    let lost = inbox.lost();
    // Time spent waiting for a human does not count against the timeout.
    let waiting = inbox.waiting();
    // Nor time frozen while waiting (issue 51); a frozen servo is thawed
    // before it is asked to stop.
    let held = llm.as_ref().map(|l| l.held.clone());
    let mut bell = held.as_ref().map(|h| h.subscribe());
    let meter = llm.map(|l| l.meter);
    let mut freezer = Freezer::new(ctx, task, inbox.frozen(), held);
    let mut waited = Duration::ZERO;
    let mut last_tick = tokio::time::Instant::now();
    let ended = loop {
        tokio::select! {
            phase = phases.change() => match phase {
                Ok(Phase::Running) => {
                    if !running {
                        running = true;
                        if !mark_running(ctx, id, servo).await {
                            return None;
                        }
                    }
                }
                Ok(Phase::Exited(code)) => {
                    // A servo quicker than one look is still recorded as
                    // having run (`starting` cannot end `complete`).
                    if !running && !mark_running(ctx, id, servo).await {
                        return None;
                    }
                    tracing::debug!(task_id = %id, ?code, "servo exited");
                    break Ended::Exited(code);
                }
                Ok(Phase::Lost(why)) => break Ended::Lost(why),
                Err(e) => break Ended::WaitFailed(e),
            },
            _ = lost.cancelled() => return None,
            _ = &mut sleep, if !timed_out && stopped.is_none() => {
                if !still_held(ctx, id).await {
                    return None;
                }
                warn!(task_id = %id, timeout_s = task.spec.timeout_s, "timeout: stopping servo");
                freezer.thaw(ctx, id, servo, "timeout").await;
                timed_out = true;
                escalate_at = Some(stop_servo(engine, servo, grace, 0).await);
            }
            _ = tokio::time::sleep_until(by_deadline), if task.spec.deadline_ms.is_some() && !timed_out && stopped.is_none() => {
                if !still_held(ctx, id).await {
                    return None;
                }
                warn!(task_id = %id, "deadline passed: stopping servo");
                freezer.thaw(ctx, id, servo, "deadline passed").await;
                timed_out = true;
                escalate_at = Some(stop_servo(engine, servo, grace, 0).await);
            }
            command = inbox.recv(), if stopped.is_none() && !timed_out => {
                let Command::Stop(reason) = command;
                if !still_held(ctx, id).await {
                    return None;
                }
                info!(task_id = %id, %reason, "stopping servo");
                freezer.thaw(ctx, id, servo, "stopping").await;
                stopped = Some(reason);
                escalate_at = Some(stop_servo(engine, servo, grace, 0).await);
            }
            // Asked to stop, and still not gone: the stop call failed or
            // the engine lost it. Ask again, with SIGKILL.
            _ = tokio::time::sleep_until(escalate_at.unwrap_or(far)), if escalate_at.is_some() => {
                escalations += 1;
                freezer.thaw(ctx, id, servo, "stopping").await;
                escalate_at = Some(stop_servo(engine, servo, grace, escalations).await);
            }
            // A held model call's answer is ready: the servo is thawed
            // now, not at the next tick (the answer waits for it).
            _ = calls_moved(&mut bell) => {
                if let Next::Lost = freezer.calls_moved(ctx, id, servo).await {
                    return None;
                }
            }
            _ = usage_tick.tick() => {
                let now = tokio::time::Instant::now();
                let waits = waiting.load(std::sync::atomic::Ordering::Relaxed);
                if stopped.is_none() && !timed_out
                    && let Next::Lost = freezer.tick(ctx, id, servo, waits).await
                {
                    return None;
                }
                if (waits || freezer.is_frozen()) && !timed_out {
                    waited += now - last_tick;
                    let at = sleep.deadline() + (now - last_tick);
                    sleep.as_mut().reset(at);
                }
                last_tick = now;
                if let Some(m) = meter.map(Metered::read)
                    && m.calls > 0
                {
                    let lease = ctx.lease.clone();
                    let r = ctx
                        .db(move |s| s.set_usage(id, &lease, m.calls, m.input, m.output, m.cost, m.cached))
                        .await;
                    match r {
                        Err(e) if lease_lost(&e) => return None,
                        Err(e) => warn!(task_id = %id, error = %format!("{e:#}"), "live usage not recorded"),
                        Ok(()) => {}
                    }
                }
            }
        }
    };
    Some(Watched {
        ended,
        timed_out,
        stopped,
        waited_ms: waited.as_millis() as i64,
    })
}

/// `running`, with where (what `task status` shows); false when another
/// foreman holds the task now.
async fn mark_running(ctx: &Ctx, id: TaskId, servo: &Servo) -> bool {
    let detail = servo.running_detail();
    info!(task_id = %id, %detail, "servo running");
    let lease = ctx.lease.clone();
    match ctx.db(move |s| s.started(id, &lease, &detail)).await {
        Err(e) if lease_lost(&e) => false,
        Err(e) => {
            warn!(task_id = %id, error = %format!("{e:#}"), "running not recorded");
            true
        }
        Ok(_) => true,
    }
}

/// Asks the engine to stop the servo (the `attempt`-th time). Returns when
/// to ask again if it is still there (a failed call is never the end of a
/// timeout).
async fn stop_servo(
    engine: &Engine,
    servo: &Servo,
    grace: Duration,
    attempt: u32,
) -> tokio::time::Instant {
    let id = servo.task;
    let (how, again) = stop_step(attempt, grace);
    if how == Stop::Kill {
        warn!(task_id = %id, attempt, "servo still running after stop; killing it");
    }
    if let Err(e) = engine.stop(servo, how, grace).await {
        warn!(task_id = %id, error = %format!("{e:#}"), "stopping the servo failed; asking again");
    }
    tokio::time::Instant::now() + again
}

/// The `attempt`-th ask (0-based) to stop a servo, and how long to wait
/// before asking again if it is still there: SIGTERM first, SIGKILL after,
/// again every few seconds for as long as it takes.
pub(super) fn stop_step(attempt: u32, grace: Duration) -> (Stop, Duration) {
    let how = if attempt == 0 { Stop::Term } else { Stop::Kill };
    let again = Duration::from_secs(5)
        .min(grace + Duration::from_secs(1))
        .max(Duration::from_secs(1));
    (how, again)
}

/// A snapshot of a gateway's meter.
#[derive(Clone, Copy, Debug)]
pub(super) struct Metered {
    pub calls: i64,
    pub input: i64,
    pub output: i64,
    pub cost: f64,
    pub fatal: Option<Reason>,
    /// Input read from and written to the provider's cache.
    pub cached: (i64, i64),
}

impl Metered {
    pub(super) fn read(m: &crate::llm::Meter) -> Metered {
        use std::sync::atomic::Ordering::Relaxed;
        Metered {
            calls: m.calls.load(Relaxed) as i64,
            input: m.input_tokens.load(Relaxed) as i64,
            output: m.output_tokens.load(Relaxed) as i64,
            cost: m.cost(),
            fatal: m.fatal(),
            cached: {
                let (r, w) = m.cached();
                (r as i64, w as i64)
            },
        }
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
