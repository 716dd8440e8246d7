//! Long tasks (issue 26): the provider's prompt cache a task asks for
//! (`cache:`) and how the built-in agent keeps its conversation inside the
//! model's window (`context:`).
//!
//! ```yaml
//! cache: 5m              # 5m | 1h | off
//! context: { window: 16000, strategy: mask+summarize, keep_recent: 6, threshold: 0.85 }
//! ```

use serde::{Deserialize, Serialize};

/// How long the provider keeps a task's cached prompt prefix.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cache {
    /// Anthropic's default lifetime: written at 1.25× the input price.
    #[default]
    #[serde(rename = "5m")]
    FiveMinutes,
    /// Anthropic's long lifetime, written at 2× the input price: worth it
    /// when a task waits for a human longer than five minutes.
    #[serde(rename = "1h")]
    OneHour,
    /// No cache breakpoints, no `prompt_cache_key`.
    #[serde(rename = "off")]
    Off,
}

impl Cache {
    pub fn as_str(&self) -> &'static str {
        match self {
            Cache::FiveMinutes => "5m",
            Cache::OneHour => "1h",
            Cache::Off => "off",
        }
    }
}

/// What the servo does when the conversation grows too large.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Strategy {
    /// Old tool outputs become a one-line stub.
    #[serde(rename = "mask")]
    Mask,
    /// One metered call summarises the older turns into a note.
    #[serde(rename = "summarize")]
    Summarize,
    /// Masking first; a summary when masking is not enough.
    #[default]
    #[serde(rename = "mask+summarize")]
    MaskSummarize,
}

impl Strategy {
    pub fn as_str(&self) -> &'static str {
        match self {
            Strategy::Mask => "mask",
            Strategy::Summarize => "summarize",
            Strategy::MaskSummarize => "mask+summarize",
        }
    }

    pub fn masks(&self) -> bool {
        matches!(self, Strategy::Mask | Strategy::MaskSummarize)
    }

    pub fn summarizes(&self) -> bool {
        matches!(self, Strategy::Summarize | Strategy::MaskSummarize)
    }
}

/// `context:` as written in front-matter or config.yaml: every key
/// optional, the rest from config and the known-model table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextSettings {
    /// The model's window in tokens.
    pub window: Option<u64>,
    pub strategy: Option<Strategy>,
    /// Turns (an assistant message and its tool results) kept verbatim.
    pub keep_recent: Option<u32>,
    /// The fraction of the window above which the servo compacts.
    pub threshold: Option<f64>,
}

impl ContextSettings {
    /// These settings, each unset one taken from `under`.
    pub fn or(self, under: ContextSettings) -> ContextSettings {
        ContextSettings {
            window: self.window.or(under.window),
            strategy: self.strategy.or(under.strategy),
            keep_recent: self.keep_recent.or(under.keep_recent),
            threshold: self.threshold.or(under.threshold),
        }
    }
}

/// Default `keep_recent`.
pub const KEEP_RECENT: u32 = 6;
/// Default `threshold`.
pub const THRESHOLD: f64 = 0.85;

/// What the servo is told: the resolved `context:` (in task.json).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextPlan {
    /// None: the window is unknown, and the servo compacts only when the
    /// provider says the context is too long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
    pub strategy: Strategy,
    pub keep_recent: u32,
    pub threshold: f64,
}

impl ContextPlan {
    pub fn from_settings(s: ContextSettings) -> ContextPlan {
        ContextPlan {
            window: s.window,
            strategy: s.strategy.unwrap_or_default(),
            keep_recent: s.keep_recent.unwrap_or(KEEP_RECENT),
            threshold: s.threshold.unwrap_or(THRESHOLD),
        }
    }
}

impl Default for ContextPlan {
    fn default() -> Self {
        ContextPlan::from_settings(ContextSettings::default())
    }
}

/// What the model is sent of a conversation whose full history the
/// session file keeps: tool outputs before `masked_before` (a message
/// index) are one-line stubs, and messages `2..upto` of a summary are
/// replaced by its note. Each compaction makes a new one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextState {
    #[serde(default)]
    pub masked_before: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
}

/// A summary of the messages `2..upto` (after the system prompt and the
/// task's prompt), replacing them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    pub upto: usize,
    pub text: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_as_the_issue_writes_them() {
        let s: ContextSettings = serde_yaml::from_str(
            "{ window: 16000, strategy: mask+summarize, keep_recent: 6, threshold: 0.85 }",
        )
        .unwrap();
        assert_eq!(s.window, Some(16000));
        assert_eq!(s.strategy, Some(Strategy::MaskSummarize));
        let c: Cache = serde_yaml::from_str("1h").unwrap();
        assert_eq!(c, Cache::OneHour);
        let e = serde_yaml::from_str::<Cache>("2h").unwrap_err().to_string();
        assert!(e.contains("5m") && e.contains("off"), "{e}");
        let e = serde_yaml::from_str::<ContextSettings>("{ windw: 1 }")
            .unwrap_err()
            .to_string();
        assert!(e.contains("window"), "{e}");
    }

    #[test]
    fn unset_keys_come_from_below() {
        let fm = ContextSettings {
            window: Some(2048),
            ..Default::default()
        };
        let cfg = ContextSettings {
            window: Some(128_000),
            keep_recent: Some(3),
            ..Default::default()
        };
        let plan = ContextPlan::from_settings(fm.or(cfg));
        assert_eq!(plan.window, Some(2048));
        assert_eq!(plan.keep_recent, 3);
        assert_eq!(plan.strategy, Strategy::MaskSummarize);
        assert_eq!(plan.threshold, THRESHOLD);
    }
}
