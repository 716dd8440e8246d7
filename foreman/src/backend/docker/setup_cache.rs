//! The set-up cache (issue 50): what a task's set-up wrote into its
//! workspace, kept as an image made through the Docker API and reused by
//! later tasks with the same key, which then skip the set-up.
//!
//! The key is sha256 of the task's image id, its set-up commands and the
//! digest of its key files (taken at submit). On a miss the workspace is
//! listed before the set-up and, after it succeeds, the entries it made
//! or changed (`setup_delta`) become a tar kept at
//! `/.saheeli/setup/workspace.tar` in `saheeli-setup:<scope>-<key>`: an
//! image of that one file, imported through the Docker API (the scope
//! names the state directory, so projects sharing a daemon keep apart),
//! and as `<state_dir>/setup-cache/<key>.tar`. On a hit that copy is
//! uploaded into the new servo's /workspace (without one, the tar is read
//! back from a container of the image, never started): nothing runs,
//! nothing is extracted on this host. Docker holds the entries (labels: the key, the
//! image they came from, their size); `<state_dir>/setup-cache/` holds
//! when each was last used and how often (one small file per key, written
//! whole), for the least-recently-used eviction past `setup_cache.max_bytes`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    CreateImageOptionsBuilder, ListImagesOptionsBuilder, RemoveImageOptionsBuilder,
    UploadToContainerOptionsBuilder,
};
use bytes::Bytes;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::setup_delta::{self, Capped, Listing};
use super::setup_stream::{TAR_PATH, host_copy, inner_tar, now_ms, pump, wrapped};
use super::{ROLE_LABEL, remove_container};

/// The repository of the cache's images.
pub(crate) const CACHE_REPO: &str = "saheeli-setup";
const KEY_LABEL: &str = "saheeli.setup.key";
const FROM_LABEL: &str = "saheeli.setup.from";
const BYTES_LABEL: &str = "saheeli.setup.bytes";
const SCOPE_LABEL: &str = "saheeli.setup.scope";
/// A cache image's command: its containers are made, never started.
const NEVER_RUN: &str = "/.saheeli/setup/never-run";

