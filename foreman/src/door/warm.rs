//! A warm servo's gateway socket (issue 28). The pool binds it before any
//! task is claimed: `<run_dir>/p-<slot>/gateway.sock`, mounted into the
//! warm container as any task's socket is. While idle it serves one route,
//! `GET claim`, a long poll the servo waits on (204 now and then: ask
//! again; its answer says whether there is a workspace to fetch, and
//! gives the task's session key);
//! everything else is refused. A claim installs the task's own
//! routes (the very handlers of a cold task's socket: its budget, desk,
//! verify and capabilities) with its launch and submitted workspace; the
//! launch is released only when the holder of the task's lease starts the
//! servo, so a foreman that stops between the claim and the start leaves
//! a servo that never began the task. From then on the socket is that
//! task's gateway, stopped and removed with it, never given to another.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use saheeli_protocol::remote::routes;
use saheeli_protocol::remote::warm::{
    CLAIM, END, END_HOLD_MS, SESSION_KEY_HEADER, WORKSPACE_HEADER,
};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tracing::warn;

/// How long `GET claim` waits before answering 204 (ask again).
const CLAIM_WAIT: Duration = Duration::from_secs(25);

/// How often a held end looks again whether the claimed servos got going.
const END_LOOK: Duration = Duration::from_millis(10);

/// Whether servos claimed from the same pool are still starting (claimed,
/// no model call yet): a claimed servo's end waits while they are.
pub(crate) type StartsPending = Arc<dyn Fn() -> bool + Send + Sync>;

/// What a claimed warm servo fetches: the launch (as JSON, the task's
/// `env:` in it) and the submitted workspace, when there is one.
pub(crate) struct WarmTask {
    pub launch: String,
    pub input: Option<PathBuf>,
    /// The attempt a retry goes on from (its key is given too).
    pub resume_from: Option<saheeli_protocol::TaskId>,
}

/// A claimed task as its socket serves it: with its session key (JSON).
pub(crate) struct Claimed {
    pub task: WarmTask,
    pub session_key: String,
}

/// A warm servo's socket: idle, claimed, then released to its servo.
#[derive(Clone)]
pub(crate) struct WarmSocket {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    stop: CancellationToken,
    server: Mutex<Option<tokio::task::JoinHandle<()>>>,
    claim: Mutex<Option<(Router, Arc<Claimed>)>>,
    released: tokio::sync::watch::Sender<bool>,
    /// Whether the claimed task's servo has made its first model call.
    going: std::sync::atomic::AtomicBool,
    /// Its pool's starting servos, which its end waits for (none: a
    /// socket adopted after a restart, whose end is never held).
    starts: Mutex<Option<StartsPending>>,
}

impl WarmSocket {
    /// Binds `<run_dir>/<name>/gateway.sock`: a fresh directory, or
    /// (`adopt`) the one a running warm container has mounted.
    pub fn bind(run_dir: &Path, name: &str, adopt: bool) -> anyhow::Result<WarmSocket> {
        let dir = super::socket::task_dir(run_dir, name, adopt)?;
        let listener = match super::bind(&dir) {
            Ok(l) => l,
            Err(e) => {
                if !adopt {
                    let _ = std::fs::remove_dir_all(&dir);
                }
                return Err(e);
            }
        };
        let inner = Arc::new(Inner {
            dir,
            stop: CancellationToken::new(),
            server: Mutex::new(None),
            claim: Mutex::new(None),
            released: tokio::sync::watch::Sender::new(false),
            going: std::sync::atomic::AtomicBool::new(false),
            starts: Mutex::new(None),
        });
        let app = Router::new().fallback(front).with_state(inner.clone());
        let doors = crate::listen::Doors {
            name: "warm gateway",
            task_id: None,
            max_connections: crate::listen::GATEWAY_CONNECTIONS,
            header_timeout: super::HEADER_TIMEOUT,
        };
        let server = tokio::spawn(crate::listen::serve(
            listener,
            app,
            doors,
            inner.stop.clone(),
        ));
        *inner.server.lock().unwrap() = Some(server);
        Ok(WarmSocket { inner })
    }

    /// The host directory mounted on the servo's /run/saheeli.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Installs the claimed task's routes, launch and workspace (not yet
    /// given to the servo: see [`WarmSocket::release`]).
    pub(crate) fn install(&self, app: Router, task: Claimed) {
        *self.inner.claim.lock().unwrap() = Some((app, Arc::new(task)));
    }

    /// Gives the claimed task's launch to the servo (waiting on `GET
    /// claim`, or asking next). Only the holder of the task's lease does.
    pub fn release(&self) {
        if self.inner.claim.lock().unwrap().is_some() {
            self.inner.released.send_replace(true);
        }
    }

