//! A task's limits as the gateway checks them before every call: plain
//! data, built by [`TaskSpec::budget`](super::TaskSpec::budget) from what
//! the chain of attempts has left.

use saheeli_protocol::context::Cache;

/// A task's limits, checked before every call.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Budget {
    pub max_tokens: Option<u64>,
    pub max_cost: Option<f64>,
    /// For a third-party agent (issue 25), its `max_steps`: the gateway
    /// refuses an LLM call after this many. None for Saheeli's own loop,
    /// which counts its steps itself.
    pub max_calls: Option<u64>,
    /// The prompt caching the task asked for (`cache:`): it sets the
    /// breakpoints sent and what a cache write costs, so the budget's
    /// checks depend on it.
    pub cache: Cache,
}
