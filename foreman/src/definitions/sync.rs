//! Following the definitions repository: fetch its ref into the
//! foreman's mirror (`git::Mirror`, hardened git), and when the commit
//! is new, read its files from the objects and judge them as a whole
//! ([`Set::judge`]). A good commit becomes the set in use; a bad one is
//! recorded with why, a `definitions.rejected` notice goes to each
//! config.yaml `notify:` webhook that asks for it, and the last good set
//! keeps serving. One sync at a time (the poll and `POST
//! /api/definitions/refresh` share a lock); a commit already judged is
//! not judged again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::set::{CAPS, CONFIG, Changes, EVALS, Set, TEMPLATES};
use crate::config::{Config, DefinitionsConfig};
use crate::git::{Location, Mirror};
use crate::store::Store;

/// The longest reason a rejection keeps (bytes).
const MAX_REASON: usize = 4096;

/// Where the definitions come from, checked.
#[derive(Clone, Debug)]
pub(crate) struct Source {
    /// The repository as git is given it (an absolute path).
    pub repo: String,
    pub reference: String,
    pub poll: Duration,
}

impl Source {
    /// `definitions:` placed: a repository on this host (relative to
    /// config.yaml's directory); a remote one is refused, saying why.
    pub fn of(cfg: &Config, d: &DefinitionsConfig) -> anyhow::Result<Source> {
        let loc = crate::git::locate(&d.repo, &cfg.base_dir)
            .map_err(|e| anyhow::anyhow!("`definitions.repo` {e}"))?;
        if let Location::Remote { .. } = loc {
            bail!(
                "`definitions.repo` `{}` is a remote repository: the foreman reads definitions \
                 only from a repository on this host for now; clone it here and name the clone \
                 (a path or `file://…`), and pull into it to update",
                d.repo
            );
        }
        let repo = crate::git::fetch_url(&loc, &d.repo).context("`definitions.repo`")?;
        Ok(Source {
            repo,
            reference: d.reference.clone(),
            poll: d.poll,
        })
    }
}

/// What one sync found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub(crate) enum Synced {
    /// The commit in use (or the one already rejected) is still the ref's.
    Unchanged {
        commit: String,
    },
    Applied {
        commit: String,
        changes: Changes,
    },
    Rejected {
        commit: String,
        reason: String,
    },
}

/// The one syncer of a serving foreman.
pub(crate) struct Syncer {
    cfg: Config,
    source: Source,
    store: Arc<Mutex<Store>>,
    lock: tokio::sync::Mutex<()>,
}

impl Syncer {
    pub fn new(cfg: Config, source: Source, store: Store) -> Syncer {
        Syncer {
            cfg,
            source,
            store: Arc::new(Mutex::new(store)),
            lock: tokio::sync::Mutex::new(()),
        }
    }

    pub fn source(&self) -> &Source {
        &self.source
    }

    /// One look at the repository (off the async threads).
    pub async fn sync(&self) -> anyhow::Result<Synced> {
        let _one = self.lock.lock().await;
        let (cfg, source, store) = (self.cfg.clone(), self.source.clone(), self.store.clone());
        tokio::task::spawn_blocking(move || {
            let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
            sync_now(&cfg, &source, &mut s)
        })
        .await
        .context("the definitions thread failed")?
    }

    /// Syncs every `poll` until `stop`; a failure is logged and tried
    /// again at the next poll (the set in use keeps serving).
    pub async fn watch(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.source.poll) => {}
                _ = stop.cancelled() => return,
            }
            log(&self.sync().await);
        }
    }
}

/// Logs how a sync went.
pub(crate) fn log(r: &anyhow::Result<Synced>) {
    match r {
        Ok(Synced::Unchanged { .. }) => {}
        Ok(Synced::Applied { commit, changes }) => tracing::info!(
            commit = %commit,
            added = changes.added.len(),
            removed = changes.removed.len(),
            changed = changes.changed.len(),
            "definitions applied"
        ),
        Ok(Synced::Rejected { commit, reason }) => tracing::warn!(
            commit = %commit,
            reason = %reason,
            "definitions rejected; the last good set keeps serving"
        ),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "definitions not read; the last good set keeps serving")
        }
    }
}

/// The sync itself: fetch, and judge a commit not judged yet.
fn sync_now(cfg: &Config, source: &Source, store: &mut Store) -> anyhow::Result<Synced> {
    let mirror = Mirror::of(&cfg.state_dir().join("definitions"), &source.repo);
    let commit = mirror
        .fetch(&source.reference, None, &crate::git::Creds::default())
        .with_context(|| format!("reading the definitions repository `{}`", source.repo))?
        .commit;
    let current = store.definitions_current()?;
    let in_use = current
        .as_ref()
        .is_some_and(|c| c.commit == commit && c.repo == source.repo);
    let rejected = store.definitions_last_rejected()?.is_some_and(|r| {
        r.commit == commit && r.repo == source.repo && current.as_ref().is_none_or(|c| r.id > c.id)
    });
    if in_use || rejected {
        return Ok(Synced::Unchanged { commit });
    }
    let raw = {
        let _lock = mirror.lock()?;
        mirror.files(&commit, &[TEMPLATES, EVALS, CONFIG], CAPS)
    };
    let judged = raw
        .map_err(|e| format!("{e:#}"))
        .and_then(|raw| Set::judge(cfg, raw));
    match judged {
        Ok(set) => {
            let before = current
                .and_then(|c| c.files)
                .and_then(|f| Set::stored(&f).ok());
            let changes = set.changes(before.as_ref());
            let json = serde_json::to_string(&changes).expect("changes serialize");
            store.definitions_apply(&source.repo, &commit, &json, &set.files_json())?;
            Ok(Synced::Applied { commit, changes })
        }
        Err(reason) => {
            // Kept whole up to a bound: it goes to status, logs and webhooks.
            let mut reason = format!("commit {}: {reason}", short(&commit));
            if reason.len() > MAX_REASON {
                let mut end = MAX_REASON;
                while !reason.is_char_boundary(end) {
                    end -= 1;
                }
                reason.truncate(end);
                reason.push('…');
            }
            let hooks = hooks(cfg);
            let facts = serde_json::json!({
                "repo": source.repo,
                "commit": commit,
                "reason": reason,
                "current": store.definitions_current()?.map(|c| c.commit),
            });
            store.definitions_reject(&source.repo, &commit, &reason, &hooks, &facts.to_string())?;
            Ok(Synced::Rejected { commit, reason })
        }
    }
}

/// config.yaml's webhooks that ask for `definitions.rejected` (or `all`):
/// URL and format. (A prompt's own `notify:` is about its task only.)
fn hooks(cfg: &Config) -> Vec<(String, String)> {
    cfg.file
        .notify
        .iter()
        .filter(|n| n.email.is_none() && !n.url.is_empty())
        .filter(|n| {
            n.events
                .iter()
                .any(|e| e == "all" || e == "definitions.rejected")
        })
        .map(|n| {
            let format = serde_json::to_value(n.format)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_else(|| "json".into());
            (n.url.clone(), format)
        })
        .collect()
}

/// A commit id's first 12 characters, for messages.
pub(crate) fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}
