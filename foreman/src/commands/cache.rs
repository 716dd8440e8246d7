//! `saheeli cache ls|rm|prune` (issue 50): the set-ups kept as images
//! `saheeli-setup:KEY` on this host's Docker, and when each was used.

use std::process::ExitCode;

use anyhow::bail;

use crate::backend::docker::{self, CacheEntry, SetupCache};
use crate::cli::CacheCommand;
use crate::config::{BackendKind, Config};

pub(crate) async fn cache(cfg: &Config, command: CacheCommand) -> anyhow::Result<ExitCode> {
    if cfg.file.backend == BackendKind::Swarm {
        bail!("the set-up cache belongs to `backend: docker`; a swarm runs no `setup:` yet");
    }
    let d = docker::connect().await?;
    let cache = SetupCache::new(&cfg.state_dir(), cfg.file.setup_cache.max_bytes.0);
    match command {
        CacheCommand::Ls(args) => {
            let entries = cache.list(&d).await?;
            if args.json {
                outln!("{}", serde_json::to_string_pretty(&entries)?);
            } else {
                print_table(&entries);
            }
        }
        CacheCommand::Rm(args) => {
            let key = resolve(&cache.list(&d).await?, &args.key)?;
            cache.remove(&d, &key).await?;
            outln!("removed {key}");
        }
        CacheCommand::Prune(args) => {
            let removed = if args.all {
                let mut out = Vec::new();
                for e in cache.list(&d).await? {
                    if cache.remove(&d, &e.key).await? {
                        out.push(e.key);
                    }
                }
                out
            } else {
                cache.evict(&d, None).await?
            };
            for key in &removed {
                outln!("removed {key}");
            }
            outln!("{} cached set-ups removed", removed.len());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The one key `query` names: the whole key or a unique start of it.
fn resolve(entries: &[CacheEntry], query: &str) -> anyhow::Result<String> {
    let q = query.trim().to_ascii_lowercase();
    let q = q
        .strip_prefix(&format!("{}:", docker::CACHE_REPO))
        .unwrap_or(&q);
    if q.len() < 6 || !q.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!(
            "`{query}` is not a cache key; give 6 or more hex digits of one `saheeli cache ls` shows"
        );
    }
    let matches: Vec<&CacheEntry> = entries.iter().filter(|e| e.key.starts_with(q)).collect();
    match matches.as_slice() {
        [one] => Ok(one.key.clone()),
        [] => bail!("no cached set-up has key `{query}`; `saheeli cache ls` lists them"),
        _ => bail!("`{query}` starts {} keys; give more digits", matches.len()),
    }
}

fn print_table(entries: &[CacheEntry]) {
    outln!(
        "{:<64}  {:<28}  {:>10}  {:<20}  {:<20}  {:>4}",
        "KEY",
        "IMAGE",
        "SIZE",
        "CREATED",
        "LAST USED",
        "HITS"
    );
    for e in entries {
        outln!(
            "{:<64}  {:<28}  {:>10}  {:<20}  {:<20}  {:>4}",
            e.key,
            e.image,
            crate::text::bytes(e.bytes),
            crate::text::time(e.created * 1000),
            e.last_used_ms
                .map(crate::text::time)
                .unwrap_or_else(|| "-".into()),
            e.hits
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str) -> CacheEntry {
        CacheEntry {
            key: key.into(),
            image: "i".into(),
            bytes: 1,
            created: 0,
            last_used_ms: None,
            hits: 0,
        }
    }

    #[test]
    fn a_key_is_named_whole_or_by_a_unique_start() {
        let e = [entry("abcdef01"), entry("abcdef02"), entry("123456ff")];
        assert_eq!(resolve(&e, "123456").unwrap(), "123456ff");
        assert_eq!(resolve(&e, "saheeli-setup:abcdef01").unwrap(), "abcdef01");
        assert!(
            resolve(&e, "abcdef")
                .unwrap_err()
                .to_string()
                .contains("2 keys")
        );
        assert!(resolve(&e, "abc").is_err());
        assert!(
            resolve(&e, "999999")
                .unwrap_err()
                .to_string()
                .contains("cache ls")
        );
    }
}
