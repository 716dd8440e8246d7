//! What a task may ask for: bounds, ceilings, models and their keys,
//! replay files, and keys that must not be stored.

use std::path::Path;

use anyhow::{Context, bail};
use saheeli_protocol::ReplayScript;
use saheeli_protocol::front_matter::{Memory, NetworkMode};

use crate::config::Config;

/// Most steps, retries, title length and timeout a task may ask for: far
/// above any real use, low enough that a typo is caught.
pub(super) const MAX_STEPS: u32 = 100_000;

pub(super) const MAX_RETRIES: u32 = 100;

pub(super) const MAX_TITLE: usize = 200;

pub(super) const MAX_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// A key value as it may appear in text: itself, and base64 of it at each
/// of the three alignments it can take inside a longer encoded string
/// (standard and URL-safe alphabets).
pub(super) fn secret_forms(value: &str) -> Vec<String> {
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

/// Reads the `replay:` script `file` a command names (`task fork
/// --model replay:FILE`): inside the current directory's tree.
pub(crate) fn read_replay_here(file: &str) -> anyhow::Result<ReplayScript> {
    read_replay(Path::new("--model"), Path::new(""), file)
}

/// Reads a `replay:` script. It must lie inside the prompt's directory tree
/// (a prompt cannot read host files through it), and errors never quote its
/// contents.
pub(super) fn read_replay(prompt: &Path, dir: &Path, file: &str) -> anyhow::Result<ReplayScript> {
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
pub(super) fn check_model(cfg: &Config, prompt: &Path, model: &str) -> anyhow::Result<()> {
    if model.trim().is_empty() {
        bail!(
            "{}: `model` is empty; name one (e.g. `gpt-4o-mini`) or `replay:FILE`",
            prompt.display()
        );
    }
    let providers = crate::config::Providers::from_config(cfg);
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
            p.key_env.as_deref().unwrap_or("its `api_key_env`")
        );
    }
    Ok(())
}

/// Everything a prompt asks for must lie within config.yaml's `limits:`.
pub(super) fn check_ceilings(
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

/// The tools an approval gate may name (from the tool table), and `plan`
/// (the plan gate).
pub(super) fn gateable() -> Vec<&'static str> {
    let mut names = saheeli_protocol::tools::names(|t| t.gateable());
    names.push(saheeli_protocol::human::PLAN);
    names
}

/// Gates name known tools once each (a granted capability's tools are
/// `name__tool`), and their patterns compile.
pub(super) fn check_gates(
    path: &std::path::Path,
    gates: &[saheeli_protocol::human::Gate],
    capabilities: &[String],
) -> anyhow::Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    for g in gates {
        let capability_tool = g
            .tool
            .split_once("__")
            .is_some_and(|(cap, tool)| !tool.is_empty() && capabilities.iter().any(|c| c == cap));
        let gateable = gateable();
        if !gateable.contains(&g.tool.as_str()) && !capability_tool {
            anyhow::bail!(
                "{}: `approve` names `{}`, which is not a gateable tool; use any of {}",
                path.display(),
                g.tool,
                gateable.join(", ")
            );
        }
        if !seen.insert(g.tool.as_str()) {
            anyhow::bail!("{}: `approve` names `{}` twice", path.display(), g.tool);
        }
        match &g.pattern {
            Some(_) if g.tool == saheeli_protocol::human::PLAN => anyhow::bail!(
                "{}: `approve`: the plan gate takes no pattern; write `approve: [plan]`",
                path.display()
            ),
            Some(p) => {
                regex::Regex::new(p).map_err(|e| {
                    anyhow::anyhow!(
                        "{}: `approve.{}`: `{p}` is not a valid regular expression: {e}",
                        path.display(),
                        g.tool
                    )
                })?;
            }
            None => {}
        }
    }
    Ok(())
}

/// Human waits within bounds.
pub(super) fn check_human(
    path: &std::path::Path,
    human_timeout: std::time::Duration,
    park_after: std::time::Duration,
) -> anyhow::Result<()> {
    const MAX_HUMAN: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);
    if human_timeout.is_zero() || human_timeout > MAX_HUMAN {
        anyhow::bail!(
            "{}: `human_timeout` must be between 1s and 30 days",
            path.display()
        );
    }
    if park_after > std::time::Duration::from_secs(3600) {
        anyhow::bail!(
            "{}: `park_after` must be at most 1h (a parked task costs nothing while it waits)",
            path.display()
        );
    }
    Ok(())
}

