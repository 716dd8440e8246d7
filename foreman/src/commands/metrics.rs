//! `saheeli metrics`: the Prometheus metrics once, without a server.

use std::process::ExitCode;

use crate::config::{Config, Providers};
use crate::metrics::{Metrics, Source};

use super::open_existing_store;

/// Prints the exposition read from the database. The in-process
/// instruments are empty here (no foreman ran in this process); the first
/// comment line says so.
pub(crate) async fn metrics(cfg: &Config) -> anyhow::Result<ExitCode> {
    // Fails naming the path when there is no database; creates nothing.
    drop(open_existing_store(cfg)?);
    let m = Metrics::new(
        cfg.database(),
        Providers::from_config(cfg),
        Source::Database,
    )
    .with_pools(cfg.file.pools.clone())
    .with_pools_of(crate::definitions::pools_in_use);
    out!("{}", m.scrape().await?);
    Ok(ExitCode::SUCCESS)
}
