//! What the command handlers share: opening the store, exit codes,
//! submitting a prompt file.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use saheeli_protocol::TaskId;

use crate::cli::PromptArgs;
use crate::config::Config;
use crate::spec::{SpecError, TaskSpec, ask_line, check_value};
use crate::state::TaskState;
use saheeli_protocol::template::Parameter;

use crate::ops::narrow;
use crate::ops::submit_spec;

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
        match TaskSpec::from_prompt_asked(cfg, prompt, &args.params(), &asked) {
            Ok(spec) => break spec,
            Err(SpecError::Missing(missing)) if interactive => {
                for p in &missing.missing {
                    asked.push((p.name.clone(), ask_parameter(p, &missing.dir)?));
                }
            }
            Err(e) => return Err(e.into_anyhow()),
        }
    };
    if let Some(why) = crate::backend::capabilities::refusal(cfg.file.backend, &spec) {
        anyhow::bail!("{}: {why}", prompt.display());
    }
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

/// Validates and queues a prompt; returns the new id.
pub(super) async fn submit_prompt(
    cfg: &Config,
    prompt: &Path,
    args: &PromptArgs,
) -> anyhow::Result<TaskId> {
    let spec = spec_for(cfg, prompt, args)?;
    Ok(submit_spec(cfg, prompt, spec, &args.submit()).await?)
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
