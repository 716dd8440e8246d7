//! The LLM gateway: an HTTP endpoint on a unix socket, one per running task,
//! bind-mounted into that task's container at /run/saheeli.
//!
//! The servo speaks OpenAI chat completions to it. The gateway checks the
//! task's budget before each call, picks the provider for the model, adds
//! the API key (which never enters a container), translates for Anthropic,
//! retries what is worth retrying, and counts every billed response.
//! Because each task has its own socket directory, a servo can only spend
//! its own budget.

mod anthropic;
mod providers;
mod retry;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use saheeli_protocol::TaskId;
use saheeli_protocol::chat::{ChatRequest, ChatResponse, ChatUsage, gateway_error};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub(crate) use providers::{Providers, Route};

use crate::config::{Config, LlmConfig, ProviderKind};
use retry::Verdict;

/// The HTTP client and retry policy shared by every task's gateway.
#[derive(Debug)]
pub(crate) struct Upstream {
    pub providers: Providers,
    client: reqwest::Client,
    policy: LlmConfig,
}

impl Upstream {
    pub fn from_config(cfg: &Config) -> anyhow::Result<Upstream> {
        let client = reqwest::Client::builder()
            .timeout(cfg.file.llm.request_timeout)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("building the HTTP client for LLM providers")?;
        Ok(Upstream {
            providers: Providers::from_config(cfg),
            client,
            policy: cfg.file.llm.clone(),
        })
    }
}

/// A task's limits, checked before every call.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Budget {
    pub max_tokens: Option<u64>,
    pub max_cost: Option<f64>,
}

/// Everything that passed through one task's gateway.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    pub calls: AtomicU64,
    pub input_tokens: AtomicU64,
    pub output_tokens: AtomicU64,
    /// Millionths of a USD.
    pub cost_micro_usd: AtomicU64,
    pub malformed: AtomicU64,
    /// The reason a call was refused or failed for good: `auth`,
    /// `bad_request`, `budget`.
    pub fatal: Mutex<Option<&'static str>>,
}

impl Meter {
    pub fn tokens(&self) -> u64 {
        self.input_tokens.load(Ordering::Relaxed) + self.output_tokens.load(Ordering::Relaxed)
    }

    pub fn cost(&self) -> f64 {
        self.cost_micro_usd.load(Ordering::Relaxed) as f64 / 1e6
    }

    pub fn fatal(&self) -> Option<&'static str> {
        *self.fatal.lock().unwrap()
    }

    /// Starts from usage already spent (a task adopted after a restart).
    pub fn seed(&self, input: u64, output: u64, cost_usd: f64) {
        self.input_tokens.store(input, Ordering::Relaxed);
        self.output_tokens.store(output, Ordering::Relaxed);
        self.cost_micro_usd
            .store((cost_usd * 1e6).round() as u64, Ordering::Relaxed);
    }

    fn set_fatal(&self, reason: &'static str) {
        *self.fatal.lock().unwrap() = Some(reason);
    }

    fn bill(&self, usage: ChatUsage, route: &Route) {
        self.input_tokens
            .fetch_add(usage.prompt_tokens, Ordering::Relaxed);
        self.output_tokens
            .fetch_add(usage.completion_tokens, Ordering::Relaxed);
        if let Some(p) = route.price {
            let cost = usage.prompt_tokens as f64 * p.input_per_mtok
                + usage.completion_tokens as f64 * p.output_per_mtok;
            // per-million-token price × tokens = micro-USD
            self.cost_micro_usd
                .fetch_add(cost.round() as u64, Ordering::Relaxed);
        }
    }
}

