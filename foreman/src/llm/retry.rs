//! When and how long to wait before trying an upstream call again.

use std::time::{Duration, SystemTime};

use saheeli_protocol::retry;

/// What an upstream answer means for retrying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Success,
    /// 429, 408, 5xx and Anthropic's 529: try again later.
    Retry,
    /// 401, 403: the key is wrong or not allowed.
    Auth,
    /// Any other 4xx: the request itself is wrong.
    BadRequest,
    /// The request did not fit the model's window (in any provider's
    /// words): the servo compacts and asks again (issue 26).
    ContextLength,
}

pub(crate) fn verdict(status: u16) -> Verdict {
    match status {
        200..=299 => Verdict::Success,
        401 | 403 => Verdict::Auth,
        s if retry::retryable_status(s) => Verdict::Retry,
        _ => Verdict::BadRequest,
    }
}

/// An error answer's verdict, its body read: a context-length error
/// (some local servers answer it with a 500) is not retried, nor fatal.
pub(crate) fn verdict_of(status: u16, body: &[u8]) -> Verdict {
    let v = verdict(status);
    let overflow = (400..=500).contains(&status)
        && retry::context_overflow(&String::from_utf8_lossy(&body[..body.len().min(4096)]));
    if v != Verdict::Success && overflow {
        Verdict::ContextLength
    } else {
        v
    }
}

/// A 500 whose body says the request itself is invalid, answered the same
/// way twice: a bad request, not an outage. llama-cpp-python answers a
/// request it cannot parse with 500 ("Input should be a valid string"),
/// and five retries of it only cost time (issue 27).
pub(crate) fn repeated_invalid(status: Option<u16>, why: &str, previous: Option<&str>) -> bool {
    const SIGNS: [&str; 4] = ["input should be", "validation", "invalid", "unprocessable"];
    let lower = why.to_ascii_lowercase();
    status == Some(500) && previous == Some(why) && SIGNS.iter().any(|s| lower.contains(s))
}

/// A 429 that is not a rate limit: the account's quota or credit is
/// spent (OpenAI's `insufficient_quota`, in its words). Waiting for a
/// turn does not help it; it is retried like any failure, within limits.
pub(crate) fn out_of_quota(why: &str) -> bool {
    let lower = why.to_ascii_lowercase();
    [
        "insufficient_quota",
        "current quota",
        "billing",
        "credit balance",
    ]
    .iter()
    .any(|s| lower.contains(s))
}

/// `Retry-After` as seconds or an HTTP date.
pub(crate) fn retry_after(value: Option<&str>, now: SystemTime) -> Option<Duration> {
    retry::retry_after(value?, now)
}

