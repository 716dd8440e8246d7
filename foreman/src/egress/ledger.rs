//! What the proxy saw: one [`Entry`] per connection asked for, allowed or
//! refused (phase, host, port, bytes each way, time), kept in the store
//! (`egress` table), counted in `/metrics` and logged for the audit trail.

use std::sync::{Arc, Mutex};

use crate::store::Store;
pub(crate) use crate::store::{EgressEntry as Entry, EgressVerdict as Verdict};
use saheeli_protocol::TaskId;

/// Where a task's entries go.
#[derive(Clone)]
pub(crate) struct Ledger {
    pub task: TaskId,
    pub store: Arc<Mutex<Store>>,
}

impl Ledger {
    /// Keeps `entry` (off the async threads), counts it and logs it.
    pub async fn record(&self, entry: Entry) {
        crate::metrics::egress().record(&entry);
        tracing::info!(
            task_id = %self.task,
            phase = entry.phase.as_str(),
            host = %entry.host,
            port = entry.port,
            verdict = entry.verdict.as_str(),
            reason = entry.reason.as_deref().unwrap_or(""),
            bytes_up = entry.bytes_up,
            bytes_down = entry.bytes_down,
            ms = entry.ms,
            "egress"
        );
        let (store, task) = (self.store.clone(), self.task);
        let kept = tokio::task::spawn_blocking(move || {
            store
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .egress_record(task, &entry)
        })
        .await;
        match kept {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(task_id = %self.task, error = %e, "egress: the entry was not kept")
            }
            Err(e) => {
                tracing::warn!(task_id = %self.task, error = %e, "egress: the entry was not kept")
            }
        }
    }
}
