//! Watching a running servo: timeout, cancel, live usage, then collection
//! and the outcome.

use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use saheeli_protocol::{Reason, TaskId};
use tracing::{error, info, warn};

use crate::collect;
use crate::docker;
use crate::gateway::Gateway;
use crate::inputs;
use crate::state::TaskState;
use crate::store::{Outcome, TaskRow, now_ms};

use super::*;

/// How watching a servo ended (unless the task was lost).
pub(super) struct Watched {
    pub exit: anyhow::Result<i64>,
    pub timed_out: bool,
    pub stopped: Option<Reason>,
    /// How long the task waited for a human meanwhile (not working time).
    pub waited_ms: i64,
}

impl Watched {
    /// The servo parked to wait for a human (and nothing stopped it).
    fn parked(&self) -> bool {
        !self.timed_out
            && self.stopped.is_none()
            && matches!(self.exit, Ok(code) if code == i64::from(saheeli_protocol::ServoExit::Parked.code()))
    }
}

/// Waits for the servo (enforcing the timeout and cancel), collects the
/// workspace, decides the outcome and cleans up.
pub(super) async fn monitor(
    ctx: Arc<Ctx>,
    task: TaskRow,
    container: String,
    gateway: Option<Gateway>,
    started_ms: i64,
    inbox: Inbox,
) -> Joined {
    let id = task.id;
    let watched = watch(&ctx, &task, &container, gateway.as_ref(), started_ms, inbox).await;
    // Only the holder collects: a foreman that was paused past its lease
    // must not write into results another one is collecting.
    let Some(watched) = watched else {
        return abandon(id, gateway).await;
    };
    if !still_held(&ctx, id).await {
        return abandon(id, gateway).await;
    }
    if watched.parked() {
        let active = now_ms() - started_ms - watched.waited_ms - task.active_ms;
        return park(&ctx, &task, Some(&container), gateway, active).await;
    }
    let d = &ctx.docker;
    if task.spec.verifies() {
        // A check the servo's end cut short: its container goes before the
        // workspace is read and its volume removed.
        if let Err(e) = docker::remove_verify_containers(d, id).await {
            warn!(task_id = %id, error = %format!("{e:#}"), "verify container not removed");
        }
    }
    let oom = docker::oom_killed(d, &container).await;
    let metered = gateway.as_ref().map(|g| Metered::read(g.meter()));

    let dest = ctx.cfg.results_dir().join(id.to_string());
    let collect_started = std::time::Instant::now();
    let collected = gather(&ctx, id, &container, &dest).await;
    let collect_ms = collect_started.elapsed().as_millis();
    cleanup(&ctx, id, Some(&container)).await;
    // Only now: Docker needs the bind-mounted socket directory to exist
    // for as long as the container does (copying out included).
    if let Some(g) = gateway {
        g.stop().await;
    }
    if let Ok(c) = &collected {
        let has_workspace = task.spec.workspace.is_some();
        record_changes(&ctx, id, has_workspace, &dest, c.truncated).await;
    }
    // The submitted workspace is in no further launch of this task; only a
    // retry by policy may still need it (`finish` hands it over).
    if task.attempt > i64::from(task.spec.retries) {
        inputs::remove_workspace(&ctx.cfg.state_dir(), id).await;
    }

    let seen = Seen {
        watched,
        oom,
        metered,
        collect_ms,
    };
    conclude(&ctx, id, &dest, collected, seen).await
}

/// What the supervisor learnt about a servo besides its workspace.
pub(super) struct Seen {
    pub watched: Watched,
    pub oom: bool,
    pub metered: Option<Metered>,
    pub collect_ms: u128,
}

/// Reads what was collected (usage, completion), decides the outcome and
/// records it.
pub(super) async fn conclude(
    ctx: &Ctx,
    id: TaskId,
    dest: &std::path::Path,
    collected: anyhow::Result<collect::Collected>,
    seen: Seen,
) -> Joined {
    let Seen {
        watched,
        oom,
        metered,
        collect_ms,
    } = seen;
    let dest = dest.to_path_buf();
    let mut outcome = Outcome {
        results_path: Some(dest.display().to_string()),
        ..Default::default()
    };
    count_usage(id, &dest, &mut outcome).await;

    let collected = match collected {
        Ok(c) => c,
        Err(e) => {
            let detail = format!("collect: {e:#}");
            error!(task_id = %id, error = %detail, "collection failed");
            outcome.results_path = None;
            return finish(
                ctx,
                id,
                TaskState::Failed,
                Reason::Collect,
                outcome,
                &detail,
            )
            .await;
        }
    };
    let cap = ctx.cfg.file.max_results_size.0;
    let mut detail = describe(id, &watched.exit, &collected, collect_ms, &dest, cap);

    let completion = match collect::read_completion(&dest, id) {
        Ok(Some(c)) => {
            outcome.steps = c.steps.into();
            outcome.input_tokens = c.usage.input_tokens as i64;
            outcome.output_tokens = c.usage.output_tokens as i64;
            Completion::Valid
        }
        Ok(None) => Completion::Absent,
        Err(why) => {
            detail.push_str(&format!("; invalid complete.json: {why}"));
            Completion::Invalid(why)
        }
    };
    // What the gateway counted beats what the servo says it used.
    if let Some(m) = &metered {
        outcome.input_tokens = m.input;
        outcome.output_tokens = m.output;
        outcome.cost_usd = m.cost;
        (outcome.cache_read_tokens, outcome.cache_write_tokens) = m.cached;
    }
    let verified = verified(ctx, id, watched.exit.as_ref().ok().copied()).await;
    let ending = Ending {
        verified,
        stopped: watched.stopped,
        truncated: collected.truncated,
        completion,
        timed_out: watched.timed_out,
        oom,
        exit: watched.exit.ok(),
        gateway_fatal: metered.and_then(|m| m.fatal),
    };
    let (state, reason) = classify(&ending);
    finish(ctx, id, state, reason, outcome, &detail).await
}

