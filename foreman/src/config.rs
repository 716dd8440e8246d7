//! `config.yaml`: every default Saheeli uses, overridable per task by a
//! prompt's front-matter.
//!
//! The file is optional. Relative paths in it are relative to the file's own
//! directory, so `saheeli` behaves the same from any working directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use saheeli_protocol::front_matter::{Memory, NetworkMode, parse_duration_value};
use serde::Deserialize;

/// The parsed configuration, with paths made absolute.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// The file it came from, if any.
    pub source: Option<PathBuf>,
    /// The directory relative paths are resolved against.
    pub base_dir: PathBuf,
    pub file: ConfigFile,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ConfigFile {
    /// The servo image tasks run in.
    pub image: String,
    /// The base image the Dockerfile starts from (passed as build arg `BASE`).
    pub base_image: String,
    /// How many tasks run at once.
    pub concurrency: usize,
    /// The SQLite queue.
    pub database: PathBuf,
    /// Where `results/<task_id>/` directories are collected.
    pub results_dir: PathBuf,
    /// Saheeli's own state: submitted workspaces.
    pub state_dir: PathBuf,
    /// Gateway sockets, one directory per task. Kept short: a unix socket
    /// path may not exceed 107 bytes.
    pub run_dir: PathBuf,
    /// How long a stopped servo gets to flush before it is killed.
    #[serde(deserialize_with = "parse_duration_value")]
    pub stop_grace: Duration,
    /// A foreman renews its hold on running tasks every fifth of this; when
    /// it dies, another foreman takes them over once this has passed.
    #[serde(deserialize_with = "parse_duration_value")]
    pub lease: Duration,
    /// How a finished workspace is brought home: `auto` copies the task's
    /// volume straight from its directory when the daemon is on this host
    /// and the directory is readable (fast: no mount), else through the
    /// Docker archive API; `archive` always uses the API.
    pub collection: Collection,
    /// Collection stops at this many bytes of files (the task then ends
    /// `incomplete` with reason `results_too_large`, partial results kept).
    pub max_results_size: Memory,
    /// A submitted `workspace:` larger than this (in files) is refused.
    pub max_workspace_size: Memory,
    /// Per-task defaults; a prompt's front-matter overrides each.
    pub task: TaskDefaults,
    /// Ceilings a prompt cannot lift: it may only ask for less.
    pub limits: Limits,
    pub llm: LlmConfig,
    /// LLM servers by name, added to (or replacing) the built-in `openai`
    /// and `anthropic`. A model `NAME/model` goes to provider NAME.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// USD per million tokens, by model name (as sent upstream).
    pub prices: BTreeMap<String, Price>,
}

