//! What a provider's own server says about itself (issue 27): the context
//! window it serves, read once at `serve` start (and by `saheeli doctor`)
//! where the server exposes it:
//!
//! - llama-server: `GET /props` → `default_generation_settings.n_ctx`
//!   (and `GET /v1/models` → `data[].meta.n_ctx`), plus whether its chat
//!   template handles tools (`chat_template_caps.supports_tool_calls`);
//! - vLLM: `GET /v1/models` → `data[].max_model_len` per model;
//! - Ollama: `GET /api/tags` then `POST /api/show` per model → `num_ctx`
//!   from its `parameters` (Ollama cuts a longer prompt silently at its
//!   default `num_ctx`, so the model's trained length is not the window).
//!
//! The hosted APIs (api.openai.com, api.anthropic.com) expose none and are
//! not asked. Every probe is bounded by a short timeout; a server that does
//! not answer simply has no served window (config or compaction on
//! "context too long" still apply).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::config::providers::Provider;

/// How long one probe request may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// At most this many Ollama models are asked for their window.
const OLLAMA_MODELS: usize = 32;
/// Longest answer read from a provider's server: a probe's or the
/// doctor's answer is small; a hostile one is cut here, never held whole
/// (issue 47: a 1 GiB answer took 2.7 GB).
pub(crate) const MAX_ANSWER: usize = 4 * 1024 * 1024;
/// A window below this is not believed (the smallest `context.window`).
const MIN_WINDOW: u64 = 1024;

/// What one provider's server reported.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ServerInfo {
    /// The server's one window, whatever the model (llama-server).
    pub window: Option<u64>,
    /// Each served model's window (vLLM, Ollama, llama-server's list).
    pub models: BTreeMap<String, u64>,
    /// Where the windows came from (`llama-server /props`, …).
    pub source: Option<&'static str>,
    /// llama-server's chat template can render tools (None: not said).
    pub template_tools: Option<bool>,
    /// The server's own version string, when it says one.
    pub version: Option<String>,
}

impl ServerInfo {
    /// The window served for `model` (as sent upstream).
    pub fn window_for(&self, model: &str) -> Option<u64> {
        self.models.get(model).copied().or(self.window)
    }
}

/// Every provider's `ServerInfo`, by provider name (`serve` start).
#[derive(Clone, Debug, Default)]
pub(crate) struct ServedWindows(pub BTreeMap<String, ServerInfo>);

impl ServedWindows {
    /// The window `provider`'s server serves for `model`.
    pub fn window(&self, provider: &str, model: &str) -> Option<u64> {
        self.0.get(provider)?.window_for(model)
    }
}

/// Whether `provider` is a hosted vendor API (nothing to probe).
pub(crate) fn is_hosted(provider: &Provider) -> bool {
    let host = provider
        .base_url
        .split("://")
        .nth(1)
        .unwrap_or(&provider.base_url);
    host.starts_with("api.openai.com") || host.starts_with("api.anthropic.com")
}

/// `base_url` without its `/v1` (where llama-server's `/props` and
/// Ollama's `/api/*` live).
fn root(base_url: &str) -> &str {
    let b = base_url.trim_end_matches('/');
    b.strip_suffix("/v1").unwrap_or(b)
}

/// The OpenAI-style model list of a server: `{root}/v1/models`.
fn models_url(provider: &Provider) -> String {
    format!("{}/v1/models", root(&provider.base_url))
}

async fn get_json(client: &reqwest::Client, url: &str, provider: &Provider) -> Option<Value> {
    let mut req = client.get(url).timeout(PROBE_TIMEOUT);
    req = with_key(req, provider);
    let resp = req.send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    serde_json::from_slice(&capped(resp).await.ok()?).ok()
}

/// The answer's body, read up to [`MAX_ANSWER`]; longer, or cut off:
/// why, to be shown.
pub(crate) async fn capped(mut resp: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) if out.len() + chunk.len() > MAX_ANSWER => {
                return Err(format!(
                    "the answer is longer than {} MiB: not read further",
                    MAX_ANSWER >> 20
                ));
            }
            Ok(Some(chunk)) => out.extend_from_slice(&chunk),
            Ok(None) => return Ok(out),
            Err(e) => return Err(format!("the answer was cut off: {}", e.without_url())),
        }
    }
}

