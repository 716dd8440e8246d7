//! `workspace: { git, ref, depth }` and `deliver:` checked at submit
//! (issue 52): the repository placed (a local one must exist; a remote
//! one's host must be in `egress: setup`), the ref and the branch
//! template held to what git takes. The fetch itself is the submit's.

use std::path::{Path, PathBuf};

use anyhow::bail;
use saheeli_protocol::TaskId;
use saheeli_protocol::front_matter::{Deliver, GitSource, Workspace};

use super::prompt::workspace_dir;
use crate::git::{Location, fetch_url, locate, remote_allowed, valid_branch};
use crate::task::{DeliverPlan, EgressPlan, GitWorkspace, branch_name};

/// What `workspace:` and `deliver:` make: a directory, or a repository;
/// and the delivery.
pub(super) type Sources = (Option<PathBuf>, Option<GitWorkspace>, Option<DeliverPlan>);

/// Checks `workspace:` and `deliver:` of the prompt `path` (in `dir`).
pub(super) fn sources(
    path: &Path,
    dir: &Path,
    ws: Option<Workspace>,
    deliver: Option<Deliver>,
    egress: &EgressPlan,
) -> anyhow::Result<Sources> {
    let p = path.display();
    let (dir_ws, git) = match ws {
        None => (None, None),
        Some(Workspace::Path(ws)) => (Some(workspace_dir(path, dir, ws)?), None),
        Some(Workspace::Git(g)) => (None, Some(repository(path, dir, g, egress)?)),
    };
    let deliver = match deliver {
        None => None,
        Some(_) if git.is_none() => bail!(
            "{p}: `deliver` needs a repository to deliver to: set `workspace: {{ git: URL_OR_PATH, ref: main }}`"
        ),
        Some(d) => {
            let sample = branch_name(&d.branch, TaskId::new(), "a title");
            if !valid_branch(&sample) {
                bail!(
                    "{p}: `deliver.branch` `{}` is not a branch name git takes (no spaces, `..`, `~^:?*[\\`, leading `-` or `.`)",
                    d.branch
                );
            }
            if d.on.is_empty() {
                bail!("{p}: `deliver.on` is empty: list `complete`, `incomplete` or both");
            }
            Some(DeliverPlan {
                branch: d.branch,
                push: d.push,
                on: d.on,
            })
        }
    };
    Ok((dir_ws, git, deliver))
}

fn repository(
    path: &Path,
    dir: &Path,
    g: GitSource,
    egress: &EgressPlan,
) -> anyhow::Result<GitWorkspace> {
    let p = path.display();
    let loc = match locate(&g.git, dir) {
        Ok(l) => l,
        Err(why) => bail!("{p}: `workspace.git` {why}"),
    };
    if let Location::Remote { host, port } = &loc
        && let Err(why) = remote_allowed(&g.git, host, *port, &egress.setup)
    {
        bail!("{p}: `workspace.git`: {why}");
    }
    let fetch = match fetch_url(&loc, &g.git) {
        Ok(f) => f,
        Err(e) => bail!("{p}: `workspace.git`: {e:#}"),
    };
    let reference = g.reference.unwrap_or_else(|| "HEAD".into());
    if reference.is_empty()
        || reference.starts_with('-')
        || reference
            .bytes()
            .any(|b| b <= b' ' || b == 0x7f || b == b':')
    {
        bail!("{p}: `workspace.ref` `{reference}` is not a branch, tag or commit");
    }
    if g.depth == Some(0) {
        bail!(
            "{p}: `workspace.depth` is 0: give at least 1, or leave it out for the whole history"
        );
    }
    Ok(GitWorkspace {
        url: g.git,
        fetch,
        reference,
        depth: g.depth,
        start: None,
    })
}
