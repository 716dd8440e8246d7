//! The loopback door a third-party agent reaches its LLM through.
//!
//! A listener on the container's own `127.0.0.1` (a container without a
//! network still has `lo`) forwards each HTTP/1.1 request, its headers and
//! body unchanged and streamed both ways, to the task's gateway: its
//! socket, which only the servo's uid can open, or on a swarm's node
//! ([`Gateway::Remote`]) the foreman's TCP hub or the node's relay socket,
//! each request then carrying the task's token, which only the servo's
//! uid can read (the agent's own `Authorization` is replaced by it). Only
//! the LLM routes pass ([`allowed`]): the gateway's other routes (the
//! session key, the human desk, verify) stay the servo's, so the agent
//! gains nothing by calling here that it was not given. The key is added
//! by the gateway on the foreman's host; the agent holds a placeholder. Saheeli's own tools
//! (`/saheeli/mcp/tools`, `/saheeli/mcp/call`, for `servo mcp`) are
//! answered here by the servo itself ([`super::own`]). Messages a person
//! injected are added to the agent's model calls on the way
//! ([`super::notes`]).

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::HeaderMap;

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tracing::{debug, warn};

use super::notes::{self, Notes};
use super::own::Own;
use super::session::Keeper;

/// The largest body of a call to Saheeli's own tools.
const MAX_OWN_BODY: usize = 1 << 20;

/// The key the agent is given: not a secret, only something its SDK
/// accepts. The gateway ignores it and sends the real one upstream.
pub(crate) const PLACEHOLDER_KEY: &str = "sk-saheeli-placeholder-not-a-key";

/// The routes an agent may call: the LLM APIs the gateway speaks.
pub(crate) fn allowed(method: &Method, path: &str) -> bool {
    method == Method::POST
        && matches!(
            path,
            "/v1/chat/completions" | "/v1/messages" | "/v1/messages/count_tokens" | "/v1/responses"
        )
}

/// Where the agent's calls go.
#[derive(Clone)]
pub(crate) enum Gateway {
    /// The task's own socket (this host's Docker).
    Socket(PathBuf),
    /// A swarm servo's gateway: `http://host:port` (the hub) or
    /// `unix:/path` (its node's relay), every request with `headers`
    /// (the task's token and id).
    Remote { to: Dial, headers: Arc<HeaderMap> },
}

/// How a remote gateway is dialled.
#[derive(Clone)]
pub(crate) enum Dial {
    Tcp(String),
    Unix(PathBuf),
}

impl Gateway {
    /// The gateway named `address` (`unix:/path` or `http://host:port`);
    /// remote (with the token) when the servo is a swarm's.
    pub fn of(address: &str) -> Result<Gateway, String> {
        let headers = crate::remote::auth_headers()?;
        let remote = !headers.is_empty();
        let to = if let Some(path) = address.strip_prefix("unix:") {
            Dial::Unix(PathBuf::from(path))
        } else if let Some(host) = address.strip_prefix("http://") {
            Dial::Tcp(host.trim_end_matches('/').to_string())
        } else {
            return Err(format!(
                "the gateway `{address}` is neither `unix:/path` nor `http://host:port`"
            ));
        };
        match (to, remote) {
            (Dial::Unix(path), false) => Ok(Gateway::Socket(path)),
            (Dial::Tcp(_), false) => Err(format!(
                "the gateway `{address}` is reached over TCP only by a swarm's servo, \
                 with its token (SAHEELI_GATEWAY_TOKEN_FILE)"
            )),
            (to, true) => Ok(Gateway::Remote {
                to,
                headers: Arc::new(headers),
            }),
        }
    }
}

/// How long a call is out before the agent's session is kept again.
const LATE_KEEP: std::time::Duration = std::time::Duration::from_millis(300);

/// Keeps the session once more after [`LATE_KEEP`] unless the returned
/// flag was cleared (the call came back) by then. A keep once begun runs
/// to its end: keeps are one at a time.
fn keep_late(k: Arc<Keeper>) -> Arc<std::sync::atomic::AtomicBool> {
    let out = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let still = out.clone();
    tokio::spawn(async move {
        tokio::time::sleep(LATE_KEEP).await;
        if still.load(std::sync::atomic::Ordering::Relaxed) {
            k.keep(true).await;
        }
    });
    out
}

/// Opens the listener on `127.0.0.1:0`; returns its port. Connections are
/// served until the servo exits.
pub(crate) async fn start(
    gateway: Gateway,
    own: Arc<Own>,
    notes: Arc<Notes>,
    keeper: Option<Arc<Keeper>>,
) -> std::io::Result<u16> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    warn!(error = %e, "agent listener: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let gateway = gateway.clone();
            let (own, notes, keeper) = (own.clone(), notes.clone(), keeper.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let (gateway, own, notes) = (gateway.clone(), own.clone(), notes.clone());
                    let keeper = keeper.clone();
                    async move {
                        if req.uri().path().starts_with("/saheeli/mcp/") {
                            return own_tools(&own, req).await;
                        }
                        // The agent's session as it stands before this
                        // call, kept in the workspace (issue 51); kept
                        // again while a call is still out after
                        // `LATE_KEEP` (a CLI may write the turn it sends
                        // after sending it).
                        let mut late = None;
                        if let Some(k) = &keeper
                            && req.uri().path() != "/v1/messages/count_tokens"
                            && allowed(req.method(), req.uri().path())
                        {
                            k.keep(false).await;
                            late = Some(keep_late(k.clone()));
                        }
                        let answer = forward(gateway, req, &notes).await;
                        if let Some(out) = late {
                            out.store(false, std::sync::atomic::Ordering::Relaxed);
                        }
                        answer
                    }
                });
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    debug!(error = %e, "agent listener: connection ended");
                }
            });
        }
    });
    Ok(port)
}

