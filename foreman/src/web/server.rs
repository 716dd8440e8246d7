//! The HTTP server: its settings, its router and its life next to the
//! reconciler loop.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use axum::Router;
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::events::Bus;
use crate::store::{DbError, Store};
use crate::supervisor::Ctx;

use super::error::ApiError;
use super::{api, assets, auth, definitions, files, sse};

/// Shortest token accepted: guessable tokens protect nothing.
const MIN_TOKEN: usize = 16;

/// Where and how the dashboard is served.
#[derive(Clone)]
pub(crate) struct HttpSettings {
    pub addr: SocketAddr,
    /// Required of every request when set.
    pub token: Option<String>,
    /// Named tokens (`http.api_tokens`): name and token; a request
    /// bearing one acts as that name (issue 52).
    pub named: Vec<(String, String)>,
}

impl std::fmt::Debug for HttpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token itself.
        f.debug_struct("HttpSettings")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field(
                "named",
                &self.named.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl HttpSettings {
    /// From `serve --http ADDR` (or `http.addr`) and the variable
    /// `http.token_env` names; None when no address is given. Refuses an
    /// address other than loopback without a token, naming the setting.
    pub fn from_config(cfg: &Config, flag: Option<&str>) -> anyhow::Result<Option<HttpSettings>> {
        let (given, setting) = match (flag, cfg.file.http.addr.as_deref()) {
            (Some(a), _) => (a, "`--http`"),
            (None, Some(a)) => (a, "`http.addr` in config.yaml"),
            (None, None) => return Ok(None),
        };
        let addr: SocketAddr = given.trim().parse().with_context(|| {
            format!("{setting} `{given}` is not an `IP:PORT` address; e.g. `127.0.0.1:7878`")
        })?;
        let var = &cfg.file.http.token_env;
        let token = std::env::var(var).ok().filter(|t| !t.trim().is_empty());
        if let Some(t) = &token
            && t.trim().len() < MIN_TOKEN
        {
            bail!(
                "the HTTP token in `{var}` is {} characters; use at least {MIN_TOKEN} random ones \
                 (e.g. `openssl rand -hex 24`)",
                t.trim().len()
            );
        }
        if !addr.ip().is_loopback() && token.is_none() {
            bail!(
                "{setting} `{addr}` is not a loopback address, so the dashboard needs a token: set \
                 `{var}` (the variable `http.token_env` names) in the environment or in `.env` \
                 beside config.yaml, never in config.yaml; or serve on `127.0.0.1`"
            );
        }
        let http = &cfg.file.http;
        if http.max_connections == 0
            || http.max_connections_per_client == 0
            || http.header_timeout.is_zero()
        {
            bail!(
                "`http.max_connections`, `http.max_connections_per_client` and \
                 `http.header_timeout` in config.yaml must be more than 0 (defaults: 256, 64 \
                 and 10s)"
            );
        }
        let token = token.map(|t| t.trim().to_string());
        let named = super::auth::named_tokens(&http.api_tokens, token.as_deref(), MIN_TOKEN)?;
        Ok(Some(HttpSettings { addr, token, named }))
    }
}

/// What every handler shares.
pub(super) struct Web {
    pub cfg: Config,
    /// The web's own connection: never queued behind the loop's.
    pub store: Arc<Mutex<Store>>,
    pub bus: Bus,
    /// Where the servos run (their logs are followed live).
    pub engine: crate::backend::Engine,
    pub auth: auth::Auth,
    /// Ends the live streams when the server stops.
    pub shutdown: CancellationToken,
    /// What `GET /metrics` renders.
    pub metrics: crate::metrics::Metrics,
    /// The definitions repository followed (issue 52), if any.
    pub definitions: Option<Arc<crate::definitions::Syncer>>,
}

pub(super) type Shared = Arc<Web>;

impl Web {
    /// Runs a store operation off the async threads; its error answers
    /// with the status its cause means.
    pub async fn db<T, E>(
        &self,
        f: impl FnOnce(&mut Store) -> Result<T, E> + Send + 'static,
    ) -> Result<T, ApiError>
    where
        T: Send + 'static,
        E: Into<ApiError> + Send + 'static,
    {
        on_db_thread(self.store.clone(), f).await
    }
}

/// [`Web::db`]: a thread that panicked is Saheeli's failure (500).
pub(super) async fn on_db_thread<T, E>(
    store: Arc<Mutex<Store>>,
    f: impl FnOnce(&mut Store) -> Result<T, E> + Send + 'static,
) -> Result<T, ApiError>
where
    T: Send + 'static,
    E: Into<ApiError> + Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut s)
    })
    .await
    .map_err(DbError::from)?
    .map_err(Into::into)
}

