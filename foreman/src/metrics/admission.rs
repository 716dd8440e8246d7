//! The admission gauges: a serving foreman's concurrency limit, its
//! running tasks and its circuit breaker, from the `admission` row it
//! keeps fresh (so `saheeli metrics` and `task status` agree with it).

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use strum::IntoEnumIterator;

use crate::admission::Breaker;
use crate::store::AdmissionRow;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BreakerLabels {
    state: &'static str,
}

/// Registers the gauges of `row` (the freshest serving foreman's), or,
/// with no foreman serving, the breaker's states at zero and nothing else.
pub(super) fn register(reg: &mut Registry, row: Option<&AdmissionRow>) {
    let breaker: Family<BreakerLabels, Gauge> = Family::default();
    for state in Breaker::iter() {
        let state = state.as_str();
        let on = row.is_some_and(|r| r.breaker == state);
        breaker
            .get_or_create(&BreakerLabels { state })
            .set(on.into());
    }
    reg.register(
        "admission_breaker_state",
        "The serving foreman's circuit breaker: 1 for its state (closed, open, half_open)",
        breaker,
    );
    let Some(row) = row else { return };
    let limit: Gauge = Gauge::default();
    limit.set(row.limit);
    reg.register(
        "admission_limit",
        "How many tasks the serving foreman may run now (`concurrency`, or what `auto` chose)",
        limit,
    );
    if let Some(n) = row.pool_idle {
        let idle: Gauge = Gauge::default();
        idle.set(n);
        reg.register(
            "pool_idle",
            "Warm servos started and idle in the pools of every serving foreman, waiting for a task (issue 28)",
            idle,
        );
    }
    let running: Gauge = Gauge::default();
    running.set(row.running);
    reg.register(
        "admission_running",
        "Tasks holding a slot in the serving foreman",
        running,
    );
    for (name, help, ms) in [
        (
            "admission_launch_latency",
            "Smoothed time Docker took to create and start a servo container",
            row.latency_ms,
        ),
        (
            "admission_launch_baseline",
            "The create and start time `auto` compares with (its lowest smoothed value)",
            row.baseline_ms,
        ),
    ] {
        if let Some(ms) = ms {
            let g: Gauge<f64, AtomicU64> = Gauge::default();
            g.set(ms / 1000.0);
            reg.register_with_unit(name, help, Unit::Seconds, g);
        }
    }
}
