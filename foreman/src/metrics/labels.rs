//! Provider and model labels: bounded whatever prompts name.
//!
//! A model is written in each prompt, so there could be as many as there
//! are tasks. The first [`MAX_MODELS`] distinct ones keep their name; any
//! later one is counted as `other`. A replay script is `replay` (its file
//! name is not a model). Providers come from config.yaml, as the gateway
//! routes the model.

use std::collections::{HashMap, HashSet};

use prometheus_client::encoding::EncodeLabelSet;

use crate::config::Providers;

/// Distinct (provider, model) label pairs before new ones become `other`.
pub(crate) const MAX_MODELS: usize = 50;

/// The longest model label; longer names are cut.
const MAX_MODEL_CHARS: usize = 80;

/// Raw model strings remembered, to spare routing them again.
const MAX_REMEMBERED: usize = 1000;

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub(crate) struct ModelLabels {
    pub provider: String,
    pub model: String,
}

/// Gives each model string its labels.
#[derive(Debug)]
pub(crate) struct Models {
    providers: Providers,
    remembered: HashMap<String, ModelLabels>,
    named: HashSet<ModelLabels>,
}

impl Models {
    pub fn new(providers: Providers) -> Models {
        Models {
            providers,
            remembered: HashMap::new(),
            named: HashSet::new(),
        }
    }

    /// The labels of a model as a prompt names it.
    pub fn label(&mut self, model: &str) -> ModelLabels {
        if let Some(l) = self.remembered.get(model) {
            return l.clone();
        }
        let mut l = self.route(model);
        if !self.named.contains(&l) {
            if self.named.len() < MAX_MODELS {
                self.named.insert(l.clone());
            } else {
                l.model = "other".into();
            }
        }
        if self.remembered.len() < MAX_REMEMBERED {
            self.remembered.insert(model.to_string(), l.clone());
        }
        l
    }

    fn route(&self, model: &str) -> ModelLabels {
        if model.starts_with("replay:") {
            return ModelLabels {
                provider: "replay".into(),
                model: "replay".into(),
            };
        }
        let route = self.providers.route(model);
        let name: String = route.model.chars().take(MAX_MODEL_CHARS).collect();
        ModelLabels {
            provider: route.provider.name,
            model: if name.is_empty() {
                "unknown".into()
            } else {
                name
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, ConfigFile};

    fn models() -> Models {
        let file: ConfigFile = serde_yaml::from_str(
            "providers:\n  local: { kind: openai, base_url: 'http://127.0.0.1:9/v1' }\n",
        )
        .unwrap();
        Models::new(Providers::from_config(&Config {
            source: None,
            base_dir: "/tmp".into(),
            file,
            set_keys: Default::default(),
        }))
    }

    fn pair(l: ModelLabels) -> (String, String) {
        (l.provider, l.model)
    }

    #[test]
    fn models_are_labelled_as_the_gateway_routes_them() {
        let mut m = models();
        let p = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(pair(m.label("gpt-4o")), p("openai", "gpt-4o"));
        assert_eq!(pair(m.label("claude-x")), p("anthropic", "claude-x"));
        assert_eq!(pair(m.label("local/llama3")), p("local", "llama3"));
        assert_eq!(
            pair(m.label("replay:scripts/a.json")),
            p("replay", "replay")
        );
        assert_eq!(pair(m.label("replay:b.json")), p("replay", "replay"));
    }

    #[test]
    fn the_model_label_set_is_bounded() {
        let mut m = models();
        let mut labels = HashSet::new();
        for i in 0..MAX_MODELS * 3 {
            labels.insert(m.label(&format!("model-{i}")));
        }
        // The first ones keep their names; the rest share `other`.
        assert_eq!(labels.len(), MAX_MODELS + 1);
        assert_eq!(m.label("model-0").model, "model-0");
        assert_eq!(m.label(&format!("model-{}", MAX_MODELS)).model, "other");
        let long = "x".repeat(500);
        assert_eq!(models().label(&long).model.len(), MAX_MODEL_CHARS);
    }
}
