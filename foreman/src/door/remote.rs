//! The gateway over TCP, for servos on other hosts (the Swarm backend).
//!
//! One listener at `swarm.gateway_listen` serves every remote task. Each
//! request names its task (`x-saheeli-task`) and carries that task's token
//! (`Authorization: Bearer …`), compared in constant time; the request then
//! goes to that task's own routes, the very handlers of the unix-socket
//! path (same budget, ledger, desk, verify and capabilities). No token or a
//! malformed one: 401; an unknown task, or a token that is not this task's
//! (another task's included): 403. The token reached the container only
//! as a Swarm secret; it is never logged.
//!
//! Two routes exist only here: `GET launch` and `GET workspace` (what the
//! servo needs to start) and `PUT workspace`, the servo's whole workspace
//! as a tar, extracted once into `results/<task_id>/` by `collect::extract`
//! (the same hostile-archive rules and size cap as any collection). A
//! servo that parked says so (`x-saheeli-parked: 1`): its upload is kept as
//! the task's parked workspace instead (`.saheeli/parked/<id>/`, the same
//! rules), and the next launch's `GET workspace` serves that, packed again.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use saheeli_protocol::TaskId;
use saheeli_protocol::remote::{MAX_TOKEN_BYTES, PARKED_HEADER, TASK_HEADER, routes};
use tokio::sync::Notify;
use tower::ServiceExt;
use tracing::{info, warn};

use crate::collect;

/// What a remote servo fetches, and where its upload goes.
pub(crate) struct RemoteTask {
    /// The secret the servo proves itself with (64 hex digits).
    pub token: String,
    /// `protocol::Launch` as JSON.
    pub launch: String,
    /// The submitted workspace tar, when one was submitted.
    pub input: Option<PathBuf>,
    /// The workspace the task parked with, served instead of `input`
    /// (a task going on after a human replied).
    pub resume_from: Option<PathBuf>,
    /// `results/<task_id>/`.
    pub dest: PathBuf,
    /// Where an upload marked parked goes (`.saheeli/parked/<id>/`).
    pub parked_dest: PathBuf,
    pub secrets: Vec<(String, String)>,
    pub max_bytes: u64,
    /// A warm job claimed for the task (issue 53): the slot it calls as
    /// (its token is the slot's), with the task's `env:` in `launch`.
    pub slot: Option<TaskId>,
}

/// A finished upload: what was extracted, or why it failed.
pub(crate) type Uploaded = Result<Upload, String>;

/// An upload extracted.
pub(crate) struct Upload {
    pub collected: collect::Collected,
    /// The servo said it parked: it went to `parked_dest`, not `dest`.
    pub parked: bool,
}

pub(super) struct Entry {
    app: Router,
    pub(super) task: RemoteTask,
    /// Set once, by the first upload (later ones are refused).
    upload: Mutex<UploadState>,
    done: Notify,
}

#[derive(Default)]
enum UploadState {
    #[default]
    None,
    Receiving,
    Done(Option<Uploaded>),
}

/// The remote tasks a listener serves, by id.
/// Connections the shared TCP listener keeps at once: every remote servo
/// needs a handful (its calls, the desk's long polls, its upload).
const REMOTE_MAX_CONNECTIONS: usize = 2048;

#[derive(Clone, Default)]
pub(crate) struct Hub {
    tasks: Arc<Mutex<HashMap<TaskId, Arc<Entry>>>>,
    /// Warm jobs on the swarm's nodes, by slot (`slots`).
    pub(super) slots: super::slots::Slots,
}

