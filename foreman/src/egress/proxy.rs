//! One phase's proxy: a unix socket in the task's gateway directory, each
//! connection carrying one client's connection, handed over (`SCM_RIGHTS`)
//! by the servo's loopback bridge: the proxy then talks to the client on
//! it directly, so a byte crosses one relay, here. It must be a TCP
//! stream, or it is closed unread. The head is read (capped, timed),
//! decided ([`decide`]), the
//! name resolved here and each address checked ([`address`]), a checked
//! address connected, and the bytes relayed both ways and counted. The
//! TLS inside a tunnel is the client's and the server's: nothing here
//! reads it.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::net::{AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
use saheeli_protocol::TaskId;
use saheeli_protocol::egress::{Approval, Phase};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::Approver;
use super::address::{self, forbidden};
use super::decide::{First, first};
use super::head::{self, Kind, MAX_HEAD, Request};
use super::ledger::{Entry, Ledger, Verdict};
use crate::task::egress::{Host, Rule};

/// A head must arrive within this.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Resolving a name, and connecting, each within this.
const DIAL_TIMEOUT: Duration = Duration::from_secs(15);
/// Connections one phase's proxy relays at once.
const MAX_CONNECTIONS: usize = 64;

/// What one phase's proxy serves.
pub(crate) struct Proxy {
    pub task: TaskId,
    pub phase: Phase,
    pub rules: Vec<Rule>,
    pub approval: Approval,
    /// The LLM providers' hosts, never reached.
    pub providers: Vec<String>,
    /// This host's addresses, never reached by name.
    pub own: Vec<IpAddr>,
    pub ledger: Ledger,
    /// Asks a person about an unlisted host (`egress_approval: ask`).
    pub approver: Option<Arc<dyn Approver>>,
    /// What a person decided, per host and port, for the task's life.
    decided: Mutex<HashMap<(String, u16), (bool, String)>>,
}

impl Proxy {
    pub fn new(
        task: TaskId,
        phase: Phase,
        rules: Vec<Rule>,
        approval: Approval,
        providers: Vec<String>,
        ledger: Ledger,
        approver: Option<Arc<dyn Approver>>,
    ) -> Proxy {
        Proxy {
            task,
            phase,
            rules,
            approval,
            providers,
            own: address::own_addresses(),
            ledger,
            approver,
            decided: Mutex::new(HashMap::new()),
        }
    }
}

/// Serves `proxy` on `listener` until `stop`.
pub(crate) async fn serve(listener: UnixListener, proxy: Arc<Proxy>, stop: CancellationToken) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let conns = tokio_util::task::TaskTracker::new();
    loop {
        let stream = tokio::select! {
            _ = stop.cancelled() => break,
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!(task_id = %proxy.task, error = %e, "egress: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            // Told on the client's own connection, briefly.
            tokio::spawn(async move {
                let got = tokio::time::timeout(Duration::from_secs(5), receive(&stream)).await;
                if let Ok(Ok(mut client)) = got {
                    let why = "too many connections through this task's proxy at once";
                    let _ = refuse(&mut client, 503, why).await;
                }
            });
            continue;
        };
        let (proxy, stop) = (proxy.clone(), stop.clone());
        conns.spawn(async move {
            let _permit = permit;
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = handed(stream, &proxy) => {}
            }
        });
    }
    conns.close();
    conns.wait().await;
}

/// Byte counts of a relay still running, so an ended task counts them.
#[derive(Default)]
struct Counts {
    up: AtomicU64,
    down: AtomicU64,
}

/// Records the entry when dropped: a relay cut off by the task's end is
/// counted too.
struct Pending<'a> {
    proxy: &'a Proxy,
    entry: Option<Entry>,
    counts: Arc<Counts>,
    started: Instant,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(mut e) = self.entry.take() {
            e.bytes_up = self.counts.up.load(Ordering::Relaxed);
            e.bytes_down = self.counts.down.load(Ordering::Relaxed);
            e.ms = self.started.elapsed().as_millis() as u64;
            let ledger = self.proxy.ledger.clone();
            tokio::spawn(async move { ledger.record(e).await });
        }
    }
}

/// Takes the client's connection from the bridge's message, then serves it.
async fn handed(bridge: UnixStream, proxy: &Proxy) {
    match tokio::time::timeout(HEAD_TIMEOUT, receive(&bridge)).await {
        Ok(Ok(client)) => {
            drop(bridge);
            connection(client, proxy).await;
        }
        Ok(Err(e)) => {
            tracing::warn!(task_id = %proxy.task, error = %e, "egress: no connection was handed over");
        }
        Err(_) => {
            tracing::warn!(task_id = %proxy.task, "egress: no connection was handed over in time");
        }
    }
}

