//! What a call costs when part of its input came from, or went into, the
//! provider's prompt cache (issue 26).
//!
//! `prices:` may set `cache_read_per_mtok` and `cache_write_per_mtok`;
//! unset, they follow the provider's published ratios to the input price:
//!
//! - Anthropic: reads 0.1×; writes 1.25× with `cache: 5m`, 2× with `1h`.
//! - OpenAI: writes cost nothing extra (1×); reads 0.5× (`gpt-4o`, `o1`
//!   and unknown models), 0.25× (`gpt-4.1`, `o3`, `o4-mini`), 0.1×
//!   (`gpt-5`).
//!
//! With `cache: off` nothing is written to a cache on purpose, and a call
//! is reserved at the input price; otherwise its input is reserved at the
//! dearer of the input and write prices (every token may be a write), so a
//! budget refusal counts cache pricing.

use saheeli_protocol::chat::ChatUsage;
use saheeli_protocol::context::Cache;

use crate::config::{Price, ProviderKind};

/// USD per million tokens of each kind, defaults resolved.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Rates {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
    /// What each input token is reserved at before the call.
    pub input_worst: f64,
}

/// OpenAI's cached-input discount by model (its pricing page).
fn openai_read_ratio(model: &str) -> f64 {
    if model.starts_with("gpt-5") {
        0.1
    } else if model.starts_with("gpt-4.1") || model.starts_with("o3") || model.starts_with("o4") {
        0.25
    } else {
        0.5
    }
}

/// A price's rates for `model` on a provider of `kind`, for a task caching
/// with `cache`.
pub(crate) fn rates(price: Price, kind: ProviderKind, model: &str, cache: Cache) -> Rates {
    let (read, write) = match kind {
        ProviderKind::Anthropic => (
            0.1,
            match cache {
                Cache::OneHour => 2.0,
                Cache::FiveMinutes | Cache::Off => 1.25,
            },
        ),
        ProviderKind::Openai => (openai_read_ratio(model), 1.0),
    };
    let cache_read = price
        .cache_read_per_mtok
        .unwrap_or(price.input_per_mtok * read);
    let cache_write = price
        .cache_write_per_mtok
        .unwrap_or(price.input_per_mtok * write);
    let input_worst = match cache {
        Cache::Off => price.input_per_mtok,
        _ => price.input_per_mtok.max(cache_write),
    };
    Rates {
        input: price.input_per_mtok,
        output: price.output_per_mtok,
        cache_read,
        cache_write,
        input_worst,
    }
}

impl Rates {
    /// Micro-USD for what a call used: uncached input at the input price,
    /// cache reads and writes at theirs, output at the output price.
    pub fn micro_usd(&self, u: &ChatUsage) -> u64 {
        let read = u.cache_read_tokens.min(u.prompt_tokens);
        let write = u.cache_write_tokens.min(u.prompt_tokens - read);
        let plain = u.prompt_tokens - read - write;
        // per-million-token price × tokens = micro-USD
        (plain as f64 * self.input
            + read as f64 * self.cache_read
            + write as f64 * self.cache_write
            + u.completion_tokens as f64 * self.output)
            .round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(read: Option<f64>, write: Option<f64>) -> Price {
        Price {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            cache_read_per_mtok: read,
            cache_write_per_mtok: write,
        }
    }

    #[test]
    fn defaults_follow_the_providers_ratios() {
        use Cache::*;
        use ProviderKind::*;
        type Case<'a> = (
            ProviderKind,
            &'a str,
            Cache,
            Option<f64>,
            Option<f64>,
            f64,
            f64,
            f64,
        );
        let cases: &[Case] = &[
            // kind, model, cache, read set, write set, read, write, worst
            (
                Anthropic,
                "claude-sonnet-4-5",
                FiveMinutes,
                None,
                None,
                0.3,
                3.75,
                3.75,
            ),
            (
                Anthropic,
                "claude-sonnet-4-5",
                OneHour,
                None,
                None,
                0.3,
                6.0,
                6.0,
            ),
            (
                Anthropic,
                "claude-sonnet-4-5",
                Off,
                None,
                None,
                0.3,
                3.75,
                3.0,
            ),
            (
                Anthropic,
                "claude-sonnet-4-5",
                OneHour,
                Some(0.5),
                Some(4.0),
                0.5,
                4.0,
                4.0,
            ),
            (
                Openai,
                "gpt-4o-mini",
                FiveMinutes,
                None,
                None,
                1.5,
                3.0,
                3.0,
            ),
            (Openai, "gpt-4.1", FiveMinutes, None, None, 0.75, 3.0, 3.0),
            (Openai, "o4-mini", FiveMinutes, None, None, 0.75, 3.0, 3.0),
            (Openai, "gpt-5-mini", FiveMinutes, None, None, 0.3, 3.0, 3.0),
        ];
        for (kind, model, cache, r, w, read, write, worst) in cases {
            let got = rates(price(*r, *w), *kind, model, *cache);
            let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
            assert!(close(got.cache_read, *read), "{model} {cache:?}: {got:?}");
            assert!(close(got.cache_write, *write), "{model} {cache:?}: {got:?}");
            assert!(close(got.input_worst, *worst), "{model} {cache:?}: {got:?}");
        }
    }

    #[test]
    fn cached_tokens_are_priced_exactly() {
        let r = rates(
            price(None, None),
            ProviderKind::Anthropic,
            "claude-x",
            Cache::FiveMinutes,
        );
        // 1000 plain, 10,000 read, 2000 written, 500 out:
        // 1000×3 + 10000×0.3 + 2000×3.75 + 500×15 = 3000+3000+7500+7500.
        let u = ChatUsage {
            prompt_tokens: 13_000,
            completion_tokens: 500,
            total_tokens: 13_500,
            cache_read_tokens: 10_000,
            cache_write_tokens: 2000,
        };
        assert_eq!(r.micro_usd(&u), 21_000);
        // A provider reporting more cached than input is not trusted past it.
        let odd = ChatUsage {
            prompt_tokens: 10,
            cache_read_tokens: 50,
            cache_write_tokens: 50,
            ..Default::default()
        };
        assert_eq!(r.micro_usd(&odd), 3);
    }
}
