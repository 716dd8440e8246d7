//! A task's submitted workspace packed (a submit, a retry, an eval case, a
//! child a model spawns): the path checked against its bounds, Saheeli's
//! own files left out, the size cap and the keys refused, the tar made in
//! `state_dir`. Blocking.

use std::path::{Path, PathBuf};

use anyhow::Context;
use saheeli_protocol::TaskId;

use crate::config::Config;

use super::check::{Bounds, check_within};
use super::copies::new_workspace_tar;
use super::pack::{PackError, PackOptions, pack_workspace};

/// Packs `ws` as task `id`'s submitted workspace; returns the tar.
/// Blocking. Every pack goes through here, and `ws` is checked against
/// `bounds` first (not the whole host, not a home, under its prompt's
/// directory unless a person allowed it outside), whoever asks.
pub(crate) fn pack(
    cfg: &Config,
    ws: &Path,
    bounds: &Bounds,
    id: TaskId,
    include_ignored: bool,
) -> Result<PathBuf, PackError> {
    // A path that is not fit to be a workspace.
    check_within(bounds, ws).map_err(PackError::Outside)?;
    let opts = pack_options(cfg, include_ignored);
    let tar = new_workspace_tar(&cfg.state_dir(), id)
        .with_context(|| {
            format!(
                "creating the inputs directory in `{}`",
                cfg.state_dir().display()
            )
        })
        .map_err(PackError::Inputs)?;
    pack_workspace(ws, &tar, &opts)?;
    Ok(tar)
}

/// How a workspace is packed: Saheeli's own files left out, the size cap
/// and the keys to refuse (the same for a submit and a dry run).
pub(crate) fn pack_options(cfg: &Config, include_ignored: bool) -> PackOptions {
    let db = cfg.database();
    let mut exclude = vec![cfg.state_dir(), cfg.results_dir()];
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = db.clone().into_os_string();
        p.push(suffix);
        exclude.push(p.into());
    }
    PackOptions {
        include_ignored,
        exclude,
        max_bytes: cfg.file.max_workspace_size.0,
        secrets: known_secrets(cfg),
        no_parent_rules: false,
    }
}

/// The value of every key variable Saheeli knows, from the environment and
/// from `.env` beside config.yaml (where the environment may hold another).
fn known_secrets(cfg: &Config) -> Vec<(String, String)> {
    let mut vars = vec![
        "OPENAI_API_KEY".to_string(),
        "ANTHROPIC_API_KEY".to_string(),
    ];
    vars.extend(
        cfg.file
            .providers
            .values()
            .filter_map(|p| p.api_key_env.clone()),
    );
    let mut out: Vec<(String, String)> = vars
        .iter()
        .filter_map(|v| Some((v.clone(), std::env::var(v).ok()?)))
        .collect();
    if let Ok(entries) = dotenvy::from_path_iter(cfg.base_dir.join(".env")) {
        out.extend(entries.flatten().filter(|(k, _)| vars.contains(k)));
    }
    // As collection's redaction does: a short value would match by chance.
    out.retain(|(_, v)| v.trim().len() >= 8);
    out.sort();
    out.dedup();
    out
}
