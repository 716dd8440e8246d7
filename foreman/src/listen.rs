//! Serving a router on a listener with doors no client can hold open: a
//! cap on connections open at once (one more is closed at once, counted
//! in a WARN line at most once a minute), a timeout on reading a request's
//! head, which also ends a keep-alive connection left idle, and accept
//! errors (out of file descriptors) that slow the loop instead of spinning
//! it. Used by each task's gateway socket and by the dashboard.
//!
//! `axum::serve` has none of these: a shell holding 20,000 connections to
//! its gateway socket, or a client sending 21,000 unfinished request heads
//! to the dashboard, took the foreman to its file-descriptor limit and
//! made another task's launch fail (hostile cases 18 and 52).
//!
//! The dashboard also caps the connections of each client address below
//! the global cap (`http.max_connections_per_client`): one client holding
//! 400 unfinished heads made 57 of 60 others' requests fail, before any of
//! its requests could be checked for a token (hostile case 52). Now it
//! holds its own share and is closed at once past it; the others keep the
//! rest. And at the global cap the oldest connection that has not sent a
//! whole head is closed to let a new one in, so heads held open from many
//! addresses cannot keep out a request the router would check.
//!
//! Also the file-descriptor budget: what the caps may take of the process's
//! limit at most, so that launches always keep a reserve ([`FdBudget`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;
use tracing::warn;

/// How one listener's connections are bounded.
#[derive(Clone, Debug)]
pub(crate) struct Doors {
    /// What the log lines call this listener (`gateway`, `dashboard`).
    pub name: &'static str,
    /// The task whose gateway this is, for its log lines.
    pub task_id: Option<saheeli_protocol::TaskId>,
    /// Connections open at once; one more is closed as soon as accepted.
    pub max_connections: usize,
    /// A request's head must arrive within this. hyper starts it whenever
    /// the connection waits for a request, so it also closes a keep-alive
    /// connection idle this long.
    pub header_timeout: Duration,
}

/// A listener `serve` can accept from; the address is handed to handlers
/// as `ConnectInfo` (the dashboard rate-limits logins by it).
pub(crate) trait Accept: Send + 'static {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    type Addr: Clone + Send + Sync + 'static;
    fn accept(&mut self) -> impl Future<Output = std::io::Result<(Self::Io, Self::Addr)>> + Send;
    /// The client a connection's address counts against (None: one
    /// client only, as on a task's own socket).
    fn client(_addr: &Self::Addr) -> Option<IpAddr> {
        None
    }
}

impl Accept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    type Addr = std::net::SocketAddr;
    async fn accept(&mut self) -> std::io::Result<(Self::Io, Self::Addr)> {
        tokio::net::TcpListener::accept(self).await
    }
    fn client(addr: &Self::Addr) -> Option<IpAddr> {
        Some(client_of(addr.ip()))
    }
}

/// The client an address counts as: an IPv4 address (mapped ones too), or
/// an IPv6 address's /64, which one host usually holds whole.
pub(crate) fn client_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let bits = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(std::net::Ipv6Addr::from(bits))
            }
        },
    }
}

/// Connections open per client, each held by a [`Held`] that gives its
/// place back when dropped.
#[derive(Clone)]
struct Clients {
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
    cap: usize,
}

/// One client's open connection.
struct Held {
    clients: Clients,
    ip: IpAddr,
}

impl Clients {
    fn new(cap: usize) -> Clients {
        Clients {
            open: Arc::default(),
            cap,
        }
    }

