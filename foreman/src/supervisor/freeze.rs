//! Freezing a waiting servo (issue 51, `suspend_after`): once the task's
//! waiting flag has held for `suspend_after`, the engine freezes the
//! servo's container (the cgroup freezer); anything that moves the task's
//! trail after the wait began (an answer, an approval, a resume, a
//! message, a cancel) or ends one of its children thaws it, and so does a
//! stop, before the servo is asked to end. A frozen servo answers nothing:
//! it is thawed before anything needs it, never after.
//!
//! Frozen time is waiting time: the watch moves the timeout back by it as
//! by any wait (the servo's own deadline stands still while it waits:
//! `Human::wait_begins`), and a frozen servo holds no slot.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use super::{Ctx, lease_lost};
use crate::backend::Servo;
use crate::store::{TaskRow, now_ms};

/// One watched servo's freezer.
pub(super) struct Freezer {
    /// `suspend_after`; None: never (unset, or the engine cannot).
    after: Option<Duration>,
    /// Since when the task waits, and where the trail stood then.
    waiting: Option<(Instant, i64)>,
    /// Since when the servo is frozen, and the trail's mark of its wait.
    frozen: Option<(Instant, i64)>,
    /// The supervisor's flag for admission (a frozen servo holds no slot).
    flag: Arc<AtomicBool>,
    /// A foreman that stopped left the servo frozen: thaw it first.
    inherited: bool,
}

/// What the watch does next.
pub(super) enum Next {
    Go,
    /// Another foreman holds the task now.
    Lost,
}

impl Freezer {
    pub fn new(ctx: &Ctx, task: &TaskRow, flag: Arc<AtomicBool>) -> Freezer {
        Freezer {
            after: ctx.cfg.file.suspend_after.map(|t| t.0),
            waiting: None,
            frozen: None,
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
        if let Some((_, mark)) = self.frozen {
            return match ctx.db(move |s| s.moved_since(id, mark)).await {
                Ok(true) => self.thaw(ctx, id, servo, "the wait is over").await,
                Ok(false) => Next::Go,
                Err(e) => {
                    warn!(task_id = %id, error = %format!("{e:#}"), "could not look whether a frozen servo's wait is over");
                    Next::Go
                }
            };
        }
        let Some(after) = self.after else {
            return Next::Go;
        };
        if !waits {
            self.waiting = None;
            return Next::Go;
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
        self.freeze(ctx, id, servo, since, mark).await
    }

    async fn freeze(
        &mut self,
        ctx: &Ctx,
        id: saheeli_protocol::TaskId,
        servo: &Servo,
        since: Instant,
        mark: i64,
    ) -> Next {
        let t0 = Instant::now();
        match ctx.engine.freeze(servo).await {
            Ok(true) => {}
            Ok(false) => {
                info!(task_id = %id, "this engine does not freeze servos; it waits unfrozen");
                self.after = None;
                return Next::Go;
            }
            Err(e) => {
                warn!(task_id = %id, error = %format!("{e:#}"), "freezing the servo failed; trying again later");
                self.waiting = Some((Instant::now(), mark));
                return Next::Go;
            }
        }
        let took = t0.elapsed();
        self.frozen = Some((Instant::now(), mark));
        self.flag.store(true, Ordering::Relaxed);
        let detail = format!(
            "servo frozen after {}s of waiting (froze in {} ms)",
            since.elapsed().as_secs(),
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
