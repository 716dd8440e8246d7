//! Definitions from Git (issue 52): templates, eval suites, agent types
//! and pools read from a repository while `saheeli serve --definitions
//! REPO[@REF]` (config `definitions:`) runs, each new commit judged as a
//! whole before it applies.
//!
//! - `set`: a commit's files into a [`Set`], checked by the parsers the
//!   same things have as files; what changed from the set before.
//! - `sync`: fetching the ref, judging a new commit, applying it or
//!   recording why not (with the `definitions.rejected` notices).
//!
//! The store holds every judged commit; the newest applied one is the set
//! in use for every process of the database: a submit by template name
//! (`task submit --template`, the API's `template`) reads its template
//! from it and records its commit on the task; its agent types and pools
//! replace config.yaml's for new submits and claims. A task already
//! queued has its spec resolved and is never touched by a later commit.

mod set;
mod sync;

use serde::Serialize;

use crate::store::{DefinitionsRow, Store};

pub(crate) use set::{Changes, Set, overlay, template_path};
pub(crate) use sync::{Source, Syncer, log, short};

/// The set in use, with its row (None: no commit applied yet).
pub(crate) fn current(store: &Store) -> anyhow::Result<Option<(DefinitionsRow, Set)>> {
    let Some(row) = store.definitions_current()? else {
        return Ok(None);
    };
    let set = Set::stored(row.files.as_deref().unwrap_or("{}"))?;
    Ok(Some((row, set)))
}

/// The pools of the set in use (None: no set applied), for `/metrics`.
pub(crate) fn pools_in_use(store: &Store) -> anyhow::Result<Option<Vec<crate::config::PoolCap>>> {
    Ok(current(store)?.map(|(_, set)| set.pools))
}

/// A template of the set in use, resolved for a submit.
#[derive(Clone, Debug)]
pub(crate) struct Template {
    pub name: String,
    pub text: String,
    pub commit: String,
    pub set: Set,
}

/// The template `name` of the set in use; Err says which commit lacks
/// it (and which templates it has), or that no set is applied.
pub(crate) fn template(store: &Store, name: &str) -> anyhow::Result<Template> {
    let Some((row, set)) = current(store)? else {
        anyhow::bail!(
            "template `{name}`: no definitions are applied to this database; run \
             `saheeli serve --definitions REPO` (or set `definitions:` in config.yaml), or \
             submit a prompt file with `--prompt`"
        );
    };
    let Some(text) = set.templates.get(name) else {
        let known: Vec<&str> = set.templates.keys().map(String::as_str).collect();
        anyhow::bail!(
            "template `{name}` is not in the definitions at commit {} ({}); `saheeli \
             definitions status` shows what changed",
            short(&row.commit),
            if known.is_empty() {
                "it has no templates".to_string()
            } else {
                format!("templates: {}", known.join(", "))
            }
        );
    };
    Ok(Template {
        name: name.to_string(),
        text: text.clone(),
        commit: row.commit.clone(),
        set,
    })
}

/// The path of suite `name` of the set in use, run by `saheeli eval NAME
/// --from-definitions`: the set's files (the regular files read from Git,
/// nothing else) written once per commit below
/// `state_dir/definitions/trees/COMMIT/`, so a suite's prompts and
/// checks are beside it and the run's suite path names the commit.
pub(crate) fn suite_path(
    cfg: &crate::config::Config,
    store: &Store,
    name: &str,
) -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context;
    use std::os::unix::fs::DirBuilderExt;
    let Some((row, set)) = current(store)? else {
        anyhow::bail!(
            "suite `{name}`: no definitions are applied to this database; run `saheeli serve \
             --definitions REPO` first"
        );
    };
    let Some(rel) = set.evals.get(name) else {
        let known: Vec<&str> = set.evals.keys().map(String::as_str).collect();
        anyhow::bail!(
            "suite `{name}` is not in the definitions at commit {} ({})",
            short(&row.commit),
            if known.is_empty() {
                "it has no suites".to_string()
            } else {
                format!("suites: {}", known.join(", "))
            }
        );
    };
    let trees = cfg.state_dir().join("definitions").join("trees");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&trees)
        .with_context(|| format!("creating `{}`", trees.display()))?;
    let dir = trees.join(&row.commit);
    if !dir.is_dir() {
        let tmp = trees.join(format!(".new-{}", uuid::Uuid::new_v4().simple()));
        let wrote = (|| -> anyhow::Result<()> {
            for (path, text) in &set.files {
                let to = tmp.join(path);
                if let Some(d) = to.parent() {
                    std::fs::create_dir_all(d)?;
                }
                std::fs::write(&to, text)?;
            }
            std::fs::rename(&tmp, &dir)?;
            Ok(())
        })();
        if let Err(e) = wrote {
            let _ = std::fs::remove_dir_all(&tmp);
            // Another process may have written it first.
            if !dir.is_dir() {
                return Err(e.context(format!("writing the definitions to `{}`", dir.display())));
            }
        }
    }
    Ok(dir.join(rel))
}

