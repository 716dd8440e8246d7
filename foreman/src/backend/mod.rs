//! What the reconciler asks of an execution engine: check the image,
//! create and start a hardened servo, wait for it, stop it, find its
//! workspace, list what carries Saheeli's labels, remove it.
//!
//! The local Docker engine is the one backend today (`docker`, with
//! `disk` for size-limited workspaces). A second one (Docker Swarm) is what
//! will earn an enum or a trait here; until then the reconciler calls
//! `docker` directly.

pub(crate) mod disk;
pub(crate) mod docker;
