//! Freezing a waiting servo (issue 51, `suspend_after`): once the task's
//! waiting flag has held for `suspend_after`, or every model call of its
//! agent has been held by the gateway that long (`llm::held`: a rate-limit
//! wait, a provider's Retry-After, a slow model), the engine freezes the
//! servo's container (the cgroup freezer). A wait's freeze is thawed by
//! anything that moves the task's trail after the wait began (an answer,
//! an approval, a resume, a message, a cancel) or ends one of its
//! children; a model call's as soon as no call is held any more, before
//! its answer goes back (the answer waits for it). Both are thawed by a
//! stop, before the servo is asked to end. A frozen servo answers
//! nothing: it is thawed before anything needs it, never after.
//!
//! Frozen time is waiting time: the watch moves the timeout back by it as
//! by any wait (the servo's own deadline stands still while it waits:
//! `Human::wait_begins`, and moves back by any time it did not run), and
//! a frozen servo holds no slot.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use super::{Ctx, lease_lost};
use crate::backend::Servo;
use crate::llm::held::Held;
use crate::store::{TaskRow, now_ms};

/// One watched servo's freezer.
pub(super) struct Freezer {
    /// `suspend_after`; None: never (unset, or the engine cannot).
    after: Option<Duration>,
    /// Since when the task waits, and where the trail stood then.
    waiting: Option<(Instant, i64)>,
    /// Since when the servo is frozen, and for what.
    frozen: Option<(Instant, Cause)>,
    /// The agent's model calls the gateway holds (None: no gateway).
    held: Option<Arc<Held>>,
    /// The supervisor's flag for admission (a frozen servo holds no slot).
    flag: Arc<AtomicBool>,
    /// A foreman that stopped left the servo frozen: thaw it first.
    inherited: bool,
}

/// What a freeze is for, and so what thaws it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cause {
    /// The task waits; the trail's mark when the wait began.
    Wait(i64),
    /// Its agent's model calls are held (`llm::held`).
    Model,
}

/// What the watch does next.
pub(super) enum Next {
    Go,
    /// Another foreman holds the task now.
    Lost,
}

impl Freezer {
    pub fn new(
        ctx: &Ctx,
        task: &TaskRow,
        flag: Arc<AtomicBool>,
        held: Option<Arc<Held>>,
    ) -> Freezer {
        Freezer {
            after: ctx.cfg.file.suspend_after.map(|t| t.0),
            waiting: None,
            frozen: None,
            held,
            flag,
            inherited: task.frozen_at.is_some(),
        }
    }

    pub fn is_frozen(&self) -> bool {
        self.frozen.is_some() || self.inherited
    }

    /// One look (every second of the watch): `waits` is the task's
    /// waiting flag now.
    pub async fn tick(
        &mut self,
        ctx: &Ctx,
        id: saheeli_protocol::TaskId,
        servo: &Servo,
        waits: bool,
    ) -> Next {
        if self.inherited {
            return self
                .thaw(ctx, id, servo, "the foreman that froze it stopped")
                .await;
        }
        match self.frozen {
            Some((_, Cause::Model)) => return self.calls_moved(ctx, id, servo).await,
            Some((_, Cause::Wait(mark))) => {
                return match ctx.db(move |s| s.moved_since(id, mark)).await {
                    Ok(true) => self.thaw(ctx, id, servo, "the wait is over").await,
                    Ok(false) => Next::Go,
                    Err(e) => {
                        warn!(task_id = %id, error = %format!("{e:#}"), "could not look whether a frozen servo's wait is over");
                        Next::Go
                    }
                };
            }
            None => {}
        }
        let Some(after) = self.after else {
            return Next::Go;
        };
        if !waits {
            self.waiting = None;
            return self.model_look(ctx, id, servo, after).await;
        }
        let (since, mark) = match self.waiting {
            Some(w) => w,
            None => match ctx.db(|s| s.trail_mark()).await {
                Ok(mark) => *self.waiting.insert((Instant::now(), mark)),
                Err(e) => {
                    warn!(task_id = %id, error = %format!("{e:#}"), "could not mark the trail");
                    return Next::Go;
                }
            },
        };
        if since.elapsed() < after {
            return Next::Go;
        }
        let waited = since.elapsed();
        let t0 = Instant::now();
        match self.engine_freeze(ctx, id, servo).await {
            Some(true) => {}
            Some(false) => return Next::Go,
            None => {
                self.waiting = Some((Instant::now(), mark));
                return Next::Go;
            }
        }
        let what = format!("{}s of waiting", waited.as_secs());
        self.frozen_now(ctx, id, Cause::Wait(mark), &what, t0.elapsed())
            .await
    }