/// The one TCP connection in the bridge's message (`C`, with the socket
/// as `SCM_RIGHTS`). Anything else (another kind of descriptor, none,
/// several) is refused; extra descriptors are closed.
async fn receive(bridge: &UnixStream) -> std::io::Result<TcpStream> {
    let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string());
    let fd = loop {
        bridge.readable().await?;
        let got = bridge.try_io(Interest::READABLE, || {
            let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let mut byte = [0u8; 1];
            let msg = rustix::net::recvmsg(
                bridge,
                &mut [std::io::IoSliceMut::new(&mut byte)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            )
            .map_err(std::io::Error::from)?;
            let mut fds: Vec<std::os::fd::OwnedFd> = Vec::new();
            for m in control.drain() {
                if let RecvAncillaryMessage::ScmRights(rights) = m {
                    fds.extend(rights);
                }
            }
            Ok((msg.bytes, byte, fds))
        });
        match got {
            Ok(v) => break v,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    };
    let (n, byte, mut fds) = fd;
    if n != 1 || byte != *b"C" || fds.len() != 1 {
        return Err(bad("the bridge's message is not one connection"));
    }
    let fd = fds.remove(0);
    let not_tcp = || bad("the descriptor handed over is not a TCP connection");
    let stream = rustix::net::sockopt::socket_type(&fd).map_err(|_| not_tcp())?
        == rustix::net::SocketType::STREAM;
    let family = rustix::net::sockopt::socket_domain(&fd).map_err(|_| not_tcp())?;
    if !stream || !(family == AddressFamily::INET || family == AddressFamily::INET6) {
        return Err(not_tcp());
    }
    let std = std::net::TcpStream::from(fd);
    std.set_nonblocking(true)?;
    let client = TcpStream::from_std(std)?;
    let _ = client.set_nodelay(true);
    Ok(client)
}

async fn connection(mut client: TcpStream, proxy: &Proxy) {
    let started = Instant::now();
    let (head, rest) = match read_head(&mut client).await {
        Ok(h) => h,
        Err(why) => {
            let _ = refuse(&mut client, 400, &why).await;
            return;
        }
    };
    let req = match head::parse(&head) {
        Ok(r) => r,
        Err(head::Malformed(why)) => {
            let _ = refuse(&mut client, 400, &why).await;
            return;
        }
    };
    let mut pending = Pending {
        proxy,
        entry: Some(Entry {
            phase: proxy.phase,
            host: req.host.to_string(),
            port: req.port,
            verdict: Verdict::Refused,
            reason: None,
            address: None,
            bytes_up: 0,
            bytes_down: 0,
            started_at: crate::store::now_ms(),
            ms: 0,
        }),
        counts: Arc::new(Counts::default()),
        started,
    };
    let (verdict, addr) = match reach(proxy, &req).await {
        Ok(v) => v,
        Err(why) => {
            if let Some(e) = pending.entry.as_mut() {
                e.reason = Some(why.clone());
            }
            let _ = refuse(&mut client, 403, &why).await;
            return;
        }
    };
    let upstream = match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return bad_gateway(&mut client, &mut pending, addr, e.to_string()).await,
        Err(_) => {
            let why = format!("no answer within {}s", DIAL_TIMEOUT.as_secs());
            return bad_gateway(&mut client, &mut pending, addr, why).await;
        }
    };
    let _ = upstream.set_nodelay(true);
    if let Some(e) = pending.entry.as_mut() {
        e.verdict = verdict.0;
        e.reason = verdict.1;
        e.address = Some(addr.to_string());
    }
    let (mut up_r, mut up_w) = upstream.into_split();
    let (mut cl_r, mut cl_w) = client.into_split();
    let counts = pending.counts.clone();
    let first_bytes = match req.kind {
        Kind::Connect => {
            if cl_w
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .is_err()
            {
                return;
            }
            rest
        }
        Kind::Forward(mut h) => {
            h.extend_from_slice(&rest);
            h
        }
    };
    if !first_bytes.is_empty() {
        if up_w.write_all(&first_bytes).await.is_err() {
            return;
        }
        counts
            .up
            .fetch_add(first_bytes.len() as u64, Ordering::Relaxed);
    }
    let up = relay(&mut cl_r, &mut up_w, &counts.up);
    let down = relay(&mut up_r, &mut cl_w, &counts.down);
    let _ = tokio::join!(up, down);
}

async fn bad_gateway(
    client: &mut TcpStream,
    pending: &mut Pending<'_>,
    addr: SocketAddr,
    why: String,
) {
    let why = format!("connecting to {addr}: {why}");
    if let Some(e) = pending.entry.as_mut() {
        e.address = Some(addr.to_string());
        e.reason = Some(why.clone());
    }
    let _ = refuse(client, 502, &why).await;
}

