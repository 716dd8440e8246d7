//! The conformance suite (`foreman/src/backend/conformance.rs`, issue 53)
//! on a real three-node swarm, `backend: swarm`: the fixture of
//! `swarm.rs` on its own octet (239), the manager drained so that every
//! job runs on a worker, whose dockerd the lost-node case kills. The
//! suite's cases replace what `swarm.rs` once did itself (a worker's
//! dockerd killed mid-task, the foreman killed and the job adopted, a
//! cancel mid-run, nothing left on any node).

use crate::conformance::{Cli, Infra, suite};
use crate::swarm::{Fixture, elapsed};
use crate::util::require_docker;

#[test]
fn the_swarm_engine_passes_the_conformance_suite() {
    require_docker();
    let t0 = std::time::Instant::now();
    let Fixture { swarm, s, .. } = Fixture::up(239);
    // Jobs on the workers only: the lost-node case kills one's dockerd.
    let me = swarm.lines(1, &["info", "--format", "{{.Swarm.NodeID}}"]);
    let drained = swarm.docker(1, &["node", "update", "--availability", "drain", &me[0]]);
    assert!(drained.status.success(), "{drained:?}");
    let mut bench = Cli::new(s, "swarm", Infra::Swarm(swarm));
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(suite::all(&mut bench));
    eprintln!("the swarm engine passed in {}", elapsed(t0));
}
