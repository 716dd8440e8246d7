//! From a prompt file, config.yaml and `--param` overrides to a [`TaskSpec`]:
//! everything needed to run the task, fixed at submit time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use saheeli_protocol::front_matter::{FrontMatter, Memory, NetworkMode, PromptFile};
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
    /// Size of /workspace in bytes (None in tasks queued before it existed).
    #[serde(default)]
    pub disk: Option<u64>,
    pub env: BTreeMap<String, String>,
    pub max_output_bytes: usize,
    /// The script for `replay:` models, read at submit time.
    pub replay: Option<ReplayScript>,
    /// The host directory named by `workspace:`, copied at submit time.
    pub workspace: Option<PathBuf>,
    /// Pack what `.gitignore` names too (front-matter or config).
    #[serde(default)]
    pub workspace_include_ignored: bool,
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
            Some(file) => Some(read_replay(path, dir, file)?),
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
        let memory = resources.memory.unwrap_or(d.memory);
        let disk = resources.disk.unwrap_or(d.disk);
        let network = fm.network.unwrap_or(d.network);
        check_ceilings(cfg, path, memory, cpus, pids, disk, network)?;
        let max_steps = fm.max_steps.unwrap_or(d.max_steps);
        if !(1..=MAX_STEPS).contains(&max_steps) {
            bail!(
                "{}: `max_steps` {max_steps} is out of range; use 1 to {MAX_STEPS}",
                path.display()
            );
        }
        let timeout = fm.timeout.map(|t| t.0).unwrap_or(d.timeout);
        if timeout > MAX_TIMEOUT {
            bail!(
                "{}: `timeout` {} is longer than the most allowed, {}",
                path.display(),
                humantime::format_duration(timeout),
                humantime::format_duration(MAX_TIMEOUT)
            );
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
        if retries > MAX_RETRIES {
            bail!(
                "{}: `retries` {retries} is out of range; use 0 to {MAX_RETRIES}",
                path.display()
            );
        }
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
        if replay.is_none() {
            check_model(cfg, path, &model)?;
        }
        let title = fm
            .title
            .unwrap_or_else(|| default_title(path, &prompt.body));
        if title.trim().is_empty() || title.chars().count() > MAX_TITLE {
            bail!(
                "{}: `title` must be 1 to {MAX_TITLE} characters",
                path.display()
            );
        }
        let mut spec = TaskSpec {
            title,
            prompt_path: path.display().to_string(),
            body: prompt.body,
            model,
            max_steps,
            max_tokens,
            max_cost,
            retries,
            retry_on,
            timeout_s: timeout.as_secs().max(1),
            network,
            memory: memory.0,
            cpus,
            pids,
            disk: Some(disk.0),
            env: fm.env,
            max_output_bytes: d.max_output_bytes,
            replay,
            workspace,
            workspace_include_ignored: fm
                .workspace_include_ignored
                .unwrap_or(d.workspace_include_ignored),
        };
        // Keys pasted into a prompt or a replay script must not reach the
        // database (nor, through it, `task status --json` or a container).
        let secrets = crate::gateway::Providers::from_config(cfg).secrets();
        spec.redact(&secrets)?;
        Ok(spec)
    }

    /// Replaces every known key value, and its base64 forms, in every text
    /// of the spec with `[REDACTED:<VARIABLE>]`.
    fn redact(&mut self, secrets: &[(String, String)]) -> anyhow::Result<()> {
        if secrets.is_empty() {
            return Ok(());
        }
        let mut json = serde_json::to_string(self)?;
        let before = json.len();
        for (var, value) in secrets {
            for form in secret_forms(value) {
                // Keys are plain ASCII tokens: JSON escaping leaves them as they are.
                json = json.replace(&form, &format!("[REDACTED:{var}]"));
            }
        }
        if json.len() != before {
            *self = serde_json::from_str(&json).context("re-reading the redacted task")?;
        }
        Ok(())
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

/// Most steps, retries, title length and timeout a task may ask for: far
/// above any real use, low enough that a typo is caught.
const MAX_STEPS: u32 = 100_000;
const MAX_RETRIES: u32 = 100;
const MAX_TITLE: usize = 200;
const MAX_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// A key value as it may appear in text: itself, and base64 of it at each
/// of the three alignments it can take inside a longer encoded string
/// (standard and URL-safe alphabets).
fn secret_forms(value: &str) -> Vec<String> {
    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    let mut forms = vec![value.to_string()];
    for engine in [STANDARD_NO_PAD, URL_SAFE_NO_PAD] {
        for pad in 0..3 {
            let mut bytes = vec![0u8; pad];
            bytes.extend_from_slice(value.as_bytes());
            let enc = engine.encode(&bytes);
            // Drop the characters that depend on the unknown neighbours.
            let skip = if pad == 0 { 0 } else { (pad * 4).div_ceil(3) };
            let keep = (bytes.len() * 8 / 6).saturating_sub(skip);
            let core: String = enc.chars().skip(skip).take(keep).collect();
            if core.len() >= 8 {
                forms.push(core);
            }
        }
    }
    forms.sort();
    forms.dedup();
    // Longest first, so a longer form is not broken by a shorter one.
    forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
    forms
}

/// Reads a `replay:` script. It must lie inside the prompt's directory tree
/// (a prompt cannot read host files through it), and errors never quote its
/// contents.
fn read_replay(prompt: &Path, dir: &Path, file: &str) -> anyhow::Result<ReplayScript> {
    let named = dir.join(file);
    let root = std::fs::canonicalize(if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    })
    .with_context(|| format!("resolving the directory of `{}`", prompt.display()))?;
    let script_path = std::fs::canonicalize(&named).with_context(|| {
        format!(
            "{}: reading replay script `{}` named by `model`",
            prompt.display(),
            named.display()
        )
    })?;
    if !script_path.starts_with(&root) {
        bail!(
            "{}: replay script `{file}` is outside the prompt's directory `{}`; \
             put the script beside the prompt or below it",
            prompt.display(),
            root.display()
        );
    }
    let text = std::fs::read_to_string(&script_path).with_context(|| {
        format!(
            "{}: reading replay script `{}` named by `model`",
            prompt.display(),
            named.display()
        )
    })?;
    ReplayScript::parse(&text).map_err(|e| {
        // Parser messages quote the offending text; name only the place.
        let at = match &e {
            saheeli_protocol::replay::ReplayError::Empty => "has no turns".to_string(),
            _ => "is neither a replay script (`turns:` …) nor a recorded session".to_string(),
        };
        anyhow::anyhow!(
            "{}: replay script `{}` {at}; see prompts/hello.replay.yaml",
            prompt.display(),
            named.display()
        )
    })
}

