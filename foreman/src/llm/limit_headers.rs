//! What a provider's answer says about its rate limits (issue 26): the
//! requests and tokens left in the current window, how big the window is
//! and when it is full again, and on a 429 how long to stay away.
//!
//! Two header families, read from any provider's answer (a proxy may speak
//! one API and pass the other's headers on):
//!
//! - OpenAI: `x-ratelimit-limit-requests`, `x-ratelimit-remaining-requests`,
//!   `x-ratelimit-reset-requests` (a Go-style duration until the window is
//!   full again: `1s`, `6m0s`, `20ms`, `1h2m3.5s`), and the same three for
//!   `-tokens`.
//! - Anthropic: `anthropic-ratelimit-requests-limit`, `-remaining`, `-reset`
//!   (an RFC 3339 time), and the same for `tokens` (the most restrictive
//!   token limit in force); `input-tokens` stands in when `tokens` is absent.
//!
//! And `retry-after` (seconds or an HTTP date) from either.

use std::time::{Duration, SystemTime};

use axum::http::HeaderMap;

/// One dimension of a limit (requests or tokens) as a provider reported it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Allowance {
    /// The window's size, when given.
    pub limit: Option<u64>,
    /// What is left of it now.
    pub remaining: u64,
    /// How long until it is full again, when given.
    pub resets_in: Option<Duration>,
}

/// Everything rate-related in one answer's headers.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Observed {
    pub requests: Option<Allowance>,
    pub tokens: Option<Allowance>,
    /// `retry-after`, when given.
    pub retry_after: Option<Duration>,
}

impl Observed {
    /// Whether the answer said anything about a limit.
    #[cfg(test)]
    pub fn any(&self) -> bool {
        self.requests.is_some() || self.tokens.is_some()
    }
}

/// Reads the headers of one answer received at `now`.
pub(crate) fn observe(headers: &HeaderMap, now: SystemTime) -> Observed {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let anthropic = |what: &str| {
        let h = |part: &str| get(&format!("anthropic-ratelimit-{what}-{part}"));
        Some(Allowance {
            remaining: h("remaining")?.trim().parse().ok()?,
            limit: h("limit").and_then(|v| v.trim().parse().ok()),
            resets_in: h("reset").and_then(|v| {
                let at = humantime::parse_rfc3339_weak(v.trim()).ok()?;
                Some(at.duration_since(now).unwrap_or(Duration::ZERO))
            }),
        })
    };
    let openai = |what: &str| {
        Some(Allowance {
            remaining: get(&format!("x-ratelimit-remaining-{what}"))?
                .trim()
                .parse()
                .ok()?,
            limit: get(&format!("x-ratelimit-limit-{what}")).and_then(|v| v.trim().parse().ok()),
            resets_in: get(&format!("x-ratelimit-reset-{what}")).and_then(go_duration),
        })
    };
    Observed {
        requests: anthropic("requests").or_else(|| openai("requests")),
        tokens: anthropic("tokens")
            .or_else(|| anthropic("input-tokens"))
            .or_else(|| openai("tokens")),
        retry_after: super::retry::retry_after(get("retry-after"), now),
    }
}

/// A Go-style duration as OpenAI writes it: numbers (with an optional
/// fraction) each followed by `h`, `m`, `s`, `ms`, `us` or `ns`
/// (`6m0s`, `1.5s`, `20ms`); a bare number is seconds.
pub(crate) fn go_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if let Ok(secs) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let mut rest = text;
    let mut total = 0.0_f64;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += value * scale;
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (axum::http::HeaderName::from_static(k), v.parse().unwrap()))
            .collect()
    }

    #[test]
    fn go_durations_as_openai_writes_them() {
        let d = |s| go_duration(s);
        assert_eq!(d("1s"), Some(Duration::from_secs(1)));
        assert_eq!(d("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(d("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(d("1h2m3s"), Some(Duration::from_secs(3723)));
        assert_eq!(d("17.28s"), Some(Duration::from_millis(17_280)));
        assert_eq!(d("2"), Some(Duration::from_secs(2)));
        assert_eq!(d("soon"), None);
        assert_eq!(d("5x"), None);
        assert_eq!(d(""), Some(Duration::ZERO));
    }

    /// The headers of an OpenAI chat completion, as its API sends them.
    #[test]
    fn openai_headers() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        let h = headers(&[
            ("x-ratelimit-limit-requests", "5000"),
            ("x-ratelimit-limit-tokens", "160000"),
            ("x-ratelimit-remaining-requests", "4999"),
            ("x-ratelimit-remaining-tokens", "159976"),
            ("x-ratelimit-reset-requests", "12ms"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        let o = observe(&h, now);
        assert_eq!(
            o.requests,
            Some(Allowance {
                limit: Some(5000),
                remaining: 4999,
                resets_in: Some(Duration::from_millis(12)),
            })
        );
        assert_eq!(
            o.tokens,
            Some(Allowance {
                limit: Some(160_000),
                remaining: 159_976,
                resets_in: Some(Duration::from_secs(360)),
            })
        );
        assert_eq!(o.retry_after, None);
        assert!(o.any());
    }

    /// The headers of an Anthropic message, and of its 429.
    #[test]
    fn anthropic_headers() {
        let now = humantime::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
        let h = headers(&[
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", "2026-01-01T00:00:34Z"),
            ("anthropic-ratelimit-tokens-limit", "40000"),
            ("anthropic-ratelimit-tokens-remaining", "18000"),
            ("anthropic-ratelimit-tokens-reset", "2026-01-01T00:00:01Z"),
            ("anthropic-ratelimit-input-tokens-limit", "30000"),
            ("anthropic-ratelimit-input-tokens-remaining", "9000"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2026-01-01T00:00:02Z",
            ),
            ("retry-after", "34"),
        ]);
        let o = observe(&h, now);
        assert_eq!(
            o.requests,
            Some(Allowance {
                limit: Some(50),
                remaining: 0,
                resets_in: Some(Duration::from_secs(34)),
            })
        );
        // `tokens` is the most restrictive of the token limits.
        assert_eq!(o.tokens.unwrap().remaining, 18_000);
        assert_eq!(o.retry_after, Some(Duration::from_secs(34)));
        // Without `tokens`, the input-token limit; a reset in the past is now.
        let h = headers(&[
            ("anthropic-ratelimit-input-tokens-limit", "30000"),
            ("anthropic-ratelimit-input-tokens-remaining", "9000"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2025-12-31T23:59:00Z",
            ),
        ]);
        let o = observe(&h, now);
        assert_eq!(
            o.tokens,
            Some(Allowance {
                limit: Some(30_000),
                remaining: 9000,
                resets_in: Some(Duration::ZERO),
            })
        );
        assert_eq!(o.requests, None);
    }

    #[test]
    fn nothing_or_nonsense_is_no_limit() {
        let now = SystemTime::UNIX_EPOCH;
        assert!(!observe(&HeaderMap::new(), now).any());
        let h = headers(&[
            ("x-ratelimit-remaining-requests", "many"),
            ("anthropic-ratelimit-tokens-remaining", "-3"),
        ]);
        assert!(!observe(&h, now).any());
        // A remaining count without limit or reset still counts.
        let h = headers(&[("x-ratelimit-remaining-requests", "7")]);
        assert_eq!(observe(&h, now).requests.unwrap().remaining, 7);
    }
}
