//! What the command handlers share: opening the store, exit codes,
//! submitting a prompt file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use saheeli_protocol::{Agent, TaskId};

use crate::backend::EngineError;
use crate::cli::PromptArgs;
use crate::config::{Config, FileAccess};
use crate::inputs;
use crate::spec::{SpecError, TaskSpec, ask_line, check_value, image_for};
use crate::state::TaskState;
use crate::store::Store;
use saheeli_protocol::template::Parameter;

use super::CommandError;

/// Opens the database named by the config, creating its directory.
pub(crate) fn open_store(cfg: &Config) -> anyhow::Result<Store> {
    let path = cfg.database();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating database directory `{}`", dir.display()))?;
    }
    create_db_file(&path, cfg.file.file_access)?;
    let store =
        Store::open(&path).with_context(|| format!("opening database `{}`", path.display()))?;
    // One made before (by an older saheeli, by hand) is closed to others
    // as `file_access` says, and so are SQLite's `-wal` and `-shm`
    // (HOSTILE.md case 57): they hold prompts, answers and messages.
    let access = cfg.file.file_access;
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.clone().into_os_string();
        name.push(suffix);
        narrow(Path::new(&name), access.file_mode())?;
    }
    Ok(store)
}

/// Takes from `path`'s mode what `mode` does not allow (never adds to
/// it); an absent file is left absent, a link is not followed, and a file
/// of another user (a group member's `task status` under `file_access:
/// group`) is not this process's to change.
pub(crate) fn narrow(path: &Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // SAFETY: geteuid only reads the process's effective uid.
    let me = unsafe { libc::geteuid() };
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() || m.uid() != me => return Ok(()),
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("reading `{}`", path.display())),
    };
    let now = meta.permissions().mode() & 0o7777;
    if now & !mode == 0 {
        return Ok(());
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(now & mode))
        .with_context(|| format!("setting the mode of `{}`", path.display()))
}

/// Creates `state_dir` (trajectories, workspaces waiting to launch,
/// parked work) with `file_access`'s directory mode, and closes an
/// existing one as far as that mode says.
pub(crate) fn prepare_state_dir(cfg: &Config) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = cfg.state_dir();
    let mode = cfg.file.file_access.dir_mode();
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating `{}`", parent.display()))?;
    }
    match std::fs::DirBuilder::new().mode(mode).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(e).with_context(|| format!("creating state directory `{}`", dir.display()));
        }
    }
    narrow(&dir, mode)?;
    narrow(&dir.join("trajectories"), 0o700)
}

/// Creates an absent database file empty, with `access`'s mode whatever
/// the umask (SQLite then gives its `-wal` and `-shm` the same mode). An
/// existing one is narrowed to that mode once opened (`open_store`).
fn create_db_file(path: &Path, access: FileAccess) -> anyhow::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(access.file_mode())
        .open(path);
    match created {
        Ok(f) => f
            .set_permissions(std::fs::Permissions::from_mode(access.file_mode()))
            .with_context(|| format!("setting the mode of database `{}`", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating database `{}`", path.display())),
    }
}

/// Creates `results_dir` when absent, with `file_access`'s directory mode
/// (an existing one is left as it is).
pub(crate) fn prepare_results_dir(cfg: &Config) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let dir = cfg.results_dir();
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating `{}`", parent.display()))?;
    }
    let mode = cfg.file.file_access.dir_mode();
    match std::fs::DirBuilder::new().mode(mode).create(&dir) {
        Ok(()) => std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("setting the mode of `{}`", dir.display())),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating results directory `{}`", dir.display())),
    }
}

/// Opens an existing database for a command that only reads (status, logs,
/// results): never creates one, and says where it looked.
pub(crate) fn open_existing_store(cfg: &Config) -> anyhow::Result<Store> {
    let path = cfg.database();
    if !path.exists() {
        bail!(
            "no database at `{}` (from {}); run this in the project directory, or pass \
             `--config FILE`; `saheeli task submit` creates it",
            path.display(),
            cfg.describe_source()
        );
    }
    open_store(cfg)
}

pub(super) fn exit_for(state: TaskState) -> ExitCode {
    match state {
        TaskState::Complete => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    }
}

/// The task a prompt and the command line's flags make (nothing written).
/// A template's required parameters without a value are asked for when
/// stdin is a terminal; otherwise they are the error.
pub(super) fn spec_for(cfg: &Config, prompt: &Path, args: &PromptArgs) -> anyhow::Result<TaskSpec> {
    if let Some(problem) = cfg.file.swarm_image_problem() {
        anyhow::bail!("{}: {problem}", cfg.describe_source());
    }
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stdin());
    let mut asked: Vec<(String, String)> = Vec::new();
    let mut spec = loop {
        match TaskSpec::from_prompt_asked(cfg, prompt, &args.params, &asked) {
            Ok(spec) => break spec,
            Err(SpecError::Missing(missing)) if interactive => {
                for p in &missing.missing {
                    asked.push((p.name.clone(), ask_parameter(p, &missing.dir)?));
                }
            }
            Err(e) => return Err(e.into_anyhow()),
        }
    };
    spec.no_human |= args.no_human;
    spec.plan_only = args.plan_only;
    Ok(spec)
}

