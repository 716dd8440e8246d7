//! `setup_cache:` (issue 50): how much the cached set-ups may hold.

use saheeli_protocol::front_matter::Memory;
use serde::Deserialize;

/// `setup_cache: { max_bytes: 10g }`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct SetupCacheConfig {
    /// What all cached set-ups may hold together (their own layers); past
    /// it the least recently used are removed. One set-up's result larger
    /// than this is not cached. 0: nothing is cached.
    pub max_bytes: Memory,
}

impl Default for SetupCacheConfig {
    fn default() -> Self {
        SetupCacheConfig {
            max_bytes: Memory(10 << 30),
        }
    }
}