/// The most any task may ask for. The defaults in `task:` must lie within.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct Limits {
    pub memory: Memory,
    pub cpus: f64,
    pub pids: i64,
    /// Largest /workspace.
    pub disk: Memory,
    /// The network modes a task may ask for.
    pub networks: Vec<NetworkMode>,
    /// How `resources.disk` is enforced: `loop` (an ext4 image per task,
    /// loop-mounted by the foreman: needs root and a local daemon) or `off`
    /// (no size limit: an agent can fill the host's disk).
    pub disk_enforcement: DiskEnforcement,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum DiskEnforcement {
    Loop,
    Off,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory: Memory(8 << 30),
            cpus: 4.0,
            pids: 4096,
            disk: Memory(20 << 30),
            networks: vec![NetworkMode::None],
            disk_enforcement: DiskEnforcement::Loop,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Collection {
    Auto,
    Archive,
}

/// Which wire format a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ProviderKind {
    /// OpenAI chat completions (OpenAI, vLLM, Ollama, LiteLLM, OpenRouter, …).
    Openai,
    /// Anthropic Messages.
    Anthropic,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProviderConfig {
    pub kind: ProviderKind,
    /// OpenAI-style URLs end in `/v1`; Anthropic's do not.
    #[serde(default)]
    pub base_url: Option<String>,
    /// The environment variable (or `.env` entry) holding the key.
    #[serde(default)]
    pub api_key_env: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct TaskDefaults {
    pub model: String,
    pub max_steps: u32,
    #[serde(deserialize_with = "parse_duration_value")]
    pub timeout: Duration,
    pub network: NetworkMode,
    pub memory: Memory,
    pub cpus: f64,
    pub pids: i64,
    /// Size of each task's /workspace.
    pub disk: Memory,
    /// Largest tool output handed back to the model, in bytes.
    pub max_output_bytes: usize,
    /// Token budget per task (input + output); none when unset.
    pub max_tokens: Option<u64>,
    /// Cost budget per task in USD (needs `prices` for the model).
    pub max_cost: Option<f64>,
    /// Further attempts when the agent ends incomplete (0: none).
    pub retries: u32,
    /// The incomplete reasons that are retried.
    pub retry_on: Vec<String>,
    /// Copy what `.gitignore` names into /workspace too.
    pub workspace_include_ignored: bool,
}

/// Reasons an agent attempt may end incomplete that a retry can help with.
pub(crate) const RETRYABLE: &[&str] = &[
    "timeout",
    "max_steps",
    "llm_error",
    "oom",
    "exit",
    "terminated",
    "lost",
    "replay_exhausted",
    "no_completion",
    "invalid_completion",
];

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct LlmConfig {
    /// Limit on one upstream request.
    #[serde(deserialize_with = "parse_duration_value")]
    pub request_timeout: Duration,
    /// Attempts per call for 429, 5xx, resets and timeouts (the first included).
    pub max_attempts: u32,
    /// Give up retrying a call after this long.
    #[serde(deserialize_with = "parse_duration_value")]
    pub max_retry_time: Duration,
    /// `max_tokens` sent to Anthropic, which requires one.
    pub anthropic_max_tokens: u64,
}

impl Default for ConfigFile {
    fn default() -> Self {
        ConfigFile {
            image: "saheeli-servo:latest".into(),
            base_image: "saheeli-base:bookworm".into(),
            concurrency: 4,
            database: "saheeli.db".into(),
            results_dir: "results".into(),
            state_dir: ".saheeli".into(),
            run_dir: "/tmp/saheeli".into(),
            stop_grace: Duration::from_secs(10),
            lease: Duration::from_secs(10),
            max_results_size: Memory(10 << 30),
            max_workspace_size: Memory(1 << 30),
            collection: Collection::Auto,
            task: TaskDefaults::default(),
            limits: Limits::default(),
            llm: LlmConfig::default(),
            providers: BTreeMap::new(),
            prices: BTreeMap::new(),
        }
    }
}

impl Default for TaskDefaults {
    fn default() -> Self {
        TaskDefaults {
            model: "gpt-4o-mini".into(),
            max_steps: 50,
            timeout: Duration::from_secs(30 * 60),
            network: NetworkMode::None,
            memory: Memory(2 << 30),
            cpus: 1.0,
            pids: 512,
            disk: Memory(2 << 30),
            max_output_bytes: 16 * 1024,
            max_tokens: None,
            max_cost: None,
            retries: 0,
            retry_on: RETRYABLE.iter().map(|s| s.to_string()).collect(),
            workspace_include_ignored: false,
        }
    }
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            request_timeout: Duration::from_secs(300),
            max_attempts: 6,
            max_retry_time: Duration::from_secs(300),
            anthropic_max_tokens: 8192,
        }
    }
}

impl Config {
    /// Loads `explicit`, else `./config.yaml` when present, else the defaults.
    pub fn load(explicit: Option<&Path>) -> anyhow::Result<Config> {
        let path = match explicit {
            Some(p) => Some(p.to_path_buf()),
            None => Some(PathBuf::from("config.yaml")).filter(|p| p.is_file()),
        };
        let Some(path) = path else {
            let base_dir = std::env::current_dir().context("reading the current directory")?;
            return Ok(Config {
                source: None,
                base_dir,
                file: ConfigFile::default(),
            });
        };
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading config `{}`", path.display()))?;
        let file: ConfigFile = if text.trim().is_empty() {
            ConfigFile::default()
        } else {
            serde_yaml::from_str(&text).map_err(|e| {
                let at = e
                    .location()
                    .map(|l| format!(":{}", l.line()))
                    .unwrap_or_default();
                anyhow::anyhow!("{}{at}: {e}", path.display())
            })?
        };
        if let Some(name) = file
            .providers
            .keys()
            .find(|n| n.is_empty() || n.contains('/'))
        {
            anyhow::bail!(
                "{}: provider name `{name}` must be non-empty and contain no `/`",
                path.display()
            );
        }
        if file.lease < Duration::from_secs(1) {
            anyhow::bail!("{}: `lease` must be at least 1s", path.display());
        }
        if file.concurrency == 0 {
            anyhow::bail!("{}: `concurrency` must be at least 1", path.display());
        }
        file.check_limits()
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let abs = std::path::absolute(&path)
            .with_context(|| format!("resolving `{}`", path.display()))?;
        let base_dir = abs.parent().map(Path::to_path_buf).unwrap_or_default();
        Ok(Config {
            source: Some(abs),
            base_dir,
            file,
        })
    }

