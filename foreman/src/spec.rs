//! From a prompt file, config.yaml and `--param` overrides to a [`TaskSpec`]:
//! everything needed to run the task, fixed at submit time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use saheeli_protocol::front_matter::{FrontMatter, NetworkMode, PromptFile};
use saheeli_protocol::{ReplayScript, ServoTask, TaskId};
use serde::{Deserialize, Serialize};

use crate::config::Config;

/// A task as stored in the queue (JSON in the `spec` column).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct TaskSpec {
    pub title: String,
    /// The prompt file as given, for display.
    pub prompt_path: String,
    /// The prompt body (front-matter removed).
    pub body: String,
    pub model: String,
    pub max_steps: u32,
    #[serde(default)]
    pub max_tokens: Option<u64>,
    #[serde(default)]
    pub max_cost: Option<f64>,
    #[serde(default)]
    pub retries: u32,
    #[serde(default)]
    pub retry_on: Vec<String>,
    pub timeout_s: u64,
    pub network: NetworkMode,
    pub memory: u64,
    pub cpus: f64,
    pub pids: i64,
    pub env: BTreeMap<String, String>,
    pub max_output_bytes: usize,
    /// The script for `replay:` models, read at submit time.
    pub replay: Option<ReplayScript>,
    /// The host directory named by `workspace:`, copied at submit time.
    pub workspace: Option<PathBuf>,
}

/// Keys a `--param` may override (the front-matter's keys).
const PARAM_KEYS: &[&str] = &[
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
];

impl TaskSpec {
    /// Reads and validates a prompt file. Nothing is written.
    pub fn from_prompt(cfg: &Config, path: &Path, params: &[String]) -> anyhow::Result<TaskSpec> {
        let bytes =
            std::fs::read(path).with_context(|| format!("reading prompt `{}`", path.display()))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            anyhow::anyhow!(
                "{}: not valid UTF-8 (byte {}); save the prompt as UTF-8",
                path.display(),
                e.utf8_error().valid_up_to()
            )
        })?;
        let prompt = PromptFile::parse(path, &text)?;
        let fm = apply_params(path, prompt.front_matter, params)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let d = &cfg.file.task;

        if fm.verify.is_some() {
            bail!(
                "{}: `verify` is not supported yet (the verify-and-retry loop is a later issue); remove it",
                path.display()
            );
        }
        let model = fm.model.unwrap_or_else(|| d.model.clone());
        let replay = match model.strip_prefix("replay:") {
            Some(file) => {
                let script_path = dir.join(file);
                let text = std::fs::read_to_string(&script_path).with_context(|| {
                    format!(
                        "{}: reading replay script `{}` named by `model`",
                        path.display(),
                        script_path.display()
                    )
                })?;
                let script = ReplayScript::parse(&text)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", script_path.display()))?;
                Some(script)
            }
            None => None,
        };
        let workspace = match fm.workspace {
            Some(ws) => {
                let ws = dir.join(ws);
                if !ws.is_dir() {
                    bail!(
                        "{}: `workspace` `{}` is not a directory",
                        path.display(),
                        ws.display()
                    );
                }
                Some(std::path::absolute(&ws)?)
            }
            None => None,
        };
        let resources = fm.resources.unwrap_or_default();
        let cpus = resources.cpus.unwrap_or(d.cpus);
        if !(cpus > 0.0 && cpus.is_finite()) {
            bail!(
                "{}: `resources.cpus` must be greater than 0",
                path.display()
            );
        }
        let pids = resources.pids.unwrap_or(d.pids);
        if pids < 16 {
            bail!("{}: `resources.pids` must be at least 16", path.display());
        }
        let max_steps = fm.max_steps.unwrap_or(d.max_steps);
        if max_steps == 0 {
            bail!("{}: `max_steps` must be at least 1", path.display());
        }
        for key in fm.env.keys() {
            if key.is_empty() || key.contains('=') || key.starts_with("SAHEELI_") {
                bail!(
                    "{}: `env` key `{key}` is not allowed (empty, contains `=`, or reserved SAHEELI_ prefix)",
                    path.display()
                );
            }
        }
        let retries = fm.retries.unwrap_or(d.retries);
        let retry_on = fm.retry_on.unwrap_or_else(|| d.retry_on.clone());
        if let Some(bad) = retry_on
            .iter()
            .find(|r| !crate::config::RETRYABLE.contains(&r.as_str()))
        {
            bail!(
                "{}: `retry_on` reason `{bad}` is not retryable; use any of {}",
                path.display(),
                crate::config::RETRYABLE.join(", ")
            );
        }
        let max_tokens = fm.max_tokens.or(d.max_tokens);
        let max_cost = fm.max_cost.or(d.max_cost);
        if let Some(c) = max_cost {
            if !(c > 0.0 && c.is_finite()) {
                bail!(
                    "{}: `max_cost` must be a positive number of USD",
                    path.display()
                );
            }
            if replay.is_none()
                && crate::gateway::Providers::from_config(cfg)
                    .route(&model)
                    .price
                    .is_none()
            {
                bail!(
                    "{}: `max_cost` needs a price for model `{model}`: add it under `prices:` in config.yaml",
                    path.display()
                );
            }
        }
        let title = fm
            .title
            .unwrap_or_else(|| default_title(path, &prompt.body));
        Ok(TaskSpec {
            title,
            prompt_path: path.display().to_string(),
            body: prompt.body,
            model,
            max_steps,
            max_tokens,
            max_cost,
            retries,
            retry_on,
            timeout_s: fm
                .timeout
                .map(|t| t.0)
                .unwrap_or(d.timeout)
                .as_secs()
                .max(1),
            network: fm.network.unwrap_or(d.network),
            memory: resources.memory.unwrap_or(d.memory).0,
            cpus,
            pids,
            env: fm.env,
            max_output_bytes: d.max_output_bytes,
            replay,
            workspace,
        })
    }

    /// What the servo is told (no secrets, no host paths).
    pub fn servo_task(&self, id: TaskId) -> ServoTask {
        ServoTask {
            task_id: id,
            title: self.title.clone(),
            model: self.model.clone(),
            max_steps: self.max_steps,
            max_tokens: self.max_tokens,
            timeout_s: self.timeout_s,
            max_output_bytes: self.max_output_bytes,
            // Set at launch from the gateway's policy (config, not the spec).
            request_timeout_s: None,
            replay: self.replay.clone(),
        }
    }

    pub fn is_replay(&self) -> bool {
        self.replay.is_some()
    }

    pub fn budget(&self) -> crate::gateway::Budget {
        crate::gateway::Budget {
            max_tokens: self.max_tokens,
            max_cost: self.max_cost,
        }
    }
}

