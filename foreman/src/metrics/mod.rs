//! Prometheus metrics: what `GET /metrics` and `saheeli metrics` show, in
//! the OpenMetrics text format (the `prometheus-client` crate).
//!
//! Nothing here runs inside the reconciler loop. Values that must agree
//! with `task status` and survive a foreman restart are counted from
//! SQLite at scrape time: tasks by state, transitions and their reasons,
//! durations and queue waits (from the event trail), tokens, cost and LLM
//! calls (from the tasks and the call ledger), waiting tasks and servos.
//! Latencies only the working process sees are recorded by one-line hooks
//! into [`live`]: the Docker backend's timing helper, the gateway's
//! handler, collection. Label values come from fixed sets (states, reason
//! codes, operations, causes), config.yaml's providers, or at most
//! [`labels::MAX_MODELS`] models: never a task id.
//!
//! Units are in every name (`_seconds`, `_bytes`, `_usd`). Counters and
//! gauges also carry a `# UNIT` line; histograms do not, since some
//! parsers refuse one there (it is optional).
//!
//! # Layout
//!
//! - `render`: [`Metrics`], the handle a serving foreman keeps in its
//!   context (`render`, `scrape`), and [`CONTENT_TYPE`].
//! - `tally`: the sums read on from cursors over the event trail and the
//!   call ledger, and the gauges of one scrape.
//! - `live`: this process's instruments and their bounded label enums.
//! - `labels`: provider and model labels, bounded.
//! - `egress`: connections and bytes through the tasks' egress proxies.
//! - `admission`: the serving foreman's limit and circuit breaker, from
//!   its `admission` row.
//! - `pools`: each `pools:` entry's running, cap and queued tasks.

mod admission;
mod egress;
mod labels;
mod live;
mod pools;
mod render;
mod tally;
#[cfg(test)]
mod tests;

pub(crate) use egress::egress;
pub(crate) use live::{Claim, CollectPath, DockerOp, Refusal, RetryCause, live};
#[allow(
    unused_imports,
    reason = "for `GET /metrics`, which the HTTP server mounts"
)]
pub(crate) use render::CONTENT_TYPE;
pub(crate) use render::{ADMISSION_FRESH_MS, Metrics, Source};
