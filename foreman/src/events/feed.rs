//! Feeding the bus from the event trail: a reader with its own database
//! connection notices every commit (`PRAGMA data_version`, which changes
//! for writes by other connections, and the loop's connection is another)
//! and publishes the event rows it has not published yet.

use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::{Bus, TaskEvent};
use crate::store::Store;

/// How often the feeder asks whether anything was committed.
const POLL: Duration = Duration::from_millis(20);

/// Publishes every event row written after the feeder started (or after
/// `after`, an event id) until `stop`, and what was written before `stop`.
/// Its SQLite work runs on blocking threads, off the async ones.
pub(crate) async fn feed(database: PathBuf, bus: Bus, after: Option<i64>, stop: CancellationToken) {
    let opened = tokio::task::spawn_blocking(move || -> anyhow::Result<(Store, i64)> {
        let store = Store::open(&database)?;
        let start = match after {
            Some(seq) => seq,
            None => store.last_event_seq()?,
        };
        Ok((store, start))
    })
    .await;
    let (store, mut seen) = match opened {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return warn!(error = %format!("{e:#}"), "event feed not started"),
        Err(e) => return warn!(error = %e, "event feed not started"),
    };
    let store = std::sync::Arc::new(std::sync::Mutex::new(store));
    let mut version = None;
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Stopping: one last read, so nothing already written is missed.
        let last_round = tokio::select! {
            _ = stop.cancelled() => true,
            _ = tick.tick() => false,
        };
        let store = store.clone();
        let last = if last_round { None } else { version };
        let read = tokio::task::spawn_blocking(move || {
            let s = store.lock().unwrap_or_else(|p| p.into_inner());
            let v = s.data_version()?;
            if Some(v) == last {
                return Ok((v, Vec::new()));
            }
            let rows = s.events_after(seen, 1000)?;
            Ok::<_, crate::store::StoreError>((
                v,
                rows.into_iter().map(TaskEvent::from).collect::<Vec<_>>(),
            ))
        })
        .await;
        match read {
            Ok(Ok((v, events))) => {
                // A full page may hide more: look again next tick.
                version = if events.len() == 1000 { None } else { Some(v) };
                for e in events {
                    seen = e.seq;
                    bus.publish(e);
                }
            }
            Ok(Err(e)) => warn!(error = %e, "reading the event trail failed; trying again"),
            Err(e) => warn!(error = %e, "event feed thread panicked; trying again"),
        }
        if last_round {
            return;
        }
    }
}

impl From<crate::store::TrailRow> for TaskEvent {
    fn from(r: crate::store::TrailRow) -> TaskEvent {
        TaskEvent {
            seq: r.seq,
            task_id: r.task_id,
            at_ms: r.at,
            from: r.from,
            to: r.to,
            reason: r.reason.and_then(|s| s.parse().ok()),
            detail: r.detail,
            kind: r.kind,
            actor: r.actor,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::TaskState;
    use saheeli_protocol::TaskId;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_commit_of_another_connection_is_published_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("q.db");
        let mut writer = Store::open(&db).unwrap();
        let spec: crate::spec::TaskSpec = serde_json::from_value(serde_json::json!({
            "title": "t", "prompt_path": "p.md", "body": "b", "model": "m",
            "max_steps": 1, "max_tokens": null, "max_cost": null, "retries": 0,
            "retry_on": [], "timeout_s": 60, "network": "none", "memory": 1,
            "cpus": 1.0, "pids": 1, "env": {}, "max_output_bytes": 1,
            "replay": null, "workspace": null
        }))
        .unwrap();
        let before = TaskId::new();
        writer.submit(before, &spec, 0, None, 1).unwrap();

        let bus = Bus::new(64);
        let mut rx = bus.subscribe();
        let stop = CancellationToken::new();
        let feeder = tokio::spawn(feed(db.clone(), bus.clone(), None, stop.clone()));
        // Let the feeder open and note where the trail ends.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let id = TaskId::new();
        writer.submit(id, &spec, 0, None, 1).unwrap();
        writer.request_cancel(id).unwrap();
        // Written just before the stop: still published.
        let last = TaskId::new();
        writer.submit(last, &spec, 0, None, 1).unwrap();
        stop.cancel();
        feeder.await.unwrap();

        let mut got = Vec::new();
        while let Ok(e) = rx.try_recv() {
            got.push((e.task_id, e.to, e.reason));
        }
        assert_eq!(
            got,
            vec![
                (id, TaskState::Queued, None),
                (
                    id,
                    TaskState::Cancelled,
                    Some(saheeli_protocol::Reason::Cancelled)
                ),
                (last, TaskState::Queued, None),
            ],
            "the event before the feeder started is not replayed"
        );
    }
}
