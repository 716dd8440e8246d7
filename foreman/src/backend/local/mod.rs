//! This host's Docker engine: a container per task on a named volume
//! (size-limited by `disk`), its gateway's socket directory bind-mounted,
//! the workspace read back from the volume's directory or through the
//! archive API.
//!
//! # Layout
//!
//! - `launch`: the engine's handles, volume and container, inputs, start.
//! - `watch`: `docker wait` as phases (reconnecting to a restarting
//!   daemon), stop and kill.
//! - `collect`: the workspace home, the task's containers and volume gone.
//! - `find`: a stopped foreman's servo, what it left, a parked volume.
//! - `sweep`: labelled leftovers of ended tasks.

mod collect;
mod find;
mod launch;
mod sweep;
mod watch;

pub(crate) use collect::collect_workspace;
pub(crate) use launch::Local;
pub(crate) use sweep::LocalLeftovers;
pub(crate) use watch::LocalPhases;

/// How long the engine waits for a restarting Docker daemon.
pub(crate) const DAEMON_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);