/// A model must name a known provider and, for the vendors' own servers or
/// a provider with `api_key_env`, have its key: better refused at submit
/// than retried and failed inside a running task.
fn check_model(cfg: &Config, prompt: &Path, model: &str) -> anyhow::Result<()> {
    if model.trim().is_empty() {
        bail!(
            "{}: `model` is empty; name one (e.g. `gpt-4o-mini`) or `replay:FILE`",
            prompt.display()
        );
    }
    let providers = crate::gateway::Providers::from_config(cfg);
    if let Some((prefix, rest)) = model.split_once('/') {
        let known =
            prefix == "openai" || prefix == "anthropic" || cfg.file.providers.contains_key(prefix);
        if !known || rest.is_empty() {
            let mut names: Vec<&str> = vec!["openai", "anthropic"];
            names.extend(cfg.file.providers.keys().map(String::as_str));
            bail!(
                "{}: model `{model}` names provider `{prefix}`, which is not configured \
                 (known: {}); add it under `providers:` in config.yaml, or write \
                 `openai/{model}` to send the name as it is",
                prompt.display(),
                names.join(", ")
            );
        }
    }
    let route = providers.route(model);
    let p = &route.provider;
    let vendor = matches!(
        p.base_url.as_str(),
        "https://api.openai.com/v1" | "https://api.anthropic.com"
    );
    let explicit = cfg
        .file
        .providers
        .get(&p.name)
        .is_some_and(|c| c.api_key_env.is_some());
    if p.key.is_none() && (vendor || explicit) {
        bail!(
            "{}: model `{model}` goes to provider `{}`, which needs `{}`: set it in the \
             environment or in `.env` beside config.yaml",
            prompt.display(),
            p.name,
            p.key_env
        );
    }
    Ok(())
}

/// Everything a prompt asks for must lie within config.yaml's `limits:`.
fn check_ceilings(
    cfg: &Config,
    prompt: &Path,
    memory: Memory,
    cpus: f64,
    pids: i64,
    disk: Memory,
    network: NetworkMode,
) -> anyhow::Result<()> {
    let l = &cfg.file.limits;
    let over = |key: &str, asked: String, max: String| {
        anyhow::anyhow!(
            "{}: `{key}` {asked} is above the ceiling {max} (`limits.{}` in config.yaml); \
             ask for less, or have the operator raise the ceiling",
            prompt.display(),
            key.trim_start_matches("resources.")
        )
    };
    if memory.0 > l.memory.0 {
        return Err(over(
            "resources.memory",
            memory.to_string(),
            l.memory.to_string(),
        ));
    }
    if cpus > l.cpus {
        return Err(over("resources.cpus", cpus.to_string(), l.cpus.to_string()));
    }
    if pids > l.pids {
        return Err(over("resources.pids", pids.to_string(), l.pids.to_string()));
    }
    if disk.0 > l.disk.0 {
        return Err(over("resources.disk", disk.to_string(), l.disk.to_string()));
    }
    if !l.networks.contains(&network) {
        let allowed: Vec<&str> = l.networks.iter().map(NetworkMode::as_str).collect();
        bail!(
            "{}: `network` {} is not allowed (`limits.networks` in config.yaml allows {}); \
             the servo needs no network to reach the LLM",
            prompt.display(),
            network.as_str(),
            allowed.join(", ")
        );
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigFile;

    /// Defaults, with `openai` at a local server that needs no key.
    fn cfg() -> Config {
        let file: ConfigFile = serde_yaml::from_str(
            "providers:\n  openai: { kind: openai, base_url: 'http://127.0.0.1:9/v1' }\n",
        )
        .unwrap();
        Config {
            source: None,
            base_dir: PathBuf::from("/tmp"),
            file,
        }
    }

    #[test]
    fn key_forms_include_base64_at_every_alignment() {
        use base64::Engine;
        let key = "sk-test-Zq8rT2vW9xY4uJ7mK3nB";
        let forms = secret_forms(key);
        for prefix in ["", "a", "ab", "abc:"] {
            let enc = base64::engine::general_purpose::STANDARD.encode(format!("{prefix}{key}!"));
            assert!(
                forms.iter().any(|f| f != key && enc.contains(f.as_str())),
                "{prefix:?}: {enc}"
            );
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