struct GatewayState {
    task_id: TaskId,
    upstream: Arc<Upstream>,
    route: Route,
    budget: Budget,
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
    /// Serves `<run_dir>/<task_id>/gateway.sock` for a task using `model`.
    pub async fn start(
        run_dir: &Path,
        task_id: TaskId,
        upstream: Arc<Upstream>,
        model: &str,
        budget: Budget,
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
        let route = upstream.providers.route(model);
        info!(task_id = %task_id, provider = %route.provider.name, model = %route.model, "gateway listening");
        let meter = Arc::new(Meter::default());
        let state = Arc::new(GatewayState {
            task_id,
            upstream,
            route,
            budget,
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

    /// Stops serving but leaves the socket directory: the task was taken
    /// over, and the new holder serves its own socket there (the container
    /// has the directory mounted, so it must stay the same directory).
    pub async fn abandon(self) {
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.server).await;
    }

    /// Stops serving and removes the socket directory.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.server).await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn error_response(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = serde_json::json!({"error": {"message": message, "type": kind}});
    (status, axum::Json(body)).into_response()
}

/// An error and its causes on one line (reqwest's own message is terse).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cur = c.source();
    }
    s
}

/// Refuses a call that would take the task past its budget.
fn check_budget(gw: &GatewayState, request_bytes: usize) -> Result<(), String> {
    // A rough count of the input this call sends: about 4 bytes a token.
    let estimate = (request_bytes / 4) as u64;
    let m = &gw.meter;
    if let Some(max) = gw.budget.max_tokens {
        let used = m.tokens();
        if used + estimate > max {
            return Err(format!(
                "token budget: {used} of {max} used, and this call sends about {estimate} more"
            ));
        }
    }
    if let Some(max) = gw.budget.max_cost {
        let used = m.cost();
        let next = gw
            .route
            .price
            .map(|p| estimate as f64 * p.input_per_mtok / 1e6)
            .unwrap_or(0.0);
        if used + next > max {
            return Err(format!(
                "cost budget: ${used:.4} of ${max:.4} used, and this call costs about ${next:.4} more"
            ));
        }
    }
    Ok(())
}

async fn chat_completions(State(gw): State<Arc<GatewayState>>, body: Bytes) -> Response {
    let req: ChatRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                gateway_error::BAD_REQUEST,
                &format!("request is not a chat completion: {e}"),
            );
        }
    };
    if let Err(why) = check_budget(&gw, body.len()) {
        info!(task_id = %gw.task_id, %why, "call refused");
        gw.meter.set_fatal("budget");
        return error_response(StatusCode::PAYMENT_REQUIRED, gateway_error::BUDGET, &why);
    }
    let route = &gw.route;
    let upstream_body: Bytes = match route.provider.kind {
        ProviderKind::Openai => {
            let mut v: Value = serde_json::from_slice(&body).unwrap_or_default();
            v["model"] = Value::String(route.model.clone());
            v.to_string().into()
        }
        ProviderKind::Anthropic => {
            let mut max = gw.upstream.policy.anthropic_max_tokens;
            if let Some(budget) = gw.budget.max_tokens {
                max = max.min(budget.saturating_sub(gw.meter.tokens()).max(1));
            }
            anthropic::request(&req, &route.model, max)
                .to_string()
                .into()
        }
    };
    call(&gw, upstream_body).await
}

