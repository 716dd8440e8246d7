//! `saheeli cache`'s subcommands (issue 50): the cached set-ups.

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub(crate) enum CacheCommand {
    /// List the cached set-ups: key, image, size, created, last used, hits.
    Ls(CacheLsArgs),
    /// Remove one cached set-up (its key, or a unique start of it).
    Rm(CacheRmArgs),
    /// Remove the least recently used set-ups past `setup_cache.max_bytes` (--all: every one).
    Prune(CachePruneArgs),
}

#[derive(Debug, Args)]
pub(crate) struct CacheLsArgs {
    /// Print JSON (one array) instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CacheRmArgs {
    /// The key as `cache ls` shows it, or a unique start of it (6 or more hex digits).
    #[arg(value_name = "KEY")]
    pub key: String,
}

#[derive(Debug, Args)]
pub(crate) struct CachePruneArgs {
    /// Remove every cached set-up.
    #[arg(long)]
    pub all: bool,
}