/// Binds `settings.addr` (so `serve` fails at once when it cannot) and
/// serves until `shutdown`; the returned task ends when the server has.
pub(crate) async fn start(
    settings: HttpSettings,
    ctx: &Ctx,
    definitions: Option<Arc<crate::definitions::Syncer>>,
    shutdown: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let store = crate::ops::open_store(&ctx.cfg)?;
    let web = Arc::new(Web {
        cfg: ctx.cfg.clone(),
        store: Arc::new(Mutex::new(store)),
        bus: ctx.bus.clone(),
        engine: ctx.engine.clone(),
        auth: auth::Auth::new(settings.token.clone(), settings.named.clone()),
        shutdown: shutdown.clone(),
        metrics: ctx.metrics.clone(),
        definitions,
    });
    let listener = tokio::net::TcpListener::bind(settings.addr)
        .await
        .with_context(|| format!("listening on `{}` for the dashboard", settings.addr))?;
    let local = listener.local_addr()?;
    tracing::info!(
        url = %format!("http://{local}/"),
        token = settings.token.is_some(),
        "dashboard and API listening"
    );
    let app = router(web);
    let doors = crate::listen::Doors {
        name: "dashboard",
        task_id: None,
        max_connections: ctx.cfg.file.http.max_connections,
        header_timeout: ctx.cfg.file.http.header_timeout,
    };
    // A client's share is below the global cap: one client holding
    // unfinished heads cannot take everyone's (hostile case 52).
    let http = &ctx.cfg.file.http;
    let per_client = http.max_connections_per_client.min(http.max_connections);
    Ok(tokio::spawn(crate::listen::serve_per_client(
        listener,
        app,
        doors,
        Some(per_client),
        shutdown,
    )))
}

fn router(web: Shared) -> Router {
    Router::new()
        .route("/", get(assets::index))
        .route("/tasks/{id}", get(assets::index))
        .route("/assets/app.js", get(assets::js))
        .route("/assets/app.css", get(assets::css))
        .route("/login", get(auth::login_page).post(auth::login))
        .route("/logout", post(auth::logout))
        .route("/api/tasks", get(api::list).post(api::submit))
        .route("/api/foreman", get(api::foreman))
        .route("/api/definitions", get(definitions::status))
        .route("/api/definitions/refresh", post(definitions::refresh))
        .route("/api/tasks/{id}", get(api::show))
        .route("/api/events", get(sse::all_events))
        .route("/api/tasks/{id}/events", get(sse::task_events))
        .route("/api/tasks/{id}/report", get(files::report))
        .route("/api/tasks/{id}/patch", get(files::patch))
        .route("/api/tasks/{id}/files", get(files::list))
        .route("/api/tasks/{id}/files/{*path}", get(files::file))
        .route("/api/tasks/{id}/{action}", post(api::act))
        // Behind the same token guard as everything else.
        .route("/metrics", get(metrics))
        .fallback(api::not_found)
        .layer(axum::middleware::from_fn_with_state(
            web.clone(),
            auth::guard,
        ))
        .layer(axum::middleware::map_response(auth::security_headers))
        .with_state(web)
}

/// `GET /metrics`: the Prometheus exposition (OpenMetrics text).
async fn metrics(
    axum::extract::State(web): axum::extract::State<Shared>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    match web.metrics.scrape().await {
        Ok(text) => (
            [(
                axum::http::header::CONTENT_TYPE,
                crate::metrics::CONTENT_TYPE,
            )],
            text,
        )
            .into_response(),
        Err(e) => (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            format!("metrics could not be read: {e:#}\n"),
        )
            .into_response(),
    }
}