    /// A place for one more connection of `ip`, or None at its cap.
    fn take(&self, ip: IpAddr) -> Option<Held> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(ip).or_insert(0);
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(Held {
            clients: self.clone(),
            ip,
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut open = self.clients.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

impl Accept for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    type Addr = ();
    async fn accept(&mut self) -> std::io::Result<(Self::Io, Self::Addr)> {
        tokio::net::UnixListener::accept(self)
            .await
            .map(|(s, _)| (s, ()))
    }
}

/// Counts refused connections; says so at most once a minute.
struct Refusals {
    doors: Doors,
    unreported: u64,
    last: Option<Instant>,
}

/// Refusals are summed over this long between two WARN lines: a flood
/// must not become a flood of log lines.
const REPORT_EVERY: Duration = Duration::from_secs(60);

/// How long the accept loop waits for an evicted connection to give its
/// place back (its task only has to notice the cancel and drop).
const EVICTED_WITHIN: Duration = Duration::from_millis(200);

/// The connections that have not yet sent a whole request head, oldest
/// first. At the cap the oldest of them is closed to let a new one in:
/// a head held open is the only thing a client can hold without making a
/// request the router checks (for a token, say), so it is what gives way.
#[derive(Clone, Default)]
struct Heads(Arc<Mutex<HeadsInner>>);

#[derive(Default)]
struct HeadsInner {
    next: u64,
    waiting: std::collections::BTreeMap<u64, CancellationToken>,
}

/// One connection's place among [`Heads`] until its first head arrives.
struct Head {
    heads: Heads,
    id: u64,
}

impl Heads {
    /// A new connection, waiting for its first head; the token is
    /// cancelled when it is evicted.
    fn wait(&self) -> (Head, CancellationToken) {
        let token = CancellationToken::new();
        let mut inner = self.0.lock().expect("heads lock");
        let id = inner.next;
        inner.next += 1;
        inner.waiting.insert(id, token.clone());
        let head = Head {
            heads: self.clone(),
            id,
        };
        (head, token)
    }

    /// Closes the oldest connection still waiting for its first head;
    /// false when every connection has sent one.
    fn evict_oldest(&self) -> bool {
        let oldest = self.0.lock().expect("heads lock").waiting.pop_first();
        oldest.map(|(_, token)| token.cancel()).is_some()
    }
}

impl Head {
    /// Its head came: from now on the connection is never evicted.
    fn arrived(&self) {
        self.heads
            .0
            .lock()
            .expect("heads lock")
            .waiting
            .remove(&self.id);
    }
}

impl Drop for Head {
    fn drop(&mut self) {
        self.arrived();
    }
}

impl Refusals {
    fn count(&mut self) {
        self.unreported += 1;
        if self.last.is_none_or(|t| t.elapsed() >= REPORT_EVERY) {
            self.report();
        }
    }

    fn report(&mut self) {
        if self.unreported == 0 {
            return;
        }
        let d = &self.doors;
        match d.task_id {
            Some(id) => warn!(
                task_id = %id, listener = d.name, refused = self.unreported, cap = d.max_connections,
                "connections over the cap were closed at once (counted over a minute at most)"
            ),
            None => warn!(
                listener = d.name,
                refused = self.unreported,
                cap = d.max_connections,
                "connections over the cap were closed at once (counted over a minute at most)"
            ),
        }
        self.unreported = 0;
        self.last = Some(Instant::now());
    }
}

/// Serves `app` on `listener` until `shutdown`, then lets the open
/// connections finish what they are answering and returns.
pub(crate) async fn serve<L: Accept>(
    listener: L,
    app: Router,
    doors: Doors,
    shutdown: CancellationToken,
) {
    serve_per_client(listener, app, doors, None, shutdown).await
}

/// [`serve`], with at most `per_client` connections of one client address
/// open at once (checked before the global cap, so a client past its own
/// share takes nothing of it), and at the global cap the oldest connection
/// that has not sent a whole request head closed to make room.
pub(crate) async fn serve_per_client<L: Accept>(
    mut listener: L,
    app: Router,
    doors: Doors,
    per_client: Option<usize>,
    shutdown: CancellationToken,
) {
    let clients = per_client.map(Clients::new);
    let permits = std::sync::Arc::new(Semaphore::new(doors.max_connections));
    let heads = Heads::default();
    let conns = TaskTracker::new();
    let mut refusals = Refusals {
        doors: doors.clone(),
        unreported: 0,
        last: None,
    };
    let mut accept_errors = Refusals {
        doors: doors.clone(),
        unreported: 0,
        last: None,
    };
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            a = listener.accept() => a,
        };
        let (io, addr) = match accepted {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors (EMFILE, ENFILE) or memory: wait a
                // little instead of spinning, and say so once a minute.
                accept_errors.unreported += 1;
                if accept_errors
                    .last
                    .is_none_or(|t| t.elapsed() >= REPORT_EVERY)
                {
                    warn!(listener = doors.name, task_id = ?doors.task_id, error = %e, times = accept_errors.unreported, "accepting a connection failed");
                    accept_errors.unreported = 0;
                    accept_errors.last = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let held = match (&clients, L::client(&addr)) {
            (Some(c), Some(ip)) => match c.take(ip) {
                Some(h) => Some(h),
                None => {
                    drop(io);
                    refusals.count();
                    continue;
                }
            },
            _ => None,
        };
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            // Full: on the dashboard, the oldest connection that never
            // sent a whole head makes room, so heads held open (from
            // however many addresses) cannot keep out a client who sends
            // its request. A task's gateway has one client, its servo.
            Err(_) => match per_client.is_some() && heads.evict_oldest() {
                true => match tokio::time::timeout(EVICTED_WITHIN, permits.clone().acquire_owned())
                    .await
                {
                    Ok(Ok(p)) => p,
                    _ => {
                        drop(io);
                        refusals.count();
                        continue;
                    }
                },
                false => {
                    drop(io);
                    refusals.count();
                    continue;
                }
            },
        };
        let app = app.clone();
        let stop = shutdown.clone();
        let header_timeout = doors.header_timeout;
        let (head, evicted) = heads.wait();
        conns.spawn(async move {
            let _permit = (permit, held);
            let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                head.arrived();
                let mut req = req.map(axum::body::Body::new);
                req.extensions_mut().insert(ConnectInfo(addr.clone()));
                app.clone().oneshot(req)
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let conn = builder.serve_connection(TokioIo::new(io), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                // Made room for a newer connection before its head came.
                _ = evicted.cancelled() => return,
                _ = stop.cancelled() => conn.as_mut().graceful_shutdown(),
            }
            let _ = conn.await;
        });
    }
    refusals.report();
    conns.close();
    conns.wait().await;
}

/// What the connection caps may take of the open-files limit, computed
/// once when `serve` starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FdBudget {
    /// The open-files limit of this process.
    pub limit: u64,
    /// Each task gateway's connection cap, after lowering to fit.
    pub per_gateway: usize,
}

