//! Egress through the gateway (issue 50): connections by phase and verdict,
//! bytes by phase and direction, in this process (the foreman serving the
//! tasks' proxies). Every series exists from the start, at zero.

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Registry, Unit};
use saheeli_protocol::egress::Phase;

use crate::store::{EgressEntry, EgressVerdict};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    task_phase: &'static str,
    verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    task_phase: &'static str,
    direction: &'static str,
}

#[derive(Debug, Default)]
pub(crate) struct Egress {
    connections: Family<VerdictLabels, Counter>,
    bytes: Family<DirectionLabels, Counter>,
}

static EGRESS: LazyLock<Egress> = LazyLock::new(|| {
    let e = Egress::default();
    for phase in Phase::ALL {
        for verdict in [
            EgressVerdict::Allowed,
            EgressVerdict::Approved,
            EgressVerdict::Refused,
        ] {
            let _ = e.connections.get_or_create(&VerdictLabels {
                task_phase: phase.as_str(),
                verdict: verdict.as_str(),
            });
        }
        for direction in ["up", "down"] {
            let _ = e.bytes.get_or_create(&DirectionLabels {
                task_phase: phase.as_str(),
                direction,
            });
        }
    }
    e
});

/// This process's egress counters.
pub(crate) fn egress() -> &'static Egress {
    &EGRESS
}

impl Egress {
    /// Counts one connection as it ends.
    pub fn record(&self, e: &EgressEntry) {
        let task_phase = e.phase.as_str();
        self.connections
            .get_or_create(&VerdictLabels {
                task_phase,
                verdict: e.verdict.as_str(),
            })
            .inc();
        for (direction, n) in [("up", e.bytes_up), ("down", e.bytes_down)] {
            self.bytes
                .get_or_create(&DirectionLabels {
                    task_phase,
                    direction,
                })
                .inc_by(n);
        }
    }

    pub(super) fn register(&self, reg: &mut Registry) {
        reg.register(
            "egress_connections",
            "Connections asked of the tasks' egress proxies, by phase and verdict",
            self.connections.clone(),
        );
        reg.register_with_unit(
            "egress",
            "Bytes through the tasks' egress proxies, by phase and direction (up: from the container)",
            Unit::Bytes,
            self.bytes.clone(),
        );
    }
}
