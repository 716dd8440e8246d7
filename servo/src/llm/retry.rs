//! Backoff for reaching the gateway again: exponential with jitter.
//! (Provider failures, and their `Retry-After`, are the gateway's job.)

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
}