/// The first Markdown heading of the body, else the file's stem.
fn default_title(path: &Path, body: &str) -> String {
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
fn apply_params(path: &Path, fm: FrontMatter, params: &[String]) -> anyhow::Result<FrontMatter> {
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
            bail!(
                "`--param {p}`: unknown key `{key}`; expected one of {}",
                PARAM_KEYS.join(", ")
            );
        }
        let v: serde_yaml::Value = serde_yaml::from_str(raw)
            .unwrap_or_else(|_| serde_yaml::Value::String(raw.to_string()));
        map.insert(serde_yaml::Value::String(key.to_string()), v);
    }
    // Null entries come from unset Option fields; drop them before re-reading.
    map.retain(|_, v| !v.is_null());
    serde_yaml::from_value(value)
        .map_err(|e| anyhow::anyhow!("{}: in `--param`: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigFile;

    fn cfg() -> Config {
        Config {
            source: None,
            base_dir: PathBuf::from("/tmp"),
            file: ConfigFile::default(),
        }
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn defaults_come_from_config() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "fix.md", "# Fix it\nPlease.\n");
        let s = TaskSpec::from_prompt(&cfg(), &p, &[]).unwrap();
        assert_eq!(s.title, "Fix it");
        assert_eq!(s.model, "gpt-4o-mini");
        assert_eq!(s.max_steps, 50);
        assert_eq!(s.timeout_s, 1800);
        assert!(s.replay.is_none());
    }

    #[test]
    fn replay_script_is_read_relative_to_prompt() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "s.yaml",
            "turns:\n  - tool_calls:\n      - name: task_complete\n        arguments: { message: ok }\n",
        );
        let p = write(d.path(), "t.md", "---\nmodel: replay:s.yaml\n---\nGo.\n");
        let s = TaskSpec::from_prompt(&cfg(), &p, &[]).unwrap();
        assert_eq!(s.replay.unwrap().turns.len(), 1);
    }

    #[test]
    fn missing_replay_script_is_named() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "t.md", "---\nmodel: replay:nope.yaml\n---\nGo.\n");
        let e = format!("{:#}", TaskSpec::from_prompt(&cfg(), &p, &[]).unwrap_err());
        assert!(e.contains("nope.yaml"), "{e}");
    }

    #[test]
    fn params_override_front_matter() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "t.md", "---\nmax_steps: 3\n---\nGo.\n");
        let s =
            TaskSpec::from_prompt(&cfg(), &p, &["max_steps=9".into(), "title=X".into()]).unwrap();
        assert_eq!(s.max_steps, 9);
        assert_eq!(s.title, "X");
        let e = TaskSpec::from_prompt(&cfg(), &p, &["bogus=1".into()]).unwrap_err();
        assert!(e.to_string().contains("unknown key `bogus`"), "{e}");
    }

    #[test]
    fn invalid_utf8_is_explained() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("bad.md");
        std::fs::write(&p, b"ok \xff\xfe").unwrap();
        let e = TaskSpec::from_prompt(&cfg(), &p, &[]).unwrap_err();
        assert!(e.to_string().contains("not valid UTF-8"), "{e}");
    }
}
