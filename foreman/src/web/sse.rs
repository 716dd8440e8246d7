//! Server-sent events, live and resumable.
//!
//! - `GET /api/events`: every task's events (transitions and human acts)
//!   as they are written. Each message's `id` is its event row's id; a
//!   client resuming with `Last-Event-ID: N` gets every row after N from
//!   the trail, then the live ones.
//! - `GET /api/tasks/{id}/events`: one task's events (`event: task`) and
//!   its servo's audit lines (`event: audit`), from the start (or after
//!   `Last-Event-ID`), live while it runs, then `event: end`. Audit lines
//!   come from the container logs while the task runs and from the
//!   collected audit log once it has ended.
//!
//! A task stream's ids are cursors `SEQ.TS.K`: the last event row sent,
//! and the last audit line sent as its second (the servo stamps every line
//! with one) and its number among that second's lines. A container's log
//! and the collected log hold the same lines in the same order, so the
//! cursor means the same in both, and a resumed stream neither repeats
//! nor skips a line (a task parked before the stream opened has the lines
//! of its earlier containers only in the collected log, once it ends).

use std::collections::HashSet;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use saheeli_protocol::TaskId;
use serde_json::json;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinSet;

use crate::collect::{self, Line};
use crate::events::TaskEvent;
use crate::output;
use crate::state::TaskState;
use crate::store::StoreError;

use super::error::ApiError;
use super::server::Shared;
use super::trail::{AuditLine, Cursor, Positions, follow_container};

/// How often a task stream looks for new containers and events anyway.
const TICK: Duration = Duration::from_secs(1);

fn event_json(e: &TaskEvent) -> serde_json::Value {
    json!({
        "seq": e.seq,
        "task_id": e.task_id.to_string(),
        "at": saheeli_protocol::rfc3339(
            std::time::UNIX_EPOCH + Duration::from_millis(e.at_ms.max(0) as u64)
        ),
        "at_ms": e.at_ms,
        "from": e.from.map(TaskState::as_str),
        "to": e.to.as_str(),
        "reason": e.reason.map(|r| r.to_string()),
        "detail": e.detail,
        "kind": e.kind,
        "by": e.actor,
    })
}

fn last_event_id(headers: &HeaderMap) -> Result<Option<Cursor>, ApiError> {
    let Some(v) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let s = v.to_str().unwrap_or("");
    Cursor::parse(s).map(Some).ok_or_else(|| {
        ApiError::bad_input(format!(
            "`Last-Event-ID` `{s}` is not an id this server sent (`SEQ` or `SEQ.TS.K`)"
        ))
    })
}

