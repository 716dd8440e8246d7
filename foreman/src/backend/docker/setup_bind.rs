//! A cached set-up's tar bound into a servo's container for the servo to
//! unpack (issue 50), instead of Docker unpacking it through its archive
//! API. The host's copy is hard-linked as `bound-<name>` beside it (the
//! name is the container's: a task's id or a warm slot's), never through
//! a link, and that one file is bound read-only at
//! [`saheeli_protocol::setup::TAR_PATH`]: an eviction between the create
//! and the start takes nothing the container needs. The link goes once
//! the container started (its mount holds the file) or its launch failed;
//! one a dead foreman left goes after an hour.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

use super::setup_cache::SetupCache;
use super::setup_stream::now_ms;

/// A link older than this has no container that still needs it.
const STALE: Duration = Duration::from_secs(3600);

impl SetupCache {
    fn bound_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("bound-{name}"))
    }

    /// `key`'s host copy linked for the container `name`: the file to
    /// bind, or None (no copy on this host, or it is not a plain file).
    pub fn bind_copy(&self, key: &str, name: &str) -> Option<PathBuf> {
        let copy = self.copy_path(key);
        let meta = std::fs::symlink_metadata(&copy).ok()?;
        if !meta.is_file() {
            return None;
        }
        let link = self.bound_path(name);
        let _ = std::fs::remove_file(&link);
        // linkat without AT_SYMLINK_FOLLOW: a link put in the copy's place
        // since would be linked as a link, and refused here.
        std::fs::hard_link(&copy, &link).ok()?;
        match std::fs::symlink_metadata(&link) {
            Ok(m) if m.is_file() && m.ino() == meta.ino() && m.dev() == meta.dev() => Some(link),
            _ => {
                let _ = std::fs::remove_file(&link);
                None
            }
        }
    }

    /// The container `name` started (or never will): its link goes.
    pub fn unbind(&self, name: &str) {
        match std::fs::remove_file(self.bound_path(name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(name, error = %e, "a cached set-up's link was not removed");
            }
            _ => {}
        }
    }

    /// Removes links older than an hour: a launch that failed, a foreman
    /// that died between a create and its start.
    pub fn sweep_bound(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let stale = e.file_name().to_string_lossy().starts_with("bound-")
                && e.metadata()
                    .ok()
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > STALE);
            if stale {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    /// Counts a reuse of `key`.
    pub fn count_hit(&self, key: &str) {
        let mut usage = self.read_usage(key);
        usage.hits += 1;
        usage.last_used_ms = now_ms();
        self.write_usage(key, &usage);
    }
}
