//! Templates: a prompt that declares `parameters:`. Its declarations are
//! checked, each parameter gets a value (`--param NAME=VALUE`, its
//! `default`, or an answer on a terminal), values are checked against
//! their type, and `{{ name }}` is replaced in the body and in the
//! front-matter's texts ([`each_text`]). `steps:` are checked here too.
//!
//! A prompt without `parameters:` is not a template: its text is sent as
//! written, braces and all.

use std::path::{Path, PathBuf};

use anyhow::bail;
use saheeli_protocol::front_matter::{FrontMatter, Workspace};
use saheeli_protocol::template::{DoneWhen, ParamType, Parameter, Step};

use crate::task::{ParamSource, ParamValue};

use super::placeholders::{first_unknown, is_name, render};

/// Most parameters and steps a template may declare, and the longest step name.
const MAX_PARAMETERS: usize = 100;
const MAX_STEPS: usize = 100;
const MAX_STEP_NAME: usize = 100;

/// Required parameters nobody gave a value. On a terminal the command asks
/// for them ([`ask_line`]); otherwise this is the error (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{}", self.message())]
pub(crate) struct MissingParameters {
    pub path: PathBuf,
    /// The prompt's directory (`path` values are relative to it).
    pub dir: PathBuf,
    pub missing: Vec<Parameter>,
}

impl MissingParameters {
    fn message(&self) -> String {
        let each: Vec<String> = self
            .missing
            .iter()
            .map(|p| {
                format!(
                    "required parameter `{}` has no value{}; give it with `--param {}=VALUE`",
                    p.name,
                    p.description
                        .as_deref()
                        .map(|d| format!(" ({})", d.trim()))
                        .unwrap_or_default(),
                    p.name
                )
            })
            .collect();
        format!(
            "{}: {} (on a terminal, `saheeli run` and `saheeli task submit` ask for it)",
            self.path.display(),
            each.join("; ")
        )
    }
}