/// Webhooks have http(s) URLs and name known events; an `email:`
/// channel has one address, a relay in config.yaml's `smtp:`, and is kept
/// as `url: mailto:ADDRESS`, `format: email`.
pub(super) fn check_notify(
    path: &std::path::Path,
    notify: &mut [saheeli_protocol::front_matter::Notify],
    smtp: bool,
) -> anyhow::Result<()> {
    use saheeli_protocol::front_matter::{NOTIFY_EVENTS, NotifyFormat};
    for n in notify.iter_mut() {
        if let Some(email) = n.email.take() {
            if !n.url.is_empty() {
                anyhow::bail!(
                    "{}: a `notify` entry has both `url` and `email`; give one",
                    path.display()
                );
            }
            if email.parse::<lettre::Address>().is_err() || email.len() > 254 {
                anyhow::bail!(
                    "{}: `notify` email {email:?} is not an address (`ops@example.com`)",
                    path.display()
                );
            }
            if !smtp {
                anyhow::bail!(
                    "{}: `notify` email `{email}` needs a relay: add `smtp: {{ relay: HOST:PORT, from: ADDRESS }}` to config.yaml",
                    path.display()
                );
            }
            n.url = format!("mailto:{email}");
            n.format = NotifyFormat::Email;
        } else if n.url.starts_with("mailto:") && n.format == NotifyFormat::Email {
            // Checked already (a retry's or a child's copy of the list).
        } else if n.format == NotifyFormat::Email {
            anyhow::bail!(
                "{}: `format: email` goes with `email: ADDRESS`, not a `url`",
                path.display()
            );
        }
        let ok = n.format == NotifyFormat::Email
            || reqwest::Url::parse(&n.url)
                .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
        if !ok {
            anyhow::bail!(
                "{}: `notify` url `{}` is not an http:// or https:// URL",
                path.display(),
                n.url
            );
        }
        if let Some(bad) = n
            .events
            .iter()
            .find(|e| *e != "all" && !NOTIFY_EVENTS.contains(&e.as_str()))
        {
            anyhow::bail!(
                "{}: `notify` event `{bad}` is unknown; use all or any of {}",
                path.display(),
                NOTIFY_EVENTS.join(", ")
            );
        }
    }
    Ok(())
}

/// Capabilities a task asks for exist in config.yaml and are allowed.
pub(super) fn check_capabilities(
    cfg: &crate::config::Config,
    path: &std::path::Path,
    asked: &[String],
) -> anyhow::Result<()> {
    for name in asked {
        if !cfg.file.capabilities.contains_key(name) {
            let known: Vec<&str> = cfg.file.capabilities.keys().map(String::as_str).collect();
            anyhow::bail!(
                "{}: capability `{name}` is not configured; config.yaml `capabilities:` has {}",
                path.display(),
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            );
        }
        if cfg.file.allow.as_ref().is_some_and(|a| !a.contains(name)) {
            anyhow::bail!(
                "{}: capability `{name}` is not allowed for tasks; add it to `allow:` in config.yaml",
                path.display()
            );
        }
    }
    Ok(())
}

/// `tools:` names built-in tools and keeps `task_complete`.
/// `delegate:` within what any task may grant.
pub(super) fn check_delegate(
    path: &std::path::Path,
    d: Option<&saheeli_protocol::delegate::Delegate>,
) -> anyhow::Result<()> {
    use saheeli_protocol::delegate::{MAX_CHILDREN, MAX_DEPTH};
    let Some(d) = d else { return Ok(()) };
    if !(1..=MAX_CHILDREN).contains(&d.max_children) {
        anyhow::bail!(
            "{}: `delegate.max_children` must be 1 to {MAX_CHILDREN}, not {}",
            path.display(),
            d.max_children
        );
    }
    if !(1..=MAX_DEPTH).contains(&d.max_depth) {
        anyhow::bail!(
            "{}: `delegate.max_depth` must be 1 to {MAX_DEPTH}, not {}",
            path.display(),
            d.max_depth
        );
    }
    Ok(())
}

pub(super) fn check_tools(path: &std::path::Path, tools: Option<&[String]>) -> anyhow::Result<()> {
    let Some(tools) = tools else { return Ok(()) };
    let narrowable = saheeli_protocol::tools::names(|t| t.narrowable());
    if let Some(bad) = tools.iter().find(|t| !narrowable.contains(&t.as_str())) {
        anyhow::bail!(
            "{}: `tools` names `{bad}`, which is not a built-in tool; use any of {}",
            path.display(),
            narrowable.join(", ")
        );
    }
    if !tools.iter().any(|t| t == "task_complete") {
        anyhow::bail!(
            "{}: `tools` must include task_complete, or the task can never complete",
            path.display()
        );
    }
    Ok(())
}
