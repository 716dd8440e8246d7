//! A recording proxy on 127.0.0.1 in front of a real server: every request
//! (method, path, headers, body) and the server's answer (status, body)
//! are kept, and forwarded unchanged. How the local-server test sees which
//! headers reached the server (issue 27: no `authorization` where no key
//! was configured). It only relays: nothing is scripted or rewritten.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// One exchange as the server saw and answered it.
#[derive(Clone, Debug)]
pub struct Exchange {
    pub method: String,
    pub path: String,
    /// Header names (lowercase) and values, as received.
    pub headers: Vec<(String, String)>,
    pub request: String,
    pub status: u16,
    pub response: String,
    /// How long the server took, from forwarding to its last byte.
    pub elapsed: std::time::Duration,
}

#[derive(Clone)]
struct Inner {
    upstream: String,
    client: reqwest::Client,
    seen: Arc<Mutex<Vec<Exchange>>>,
}

pub struct RecordingProxy {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Exchange>>>,
    _runtime: tokio::runtime::Runtime,
}

impl RecordingProxy {
    /// Relays to `upstream` (e.g. `http://127.0.0.1:8080`).
    pub fn start(upstream: &str) -> RecordingProxy {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let inner = Inner {
            upstream: upstream.trim_end_matches('/').to_string(),
            // A new connection for each request: llama-server closes an
            // idle one after a few seconds, and a request sent on it then
            // failed ("error sending request").
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap(),
            seen: seen.clone(),
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().fallback(relay).with_state(inner);
        runtime.spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        RecordingProxy {
            addr,
            seen,
            _runtime: runtime,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn seen(&self) -> Vec<Exchange> {
        self.seen.lock().unwrap().clone()
    }
}

async fn relay(State(inner): State<Inner>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body: Bytes = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(b) => b,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let mut up = inner
        .client
        .request(parts.method.clone(), format!("{}{path}", inner.upstream))
        .body(body.clone());
    for (k, v) in parts.headers.iter() {
        if k != "host" && k != "content-length" {
            up = up.header(k, v);
        }
    }
    let started = std::time::Instant::now();
    let (status, ctype, text) = match up.send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let ctype = r
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("application/json")
                .to_string();
            (status, ctype, r.text().await.unwrap_or_default())
        }
        Err(e) => (502, "text/plain".into(), format!("proxy: {e}")),
    };
    inner.seen.lock().unwrap().push(Exchange {
        method: parts.method.to_string(),
        path,
        headers,
        request: String::from_utf8_lossy(&body).into_owned(),
        status,
        response: text.clone(),
        elapsed: started.elapsed(),
    });
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
        [("content-type", ctype)],
        text,
    )
        .into_response()
}