    /// The model calls' look: every call held for `after` or more freezes
    /// the servo; a call answered during the freeze thaws it again at once.
    async fn model_look(
        &mut self,
        ctx: &Ctx,
        id: saheeli_protocol::TaskId,
        servo: &Servo,
        after: Duration,
    ) -> Next {
        let Some(held) = self.held.clone() else {
            return Next::Go;
        };
        let Some((waited, why)) = held.freezing(after) else {
            return Next::Go;
        };
        let t0 = Instant::now();
        let froze = self.engine_freeze(ctx, id, servo).await;
        let still = held.froze(froze == Some(true));
        if froze != Some(true) {
            return Next::Go;
        }
        let what = format!(
            "{}s of a model call held ({})",
            waited.as_secs(),
            why.as_str()
        );
        if let Next::Lost = self
            .frozen_now(ctx, id, Cause::Model, &what, t0.elapsed())
            .await
        {
            return Next::Lost;
        }
        if still {
            Next::Go
        } else {
            self.thaw(ctx, id, servo, "the model call is answered")
                .await
        }
    }

    /// A model call ended (or the gateway's bell rang): a servo frozen for
    /// its model calls is thawed once none is held, its answer waiting.
    pub async fn calls_moved(
        &mut self,
        ctx: &Ctx,
        id: saheeli_protocol::TaskId,
        servo: &Servo,
    ) -> Next {
        let held = self.held.as_ref().is_some_and(|h| h.holds());
        match self.frozen {
            Some((_, Cause::Model)) if !held => {
                self.thaw(ctx, id, servo, "the model call is answered")
                    .await
            }
            _ => Next::Go,
        }
    }

    /// The engine freezes the servo: Some(true) done, Some(false) never
    /// (this engine cannot), None failed (tried again later).
    async fn engine_freeze(
        &mut self,
        ctx: &Ctx,
        id: saheeli_protocol::TaskId,
        servo: &Servo,
    ) -> Option<bool> {
        match ctx.engine.freeze(servo).await {
            Ok(true) => Some(true),
            Ok(false) => {
                info!(task_id = %id, "this engine does not freeze servos; it waits unfrozen");
                self.after = None;
                Some(false)
            }
            Err(e) => {
                warn!(task_id = %id, error = %format!("{e:#}"), "freezing the servo failed; trying again later");
                None
            }
        }
    }

    /// The servo is frozen (after `what`, in `took`): flagged and recorded.
    async fn frozen_now(
        &mut self,
        ctx: &Ctx,
        id: saheeli_protocol::TaskId,
        cause: Cause,
        what: &str,
        took: Duration,
    ) -> Next {
        self.frozen = Some((Instant::now(), cause));
        self.flag.store(true, Ordering::Relaxed);
        let detail = format!(
            "servo frozen after {what} (froze in {} ms)",
            took.as_millis()
        );
        info!(task_id = %id, freeze_ms = took.as_millis() as u64, "servo frozen while it waits");
        let (lease, at) = (ctx.lease.clone(), now_ms());
        match ctx.db(move |s| s.froze(id, &lease, at, &detail)).await {
            Err(e) if lease_lost(&e) => Next::Lost,
            Err(e) => {
                warn!(task_id = %id, error = %format!("{e:#}"), "freeze not recorded");
                Next::Go
            }
            Ok(()) => Next::Go,
        }
    }

    /// Thaws a frozen servo (`why` goes in its `thawed` event); nothing
    /// when it is not frozen. A failed thaw is tried again next look.
    pub async fn thaw(
        &mut self,
        ctx: &Ctx,
        id: saheeli_protocol::TaskId,
        servo: &Servo,
        why: &str,
    ) -> Next {
        if !self.is_frozen() {
            return Next::Go;
        }
        let t0 = Instant::now();
        if let Err(e) = ctx.engine.thaw(servo).await {
            warn!(task_id = %id, error = %format!("{e:#}"), "thawing the servo failed; trying again");
            return Next::Go;
        }
        let took = t0.elapsed();
        // The answers waiting for the thaw go back now.
        if let Some(held) = &self.held {
            held.thawed();
        }
        let frozen_for = self.frozen.map(|(at, _)| at.elapsed().as_secs());
        self.frozen = None;
        self.inherited = false;
        self.waiting = None;
        self.flag.store(false, Ordering::Relaxed);
        let detail = match frozen_for {
            Some(s) => format!(
                "servo thawed after {s}s frozen (thawed in {} ms): {why}",
                took.as_millis()
            ),
            None => format!("servo thawed (thawed in {} ms): {why}", took.as_millis()),
        };
        info!(task_id = %id, thaw_ms = took.as_millis() as u64, why, "servo thawed");
        let lease = ctx.lease.clone();
        match ctx.db(move |s| s.thawed(id, &lease, &detail)).await {
            Err(e) if lease_lost(&e) => Next::Lost,
            Err(e) => {
                warn!(task_id = %id, error = %format!("{e:#}"), "thaw not recorded");
                Next::Go
            }
            Ok(()) => Next::Go,
        }
    }
}
