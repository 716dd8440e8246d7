//! What a task's routes are served with: the task's LLM side and the
//! pieces every route shares (the desk's store connection and the lease
//! that fences its writes, the event bus, the waiting flag); each route
//! adds its own link, built from the task's spec by the route's file
//! ([`On`]).

use std::ops::Deref;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::StatusCode;
use axum::response::Response;

use crate::llm::GatewayState;
use crate::llm::task::error_response;
use crate::state::TaskState;
use crate::store::{Lease, Store, StoreError};

/// What every route of a task shares.
pub(crate) struct Ctx {
    /// The task's LLM side: its id, budget and meter, and the redactor
    /// every answer goes through.
    pub(crate) llm: Arc<GatewayState>,
    /// The desk's own connection (never queued behind the supervisors').
    pub(crate) store: Arc<Mutex<Store>>,
    pub(crate) lease: Lease,
    pub(crate) bus: crate::events::Bus,
    /// Whether the task waits (for a human, or for its children): it then
    /// holds no concurrency slot and the wait is not working time.
    pub(crate) waiting: WaitFlag,
}

/// The routes read the task's id, budget and meter as the LLM side's.
impl Deref for Ctx {
    type Target = GatewayState;

    fn deref(&self) -> &GatewayState {
        &self.llm
    }
}

/// A route's state: what every route shares, and the route's own link
/// (its settings from the task's spec).
pub(crate) struct On<L> {
    pub(crate) ctx: Arc<Ctx>,
    pub(crate) link: L,
}

impl<L> On<L> {
    pub(crate) fn new(ctx: &Arc<Ctx>, link: L) -> Arc<On<L>> {
        Arc::new(On {
            ctx: ctx.clone(),
            link,
        })
    }
}

impl<L> Deref for On<L> {
    type Target = Ctx;

    fn deref(&self) -> &Ctx {
        &self.ctx
    }
}

/// Whether a task waits, as its supervisor and the serve loop read it
/// (`Inbox::waiting`: a flag, read every tick without a query).
///
/// "Waits for a human" has one source, the task's state in SQLite
/// (`TaskState::is_waiting`). This flag caches it, and its one writer is
/// the task's gateway: after each desk call that can move the state (an
/// ask, a reply taken, the inbox), `Ctx::moved` reads the
/// state back under the same hold of the store and the flag follows it.
/// A wait for children (`wait_tasks`) is no state of its own; it is kept
/// apart and the flag is set while either wait lasts.
#[derive(Clone)]
pub(crate) struct WaitFlag {
    /// What the readers see: `human || children`.
    shared: Arc<AtomicBool>,
    human: Arc<AtomicBool>,
    children: Arc<AtomicBool>,
}

impl WaitFlag {
    pub fn new(shared: Arc<AtomicBool>) -> WaitFlag {
        WaitFlag {
            shared,
            human: Arc::default(),
            children: Arc::default(),
        }
    }

    /// The task's state after a desk call: a waiting state sets the flag.
    pub(crate) fn follow(&self, state: TaskState) {
        self.human.store(state.is_waiting(), Ordering::Relaxed);
        self.publish();
    }

    /// The task's servo waits for its children (`wait_tasks`), or not.
    pub(crate) fn children(&self, waiting: bool) {
        self.children.store(waiting, Ordering::Relaxed);
        self.publish();
    }

    fn publish(&self) {
        let waits = self.human.load(Ordering::Relaxed) || self.children.load(Ordering::Relaxed);
        self.shared.store(waits, Ordering::Relaxed);
    }
}

impl Ctx {
    /// A desk call that can move the task's state and reads it back
    /// itself, under the same hold of the store: the waiting flag follows
    /// the state it returns (as [`Ctx::moved`], without another query).
    pub(crate) async fn followed<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store, &Lease) -> Result<(T, TaskState), StoreError> + Send + 'static,
    ) -> Result<T, Response> {
        let (t, state) = self.db(f).await?;
        self.waiting.follow(state);
        Ok(t)
    }

    /// A desk call that can move the task's state, then the state read
    /// back under the same hold of the store: the waiting flag follows it
    /// (its one writer; see [`WaitFlag`]).
    pub(crate) async fn moved<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store, &Lease) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, Response> {
        let id = self.task_id;
        let (t, state) = self
            .db(move |s, l| {
                let t = f(s, l)?;
                Ok((t, s.state_of(id)?))
            })
            .await?;
        self.waiting.follow(state);
        Ok(t)
    }

    pub(crate) async fn db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store, &Lease) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, Response> {
        let store = self.store.clone();
        let lease = self.lease.clone();
        let r = tokio::task::spawn_blocking(move || {
            let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut s, &lease)
        })
        .await;
        match r {
            Ok(Ok(t)) => Ok(t),
            Ok(Err(StoreError::LeaseLost(_))) => Err(error_response(
                self,
                StatusCode::CONFLICT,
                "lease_lost",
                "another foreman holds this task now",
            )),
            Ok(Err(e @ StoreError::AskOpen { .. })) => Err(error_response(
                self,
                StatusCode::CONFLICT,
                "ask_open",
                &e.to_string(),
            )),
            Ok(Err(e @ StoreError::GatewayCap(_))) => Err(error_response(
                self,
                StatusCode::TOO_MANY_REQUESTS,
                "gateway_cap",
                &e.to_string(),
            )),
            Ok(Err(e)) => Err(error_response(
                self,
                StatusCode::SERVICE_UNAVAILABLE,
                "desk",
                &format!("the desk could not be read: {e}"),
            )),
            Err(e) => Err(error_response(
                self,
                StatusCode::INTERNAL_SERVER_ERROR,
                "desk",
                &format!("desk thread failed: {e}"),
            )),
        }
    }

    /// Waits until this task's trail moves or `until` (never past it).
    pub(crate) async fn trail_moves(
        &self,
        rx: &mut tokio::sync::broadcast::Receiver<crate::events::TaskEvent>,
        until: tokio::time::Instant,
    ) {
        let id = self.task_id;
        loop {
            tokio::select! {
                ev = rx.recv() => match ev {
                    Ok(e) if e.task_id == id => return,
                    Ok(_) => {}
                    // Missed events, or no bus: look again.
                    Err(_) => return,
                },
                _ = tokio::time::sleep_until(until) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_follows_the_state_and_a_wait_for_children() {
        let shared = Arc::new(AtomicBool::new(false));
        let flag = WaitFlag::new(shared.clone());
        let now = || shared.load(Ordering::Relaxed);
        for state in TaskState::WAITING {
            flag.follow(state);
            assert!(now(), "{state}");
        }
        flag.follow(TaskState::Running);
        assert!(!now());
        flag.children(true);
        assert!(now(), "waiting for children");
        // The human wait ends; the children's goes on.
        flag.follow(TaskState::WaitingHuman);
        flag.follow(TaskState::Running);
        assert!(now());
        flag.children(false);
        assert!(!now());
    }
}