impl Hub {
    /// Listens on `addr` until `stop`; the bound address is returned.
    pub async fn listen(
        &self,
        addr: &str,
        stop: tokio_util::sync::CancellationToken,
    ) -> anyhow::Result<std::net::SocketAddr> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on `swarm.gateway_listen` `{addr}`"))?;
        let bound = listener.local_addr()?;
        let app = Router::new().fallback(front).with_state(self.clone());
        // The same doors as a task's socket: a cap on connections at once
        // and a time limit on a request's head (a node's servo could hold
        // connections open as well as a shell could).
        let doors = crate::listen::Doors {
            name: "remote gateway",
            task_id: None,
            max_connections: REMOTE_MAX_CONNECTIONS,
            header_timeout: super::HEADER_TIMEOUT,
        };
        tokio::spawn(crate::listen::serve(listener, app, doors, stop));
        info!(addr = %bound, "remote gateway listening");
        Ok(bound)
    }

    pub(crate) fn register(&self, id: TaskId, app: Router, task: RemoteTask) {
        let entry = Arc::new(Entry {
            app,
            task,
            upload: Mutex::new(UploadState::None),
            done: Notify::new(),
        });
        if let Some(slot) = entry.task.slot {
            self.slots.claimed(slot, id, &entry.task.token);
        }
        self.lock().insert(id, entry);
    }

    pub(crate) fn unregister(&self, id: TaskId) {
        let gone = self.lock().remove(&id);
        if let Some(slot) = gone.and_then(|e| e.task.slot) {
            self.slots.remove(slot);
        }
    }

    /// A warm job (issue 53) calling as `slot` with `token`, idle.
    pub(crate) fn add_warm(&self, slot: TaskId, token: String) {
        self.slots.add(slot, token);
    }

    /// A warm job removed before it was claimed.
    pub(crate) fn remove_warm(&self, slot: TaskId) {
        self.slots.remove(slot);
    }

    /// Gives the task claimed for warm job `slot` to it.
    pub(crate) fn release_warm(&self, slot: TaskId) {
        self.slots.release(slot);
    }

    /// The task registered as `id`.
    pub(super) fn entry(&self, id: TaskId) -> Option<Arc<Entry>> {
        self.lock().get(&id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TaskId, Arc<Entry>>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The task's upload once finished, waiting up to `patience` for it
    /// (also for one still streaming in).
    pub(crate) async fn uploaded(&self, id: TaskId, patience: Duration) -> Option<Uploaded> {
        let entry = self.lock().get(&id).cloned()?;
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let notified = entry.done.notified();
            {
                let mut state = entry.upload.lock().unwrap_or_else(|p| p.into_inner());
                if let UploadState::Done(result) = &mut *state {
                    return result.take();
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }
}

/// Every request: authenticate, then the task's own routes or the
/// workspace routes.
async fn front(State(hub): State<Hub>, mut req: Request) -> Response {
    let entry = match authenticate(&hub, &req) {
        Ok(Caller::Task(e)) => e,
        Ok(Caller::Slot(slot)) => {
            let claim = super::slots::Slots::asks_claim(&req);
            match hub.slots.front(&hub, slot, claim).await {
                super::slots::Slotted::Task(e) => e,
                super::slots::Slotted::Answer(r) => return r,
            }
        }
        Err((status, why)) => return refuse(status, why),
    };
    // The handlers behind never see the token.
    req.headers_mut().remove(header::AUTHORIZATION);
    let path = req.uri().path().to_string();
    match (req.method().clone(), path.as_str()) {
        (Method::GET, routes::LAUNCH) => (
            [(header::CONTENT_TYPE, "application/json")],
            entry.task.launch.clone(),
        )
            .into_response(),
        (Method::GET, routes::WORKSPACE) => submitted(&entry).await,
        (Method::PUT, routes::WORKSPACE) => {
            let parked = req
                .headers()
                .get(PARKED_HEADER)
                .is_some_and(|v| v.as_bytes() == b"1");
            receive(&entry, req.into_body(), parked).await
        }
        _ => match entry.app.clone().oneshot(req).await {
            Ok(r) => r,
            Err(e) => match e {},
        },
    }
}

pub(super) fn refuse(status: StatusCode, why: &str) -> Response {
    let body = serde_json::json!({"error": {"message": why, "type": "unauthorized"}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Who a request proves it is: a task's servo, or a warm job's.
enum Caller {
    Task(Arc<Entry>),
    Slot(TaskId),
}

/// The task (or warm slot) the request proves it is, or the refusal.
fn authenticate(hub: &Hub, req: &Request) -> Result<Caller, (StatusCode, &'static str)> {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .filter(|t| !t.is_empty() && t.len() <= MAX_TOKEN_BYTES);
    let Some(token) = token else {
        return Err((StatusCode::UNAUTHORIZED, "a bearer token is required"));
    };
    let id = req
        .headers()
        .get(TASK_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<TaskId>().ok());
    let entry = id.and_then(|id| hub.lock().get(&id).cloned());
    match entry {
        Some(e) if constant_time_eq(e.task.token.as_bytes(), token.as_bytes()) => {
            Ok(Caller::Task(e))
        }
        None if id.is_some_and(|slot| hub.slots.proves(slot, token)) => {
            Ok(Caller::Slot(id.expect("checked")))
        }
        _ => {
            crate::metrics::live().refusal(crate::metrics::Refusal::NotFound);
            Err((
                StatusCode::FORBIDDEN,
                "this token does not belong to this task",
            ))
        }
    }
}

/// Equal without leaking where two strings first differ.
pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The parked workspace (packed as it is sent), else the submitted
/// workspace tar, or 204 when the task has none.
async fn submitted(entry: &Entry) -> Response {
    if let Some(dir) = &entry.task.resume_from {
        return packed(dir.clone());
    }
    stored_workspace(entry.task.input.as_deref()).await
}

/// The submitted workspace as the tar it was stored as (204: none), for a
/// servo that fetches its task after it started (a swarm's, a warm one).
pub(crate) async fn stored_workspace(input: Option<&std::path::Path>) -> Response {
    let Some(path) = input else {
        return StatusCode::NO_CONTENT.into_response();
    };
    match tokio::fs::File::open(path).await {
        Ok(f) => {
            let body = Body::from_stream(tokio_util::io::ReaderStream::new(f));
            ([(header::CONTENT_TYPE, "application/x-tar")], body).into_response()
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => {
            warn!(error = %e, "submitted workspace not readable");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// A kept workspace directory as a tar, packed on a blocking thread as it
/// streams out; a packing error ends the body with it (the servo's unpack
/// fails, never sees a short archive as whole).
fn packed(dir: PathBuf) -> Response {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(4);
    tokio::task::spawn_blocking(move || {
        let failed = tx.clone();
        if let Err(e) = crate::inputs::pack_dir(&dir, collect::ChannelWriter::new(tx)) {
            warn!(dir = %dir.display(), error = %e, "packing the parked workspace failed");
            let _ = failed.blocking_send(Err(e));
        }
    });
    let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    (
        [(header::CONTENT_TYPE, "application/x-tar")],
        Body::from_stream(stream),
    )
        .into_response()
}

/// Extracts the servo's upload into its results directory (or, `parked`,
/// its parked workspace), streaming (an async pump feeding a blocking
/// extractor), once per task.
async fn receive(entry: &Arc<Entry>, body: Body, parked: bool) -> Response {
    use futures_util::StreamExt;
    {
        let mut state = entry.upload.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(*state, UploadState::None) {
            return refuse(StatusCode::CONFLICT, "the workspace was already uploaded");
        }
        *state = UploadState::Receiving;
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(8);
    let mut stream = body.into_data_stream();
    let t = &entry.task;
    // The extractor caps file bytes; this caps the stream itself (headers,
    // directories and padding included), so an endless upload ends.
    let limit = t.max_bytes.saturating_mul(2).saturating_add(64 << 20);
    let pump = async move {
        let mut seen = 0u64;
        while let Some(chunk) = stream.next().await {
            let item = chunk.map_err(std::io::Error::other).and_then(|c| {
                seen += c.len() as u64;
                if seen > limit {
                    Err(std::io::Error::other(format!("upload over {limit} bytes")))
                } else {
                    Ok(c)
                }
            });
            let failed = item.is_err();
            if tx.send(item).await.is_err() || failed {
                return;
            }
        }
    };
    let dest = if parked {
        t.parked_dest.clone()
    } else {
        t.dest.clone()
    };
    let (secrets, cap) = (t.secrets.clone(), t.max_bytes);
    let extract = tokio::task::spawn_blocking(move || {
        if let Some(dir) = dest.parent().filter(|_| parked) {
            // Private: a parked workspace may hold anything.
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .with_context(|| format!("creating `{}`", dir.display()))?;
        }
        collect::extract(collect::ChannelReader::new(rx), &dest, &secrets, cap)
    });
    let ((), extracted) = tokio::join!(pump, extract);
    let result = match extracted {
        Ok(Ok(collected)) => Ok(Upload { collected, parked }),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(e) => Err(format!("collector thread panicked: {e}")),
    };
    let status = if result.is_ok() {
        StatusCode::CREATED
    } else {
        StatusCode::BAD_REQUEST
    };
    *entry.upload.lock().unwrap_or_else(|p| p.into_inner()) = UploadState::Done(Some(result));
    entry.done.notify_waiters();
    status.into_response()
}
