//! Which server a model's calls go to, and with which key.
//!
//! Built in: `openai` (`OPENAI_BASE_URL`, `OPENAI_API_KEY`) and `anthropic`
//! (`ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`), as the vendors' SDKs read
//! them. `providers:` in config.yaml adds or replaces entries. A model
//! `NAME/model` goes to provider NAME, `claude-*` to anthropic, anything
//! else to openai.

use std::collections::BTreeMap;

use crate::config::{Config, Price, ProviderConfig, ProviderKind};

/// An API key. Prints as `***` so it cannot reach a log by accident.
#[derive(Clone)]
pub(crate) struct ApiKey(pub String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Provider {
    pub name: String,
    pub kind: ProviderKind,
    /// Without a trailing slash.
    pub base_url: String,
    /// The variable the key is read from: the vendors' own for `openai`
    /// and `anthropic`, else exactly the provider's `api_key_env`. None: no
    /// key is sent (a local server must not receive another provider's).
    pub key_env: Option<String>,
    pub key: Option<ApiKey>,
    /// The provider's own output cap per call (else `llm.max_output_tokens`).
    pub max_output_tokens: Option<u64>,
    /// Its models' context window (`context_window`), when configured.
    pub context_window: Option<u64>,
}

impl Provider {
    /// The endpoint for this provider's wire format.
    pub fn endpoint(&self) -> String {
        match self.kind {
            ProviderKind::Openai => format!("{}/chat/completions", self.base_url),
            ProviderKind::Anthropic => format!("{}/v1/messages", self.base_url),
        }
    }
}

/// A model resolved to its provider.
#[derive(Clone, Debug)]
pub(crate) struct Route {
    pub provider: Provider,
    /// The model name as sent upstream (the `NAME/` prefix removed).
    pub model: String,
    pub price: Option<Price>,
}

/// Every configured provider, keys read once from the environment.
#[derive(Clone, Debug)]
pub(crate) struct Providers {
    map: BTreeMap<String, Provider>,
    /// What capability servers are given from the environment: redacted
    /// wherever keys are.
    capability_secrets: Vec<(String, String)>,
    prices: BTreeMap<String, Price>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Providers {
    pub fn from_config(cfg: &Config) -> Providers {
        let mut configs: BTreeMap<String, ProviderConfig> = BTreeMap::from([
            (
                "openai".to_string(),
                ProviderConfig {
                    kind: ProviderKind::Openai,
                    base_url: None,
                    api_key_env: None,
                    max_output_tokens: None,
                    context_window: None,
                },
            ),
            (
                "anthropic".to_string(),
                ProviderConfig {
                    kind: ProviderKind::Anthropic,
                    base_url: None,
                    api_key_env: None,
                    max_output_tokens: None,
                    context_window: None,
                },
            ),
        ]);
        configs.extend(cfg.file.providers.clone());
        let map = configs
            .into_iter()
            .map(|(name, pc)| {
                let (url_env, key_env, default_url) = match pc.kind {
                    ProviderKind::Openai => (
                        "OPENAI_BASE_URL",
                        "OPENAI_API_KEY",
                        "https://api.openai.com/v1",
                    ),
                    ProviderKind::Anthropic => (
                        "ANTHROPIC_BASE_URL",
                        "ANTHROPIC_API_KEY",
                        "https://api.anthropic.com",
                    ),
                };
                let builtin = name == "openai" || name == "anthropic";
                let base_url = pc
                    .base_url
                    .clone()
                    .or_else(|| builtin.then(|| env(url_env)).flatten())
                    .unwrap_or_else(|| default_url.to_string());
                // A configured provider gets exactly the key it names, or
                // none: OPENAI_API_KEY went to local servers (issue 27).
                let key_env = pc
                    .api_key_env
                    .clone()
                    .or_else(|| builtin.then(|| key_env.to_string()));
                let key = key_env.as_deref().and_then(env).map(ApiKey);
                let p = Provider {
                    name: name.clone(),
                    kind: pc.kind,
                    base_url: base_url.trim_end_matches('/').to_string(),
                    key_env,
                    key,
                    max_output_tokens: pc.max_output_tokens,
                    context_window: pc.context_window,
                };
                (name, p)
            })
            .collect();
        let capability_secrets = cfg
            .file
            .capabilities
            .values()
            .flat_map(|c| {
                c.env
                    .iter()
                    .cloned()
                    .chain(c.headers.values().flat_map(|h| header_vars(h)))
            })
            .filter_map(|var| Some((var.clone(), std::env::var(&var).ok()?)))
            .collect();
        Providers {
            map,
            prices: cfg.file.prices.clone(),
            capability_secrets,
        }
    }

    /// The host names of every provider's server: egress never reaches
    /// them (the LLM goes through the gateway, with its key; issue 50).
    pub fn hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = self
            .map
            .values()
            .filter_map(|p| reqwest::Url::parse(&p.base_url).ok())
            .filter_map(|u| {
                u.host_str()
                    .map(|h| h.trim_matches(['[', ']']).to_ascii_lowercase())
            })
            .collect();
        hosts.sort();
        hosts.dedup();
        hosts
    }

    /// The provider and upstream model name for a model as written in a prompt.
    pub fn route(&self, model: &str) -> Route {
        let (provider, upstream) = match model.split_once('/') {
            Some((name, rest)) if self.map.contains_key(name) && !rest.is_empty() => {
                (&self.map[name], rest.to_string())
            }
            _ if model.starts_with("claude-") => (&self.map["anthropic"], model.to_string()),
            _ => (&self.map["openai"], model.to_string()),
        };
        let price = self
            .prices
            .get(model)
            .or_else(|| self.prices.get(&upstream))
            .copied();
        Route {
            provider: provider.clone(),
            model: upstream,
            price,
        }
    }

    /// Every provider, by name.
    pub fn all(&self) -> impl Iterator<Item = &Provider> {
        self.map.values()
    }

    /// The providers' names (`openai`, `anthropic` and config.yaml's).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.map.keys().map(String::as_str)
    }

    /// Every key value held, with the variable it came from (for redaction).
    pub fn secrets(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .map
            .values()
            .filter_map(|p| Some((p.key_env.clone()?, p.key.as_ref()?.0.clone())))
            .chain(self.capability_secrets.iter().cloned())
            .filter(|(_, v)| v.len() >= 8)
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Each provider and the variable its key is read from (`none`: no key
    /// is sent), for `run --dry-run`.
    pub fn keys(&self) -> Vec<(String, String)> {
        self.map
            .values()
            .map(|p| {
                let var = p.key_env.clone().unwrap_or_else(|| "none".into());
                (p.name.clone(), var)
            })
            .collect()
    }

    /// The base URL models go to by default, for the startup log line.
    pub fn summary(&self) -> String {
        self.map
            .values()
            .map(|p| format!("{}={}", p.name, p.base_url))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The `${VAR}` names in a header template.
pub(crate) fn header_vars(template: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else { break };
        out.push(after[..end].to_string());
        rest = &after[end + 1..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigFile;

    fn providers(yaml: &str) -> Providers {
        let file: ConfigFile = serde_yaml::from_str(yaml).unwrap();
        Providers::from_config(&Config {
            source: None,
            base_dir: "/tmp".into(),
            file,
            set_keys: Default::default(),
        })
    }

    #[test]
    fn models_pick_their_provider() {
        let p = providers(
            "providers:\n  local: { kind: openai, base_url: 'http://127.0.0.1:9/v1/' }\n\
             prices:\n  claude-x: { input_per_mtok: 3, output_per_mtok: 15 }\n",
        );
        let r = p.route("claude-x");
        assert_eq!(r.provider.kind, ProviderKind::Anthropic);
        assert!(r.price.is_some());
        assert!(r.provider.endpoint().ends_with("/v1/messages"));
        let r = p.route("local/llama3");
        assert_eq!(
            (r.provider.name.as_str(), r.model.as_str()),
            ("local", "llama3")
        );
        assert_eq!(
            r.provider.endpoint(),
            "http://127.0.0.1:9/v1/chat/completions"
        );
        // Slashes in model names of other servers (OpenRouter) stay intact.
        let r = p.route("meta/llama-3");
        assert_eq!(
            (r.provider.name.as_str(), r.model.as_str()),
            ("openai", "meta/llama-3")
        );
        assert!(r.price.is_none());
    }

    /// Issue 27 item 1: a provider without `api_key_env` (a local
    /// llama-server) was sent OPENAI_API_KEY as a bearer token.
    #[test]
    fn a_provider_gets_exactly_the_key_it_names_or_none() {
        // SAFETY: tests in this module read these variables only here.
        unsafe {
            std::env::set_var("SAHEELI_TEST_LOCAL_KEY", "local-secret-5678");
        }
        let p = providers(
            "providers:\n  local: { kind: openai, base_url: 'http://127.0.0.1:9/v1' }\n  \
             keyed: { kind: openai, base_url: 'http://127.0.0.1:9/v1', \
             api_key_env: SAHEELI_TEST_LOCAL_KEY }\n",
        );
        let local = p.route("local/smollm2").provider;
        assert!(local.key.is_none(), "local got a key: {:?}", local.key_env);
        assert_eq!(local.key_env, None);
        let keyed = p.route("keyed/smollm2").provider;
        assert_eq!(keyed.key.unwrap().0, "local-secret-5678");
        assert_eq!(keyed.key_env.as_deref(), Some("SAHEELI_TEST_LOCAL_KEY"));
        assert_eq!(
            p.route("gpt-4o").provider.key_env.as_deref(),
            Some("OPENAI_API_KEY")
        );
        let keys = p.keys();
        assert!(keys.contains(&("local".into(), "none".into())), "{keys:?}");
        assert!(keys.contains(&("openai".into(), "OPENAI_API_KEY".into())));
    }

    #[test]
    fn keys_never_print() {
        assert_eq!(format!("{:?}", ApiKey("sk-secret".into())), "***");
    }
}
