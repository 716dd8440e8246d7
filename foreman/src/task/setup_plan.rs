//! What issue 50 adds to a task's `setup:`: the files that key its cached
//! result (and their digest, taken at submit), the `maintenance:` run on a
//! cache hit, and the names (never the values) of its `.env` secrets;
//! and how a launch's set-up went ([`SetupRan`]), as status and the
//! report show it.

use serde::{Deserialize, Serialize};

/// A task's set-up beside its commands (`TaskSpec.setup`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SetupPlan {
    /// `setup: { key_files }`, workspace-relative.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_files: Vec<String>,
    /// sha256 (hex) of each key file's path and content in the submitted
    /// workspace, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_digest: Option<String>,
    /// `maintenance:`: run instead of the set-up on a cache hit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub maintenance: Vec<String>,
    /// `setup_env:`: names of `.env` variables the set-up's processes get.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
}

impl SetupPlan {
    pub fn is_empty(&self) -> bool {
        *self == SetupPlan::default()
    }
}

/// How a task's set-up went, as its status and report show it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SetupRan {
    /// The cache key (None: the cache is off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Reused from the cache (the set-up did not run).
    pub hit: bool,
    /// `maintenance:` ran (on a hit).
    #[serde(default)]
    pub maintenance: bool,
    /// The phase's time: the set-up, or the restore and maintenance.
    pub ms: u64,
    /// Bytes kept in the cache by this run (a miss that was stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_bytes: Option<u64>,
    /// Why a miss was not kept, if it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_stored: Option<String>,
}

impl SetupRan {
    /// One line for `task status` and the report: `cache hit KEY,
    /// maintenance ran, 0.4s`, `ran 3.2s, cache miss KEY, kept 12 KiB`.
    pub fn summary(&self) -> String {
        let time = format!("{:.1}s", self.ms as f64 / 1000.0);
        let Some(key) = &self.key else {
            return format!("ran {time} (the set-up cache is off)");
        };
        if self.hit {
            let maintenance = if self.maintenance {
                ", maintenance ran"
            } else {
                ""
            };
            return format!("cache hit {key}{maintenance}, {time}");
        }
        let kept = match (&self.stored_bytes, &self.not_stored) {
            (Some(b), _) => format!(", kept {}", bytes(*b)),
            (None, Some(why)) => format!(", not kept: {why}"),
            (None, None) => String::new(),
        };
        format!("ran {time}, cache miss {key}{kept}")
    }
}

/// `12.3 KiB`.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_the_key_and_hit_or_miss() {
        let hit = SetupRan {
            key: Some("ab12".into()),
            hit: true,
            maintenance: true,
            ms: 400,
            ..SetupRan::default()
        };
        assert_eq!(hit.summary(), "cache hit ab12, maintenance ran, 0.4s");
        let miss = SetupRan {
            key: Some("ab12".into()),
            ms: 3200,
            stored_bytes: Some(12 * 1024 + 300),
            ..SetupRan::default()
        };
        assert_eq!(miss.summary(), "ran 3.2s, cache miss ab12, kept 12.3 KiB");
        assert_eq!(
            SetupRan {
                ms: 10,
                ..SetupRan::default()
            }
            .summary(),
            "ran 0.0s (the set-up cache is off)"
        );
    }
}
