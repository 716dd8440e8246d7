//! The table against the parsers: every field has a row and every row a
//! field, each documented default is the built-in one, and the reference
//! page is what the table writes.

use std::collections::BTreeSet;

use saheeli_protocol::front_matter::{FrontMatter, Resources};
use serde::de::{self, Deserialize, Deserializer, Visitor};

use super::env::{Override, apply, overrides, read};
use super::*;
use crate::config::{ConfigFile, HttpConfig, Limits, LlmConfig, SwarmConfig, TaskDefaults};

/// A deserializer that only records the field names a struct asks for.
struct Probe<'a>(&'a mut Option<&'static [&'static str]>);

impl<'de> Deserializer<'de> for Probe<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = Some(fields);
        Err(de::Error::custom("probed"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// The field names of the struct `T` (as serde reads them).
fn fields<T: for<'de> Deserialize<'de>>() -> &'static [&'static str] {
    let mut got = None;
    let _ = T::deserialize(Probe(&mut got));
    got.expect("a struct")
}

#[test]
fn every_front_matter_key_has_one_row_and_every_row_a_key() {
    let mut want = BTreeSet::new();
    for f in fields::<FrontMatter>() {
        if *f == "resources" {
            want.extend(
                fields::<Resources>()
                    .iter()
                    .map(|r| format!("resources.{r}")),
            );
        } else {
            want.insert(f.to_string());
        }
    }
    let rows: Vec<&str> = all()
        .filter(|s| s.in_front_matter.is_some())
        .map(|s| s.key)
        .collect();
    let have: BTreeSet<String> = rows.iter().map(|k| k.to_string()).collect();
    assert_eq!(rows.len(), have.len(), "a front-matter key has two rows");
    assert_eq!(
        want, have,
        "FrontMatter's fields and the table's front-matter rows differ"
    );
}

#[test]
fn every_config_key_has_one_row_and_every_row_a_key() {
    let sections: [(&str, &[&str]); 5] = [
        ("task", fields::<TaskDefaults>()),
        ("limits", fields::<Limits>()),
        ("llm", fields::<LlmConfig>()),
        ("http", fields::<HttpConfig>()),
        ("swarm", fields::<SwarmConfig>()),
    ];
    let mut want = BTreeSet::new();
    for f in fields::<ConfigFile>() {
        match sections.iter().find(|(s, _)| s == f) {
            Some((s, inner)) => want.extend(inner.iter().map(|i| format!("{s}.{i}"))),
            None => {
                want.insert(f.to_string());
            }
        }
    }
    let rows: Vec<&str> = all().filter_map(|s| s.config).collect();
    let have: BTreeSet<String> = rows.iter().map(|k| k.to_string()).collect();
    assert_eq!(rows.len(), have.len(), "a config key has two rows");
    assert_eq!(want, have, "ConfigFile's keys and the table's differ");
}

#[test]
fn each_documented_default_is_the_built_in_one() {
    let built_in = format!("{:?}", ConfigFile::default());
    for s in all() {
        let (Some(config), false) = (s.config, s.default.is_empty()) else {
            continue;
        };
        let value = serde_yaml::from_str(s.default).expect(s.default);
        let o = Override {
            config,
            var: String::new(),
            ty: s.ty,
            value,
        };
        let file: ConfigFile = serde_yaml::from_value(apply(serde_yaml::Value::Null, &[o]))
            .unwrap_or_else(|e| panic!("`{config}: {}`: {e}", s.default));
        assert_eq!(
            format!("{file:?}"),
            built_in,
            "`{config}` is documented as `{}`, which is not its built-in default",
            s.default
        );
    }
}

#[test]
fn rows_are_complete_and_consistent() {
    for s in all() {
        assert!(!s.doc.is_empty(), "`{}` has no doc line", s.key);
        assert!(!s.ty.is_empty(), "`{}` has no type", s.key);
        assert!(
            s.config.is_some() || s.in_front_matter.is_some(),
            "`{}` cannot be set anywhere",
            s.key
        );
        if s.param {
            // `--param` writes a top-level front-matter key.
            assert!(
                s.in_front_matter.is_some() && !s.key.contains('.'),
                "{}",
                s.key
            );
        }
    }
}

#[test]
fn environment_names_are_unique_and_not_taken() {
    // Variables Saheeli already reads for other things.
    let taken = [
        "SAHEELI_CONFIG",
        "SAHEELI_LOG",
        "SAHEELI_HTTP_TOKEN",
        "SAHEELI_LAUNCH",
        "SAHEELI_GATEWAY",
        "SAHEELI_GATEWAY_TOKEN_FILE",
        "SAHEELI_TASK_ID",
        "SAHEELI_WORKSPACE",
        "SAHEELI_PRIVSEP",
        "SAHEELI_DIR",
        "SAHEELI_WEBHOOK_SECRET",
        "SAHEELI_LOG_FORMAT",
    ];
    let mut seen = BTreeSet::new();
    for v in all().filter_map(Setting::env_var) {
        assert!(!taken.contains(&v.as_str()), "`{v}` is already used");
        assert!(!v.starts_with("SAHEELI_TEST_"), "{v}");
        assert!(seen.insert(v.clone()), "`{v}` twice");
    }
    assert_eq!(
        find_env("task.max_steps").as_deref(),
        Some("SAHEELI_MAX_STEPS")
    );
    assert_eq!(
        find_env("llm.max_attempts").as_deref(),
        Some("SAHEELI_LLM_MAX_ATTEMPTS")
    );
    assert_eq!(find_env("image").as_deref(), Some("SAHEELI_IMAGE"));
}

fn find_env(config: &str) -> Option<String> {
    all()
        .find(|s| s.config == Some(config))
        .and_then(Setting::env_var)
}

#[test]
fn the_environment_overrides_config_values() {
    let env = |v: &str| match v {
        "SAHEELI_MAX_STEPS" => Some("7".to_string()),
        "SAHEELI_IMAGE" => Some("img:1".to_string()),
        "SAHEELI_RETRY_ON" => Some("[timeout]".to_string()),
        "SAHEELI_LLM_MAX_ATTEMPTS" => Some("3".to_string()),
        "SAHEELI_TIMEOUT" => Some("  ".to_string()),
        _ => None,
    };
    let o = overrides(env);
    let vars: Vec<&str> = o.iter().map(|o| o.var.as_str()).collect();
    assert_eq!(
        vars,
        [
            "SAHEELI_MAX_STEPS",
            "SAHEELI_RETRY_ON",
            "SAHEELI_IMAGE",
            "SAHEELI_LLM_MAX_ATTEMPTS"
        ]
    );
    let doc = serde_yaml::from_str("image: file\ntask:\n  max_steps: 9\n  model: m\n").unwrap();
    let file: ConfigFile = read(doc, &o).unwrap();
    assert_eq!(file.task.max_steps, 7);
    assert_eq!(file.task.model, "m", "the file's other keys stay");
    assert_eq!(file.task.retry_on, ["timeout"]);
    assert_eq!(file.image, "img:1");
    assert_eq!(file.llm.max_attempts, 3);
    assert_eq!(
        env::keys(&o).get("task.max_steps").map(String::as_str),
        Some("SAHEELI_MAX_STEPS")
    );

    // A bad value names its variable.
    let bad = overrides(|v| (v == "SAHEELI_MAX_STEPS").then(|| "lots".to_string()));
    let e = read::<ConfigFile>(serde_yaml::Value::Null, &bad).unwrap_err();
    assert!(e.contains("`SAHEELI_MAX_STEPS` (takes integer)"), "{e}");
}

#[test]
fn param_keys_are_the_ones_it_always_took() {
    // `cache` (issue 26), `deadline` (issue 29), `retry_from` and
    // `budget_per_attempt` (issue 30) joined them; `agent` (issue 49: an
    // eval's `--param agent=oracle`); `agent_type` (issue 52: `--agent-type`);
    // `samples`, `select`, `fork_at` (issue 51: best-of-N).
    let mut keys = param_keys();
    keys.sort();
    assert_eq!(
        keys,
        [
            "agent",
            "agent_type",
            "assess",
            "budget_per_attempt",
            "cache",
            "deadline",
            "egress_approval",
            "fork_at",
            "max_cost",
            "max_steps",
            "max_tokens",
            "model",
            "network",
            "objective",
            "retries",
            "retry_from",
            "samples",
            "select",
            "timeout",
            "title",
            "verify",
            "verify_retries",
            "verify_timeout",
            "workspace"
        ]
    );
}
