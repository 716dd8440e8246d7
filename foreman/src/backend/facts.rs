//! What an engine reports: facts about one launch of a servo (where it
//! is, how it runs, what came back), never a task's state. The supervisor
//! decides what the facts mean for the task.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use saheeli_protocol::TaskId;

use super::docker::DaemonFault;

/// Why an engine could not do what it was asked. A caller branches on the
/// variant: the daemon's faults are retried uncounted, a missing image or
/// a vanished object never is.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EngineError {
    /// The engine did not answer, or failed on its own side (a 5xx, a
    /// timeout): not the task's fault.
    #[error("{error:#}")]
    Unreachable {
        fault: DaemonFault,
        error: anyhow::Error,
    },
    /// The servo image is not there; no retry helps until it is built.
    #[error("{0:#}")]
    ImageMissing(anyhow::Error),
    /// What the launch needs is gone (a parked workspace): final.
    #[error("{0}")]
    Gone(String),
    /// The task's own environment could not be made: its image did not
    /// build, a `setup:` command failed. Final: no retry helps.
    #[error("{0:#}")]
    Setup(anyhow::Error),
    /// A `setup:` or `maintenance:` command failed (issue 50): the task
    /// ends `setup_failed`, the command's output in its detail. Final.
    #[error("{0}")]
    SetupFailed(String),
    #[error("{0:#}")]
    Other(anyhow::Error),
}

impl EngineError {
    /// Sorts a Docker call's error by cause.
    pub fn of(error: anyhow::Error) -> EngineError {
        if let Some(fault) = super::docker::daemon_fault(&error) {
            return EngineError::Unreachable { fault, error };
        }
        if error
            .downcast_ref::<super::docker::ImageMissing>()
            .is_some()
        {
            return EngineError::ImageMissing(error);
        }
        EngineError::Other(error)
    }

    /// Sorts an error making the task's own environment: the daemon's
    /// faults stay the daemon's, everything else is the task's.
    pub fn of_setup(error: anyhow::Error) -> EngineError {
        match EngineError::of(error) {
            EngineError::Other(e) | EngineError::ImageMissing(e) => EngineError::Setup(e),
            other => other,
        }
    }

    /// Whether another launch later may go better.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            EngineError::ImageMissing(_)
                | EngineError::Gone(_)
                | EngineError::Setup(_)
                | EngineError::SetupFailed(_)
        )
    }
}

impl From<anyhow::Error> for EngineError {
    fn from(e: anyhow::Error) -> Self {
        EngineError::of(e)
    }
}

/// Where a servo is, as the supervisor needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// It runs now.
    Running,
    /// It exited with this code.
    Exited(i64),
    /// The infrastructure lost it (a node Down, a rejected task): not the
    /// agent's doing.
    Lost(String),
}

/// How a servo is asked to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// SIGTERM, then SIGKILL after the grace period (Docker's stop).
    Term,
    Kill,
}

/// How the servo reaches its gateway.
#[derive(Clone)]
pub(crate) enum Reach {
    /// A unix socket in a directory mounted into its container.
    Socket,
    /// The shared TCP listener, by the launch's token.
    Remote {
        hub: crate::door::Hub,
        token: String,
        /// A warm job on a swarm node claimed for the launch (issue 53):
        /// its slot, which it calls as (the token is the slot's).
        slot: Option<TaskId>,
    },
    /// A warm servo's socket: the servo runs already (issue 28).
    Warm(Warm),
}

/// A warm servo claimed for a launch (issue 28): its container runs
/// already, its servo waiting on its socket for the task.
#[derive(Clone)]
pub(crate) struct Warm {
    /// Its container's and volume's name (`saheeli-pool-<hex>`): what the
    /// task's row records as its container.
    pub name: String,
    /// Its socket as the pool bound it; None when found again after a
    /// foreman stopped (adoption binds it again in the same directory).
    pub socket: Option<crate::door::WarmSocket>,
    /// When it was claimed (the claim latency runs to the release).
    pub claimed: std::time::Instant,
    /// Its workspace's size (the task's: kept if the task parks).
    pub disk: u64,
    /// The cached set-up its workspace holds (issue 50): the task's own
    /// key, its set-up reused.
    pub setup_key: Option<String>,
}

/// What `prepare` settled for one launch: how its servo reaches its
/// gateway, and the launch's own name where the engine has one.
#[derive(Clone)]
pub(crate) struct Prepared {
    pub reach: Reach,
    /// A swarm launch's suffix (its service, secret and token derive from it).
    pub suffix: Option<String>,
}

