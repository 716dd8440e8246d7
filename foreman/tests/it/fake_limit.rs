//! A provider's rate limit, as the fake LLM enforces it (issue 26): a
//! bucket of requests and one of tokens per window, refilled continuously,
//! with both providers' real headers on every answer (OpenAI's
//! `x-ratelimit-*` with Go-style durations, Anthropic's
//! `anthropic-ratelimit-*` with RFC 3339 times) and a 429 with
//! `retry-after` when a request does not fit.

use std::time::{Duration, Instant, SystemTime};

use axum::http::HeaderMap;

/// The limit: so many requests and tokens per window (a minute at a
/// provider; shorter to run a scaled-down copy of a measurement).
#[derive(Clone, Copy, Debug)]
pub struct RateLimit {
    pub requests: u64,
    pub tokens: u64,
    pub window: Duration,
}

#[derive(Debug)]
struct Bucket {
    cap: f64,
    level: f64,
}

/// The limit's state.
#[derive(Debug)]
pub struct Limiter {
    limit: RateLimit,
    requests: Bucket,
    tokens: Bucket,
    at: Instant,
    /// 429s answered.
    pub refused: u64,
    /// Requests let through.
    pub served: u64,
}

impl Limiter {
    pub fn new(limit: RateLimit) -> Limiter {
        Limiter {
            limit,
            requests: Bucket {
                cap: limit.requests as f64,
                level: limit.requests as f64,
            },
            tokens: Bucket {
                cap: limit.tokens as f64,
                level: limit.tokens as f64,
            },
            at: Instant::now(),
            refused: 0,
            served: 0,
        }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        let secs = (now - self.at).as_secs_f64();
        let window = self.limit.window.as_secs_f64();
        for b in [&mut self.requests, &mut self.tokens] {
            b.level = (b.level + b.cap * secs / window).min(b.cap);
        }
        self.at = now;
    }

    /// Takes one request of `tokens`: the headers to answer with, and
    /// whether it was let through (else: a 429 with these headers).
    pub fn take(&mut self, tokens: u64, anthropic: bool) -> (HeaderMap, bool) {
        self.refill();
        let tokens = tokens as f64;
        let ok = self.requests.level >= 1.0 && self.tokens.level >= tokens.min(self.tokens.cap);
        if ok {
            self.requests.level -= 1.0;
            self.tokens.level -= tokens;
            self.served += 1;
        } else {
            self.refused += 1;
        }
        let mut h = self.headers(anthropic);
        if !ok {
            let window = self.limit.window.as_secs_f64();
            let need_r = (1.0 - self.requests.level).max(0.0) * window / self.requests.cap;
            let need_t = (tokens.min(self.tokens.cap) - self.tokens.level).max(0.0) * window
                / self.tokens.cap;
            let secs = need_r.max(need_t).ceil().max(1.0) as u64;
            h.insert("retry-after", secs.to_string().parse().unwrap());
        }
        (h, ok)
    }

    fn headers(&self, anthropic: bool) -> HeaderMap {
        let mut h = HeaderMap::new();
        let window = self.limit.window.as_secs_f64();
        for (name, b) in [("requests", &self.requests), ("tokens", &self.tokens)] {
            let remaining = b.level.max(0.0).floor() as u64;
            // Until the bucket is full again.
            let reset = Duration::from_secs_f64((b.cap - b.level).max(0.0) * window / b.cap);
            let (limit, left, when) = if anthropic {
                let at = SystemTime::now() + reset + Duration::from_millis(999);
                (
                    format!("anthropic-ratelimit-{name}-limit"),
                    format!("anthropic-ratelimit-{name}-remaining"),
                    (
                        format!("anthropic-ratelimit-{name}-reset"),
                        humantime::format_rfc3339_seconds(at).to_string(),
                    ),
                )
            } else {
                (
                    format!("x-ratelimit-limit-{name}"),
                    format!("x-ratelimit-remaining-{name}"),
                    (format!("x-ratelimit-reset-{name}"), go_duration(reset)),
                )
            };
            let header = |s: String| axum::http::HeaderName::try_from(s).unwrap();
            h.insert(header(limit), (b.cap as u64).to_string().parse().unwrap());
            h.insert(header(left), remaining.to_string().parse().unwrap());
            h.insert(header(when.0), when.1.parse().unwrap());
        }
        h
    }
}

/// A duration as OpenAI writes it: `20ms`, `1s`, `1.5s`, `6m0s`.
pub fn go_duration(d: Duration) -> String {
    let ms = d.as_millis() as u64;
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (m, s) = (ms / 60_000, (ms % 60_000) as f64 / 1000.0);
    let s = format!("{s:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

#[test]
fn the_fakes_durations_look_like_openais() {
    assert_eq!(go_duration(Duration::from_millis(20)), "20ms");
    assert_eq!(go_duration(Duration::from_secs(1)), "1s");
    assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
    assert_eq!(go_duration(Duration::from_secs(360)), "6m0s");
}