    /// What `saheeli` read its settings from, for messages.
    pub fn describe_source(&self) -> String {
        match &self.source {
            Some(p) => format!("config `{}`", p.display()),
            None => format!(
                "built-in defaults (no `config.yaml` in `{}`; pass `--config FILE` or set SAHEELI_CONFIG)",
                self.base_dir.display()
            ),
        }
    }

    fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base_dir.join(p)
        }
    }

    pub fn database(&self) -> PathBuf {
        self.resolve(&self.file.database)
    }

    pub fn results_dir(&self) -> PathBuf {
        self.resolve(&self.file.results_dir)
    }

    pub fn state_dir(&self) -> PathBuf {
        self.resolve(&self.file.state_dir)
    }

    pub fn run_dir(&self) -> PathBuf {
        self.resolve(&self.file.run_dir)
    }

    /// Reads `.env` beside the config file into the process environment
    /// (variables already set win). A missing file is fine; a malformed one
    /// is an error naming its line (never its text: it holds keys). Call it
    /// before any thread starts: it uses `set_var`.
    pub fn load_dotenv(&self) -> anyhow::Result<()> {
        let path = self.base_dir.join(".env");
        if !path.exists() {
            return Ok(());
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading `{}`", path.display()))?;
        // Parse everything first, so a bad line sets nothing.
        let mut vars = Vec::new();
        for item in dotenvy::from_read_iter(text.as_bytes()) {
            match item {
                Ok(kv) => vars.push(kv),
                Err(dotenvy::Error::LineParse(bad, _)) => {
                    let line = line_of(&text, &bad);
                    anyhow::bail!(
                        "{}:{line}: not a `KEY=value` line; fix or remove it",
                        path.display()
                    );
                }
                Err(e) => {
                    return Err(anyhow::Error::new(e))
                        .with_context(|| format!("reading `{}`", path.display()));
                }
            }
        }
        for (k, v) in vars {
            if std::env::var_os(&k).is_none() {
                // SAFETY: called from `main` before the runtime or any other
                // thread exists, so nothing reads the environment concurrently.
                unsafe { std::env::set_var(k, v) };
            }
        }
        Ok(())
    }
}

/// The 1-based line of `text` where `fragment` (a line dotenvy refused) starts.
fn line_of(text: &str, fragment: &str) -> usize {
    let first = fragment.lines().next().unwrap_or("").trim();
    text.lines()
        .position(|l| !first.is_empty() && l.trim() == first)
        .or_else(|| {
            text.find(fragment)
                .map(|at| text[..at].matches('\n').count())
        })
        .map_or(1, |i| i + 1)
}

impl ConfigFile {
    /// The `task:` defaults must lie within `limits:`.
    fn check_limits(&self) -> Result<(), String> {
        let (t, l) = (&self.task, &self.limits);
        let over = |key: &str, v: String, max: String| {
            Err(format!(
                "`task.{key}` {v} is above `limits.{key}` {max}; lower the default or raise the ceiling"
            ))
        };
        if t.memory.0 > l.memory.0 {
            return over("memory", t.memory.to_string(), l.memory.to_string());
        }
        if t.cpus > l.cpus {
            return over("cpus", t.cpus.to_string(), l.cpus.to_string());
        }
        if t.pids > l.pids {
            return over("pids", t.pids.to_string(), l.pids.to_string());
        }
        if t.disk.0 > l.disk.0 {
            return over("disk", t.disk.to_string(), l.disk.to_string());
        }
        if !(l.cpus > 0.0 && l.cpus.is_finite()) || l.pids < 16 {
            return Err("`limits.cpus` must be above 0 and `limits.pids` at least 16".into());
        }
        if !l.networks.contains(&t.network) {
            return Err(format!(
                "`task.network` {} is not in `limits.networks`; add it there or change the default",
                t.network.as_str()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_key_is_named() {
        let e = serde_yaml::from_str::<ConfigFile>("concurency: 3\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `concurency`"), "{e}");
    }

    #[test]
    fn shipped_config_matches_defaults() {
        let text = include_str!("../../config.yaml");
        let file: ConfigFile = serde_yaml::from_str(text).unwrap();
        let d = ConfigFile::default();
        assert_eq!(file.image, d.image);
        assert_eq!(file.concurrency, d.concurrency);
        assert_eq!(file.task.max_steps, d.task.max_steps);
        assert_eq!(file.task.timeout, d.task.timeout);
        assert_eq!(file.task.memory, d.task.memory);
        assert_eq!(file.stop_grace, d.stop_grace);
        assert_eq!(file.max_workspace_size, d.max_workspace_size);
        assert_eq!(
            file.task.workspace_include_ignored,
            d.task.workspace_include_ignored
        );
    }
}