/// Copies `from` to `to` until either ends, counting; then closes `to`'s
/// writing half so the other side sees the end.
async fn relay<R, W>(from: &mut R, to: &mut W, count: &AtomicU64)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                count.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    }
    let _ = to.shutdown().await;
}

/// The head (through its blank line) and what came after it.
async fn read_head(s: &mut TcpStream) -> Result<(Vec<u8>, Vec<u8>), String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the client closed before its request head ended".to_string());
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = head::end_of_head(&buf) {
                let rest = buf.split_off(end);
                return Ok((std::mem::take(&mut buf), rest));
            }
            if buf.len() > MAX_HEAD {
                return Err(format!("the request head is over {MAX_HEAD} bytes"));
            }
        }
    };
    match tokio::time::timeout(HEAD_TIMEOUT, read).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "no whole request head within {}s",
            HEAD_TIMEOUT.as_secs()
        )),
    }
}

/// Where to connect, and how it was allowed; or why not.
async fn reach(
    proxy: &Proxy,
    req: &Request,
) -> Result<((Verdict, Option<String>), SocketAddr), String> {
    let decision = first(
        proxy.phase,
        &proxy.rules,
        proxy.approval,
        &proxy.providers,
        &req.host,
        req.port,
    );
    let verdict = match decision {
        First::Refuse(why) => return Err(why),
        First::Address => {
            let Host::Address(ip) = req.host else {
                unreachable!("an address decision is made for an address")
            };
            return Ok(((Verdict::Allowed, None), SocketAddr::new(ip, req.port)));
        }
        First::Resolve => (Verdict::Allowed, None),
        First::Ask => {
            let approved = ask(proxy, req).await?;
            // An approved address is reached as a listed one is.
            if let Host::Address(ip) = req.host {
                return Ok((approved, SocketAddr::new(ip, req.port)));
            }
            approved
        }
    };
    let Host::Name(name) = &req.host else {
        unreachable!("only a name is resolved or asked for")
    };
    let addrs = tokio::time::timeout(
        DIAL_TIMEOUT,
        tokio::net::lookup_host((name.as_str(), req.port)),
    )
    .await
    .map_err(|_| format!("{name} did not resolve within {}s", DIAL_TIMEOUT.as_secs()))?
    .map_err(|e| format!("{name} does not resolve: {e}"))?
    .collect::<Vec<_>>();
    let mut why = None;
    for a in &addrs {
        match forbidden(a.ip(), &proxy.own) {
            None => return Ok((verdict, *a)),
            Some(class) => why = Some((a.ip(), class)),
        }
    }
    Err(match why {
        Some((ip, class)) => format!(
            "{name} resolves to {ip}, {}: a listed name never reaches this host or its \
             private networks; list the address itself (`{ip}:{}`) if that is meant",
            class.as_str(),
            req.port
        ),
        None => format!("{name} has no address"),
    })
}

/// Asks a person about `req`'s host once per host and port; the answer
/// holds for the task's life.
async fn ask(proxy: &Proxy, req: &Request) -> Result<(Verdict, Option<String>), String> {
    let key = (req.host.to_string(), req.port);
    let known = proxy
        .decided
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned();
    let (approved, by, lasting) = match known {
        Some((approved, by)) => (approved, by, true),
        None => {
            let Some(approver) = &proxy.approver else {
                return Err(format!(
                    "{}:{} is not listed and no one can be asked here",
                    key.0, key.1
                ));
            };
            let a = approver.ask(proxy.phase, &key.0, key.1).await;
            if a.lasting {
                proxy
                    .decided
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key.clone(), (a.approved, a.by.clone()));
            }
            (a.approved, a.by, a.lasting)
        }
    };
    match (approved, lasting) {
        (true, _) => Ok((Verdict::Approved, Some(format!("approved by {by}")))),
        (false, true) => Err(format!(
            "{}:{} was denied by {by}; it stays refused for this task",
            key.0, key.1
        )),
        (false, false) => Err(format!(
            "{}:{} was refused for now: {by}; try again later",
            key.0, key.1
        )),
    }
}

/// Answers the client with `status` and a body saying why.
async fn refuse<S: AsyncWrite + Unpin>(s: &mut S, status: u16, why: &str) -> std::io::Result<()> {
    let text = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        502 => "Bad Gateway",
        _ => "Service Unavailable",
    };
    let body = format!("saheeli egress: {why}\n");
    let out = format!(
        "HTTP/1.1 {status} {text}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(out.as_bytes()).await?;
    s.shutdown().await
}

#[cfg(test)]
#[path = "proxy_tests.rs"]
mod tests;