/// An SSE response fed by a channel (the producer stops when the client
/// goes: its sends fail).
fn sse_from(rx: mpsc::Receiver<Event>) -> Response {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// `GET /api/events`.
pub(super) async fn all_events(
    State(web): State<Shared>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let after = last_event_id(&headers)?.map(|c| c.seq);
    // Subscribed before reading where the trail ends: nothing falls between.
    let bus = web.bus.subscribe();
    let after = match after {
        Some(a) => a,
        None => web.db(|s| s.last_event_seq()).await?,
    };
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(feed_all(web, bus, after, tx));
    Ok(sse_from(rx))
}

async fn feed_all(
    web: Shared,
    mut bus: broadcast::Receiver<TaskEvent>,
    mut after: i64,
    tx: mpsc::Sender<Event>,
) {
    let send = |e: &TaskEvent| {
        Event::default()
            .event("task")
            .id(e.seq.to_string())
            .json_data(event_json(e))
            .expect("JSON serializes")
    };
    loop {
        // Catch up from the trail (at the start, and after falling behind).
        loop {
            let Ok(rows) = web.db(move |s| s.events_after(after, 500)).await else {
                return;
            };
            if rows.is_empty() {
                break;
            }
            for r in rows {
                let e = TaskEvent::from(r);
                after = e.seq;
                if tx.send(send(&e)).await.is_err() {
                    return;
                }
            }
        }
        loop {
            let got = tokio::select! {
                _ = tx.closed() => return,
                _ = web.shutdown.cancelled() => return,
                got = bus.recv() => got,
            };
            match got {
                Ok(e) if e.seq > after => {
                    after = e.seq;
                    if tx.send(send(&e)).await.is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => break,
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }
}

/// `GET /api/tasks/{id}/events`.
pub(super) async fn task_events(
    State(web): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let cursor = last_event_id(&headers)?.unwrap_or_default();
    let id = web.db(move |s| s.require(&id).map(|t| t.id)).await?;
    let (tx, rx) = mpsc::channel(64);
    let feed = TaskFeed {
        bus: web.bus.subscribe(),
        web,
        id,
        cur: cursor,
        tx,
    };
    tokio::spawn(feed.run());
    Ok(sse_from(rx))
}

/// One task stream's producer.
struct TaskFeed {
    web: Shared,
    id: TaskId,
    bus: broadcast::Receiver<TaskEvent>,
    cur: Cursor,
    tx: mpsc::Sender<Event>,
}

/// Why a task stream's wait ended.
enum Wake {
    Look,
    Gone,
}

impl TaskFeed {
    async fn run(mut self) {
        let (line_tx, mut lines) = mpsc::channel::<AuditLine>(256);
        let mut followed: HashSet<String> = HashSet::new();
        let mut followers = JoinSet::new();
        let mut tick = tokio::time::interval(TICK);
        let state = loop {
            let Some(state) = self.look().await else {
                return;
            };
            if state.is_terminal() {
                break state;
            }
            if state != TaskState::Queued
                && let Ok(logs) = self.web.engine.servo_logs(self.id).await
            {
                for (cid, log) in logs {
                    if followed.insert(cid) {
                        followers.spawn(follow_container(log, line_tx.clone()));
                    }
                }
            }
            if let Wake::Gone = self.wait(&mut lines, &mut tick).await {
                return;
            }
        };
        drop(line_tx);
        // The containers' logs end with their containers: send what is left.
        let deadline = tokio::time::sleep(Duration::from_secs(5));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                line = lines.recv() => match line {
                    Some(l) => if !self.send_line(l).await { return },
                    None => break,
                },
                _ = &mut deadline => break,
            }
        }
        followers.abort_all();
        if !self.send_collected().await || self.look().await.is_none() {
            return;
        }
        let end = Event::default()
            .event("end")
            .id(self.cur.id())
            .json_data(json!({"state": state.as_str()}))
            .expect("JSON serializes");
        let _ = self.tx.send(end).await;
    }

    /// Sends the task's new event rows; its state (None: stop).
    async fn look(&mut self) -> Option<TaskState> {
        let (id, after) = (self.id, self.cur.seq);
        let (rows, state) = self
            .web
            .db(move |s| {
                let rows = s.task_events_after(id, after, 1000)?;
                Ok::<_, StoreError>((rows, s.require(&id.to_string())?.state))
            })
            .await
            .ok()?;
        for r in rows {
            let e = TaskEvent::from(r);
            self.cur.seq = e.seq;
            let ev = Event::default()
                .event("task")
                .id(self.cur.id())
                .json_data(event_json(&e))
                .expect("JSON serializes");
            self.tx.send(ev).await.ok()?;
        }
        Some(state)
    }

    /// Waits for this task's next event, a tick, or the client leaving;
    /// sends audit lines as they come meanwhile.
    async fn wait(
        &mut self,
        lines: &mut mpsc::Receiver<AuditLine>,
        tick: &mut tokio::time::Interval,
    ) -> Wake {
        loop {
            tokio::select! {
                _ = self.tx.closed() => return Wake::Gone,
                _ = self.web.shutdown.cancelled() => return Wake::Gone,
                got = self.bus.recv() => match got {
                    Ok(e) if e.task_id != self.id => {}
                    _ => return Wake::Look,
                },
                Some(line) = lines.recv() => if !self.send_line(line).await {
                    return Wake::Gone;
                },
                _ = tick.tick() => return Wake::Look,
            }
        }
    }

    /// Sends a line past the cursor; false when the client is gone.
    async fn send_line(&mut self, line: AuditLine) -> bool {
        if let Some(live) = &line.live {
            // Live only, and sent without an id: a resumed stream goes on
            // from the last audit line (issue 29).
            if !self.cur.admits_live(line.at) {
                return true;
            }
            let delta = live.text.as_deref().map(|t| {
                t.split('\n')
                    .map(|l| output::printable(l).into_owned())
                    .collect::<Vec<_>>()
                    .join("\n")
            });
            let ev = Event::default()
                .event("audit")
                .json_data(json!({"text": line.text, "kind": line.kind, "delta": delta}))
                .expect("JSON serializes");
            return self.tx.send(ev).await.is_ok();
        }
        if !self.cur.admits(line.at) {
            return true;
        }
        self.cur.ts = line.at.0;
        self.cur.k = line.at.1;
        let ev = Event::default()
            .event("audit")
            .id(self.cur.id())
            .json_data(json!({"text": line.text, "kind": line.kind}))
            .expect("JSON serializes");
        self.tx.send(ev).await.is_ok()
    }

    /// Sends the collected audit log's lines past the cursor.
    async fn send_collected(&mut self) -> bool {
        let id = self.id;
        let Ok(Some(dir)) = self
            .web
            .db(move |s| s.require(&id.to_string()).map(|t| t.results_path))
            .await
        else {
            return true;
        };
        let (tx, mut rx) = mpsc::channel::<AuditLine>(256);
        let reader = tokio::task::spawn_blocking(move || {
            let Ok(Some(lines)) = collect::audit_lines(std::path::Path::new(&dir), id) else {
                return;
            };
            let mut pos = Positions::default();
            for line in lines {
                let l = match line {
                    Ok(Line::Text(t)) => AuditLine::parse(&t, &mut pos),
                    Ok(Line::TooLong(n)) => AuditLine::placeholder(
                        format!("[an audit line of {n} bytes, not shown]"),
                        &mut pos,
                    ),
                    Ok(Line::Truncated) | Err(_) => break,
                };
                if tx.blocking_send(l).is_err() {
                    return;
                }
            }
        });
        while let Some(l) = rx.recv().await {
            if !self.send_line(l).await {
                reader.abort();
                return false;
            }
        }
        true
    }
}