impl Prepared {
    pub fn socket() -> Prepared {
        Prepared {
            reach: Reach::Socket,
            suffix: None,
        }
    }
}

/// One launch of a servo: what the engine acts on after `launch` or `find`.
pub(crate) struct Servo {
    pub task: TaskId,
    /// The container's or service's id (what the task's row records).
    pub id: String,
    pub prepared: Prepared,
    pub(super) kind: ServoKind,
}

/// Engine-specific handles of a launch.
pub(super) enum ServoKind {
    Local,
    Swarm {
        objects: super::swarm::LaunchObjects,
        /// Node and container, learnt while watching (for stop and OOM).
        seen: Arc<Mutex<Seen>>,
    },
    #[cfg(test)]
    Fake,
}

/// Where a swarm task was last seen running.
#[derive(Clone, Debug, Default)]
pub(crate) struct Seen {
    pub node: Option<String>,
    pub container: Option<String>,
}

impl Servo {
    /// Where it runs, as `task status` shows it.
    pub fn running_detail(&self) -> String {
        let short = |s: &str| s[..12.min(s.len())].to_string();
        match &self.kind {
            // A claimed warm job (issue 53) by its whole name (its service
            // id says nothing of the pool; a slot's first hex digits are
            // its time, shared by jobs made in the same millisecond).
            ServoKind::Swarm { objects, seen } if objects.slot.is_some() => {
                format!("warm job {} on node {}", objects.name, self.node(seen))
            }
            ServoKind::Swarm { objects, seen } => format!(
                "service {} on node {}",
                short(&objects.service),
                self.node(seen)
            ),
            _ => match &self.prepared.reach {
                Reach::Warm(w) => format!("warm container {}", pool_short(&w.name)),
                _ => format!("container {}", short(&self.id)),
            },
        }
    }

    /// Its workspace volume on this host.
    pub fn volume(&self) -> String {
        match &self.prepared.reach {
            Reach::Warm(w) => w.name.clone(),
            _ => super::docker::volume_name(self.task),
        }
    }

    /// The warm servo it is, if it is one.
    pub fn warm(&self) -> Option<&Warm> {
        match &self.prepared.reach {
            Reach::Warm(w) => Some(w),
            _ => None,
        }
    }

    /// Where it ran, for an ending's detail (`on node X` on a swarm).
    pub fn place(&self) -> String {
        match &self.kind {
            ServoKind::Swarm { seen, .. } => format!("on node {}", self.node(seen)),
            _ => match &self.prepared.reach {
                Reach::Warm(w) => format!("in warm container {}", pool_short(&w.name)),
                _ => format!("in container {}", &self.id[..12.min(self.id.len())]),
            },
        }
    }

    fn node(&self, seen: &Mutex<Seen>) -> String {
        seen.lock()
            .unwrap()
            .node
            .clone()
            .unwrap_or_else(|| "?".into())
    }
}

impl Warm {
    /// Its socket directory's name in `run_dir`.
    pub fn socket_name(&self) -> anyhow::Result<String> {
        super::local::socket_of(&self.name)
    }
}

/// A warm servo's name as shown: its slot's first 12 hex digits.
fn pool_short(name: &str) -> &str {
    let hex = name.strip_prefix(super::local::POOL_PREFIX).unwrap_or(name);
    &hex[..12.min(hex.len())]
}

/// A created servo.
pub(crate) struct Launched {
    pub servo: Servo,
    /// How long the engine took to create and start it, when the engine
    /// measures it (what admission watches).
    pub engine_time: Option<Duration>,
    /// How its set-up went, when it had one (issue 50).
    pub setup: Option<crate::task::SetupRan>,
}

/// What became of a stopped servo's workspace.
pub(crate) enum Workspace {
    /// Collected into results (or why not).
    Results(anyhow::Result<crate::collect::Collected>),
    /// The servo parked: its workspace is kept for the next launch.
    Kept,
    /// Nothing came back (a remote servo that never uploaded).
    Nothing,
}

/// What the engine brought back from a stopped servo.
pub(crate) struct Collected {
    pub workspace: Workspace,
    pub oom: bool,
    pub took: Duration,
}

/// What `find` learnt of a task whose foreman stopped (once per task a
/// foreman adopts: a servo's size in it costs nothing worth a box).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Found {
    /// Its servo runs: supervise it.
    Running(Servo),
    /// A servo was created and never started.
    NeverStarted,
    /// Nothing runs: no servo, or it ended while no foreman watched.
    Gone,
    /// The engine did not answer: unknown, ask again later.
    Unknown(EngineError),
}
