//! The warm pool (issue 28 on this host, issue 53 on a swarm) as the
//! serve loop and the sweeper reach it (`Engine::pool`): kept, counted,
//! and what earlier foremen's pools left. Each engine keeps its own.

use std::collections::BTreeMap;

use tokio_util::sync::CancellationToken;

use super::local::{Local, Pace};
use super::swarm::Swarm;

/// An engine's warm pool.
pub(crate) enum WarmPool<'a> {
    Local(&'a Local),
    Swarm(&'a Swarm),
}

impl WarmPool<'_> {
    /// Keeps the pool until `stop`, then removes its idle servos; returns
    /// at once when this foreman has none.
    pub async fn keep(&self, pace: Pace, stop: CancellationToken) {
        match self {
            WarmPool::Local(l) => l.keep_warm(pace, stop).await,
            WarmPool::Swarm(s) => s.keep_warm(pace, stop).await,
        }
    }

    /// Idle warm servos now (None: this foreman keeps no pool).
    pub fn idle(&self) -> Option<usize> {
        match self {
            WarmPool::Local(l) => l.pool_idle(),
            WarmPool::Swarm(s) => s.pool_idle(),
        }
    }

    /// Every warm servo's container or volume (a swarm's: job service,
    /// secret, container or volume), by name: the owner its label names,
    /// and whether this foreman's pool knows it.
    pub async fn leftovers(&self) -> anyhow::Result<BTreeMap<String, (String, bool)>> {
        match self {
            WarmPool::Local(l) => l.pool_leftovers().await,
            WarmPool::Swarm(s) => s.pool_leftovers().await,
        }
    }

    /// Removes the warm servos named (for the sweeper, `gc`).
    pub async fn remove(&self, names: &[String]) {
        match self {
            WarmPool::Local(l) => l.remove_pool_leftovers(names).await,
            WarmPool::Swarm(s) => s.remove_pool_leftovers(names).await,
        }
    }
}
