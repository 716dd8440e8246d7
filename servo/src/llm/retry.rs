//! Retrying a call to the gateway: which failures are worth another
//! attempt, how long to wait (exponential backoff with jitter, or the
//! server's `Retry-After`), and the loop that does it.
//!
//! The foreman's gateway retries provider failures itself and then answers
//! with a typed error (`upstream_unavailable`, `budget_exceeded`, …); those
//! answers are final here, so the two retry loops never multiply. What is
//! retried is what the gateway did not type: plain 408/429/5xx answers from
//! an OpenAI-compatible server reached directly, and timeouts, up to
//! [`MAX_ATTEMPTS`]; and a gateway that cannot be reached or cut a call off
//! (its foreman died; the next one takes the task over within a lease or
//! two), which is waited for with capped backoff for as long as the servo's
//! deadline allows: the agent's loop ends the wait at its deadline.

use std::future::Future;
use std::time::Duration;

use saheeli_protocol::chat::gateway_error;
use saheeli_protocol::retry;

use super::LlmError;

/// Attempts per request, the first included.
pub(crate) const MAX_ATTEMPTS: u32 = 5;

/// Limit on one request when the task does not say (`request_timeout_s`,
/// which the foreman derives from its retry policy). Longer than the
/// gateway's default worst case (one upstream request plus its retries), so
/// the servo does not abandon, and then repeat, a call the gateway is still
/// working on and will bill.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(660);

/// Longest pause between two tries of a gateway that cannot be reached:
/// short, because a new foreman serves as soon as it takes the task over.
const MAX_UNREACHABLE_WAIT: Duration = Duration::from_secs(2);

/// Longest wait honoured from a `Retry-After` header.
const MAX_WAIT: Duration = Duration::from_secs(120);

/// The outcome of one attempt.
pub(crate) enum Attempt<T> {
    /// Success, or a failure that another attempt would not fix.
    Done(Result<T, LlmError>),
    /// Worth another attempt, after the server's wish if it gave one.
    Retry {
        error: String,
        retry_after: Option<Duration>,
    },
    /// The gateway could not be reached, or cut the call off: wait for it.
    Unreachable { error: String },
}

/// What the retry loop reports while it waits for an unreachable gateway.
#[derive(Debug, PartialEq)]
pub(crate) enum Waiting {
    /// The first failed try.
    Started { error: String },
    /// The gateway answered again (any answer) after this long.
    Back { waited: Duration },
}

/// What an HTTP error answer means.
#[derive(Debug, PartialEq)]
pub(crate) enum Verdict {
    Retry,
    Fail,
    Budget,
    Malformed,
    ContextLength,
}

/// Classifies an error answer by its status and, when the gateway typed
/// it, its `error.type`.
pub(crate) fn verdict(status: u16, kind: Option<&str>) -> Verdict {
    match kind {
        Some(gateway_error::BUDGET) => return Verdict::Budget,
        Some(gateway_error::MALFORMED) => return Verdict::Malformed,
        Some(gateway_error::CONTEXT_LENGTH) => return Verdict::ContextLength,
        // The gateway already retried, or the request itself is wrong.
        Some(gateway_error::UNAVAILABLE | gateway_error::AUTH | gateway_error::BAD_REQUEST) => {
            return Verdict::Fail;
        }
        _ => {}
    }
    if retry::retryable_status(status) {
        Verdict::Retry
    } else {
        Verdict::Fail
    }
}

/// Runs `attempt` until it is done or [`MAX_ATTEMPTS`] are used up; an
/// unreachable gateway is tried again without limit (the caller's deadline
/// ends the wait by dropping this future), and `notify` hears when such a
/// wait starts and ends.
pub(crate) async fn run<T, F, Fut>(
    mut attempt: F,
    mut notify: impl FnMut(Waiting),
) -> Result<T, LlmError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Attempt<T>>,
{
    let mut n = 1;
    let mut waiting: Option<(tokio::time::Instant, u32)> = None;
    loop {
        let outcome = attempt().await;
        if !matches!(outcome, Attempt::Unreachable { .. })
            && let Some((since, _)) = waiting.take()
        {
            notify(Waiting::Back {
                waited: since.elapsed(),
            });
        }
        match outcome {
            Attempt::Done(result) => return result,
            Attempt::Unreachable { error } => {
                let tries = match &mut waiting {
                    Some((_, tries)) => {
                        *tries += 1;
                        *tries
                    }
                    None => {
                        tracing::warn!(%error, "the gateway cannot be reached; waiting for it");
                        notify(Waiting::Started { error });
                        waiting = Some((tokio::time::Instant::now(), 1));
                        1
                    }
                };
                tokio::time::sleep(backoff(tries, None).min(MAX_UNREACHABLE_WAIT)).await;
            }
            Attempt::Retry { error, retry_after } => {
                if n >= MAX_ATTEMPTS {
                    return Err(LlmError::Failed(format!(
                        "giving up after {MAX_ATTEMPTS} attempts: {error}"
                    )));
                }
                let wait = backoff(n, retry_after);
                tracing::warn!(attempt = n, wait_ms = wait.as_millis() as u64, %error, "retrying the LLM call");
                tokio::time::sleep(wait).await;
                n += 1;
            }
        }
    }
}

