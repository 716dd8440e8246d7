//! Context windows (issue 26): which window a task's model has, so the
//! servo compacts before the provider refuses a request as too long.
//!
//! Where a window comes from, first match wins: config.yaml `windows:`
//! (the model as written, then as sent upstream, then the longest
//! `prefix*`), the provider's `context_window`, what the provider's server
//! reported (llama-server `/props`, vLLM `/v1/models`, Ollama `/api/show`),
//! then the built-in table of known models below. A task is resolved when
//! it is submitted, before any server is asked (`served` None); when none
//! of these knows, the window its provider's server reported at `serve`
//! start (`llm::probe`) is filled in at launch. None: unknown, and the
//! servo compacts only when the provider answers that the context is too
//! long.

use std::collections::BTreeMap;

/// Known models' windows in tokens (by prefix, longest first wins),
/// from the vendors' model pages.
pub(crate) const KNOWN: &[(&str, u64)] = &[
    ("claude-", 200_000),
    ("gpt-4o", 128_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4-turbo", 128_000),
    ("gpt-5", 400_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
];

/// The longest entry of `table` that `model` equals or, for a `prefix*`
/// (or a built-in prefix), starts with.
fn lookup<'a>(table: impl Iterator<Item = (&'a str, u64)>, model: &str) -> Option<u64> {
    let mut best: Option<(usize, u64)> = None;
    for (key, window) in table {
        let hit = match key.strip_suffix('*') {
            Some(prefix) => model.starts_with(prefix).then_some(prefix.len()),
            None => (key == model).then_some(usize::MAX),
        };
        if let Some(len) = hit
            && best.is_none_or(|(l, _)| len > l)
        {
            best = Some((len, window));
        }
    }
    best.map(|(_, w)| w)
}

/// The window of `model` (as written) sent upstream as `upstream`.
pub(crate) fn window(
    configured: &BTreeMap<String, u64>,
    provider_window: Option<u64>,
    served: Option<u64>,
    model: &str,
    upstream: &str,
) -> Option<u64> {
    let cfg = || configured.iter().map(|(k, v)| (k.as_str(), *v));
    lookup(cfg(), model)
        .or_else(|| lookup(cfg(), upstream))
        .or(provider_window)
        .or(served)
        .or_else(|| {
            let known = KNOWN.iter().map(|(k, v)| (*k, *v));
            // Built-in entries are prefixes.
            let mut best: Option<(usize, u64)> = None;
            for (prefix, w) in known {
                if upstream.starts_with(prefix) && best.is_none_or(|(l, _)| prefix.len() > l) {
                    best = Some((prefix.len(), w));
                }
            }
            best.map(|(_, w)| w)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_source_that_knows_wins() {
        let cfg: BTreeMap<String, u64> = [
            ("local/smollm2".to_string(), 2048),
            ("qwen*".to_string(), 32_768),
            ("qwen2.5-coder*".to_string(), 131_072),
        ]
        .into();
        type Case<'a> = (&'a str, &'a str, Option<u64>, Option<u64>, Option<u64>);
        let cases: &[Case] = &[
            // model, upstream, provider's, server's, expected
            (
                "local/smollm2",
                "smollm2",
                Some(8192),
                Some(4096),
                Some(2048),
            ),
            (
                "local/qwen2.5-coder-7b",
                "qwen2.5-coder-7b",
                None,
                None,
                Some(131_072),
            ),
            ("local/qwen3", "qwen3", None, None, Some(32_768)),
            ("local/other", "other", Some(8192), Some(4096), Some(8192)),
            ("local/other", "other", None, Some(4096), Some(4096)),
            (
                "claude-sonnet-4-5",
                "claude-sonnet-4-5",
                None,
                None,
                Some(200_000),
            ),
            ("gpt-4o-mini", "gpt-4o-mini", None, None, Some(128_000)),
            ("gpt-4.1-mini", "gpt-4.1-mini", None, None, Some(1_047_576)),
            ("mystery", "mystery", None, None, None),
        ];
        for (model, upstream, provider, served, want) in cases {
            assert_eq!(
                window(&cfg, *provider, *served, model, upstream),
                *want,
                "{model}"
            );
        }
    }
}
