//! `--param KEY=VALUE`: front-matter keys set from the command line (a
//! template's own parameters are split off first: `template`).

use std::path::Path;

use anyhow::{Context, bail};
use saheeli_protocol::front_matter::FrontMatter;

/// Keys a `--param` may override (the front-matter's keys).
pub(super) const PARAM_KEYS: &[&str] = &[
    "title",
    "model",
    "max_steps",
    "max_tokens",
    "max_cost",
    "retries",
    "timeout",
    "workspace",
    "network",
    "verify",
    "verify_retries",
    "verify_timeout",
    "assess",
    "objective",
    // long tasks (issue 26)
    "cache",
];

/// The first Markdown heading of the body, else the file's stem.
pub(super) fn default_title(path: &Path, body: &str) -> String {
    body.lines()
        .map(str::trim)
        .find(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim().to_string())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| {
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "task".into())
        })
}

/// Applies `--param KEY=VALUE` overrides; VALUE is read as YAML.
pub(super) fn apply_params(
    path: &Path,
    fm: FrontMatter,
    params: &[String],
) -> anyhow::Result<FrontMatter> {
    let declared: Vec<String> = fm.parameters.iter().map(|p| p.name.clone()).collect();
    if params.is_empty() {
        return Ok(fm);
    }
    let mut value = serde_yaml::to_value(&fm)?;
    let map = value
        .as_mapping_mut()
        .context("front-matter is not a mapping")?;
    for p in params {
        let (key, raw) = p
            .split_once('=')
            .with_context(|| format!("`--param {p}`: expected KEY=VALUE"))?;
        if !PARAM_KEYS.contains(&key) {
            let of_prompt = if declared.is_empty() {
                format!("`{}` declares no parameters", path.display())
            } else {
                format!(
                    "the parameters of `{}` are {}",
                    path.display(),
                    declared.join(", ")
                )
            };
            bail!(
                "`--param {p}`: unknown key `{key}`; expected one of {} ({of_prompt})",
                PARAM_KEYS.join(", ")
            );
        }
        if raw.trim().is_empty() {
            bail!("`--param {key}=`: the value is empty; give one, or leave the key out");
        }
        let v: serde_yaml::Value = serde_yaml::from_str(raw)
            .unwrap_or_else(|_| serde_yaml::Value::String(raw.to_string()));
        // Checked alone, so a wrong type names its key.
        let mut single = serde_yaml::Mapping::new();
        single.insert(serde_yaml::Value::String(key.to_string()), v.clone());
        if let Err(e) = serde_yaml::from_value::<FrontMatter>(serde_yaml::Value::Mapping(single)) {
            bail!("`--param {key}=…`: {e}");
        }
        map.insert(serde_yaml::Value::String(key.to_string()), v);
    }
    // Null entries come from unset Option fields; drop them before re-reading.
    map.retain(|_, v| !v.is_null());
    serde_yaml::from_value(value)
        .map_err(|e| anyhow::anyhow!("{}: in `--param`: {e}", path.display()))
}