/// For a task that verifies: whether its last attempt passed (the
/// foreman's own rows, never the agent's files) and the servo then exited
/// 0, as it does only right after a passing verdict.
async fn verified(ctx: &Ctx, id: TaskId, exit: Option<i64>) -> Option<bool> {
    let r = ctx
        .db(move |s| {
            let row = s.require(&id.to_string())?;
            if !row.spec.verifies() {
                return Ok(None);
            }
            Ok(Some(s.verify_passed(id)?))
        })
        .await;
    match r {
        Ok(v) => v.map(|passed| passed && exit == Some(0)),
        Err(e) => {
            warn!(task_id = %id, error = %format!("{e:#}"), "verification records not read");
            None
        }
    }
}

/// Steps and tokens from the collected audit log (the servo's account;
/// the gateway's, when there is one, replaces the tokens later).
pub(super) async fn count_usage(id: TaskId, dest: &std::path::Path, outcome: &mut Outcome) {
    let dest = dest.to_path_buf();
    match tokio::task::spawn_blocking(move || collect::audit_totals(&dest, id)).await {
        Ok(Ok(t)) => {
            outcome.steps = t.steps.into();
            outcome.input_tokens = t.usage.input_tokens as i64;
            outcome.output_tokens = t.usage.output_tokens as i64;
            outcome.cache_read_tokens = t.usage.cache_read_tokens as i64;
            outcome.cache_write_tokens = t.usage.cache_write_tokens as i64;
            outcome.compactions = t.compactions.into();
        }
        Ok(Err(e)) => warn!(task_id = %id, error = %e, "audit log not counted"),
        Err(e) => error!(task_id = %id, error = %e, "audit log reader panicked"),
    }
}

