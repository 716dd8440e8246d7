//! `--dry-run` of `saheeli run` and `saheeli task submit`: every check a
//! submit makes (the prompt, its front-matter and `--param`, the
//! workspace's path, packing rules, size and keys), then the effective task
//! printed. Nothing is written: no database is opened, no workspace copy
//! made, no container or volume created.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

use crate::backend::EngineError;
use crate::backend::docker;
use crate::cli::PromptArgs;
use crate::config::Config;
use crate::inputs;
use crate::output::{DryRunView, DryWorkspace};
use crate::spec::{self, TaskSpec};

use super::spec_for;

pub(super) async fn dry_run(
    cfg: &Config,
    prompt: &Path,
    args: &PromptArgs,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let spec = spec_for(cfg, prompt, args)?;
    let front_matter = spec::front_matter(prompt)?;
    let workspace = match &spec.workspace {
        Some(ws) => Some(check_workspace(cfg, prompt, ws, &spec, args).await?),
        None => None,
    };
    let mut view = DryRunView::new(
        &spec,
        spec::effective(cfg, &spec, &front_matter, &args.params()),
    );
    view.config = cfg.source.clone();
    view.tools = spec::tools_for(&spec);
    view.image = spec::image_for(cfg, &spec.agent);
    view.image_present = image_present(&view.image).await;
    view.workspace = workspace;
    view.provider_keys = crate::config::Providers::from_config(cfg)
        .keys()
        .into_iter()
        .collect();
    if json {
        outln!("{}", serde_json::to_string_pretty(&view)?);
    } else {
        out!("{}", view.text());
    }
    Ok(ExitCode::SUCCESS)
}

/// The checks `submit` makes of a `workspace:`, with the copy walked but
/// written nowhere.
async fn check_workspace(
    cfg: &Config,
    prompt: &Path,
    ws: &Path,
    spec: &TaskSpec,
    args: &PromptArgs,
) -> anyhow::Result<DryWorkspace> {
    inputs::check_workspace_path(prompt, ws, args.allow_workspace_outside)?;
    let opts = inputs::pack_options(cfg, spec.workspace_include_ignored);
    let dir = ws.to_path_buf();
    let size = tokio::task::spawn_blocking(move || inputs::check_workspace(&dir, &opts))
        .await
        .context("packing thread panicked")??;
    Ok(DryWorkspace {
        path: ws.to_path_buf(),
        files: size.files,
        bytes: size.bytes,
    })
}

/// Whether the daemon has `image`; a missing image or an unreachable
/// daemon is a warning here (a real run fails on it), not an error.
async fn image_present(image: &str) -> Option<bool> {
    let docker = match docker::connect().await {
        Ok(d) => d,
        Err(e) => {
            eprintln!("warning: could not check image `{image}`: {e:#}");
            return None;
        }
    };
    match docker::require_image(&docker, image)
        .await
        .map_err(EngineError::of)
    {
        Ok(()) => Some(true),
        Err(EngineError::ImageMissing(e)) => {
            eprintln!("warning: {e}; a real run fails until it is built");
            Some(false)
        }
        Err(e) => {
            eprintln!("warning: could not check image `{image}`: {e:#}");
            None
        }
    }
}