/// A servo keeps at most a few connections to its gateway at once (its
/// LLM call, a desk wait, a capability call, a verify): 16 leaves room,
/// and 16 descriptors per task are few beside the limit.
pub(crate) const GATEWAY_CONNECTIONS: usize = 16;

/// Below this a servo could be refused its own calls: the budget refuses
/// to lower the gateway cap further.
const MIN_GATEWAY_CONNECTIONS: usize = 4;

/// Descriptors kept for everything but the listeners' connections:
/// launches (the socket's listener, Docker's streams, a volume's image),
/// SQLite, the MCP servers' pipes, collection. Launches fail with EMFILE
/// if the connections take these.
pub(crate) const FD_RESERVE: u64 = 256;

impl FdBudget {
    /// The gateway cap for `tasks` at once and a dashboard of `web`
    /// connections under `limit` open files, keeping [`FD_RESERVE`]:
    /// lowered to fit (never below what a servo needs), or an error
    /// saying what to change.
    pub fn new(limit: u64, tasks: usize, web: usize) -> Result<FdBudget, String> {
        let usable = limit.saturating_sub(FD_RESERVE + web as u64);
        let fits = usable / (tasks.max(1) as u64);
        let per_gateway = (fits.min(GATEWAY_CONNECTIONS as u64)) as usize;
        if per_gateway < MIN_GATEWAY_CONNECTIONS {
            return Err(format!(
                "the open-files limit ({limit}) cannot hold {tasks} tasks' gateways at \
                 {MIN_GATEWAY_CONNECTIONS} connections each, {web} dashboard connections and \
                 {FD_RESERVE} descriptors kept for launches; raise it (`ulimit -n`, or \
                 LimitNOFILE= in a systemd unit), or lower `concurrency` or \
                 `http.max_connections` in config.yaml"
            ));
        }
        Ok(FdBudget { limit, per_gateway })
    }
}

/// This process's open-files (soft) limit.
pub(crate) fn open_files_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes `lim`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    lim.rlim_cur
}

#[cfg(test)]
#[path = "listen_tests.rs"]
mod tests;
