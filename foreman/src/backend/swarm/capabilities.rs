//! What a Docker Swarm can do for a task (issue 53), and why not where it
//! cannot: each "yes" is tested on the real three-node swarm the tests
//! build (the test named beside it; `conformance::` names a case of the
//! conformance suite, `backend/conformance.rs`, which
//! `it::conformance_swarm` runs on this engine). Each "no" is refused at
//! submit, checked by `conformance::refused`.

use crate::backend::capabilities::Support::{self, No, Yes};
use crate::task::Capability::{self, *};

/// The swarm engine's declaration.
pub(crate) const CAPABILITIES: [(Capability, Support); 15] = [
    (ThirdPartyAgents, Yes), // it::swarm_agents; it::swarm_agents_more
    (
        TaskImages,
        No("a node would need the task's image from the swarm's registry"),
    ),
    (
        HiddenTests,
        No("a node's verify container would need the hidden tests"),
    ),
    (Verify, Yes), // conformance::verify; it::swarm_verify
    (
        RootAgent,
        No("a node's servo and workspace belong to the agent user"),
    ),
    (
        SetUp,
        No("a node has no set-up container or cache yet; bake the set-up into `image:`"),
    ),
    (Egress, No("the swarm's relay carries no egress yet")),
    (
        ChildTasks,
        No("the swarm's gateway does not serve spawn_task and wait_tasks yet"),
    ),
    (
        DiskQuota,
        No("a job's workspace is a plain node-local volume with no size limit"),
    ),
    (Parking, Yes),  // conformance::park_and_resume; it::swarm_park
    (LiveLogs, Yes), // it::swarm_verify (live logs); it::swarm_pool (a warm job's)
    (WarmPool, Yes), // it::swarm_pool; it::conformance_swarm_pool
    (
        Gpus,
        No("no job is given a GPU yet (no generic resources are asked)"),
    ),
    (
        Snapshots,
        No(
            "a swarm servo's workspace is on its node, which the foreman does not copy from while it runs (forks of an ended task at its last step work)",
        ),
    ),
    (
        Suspension,
        No(
            "a swarm servo waits unfrozen: `suspend_after` freezes only on the local engine (the node's engine could, as it stops; untested)",
        ),
    ),
];
