//! Where each effective setting of a task came from, for `--dry-run`: a
//! built-in default, config.yaml, the prompt's front-matter, or `--param`
//! (the later layer wins, in that order).
//!
//! [`SETTINGS`] is the one list of settings shown: a new front-matter key
//! is a new row there (its name, the config.yaml key behind its default,
//! whether the front-matter sets it, and its effective value).

use std::collections::BTreeSet;

use saheeli_protocol::front_matter::{FrontMatter, Memory};
use serde::Serialize;
use serde_json::{Value, json};

use crate::config::Config;

use super::TaskSpec;

/// The layer a setting's value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) enum Source {
    /// Saheeli's built-in default (nothing set it).
    #[serde(rename = "default")]
    Default,
    /// The config file (config.yaml, or the one `--config` names).
    #[serde(rename = "config.yaml")]
    Config,
    /// The prompt file's front-matter.
    #[serde(rename = "front-matter")]
    FrontMatter,
    /// `--param KEY=VALUE` on the command line.
    #[serde(rename = "--param")]
    Param,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::Config => "config.yaml",
            Source::FrontMatter => "front-matter",
            Source::Param => "--param",
        }
    }
}

/// One setting a dry run shows.
pub(crate) struct Setting {
    /// Its name as the front-matter writes it (`timeout`, `resources.memory`).
    pub key: &'static str,
    /// The config.yaml key that sets its default, if there is one.
    config: Option<&'static str>,
    /// Whether a front-matter sets it.
    in_front_matter: fn(&FrontMatter) -> bool,
    /// Its effective value, as a front-matter would write it.
    value: fn(&TaskSpec, &Config) -> Value,
}

fn never(_: &FrontMatter) -> bool {
    false
}

