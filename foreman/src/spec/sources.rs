//! Where each effective setting of a task came from, for `--dry-run`: a
//! built-in default, config.yaml, the environment (`SAHEELI_<KEY>`), the
//! prompt's front-matter, or `--param` (the later layer wins, in that
//! order). The settings shown, and how, are the rows of the one settings
//! table (`crate::settings`) that have a `value`.

use saheeli_protocol::front_matter::FrontMatter;
use serde::Serialize;
use serde_json::Value;

use crate::config::{Config, SetKeys};
use crate::settings::{self, Derived, Setting};

use super::{TaskSpec, image_for};

/// The layer a setting's value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) enum Source {
    /// Saheeli's built-in default (nothing set it).
    #[serde(rename = "default")]
    Default,
    /// The config file (config.yaml, or the one `--config` names).
    #[serde(rename = "config.yaml")]
    Config,
    /// A `SAHEELI_<KEY>` environment variable.
    #[serde(rename = "environment")]
    Env,
    /// config.yaml's `agent_types:` entry the task names (issue 52).
    #[serde(rename = "agent_type")]
    AgentType,
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
            Source::Env => "environment",
            Source::AgentType => "agent_type",
            Source::FrontMatter => "front-matter",
            Source::Param => "--param",
        }
    }
}

/// A setting's effective value and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Effective {
    pub key: &'static str,
    pub value: Value,
    pub source: Source,
}

/// Which layer set `setting`: the last of config.yaml and the
/// environment (`config_keys`), the task's agent type (`of_type`: the keys
/// it sets), the front-matter `fm` (as written, before `--param`) and the
/// `params` given.
pub(crate) fn source_of(
    setting: &Setting,
    config_keys: &SetKeys,
    of_type: &FrontMatter,
    fm: &FrontMatter,
    params: &[String],
) -> Source {
    let by_param = params
        .iter()
        .filter_map(|p| p.split_once('=').map(|(k, _)| k))
        .any(|k| k == setting.key);
    if by_param && setting.param {
        Source::Param
    } else if setting.in_front_matter.is_some_and(|set| set(fm)) {
        Source::FrontMatter
    } else if setting.in_front_matter.is_some_and(|set| set(of_type)) {
        Source::AgentType
    } else if setting
        .config
        .is_some_and(|k| config_keys.env.contains_key(k))
    {
        Source::Env
    } else if setting.config.is_some_and(|k| config_keys.file.contains(k)) {
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
    let derived = Derived {
        image: image_for(cfg, &spec.agent),
    };
    let of_type = super::agent_type::set_by(cfg, spec.agent_type.as_deref());
    settings::all()
        .filter_map(|s| {
            Some(Effective {
                key: s.key,
                value: (s.value?)(spec, &derived),
                source: source_of(s, &cfg.set_keys, &of_type, fm, params),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn setting(key: &str) -> &'static Setting {
        settings::all()
            .find(|s| s.key == key && s.value.is_some())
            .expect(key)
    }

    fn fm(yaml: &str) -> FrontMatter {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn none() -> FrontMatter {
        FrontMatter::default()
    }

    fn keys(list: &[&str]) -> SetKeys {
        SetKeys {
            file: list.iter().map(|k| k.to_string()).collect(),
            env: Default::default(),
        }
    }

    #[test]
    fn each_layer_wins_over_the_ones_below() {
        let mut config = keys(&["task.model", "task.max_steps", "task.timeout", "image"]);
        config
            .env
            .insert("task.retries".into(), "SAHEELI_RETRIES".into());
        config
            .env
            .insert("task.timeout".into(), "SAHEELI_TIMEOUT".into());
        config
            .env
            .insert("task.model".into(), "SAHEELI_MODEL".into());
        let front = fm("model: a\nmax_steps: 3\n");
        let params = ["model=b".to_string()];
        let of = |k| source_of(setting(k), &config, &none(), &front, &params);
        assert_eq!(of("model"), Source::Param);
        assert_eq!(of("max_steps"), Source::FrontMatter);
        assert_eq!(of("timeout"), Source::Env);
        assert_eq!(of("retries"), Source::Env);
        assert_eq!(of("image"), Source::Config);
        assert_eq!(of("verify_retries"), Source::Default);
        assert_eq!(of("title"), Source::Default);
    }

    #[test]
    fn an_agent_type_sits_between_the_config_and_the_front_matter() {
        let config = keys(&["task.model", "task.max_steps", "task.timeout"]);
        let of_type = fm("model: a\nmax_steps: 3\ntools: [task_complete]\n");
        let front = fm("max_steps: 4\n");
        let params = ["tools=[read_file]".to_string()];
        let of = |k| source_of(setting(k), &config, &of_type, &front, &params);
        assert_eq!(of("model"), Source::AgentType);
        assert_eq!(of("max_steps"), Source::FrontMatter);
        assert_eq!(of("timeout"), Source::Config);
        // `tools` is no `--param` key: the type's value stands.
        assert_eq!(of("tools"), Source::AgentType);
        assert_eq!(Source::AgentType.as_str(), "agent_type");
    }

    #[test]
    fn nested_and_map_keys_are_traced() {
        let front = fm("resources: { memory: 1g }\nenv: { A: b }\n");
        let config = keys(&["task", "task.cpus"]);
        let of = |k| source_of(setting(k), &config, &none(), &front, &[]);
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
        let of = |k| source_of(setting(k), &SetKeys::default(), &none, &none, &params);
        assert_eq!(of("max_steps"), Source::Default);
        assert_eq!(of("title"), Source::Param);
    }

    #[test]
    fn every_shown_setting_is_named_once() {
        let mut seen = BTreeSet::new();
        for s in settings::all().filter(|s| s.value.is_some()) {
            assert!(seen.insert(s.key), "`{}` shown twice", s.key);
        }
    }
}
