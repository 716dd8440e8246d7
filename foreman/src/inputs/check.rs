//! Which directories may be a workspace at all.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// Refuses a `workspace` that is the whole host, a home directory (or holds
/// one), or, unless `allow_outside`, outside the prompt's directory tree.
pub(crate) fn check_workspace_path(
    prompt: &Path,
    workspace: &Path,
    allow_outside: bool,
) -> anyhow::Result<()> {
    let bounds = Bounds::of_prompt(prompt, allow_outside)?;
    check_within(&bounds, workspace)
}

/// Where a directory to pack as a workspace may be. Every pack checks it
/// first (`inputs::pack` takes one), so no caller can copy a directory
/// nobody checked: a submit, a spawn, a retry that copies the workspace
/// again, an eval and its resume (case N19: a child's host path copied in
/// by `task retry`).
#[derive(Clone, Debug)]
pub(crate) struct Bounds {
    /// The file that named it, for the error.
    pub named_by: PathBuf,
    /// The directory it must stay under (absolute); None: anywhere but
    /// the whole host and homes (`--allow-workspace-outside`).
    pub under: Option<PathBuf>,
}

impl Bounds {
    /// The bounds of a workspace named by `prompt`: its directory, unless
    /// `allow_outside`.
    pub fn of_prompt(prompt: &Path, allow_outside: bool) -> anyhow::Result<Bounds> {
        let under = if allow_outside {
            None
        } else {
            let parent = prompt
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let dir = std::path::absolute(parent)
                .and_then(|d| d.canonicalize())
                .with_context(|| format!("resolving the directory of `{}`", prompt.display()))?;
            Some(dir)
        };
        Ok(Bounds {
            named_by: prompt.to_path_buf(),
            under,
        })
    }
}

/// The bounds a retry copies task's workspace again within: where it was
/// checked when it was first copied (`workspace_under`), else its
/// prompt's directory.
pub(crate) fn bounds_of(spec: &crate::spec::TaskSpec) -> anyhow::Result<Bounds> {
    let named_by = PathBuf::from(&spec.prompt_path);
    match &spec.workspace_under {
        Some(dir) if dir == Path::new("/") => Ok(Bounds {
            named_by,
            under: None,
        }),
        Some(dir) => Ok(Bounds {
            named_by,
            under: Some(dir.clone()),
        }),
        None => Bounds::of_prompt(&named_by, false),
    }
}

/// Refuses a `workspace` that is the whole host, a home directory (or holds
/// one), or outside `bounds.under`.
pub(crate) fn check_within(bounds: &Bounds, workspace: &Path) -> anyhow::Result<()> {
    let prompt = &bounds.named_by;
    let ws = workspace
        .canonicalize()
        .with_context(|| format!("{}: resolving `workspace`", prompt.display()))?;
    if ws == Path::new("/") {
        bail!(
            "{}: `workspace` is `/`, the whole host: point it at the project directory the agent should work on",
            prompt.display()
        );
    }
    if let Some(home) = homes().into_iter().find(|h| h.starts_with(&ws)) {
        bail!(
            "{}: `workspace` `{}` is {} home directory `{}`: homes hold keys and private files; \
             point it at a project directory",
            prompt.display(),
            ws.display(),
            if home == ws { "a" } else { "above the" },
            home.display()
        );
    }
    if let Some(dir) = &bounds.under
        && !ws.starts_with(dir)
    {
        bail!(
            "{}: `workspace` `{}` is outside the prompt's directory `{}`: keep the prompt beside \
             or above its workspace, or pass `--allow-workspace-outside` if you mean it",
            prompt.display(),
            ws.display(),
            dir.display()
        );
    }
    Ok(())
}

/// `$HOME` and the home directories of root and of people (uid ≥ 1000).
fn homes() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::env::var_os("HOME")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    if let Ok(passwd) = std::fs::read_to_string("/etc/passwd") {
        for line in passwd.lines() {
            let f: Vec<&str> = line.split(':').collect();
            if let (Some(uid), Some(home)) =
                (f.get(2).and_then(|u| u.parse::<u32>().ok()), f.get(5))
                && (uid == 0 || (1000..65534).contains(&uid))
            {
                out.push(PathBuf::from(home));
            }
        }
    }
    out.into_iter()
        .filter_map(|h| h.canonicalize().ok())
        .filter(|h| h != Path::new("/"))
        .collect()
}