/// Asks for a parameter's value on the terminal (stderr, stdin) until one
/// fits its type.
fn ask_parameter(p: &Parameter, dir: &Path) -> anyhow::Result<String> {
    use std::io::Write;
    eprintln!("{}", crate::output::clean(&ask_line(p)));
    loop {
        eprint!("{} = ", p.name);
        std::io::stderr().flush()?;
        let mut line = String::new();
        if std::io::stdin().read_line(&mut line)? == 0 {
            bail!(
                "no value for parameter `{}`: the input ended; give it with `--param {}=VALUE`",
                p.name,
                p.name
            );
        }
        let value = line.trim_end_matches(['\n', '\r']).trim();
        if value.is_empty() {
            continue;
        }
        match check_value(p, value, dir) {
            Ok(()) => return Ok(value.to_string()),
            Err(why) => eprintln!("  {why}; try again"),
        }
    }
}

/// The task a prompt's text makes, as if it were the file `prompt`
/// (the HTTP API's submit; nothing written). A prompt that does not
/// validate is refused.
pub(crate) fn spec_for_text(
    cfg: &Config,
    prompt: &Path,
    text: &str,
    args: &PromptArgs,
) -> Result<TaskSpec, CommandError> {
    if let Some(problem) = cfg.file.swarm_image_problem() {
        // The serving foreman's configuration, not the request's.
        let e = anyhow::anyhow!("{}: {problem}", cfg.describe_source());
        return Err(CommandError::Internal(e));
    }
    let mut spec =
        TaskSpec::from_text(cfg, prompt, text, &args.params).map_err(CommandError::Refused)?;
    spec.no_human |= args.no_human;
    spec.plan_only = args.plan_only;
    Ok(spec)
}

/// Validates and queues a prompt; returns the new id.
pub(super) async fn submit_prompt(
    cfg: &Config,
    prompt: &Path,
    args: &PromptArgs,
) -> anyhow::Result<TaskId> {
    let spec = spec_for(cfg, prompt, args)?;
    Ok(submit_spec(cfg, prompt, spec, args).await?)
}

/// Fails, naming the key and what to do, when an agent's image is not in Docker.
pub(super) async fn require_image(
    cfg: &Config,
    prompt: &Path,
    agent: &Agent,
) -> Result<(), EngineError> {
    if agent.is_builtin() {
        return Ok(());
    }
    let image = image_for(cfg, agent);
    let docker = crate::docker::connect().await.map_err(EngineError::of)?;
    if let Err(e) = crate::docker::require_image(&docker, &image).await {
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
    args: &PromptArgs,
) -> Result<TaskId, CommandError> {
    let id = TaskId::new();
    require_image(cfg, prompt, &spec.agent).await?;
    // Copied before the row exists (and the database is opened): a failure
    // here queues nothing and leaves nothing behind.
    let packed = pack_submitted(cfg, prompt, &mut spec, args, id).await?;
    let queued = open_store(cfg)
        .map_err(CommandError::Internal)
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
pub(super) async fn pack_submitted(
    cfg: &Config,
    prompt: &Path,
    spec: &mut TaskSpec,
    args: &PromptArgs,
    id: TaskId,
) -> Result<Option<PathBuf>, CommandError> {
    let Some(ws) = &spec.workspace else {
        return Ok(None);
    };
    let bounds = inputs::Bounds::of_prompt(prompt, args.allow_workspace_outside)
        .map_err(CommandError::Refused)?;
    spec.workspace_under = Some(bounds.under.clone().unwrap_or_else(|| "/".into()));
    let (cfg, ws) = (cfg.clone(), ws.clone());
    let include_ignored = spec.workspace_include_ignored;
    let tar =
        tokio::task::spawn_blocking(move || inputs::pack(&cfg, &ws, &bounds, id, include_ignored))
            .await
            .map_err(|e| CommandError::panicked("packing", e))??;
    Ok(Some(tar))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    /// HOSTILE.md 57: a world-readable file is closed as far as the mode
    /// says, never opened up; an absent file stays absent and a link is
    /// not followed.
    #[test]
    fn narrow_only_takes_away() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("db");
        // (mode before, mode allowed, mode after)
        let cases = [
            (0o644, 0o600, 0o600),
            (0o666, 0o640, 0o640),
            (0o600, 0o644, 0o600),
            (0o755, 0o700, 0o700),
            (0o400, 0o600, 0o400),
        ];
        std::fs::write(&f, "").unwrap();
        for (before, allowed, after) in cases {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(before)).unwrap();
            narrow(&f, allowed).unwrap();
            assert_eq!(mode(&f), after, "{before:o} under {allowed:o}");
        }
        narrow(&d.path().join("absent"), 0o600).unwrap();
        assert!(!d.path().join("absent").exists());
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        narrow(&link, 0o600).unwrap();
        assert_eq!(mode(&f), 0o644, "the link's target is left alone");
    }
}
