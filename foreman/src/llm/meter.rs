//! A task's budget and what it spent, with reservations: each call holds
//! its estimate (input, plus the output cap it is given) until its real
//! usage is known, so parallel calls cannot all pass one check. The input
//! estimate is an upper bound (`input_bound`: what an earlier call of the
//! same conversation was billed plus one token per byte added, else the
//! request's bytes: no tokenizer makes more tokens than bytes) and the
//! output is capped to what is left, so what a task is billed never
//! passes `max_tokens` (case 25, issue 47).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use saheeli_protocol::Reason;
use saheeli_protocol::chat::ChatUsage;

use super::input_bound::{self, Counted, Shape};
use super::pricing::Rates;

pub(crate) use crate::spec::Budget;

/// Fewest output tokens a call is allowed: below this no tool call fits,
/// and the call is refused instead of being cut to nothing.
pub(crate) const MIN_OUTPUT: u64 = 256;

/// Everything that passed through one task's gateway.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    pub calls: AtomicU64,
    pub input_tokens: AtomicU64,
    pub output_tokens: AtomicU64,
    /// Parts of `input_tokens` read from and written to the provider's cache.
    pub cache_read_tokens: AtomicU64,
    pub cache_write_tokens: AtomicU64,
    /// Millionths of a USD.
    pub cost_micro_usd: AtomicU64,
    pub malformed: AtomicU64,
    /// The reason a call was refused or failed for good: `auth`,
    /// `bad_request`, `budget`.
    pub fatal: Mutex<Option<Reason>>,
    /// Held by calls in flight. Reserving and settling take this lock, so
    /// the check and the reservation are one step.
    reserved: Mutex<Reserved>,
    /// The last calls settled with a reported input count, newest last:
    /// what bounds the next call's input (`input_bound`).
    counted: Mutex<VecDeque<Counted>>,
}

/// How many settled calls are kept to bound the next one's input: an
/// agent's main conversation and a few side ones (titles, sub-agents).
const COUNTED_KEPT: usize = 4;

#[derive(Debug, Default)]
struct Reserved {
    tokens: u64,
    micro_usd: u64,
    /// Carved out for child tasks (issue 30): a running child's whole
    /// budget, an ended child's use.
    carved_tokens: u64,
    carved_micro_usd: u64,
}

/// What one call may spend, held until it settles.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Grant {
    pub tokens: u64,
    pub micro_usd: u64,
    /// The output cap to send upstream; None leaves the request's own.
    pub max_output: Option<u64>,
}

impl Grant {
    pub fn cost_usd(&self) -> f64 {
        self.micro_usd as f64 / 1e6
    }
}

/// USD per token → micro-USD for `tokens`.
fn micro(tokens: u64, per_mtok: f64) -> u64 {
    (tokens as f64 * per_mtok).ceil() as u64
}

impl Meter {
    pub fn tokens(&self) -> u64 {
        self.input_tokens.load(Ordering::Relaxed) + self.output_tokens.load(Ordering::Relaxed)
    }

    pub fn cost(&self) -> f64 {
        self.cost_micro_usd.load(Ordering::Relaxed) as f64 / 1e6
    }

    pub fn fatal(&self) -> Option<Reason> {
        *self.fatal.lock().unwrap()
    }

    pub fn set_fatal(&self, reason: Reason) {
        *self.fatal.lock().unwrap() = Some(reason);
    }

    /// Cached input so far: (read, written).
    pub fn cached(&self) -> (u64, u64) {
        (
            self.cache_read_tokens.load(Ordering::Relaxed),
            self.cache_write_tokens.load(Ordering::Relaxed),
        )
    }

    /// Starts from cached usage already spent (an adopted task).
    pub fn seed_cached(&self, read: u64, write: u64) {
        self.cache_read_tokens.store(read, Ordering::Relaxed);
        self.cache_write_tokens.store(write, Ordering::Relaxed);
    }

    /// Starts from usage already spent (a task adopted after a restart).
    pub fn seed(&self, input: u64, output: u64, cost_usd: f64) {
        self.input_tokens.store(input, Ordering::Relaxed);
        self.output_tokens.store(output, Ordering::Relaxed);
        self.cost_micro_usd
            .store((cost_usd * 1e6).round() as u64, Ordering::Relaxed);
    }

