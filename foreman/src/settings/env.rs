//! `SAHEELI_<KEY>`: every config.yaml setting overridden from the
//! environment, named by the settings table (`Setting::env_var`).
//!
//! Layers, later wins: built-in default, config.yaml, the environment, a
//! prompt's front-matter, `--param`. A value is read as YAML, as in
//! config.yaml (`SAHEELI_MAX_STEPS=80`, `SAHEELI_RETRY_ON='[timeout]'`);
//! an empty variable counts as unset. Only the process environment is
//! read: `.env` holds keys, not settings.

use std::collections::BTreeMap;

use serde_yaml::{Mapping, Value};

use super::Setting;

/// One setting the environment overrides.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Override {
    /// The config.yaml key (`task.max_steps`).
    pub config: &'static str,
    /// The variable (`SAHEELI_MAX_STEPS`).
    pub var: String,
    /// What it takes (`integer`), for errors.
    pub ty: &'static str,
    pub value: Value,
}

/// The overrides `get` (the environment) holds, in table order.
pub(crate) fn overrides(get: impl Fn(&str) -> Option<String>) -> Vec<Override> {
    super::all()
        .filter_map(|s: &Setting| {
            let config = s.config?;
            let var = s.env_var()?;
            let raw = get(&var).filter(|v| !v.trim().is_empty())?;
            let value = serde_yaml::from_str(&raw).unwrap_or(Value::String(raw));
            Some(Override {
                config,
                var,
                ty: s.ty,
                value,
            })
        })
        .collect()
}

/// `doc` (a config file's YAML, or null) with each override put at its
/// key, sections made as needed.
pub(crate) fn apply(mut doc: Value, overrides: &[Override]) -> Value {
    if !doc.is_mapping() {
        doc = Value::Mapping(Mapping::new());
    }
    for o in overrides {
        let mut at = doc.as_mapping_mut().expect("a mapping");
        let mut parts = o.config.split('.').peekable();
        while let Some(part) = parts.next() {
            let key = Value::String(part.to_string());
            if parts.peek().is_none() {
                at.insert(key, o.value.clone());
                break;
            }
            let inner = at
                .entry(key)
                .or_insert_with(|| Value::Mapping(Mapping::new()));
            if !inner.is_mapping() {
                *inner = Value::Mapping(Mapping::new());
            }
            at = inner.as_mapping_mut().expect("a mapping");
        }
    }
    doc
}

/// `doc` with the overrides, read as `T`. An error names the variable at
/// fault (each is tried alone first), else all of them.
pub(crate) fn read<T: serde::de::DeserializeOwned>(
    doc: Value,
    overrides: &[Override],
) -> Result<T, String> {
    match serde_yaml::from_value(apply(doc.clone(), overrides)) {
        Ok(t) => Ok(t),
        Err(all) => {
            for o in overrides {
                if let Err(e) =
                    serde_yaml::from_value::<T>(apply(doc.clone(), std::slice::from_ref(o)))
                {
                    return Err(format!(
                        "environment variable `{}` (takes {}): {e}; fix or unset it",
                        o.var, o.ty
                    ));
                }
            }
            let vars: Vec<&str> = overrides.iter().map(|o| o.var.as_str()).collect();
            Err(format!("environment variables {}: {all}", vars.join(", ")))
        }
    }
}

/// Which config keys the environment set, and by which variable.
pub(crate) fn keys(overrides: &[Override]) -> BTreeMap<String, String> {
    overrides
        .iter()
        .map(|o| (o.config.to_string(), o.var.clone()))
        .collect()
}
