//! The `pools:` a claim is held to (issue 52): those of the definitions
//! in use once a commit of the definitions repository has applied to the
//! database, else config.yaml's. Read at each claim (one indexed lookup)
//! and parsed again only when another set has applied.

use std::sync::Arc;

use crate::config::PoolCap;
use crate::store::{Store, StoreError};

pub(super) struct LivePools {
    /// The set the pools came from (None: config.yaml).
    from: Option<i64>,
    pools: Arc<Vec<PoolCap>>,
    config: Arc<Vec<PoolCap>>,
}

impl LivePools {
    pub fn new(config: Vec<PoolCap>) -> LivePools {
        let config = Arc::new(config);
        LivePools {
            from: None,
            pools: config.clone(),
            config,
        }
    }

    /// The pools now.
    pub fn current(&mut self, s: &Store) -> Result<Arc<Vec<PoolCap>>, StoreError> {
        let id = s.definitions_current_id()?;
        if id != self.from {
            match id {
                None => self.pools = self.config.clone(),
                Some(_) => match crate::definitions::current(s) {
                    Ok(Some((_, set))) => self.pools = Arc::new(set.pools),
                    Ok(None) => self.pools = self.config.clone(),
                    Err(e) => {
                        // Checked when it applied; keep what claims used.
                        tracing::warn!(error = %format!("{e:#}"), "the definitions' pools not read; keeping the last");
                    }
                },
            }
            self.from = id;
        }
        Ok(self.pools.clone())
    }
}
