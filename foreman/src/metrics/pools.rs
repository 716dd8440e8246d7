//! The pools' gauges (issue 52): for each entry of `pools:`, its tasks
//! holding a slot, its cap and its queued tasks, counted from the
//! database at scrape time (so every foreman's tasks are in them).
//! Labels are config.yaml's pools, never a task's.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::admission::pools::PoolUsage;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    pool: String,
}

/// Registers `saheeli_pool_running`, `_max` and `_queued` (nothing
/// without pools).
pub(super) fn register(reg: &mut Registry, usage: &[PoolUsage]) {
    if usage.is_empty() {
        return;
    }
    type Value = fn(&PoolUsage) -> usize;
    let gauges: [(&str, &str, Value); 3] = [
        (
            "pool_running",
            "Tasks of each `pools:` entry holding a slot (starting or running), over every foreman of the database",
            |u| u.running,
        ),
        ("pool_max", "Each `pools:` entry's cap (`max`)", |u| u.max),
        ("pool_queued", "Queued tasks of each `pools:` entry", |u| {
            u.queued
        }),
    ];
    for (name, help, value) in gauges {
        let family: Family<PoolLabels, Gauge> = Family::default();
        for u in usage {
            family
                .get_or_create(&PoolLabels {
                    pool: u.pool.clone(),
                })
                .set(value(u) as i64);
        }
        reg.register(name, help, family);
    }
}