/// Every setting, in the order a dry run shows them.
pub(crate) const SETTINGS: &[Setting] = &[
    Setting {
        key: "title",
        config: None,
        in_front_matter: |f| f.title.is_some(),
        value: |s, _| json!(s.title),
    },
    Setting {
        key: "model",
        config: Some("task.model"),
        in_front_matter: |f| f.model.is_some(),
        value: |s, _| json!(s.model),
    },
    Setting {
        key: "max_steps",
        config: Some("task.max_steps"),
        in_front_matter: |f| f.max_steps.is_some(),
        value: |s, _| json!(s.max_steps),
    },
    Setting {
        key: "max_tokens",
        config: Some("task.max_tokens"),
        in_front_matter: |f| f.max_tokens.is_some(),
        value: |s, _| json!(s.max_tokens),
    },
    Setting {
        key: "max_cost",
        config: Some("task.max_cost"),
        in_front_matter: |f| f.max_cost.is_some(),
        value: |s, _| json!(s.max_cost),
    },
    Setting {
        key: "timeout",
        config: Some("task.timeout"),
        in_front_matter: |f| f.timeout.is_some(),
        value: |s, _| {
            let t = std::time::Duration::from_secs(s.timeout_s);
            json!(humantime::format_duration(t).to_string())
        },
    },
    Setting {
        key: "retries",
        config: Some("task.retries"),
        in_front_matter: |f| f.retries.is_some(),
        value: |s, _| json!(s.retries),
    },
    Setting {
        key: "retry_on",
        config: Some("task.retry_on"),
        in_front_matter: |f| f.retry_on.is_some(),
        value: |s, _| json!(s.retry_on),
    },
    Setting {
        key: "network",
        config: Some("task.network"),
        in_front_matter: |f| f.network.is_some(),
        value: |s, _| json!(s.network.as_str()),
    },
    Setting {
        key: "resources.memory",
        config: Some("task.memory"),
        in_front_matter: |f| f.resources.as_ref().is_some_and(|r| r.memory.is_some()),
        value: |s, _| json!(Memory(s.memory).to_string()),
    },
    Setting {
        key: "resources.cpus",
        config: Some("task.cpus"),
        in_front_matter: |f| f.resources.as_ref().is_some_and(|r| r.cpus.is_some()),
        value: |s, _| json!(s.cpus),
    },
    Setting {
        key: "resources.pids",
        config: Some("task.pids"),
        in_front_matter: |f| f.resources.as_ref().is_some_and(|r| r.pids.is_some()),
        value: |s, _| json!(s.pids),
    },
    Setting {
        key: "resources.disk",
        config: Some("task.disk"),
        in_front_matter: |f| f.resources.as_ref().is_some_and(|r| r.disk.is_some()),
        value: |s, _| json!(s.disk.map(|d| Memory(d).to_string())),
    },
    Setting {
        key: "env",
        config: None,
        in_front_matter: |f| !f.env.is_empty(),
        value: |s, _| json!(s.env),
    },
    Setting {
        key: "workspace",
        config: None,
        in_front_matter: |f| f.workspace.is_some(),
        value: |s, _| json!(s.workspace),
    },
    Setting {
        key: "workspace_include_ignored",
        config: Some("task.workspace_include_ignored"),
        in_front_matter: |f| f.workspace_include_ignored.is_some(),
        value: |s, _| json!(s.workspace_include_ignored),
    },
    Setting {
        key: "max_output_bytes",
        config: Some("task.max_output_bytes"),
        in_front_matter: never,
        value: |s, _| json!(s.max_output_bytes),
    },
    Setting {
        key: "approve",
        config: Some("task.approve"),
        in_front_matter: |f| f.approve.is_some(),
        value: |s, _| json!(s.gates),
    },
    Setting {
        key: "pause_on",
        config: Some("task.pause_on"),
        in_front_matter: |f| f.pause_on.is_some(),
        value: |s, _| {
            if s.pause_on_tool_error {
                json!(["tool_error"])
            } else {
                json!([])
            }
        },
    },
    Setting {
        key: "human_timeout",
        config: Some("task.human_timeout"),
        in_front_matter: |f| f.human_timeout.is_some(),
        value: |s, _| {
            let t = std::time::Duration::from_secs(s.human_timeout_s);
            json!(humantime::format_duration(t).to_string())
        },
    },
    Setting {
        key: "park_after",
        config: Some("task.park_after"),
        in_front_matter: |f| f.park_after.is_some(),
        value: |s, _| {
            let t = std::time::Duration::from_millis(s.park_after_ms);
            json!(humantime::format_duration(t).to_string())
        },
    },
    Setting {
        key: "no_human",
        config: Some("task.no_human"),
        in_front_matter: never,
        value: |s, _| json!(s.no_human),
    },
    Setting {
        key: "no_human_gates",
        config: Some("task.no_human_gates"),
        in_front_matter: never,
        value: |s, _| {
            json!(if s.no_human_approves {
                "approve"
            } else {
                "deny"
            })
        },
    },
    Setting {
        key: "capabilities",
        config: None,
        in_front_matter: |f| f.capabilities.is_some(),
        value: |s, _| json!(s.capabilities),
    },
    Setting {
        key: "tools",
        config: None,
        in_front_matter: |f| f.tools.is_some(),
        value: |s, _| match &s.tools {
            Some(t) => json!(t),
            None => json!("all built-in tools"),
        },
    },
    Setting {
        key: "notify",
        config: Some("notify"),
        in_front_matter: |f| f.notify.is_some(),
        value: |s, _| json!(s.notify.iter().map(|n| &n.url).collect::<Vec<_>>()),
    },
    Setting {
        key: "verify",
        config: Some("task.verify"),
        in_front_matter: |f| f.verify.is_some(),
        value: |s, _| json!(s.verify),
    },
    Setting {
        key: "verify_files",
        config: Some("task.verify_files"),
        in_front_matter: |f| f.verify_files.is_some(),
        value: |s, _| json!(s.verify_files),
    },
    Setting {
        key: "verify_retries",
        config: Some("task.verify_retries"),
        in_front_matter: |f| f.verify_retries.is_some(),
        value: |s, _| json!(s.verify_retries),
    },
    Setting {
        key: "verify_timeout",
        config: Some("task.verify_timeout"),
        in_front_matter: |f| f.verify_timeout.is_some(),
        value: |s, _| {
            let t = std::time::Duration::from_secs(s.verify_timeout_s);
            json!(humantime::format_duration(t).to_string())
        },
    },
    Setting {
        key: "assess",
        config: Some("task.assess"),
        in_front_matter: |f| f.assess.is_some(),
        value: |s, _| json!(s.assess),
    },
    Setting {
        key: "objective",
        config: Some("task.objective"),
        in_front_matter: |f| f.objective.is_some(),
        value: |s, _| json!(s.objective),
    },
    // --- issue 25: third-party agents ---
    Setting {
        key: "agent",
        config: Some("task.agent"),
        in_front_matter: |f| f.agent.is_some(),
        value: |s, _| json!(s.agent),
    },
    Setting {
        key: "image",
        config: Some("image"),
        in_front_matter: never,
        value: |s, c| json!(super::image_for(c, &s.agent)),
    },
];

/// A setting's effective value and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Effective {
    pub key: &'static str,
    pub value: Value,
    pub source: Source,
}