/// The provider's key, as the gateway sends it (none when it has none).
pub(crate) fn with_key(
    req: reqwest::RequestBuilder,
    provider: &Provider,
) -> reqwest::RequestBuilder {
    match &provider.key {
        Some(key) => match provider.kind {
            crate::config::ProviderKind::Openai => req.bearer_auth(&key.0),
            crate::config::ProviderKind::Anthropic => req.header("x-api-key", &key.0),
        },
        None => req,
    }
}

/// Asks `provider`'s server what it serves. Never fails: what it cannot
/// learn stays None.
pub(crate) async fn probe(client: &reqwest::Client, provider: &Provider) -> ServerInfo {
    if is_hosted(provider) {
        return ServerInfo::default();
    }
    let base = root(&provider.base_url).to_string();
    let (props_url, models_url) = (format!("{base}/props"), models_url(provider));
    let (props, models) = tokio::join!(
        get_json(client, &props_url, provider),
        get_json(client, &models_url, provider),
    );
    let mut info = ServerInfo::default();
    if let Some(p) = props.as_ref().and_then(from_props) {
        info = p;
    }
    if let Some(m) = models.as_ref() {
        let (listed, source) = from_models(m);
        if !listed.is_empty() {
            info.source = info.source.or(source);
            info.models = listed;
        }
    }
    if info.window.is_none() && info.models.is_empty() {
        info = ollama(client, provider, &base).await.unwrap_or(info);
    }
    info
}

/// llama-server's `/props`.
pub(crate) fn from_props(v: &Value) -> Option<ServerInfo> {
    let n_ctx = v["default_generation_settings"]["n_ctx"].as_u64()?;
    Some(ServerInfo {
        window: Some(n_ctx).filter(|w| *w >= MIN_WINDOW),
        models: BTreeMap::new(),
        source: Some("llama-server /props"),
        template_tools: v["chat_template_caps"]["supports_tool_calls"].as_bool(),
        version: v["build_info"].as_str().map(str::to_string),
    })
}

/// `/v1/models`: vLLM's `max_model_len` or llama-server's `meta.n_ctx`.
pub(crate) fn from_models(v: &Value) -> (BTreeMap<String, u64>, Option<&'static str>) {
    let mut out = BTreeMap::new();
    let mut source = None;
    for m in v["data"].as_array().into_iter().flatten() {
        let Some(id) = m["id"].as_str() else { continue };
        let (w, s) = if let Some(w) = m["max_model_len"].as_u64() {
            (w, "vLLM /v1/models max_model_len")
        } else if let Some(w) = m["meta"]["n_ctx"].as_u64() {
            (w, "llama-server /v1/models meta.n_ctx")
        } else {
            continue;
        };
        if w >= MIN_WINDOW {
            out.insert(id.to_string(), w);
            source = Some(s);
        }
    }
    (out, source)
}

