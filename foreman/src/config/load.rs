//! Finding and reading config.yaml (and `.env` beside it), with errors that
//! name the file and line.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use super::{BackendKind, ConfigFile};

/// The parsed configuration, with paths made absolute.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// The file it came from, if any.
    pub source: Option<PathBuf>,
    /// The directory relative paths are resolved against.
    pub base_dir: PathBuf,
    pub file: ConfigFile,
    /// The keys the file and the environment set: where a setting came
    /// from, for `--dry-run`.
    pub set_keys: SetKeys,
}

/// The config keys, dotted (`image`, `task.model`), that config.yaml and
/// the environment (`SAHEELI_<KEY>`) set.
#[derive(Clone, Debug, Default)]
pub(crate) struct SetKeys {
    /// Named by the file.
    pub file: BTreeSet<String>,
    /// Set by the environment: config key to variable.
    pub env: std::collections::BTreeMap<String, String>,
}

impl Config {
    /// Loads `explicit`, else `./config.yaml` when present, else the defaults.
    pub fn load(explicit: Option<&Path>) -> anyhow::Result<Config> {
        let path = match explicit {
            Some(p) => Some(p.to_path_buf()),
            None => Some(PathBuf::from("config.yaml")).filter(|p| p.is_file()),
        };
        let overrides = crate::settings::env::overrides(|v| std::env::var(v).ok());
        let Some(path) = path else {
            let base_dir = std::env::current_dir().context("reading the current directory")?;
            let file = if overrides.is_empty() {
                ConfigFile::default()
            } else {
                let file: ConfigFile =
                    crate::settings::env::read(serde_yaml::Value::Null, &overrides)
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                file.check_limits()
                    .and_then(|()| super::caps::check(&file.agent_types, &file.pools))
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                file
            };
            return Ok(Config {
                source: None,
                base_dir,
                file,
                set_keys: SetKeys {
                    file: BTreeSet::new(),
                    env: crate::settings::env::keys(&overrides),
                },
            });
        };
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading config `{}`", path.display()))?;
        if let Some((key, line)) = duplicate_top_level_key(&text) {
            anyhow::bail!(
                "{}:{line}: duplicate key `{key}`: it is set earlier in the file; keep one",
                path.display()
            );
        }
        let mut file: ConfigFile = if text.trim().is_empty() {
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
        if !overrides.is_empty() {
            // The file parsed alone (its errors name its lines); now with
            // the environment over it.
            let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap_or_default();
            file = crate::settings::env::read(doc, &overrides)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        }
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
        check_capabilities(&file).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        for (key, b) in [
            ("task.retry_backoff", &file.task.retry_backoff),
            ("requeue_backoff", &file.requeue_backoff),
        ] {
            if let Some(why) = b.problem() {
                anyhow::bail!("{}: `{key}`: {why}", path.display());
            }
        }
        if file.lease < Duration::from_secs(1) {
            anyhow::bail!("{}: `lease` must be at least 1s", path.display());
        }
        if file.backend == BackendKind::Swarm && file.swarm.is_none() {
            anyhow::bail!(
                "{}: `backend: swarm` needs a `swarm:` section with `manager`, `registry`, \
                 `network` and `gateway_listen`",
                path.display()
            );
        }
        if let Some(why) = file.definitions.as_ref().and_then(|d| d.problem()) {
            anyhow::bail!("{}: {why}", path.display());
        }
        if let Some(why) = file.smtp.as_ref().and_then(|s| s.problem()) {
            anyhow::bail!("{}: {why}", path.display());
        }
        file.check_limits()
            .and_then(|()| file.check_pool())
            .and_then(|()| super::caps::check(&file.agent_types, &file.pools))
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let abs = std::path::absolute(&path)
            .with_context(|| format!("resolving `{}`", path.display()))?;
        let base_dir = abs.parent().map(Path::to_path_buf).unwrap_or_default();
        Ok(Config {
            source: Some(abs),
            base_dir,
            file,
            set_keys: SetKeys {
                file: set_keys(&text),
                env: crate::settings::env::keys(&overrides),
            },
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

    /// `p` against the config file's directory (unless absolute).
    pub(crate) fn resolve(&self, p: &Path) -> PathBuf {
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

    /// `run_dir` as set, else a per-user runtime directory: no other local
    /// user can create it first (a `/tmp/saheeli` made by anyone would
    /// stop `serve`, which refuses a run directory not its own).
    pub fn run_dir(&self) -> PathBuf {
        match &self.file.run_dir {
            Some(p) => self.resolve(p),
            None => default_run_dir(
                std::env::var_os("XDG_RUNTIME_DIR"),
                // SAFETY: geteuid cannot fail.
                unsafe { libc::geteuid() },
                &self.state_dir(),
            ),
        }
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

/// The keys a (valid) config file sets: top-level ones, and below each
/// mapping (`task:`, `limits:`, …) `section.key`.
pub(super) fn set_keys(text: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let Ok(serde_yaml::Value::Mapping(top)) = serde_yaml::from_str(text) else {
        return keys;
    };
    for (k, v) in &top {
        let Some(k) = k.as_str() else { continue };
        keys.insert(k.to_string());
        if let serde_yaml::Value::Mapping(inner) = v {
            keys.extend(
                inner
                    .keys()
                    .filter_map(|i| i.as_str())
                    .map(|i| format!("{k}.{i}")),
            );
        }
    }
    keys
}

/// The first top-level key `text` sets twice, with the 1-based line of
/// the second: serde names the line where the mapping ends, not the key.
pub(super) fn duplicate_top_level_key(text: &str) -> Option<(String, usize)> {
    let mut seen = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        if line.starts_with([' ', '\t', '#', '-']) || line.starts_with("...") {
            continue;
        }
        let Some((key, _)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim().trim_matches(|c| c == '"' || c == '\'');
        if key.is_empty() || key.contains(' ') {
            continue;
        }
        if !seen.insert(key.to_string()) {
            return Some((key.to_string(), i + 1));
        }
    }
    None
}

/// The 1-based line of `text` where `fragment` (a line dotenvy refused) starts.
pub(super) fn line_of(text: &str, fragment: &str) -> usize {
    let first = fragment.lines().next().unwrap_or("").trim();
    text.lines()
        .position(|l| !first.is_empty() && l.trim() == first)
        .or_else(|| {
            text.find(fragment)
                .map(|at| text[..at].matches('\n').count())
        })
        .map_or(1, |i| i + 1)
}

/// Capability names are plain words (their tools are `name__tool`), each
/// is a command or a URL, and `allow` names configured ones.
fn check_capabilities(file: &ConfigFile) -> Result<(), String> {
    for (name, c) in &file.capabilities {
        let plain = !name.is_empty()
            && !name.contains("__")
            && name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-');
        if !plain {
            return Err(format!(
                "capability name `{name}` must be letters, digits, `-` or `_` (no `__`)"
            ));
        }
        if c.command.is_some() == c.url.is_some() {
            return Err(format!(
                "capability `{name}` needs exactly one of `command` (stdio) or `url` (streamable HTTP)"
            ));
        }
    }
    for a in file.allow.iter().flatten() {
        if !file.capabilities.contains_key(a) {
            return Err(format!(
                "`allow` names `{a}`, which is not under `capabilities`"
            ));
        }
    }
    Ok(())
}

/// The run directory when config.yaml sets none: `$XDG_RUNTIME_DIR/saheeli`
/// when that is set (absolute), `/run/saheeli` for root, else
/// `/run/user/<uid>/saheeli` when that directory is this user's, else
/// `run` below the project's private state directory.
pub(crate) fn default_run_dir(
    xdg: Option<std::ffi::OsString>,
    euid: u32,
    state_dir: &Path,
) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    if let Some(x) = xdg.map(PathBuf::from).filter(|p| p.is_absolute()) {
        return x.join("saheeli");
    }
    if euid == 0 {
        return PathBuf::from("/run/saheeli");
    }
    let user = PathBuf::from(format!("/run/user/{euid}"));
    match std::fs::symlink_metadata(&user) {
        Ok(m) if m.is_dir() && m.uid() == euid => user.join("saheeli"),
        _ => state_dir.join("run"),
    }
}
