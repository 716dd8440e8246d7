//! Submitting a task, for the CLI and the HTTP API alike: a prompt's
//! text checked into a spec, its agent's image required, its workspace
//! packed under the same rules, and the row queued.

use super::error::Error;
use crate::backend::EngineError;
use crate::config::Config;
use crate::inputs;
use crate::ops::open_store;
use crate::spec::TaskSpec;
use crate::spec::image_for;
use saheeli_protocol::Agent;
use saheeli_protocol::TaskId;
use std::path::Path;
use std::path::PathBuf;

/// What a submit asks besides the prompt (the CLI's `PromptArgs`, the
/// HTTP API's body): plain data.
#[derive(Clone, Debug, Default)]
pub(crate) struct Submit {
    /// Template parameters and front-matter overrides (`KEY=VALUE`).
    pub params: Vec<String>,
    pub priority: Option<i64>,
    /// Accept a `workspace:` outside the prompt file's directory tree.
    pub allow_workspace_outside: bool,
    pub no_human: bool,
    pub plan_only: bool,
}

/// The task a prompt's text makes, as if it were the file `prompt`
/// (the HTTP API's submit; nothing written). A prompt that does not
/// validate is refused.
pub(crate) fn spec_for_text(
    cfg: &Config,
    prompt: &Path,
    text: &str,
    args: &Submit,
) -> Result<TaskSpec, Error> {
    if let Some(problem) = cfg.file.swarm_image_problem() {
        // The serving foreman's configuration, not the request's.
        let e = anyhow::anyhow!("{}: {problem}", cfg.describe_source());
        return Err(Error::Internal(e));
    }
    let mut spec = TaskSpec::from_text(cfg, prompt, text, &args.params).map_err(Error::Refused)?;
    if let Some(why) = crate::backend::capabilities::refusal(cfg.file.backend, &spec) {
        return Err(Error::Refused(anyhow::anyhow!(
            "{}: {why}",
            prompt.display()
        )));
    }
    spec.no_human |= args.no_human;
    spec.plan_only = args.plan_only;
    Ok(spec)
}

/// Fails, naming the key and what to do, when an agent's image is not in Docker.
pub(crate) async fn require_image(
    cfg: &Config,
    prompt: &Path,
    agent: &Agent,
) -> Result<(), EngineError> {
    if agent.is_builtin() {
        return Ok(());
    }
    let image = image_for(cfg, agent);
    if cfg.file.backend == crate::config::BackendKind::Swarm {
        // The nodes pull it from the swarm's registry; this host's Docker
        // need not have it.
        return match cfg.file.outside_swarm_registry(&image) {
            None => Ok(()),
            Some(registry) => Err(EngineError::ImageMissing(anyhow::anyhow!(
                "{}: `agent` is `{}`, whose image `{image}` is not in the swarm's registry \
                 `{registry}`, so the nodes cannot pull it; {}",
                prompt.display(),
                agent.label(),
                match agent {
                    Agent::Named(n) => format!(
                        "run `saheeli build-servo --agent {n} --push` and set `agents: {{ {n}: \
                         <the reference it prints> }}` in config.yaml"
                    ),
                    Agent::Custom(_) => format!(
                        "push it to `{registry}` and set `agent.image` to its reference there"
                    ),
                }
            ))),
        };
    }
    let docker = crate::backend::docker::connect()
        .await
        .map_err(EngineError::of)?;
    if let Err(e) = crate::backend::docker::require_image(&docker, &image).await {
        let build = match agent {
            Agent::Named(n) => format!("build it with `saheeli build-servo --agent {n}`"),
            Agent::Custom(_) => "build it, or set `agent.image`".to_string(),
        };
        let told = |e: &dyn std::fmt::Display| {
            anyhow::anyhow!(
                "{}: `agent` is `{}`, whose image `{image}` is not available ({e:#}); {build}",
                prompt.display(),
                agent.label()
            )
        };
        // Sorted by the cause (the image is missing, or the daemon failed),
        // told in the prompt's words.
        return Err(match EngineError::of(e) {
            EngineError::ImageMissing(e) => EngineError::ImageMissing(told(&e)),
            EngineError::Unreachable { fault, error } => EngineError::Unreachable {
                fault,
                error: told(&error),
            },
            other => EngineError::Other(told(&other)),
        });
    }
    Ok(())
}

/// Queues a checked task from the prompt `prompt` (the CLI's file, or the
/// HTTP API's text as if it were a file): its workspace is packed first,
/// under the same rules. Returns the new id.
pub(crate) async fn submit_spec(
    cfg: &Config,
    prompt: &Path,
    mut spec: TaskSpec,
    args: &Submit,
) -> Result<TaskId, Error> {
    let id = TaskId::new();
    require_image(cfg, prompt, &spec.agent).await?;
    // Copied before the row exists (and the database is opened): a failure
    // here queues nothing and leaves nothing behind.
    let packed = pack_submitted(cfg, prompt, &mut spec, args, id).await?;
    let queued = open_store(cfg)
        .map_err(Error::Internal)
        .and_then(|mut store| {
            let priority = args.priority.or(spec.priority).unwrap_or(0);
            Ok(store.submit(id, &spec, priority, None, 1)?)
        });
    if let (Err(_), Some(tar)) = (&queued, packed) {
        let _ = std::fs::remove_file(tar);
    }
    queued.map(|()| id)
}

/// Checks the path of `spec`'s workspace, if it has one, and packs it as
/// task `id`'s (off the async threads); returns the tar. The bounds it was
/// checked against go into the spec, for a retry that copies it again.
pub(crate) async fn pack_submitted(
    cfg: &Config,
    prompt: &Path,
    spec: &mut TaskSpec,
    args: &Submit,
    id: TaskId,
) -> Result<Option<PathBuf>, Error> {
    if let Some(g) = &spec.git {
        // A repository on this host is held to the bounds a directory is
        // (N19): an API client names no repository outside the prompt's tree.
        if g.fetch.starts_with('/') {
            let bounds = match spec.workspace_under {
                Some(_) => inputs::bounds_of(spec),
                None => inputs::Bounds::of_prompt(prompt, args.allow_workspace_outside),
            }
            .map_err(Error::Refused)?;
            inputs::check_within(&bounds, Path::new(&g.fetch)).map_err(Error::Refused)?;
            spec.workspace_under = Some(bounds.under.clone().unwrap_or_else(|| "/".into()));
        }
        let (cfg, mut owned) = (cfg.clone(), spec.clone());
        let (tar, owned) = tokio::task::spawn_blocking(move || {
            let tar = super::git::pack_repository(&cfg, &mut owned, id);
            (tar, owned)
        })
        .await
        .map_err(|e| Error::panicked("fetching the repository", e))?;
        *spec = owned;
        return tar.map(Some);
    }
    let Some(ws) = &spec.workspace else {
        return Ok(None);
    };
    let bounds =
        inputs::Bounds::of_prompt(prompt, args.allow_workspace_outside).map_err(Error::Refused)?;
    spec.workspace_under = Some(bounds.under.clone().unwrap_or_else(|| "/".into()));
    let (cfg, ws) = (cfg.clone(), ws.clone());
    let include_ignored = spec.workspace_include_ignored;
    let tar =
        tokio::task::spawn_blocking(move || inputs::pack(&cfg, &ws, &bounds, id, include_ignored))
            .await
            .map_err(|e| Error::panicked("packing", e))??;
    Ok(Some(tar))
}