    /// Whether the servo of the task given to it has made its first model
    /// call (the pool holds its refills until its claimed servos have:
    /// making containers beside them is what would slow that call down).
    pub fn got_going(&self) -> bool {
        self.inner.going.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Makes the servo's end (`GET end`) wait while `starts` says servos
    /// claimed from the same pool are still starting.
    pub fn hold_ends_for(&self, starts: StartsPending) {
        *self.inner.starts.lock().unwrap() = Some(starts);
    }

    /// Claims it for a task with no routes and releases it at once (the
    /// pool's own tests).
    #[cfg(test)]
    pub(crate) fn claim_for_test(&self) {
        let task = WarmTask {
            launch: "{}".into(),
            input: None,
            resume_from: None,
        };
        self.install(
            Router::new(),
            Claimed {
                task,
                session_key: "{}".into(),
            },
        );
        self.release();
    }

    /// Notes the first model call (see [`WarmSocket::got_going`]).
    #[cfg(test)]
    pub(crate) fn went(&self) {
        self.inner
            .going
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Stops serving; `remove`: its directory goes too.
    pub(crate) async fn close(&self, remove: bool) {
        self.inner.stop.cancel();
        let server = self.inner.server.lock().unwrap().take();
        if let Some(server) = server {
            let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
        }
        if remove
            && let Err(e) = std::fs::remove_dir_all(&self.inner.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            warn!(dir = %self.inner.dir.display(), error = %e, "removing a warm gateway directory");
        }
    }

    /// An idle socket the pool gives up (its servo removed).
    pub async fn discard(self) {
        self.close(true).await;
    }
}

/// Every request: the claim long poll, the workspace once released, the
/// task's routes once claimed; nothing else.
async fn front(State(inner): State<Arc<Inner>>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    let t0 = std::time::Instant::now();
    let r = route(inner, req, &path).await;
    tracing::debug!(route = %path, ms = t0.elapsed().as_secs_f64() * 1000.0, "warm gateway answered");
    r
}

async fn route(inner: Arc<Inner>, req: Request, path: &str) -> Response {
    match (req.method().clone(), path) {
        (Method::GET, CLAIM) => claim(&inner).await,
        (Method::GET, END) => match released(&inner) {
            Some(_) => end(&inner).await,
            None => refuse(StatusCode::CONFLICT, "no task was given to this servo yet"),
        },
        (Method::GET, routes::WORKSPACE) => match released(&inner) {
            Some(c) => super::remote::stored_workspace(c.task.input.as_deref()).await,
            None => refuse(StatusCode::CONFLICT, "no task was given to this servo yet"),
        },
        _ => {
            let app = inner.claim.lock().unwrap().as_ref().map(|(a, _)| a.clone());
            match app {
                Some(app) => {
                    // The model routes are `/v1/…` (the gateway's own are
                    // `/saheeli/…`).
                    if path.starts_with("/v1/") {
                        inner
                            .going
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    match app.oneshot(req).await {
                        Ok(r) => r,
                        Err(e) => match e {},
                    }
                }
                None => refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "this warm servo has no task yet",
                ),
            }
        }
    }
}

/// The claimed task, once released to the servo.
fn released(inner: &Inner) -> Option<Arc<Claimed>> {
    if !*inner.released.borrow() {
        return None;
    }
    inner.claim.lock().unwrap().as_ref().map(|(_, t)| t.clone())
}

/// `GET claim`: the launch once released, or 204 after [`CLAIM_WAIT`].
async fn claim(inner: &Inner) -> Response {
    let mut rx = inner.released.subscribe();
    tokio::select! {
        _ = rx.wait_for(|r| *r) => {}
        _ = tokio::time::sleep(CLAIM_WAIT) => {}
        _ = inner.stop.cancelled() => {}
    }
    match released(inner) {
        Some(c) => {
            let workspace = if c.task.input.is_some() {
                "yes"
            } else {
                "none"
            };
            let mut r = (
                [
                    (header::CONTENT_TYPE, "application/json"),
                    (HeaderName::from_static(WORKSPACE_HEADER), workspace),
                ],
                c.task.launch.clone(),
            )
                .into_response();
            if let Ok(key) = HeaderValue::from_str(&c.session_key) {
                r.headers_mut()
                    .insert(HeaderName::from_static(SESSION_KEY_HEADER), key);
            }
            r
        }
        None => StatusCode::NO_CONTENT.into_response(),
    }
}

/// `GET end`: 204 once the pool's starting servos got going, at most
/// [`END_HOLD_MS`] from now. This servo is not starting any more either
/// way (it may have ended with no model call at all).
async fn end(inner: &Inner) -> Response {
    inner
        .going
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let starts = inner.starts.lock().unwrap().clone();
    if let Some(starts) = starts {
        let until = tokio::time::Instant::now() + Duration::from_millis(END_HOLD_MS);
        while starts() && tokio::time::Instant::now() < until {
            tokio::select! {
                _ = tokio::time::sleep(END_LOOK) => {}
                _ = inner.stop.cancelled() => break,
            }
        }
    }
    StatusCode::NO_CONTENT.into_response()
}

fn refuse(status: StatusCode, why: &str) -> Response {
    let body = serde_json::json!({"error": {"message": why, "type": "not_claimed"}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
