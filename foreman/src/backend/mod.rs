//! What the reconciler asks of an execution engine: check the image,
//! create and start a hardened servo, wait for it, stop it, find its
//! workspace, list what carries Saheeli's labels, remove it.
//!
//! Two engines: the local Docker daemon (`docker`, with `disk` for
//! size-limited workspaces), a container per task, and Docker Swarm
//! (`swarm`), a job service per task on any node. [`Backend`] is what the
//! reconciler holds: it picks the supervisor (launch, watch, collect) for
//! the engine; the shape of the loop is the same for both. [`TaskEngine`]
//! is where one launch runs, for what acts on its running container.

pub(crate) mod disk;
pub(crate) mod docker;
mod engine;
pub(crate) mod swarm;

pub(crate) use engine::TaskEngine;

/// The engine a foreman runs its tasks on (`backend:` in config.yaml).
#[derive(Clone)]
pub(crate) enum Backend {
    /// This host's Docker engine (the reconciler's `docker` handle).
    Docker,
    /// A swarm: its manager, its address (for reaching the nodes alike),
    /// and the TCP gateway the remote servos call.
    Swarm {
        manager: bollard::Docker,
        manager_addr: String,
        network: String,
        gateway_url: String,
        hub: crate::gateway::Hub,
        /// What launch tokens are derived from (`swarm::token_key`).
        key: std::sync::Arc<Vec<u8>>,
        /// Removals of ended launches, run after their slot is free;
        /// `serve` waits for them before it exits.
        cleanups: tokio_util::task::TaskTracker,
    },
}