/// The model ids a server lists at `/v1/models` (for `doctor`).
pub(crate) async fn model_ids(client: &reqwest::Client, provider: &Provider) -> Vec<String> {
    let url = format!("{}/models", provider.base_url);
    let Some(v) = get_json(client, &url, provider).await else {
        return Vec::new();
    };
    v["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_str().map(str::to_string))
        .collect()
}

/// Ollama's `/api/tags` and `/api/show`.
async fn ollama(client: &reqwest::Client, provider: &Provider, base: &str) -> Option<ServerInfo> {
    let tags = get_json(client, &format!("{base}/api/tags"), provider).await?;
    let mut models = BTreeMap::new();
    for m in tags["models"].as_array()?.iter().take(OLLAMA_MODELS) {
        let Some(name) = m["name"].as_str() else {
            continue;
        };
        let req = client
            .post(format!("{base}/api/show"))
            .timeout(PROBE_TIMEOUT)
            .json(&json!({"model": name}));
        let Ok(resp) = with_key(req, provider).send().await else {
            continue;
        };
        let Some(show) = capped(resp)
            .await
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        else {
            continue;
        };
        if let Some(w) = ollama_window(&show) {
            models.insert(name.to_string(), w);
        }
    }
    (!models.is_empty()).then_some(ServerInfo {
        models,
        source: Some("Ollama /api/show num_ctx"),
        ..Default::default()
    })
}

/// `num_ctx` from an `/api/show` answer's `parameters` ("num_ctx 8192").
pub(crate) fn ollama_window(show: &Value) -> Option<u64> {
    let params = show["parameters"].as_str()?;
    params
        .lines()
        .filter_map(|l| l.trim().strip_prefix("num_ctx"))
        .filter_map(|rest| rest.trim().parse::<u64>().ok())
        .find(|w| *w >= MIN_WINDOW)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::recorded::answer;

    /// Issue 27 item 7: the window read from llama-server itself, as it
    /// answered (recorded: `scripts/record-local-servers.py`), and whether
    /// its chat template renders tools (started with the tool-capable
    /// template setup.sh copies beside it).
    #[test]
    fn llama_server_props_give_its_window_and_template_caps() {
        let info = from_props(&answer("llama-server", "props.json")).unwrap();
        assert_eq!(info.window, Some(8192));
        assert_eq!(info.source, Some("llama-server /props"));
        assert_eq!(info.template_tools, Some(true));
        assert!(info.version.is_some_and(|v| !v.is_empty()));
        let (models, source) = from_models(&answer("llama-server", "models.json"));
        assert_eq!(models.values().copied().collect::<Vec<_>>(), vec![8192]);
        assert_eq!(source, Some("llama-server /v1/models meta.n_ctx"));
    }

    /// Issue 27 item 7 on llama-cpp-python's server (recorded): no
    /// `/props` (404) and a model list without a window, so the window must
    /// come from config (`doctor` says so).
    #[test]
    fn llama_cpp_python_says_no_window() {
        let lcp = "llama-cpp-python";
        let props = crate::llm::recorded::exchange(lcp, "props.json");
        assert_eq!(props["response"]["status"], 404);
        assert!(from_props(&props["response"]["body"]).is_none());
        let models = answer(lcp, "models.json");
        assert_eq!(models["data"][0]["id"], "smollm2");
        assert_eq!(from_models(&models), (BTreeMap::new(), None));
    }

    #[test]
    fn vllm_and_ollama_windows_per_model() {
        let v = json!({"object": "list", "data": [
            {"id": "Qwen/Qwen2.5-Coder-7B-Instruct", "object": "model", "max_model_len": 32768},
            {"id": "tiny", "object": "model", "max_model_len": 512}
        ]});
        let (models, source) = from_models(&v);
        assert_eq!(
            models,
            BTreeMap::from([("Qwen/Qwen2.5-Coder-7B-Instruct".to_string(), 32768)])
        );
        assert_eq!(source, Some("vLLM /v1/models max_model_len"));
        let show = json!({"parameters": "stop \"<|im_end|>\"\nnum_ctx 16384", "model_info": {"qwen2.context_length": 32768}});
        assert_eq!(ollama_window(&show), Some(16384));
        // Without num_ctx Ollama cuts at its default: no window believed.
        let show =
            json!({"parameters": "stop \"x\"", "model_info": {"qwen2.context_length": 32768}});
        assert_eq!(ollama_window(&show), None);
    }

    #[test]
    fn served_windows_by_provider_then_model() {
        let mut w = ServedWindows::default();
        w.0.insert(
            "local".into(),
            ServerInfo {
                window: Some(4096),
                models: BTreeMap::from([("big".to_string(), 32768)]),
                ..Default::default()
            },
        );
        assert_eq!(w.window("local", "big"), Some(32768));
        assert_eq!(w.window("local", "smollm2"), Some(4096));
        assert_eq!(w.window("other", "smollm2"), None);
        assert_eq!(root("http://127.0.0.1:8080/v1/"), "http://127.0.0.1:8080");
        assert_eq!(root("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
    }
}
