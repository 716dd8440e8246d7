//! Git on the host (issue 52): a task that starts from a repository at a
//! ref and delivers its changes as a branch. `run`: every git command, run
//! safely; `url`: where a repository is and whether it may be reached;
//! `mirror`: the foreman's bare mirror per repository, fetching and
//! checking out; `trees`: the checked-out commits it keeps; `deliver`: the
//! commit from `changes.patch` and its push; `objects`: a commit's files
//! read from the objects (the definitions repository's).

mod deliver;
mod mirror;
mod objects;
mod run;
mod trees;
mod url;

pub(crate) use deliver::{Commit, Creds, commit_patch, push, valid_branch};
pub(crate) use mirror::{Mirror, fetch_url};
pub(crate) use objects::Caps;
pub(crate) use url::{Location, allowed as remote_allowed, locate};