/// One call with retries; the answer for the servo.
async fn call(gw: &GatewayState, body: Bytes) -> Response {
    let policy = &gw.upstream.policy;
    let provider = &gw.route.provider;
    let started = Instant::now();
    let mut last = String::new();
    for attempt in 1..=policy.max_attempts.max(1) {
        let mut req = gw
            .upstream
            .client
            .post(provider.endpoint())
            .header(header::CONTENT_TYPE, "application/json")
            .body(body.clone());
        if let Some(key) = &provider.key {
            req = match provider.kind {
                ProviderKind::Openai => req.bearer_auth(&key.0),
                ProviderKind::Anthropic => req.header("x-api-key", &key.0),
            };
        }
        if provider.kind == ProviderKind::Anthropic {
            req = req.header("anthropic-version", "2023-06-01");
        }
        let (verdict, wish) = match req.send().await {
            Err(e) => {
                last = format!(
                    "{} unreachable: {}",
                    provider.name,
                    error_chain(&e.without_url())
                );
                (Verdict::Retry, None)
            }
            Ok(resp) => {
                let status = resp.status().as_u16();
                let wish = retry::retry_after(
                    resp.headers()
                        .get(header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok()),
                    SystemTime::now(),
                );
                match resp.bytes().await {
                    Err(e) => {
                        last = format!(
                            "{} response cut off: {}",
                            provider.name,
                            error_chain(&e.without_url())
                        );
                        (Verdict::Retry, None)
                    }
                    Ok(bytes) => {
                        let verdict = retry::verdict(status);
                        if verdict == Verdict::Success {
                            return answer(gw, &bytes);
                        }
                        last = format!(
                            "{} answered HTTP {status}: {}",
                            provider.name,
                            error_text(&bytes)
                        );
                        (verdict, wish)
                    }
                }
            }
        };
        match verdict {
            Verdict::Auth => {
                gw.meter.set_fatal("auth");
                warn!(task_id = %gw.task_id, error = %last, "provider refused the key");
                let hint = format!("{last} (check {})", provider.key_env);
                return error_response(StatusCode::UNAUTHORIZED, gateway_error::AUTH, &hint);
            }
            Verdict::BadRequest => {
                gw.meter.set_fatal("bad_request");
                warn!(task_id = %gw.task_id, error = %last, "provider refused the request");
                return error_response(StatusCode::BAD_REQUEST, gateway_error::BAD_REQUEST, &last);
            }
            Verdict::Retry | Verdict::Success => {}
        }
        let wait = retry::backoff(attempt, wish);
        if attempt == policy.max_attempts || started.elapsed() + wait > policy.max_retry_time {
            break;
        }
        warn!(task_id = %gw.task_id, attempt, wait_ms = wait.as_millis() as u64, error = %last, "retrying LLM call");
        tokio::time::sleep(wait).await;
    }
    error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        gateway_error::UNAVAILABLE,
        &format!("giving up after {:.0?}: {last}", started.elapsed()),
    )
}

/// Counts a successful response and hands it on in the OpenAI format.
fn answer(gw: &GatewayState, bytes: &[u8]) -> Response {
    let m = &gw.meter;
    m.calls.fetch_add(1, Ordering::Relaxed);
    let parsed: Result<Value, String> = serde_json::from_slice(bytes).map_err(|e| e.to_string());
    let response: Result<ChatResponse, String> = match (&parsed, gw.route.provider.kind) {
        (Err(e), _) => Err(format!("not JSON: {e}")),
        (Ok(v), ProviderKind::Openai) => {
            serde_json::from_value(v.clone()).map_err(|e| e.to_string())
        }
        (Ok(v), ProviderKind::Anthropic) => anthropic::response(v),
    };
    match response {
        Ok(r) if !r.choices.is_empty() => {
            m.bill(r.usage.unwrap_or_default(), &gw.route);
            axum::Json(r).into_response()
        }
        other => {
            // Billed all the same: count what usage the body reports.
            let usage = parsed.ok().and_then(|v| match gw.route.provider.kind {
                ProviderKind::Openai => {
                    serde_json::from_value::<ChatUsage>(v.get("usage")?.clone()).ok()
                }
                ProviderKind::Anthropic => anthropic::usage(&v),
            });
            m.bill(usage.unwrap_or_default(), &gw.route);
            m.malformed.fetch_add(1, Ordering::Relaxed);
            let why = other.err().unwrap_or_else(|| "no choices".into());
            warn!(task_id = %gw.task_id, error = %why, "malformed provider response");
            error_response(
                StatusCode::BAD_GATEWAY,
                gateway_error::MALFORMED,
                &format!("the provider's response could not be used: {why}"),
            )
        }
    }
}

/// The message of an OpenAI or Anthropic error body, else its start.
fn error_text(bytes: &[u8]) -> String {
    serde_json::from_slice::<Value>(bytes)
        .ok()
        .and_then(|v| v.get("error")?.get("message")?.as_str().map(String::from))
        .unwrap_or_else(|| String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned())
}
