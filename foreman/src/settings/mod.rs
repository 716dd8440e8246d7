//! The one settings table: every front-matter key and every config.yaml
//! key, defined once.
//!
//! Each [`Setting`] row says what a setting is called, its type, its
//! default, where it may be set (front-matter, config.yaml, `--param`, the
//! environment as `SAHEELI_<KEY>`) and what it does. From the rows come:
//!
//! - `--param`: the keys it accepts ([`param_keys`]);
//! - the environment: `SAHEELI_<KEY>` over config.yaml ([`env`]);
//! - `run --dry-run`: each effective value and the layer it came from
//!   (`spec::sources`, through [`Setting::value`]);
//! - the reference page `docs/reference/settings.md` ([`reference`]);
//! - front-matter and config parsing: they stay serde structs (typed
//!   values, errors naming the line), and `tests` holds them to the table
//!   both ways: a field without a row, or a row without a field, fails.
//!
//! # Adding a setting
//!
//! 1. Add the field to `FrontMatter` (protocol) and/or `ConfigFile` /
//!    `TaskDefaults` (config/file.rs), with its serde default.
//! 2. Add one row: `task.rs` for a per-task setting (front-matter and/or
//!    `task:`), `server.rs` for the foreman's own. Give its `default` as
//!    config.yaml would write it (a test parses it and compares it with
//!    the built-in default), `.param()` when `--param` may set it, and
//!    `.shown(..)` with its effective value for `--dry-run`.
//! 3. Regenerate the reference: `UPDATE_DOCS=1 cargo nextest run -p
//!    saheeli-foreman -E 'test(/docs_are_current/)'`.

pub(crate) mod env;
#[cfg(test)]
pub(crate) mod reference;
mod server;
mod task;
#[cfg(test)]
mod tests;

use saheeli_protocol::front_matter::FrontMatter;
use serde_json::Value;

use crate::task::TaskSpec;

/// One setting.
#[derive(Debug)]
pub(crate) struct Setting {
    /// Its name: the front-matter key when a prompt may set it
    /// (`timeout`, `resources.memory`), else its config.yaml key.
    pub key: &'static str,
    /// What it takes, for the reference (`duration`, `size`, …).
    pub ty: &'static str,
    /// Its built-in default as config.yaml writes it; empty when it has
    /// none (unset, or worked out at run time: `doc` says how).
    pub default: &'static str,
    /// One line on what it does.
    pub doc: &'static str,
    /// The config.yaml key (dotted below a section: `task.model`).
    pub config: Option<&'static str>,
    /// Whether a prompt's front-matter sets it (None: it cannot).
    pub in_front_matter: Option<fn(&FrontMatter) -> bool>,
    /// Whether `--param KEY=VALUE` may set it.
    pub param: bool,
    /// Its effective value for a task, as a front-matter would write it
    /// (None: `--dry-run` does not list it).
    pub value: Option<fn(&TaskSpec, &Derived) -> Value>,
}

/// What a task's effective settings show besides its spec: values worked
/// out from config.yaml when the task runs, which `spec::effective` (above
/// config and this table) fills in.
#[derive(Debug)]
pub(crate) struct Derived {
    /// The image the task's agent runs in (`spec::image_for`).
    pub image: String,
}

impl Setting {
    const fn new(key: &'static str, ty: &'static str) -> Setting {
        Setting {
            key,
            ty,
            default: "",
            doc: "",
            config: None,
            in_front_matter: None,
            param: false,
            value: None,
        }
    }

    const fn default(mut self, default: &'static str) -> Setting {
        self.default = default;
        self
    }

    const fn doc(mut self, doc: &'static str) -> Setting {
        self.doc = doc;
        self
    }

    const fn config(mut self, key: &'static str) -> Setting {
        self.config = Some(key);
        self
    }

    const fn front(mut self, set: fn(&FrontMatter) -> bool) -> Setting {
        self.in_front_matter = Some(set);
        self
    }

    const fn param(mut self) -> Setting {
        self.param = true;
        self
    }

    const fn shown(mut self, value: fn(&TaskSpec, &Derived) -> Value) -> Setting {
        self.value = Some(value);
        self
    }

    /// The environment variable that overrides its config.yaml value:
    /// `SAHEELI_` and the key in capitals, `.` as `_`, without `task.`
    /// (`task.max_steps`: `SAHEELI_MAX_STEPS`; `llm.max_attempts`:
    /// `SAHEELI_LLM_MAX_ATTEMPTS`). None when config.yaml cannot set it.
    pub fn env_var(&self) -> Option<String> {
        let key = self.config?;
        let key = key.strip_prefix("task.").unwrap_or(key);
        Some(format!(
            "SAHEELI_{}",
            key.replace('.', "_").to_ascii_uppercase()
        ))
    }
}

/// Every setting: the per-task ones (in the order `--dry-run` shows
/// them), then the foreman's own.
pub(crate) fn all() -> impl Iterator<Item = &'static Setting> {
    task::TASK.iter().chain(server::SERVER.iter())
}

/// The keys `--param KEY=VALUE` accepts.
pub(crate) fn param_keys() -> Vec<&'static str> {
    all().filter(|s| s.param).map(|s| s.key).collect()
}
