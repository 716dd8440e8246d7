//! Guessing the token is paced: each client address has a token bucket of
//! failed attempts (a wrong login form, a wrong bearer token); an empty
//! bucket is answered 429 with `Retry-After`, before the token is looked
//! at. A right token costs nothing, so a person who mistypes is not held.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed attempts an address may make at once.
const BURST: f64 = 5.0;
/// One more attempt is allowed this often: 5 a minute, so guessing even a
/// short 16-character token takes longer than anyone has.
const REFILL: Duration = Duration::from_secs(12);
/// Addresses remembered at most; past it, those back to a full bucket
/// are forgotten (a flood of addresses cannot grow this without end).
const MAX_ADDRS: usize = 4096;

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Failed attempts per client address.
#[derive(Default)]
pub(super) struct Attempts {
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

impl Attempts {
    /// `Err(wait)` while `addr` has no attempt left.
    pub fn check(&self, addr: IpAddr) -> Result<(), Duration> {
        let mut b = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        match b.get_mut(&addr) {
            Some(bucket) => {
                refill(bucket);
                if bucket.tokens >= 1.0 {
                    Ok(())
                } else {
                    Err(REFILL.mul_f64(1.0 - bucket.tokens))
                }
            }
            None => Ok(()),
        }
    }

    /// Counts one failed attempt from `addr`.
    pub fn failed(&self, addr: IpAddr) {
        let mut b = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if b.len() >= MAX_ADDRS && !b.contains_key(&addr) {
            b.retain(|_, bucket| {
                refill(bucket);
                bucket.tokens < BURST
            });
        }
        let bucket = b.entry(addr).or_insert(Bucket {
            tokens: BURST,
            at: Instant::now(),
        });
        refill(bucket);
        bucket.tokens = (bucket.tokens - 1.0).max(0.0);
    }
}

fn refill(bucket: &mut Bucket) {
    let now = Instant::now();
    let gained = now.duration_since(bucket.at).as_secs_f64() / REFILL.as_secs_f64();
    bucket.tokens = (bucket.tokens + gained).min(BURST);
    bucket.at = now;
}

/// The 429 for an address out of attempts.
pub(super) fn too_many(wait: Duration) -> axum::response::Response {
    use axum::response::IntoResponse;
    let secs = wait.as_secs().max(1);
    (
        axum::http::StatusCode::TOO_MANY_REQUESTS,
        [(axum::http::header::RETRY_AFTER, secs.to_string())],
        format!("too many failed attempts from this address; try again in {secs} s\n"),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_failures_then_paced() {
        let a = Attempts::default();
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..5 {
            assert!(a.check(ip).is_ok());
            a.failed(ip);
        }
        let wait = a.check(ip).unwrap_err();
        assert!(wait > Duration::from_secs(10) && wait <= REFILL, "{wait:?}");
        // Another address is not held.
        assert!(a.check("192.0.2.2".parse().unwrap()).is_ok());
    }
}
