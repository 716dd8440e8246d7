//! The LLM gateway: an HTTP endpoint on a unix socket, one per running task,
//! bind-mounted into the servo's container at /run/saheeli.
//!
//! The servo speaks OpenAI chat completions to it; the gateway adds the API
//! key (which never enters a container) and forwards to the upstream,
//! counting calls and tokens per task as responses pass through.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use saheeli_protocol::TaskId;
use saheeli_protocol::chat::{ChatRequest, ChatResponse};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::config::Config;

/// An API key. Prints as `***` so it cannot reach a log by accident.
#[derive(Clone)]
pub(crate) struct ApiKey(String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// Where requests go, shared by every task's gateway.
#[derive(Debug)]
pub(crate) struct Upstream {
    /// Ends in `/v1`, without a trailing slash.
    base_url: String,
    key: Option<ApiKey>,
    client: reqwest::Client,
}

impl Upstream {
    /// `llm.base_url` from config, else `$OPENAI_BASE_URL`, else OpenAI; the
    /// key from the variable `llm.api_key_env` names (environment or `.env`).
    pub fn from_config(cfg: &Config) -> anyhow::Result<Upstream> {
        let llm = &cfg.file.llm;
        let base_url = llm
            .base_url
            .clone()
            .or_else(|| std::env::var("OPENAI_BASE_URL").ok())
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| "https://api.openai.com/v1".into());
        let key = std::env::var(&llm.api_key_env)
            .ok()
            .filter(|k| !k.trim().is_empty())
            .map(ApiKey);
        let client = reqwest::Client::builder()
            .timeout(llm.request_timeout)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("building the HTTP client for the LLM upstream")?;
        Ok(Upstream {
            base_url: base_url.trim_end_matches('/').to_string(),
            key,
            client,
        })
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }
}

/// Calls and tokens that passed through one task's gateway.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    pub calls: AtomicU64,
    pub input_tokens: AtomicU64,
    pub output_tokens: AtomicU64,
}

struct GatewayState {
    task_id: TaskId,
    upstream: Arc<Upstream>,
    meter: Arc<Meter>,
}

/// A running gateway for one task.
pub(crate) struct Gateway {
    dir: PathBuf,
    meter: Arc<Meter>,
    stop: CancellationToken,
    server: tokio::task::JoinHandle<()>,
}

impl Gateway {
    /// Serves `<run_dir>/<task_id>/gateway.sock`.
    pub async fn start(
        run_dir: &Path,
        task_id: TaskId,
        upstream: Arc<Upstream>,
    ) -> anyhow::Result<Gateway> {
        use std::os::unix::fs::PermissionsExt;
        let dir = run_dir.join(task_id.to_string());
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("creating gateway directory `{}`", dir.display()))?;
        for d in [run_dir, dir.as_path()] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("setting permissions on `{}`", d.display()))?;
        }
        let sock = dir.join("gateway.sock");
        if sock.as_os_str().len() > 107 {
            anyhow::bail!(
                "gateway socket path `{}` is longer than 107 bytes; set a shorter `run_dir` in config.yaml",
                sock.display()
            );
        }
        let _ = std::fs::remove_file(&sock);
        let listener = tokio::net::UnixListener::bind(&sock)
            .with_context(|| format!("listening on `{}`", sock.display()))?;
        // The servo runs as another user; the socket's directory is its only door.
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666))?;
        let meter = Arc::new(Meter::default());
        let state = Arc::new(GatewayState {
            task_id,
            upstream,
            meter: meter.clone(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .with_state(state);
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let server = tokio::spawn(async move {
            let serve =
                axum::serve(listener, app).with_graceful_shutdown(stopped.cancelled_owned());
            if let Err(e) = serve.await {
                warn!(task_id = %task_id, error = %e, "gateway stopped with an error");
            }
        });
        Ok(Gateway {
            dir,
            meter,
            stop,
            server,
        })
    }

    /// The host directory to mount on /run/saheeli.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn meter(&self) -> &Meter {
        &self.meter
    }

    /// Stops serving and removes the socket directory.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.server).await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An error and its causes on one line (reqwest's own message is terse).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

fn error_response(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({"error": {"message": message, "type": "saheeli_gateway"}});
    (status, axum::Json(body)).into_response()
}

async fn chat_completions(State(gw): State<Arc<GatewayState>>, body: Bytes) -> Response {
    if let Err(e) = serde_json::from_slice::<ChatRequest>(&body) {
        return error_response(
            StatusCode::BAD_REQUEST,
            &format!("request is not a chat completion: {e}"),
        );
    }
    let up = &gw.upstream;
    let mut req = up
        .client
        .post(format!("{}/chat/completions", up.base_url))
        .header(header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(ApiKey(key)) = &up.key {
        req = req.bearer_auth(key);
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            let timeout = e.is_timeout();
            let e = error_chain(&e.without_url());
            warn!(task_id = %gw.task_id, error = %e, "upstream unreachable");
            let status = if timeout {
                StatusCode::GATEWAY_TIMEOUT
            } else {
                StatusCode::BAD_GATEWAY
            };
            return error_response(status, &format!("upstream LLM unreachable: {e}"));
        }
    };
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let retry_after = resp.headers().get(header::RETRY_AFTER).cloned();
    let bytes = match resp.bytes().await {
        Ok(b) => b,
        Err(e) => {
            return error_response(
                StatusCode::BAD_GATEWAY,
                &format!(
                    "upstream response was cut off: {}",
                    error_chain(&e.without_url())
                ),
            );
        }
    };
    gw.meter.calls.fetch_add(1, Ordering::Relaxed);
    if status.is_success() {
        match serde_json::from_slice::<ChatResponse>(&bytes) {
            Ok(parsed) => {
                if let Some(u) = parsed.usage {
                    gw.meter
                        .input_tokens
                        .fetch_add(u.prompt_tokens, Ordering::Relaxed);
                    gw.meter
                        .output_tokens
                        .fetch_add(u.completion_tokens, Ordering::Relaxed);
                }
            }
            Err(e) => debug!(task_id = %gw.task_id, error = %e, "upstream response did not parse"),
        }
    }
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(v) = retry_after {
        headers.insert(header::RETRY_AFTER, v);
    }
    (status, headers, bytes).into_response()
}
