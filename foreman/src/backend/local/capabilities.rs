//! What this host's Docker engine can do for a task (issue 53): every
//! capability, each tested on a real daemon (the test named beside it).
//! `conformance::` names a case of the conformance suite
//! (`backend/conformance.rs`), which `it::conformance_local` runs on this
//! engine; each "no" is refused at submit (`conformance::refused`).

use crate::backend::capabilities::Support::{self, No, Yes};
use crate::task::Capability::{self, *};

/// The local engine's declaration.
pub(crate) const CAPABILITIES: [(Capability, Support); 15] = [
    (ThirdPartyAgents, Yes), // it::agents
    (TaskImages, Yes),       // it::bench_tasks
    (HiddenTests, Yes),      // it::bench_tasks
    (Verify, Yes),           // conformance::verify; it::verify_fresh
    (RootAgent, Yes),        // it::bench_root
    (SetUp, Yes),            // it::setup_cache
    (Egress, Yes),           // it::egress
    (ChildTasks, Yes),       // it::children
    (DiskQuota, Yes),        // it::sandbox
    (Parking, Yes),          // conformance::park_and_resume; it::human
    (LiveLogs, Yes),         // it::human (attach)
    (WarmPool, Yes),         // it::pool
    (
        Gpus,
        No("no container is given a GPU yet (no device requests are made)"),
    ),
    (Snapshots, Yes),  // it::step_snapshots
    (Suspension, Yes), // it::freeze
];