type Body = http_body_util::Either<Incoming, String>;

fn refuse(status: StatusCode, message: String) -> Response<Body> {
    let body = serde_json::json!({"error": {"message": message, "type": "saheeli_gateway"}});
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::Right(body.to_string()))
        .expect("a valid response")
}

fn json(status: StatusCode, v: serde_json::Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::Right(v.to_string()))
        .expect("a valid response")
}

/// `GET /saheeli/mcp/tools` and `POST /saheeli/mcp/call`.
async fn own_tools(own: &Own, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    match (method, path.as_str()) {
        (Method::GET, "/saheeli/mcp/tools") => Ok(json(StatusCode::OK, own.list())),
        (Method::POST, "/saheeli/mcp/call") => {
            let body = http_body_util::Limited::new(req.into_body(), MAX_OWN_BODY);
            let bytes = match body.collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => {
                    return Ok(refuse(
                        StatusCode::BAD_REQUEST,
                        format!("reading the call: {e} (at most {MAX_OWN_BODY} bytes)"),
                    ));
                }
            };
            match serde_json::from_slice::<serde_json::Value>(&bytes) {
                Ok(params) => Ok(json(StatusCode::OK, own.call(&params).await)),
                Err(e) => Ok(refuse(
                    StatusCode::BAD_REQUEST,
                    format!("the call is not JSON: {e}"),
                )),
            }
        }
        (m, p) => Ok(refuse(
            StatusCode::NOT_FOUND,
            format!(
                "`{m} {p}` is not served here: GET /saheeli/mcp/tools, POST /saheeli/mcp/call are"
            ),
        )),
    }
}

async fn forward(
    gateway: Gateway,
    req: Request<Incoming>,
    notes: &Notes,
) -> Result<Response<Body>, Infallible> {
    if !allowed(req.method(), req.uri().path()) {
        return Ok(refuse(
            StatusCode::NOT_FOUND,
            format!(
                "`{} {}` is not served here: only the LLM routes (POST /v1/chat/completions, \
                 /v1/messages, /v1/messages/count_tokens, /v1/responses) are",
                req.method(),
                req.uri().path()
            ),
        ));
    }
    let mut req = match notes::Api::of(req.uri().path()) {
        Some(api) => match notes.carry(api, req).await {
            Ok(r) => r,
            Err(why) => return Ok(refuse(StatusCode::BAD_REQUEST, why)),
        },
        None => req.map(Body::Left),
    };
    let dial = match gateway {
        Gateway::Socket(path) => Dial::Unix(path),
        Gateway::Remote { to, headers } => {
            // The task's token and id, never the agent's own: whatever
            // it sent under these names is replaced.
            for (name, value) in headers.iter() {
                req.headers_mut().insert(name, value.clone());
            }
            to
        }
    };
    let sent = match dial {
        Dial::Unix(path) => match UnixStream::connect(&path).await {
            Ok(s) => send(s, req).await,
            Err(e) => Err(format!("the gateway cannot be reached: {e}")),
        },
        Dial::Tcp(host) => match TcpStream::connect(&host).await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                send(s, req).await
            }
            Err(e) => Err(format!("the gateway cannot be reached: {e}")),
        },
    };
    Ok(sent.unwrap_or_else(|why| refuse(StatusCode::BAD_GATEWAY, why)))
}

/// Sends `req` over a new connection `stream` to the gateway; its answer
/// streams back as it comes.
async fn send<S>(stream: S, req: Request<Body>) -> Result<Response<Body>, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("the gateway cannot be reached: {e}"))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            debug!(error = %e, "agent listener: gateway connection ended");
        }
    });
    match sender.send_request(req).await {
        Ok(resp) => Ok(resp.map(Body::Left)),
        Err(e) => Err(format!("the gateway failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A servo on this host (no token file) reaches its gateway's socket
    /// only; TCP is a swarm servo's, with its token.
    #[test]
    fn a_local_servo_forwards_to_its_socket_only() {
        if std::env::var_os(saheeli_protocol::remote::TOKEN_FILE_ENV).is_some() {
            return;
        }
        assert!(matches!(
            Gateway::of("unix:/run/saheeli/gateway.sock"),
            Ok(Gateway::Socket(p)) if p == std::path::Path::new("/run/saheeli/gateway.sock")
        ));
        let e = Gateway::of("http://10.0.0.1:7070").err().unwrap();
        assert!(e.contains("SAHEELI_GATEWAY_TOKEN_FILE"), "{e}");
        assert!(Gateway::of("tcp://x").is_err());
    }

    #[test]
    fn only_the_llm_routes_pass() {
        let cases = [
            (Method::POST, "/v1/chat/completions", true),
            (Method::POST, "/v1/messages", true),
            (Method::POST, "/v1/messages/count_tokens", true),
            (Method::POST, "/v1/responses", true),
            (Method::GET, "/v1/chat/completions", false),
            (Method::GET, "/saheeli/v1/session-key", false),
            (Method::POST, "/saheeli/v1/questions", false),
            (Method::POST, "/v1/chat/completions/../x", false),
            (Method::POST, "/v1/models", false),
        ];
        for (m, p, ok) in cases {
            assert_eq!(allowed(&m, p), ok, "{m} {p}");
        }
    }
}