    /// What the task's children hold of its budget now (issue 30).
    pub fn set_carved(&self, tokens: u64, cost_usd: f64) {
        let mut held = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        held.carved_tokens = tokens;
        held.carved_micro_usd = (cost_usd * 1e6).round() as u64;
    }

    /// The most input tokens a request of `shape` can be billed, from the
    /// calls settled before it (`input_bound::bound`).
    pub fn input_bound(&self, shape: &Shape) -> u64 {
        let mut counted = self.counted.lock().unwrap_or_else(|p| p.into_inner());
        input_bound::bound(shape, counted.make_contiguous())
    }

    /// Keeps what a settled call of `shape` was billed for its input (cached
    /// tokens included), to bound the calls after it.
    pub fn counted(&self, shape: Shape, input_tokens: u64) {
        let mut counted = self.counted.lock().unwrap_or_else(|p| p.into_inner());
        if counted.len() == COUNTED_KEPT {
            counted.pop_front();
        }
        counted.push_back(Counted {
            shape,
            tokens: input_tokens,
        });
    }

    /// Reserves a call sending at most `input` tokens and asking for up to
    /// `want_output` (None: no limit asked). The output cap is cut to what
    /// the budget leaves; a call for which less than [`MIN_OUTPUT`] is left
    /// is refused with the reason.
    pub fn reserve(
        &self,
        budget: &Budget,
        price: Option<Rates>,
        input: u64,
        want_output: Option<u64>,
    ) -> Result<Grant, String> {
        let mut held = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        let mut cap = want_output;
        if let Some(max) = budget.max_tokens {
            let used = self.tokens() + held.carved_tokens;
            let left = max.saturating_sub(used + held.tokens);
            if left < input + MIN_OUTPUT {
                return Err(format!(
                    "token budget: {used} of {max} used and {} held by calls in flight; this call \
                     sends up to {input} tokens (the most it can be: an earlier call's count plus \
                     one per byte added, or one per byte) and needs room for {MIN_OUTPUT} more",
                    held.tokens
                ));
            }
            cap = Some(cap.unwrap_or(u64::MAX).min(left - input));
        }
        if let (Some(max), Some(p)) = (budget.max_cost, price) {
            let used = self.cost_micro_usd.load(Ordering::Relaxed) + held.carved_micro_usd;
            let left = ((max * 1e6) as u64).saturating_sub(used + held.micro_usd);
            // Every input token may be a cache write: reserved at the dearer price.
            let need = micro(input, p.input_worst) + micro(MIN_OUTPUT, p.output);
            if left < need {
                return Err(format!(
                    "cost budget: ${:.4} of ${max:.4} used and ${:.4} held by calls in flight; \
                     this call costs about ${:.4} more",
                    used as f64 / 1e6,
                    held.micro_usd as f64 / 1e6,
                    need as f64 / 1e6
                ));
            }
            if p.output > 0.0 {
                let room = left - micro(input, p.input_worst);
                let affordable = (room as f64 / p.output).floor() as u64;
                cap = Some(cap.unwrap_or(u64::MAX).min(affordable));
            }
        }
        let out = cap.unwrap_or(0);
        let grant = Grant {
            tokens: input + out,
            micro_usd: price.map_or(0, |p| micro(input, p.input_worst) + micro(out, p.output)),
            max_output: cap,
        };
        held.tokens += grant.tokens;
        held.micro_usd += grant.micro_usd;
        Ok(grant)
    }

    /// Releases a grant and bills what the call really used.
    pub fn settle(&self, grant: &Grant, usage: ChatUsage, price: Option<Rates>) -> u64 {
        let mut held = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        held.tokens = held.tokens.saturating_sub(grant.tokens);
        held.micro_usd = held.micro_usd.saturating_sub(grant.micro_usd);
        self.input_tokens
            .fetch_add(usage.prompt_tokens, Ordering::Relaxed);
        self.output_tokens
            .fetch_add(usage.completion_tokens, Ordering::Relaxed);
        self.cache_read_tokens
            .fetch_add(usage.cache_read_tokens, Ordering::Relaxed);
        self.cache_write_tokens
            .fetch_add(usage.cache_write_tokens, Ordering::Relaxed);
        let cost = price.map_or(0, |p| p.micro_usd(&usage));
        self.cost_micro_usd.fetch_add(cost, Ordering::Relaxed);
        cost
    }
}

#[cfg(test)]
mod tests {
    use saheeli_protocol::context::Cache;

    use super::*;

