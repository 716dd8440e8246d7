//! The HTTP client and policy shared by every task's gateway.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::config::Providers;
use crate::config::{Config, LlmConfig};
use crate::llm::Redactor;
use crate::llm::ledger::Ledger;

/// The HTTP client and retry policy shared by every task's gateway.
#[derive(Debug)]
pub(crate) struct Upstream {
    pub providers: Providers,
    pub(crate) client: reqwest::Client,
    pub(crate) policy: LlmConfig,
    pub(crate) redactor: Redactor,
    pub(crate) ledger: Arc<Ledger>,
    /// The capability servers (MCP), shared by every task's gateway.
    pub(crate) broker: Arc<crate::capability::Broker>,
    /// What each task's session key is derived from (the foreman's key
    /// file, `backend::swarm::token_key`); never sent anywhere.
    pub(crate) session_secret: SessionSecret,
    /// Where each task's trajectory (`record`) is written, on the host.
    pub(crate) trajectories: std::path::PathBuf,
    /// The providers' rate limits, shared by every task (`limits`).
    pub(crate) limits: super::limits::Limits,
    /// What each local provider's server said its window is (`probe`),
    /// asked at `serve` start.
    pub served: super::probe::ServedWindows,
}

/// The foreman's key, printed as `***`.
pub(crate) struct SessionSecret(Vec<u8>);

impl std::fmt::Debug for SessionSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl SessionSecret {
    /// The key task `id`'s servo seals its session with: HMAC-SHA256 of
    /// the foreman's key over `session/<id>`, hex.
    pub(crate) fn for_task(&self, id: saheeli_protocol::TaskId) -> String {
        use hmac::{Hmac, Mac};
        let mut mac =
            Hmac::<sha2::Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(b"session/");
        mac.update(id.to_string().as_bytes());
        mac.finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

impl Upstream {
    /// Needs the database migrated (the store opens it first).
    pub fn from_config(cfg: &Config) -> anyhow::Result<Upstream> {
        let client = reqwest::Client::builder()
            .timeout(cfg.file.llm.request_timeout)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("building the HTTP client for LLM providers")?;
        let providers = Providers::from_config(cfg);
        let redactor = Redactor::new(&providers.secrets());
        Ok(Upstream {
            providers,
            client,
            policy: cfg.file.llm.clone(),
            redactor,
            ledger: Arc::new(Ledger::open(&cfg.database())?),
            broker: Arc::new(crate::capability::Broker::new(cfg)),
            session_secret: SessionSecret(crate::backend::swarm::token_key(&cfg.state_dir())?),
            limits: Default::default(),
            trajectories: trajectories_dir(cfg),
            served: Default::default(),
        })
    }

    /// How long a new call to a provider would wait for its turn now (the
    /// longest over providers and models): `concurrency: auto` launches no
    /// task whose first call would wait long.
    pub fn rate_wait(&self) -> Duration {
        self.limits.wait_now()
    }

    /// Asks every local provider's server for its window (all at once,
    /// each bounded by the probe's timeout) and logs what each said.
    pub async fn probe_servers(&mut self) {
        let asks = self
            .providers
            .all()
            .filter(|p| !super::probe::is_hosted(p))
            .map(|p| {
                let client = self.client.clone();
                let p = p.clone();
                async move { (p.name.clone(), super::probe::probe(&client, &p).await) }
            });
        for (name, info) in futures_util::future::join_all(asks).await {
            match (info.window, info.models.is_empty(), info.source) {
                (None, true, _) | (_, _, None) => tracing::debug!(
                    provider = %name,
                    "its server says no context window (llama-server /props, vLLM /v1/models, Ollama /api/show); set `windows:` or the provider's `context_window`"
                ),
                (_, _, Some(source)) => tracing::info!(
                    provider = %name,
                    window = ?info.window,
                    models = ?info.models,
                    source,
                    "context window from the provider's server (config `windows:` and `context_window` still win)"
                ),
            }
            self.served.0.insert(name, info);
        }
    }

    /// The longest one call through the gateway can take: the last attempt
    /// starts before `max_retry_time` and takes up to `request_timeout`;
    /// the margin covers the ledger's writes. The servo waits this long.
    pub fn servo_request_timeout(&self) -> Duration {
        self.policy.max_retry_time + self.policy.request_timeout + Duration::from_secs(60)
    }
}

/// Where `record` writes each task's calls: `<state_dir>/trajectories`.
pub(crate) fn trajectories_dir(cfg: &Config) -> std::path::PathBuf {
    cfg.state_dir().join("trajectories")
}

/// Redacts `text` for every key this configuration holds, as the gateway
/// does: for what an operator's command prints of a task's LLM traffic
/// (`task trajectory`), whose record may hold a key split between the
/// events of a stream (issue 47).
pub(crate) fn redact_keys(cfg: &Config, text: &str) -> String {
    Redactor::new(&Providers::from_config(cfg).secrets())
        .redact(text)
        .into_owned()
}
