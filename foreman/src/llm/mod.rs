//! The LLM proxy of a task's gateway: where a call goes (`providers`, in
//! `gateway` until it moves to config), what it may spend, and what it
//! cost. The servo speaks OpenAI chat completions to it (`chat`); a
//! third-party agent speaks its vendor's own API (`vendor`). Before each
//! call the task's budget is checked and the call's estimate reserved;
//! the provider is picked for the model, the API key added (it never
//! enters a container), Anthropic translated, what is worth retrying
//! retried, and every billed answer counted. Every answer and log line is
//! redacted for the keys.
//!
//! # Layout
//!
//! - `api`: the wire format of a route and the model an agent may name;
//!   `sse`: where a provider's event ends.
//! - `task`: one task's side (`GatewayState`): route, budget, meter, live
//!   followers, replay script; JSON answers and errors, redacted.
//! - `chat`: the built-in loop's route; `provider_call`: its call to the
//!   provider, tried, rate-limited and read back; `anthropic`: the
//!   translation; `assemble`: streamed answers put back together; `live`:
//!   their text to the task's live followers (`GET /saheeli/v1/live`).
//! - `meter`: budget, usage and reservations; `input_bound`: the most
//!   input tokens a call can be billed, and `count` the provider's own
//!   count where that bound would refuse it (issue 47); `ledger`: the same
//!   per call in SQLite, for a foreman that adopts a task.
//! - `upstream`: what every task's gateway shares (the HTTP client, the
//!   keys' redactor, the rate limits, the ledger); `limits`,
//!   `limit_headers`: one shared budget of requests and tokens per
//!   provider and model, learned from the rate-limit headers (issue 26);
//!   `retry`: what is worth retrying.
//! - `usage`, `pricing`: what a provider billed, cached tokens included,
//!   and what that costs; `shape`: the request's shape and output cap.
//! - `redact`, `splice`: keys out, also of a stream whose text is split
//!   between events; `record`: the trajectory lines of every call, with
//!   the per-token `logprobs` a provider returned.
//! - `held`: the agent's calls while the gateway holds them, for the
//!   supervisor's freezer (issue 51): a frozen servo is never answered.
//! - `probe`, `doctor`: what a local server says, and `saheeli doctor`.
//! - `vendor`: the vendors' own APIs for third-party agents (issue 25).

pub(crate) mod anthropic;
pub(crate) mod api;
pub(crate) mod assemble;
pub(crate) mod chat;
pub(crate) mod count;
pub(crate) mod doctor;
pub(crate) mod held;
pub(crate) mod inbox;
pub(crate) mod input_bound;
pub(crate) mod ledger;
pub(crate) mod limit_headers;
pub(crate) mod limits;
pub(crate) mod live;
pub(crate) mod logprobs;
pub(crate) mod meter;
pub(crate) mod pricing;
pub(crate) mod probe;
pub(crate) mod provider_call;
pub(crate) mod record;
#[cfg(test)]
pub(crate) mod recorded;
pub(crate) mod redact;
pub(crate) mod retry;
pub(crate) mod shape;
pub(crate) mod splice;
pub(crate) mod sse;
pub(crate) mod task;
pub(crate) mod upstream;
pub(crate) mod usage;
pub(crate) mod vendor;

pub(crate) use meter::{Budget, Meter};
pub(crate) use redact::Redactor;
pub(crate) use task::GatewayState;
pub(crate) use upstream::{Upstream, redact_keys, trajectories_dir};