/// Exponential backoff with ±25 % jitter; the server's wish wins when given.
pub(crate) fn backoff(attempt: u32, server_wish: Option<Duration>) -> Duration {
    retry::backoff(attempt, server_wish, Duration::MAX, fastrand::f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        assert_eq!(verdict(200), Verdict::Success);
        assert_eq!(verdict(429), Verdict::Retry);
        assert_eq!(verdict(529), Verdict::Retry);
        assert_eq!(verdict(503), Verdict::Retry);
        assert_eq!(verdict(401), Verdict::Auth);
        assert_eq!(verdict(403), Verdict::Auth);
        assert_eq!(verdict(400), Verdict::BadRequest);
        assert_eq!(verdict(404), Verdict::BadRequest);
        let anthropic = br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#;
        assert_eq!(verdict_of(400, anthropic), Verdict::ContextLength);
        let openai = br#"{"error":{"message":"This model's maximum context length is 8192 tokens.","code":"context_length_exceeded"}}"#;
        assert_eq!(verdict_of(400, openai), Verdict::ContextLength);
        let llama = br#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#;
        assert_eq!(verdict_of(400, llama), Verdict::ContextLength);
        assert_eq!(
            verdict_of(
                500,
                br#"{"error":{"message":"Requested tokens (2100) exceed context window of 2048"}}"#
            ),
            Verdict::ContextLength
        );
        assert_eq!(
            verdict_of(400, br#"{"error":{"message":"bad tool"}}"#),
            Verdict::BadRequest
        );
        assert_eq!(verdict_of(503, b"overloaded"), Verdict::Retry);
    }

    /// Issue 27 item 3: llama-cpp-python's 500 for `content: null` was
    /// retried five times; an identical one now ends it after one retry.
    /// Its answer as recorded.
    #[test]
    fn an_identical_invalid_500_is_a_bad_request() {
        let ex = crate::llm::recorded::exchange("llama-cpp-python", "tool-turn-content-null.json");
        assert_eq!(ex["response"]["status"], 500);
        let body = ex["response"]["body"].to_string();
        let why = format!(
            "local answered HTTP 500: {}",
            crate::llm::provider_call::error_text(body.as_bytes())
        );
        assert!(why.contains("Input should be a valid string"), "{why}");
        assert!(
            !repeated_invalid(Some(500), &why, None),
            "the first may be a blip"
        );
        assert!(repeated_invalid(Some(500), &why, Some(&why)));
        // An outage's 500, or a different body, is retried as before.
        let outage = "local answered HTTP 500: internal error";
        assert!(!repeated_invalid(Some(500), outage, Some(outage)));
        assert!(!repeated_invalid(Some(500), &why, Some(outage)));
        assert!(!repeated_invalid(Some(503), &why, Some(&why)));
    }

    #[test]
    fn a_spent_quota_is_not_a_rate_limit() {
        assert!(out_of_quota(
            "openai answered HTTP 429: You exceeded your current quota, please check your plan and billing details."
        ));
        assert!(out_of_quota(
            "anthropic answered HTTP 400: Your credit balance is too low"
        ));
        assert!(!out_of_quota(
            "openai answered HTTP 429: Rate limit reached for gpt-4o-mini on requests per min (RPM): Limit 3, Used 3"
        ));
        assert!(!out_of_quota(
            "anthropic answered HTTP 429: This request would exceed the rate limit for your organization"
        ));
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(retry_after(Some("2"), now), Some(Duration::from_secs(2)));
        assert_eq!(
            retry_after(Some("0.5"), now),
            Some(Duration::from_millis(500))
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(7));
        assert_eq!(retry_after(Some(&later), now), Some(Duration::from_secs(7)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(7));
        assert_eq!(retry_after(Some(&past), now), Some(Duration::ZERO));
        assert_eq!(retry_after(Some("soon"), now), None);
        assert_eq!(retry_after(None, now), None);
    }

    #[test]
    fn backoff_grows_within_bounds() {
        for attempt in 1..10 {
            let d = backoff(attempt, None);
            assert!(d <= Duration::from_millis(37_500), "{attempt}: {d:?}");
            assert!(d >= Duration::from_millis(375), "{attempt}: {d:?}");
        }
        assert_eq!(
            backoff(3, Some(Duration::from_secs(1))),
            Duration::from_secs(1)
        );
    }

    /// Issue 27 items 3 and 7 on llama-cpp-python's own answers (recorded):
    /// a prompt over its 2,048-token window is a context overflow (the
    /// agent compacts), and its 500 to `content: null` says the request is
    /// invalid, so the same answer twice is not retried again.
    #[test]
    fn llama_cpp_python_errors_are_read_right() {
        use crate::llm::recorded::exchange;
        let over = exchange("llama-cpp-python", "context-exceeded.json");
        assert_eq!(over["response"]["status"], 400);
        let body = over["response"]["body"].to_string();
        assert_eq!(verdict_of(400, body.as_bytes()), Verdict::ContextLength);
        let null = exchange("llama-cpp-python", "tool-turn-content-null.json");
        assert_eq!(null["response"]["status"], 500);
        let why = null["response"]["body"]["error"]["message"]
            .as_str()
            .unwrap();
        assert_eq!(verdict_of(500, why.as_bytes()), Verdict::Retry);
        assert!(repeated_invalid(Some(500), why, Some(why)));
        assert!(!repeated_invalid(Some(500), why, None));
    }
}