    #[test]
    fn parallel_reservations_cannot_overspend() {
        let m = Meter::default();
        let budget = Budget {
            max_tokens: Some(2 * 1020 + 100),
            ..Budget::default()
        };
        let grants: Vec<_> = (0..8)
            .map(|_| m.reserve(&budget, None, 20, Some(1000)))
            .collect();
        assert_eq!(grants.iter().filter(|g| g.is_ok()).count(), 2);
        let g = grants[0].clone().unwrap();
        assert_eq!(g.max_output, Some(1000));
        // Settling frees the reservation and bills the real usage.
        m.settle(
            &g,
            ChatUsage {
                prompt_tokens: 10,
                completion_tokens: 5,
                total_tokens: 15,
                ..Default::default()
            },
            None,
        );
        assert_eq!(m.tokens(), 15);
        // Now a huge request is capped to what is left.
        let capped = m.reserve(&budget, None, 20, Some(1 << 40)).unwrap();
        assert_eq!(capped.max_output, Some(2140 - 15 - 1020 - 20));
        // Tokens carved out for children are not the task's to spend.
        m.settle(&capped, ChatUsage::default(), None);
        m.set_carved(1000, 0.0);
        assert!(m.reserve(&budget, None, 20, Some(1 << 40)).is_err());
        // What an ended child did not use comes back.
        m.set_carved(500, 0.0);
        let after = m.reserve(&budget, None, 20, Some(1 << 40)).unwrap();
        assert_eq!(after.max_output, Some(2140 - 15 - 1020 - 500 - 20));
    }

    #[test]
    fn cost_budgets_cap_output_too() {
        let m = Meter::default();
        let budget = Budget {
            max_cost: Some(1.0),
            ..Budget::default()
        };
        let price = Some(rates(100.0, 1000.0, Cache::Off));
        // 1000 input tokens cost $0.10; $0.90 buys 900 output tokens.
        let g = m.reserve(&budget, price, 1000, None).unwrap();
        assert_eq!(g.max_output, Some(900));
        assert!(m.reserve(&budget, price, 1000, None).is_err());
        // Unlimited: no cap added.
        let free = Meter::default();
        let g = free.reserve(&Budget::default(), None, 1000, None).unwrap();
        assert_eq!(g.max_output, None);
    }

    fn rates(input: f64, output: f64, cache: Cache) -> Rates {
        let price = crate::config::Price {
            input_per_mtok: input,
            output_per_mtok: output,
            ..Default::default()
        };
        crate::llm::pricing::rates(
            price,
            crate::config::ProviderKind::Anthropic,
            "claude-x",
            cache,
        )
    }

    /// Issue 26: a budget refusal counts cache pricing. A call's input is
    /// reserved at the cache-write price (every token may be written), so
    /// a call the input price would let through is refused with `1h`
    /// (writes at 2×); and what is billed prices reads at 0.1×.
    #[test]
    fn budget_refusal_counts_cache_pricing() {
        let budget = |cache| Budget {
            max_cost: Some(0.015),
            cache,
            ..Default::default()
        };
        // 3,000 input bytes: $0.009 at $3/Mtok, $0.018 as 1h writes; the
        // smallest output ($15/Mtok × 256) adds $0.00384.
        let off = Meter::default();
        let off_rates = rates(3.0, 15.0, Cache::Off);
        assert!(
            off.reserve(&budget(Cache::Off), Some(off_rates), 3000, Some(10))
                .is_ok()
        );
        let hour = Meter::default();
        let hour_rates = rates(3.0, 15.0, Cache::OneHour);
        let refused = hour
            .reserve(&budget(Cache::OneHour), Some(hour_rates), 3000, Some(10))
            .unwrap_err();
        assert!(refused.contains("cost budget"), "{refused}");
        // Settled: 100,000 read at $0.30/Mtok, 1,000 written at $6, 50 plain at $3.
        let m = Meter::default();
        let g = m
            .reserve(&Budget::default(), Some(hour_rates), 10, Some(10))
            .unwrap();
        let cost = m.settle(
            &g,
            ChatUsage {
                prompt_tokens: 101_050,
                completion_tokens: 100,
                total_tokens: 101_150,
                cache_read_tokens: 100_000,
                cache_write_tokens: 1000,
            },
            Some(hour_rates),
        );
        assert_eq!(cost, 30_000 + 6000 + 150 + 1500);
        assert_eq!(m.cached(), (100_000, 1000));
        assert_eq!(m.tokens(), 101_150);
    }
}