/// The cache key of a set-up: the task image's id, the commands in order
/// and the key files' digest, each length-prefixed.
pub(crate) fn cache_key(image_id: &str, commands: &[String], files_digest: Option<&str>) -> String {
    let mut h = Sha256::new();
    let mut part = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    part(b"saheeli-setup-1");
    part(image_id.as_bytes());
    part(&(commands.len() as u64).to_le_bytes());
    for c in commands {
        part(c.as_bytes());
    }
    part(files_digest.unwrap_or("").as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The image a key's set-up is kept in, for the state directory whose
/// `scope` it is.
pub(crate) fn tag_of(scope: &str, key: &str) -> String {
    format!("{CACHE_REPO}:{scope}-{key}")
}

/// One cached set-up, as `saheeli cache ls` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct CacheEntry {
    pub key: String,
    /// The task image it was made from.
    pub image: String,
    /// The tar's size (what its layer adds).
    pub bytes: u64,
    /// Unix seconds.
    pub created: i64,
    /// Unix ms; None: never reused.
    pub last_used_ms: Option<i64>,
    pub hits: u64,
}

/// When a key was last used and how often it was reused.
#[derive(Debug, Default, Deserialize, Serialize)]
pub(super) struct Usage {
    pub hits: u64,
    pub last_used_ms: i64,
}

/// The keys to remove so that what `entries` (key, bytes, last used) hold
/// comes within `cap`: least recently used first, never `keep`.
pub(crate) fn evictions(
    entries: &[(String, u64, i64)],
    cap: u64,
    keep: Option<&str>,
) -> Vec<String> {
    let mut total: u64 = entries.iter().map(|e| e.1).sum();
    let mut order: Vec<&(String, u64, i64)> = entries.iter().collect();
    order.sort_by(|a, b| a.2.cmp(&b.2).then_with(|| a.0.cmp(&b.0)));
    let mut out = Vec::new();
    for (key, bytes, _) in order {
        if total <= cap {
            break;
        }
        if Some(key.as_str()) == keep {
            continue;
        }
        total -= bytes;
        out.push(key.clone());
    }
    out
}

/// The cache of one state directory on one Docker host: its images
/// carry the directory's scope (in their tag and a label), so projects
/// sharing a daemon neither see nor evict each other's.
#[derive(Clone, Debug)]
pub(crate) struct SetupCache {
    pub(super) dir: PathBuf,
    scope: String,
    pub max_bytes: u64,
}

impl SetupCache {
    pub fn new(state_dir: &Path, max_bytes: u64) -> SetupCache {
        let dir = state_dir.join("setup-cache");
        let named = std::path::absolute(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
        let digest = Sha256::digest(named.as_os_str().as_encoded_bytes());
        SetupCache {
            dir,
            scope: digest[..6].iter().map(|b| format!("{b:02x}")).collect(),
            max_bytes,
        }
    }

    /// The image `key` is kept in.
    pub fn tag(&self, key: &str) -> String {
        tag_of(&self.scope, key)
    }

    /// Whether the cache keeps anything.
    pub fn enabled(&self) -> bool {
        self.max_bytes > 0
    }

    /// Whether `key` is cached.
    pub async fn has(&self, d: &Docker, key: &str) -> anyhow::Result<bool> {
        match d.inspect_image(&self.tag(key)).await {
            Ok(_) => Ok(true),
            Err(DockerError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(false),
            Err(e) => Err(e).context("looking for a cached set-up"),
        }
    }

    /// The workspace of `container` as it is now, or None past the cap.
    pub async fn listing(&self, d: &Docker, container: &str) -> anyhow::Result<Option<Listing>> {
        let cap = self.max_bytes.saturating_mul(4);
        let (rx, feed) = pump(d, container, "/workspace");
        let listing = tokio::task::spawn_blocking(move || {
            setup_delta::list(crate::collect::ChannelReader::new(rx), cap)
        });
        let ((), listed) = tokio::join!(feed, listing);
        let listed = listed.context("the workspace listing panicked")??;
        Ok(match listed {
            Capped::Within(l) => Some(l),
            Capped::Over => None,
        })
    }

    /// Keeps what the set-up changed in `container`'s workspace since
    /// `before` as `key`'s image, made from `from` (the task's image);
    /// None: larger than the cache may hold, not kept.
    pub async fn store(
        &self,
        d: &Docker,
        key: &str,
        from: &str,
        container: &str,
        before: Listing,
    ) -> anyhow::Result<Option<setup_delta::Delta>> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating `{}`", self.dir.display()))?;
        let part = self.dir.join(format!("{key}.tar.part"));
        let made = self.store_via(d, key, from, container, before, &part).await;
        // The tar stays on this host beside its image: a hit uploads it
        // from here, with no container of the image made to read it back.
        let kept =
            matches!(made, Ok(Some(_))) && std::fs::rename(&part, self.copy_path(key)).is_ok();
        if !kept {
            let _ = std::fs::remove_file(&part);
        }
        let made = made?;
        if made.is_some() {
            self.write_usage(
                key,
                &Usage {
                    hits: 0,
                    last_used_ms: now_ms(),
                },
            );
        }
        Ok(made)
    }

    async fn store_via(
        &self,
        d: &Docker,
        key: &str,
        from: &str,
        container: &str,
        before: Listing,
        part: &Path,
    ) -> anyhow::Result<Option<setup_delta::Delta>> {
        let t0 = std::time::Instant::now();
        let lap = |what: &str| {
            tracing::debug!(key, ms = t0.elapsed().as_millis() as u64, "store: {what}")
        };
        let (rx, feed) = pump(d, container, "/workspace");
        let (out, cap) = (part.to_path_buf(), self.max_bytes);
        let writing = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            let file = std::fs::File::create(&out)
                .with_context(|| format!("creating `{}`", out.display()))?;
            let mut w = std::io::BufWriter::new(file);
            let made =
                setup_delta::delta(crate::collect::ChannelReader::new(rx), &before, &mut w, cap)?;
            std::io::Write::flush(&mut w)?;
            Ok(made)
        });
        let ((), delta) = tokio::join!(feed, writing);
        let delta = delta.context("the set-up's delta panicked")??;
        lap("delta written");
        let Capped::Within(delta) = delta else {
            return Ok(None);
        };
        let size = std::fs::metadata(part)?.len();
        let labels = [
            (KEY_LABEL, key.to_string()),
            (FROM_LABEL, from.to_string()),
            (BYTES_LABEL, size.to_string()),
            (ROLE_LABEL, "setup-cache".to_string()),
            (SCOPE_LABEL, self.scope.clone()),
        ];
        let mut changes: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("LABEL {k}={}", serde_json::Value::from(v.as_str())))
            .collect();
        changes.push(format!("CMD [\"{NEVER_RUN}\"]"));
        // An image of its own (Docker's import): one layer holding the
        // tar, no container made and no file system walked to commit one.
        let opts = CreateImageOptionsBuilder::default()
            .from_src("-")
            .repo(CACHE_REPO)
            .tag(&format!("{}-{key}", self.scope))
            .message("saheeli set-up cache")
            .changes(changes)
            .build();
        // Two tasks of one key that missed together both import; the
        // image the later one untags is removed (nothing else names it).
        let previous = d
            .inspect_image(&self.tag(key))
            .await
            .ok()
            .and_then(|i| i.id);
        let body = bollard::body_try_stream(wrapped(part, size).await?);
        let mut progress = Box::pin(d.create_image(Some(opts), Some(body), None));
        while let Some(item) = progress.next().await {
            let info = item.context("importing the set-up cache's image")?;
            if let Some(e) = info.error_detail.and_then(|e| e.message) {
                anyhow::bail!("importing the set-up cache's image: {e}");
            }
        }
        lap("imported");
        if let Some(old) = previous
            && d.inspect_image(&old)
                .await
                .is_ok_and(|i| i.repo_tags.unwrap_or_default().is_empty())
        {
            let opts = RemoveImageOptionsBuilder::default().build();
            let _ = d.remove_image(&old, Some(opts), None).await;
        }
        Ok(Some(delta))
    }

    /// Streams `key`'s tar into `servo`'s /workspace (created, not
    /// started), and counts the hit.
    pub async fn restore(&self, d: &Docker, key: &str, servo: &str) -> anyhow::Result<()> {
        let opts = UploadToContainerOptionsBuilder::default()
            .path(saheeli_protocol::paths::WORKSPACE)
            .build();
        let copied = match host_copy(&self.copy_path(key)) {
            Some(tar) => {
                let up = d.upload_to_container(servo, Some(opts), bollard::body_try_stream(tar));
                up.await
                    .context("copying the cached set-up into /workspace")
            }
            None => self.restore_via_image(d, key, servo).await,
        };
        copied?;
        self.count_hit(key);
        Ok(())
    }

    /// The tar read back from a container of `key`'s image (made, never
    /// started) into `servo`'s /workspace: when this host has no copy.
    async fn restore_via_image(&self, d: &Docker, key: &str, servo: &str) -> anyhow::Result<()> {
        let t0 = std::time::Instant::now();
        let lap = |what: &str| {
            tracing::debug!(key, ms = t0.elapsed().as_millis() as u64, "restore: {what}")
        };
        let body = ContainerCreateBody {
            image: Some(self.tag(key)),
            network_disabled: Some(true),
            labels: Some(HashMap::from([(
                ROLE_LABEL.to_string(),
                "setup-cache".to_string(),
            )])),
            ..Default::default()
        };
        let made = d
            .create_container(None, body)
            .await
            .context("creating a container of the cached set-up")?;
        lap("container created");
        let restored = async {
            let (rx, feed) = pump(d, &made.id, TAR_PATH);
            let (tx, mut inner) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(8);
            let unwrap = tokio::task::spawn_blocking(move || inner_tar(rx, tx));
            let stream = futures_util::stream::poll_fn(move |cx| inner.poll_recv(cx));
            let opts = UploadToContainerOptionsBuilder::default()
                .path(saheeli_protocol::paths::WORKSPACE)
                .build();
            let upload = d.upload_to_container(servo, Some(opts), bollard::body_try_stream(stream));
            let ((), unwrapped, uploaded) = tokio::join!(feed, unwrap, upload);
            unwrapped.context("the cached set-up's reader panicked")??;
            uploaded.context("copying the cached set-up into /workspace")
        }
        .await;
        lap("streamed");
        let _ = remove_container(d, &made.id).await;
        lap("container removed");
        restored
    }

    /// Every cached set-up on this Docker host, oldest first.
    pub async fn list(&self, d: &Docker) -> anyhow::Result<Vec<CacheEntry>> {
        let scope = format!("{SCOPE_LABEL}={}", self.scope);
        let filters = HashMap::from([("label", vec![KEY_LABEL, scope.as_str()])]);
        let opts = ListImagesOptionsBuilder::default()
            .filters(&filters)
            .build();
        let images = d
            .list_images(Some(opts))
            .await
            .context("listing the set-up cache's images")?;
        let mut out: Vec<CacheEntry> = images
            .into_iter()
            .filter_map(|i| {
                let key = i.labels.get(KEY_LABEL)?.clone();
                if !i.repo_tags.contains(&self.tag(&key)) {
                    return None;
                }
                let usage = self.read_usage(&key);
                Some(CacheEntry {
                    image: i.labels.get(FROM_LABEL).cloned().unwrap_or_default(),
                    bytes: i
                        .labels
                        .get(BYTES_LABEL)
                        .and_then(|b| b.parse().ok())
                        .unwrap_or(0),
                    created: i.created,
                    last_used_ms: (usage.hits > 0).then_some(usage.last_used_ms),
                    hits: usage.hits,
                    key,
                })
            })
            .collect();
        out.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.key.cmp(&b.key)));
        Ok(out)
    }

    /// Removes `key`'s image and usage; false: it was not there. An image a
    /// container still uses (a restore under way) stays.
    pub async fn remove(&self, d: &Docker, key: &str) -> anyhow::Result<bool> {
        let opts = RemoveImageOptionsBuilder::default().noprune(false).build();
        let gone = match d.remove_image(&self.tag(key), Some(opts), None).await {
            Ok(_) => true,
            Err(DockerError::DockerResponseServerError {
                status_code: 404, ..
            }) => false,
            Err(e) => return Err(e).with_context(|| format!("removing cached set-up `{key}`")),
        };
        let _ = std::fs::remove_file(self.usage_path(key));
        let _ = std::fs::remove_file(self.copy_path(key));
        Ok(gone)
    }

    /// Removes the least recently used set-ups until the rest fit the
    /// cap (never `keep`); the keys removed.
    pub async fn evict(&self, d: &Docker, keep: Option<&str>) -> anyhow::Result<Vec<String>> {
        let entries: Vec<(String, u64, i64)> = self
            .list(d)
            .await?
            .into_iter()
            .map(|e| {
                let used = e.last_used_ms.unwrap_or(e.created * 1000);
                (e.key, e.bytes, used.max(e.created * 1000))
            })
            .collect();
        let mut removed = Vec::new();
        for key in evictions(&entries, self.max_bytes, keep) {
            match self.remove(d, &key).await {
                Ok(_) => removed.push(key),
                Err(e) => {
                    tracing::warn!(key, error = %format!("{e:#}"), "a cached set-up was not evicted")
                }
            }
        }
        Ok(removed)
    }

    /// This host's copy of `key`'s tar.
    pub(super) fn copy_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.tar"))
    }

    fn usage_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    pub(super) fn read_usage(&self, key: &str) -> Usage {
        std::fs::read(self.usage_path(key))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Written whole (a temporary file renamed), so a reader never sees
    /// half of it; two foremen reusing one key at once may count one hit.
    pub(super) fn write_usage(&self, key: &str, usage: &Usage) {
        let path = self.usage_path(key);
        let tmp = self.dir.join(format!("{key}.json.{}", std::process::id()));
        let written = std::fs::create_dir_all(&self.dir)
            .and_then(|()| std::fs::write(&tmp, serde_json::to_vec(usage).unwrap_or_default()))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            tracing::warn!(key, error = %e, "the set-up cache's usage was not recorded");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_follows_the_image_the_commands_and_the_files() {
        let cmds = vec!["pip install -r requirements.txt".to_string()];
        let k = cache_key("sha256:aa", &cmds, Some("d1"));
        assert_eq!(k.len(), 64);
        assert_eq!(k, cache_key("sha256:aa", &cmds, Some("d1")));
        assert_ne!(k, cache_key("sha256:bb", &cmds, Some("d1")));
        assert_ne!(k, cache_key("sha256:aa", &cmds, Some("d2")));
        assert_ne!(k, cache_key("sha256:aa", &cmds, None));
        assert_ne!(
            k,
            cache_key(
                "sha256:aa",
                &["pip install -r".into(), "requirements.txt".into()],
                Some("d1")
            )
        );
        assert_ne!(
            cache_key("i", &["ab".into(), "c".into()], None),
            cache_key("i", &["a".into(), "bc".into()], None)
        );
    }

    #[test]
    fn eviction_removes_the_least_recently_used_until_within_the_cap() {
        let e = |k: &str, b: u64, t: i64| (k.to_string(), b, t);
        let entries = [e("a", 40, 3), e("b", 40, 1), e("c", 40, 2)];
        assert_eq!(evictions(&entries, 120, None), Vec::<String>::new());
        assert_eq!(evictions(&entries, 100, None), ["b"]);
        assert_eq!(evictions(&entries, 50, None), ["b", "c"]);
        // The entry just made stays, even when it is the oldest.
        assert_eq!(evictions(&entries, 50, Some("b")), ["c", "a"]);
        assert_eq!(evictions(&entries, 0, None), ["b", "c", "a"]);
    }
}