/// What `saheeli definitions status` and the API show.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Status {
    /// The repository of the set in use.
    pub repo: Option<String>,
    /// The commit in use (None: none applied yet).
    pub commit: Option<String>,
    pub applied_at: Option<String>,
    /// What that commit changed from the set before it.
    pub changes: Option<Changes>,
    pub templates: Vec<String>,
    pub evals: Vec<String>,
    pub agent_types: Vec<String>,
    pub pools: Vec<String>,
    /// The newest commit refused, and why.
    pub rejected: Option<Rejected>,
}

/// A refused commit.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Rejected {
    pub commit: String,
    pub reason: String,
    pub at: String,
    /// It is newer than the commit in use: the repository's ref is still
    /// on it, and the set in use is the last good one.
    pub pending: bool,
}

fn rfc3339(ms: i64) -> String {
    saheeli_protocol::rfc3339(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64),
    )
}

/// The status, from the store.
pub(crate) fn status(store: &Store) -> anyhow::Result<Status> {
    let mut st = Status::default();
    let cur = current(store)?;
    if let Some((row, set)) = &cur {
        st.repo = Some(row.repo.clone());
        st.commit = Some(row.commit.clone());
        st.applied_at = Some(rfc3339(row.at));
        st.changes = row
            .changes
            .as_deref()
            .and_then(|c| serde_json::from_str(c).ok());
        st.templates = set.templates.keys().cloned().collect();
        st.evals = set.evals.keys().cloned().collect();
        st.agent_types = set.agent_types.keys().cloned().collect();
        st.pools = set
            .pools
            .iter()
            .map(|p| format!("{} (max {})", p.name(), p.max))
            .collect();
    }
    if let Some(r) = store.definitions_last_rejected()? {
        st.rejected = Some(Rejected {
            pending: cur.as_ref().is_none_or(|(c, _)| r.id > c.id),
            commit: r.commit,
            reason: r.reason.unwrap_or_default(),
            at: rfc3339(r.at),
        });
    }
    Ok(st)
}

impl Status {
    /// The text `saheeli definitions status` prints.
    pub fn text(&self) -> String {
        let mut out = String::new();
        match &self.commit {
            Some(c) => {
                out += &format!(
                    "commit    {c}\nrepo      {}\napplied   {}\n",
                    self.repo.as_deref().unwrap_or("?"),
                    self.applied_at.as_deref().unwrap_or("?")
                );
                if let Some(ch) = &self.changes {
                    for (what, names) in [
                        ("added", &ch.added),
                        ("removed", &ch.removed),
                        ("changed", &ch.changed),
                    ] {
                        if !names.is_empty() {
                            out += &format!("{what:<9} {}\n", names.join(", "));
                        }
                    }
                }
                let list = |v: &[String]| {
                    if v.is_empty() {
                        "-".to_string()
                    } else {
                        v.join(", ")
                    }
                };
                out += &format!(
                    "templates {}\nevals     {}\nagent_types {}\npools     {}\n",
                    list(&self.templates),
                    list(&self.evals),
                    list(&self.agent_types),
                    list(&self.pools)
                );
            }
            None => out += "no definitions applied\n",
        }
        if let Some(r) = &self.rejected {
            out += &format!(
                "rejected  {} at {}{}\n          {}\n",
                r.commit,
                r.at,
                if r.pending {
                    " (the ref is on it; the set above keeps serving)"
                } else {
                    " (since replaced)"
                },
                r.reason
            );
        }
        out
    }
}