/// Which layer set `setting`: the last of config.yaml (`config_keys`, the
/// keys the file names), the front-matter `fm` (as written, before
/// `--param`) and the `params` given.
pub(crate) fn source_of(
    setting: &Setting,
    config_keys: &BTreeSet<String>,
    fm: &FrontMatter,
    params: &[String],
) -> Source {
    let by_param = params
        .iter()
        .filter_map(|p| p.split_once('=').map(|(k, _)| k))
        .any(|k| k == setting.key);
    if by_param {
        Source::Param
    } else if (setting.in_front_matter)(fm) {
        Source::FrontMatter
    } else if setting.config.is_some_and(|k| config_keys.contains(k)) {
        Source::Config
    } else {
        Source::Default
    }
}

/// Every setting of `spec` (checked by `TaskSpec::from_prompt` from the
/// same `fm` and `params`) with its value and source.
pub(crate) fn effective(
    cfg: &Config,
    spec: &TaskSpec,
    fm: &FrontMatter,
    params: &[String],
) -> Vec<Effective> {
    SETTINGS
        .iter()
        .map(|s| Effective {
            key: s.key,
            value: (s.value)(spec, cfg),
            source: source_of(s, &cfg.set_keys, fm, params),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(key: &str) -> &'static Setting {
        SETTINGS.iter().find(|s| s.key == key).expect(key)
    }

    fn fm(yaml: &str) -> FrontMatter {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn keys(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn each_layer_wins_over_the_ones_below() {
        let config = keys(&["task.model", "task.max_steps", "task.timeout", "image"]);
        let front = fm("model: a\nmax_steps: 3\n");
        let params = ["model=b".to_string()];
        let of = |k| source_of(setting(k), &config, &front, &params);
        assert_eq!(of("model"), Source::Param);
        assert_eq!(of("max_steps"), Source::FrontMatter);
        assert_eq!(of("timeout"), Source::Config);
        assert_eq!(of("image"), Source::Config);
        assert_eq!(of("retries"), Source::Default);
        assert_eq!(of("title"), Source::Default);
    }

    #[test]
    fn nested_and_map_keys_are_traced() {
        let front = fm("resources: { memory: 1g }\nenv: { A: b }\n");
        let config = keys(&["task", "task.cpus"]);
        let of = |k| source_of(setting(k), &config, &front, &[]);
        assert_eq!(of("resources.memory"), Source::FrontMatter);
        assert_eq!(of("resources.cpus"), Source::Config);
        assert_eq!(of("resources.pids"), Source::Default);
        assert_eq!(of("env"), Source::FrontMatter);
        assert_eq!(of("workspace"), Source::Default);
    }

    #[test]
    fn a_param_names_its_key_exactly() {
        // `max_steps_x=…` is not `max_steps` (and from_prompt refuses it).
        let params = ["max_steps_x=1".to_string(), "title=a=b".to_string()];
        let none = FrontMatter::default();
        let of = |k| source_of(setting(k), &BTreeSet::new(), &none, &params);
        assert_eq!(of("max_steps"), Source::Default);
        assert_eq!(of("title"), Source::Param);
    }

    #[test]
    fn setting_names_are_unique_and_config_keys_exist() {
        let mut seen = BTreeSet::new();
        for s in SETTINGS {
            assert!(seen.insert(s.key), "`{}` listed twice", s.key);
            // A config file naming the key parses, or fails on its value:
            // the key is not misspelt.
            let Some(k) = s.config else { continue };
            let yaml = match k.split_once('.') {
                Some((section, key)) => format!("{section}:\n  {key}: ~\n"),
                None => format!("{k}: ~\n"),
            };
            if let Err(e) = serde_yaml::from_str::<crate::config::ConfigFile>(&yaml) {
                assert!(!e.to_string().contains("unknown field"), "`{k}`: {e}");
            }
        }
    }

    #[test]
    fn every_front_matter_key_is_shown() {
        // A key added to the front-matter needs a row in SETTINGS.
        let yaml = serde_yaml::to_value(FrontMatter::default()).unwrap();
        for key in yaml.as_mapping().unwrap().keys() {
            let key = key.as_str().unwrap();
            // Refused by `TaskSpec::from_prompt` until it is supported;
            // a template's parameters and steps have sections of their own.
            if matches!(key, "verify" | "parameters" | "steps") {
                continue;
            }
            let prefix = format!("{key}.");
            assert!(
                SETTINGS
                    .iter()
                    .any(|s| s.key == key || s.key.starts_with(&prefix)),
                "front-matter key `{key}` has no row in SETTINGS"
            );
        }
    }
}
