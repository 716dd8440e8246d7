//! When to try an LLM call again, and how long to wait first: pure
//! functions that both the servo (calling its gateway) and the gateway
//! (calling a provider) use, so the two cannot drift apart.

use std::time::{Duration, SystemTime};

/// Whether an HTTP status is worth another try later: 408, 429 and 5xx
/// (Anthropic's 529 included).
pub fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500..=599)
}

/// Whether an error body says the request did not fit the model's
/// context window (issue 26), in any provider's words: OpenAI's and
/// llama-cpp-python's `context_length_exceeded`, vLLM's "maximum context
/// length", Anthropic's "prompt is too long", llama-server's
/// `exceed_context_size_error` / "exceeds the available context size".
/// Such a request is compacted and sent again, never the end of a task.
pub fn context_overflow(body: &str) -> bool {
    const SIGNS: [&str; 7] = [
        "context_length_exceeded",
        "maximum context length",
        "prompt is too long",
        "exceed_context_size_error",
        "exceeds the available context size",
        "exceed context window",
        "context window of",
    ];
    let lower = body.to_ascii_lowercase();
    SIGNS.iter().any(|s| lower.contains(s))
}

/// A `Retry-After` value: seconds (`2`, `0.5`) or an HTTP date (any of the
/// three formats HTTP allows), as a wait from `now` (zero when past).
pub fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The wait before retry number `attempt` (1-based): the server's wish when
/// it gave one (capped at `cap`), else 0.5 s doubling up to 30 s, spread by
/// ±25 % with `jitter` (a number in [0, 1), random in use) so that many
/// callers do not retry in step.
pub fn backoff(
    attempt: u32,
    server_wish: Option<Duration>,
    cap: Duration,
    jitter: f64,
) -> Duration {
    if let Some(d) = server_wish {
        return d.min(cap);
    }
    let base = Duration::from_millis(500) * 2u32.pow(attempt.saturating_sub(1).min(6));
    base.min(Duration::from_secs(30))
        .mul_f64(0.75 + jitter.clamp(0.0, 1.0) * 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_overflow_in_every_providers_words() {
        let yes = [
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#,
            r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":2100,"n_ctx":2048}}"#,
            r#"{"error":{"code":400,"message":"the request exceeds the available context size. try increasing the context size or enable context shift","type":"invalid_request_error"}}"#,
            r#"{"error":{"message":"Requested tokens (2100) exceed context window of 2048","type":"internal_server_error"}}"#,
            r#"{"object":"error","message":"This model's maximum context length is 16384 tokens. However, you requested 17000 tokens in the messages, Please reduce the length of the messages.","type":"BadRequestError","code":400}"#,
        ];
        for body in yes {
            assert!(context_overflow(body), "{body}");
        }
        for body in [
            r#"{"error":{"message":"Invalid value for 'tool_choice'","type":"invalid_request_error"}}"#,
            r#"{"error":{"message":"Input should be a valid string"}}"#,
        ] {
            assert!(!context_overflow(body), "{body}");
        }
    }

    #[test]
    fn statuses() {
        for s in [408, 429, 500, 503, 529] {
            assert!(retryable_status(s), "{s}");
        }
        for s in [200, 400, 401, 403, 404] {
            assert!(!retryable_status(s), "{s}");
        }
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_770);
        assert_eq!(retry_after("2", now), Some(Duration::from_secs(2)));
        assert_eq!(retry_after(" 0.5 ", now), Some(Duration::from_millis(500)));
        // 784111777 is Sun, 06 Nov 1994 08:49:37 GMT.
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after("Sunday, 06-Nov-94 08:49:37 GMT", now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("-1", now), None);
    }

    #[test]
    fn backoff_grows_is_capped_and_spread() {
        let cap = Duration::from_secs(60);
        assert_eq!(backoff(1, None, cap, 0.5), Duration::from_millis(500));
        assert_eq!(backoff(2, None, cap, 0.5), Duration::from_secs(1));
        assert_eq!(backoff(20, None, cap, 0.5), Duration::from_secs(30));
        assert_eq!(backoff(1, None, cap, 0.0), Duration::from_millis(375));
        assert_eq!(backoff(1, None, cap, 1.0), Duration::from_millis(625));
        assert_eq!(
            backoff(3, Some(Duration::from_secs(90)), cap, 0.5),
            Duration::from_secs(60)
        );
    }
}