/// The wait before retry number `attempt` (1-based): the server's wish
/// when it gave one (capped), else exponential backoff with ±25 % jitter,
/// so that many servos do not retry in step.
pub(crate) fn backoff(attempt: u32, retry_after: Option<Duration>) -> Duration {
    retry::backoff(attempt, retry_after, MAX_WAIT, fastrand::f64())
}

pub(crate) use retry::retry_after;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let d1 = backoff(1, None);
        assert!(d1 >= Duration::from_millis(375) && d1 <= Duration::from_millis(625));
        let d3 = backoff(3, None);
        assert!(d3 >= Duration::from_millis(1500) && d3 <= Duration::from_millis(2500));
        assert!(backoff(10, None) <= Duration::from_millis(37_500));
        let wish = Duration::from_secs(3);
        assert_eq!(backoff(1, Some(wish)), wish);
        assert_eq!(backoff(1, Some(Duration::from_secs(3600))), MAX_WAIT);
    }

    #[test]
    fn verdicts() {
        assert_eq!(verdict(429, None), Verdict::Retry);
        assert_eq!(verdict(408, None), Verdict::Retry);
        assert_eq!(verdict(500, None), Verdict::Retry);
        assert_eq!(verdict(503, None), Verdict::Retry);
        assert_eq!(verdict(400, None), Verdict::Fail);
        assert_eq!(verdict(401, None), Verdict::Fail);
        assert_eq!(verdict(404, None), Verdict::Fail);
        // The gateway's typed answers are final.
        assert_eq!(
            verdict(503, Some(gateway_error::UNAVAILABLE)),
            Verdict::Fail
        );
        assert_eq!(verdict(402, Some(gateway_error::BUDGET)), Verdict::Budget);
        assert_eq!(
            verdict(502, Some(gateway_error::MALFORMED)),
            Verdict::Malformed
        );
        assert_eq!(verdict(401, Some(gateway_error::AUTH)), Verdict::Fail);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_honour_the_wish_then_give_up() {
        let started = tokio::time::Instant::now();
        let mut calls = 0;
        let r: Result<u32, LlmError> = run(
            || {
                calls += 1;
                let n = calls;
                async move {
                    if n < 3 {
                        Attempt::Retry {
                            error: "HTTP 429".into(),
                            retry_after: Some(Duration::from_secs(7)),
                        }
                    } else {
                        Attempt::Done(Ok(n))
                    }
                }
            },
            |_| {},
        )
        .await;
        assert_eq!(r.unwrap(), 3);
        assert_eq!(started.elapsed().as_secs(), 14);

        let mut calls = 0;
        let r: Result<(), LlmError> = run(
            || {
                calls += 1;
                async {
                    Attempt::Retry {
                        error: "HTTP 503".into(),
                        retry_after: None,
                    }
                }
            },
            |_| {},
        )
        .await;
        assert_eq!(calls, MAX_ATTEMPTS);
        match r {
            Err(LlmError::Failed(m)) => assert!(m.contains("giving up after 5 attempts"), "{m}"),
            _ => panic!("expected a failure"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn final_answers_are_not_retried() {
        let mut calls = 0;
        let r: Result<(), LlmError> = run(
            || {
                calls += 1;
                async { Attempt::Done(Err(LlmError::Failed("HTTP 400".into()))) }
            },
            |_| {},
        )
        .await;
        assert!(r.is_err());
        assert_eq!(calls, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_gateway_is_waited_for_without_limit() {
        let started = tokio::time::Instant::now();
        let mut calls = 0;
        let mut heard = Vec::new();
        let r: Result<u32, LlmError> = run(
            || {
                calls += 1;
                let n = calls;
                async move {
                    if n <= 40 {
                        Attempt::Unreachable {
                            error: "connection refused".into(),
                        }
                    } else {
                        Attempt::Done(Ok(n))
                    }
                }
            },
            |w| heard.push(w),
        )
        .await;
        assert_eq!(r.unwrap(), 41);
        // Capped backoff: 40 waits of at most 2 s.
        let waited = started.elapsed();
        assert!(waited <= Duration::from_secs(80), "{waited:?}");
        assert!(waited >= Duration::from_secs(40), "{waited:?}");
        assert_eq!(heard.len(), 2, "{heard:?}");
        assert!(matches!(&heard[0], Waiting::Started { error } if error == "connection refused"));
        assert_eq!(heard[1], Waiting::Back { waited });
    }
}
