//! The set-up phase of a launch (issue 50): reuse a cached set-up (and run
//! `maintenance:`), or run `setup:` and keep what it wrote. The servo's
//! container is made already (its workspace filled) and not started; the
//! set-up runs in its own container (`setup.rs`), removed before this
//! returns, so the set-up's secrets and processes are gone before the
//! agent starts.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use bollard::Docker;
use saheeli_protocol::TaskId;
use tracing::{info, warn};

use super::setup_cache::{SetupCache, cache_key};
use super::{ServoImage, WorkspaceMount, run_setup};
use crate::task::{SetupRan, TaskSpec};

/// What the phase needs besides Docker.
pub(crate) struct SetupPhase<'a> {
    pub id: TaskId,
    /// The task's image (the key names its id; a cache image is made
    /// from it).
    pub image: &'a str,
    /// What the set-up's container is made of (the servo's container's
    /// image and servo).
    pub run: &'a ServoImage,
    /// The task's gateway directory: the set-up's egress proxy.
    pub gateway_dir: Option<&'a Path>,
    /// The servo's container, created, not started.
    pub servo: &'a str,
    pub spec: &'a TaskSpec,
    pub workspace: &'a WorkspaceMount,
    /// `setup_env:`'s values, from `.env`.
    pub secrets: &'a BTreeMap<String, String>,
}

/// The cache key of `spec`'s set-up in the task's `image` (None: the
/// cache is off).
pub(crate) async fn setup_key(
    d: &Docker,
    cache: &SetupCache,
    image: &str,
    spec: &TaskSpec,
) -> anyhow::Result<Option<String>> {
    if !cache.enabled() {
        return Ok(None);
    }
    let image_id = d
        .inspect_image(image)
        .await
        .with_context(|| format!("inspecting image `{image}`"))?
        .id
        .unwrap_or_else(|| image.to_string());
    let digest = spec.setup_plan.files_digest.as_deref();
    Ok(Some(cache_key(&image_id, &spec.setup, digest)))
}

/// Runs the phase: Ok(Err(why)) when a set-up or maintenance command failed.
pub(crate) async fn set_up(
    d: &Docker,
    cache: &SetupCache,
    p: SetupPhase<'_>,
) -> anyhow::Result<Result<SetupRan, String>> {
    let t0 = Instant::now();
    let plan = &p.spec.setup_plan;
    let key = setup_key(d, cache, p.image, p.spec).await?;
    let mut ran = SetupRan {
        key: key.clone(),
        ..SetupRan::default()
    };
    let lap = |what: &str| tracing::debug!(task_id = %p.id, ms = t0.elapsed().as_secs_f64() * 1000.0, "set-up: {what}");
    lap("keyed");
    let mut restore_failed = false;
    if let Some(k) = &key
        && cache.has(d, k).await?
    {
        lap("found in the cache");
        match cache.restore(d, k, p.servo).await {
            Ok(()) => {
                lap("restored");
                ran.hit = true;
                info!(task_id = %p.id, key = %k, "set-up reused from the cache");
                if !plan.maintenance.is_empty() {
                    ran.maintenance = true;
                    let failed = run_setup(
                        d,
                        p.id,
                        p.run,
                        p.spec,
                        p.workspace,
                        p.gateway_dir,
                        &plan.maintenance,
                        p.secrets,
                    )
                    .await?;
                    if let Some(why) = failed {
                        return Ok(Err(format!("maintenance: {why}")));
                    }
                }
                ran.ms = t0.elapsed().as_millis() as u64;
                return Ok(Ok(ran));
            }
            // The set-up runs instead (what the restore wrote, it writes
            // again); the workspace may hold part of the cached set-up, so
            // what it changes is not kept over the entry.
            Err(e) => {
                warn!(task_id = %p.id, key = %k, error = %format!("{e:#}"), "the cached set-up could not be restored; running the set-up");
                restore_failed = true;
                ran.not_stored = Some(format!("the cached set-up could not be restored: {e:#}"));
            }
        }
    }
    let before = match &key {
        Some(_) if !restore_failed => cache.listing(d, p.servo).await?,
        _ => None,
    };
    if key.is_some() && before.is_none() && !restore_failed {
        ran.not_stored = Some("the workspace is larger than the cache may read".into());
    }
    let failed = run_setup(
        d,
        p.id,
        p.run,
        p.spec,
        p.workspace,
        p.gateway_dir,
        &p.spec.setup,
        p.secrets,
    )
    .await?;
    if let Some(why) = failed {
        return Ok(Err(why));
    }
    ran.ms = t0.elapsed().as_millis() as u64;
    if let (Some(k), Some(before)) = (&key, before) {
        // The cache is a saving, never a cause to fail the task.
        match cache.store(d, k, p.image, p.servo, before).await {
            Ok(Some(delta)) => {
                info!(task_id = %p.id, key = %k, bytes = delta.bytes, entries = delta.entries, "set-up cached");
                ran.stored_bytes = Some(delta.bytes);
                if let Err(e) = cache.evict(d, Some(k)).await {
                    warn!(task_id = %p.id, error = %format!("{e:#}"), "the set-up cache was not evicted");
                }
            }
            Ok(None) => {
                ran.not_stored = Some(format!(
                    "what the set-up wrote is larger than `setup_cache.max_bytes` ({} bytes)",
                    cache.max_bytes
                ))
            }
            Err(e) => {
                warn!(task_id = %p.id, key = %k, error = %format!("{e:#}"), "the set-up was not cached");
                ran.not_stored = Some(format!("{e:#}"));
            }
        }
    }
    Ok(Ok(ran))
}

/// `text` with every secret's value (4 bytes or longer) replaced by
/// `[REDACTED:NAME]`.
pub(crate) fn masked(text: &str, secrets: &BTreeMap<String, String>) -> String {
    let mut out = text.to_string();
    let mut by_length: Vec<(&String, &String)> =
        secrets.iter().filter(|(_, v)| v.len() >= 4).collect();
    by_length.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
    for (name, value) in by_length {
        out = out.replace(value.as_str(), &format!("[REDACTED:{name}]"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_in_the_output_is_masked() {
        let s = BTreeMap::from([
            ("TOKEN".to_string(), "s3cr3t-value".to_string()),
            ("SHORT".to_string(), "ab".to_string()),
        ]);
        assert_eq!(
            masked("got s3cr3t-value and ab\n", &s),
            "got [REDACTED:TOKEN] and ab\n"
        );
    }
}
