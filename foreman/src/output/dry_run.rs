//! What `--dry-run` prints: the effective task with where each setting
//! came from, the tools, the image and the workspace; as a table for
//! people or as JSON.

use std::collections::BTreeMap;
use std::path::PathBuf;

use comfy_table::presets::UTF8_BORDERS_ONLY;
use comfy_table::{ContentArrangement, Table};
use serde::Serialize;
use serde_json::Value;

use crate::spec::{Effective, ParamValue, Source, TaskSpec};

use super::clean;

/// `--dry-run --json`.
#[derive(Debug, Serialize)]
pub(crate) struct DryRunView<'a> {
    /// Always true: nothing was queued or started.
    pub dry_run: bool,
    pub prompt: String,
    /// The config file read, when there is one.
    pub config: Option<PathBuf>,
    /// The task exactly as it would be queued.
    pub task: &'a TaskSpec,
    /// Each setting's effective value, by front-matter key.
    pub settings: BTreeMap<&'static str, Value>,
    /// Where each setting's value came from, by the same keys.
    pub sources: BTreeMap<&'static str, Source>,
    /// The tools the model would get.
    pub tools: Vec<String>,
    pub image: String,
    /// Whether the Docker daemon has the image; null when it could not be asked.
    pub image_present: Option<bool>,
    /// What `workspace:` would copy into /workspace.
    pub workspace: Option<DryWorkspace>,
    /// Each provider and the variable its key is read from; `none`: no
    /// key is sent to it.
    pub provider_keys: BTreeMap<String, String>,
    /// A template's parameters: each value and where it came from.
    pub parameters: &'a [ParamValue],
    /// A template's steps, in order.
    pub steps: &'a [saheeli_protocol::template::Step],
    /// The order settings are shown in (not printed in JSON).
    #[serde(skip)]
    pub order: Vec<&'static str>,
}

#[derive(Debug, Serialize)]
pub(crate) struct DryWorkspace {
    pub path: PathBuf,
    pub files: u64,
    pub bytes: u64,
}

impl<'a> DryRunView<'a> {
    pub fn new(task: &'a TaskSpec, effective: Vec<Effective>) -> DryRunView<'a> {
        let mut view = DryRunView {
            dry_run: true,
            prompt: task.prompt_path.clone(),
            config: None,
            task,
            settings: BTreeMap::new(),
            sources: BTreeMap::new(),
            tools: Vec::new(),
            image: String::new(),
            image_present: None,
            workspace: None,
            provider_keys: BTreeMap::new(),
            parameters: &task.parameters,
            steps: &task.steps,
            order: Vec::new(),
        };
        for e in effective {
            view.order.push(e.key);
            view.settings.insert(e.key, e.value);
            view.sources.insert(e.key, e.source);
        }
        view
    }

    /// The view for people.
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "dry run of `{}`: valid; nothing was queued or started",
            clean(&self.prompt)
        );
        let mut table = Table::new();
        table
            .load_preset(UTF8_BORDERS_ONLY)
            .set_content_arrangement(ContentArrangement::Dynamic)
            .set_header(["SETTING", "VALUE", "FROM"]);
        for key in &self.order {
            let source = self.sources[key].as_str();
            table.add_row([key.to_string(), shown(&self.settings[key]), source.into()]);
        }
        let _ = writeln!(s, "{table}");
        if !self.parameters.is_empty() {
            let _ = writeln!(s, "{}", self.parameters_table());
        }
        if !self.steps.is_empty() {
            let _ = writeln!(s, "steps:");
            for (i, step) in self.steps.iter().enumerate() {
                let _ = writeln!(s, "  {}. {}", i + 1, step_line(step));
            }
        }
        let config = match &self.config {
            Some(p) => clean(&p.display().to_string()),
            None => "none (built-in defaults)".into(),
        };
        let _ = writeln!(s, "config:     {config}");
        let _ = writeln!(s, "tools:      {}", self.tools.join(", "));
        let presence = match self.image_present {
            Some(true) => "present",
            Some(false) => "NOT FOUND: build it with `saheeli build-servo`",
            None => "not checked: Docker did not answer",
        };
        let _ = writeln!(s, "image:      {} ({presence})", clean(&self.image));
        let keys: Vec<String> = self
            .provider_keys
            .iter()
            .map(|(name, var)| format!("{}={}", clean(name), clean(var)))
            .collect();
        let _ = writeln!(s, "keys:       {}", keys.join(", "));
        if let Some(w) = &self.workspace {
            let _ = writeln!(
                s,
                "workspace:  {} (would copy {} file{}, {} bytes)",
                clean(&w.path.display().to_string()),
                w.files,
                if w.files == 1 { "" } else { "s" },
                w.bytes
            );
        }
        s
    }
}

impl DryRunView<'_> {
    fn parameters_table(&self) -> Table {
        let mut table = Table::new();
        table
            .load_preset(UTF8_BORDERS_ONLY)
            .set_content_arrangement(ContentArrangement::Dynamic)
            .set_header(["PARAMETER", "VALUE", "FROM"]);
        for p in self.parameters {
            let value = if p.value.is_empty() {
                "-".to_string()
            } else {
                clean(&p.value)
            };
            table.add_row([clean(&p.name), value, p.source.as_str().into()]);
        }
        table
    }
}

/// A step as a dry run lists it: name, description, when it is done.
fn step_line(step: &saheeli_protocol::template::Step) -> String {
    let mut s = clean(&step.name);
    if !step.description.trim().is_empty() {
        s.push_str(": ");
        s.push_str(&clean(step.description.trim()));
    }
    if let Some(w) = &step.done_when {
        s.push_str(&format!(" (done when: {})", clean(&w.to_string())));
    }
    s
}

/// A value as a table cell: text as it is, nothing as `-`, a list joined
/// by commas, a map as `K=V` pairs.
fn shown(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => clean(s),
        Value::Array(items) if items.is_empty() => "-".into(),
        Value::Array(items) => items.iter().map(shown).collect::<Vec<_>>().join(", "),
        Value::Object(m) if m.is_empty() => "-".into(),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{}={}", clean(k), shown(v)))
            .collect::<Vec<_>>()
            .join(", "),
        other => clean(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cells_are_plain_and_safe() {
        assert_eq!(shown(&json!(null)), "-");
        assert_eq!(shown(&json!([])), "-");
        assert_eq!(shown(&json!(["timeout", "oom"])), "timeout, oom");
        assert_eq!(
            shown(&json!({"A": "1", "B": "x\u{1b}[2J"})),
            "A=1, B=x\\u{1b}[2J"
        );
        assert_eq!(shown(&json!(1.5)), "1.5");
    }
}