/// The ending's detail for people (how the servo exited, what was
/// collected, what was redacted), logging what an operator should know.
fn describe(
    id: TaskId,
    exit: &anyhow::Result<i64>,
    collected: &collect::Collected,
    collect_ms: u128,
    dest: &std::path::Path,
    cap: u64,
) -> String {
    if !collected.skipped.is_empty() {
        warn!(task_id = %id, skipped = collected.skipped.len(), first = %collected.skipped[0], "unsafe entries not collected");
    }
    let exit_desc = match exit {
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
    if collected.truncated {
        warn!(task_id = %id, cap, "results over the size cap; collection stopped");
    }
    detail
}

/// Waits for the servo to exit, stopping it at the timeout or when asked
/// (escalating to SIGKILL until it is gone) and recording live usage.
/// None: the task was taken over by another foreman meanwhile.
async fn watch(
    ctx: &Ctx,
    task: &TaskRow,
    container: &str,
    gateway: Option<&Gateway>,
    started_ms: i64,
    mut inbox: Inbox,
) -> Option<Watched> {
    let id = task.id;
    let d = &ctx.docker;
    let grace = ctx.cfg.file.stop_grace;
    let elapsed = Duration::from_millis((now_ms() - started_ms).max(0) as u64);
    let deadline = Duration::from_secs(task.spec.timeout_s).saturating_sub(elapsed);
    let mut timed_out = false;
    let mut stopped: Option<Reason> = None;
    // Set once the servo was asked to stop: when to ask again, harder.
    let mut escalate_at: Option<tokio::time::Instant> = None;
    let mut escalations = 0u32;

    let mut wait = Box::pin(docker::wait(d, container));
    let mut reconnects = 0;
    let sleep = tokio::time::sleep(deadline);
    tokio::pin!(sleep);
    let mut usage_tick = tokio::time::interval(Duration::from_secs(1));
    let far = tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
    let lost = inbox.lost();
    // Time spent waiting for a human does not count against the timeout.
    let waiting = inbox.waiting();
    let mut waited = Duration::ZERO;
    let mut last_tick = tokio::time::Instant::now();
    let exit = loop {
        tokio::select! {
            r = &mut wait => match r {
                // The daemon went away (a restart?): wait for it, then ask again.
                Err(e) if reconnects < 5 => {
                    reconnects += 1;
                    warn!(task_id = %id, error = %format!("{e:#}"), "lost Docker while waiting; reconnecting");
                    docker::await_daemon(d, DAEMON_PATIENCE).await;
                    wait = Box::pin(docker::wait(d, container));
                }
                r => break r,
            },
            _ = lost.cancelled() => return None,
            _ = &mut sleep, if !timed_out && stopped.is_none() => {
                if !still_held(ctx, id).await {
                    return None;
                }
                warn!(task_id = %id, timeout_s = task.spec.timeout_s, "timeout: stopping servo");
                timed_out = true;
                escalate_at = Some(stop_servo(d, id, container, grace, 0).await);
            }
            command = inbox.recv(), if stopped.is_none() && !timed_out => {
                let Command::Stop(reason) = command;
                if !still_held(ctx, id).await {
                    return None;
                }
                info!(task_id = %id, %reason, "stopping servo");
                stopped = Some(reason);
                escalate_at = Some(stop_servo(d, id, container, grace, 0).await);
            }
            // Asked to stop, and still not gone: the stop call failed or
            // the daemon lost it. Ask again, with SIGKILL.
            _ = tokio::time::sleep_until(escalate_at.unwrap_or(far)), if escalate_at.is_some() => {
                escalations += 1;
                escalate_at = Some(stop_servo(d, id, container, grace, escalations).await);
            }
            _ = usage_tick.tick(), if gateway.is_some() => {
                let now = tokio::time::Instant::now();
                if waiting.load(std::sync::atomic::Ordering::Relaxed) && !timed_out {
                    waited += now - last_tick;
                    let at = sleep.deadline() + (now - last_tick);
                    sleep.as_mut().reset(at);
                }
                last_tick = now;
                if let Some(m) = gateway.map(|g| Metered::read(g.meter()))
                    && m.calls > 0
                {
                    let lease = ctx.lease.clone();
                    let r = ctx
                        .db(move |s| s.set_usage(id, &lease, m.calls, m.input, m.output, m.cost, m.cached))
                        .await;
                    if let Err(e) = r && lease_lost(&e) {
                        return None;
                    }
                }
            }
        }
    };
    Some(Watched {
        exit,
        timed_out,
        stopped,
        waited_ms: waited.as_millis() as i64,
    })
}

/// Asks Docker to stop the servo: SIGTERM then SIGKILL after `grace` the
/// first time, SIGKILL after that. Returns when to ask again if the servo
/// is still there (a failed call is never the end of a timeout).
pub(super) async fn stop_servo(
    d: &Docker,
    id: TaskId,
    container: &str,
    grace: Duration,
    attempt: u32,
) -> tokio::time::Instant {
    let (how, again) = stop_step(attempt, grace);
    let r = match how {
        Stop::Term => docker::stop(d, container, grace).await,
        Stop::Kill => {
            warn!(task_id = %id, attempt, "servo still running after stop; killing it");
            docker::kill(d, container).await
        }
    };
    if let Err(e) = r {
        warn!(task_id = %id, error = %format!("{e:#}"), "stopping the servo failed; asking again");
    }
    tokio::time::Instant::now() + again
}

/// How the servo is asked to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stop {
    /// SIGTERM, then SIGKILL after the grace period (Docker's stop).
    Term,
    Kill,
}

/// The `attempt`-th ask (0-based) to stop a servo, and how long to wait
/// before asking again if it is still there: SIGTERM first, SIGKILL after,
/// again every few seconds for as long as it takes. A failed call is never
/// the end of a timeout.
pub(super) fn stop_step(attempt: u32, grace: Duration) -> (Stop, Duration) {
    let how = if attempt == 0 { Stop::Term } else { Stop::Kill };
    let again = Duration::from_secs(5)
        .min(grace + Duration::from_secs(1))
        .max(Duration::from_secs(1));
    (how, again)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 9 §6: a stop that did not take is asked again, as a kill.
    #[test]
    fn a_stop_that_did_not_take_escalates_to_kill_and_keeps_asking() {
        let grace = Duration::from_secs(10);
        assert_eq!(stop_step(0, grace), (Stop::Term, Duration::from_secs(5)));
        for attempt in 1..5 {
            assert_eq!(
                stop_step(attempt, grace),
                (Stop::Kill, Duration::from_secs(5))
            );
        }
        assert_eq!(stop_step(1, Duration::ZERO).1, Duration::from_secs(1));
    }
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
    pub(super) fn read(m: &crate::gateway::Meter) -> Metered {
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
