//! Lease renewal on a timer of its own (what a supervisor does when it
//! learns another foreman holds its task is `supervisor::lease`).

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::store::Store;
use crate::supervisor::Ctx;

use super::serve::Handles;

/// Renews this foreman's leases every `lease`/5. A task missing from the
/// renewal was taken over by another foreman (this one was paused or cut
/// off for longer than the lease): its supervisor is told to let go.
pub(super) async fn renew_leases(
    ctx: Arc<Ctx>,
    store: Arc<Mutex<Store>>,
    handles: Handles,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(ctx.cfg.file.lease / 5);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let asked = std::time::Instant::now();
        let lease = ctx.lease.clone();
        let store = store.clone();
        let renewed = tokio::task::spawn_blocking(move || {
            store
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .renew(&lease)
        })
        .await;
        match renewed {
            Ok(Ok(held)) => {
                for (id, h) in handles.lock().unwrap().iter() {
                    // Claimed after the renewal was asked: not in its answer.
                    if h.since < asked && !held.contains(id) && !h.is_lost() {
                        warn!(task_id = %id, "lease lost: another foreman holds this task now");
                        h.lose();
                    }
                }
            }
            Ok(Err(e)) => warn!(error = %e, "renewing leases failed; trying again"),
            Err(e) => warn!(error = %e, "lease renewal thread panicked; trying again"),
        }
    }
}
