//! A case into a [`TaskSpec`], through the same code as a prompt file:
//! the suite's `defaults`, then the prompt's own front-matter, then the
//! case's keys, then `--model` are merged into one front-matter, which
//! `spec` checks with the case's `params` and the command line's
//! `--param` (templates included). Relative paths in a prompt file's
//! front-matter are resolved against the prompt file first; everything a
//! case names must lie below the suite's directory.

use std::path::Path;

use anyhow::Context;
use saheeli_protocol::front_matter::PromptFile;
use serde_yaml::{Mapping, Value};

use super::suite::{Case, Suite};
use crate::config::Config;
use crate::spec::TaskSpec;

/// What the command line adds to every case.
#[derive(Clone, Debug, Default)]
pub(crate) struct Overrides {
    pub model: Option<String>,
    pub params: Vec<String>,
}

/// The task a case makes (nothing written). Human-in-the-loop is off:
/// nobody answers inside an eval.
pub(crate) fn case_spec(
    cfg: &Config,
    suite_path: &Path,
    suite: &Suite,
    case: &Case,
    over: &Overrides,
) -> anyhow::Result<TaskSpec> {
    let (own, body) = match &case.prompt {
        Some(file) => prompt_file(file)?,
        None => (Mapping::new(), case.text.clone().unwrap_or_default()),
    };
    let mut merged = suite.defaults.0.clone();
    overlay(&mut merged, own);
    overlay(&mut merged, case.keys.0.clone());
    if let Some(m) = &over.model {
        merged.insert("model".into(), Value::String(m.clone()));
    }
    let title = Value::String("title".into());
    if !merged.contains_key(&title) && !body.lines().any(|l| l.trim_start().starts_with('#')) {
        merged.insert(
            title,
            Value::String(format!("{}: {}", suite.name.0, case.id)),
        );
    }
    let text = format!("---\n{}---\n{body}", serde_yaml::to_string(&merged)?);
    let mut params: Vec<String> = case
        .params
        .iter()
        .map(|(k, v)| Ok(format!("{k}={}", plain(v)?)))
        .collect::<anyhow::Result<_>>()?;
    params.extend(over.params.iter().cloned());
    let mut spec = TaskSpec::from_text(cfg, suite_path, &text, &params)?;
    if let Some(why) = crate::backend::capabilities::refusal(cfg.file.backend, &spec) {
        anyhow::bail!("{}: case `{}`: {why}", suite_path.display(), case.id);
    }
    spec.no_human = true;
    Ok(spec)
}

/// A prompt file's front-matter as keys (relative paths made absolute
/// against its directory) and its body.
fn prompt_file(file: &Path) -> anyhow::Result<(Mapping, String)> {
    let bytes =
        std::fs::read(file).with_context(|| format!("reading prompt `{}`", file.display()))?;
    let text = String::from_utf8(bytes).map_err(|_| {
        anyhow::anyhow!(
            "{}: not valid UTF-8; save the prompt as UTF-8",
            file.display()
        )
    })?;
    let prompt = PromptFile::parse(file, &text)?;
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut keys = match serde_yaml::to_value(&prompt.front_matter)? {
        Value::Mapping(m) => m,
        _ => Mapping::new(),
    };
    // Unset keys serialize as null or empty: they set nothing.
    keys.retain(|_, v| match v {
        Value::Null => false,
        Value::Mapping(m) => !m.is_empty(),
        Value::Sequence(s) => !s.is_empty(),
        _ => true,
    });
    if let Some(Value::String(ws)) = keys.get_mut("workspace") {
        *ws = std::path::absolute(dir.join(&*ws))?.display().to_string();
    }
    if let Some(Value::String(m)) = keys.get_mut("model")
        && let Some(f) = m.strip_prefix("replay:")
    {
        *m = format!("replay:{}", std::path::absolute(dir.join(f))?.display());
    }
    Ok((keys, prompt.body))
}

fn overlay(into: &mut Mapping, from: Mapping) {
    for (k, v) in from {
        into.insert(k, v);
    }
}

/// A parameter's value as `--param` would give it.
fn plain(v: &Value) -> anyhow::Result<String> {
    Ok(match v {
        Value::String(s) => s.clone(),
        other => serde_yaml::to_string(other)?.trim_end().to_string(),
    })
}