/// How a parameter is asked for on a terminal: its name, type and
/// description.
pub(crate) fn ask_line(p: &Parameter) -> String {
    let kind = match p.kind {
        ParamType::OneOf => format!(
            "one of: {}",
            p.values
                .iter()
                .map(|v| v.0.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        k => k.to_string(),
    };
    let desc = p
        .description
        .as_deref()
        .map(|d| format!(": {}", d.trim()))
        .unwrap_or_default();
    format!("parameter `{}` ({kind}, required){desc}", p.name)
}

/// Whether `value` fits parameter `p`; Err says why not. `dir` is the
/// prompt's directory, which `path` values are relative to.
pub(crate) fn check_value(p: &Parameter, value: &str, dir: &Path) -> Result<(), String> {
    match p.kind {
        ParamType::String => Ok(()),
        ParamType::Int => match value.trim().parse::<i64>() {
            Ok(_) => Ok(()),
            Err(_) => Err(format!("`{value}` is not a whole number")),
        },
        ParamType::Bool => match value {
            "true" | "false" => Ok(()),
            _ => Err(format!("`{value}` is not `true` or `false`")),
        },
        ParamType::Path => {
            let at = dir.join(value);
            // The link itself counts: nothing on the host is followed here.
            if value.is_empty() || std::fs::symlink_metadata(&at).is_err() {
                Err(format!(
                    "path `{value}` does not exist (relative to `{}`)",
                    dir.display()
                ))
            } else {
                Ok(())
            }
        }
        ParamType::OneOf => {
            if p.values.iter().any(|v| v.0 == value) {
                Ok(())
            } else {
                let all: Vec<&str> = p.values.iter().map(|v| v.0.as_str()).collect();
                Err(format!("`{value}` is not one of {}", all.join(", ")))
            }
        }
    }
}

/// The keys a front-matter may set (what a parameter must not be called).
fn front_matter_keys() -> Vec<String> {
    let value = serde_yaml::to_value(FrontMatter::default()).expect("front-matter serializes");
    value
        .as_mapping()
        .map(|m| {
            m.keys()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The line of the front-matter that declares `name: NAME` (a parameter
/// or a step), for errors; None when it cannot be told.
fn line_of(text: &str, name: &str) -> Option<usize> {
    let pattern = format!(
        r#"(^|[\s{{,-])name:\s*["']?{}["']?\s*(,|\}}|$|#)"#,
        regex::escape(name)
    );
    let re = regex::Regex::new(&pattern).ok()?;
    text.lines().position(|l| re.is_match(l)).map(|i| i + 1)
}

fn at(path: &Path, text: &str, name: &str) -> String {
    match line_of(text, name) {
        Some(l) => format!("{}:{l}", path.display()),
        None => path.display().to_string(),
    }
}

/// Checks what a template declares: parameter names (words, unique, not a
/// front-matter key), `one_of` with `values`, defaults of their type; and
/// step names (unique, printable). `text` is the prompt file's text.
pub(super) fn check_declarations(
    path: &Path,
    text: &str,
    fm: &FrontMatter,
    dir: &Path,
) -> anyhow::Result<()> {
    if fm.parameters.len() > MAX_PARAMETERS {
        bail!(
            "{}: `parameters` declares {}; at most {MAX_PARAMETERS}",
            path.display(),
            fm.parameters.len()
        );
    }
    let keys = front_matter_keys();
    let mut seen = std::collections::BTreeSet::new();
    for p in &fm.parameters {
        check_parameter(path, text, p, &keys, dir)?;
        if !seen.insert(p.name.as_str()) {
            bail!(
                "{}: parameter `{}` is declared twice",
                at(path, text, &p.name),
                p.name
            );
        }
    }
    check_steps(path, text, &fm.steps)
}

fn check_parameter(
    path: &Path,
    text: &str,
    p: &Parameter,
    keys: &[String],
    dir: &Path,
) -> anyhow::Result<()> {
    let at = at(path, text, &p.name);
    let name = &p.name;
    if !is_name(name) || name.len() > 64 {
        bail!(
            "{at}: parameter name `{name}` is not a word: use up to 64 letters, digits, `_` \
             and `-`, starting with a letter or `_`"
        );
    }
    if let Some(key) = keys.iter().find(|k| *k == name) {
        bail!(
            "{at}: parameter `{name}` has the name of the front-matter key `{key}` \
             (`--param {key}=…` sets that key); rename the parameter"
        );
    }
    match (p.kind, p.values.is_empty()) {
        (ParamType::OneOf, true) => bail!(
            "{at}: parameter `{name}` is `one_of` but lists no `values`; add e.g. `values: [a, b]`"
        ),
        (ParamType::OneOf, false) | (_, true) => {}
        (kind, false) => bail!(
            "{at}: parameter `{name}` has `values`, which only a `one_of` takes (it is `{kind}`)"
        ),
    }
    if let Some(d) = &p.default {
        if p.required {
            bail!("{at}: parameter `{name}` is `required` and has a `default`; drop one of them");
        }
        // A path default is looked for when it is used.
        if p.kind != ParamType::Path
            && let Err(why) = check_value(p, &d.0, dir)
        {
            bail!(
                "{at}: parameter `{name}` ({}): its `default`: {why}",
                p.kind
            );
        }
    }
    Ok(())
}

fn check_steps(path: &Path, text: &str, steps: &[Step]) -> anyhow::Result<()> {
    if steps.len() > MAX_STEPS {
        bail!(
            "{}: `steps` lists {}; at most {MAX_STEPS}",
            path.display(),
            steps.len()
        );
    }
    let mut seen = std::collections::BTreeSet::new();
    for s in steps {
        let name = s.name.trim();
        if name.is_empty()
            || name != s.name
            || s.name.chars().count() > MAX_STEP_NAME
            || s.name.chars().any(char::is_control)
        {
            bail!(
                "{}: step name `{}` must be 1 to {MAX_STEP_NAME} characters, without control \
                 characters or spaces around it",
                at(path, text, &s.name),
                crate::text::clean(&s.name)
            );
        }
        if !seen.insert(name) {
            bail!(
                "{}: step `{name}` is listed twice; step names are unique",
                at(path, text, name)
            );
        }
        if let Some(command) = s.done_when.as_ref().and_then(|w| w.command())
            && command.trim().is_empty()
        {
            bail!(
                "{}: step `{name}` has `done_when: {{ verify: }}` with no command; give the \
                 command that checks the step, or write `done_when` as text",
                at(path, text, name)
            );
        }
    }
    Ok(())
}

/// An unknown `{{ name }}` anywhere in the prompt file's `text` is an
/// error naming its line.
pub(super) fn check_placeholders(path: &Path, text: &str, fm: &FrontMatter) -> anyhow::Result<()> {
    let known = |n: &str| fm.parameters.iter().any(|p| p.name == n);
    if let Some((line, name)) = first_unknown(text, known) {
        bail!(
            "{}:{line}: `{{{{ {name} }}}}` names no parameter; declare it under `parameters:` \
             (declared: {}), or write `\\{{{{` for literal braces",
            path.display(),
            names(&fm.parameters)
        );
    }
    Ok(())
}

fn names(params: &[Parameter]) -> String {
    if params.is_empty() {
        return "none".into();
    }
    params
        .iter()
        .map(|p| format!("`{}`", p.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Splits `--param K=V` into a template's parameter values and front-matter
/// overrides (the rest, checked by `apply_params`).
pub(super) fn split_params(
    fm: &FrontMatter,
    params: &[String],
) -> (Vec<(String, String)>, Vec<String>) {
    let mut values = Vec::new();
    let mut overrides = Vec::new();
    for p in params {
        match p.split_once('=') {
            Some((k, v)) if fm.parameters.iter().any(|d| d.name == k) => {
                values.push((k.to_string(), v.to_string()))
            }
            _ => overrides.push(p.clone()),
        }
    }
    (values, overrides)
}

/// Every declared parameter's value: given (`--param`, the last one of a
/// name wins), asked, its default, or empty when it is optional. Values
/// are checked against their type; required ones without a value are a
/// [`MissingParameters`] error, after any other error.
pub(super) fn resolve(
    path: &Path,
    dir: &Path,
    declared: &[Parameter],
    given: &[(String, String)],
    asked: &[(String, String)],
) -> Result<Vec<ParamValue>, super::prompt::SpecError> {
    let mut out = Vec::new();
    let mut missing = Vec::new();
    for p in declared {
        let find = |list: &[(String, String)]| {
            list.iter()
                .rev()
                .find(|(k, _)| *k == p.name)
                .map(|(_, v)| v.clone())
        };
        let (value, source) = if let Some(v) = find(given) {
            (v, ParamSource::Param)
        } else if let Some(v) = find(asked) {
            (v, ParamSource::Asked)
        } else if let Some(d) = &p.default {
            (d.0.clone(), ParamSource::Default)
        } else if p.required {
            missing.push(p.clone());
            continue;
        } else {
            (String::new(), ParamSource::Unset)
        };
        if source != ParamSource::Unset {
            check_given(path, dir, p, &value, source)?;
        }
        out.push(ParamValue {
            name: p.name.clone(),
            value,
            source,
        });
    }
    if !missing.is_empty() {
        return Err(MissingParameters {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
            missing,
        }
        .into());
    }
    Ok(out)
}

fn check_given(
    path: &Path,
    dir: &Path,
    p: &Parameter,
    value: &str,
    source: ParamSource,
) -> anyhow::Result<()> {
    let name = &p.name;
    let from = match source {
        ParamSource::Param => format!("`--param {name}=…`"),
        ParamSource::Default => "its `default`".into(),
        _ => "the value given".into(),
    };
    if value.is_empty() && p.kind != ParamType::String {
        bail!(
            "{}: parameter `{name}` ({}): {from} is empty; give a value",
            path.display(),
            p.kind
        );
    }
    if let Err(why) = check_value(p, value, dir) {
        bail!(
            "{}: parameter `{name}` ({}): {from}: {why}",
            path.display(),
            p.kind
        );
    }
    Ok(())
}

/// Calls `f` on every front-matter text placeholders are replaced in,
/// with its key. A key that takes placeholders is one line here.
fn each_text(
    fm: &mut FrontMatter,
    f: &mut dyn FnMut(&'static str, &mut String) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    if let Some(t) = fm.title.as_mut() {
        f("title", t)?;
    }
    for c in fm.verify.iter_mut().flat_map(|c| c.run.0.iter_mut()) {
        f("verify", c)?;
    }
    if let Some(o) = fm.objective.as_mut() {
        f("objective", o)?;
    }
    match fm.workspace.as_mut() {
        Some(Workspace::Path(ws)) => {
            let mut text = ws.to_string_lossy().into_owned();
            f("workspace", &mut text)?;
            *ws = PathBuf::from(text);
        }
        Some(Workspace::Git(g)) => {
            f("workspace.git", &mut g.git)?;
            if let Some(r) = g.reference.as_mut() {
                f("workspace.ref", r)?;
            }
        }
        None => {}
    }
    if let Some(d) = fm.deliver.as_mut() {
        f("deliver.branch", &mut d.branch)?;
    }
    for s in &mut fm.steps {
        f("steps.description", &mut s.description)?;
        match s.done_when.as_mut() {
            Some(DoneWhen::Text(d)) => f("steps.done_when", d)?,
            Some(DoneWhen::Check(c)) => f("steps.done_when.verify", &mut c.verify)?,
            None => (),
        }
    }
    Ok(())
}

/// Replaces the placeholders of the front-matter's texts and of `body`.
pub(super) fn render_all(
    path: &Path,
    fm: &mut FrontMatter,
    body: &mut String,
    values: &[ParamValue],
) -> anyhow::Result<()> {
    let value = |name: &str| {
        values
            .iter()
            .find(|v| v.name == name)
            .map(|v| v.value.as_str())
    };
    let declared = names(&fm.parameters);
    let mut one = |key: &str, text: &mut String| -> anyhow::Result<()> {
        match render(text, value) {
            Ok(t) => {
                *text = t;
                Ok(())
            }
            // Only a value set by `--param` can get here: the file's own
            // placeholders were checked with their lines.
            Err(name) => bail!(
                "{}: `{key}`: `{{{{ {name} }}}}` names no parameter (declared: {declared})",
                path.display()
            ),
        }
    };
    each_text(fm, &mut one)?;
    one("body", body)
}

#[cfg(test)]
#[path = "template_tests.rs"]
mod tests;
