//! Backoff for transient LLM failures: exponential with jitter, and the
//! server's `Retry-After` when it sends one.

use std::time::Duration;

/// Attempts per request, the first included.
pub(crate) const MAX_ATTEMPTS: u32 = 6;

/// The wait before retry number `attempt` (1-based).
pub(crate) fn backoff(attempt: u32, retry_after: Option<Duration>) -> Duration {
    if let Some(d) = retry_after {
        return d.min(Duration::from_secs(120));
    }
    let base = Duration::from_millis(500) * 2u32.pow(attempt.saturating_sub(1).min(6));
    let base = base.min(Duration::from_secs(30));
    // ±25 % jitter so that many servos do not retry in step.
    let factor = 0.75 + fastrand::f64() * 0.5;
    base.mul_f64(factor)
}

/// `Retry-After` in seconds (the HTTP-date form is read by the gateway).
pub(crate) fn parse_retry_after(value: Option<&reqwest::header::HeaderValue>) -> Option<Duration> {
    let s = value?.to_str().ok()?.trim();
    let secs: f64 = s.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

/// Whether an HTTP status is worth retrying.
pub(crate) fn retryable(status: u16) -> bool {
    status == 429 || status == 408 || (500..600).contains(&status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let d1 = backoff(1, None);
        assert!(d1 >= Duration::from_millis(375) && d1 <= Duration::from_millis(625));
        let d10 = backoff(10, None);
        assert!(d10 <= Duration::from_millis(37_500));
        assert_eq!(
            backoff(1, Some(Duration::from_secs(3))),
            Duration::from_secs(3)
        );
    }

    #[test]
    fn retry_after_seconds() {
        let v = reqwest::header::HeaderValue::from_static("2");
        assert_eq!(parse_retry_after(Some(&v)), Some(Duration::from_secs(2)));
        let v = reqwest::header::HeaderValue::from_static("soon");
        assert_eq!(parse_retry_after(Some(&v)), None);
        assert!(retryable(429) && retryable(503) && !retryable(401) && !retryable(400));
    }
}
