//! `agent_type:` (issue 52): a task's defaults from config.yaml's
//! `agent_types:`, under what its front-matter and `--param` set.

use std::path::Path;

use anyhow::bail;
use saheeli_protocol::front_matter::FrontMatter;

use crate::config::{Config, known_agent_types};

/// `fm` with its agent type's values where it sets none; a type
/// config.yaml does not define is refused, naming the known ones.
pub(super) fn apply(cfg: &Config, path: &Path, fm: FrontMatter) -> anyhow::Result<FrontMatter> {
    let Some(name) = fm.agent_type.as_deref() else {
        return Ok(fm);
    };
    let types = &cfg.file.agent_types;
    let Some(t) = types.get(name) else {
        bail!(
            "{}: `agent_type` `{name}` is not defined in {} `agent_types` ({}); define it \
             there, or name a known one",
            path.display(),
            cfg.describe_source(),
            known_agent_types(types)
        );
    };
    Ok(t.under(fm))
}

/// The front-matter keys `spec`'s agent type sets, as a front-matter
/// (empty without one), for `--dry-run`'s sources.
pub(super) fn set_by(cfg: &Config, agent_type: Option<&str>) -> FrontMatter {
    agent_type
        .and_then(|n| cfg.file.agent_types.get(n))
        .map(|t| t.front_matter())
        .unwrap_or_default()
}
