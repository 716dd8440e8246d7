//! This host's Docker engine: a container per task on its own workspace
//! (a size-limited image bound in, or a named volume: `home`), its
//! gateway's socket directory bind-mounted, the workspace read back from
//! its directory on this host or through the archive API.
//!
//! # Layout
//!
//! - `launch`: the engine's handles, workspace and container, inputs, start.
//! - `home`: a workspace's image or volume, by name: made, found, removed.
//! - `watch`: `docker wait` as phases (reconnecting to a restarting
//!   daemon), stop and kill.
//! - `collect`: the workspace home, the task's containers and workspace gone.
//! - `find`: a stopped foreman's servo, what it left, a parked workspace.
//! - `sweep`: labelled leftovers of ended tasks.
//! - `pool`, `keep`: warm servos (issue 28): claimed by `prepare`, kept
//!   warm in the background, removed on stop; what a stopped foreman's
//!   pool left.

mod capabilities;
pub(crate) use capabilities::CAPABILITIES;
mod collect;
mod find;
mod home;
mod keep;
mod launch;
mod pool;
mod set_up;
mod sweep;
mod watch;

pub(crate) use collect::collect_workspace;
pub(crate) use keep::Pace;
pub(crate) use launch::Local;
pub(crate) use pool::{ORPHAN_SLOT_AGE, POOL_PREFIX, remove_warm, slot_of};

/// The socket directory's name of the warm servo `name` (an error for a
/// name that is not a warm servo's).
pub(crate) fn socket_of(name: &str) -> anyhow::Result<String> {
    pool::socket_name(name)
        .ok_or_else(|| anyhow::anyhow!("`{name}` is not a warm servo's container name"))
}
pub(crate) use sweep::LocalLeftovers;
pub(crate) use watch::LocalPhases;

/// How long the engine waits for a restarting Docker daemon.
pub(crate) const DAEMON_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);
