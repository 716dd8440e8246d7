//! [`Engine`]: what the supervisor asks of wherever servos run. Every
//! method reports facts (a [`Phase`], what was [`Collected`], an
//! [`EngineError`]) and none writes a task's state: deciding what the
//! facts mean is the supervisor's. Each method is one `match` over the
//! engines: this host's Docker (`local`), a Docker Swarm (`swarm`), and in
//! tests a scripted fake.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use saheeli_protocol::TaskId;

use super::TaskEngine;
use super::facts::{Collected, EngineError, Found, Launched, Phase, Prepared, Reach, Servo, Stop};
#[cfg(test)]
use super::fake::{Fake, FakePhases};
use super::local::{Local, LocalLeftovers, LocalPhases};
use super::swarm::{Swarm, SwarmLeftovers, SwarmPhases};
use super::warm_pool::WarmPool;
use crate::door::UploadFrom;
use crate::spec::TaskSpec;

/// A servo container's log, followed until the container ends (or the
/// daemon stops answering): the servo mirrors its audit lines to stdout.
pub(crate) type ServoLog = BoxStream<'static, bytes::Bytes>;

/// What [`Engine::remove_task`] removes of a task's launches.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Removal<'a> {
    /// Everything.
    All,
    /// All but the workspace a parked task keeps on this engine.
    KeepWorkspace,
    /// What a stopped foreman's launch left (`recorded`: the container
    /// its row names); with `collect_into`, the workspace that outlived
    /// its servo is collected there first.
    Left {
        collect_into: Option<&'a Path>,
        recorded: Option<&'a str>,
    },
}

/// What an engine is like ([`Engine::traits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Traits {
    /// Launches report the engine's latency and faults to admission (the
    /// local daemon's health paces launching).
    pub paces_launches: bool,
    /// The engine reports [`Phase::Running`] once a servo runs (a swarm
    /// schedules it later); else a started servo runs from `start`.
    pub reports_running: bool,
    /// A servo's workspace outlives it (a local volume), so a stopped
    /// foreman's task may still be collected from what it left.
    pub workspace_outlives_servo: bool,
}

/// The removals an engine does in the background ([`Engine::removals`]).
pub(crate) struct Removals<'a>(&'a Engine);

impl Removals<'_> {
    /// Removes what is left of an ended launch once it is safe to (a
    /// swarm's; this host's collection begins its own).
    pub fn later(&self, servo: Servo) {
        if let Engine::Swarm(s) = self.0 {
            s.remove_later(servo);
        }
    }

    /// Waits (up to `patience`) for the removals begun in the background;
    /// the sweeper finishes what is still running then.
    pub async fn done(&self, patience: Duration) {
        let cleanups = match self.0 {
            Engine::Swarm(s) => &s.cleanups,
            Engine::Local(l) => &l.cleanups,
            #[cfg(test)]
            Engine::Fake(_) => return,
        };
        cleanups.close();
        if tokio::time::timeout(patience, cleanups.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                left = cleanups.len(),
                "removals of ended tasks still running; the sweeper finishes them"
            );
        }
    }
}

/// The engine a foreman runs its tasks on (`backend:` in config.yaml).
#[derive(Clone)]
pub(crate) enum Engine {
    Local(Local),
    Swarm(Swarm),
    #[cfg(test)]
    Fake(Fake),
}

/// A launch's phases, as they change (see [`Engine::phase_change`]).
pub(crate) enum Phases {
    Local(LocalPhases),
    Swarm(SwarmPhases),
    #[cfg(test)]
    Fake(FakePhases),
}

impl Phases {
    /// The next change. Cancel-safe: a `select!` may drop it.
    pub async fn change(&mut self) -> Result<Phase, EngineError> {
        match self {
            Phases::Local(p) => p.change().await,
            Phases::Swarm(p) => p.change().await,
            #[cfg(test)]
            Phases::Fake(p) => p.change().await,
        }
    }
}

/// What carries Saheeli's labels on an engine.
pub(crate) enum Leftovers<'a> {
    Local(&'a Local, LocalLeftovers),
    Swarm(&'a Swarm, SwarmLeftovers),
}

impl Leftovers<'_> {
    /// The tasks (ids as labelled) something was left of.
    pub fn tasks(&self) -> std::collections::BTreeSet<String> {
        match self {
            Leftovers::Local(_, l) => l.tasks(),
            Leftovers::Swarm(_, l) => l.tasks(),
        }
    }

    /// Removes what was left of the `ended` tasks.
    pub async fn remove(self, ended: &HashSet<String>) {
        match self {
            Leftovers::Local(l, left) => l.remove_leftovers(left, ended).await,
            Leftovers::Swarm(s, left) => s.remove_leftovers(left, ended).await,
        }
    }
}

impl Engine {
    /// The servo image is there (a swarm's nodes pull it themselves).
    pub async fn check_image(&self) -> Result<(), EngineError> {
        match self {
            Engine::Local(l) => l.check_image().await,
            Engine::Swarm(s) => s.check_image().await,
            #[cfg(test)]
            Engine::Fake(_) => Ok(()),
        }
    }

    /// How the servo of a new launch will reach its gateway (on this
    /// host, a warm servo's socket when the pool has one for `spec`).
    pub fn prepare(
        &self,
        id: TaskId,
        parked: bool,
        spec: &TaskSpec,
    ) -> Result<Prepared, EngineError> {
        match self {
            Engine::Local(l) => Ok(l.prepare(id, parked, spec)),
            Engine::Swarm(s) => s.prepare(id, parked, spec),
            #[cfg(test)]
            Engine::Fake(_) => Ok(Prepared::socket()),
        }
    }

    /// Where a launch of task `id` runs, for what acts on its container
    /// (verify, the assessor).
    pub fn task_engine(&self, id: TaskId, prepared: &Prepared) -> TaskEngine {
        match (self, &prepared.reach) {
            (Engine::Local(l), Reach::Warm(w)) => {
                return TaskEngine::Container(l.docker.clone(), w.name.clone());
            }
            // A warm job (issue 53): its service is named by its slot.
            (
                Engine::Swarm(s),
                Reach::Remote {
                    slot: Some(slot), ..
                },
            ) => {
                return TaskEngine::Swarm {
                    manager: s.manager.clone(),
                    manager_addr: s.manager_addr.clone(),
                    service: super::swarm::warm_name(*slot),
                };
            }
            _ => {}
        }
        match (self, prepared.suffix.as_deref()) {
            (Engine::Local(l), _) => TaskEngine::Local(l.docker.clone()),
            (Engine::Swarm(s), Some(suffix)) => TaskEngine::Swarm {
                manager: s.manager.clone(),
                manager_addr: s.manager_addr.clone(),
                service: super::swarm::service_name(id, suffix),
            },
            (Engine::Swarm(s), None) => TaskEngine::Local(s.manager.clone()),
            #[cfg(test)]
            (Engine::Fake(f), _) => TaskEngine::Local(f.docker()),
        }
    }

    /// Creates the servo (`parked`: on the workspace it parked with).
    /// Only the holder of the task's lease calls [`Engine::start`] next.
    #[allow(clippy::too_many_arguments)]
    pub async fn launch(
        &self,
        id: TaskId,
        spec: &TaskSpec,
        parked: bool,
        prepared: Prepared,
        gateway_dir: Option<&Path>,
        launch: &saheeli_protocol::Launch,
    ) -> Result<Launched, EngineError> {
        match self {
            Engine::Local(l) => {
                l.launch(id, spec, parked, prepared, gateway_dir, launch)
                    .await
            }
            Engine::Swarm(s) => s.launch(id, spec, prepared, gateway_dir).await,
            #[cfg(test)]
            Engine::Fake(f) => f.launch(id),
        }
    }

    /// Starts a launched servo; whether it runs now (a swarm reports
    /// running through [`Engine::phase_change`] once a node runs it).
    pub async fn start(&self, servo: &Servo) -> Result<bool, EngineError> {
        match self {
            Engine::Local(l) => l.start(servo).await.map(|()| true),
            Engine::Swarm(s) => {
                s.start(servo);
                Ok(false)
            }
            #[cfg(test)]
            Engine::Fake(_) => Ok(true),
        }
    }

    /// The servo's phases as they change.
    pub fn phase_change(&self, servo: &Servo) -> Phases {
        match self {
            Engine::Local(l) => Phases::Local(l.phase_change(servo)),
            Engine::Swarm(s) => Phases::Swarm(s.phase_change(servo)),
            #[cfg(test)]
            Engine::Fake(f) => Phases::Fake(f.phase_change()),
        }
    }

    /// Asks the servo to stop; an error means "ask again".
    pub async fn stop(&self, servo: &Servo, how: Stop, grace: Duration) -> Result<(), EngineError> {
        match self {
            Engine::Local(l) => l.stop(servo, how, grace).await,
            Engine::Swarm(s) => s.stop(servo, how, grace).await,
            #[cfg(test)]
            Engine::Fake(f) => f.stop(servo.task, how),
        }
    }

    /// Freezes the servo's processes while its task waits (issue 51):
    /// false when this engine does not (its `suspension` is "no").
    pub async fn freeze(&self, servo: &Servo) -> Result<bool, EngineError> {
        match self {
            Engine::Local(l) => l.freeze(servo, true).await.map(|()| true),
            Engine::Swarm(_) => Ok(false),
            #[cfg(test)]
            Engine::Fake(_) => Ok(false),
        }
    }

    /// Thaws a servo [`Engine::freeze`] froze; an error means "ask again".
    pub async fn thaw(&self, servo: &Servo) -> Result<(), EngineError> {
        match self {
            Engine::Local(l) => l.freeze(servo, false).await,
            Engine::Swarm(_) => Ok(()),
            #[cfg(test)]
            Engine::Fake(_) => Ok(()),
        }
    }

    /// Brings a stopped servo's workspace home into `dest` (`parked`: keeps
    /// it for the next launch instead), and whether it was OOM-killed
    /// (asked of the engine only when its `exit` was not a clean 0: see
    /// [`may_be_oom`]).
    pub async fn collect(
        &self,
        servo: &Servo,
        upload: Option<&UploadFrom>,
        dest: &Path,
        parked: bool,
        verifies: bool,
        exit: Option<i64>,
    ) -> Collected {
        let oom = may_be_oom(exit);
        match self {
            Engine::Local(l) => {
                l.collect(servo, dest, parked, verifies, oom, exit.is_some())
                    .await
            }
            Engine::Swarm(s) => s.collect(servo, upload, parked, oom).await,
            #[cfg(test)]
            Engine::Fake(f) => f.collect(servo.task, dest, parked),
        }
    }

    /// Removes what the task's launches made, as `how` says.
    pub async fn remove_task(&self, id: TaskId, how: Removal<'_>) {
        match (self, how) {
            (Engine::Local(l), Removal::All) => l.remove_task(id, false).await,
            (Engine::Local(l), Removal::KeepWorkspace) => l.remove_task(id, true).await,
            (
                Engine::Local(l),
                Removal::Left {
                    collect_into,
                    recorded,
                },
            ) => l.clear_left(id, collect_into, recorded).await,
            (Engine::Swarm(s), _) => s.remove_task(id).await,
            #[cfg(test)]
            (Engine::Fake(f), Removal::KeepWorkspace) => f.remove(id),
            #[cfg(test)]
            (Engine::Fake(f), _) => {
                f.remove(id);
                f.wipe(id);
            }
        }
    }

    /// The `backend:` value that picks this engine (a fake declares the
    /// one it stands for).
    pub fn kind(&self) -> crate::config::BackendKind {
        match self {
            Engine::Local(_) => crate::config::BackendKind::Docker,
            Engine::Swarm(_) => crate::config::BackendKind::Swarm,
            #[cfg(test)]
            Engine::Fake(f) => f.kind(),
        }
    }

    /// Why this engine cannot run a task (issue 53): the capabilities its
    /// settings need that the engine's declaration lacks; None when it can.
    pub fn refusal(&self, spec: &TaskSpec) -> Option<String> {
        super::capabilities::refusal(self.kind(), spec)
    }

    /// What the engine is like, for the supervisor's decisions.
    pub fn traits(&self) -> Traits {
        Traits {
            paces_launches: matches!(self, Engine::Local(_)),
            reports_running: matches!(self, Engine::Swarm(_)),
            workspace_outlives_servo: matches!(self, Engine::Local(_)),
        }
    }

    /// The engine's warm pool (issue 28; on a swarm issue 53), as the
    /// serve loop and the sweeper reach it: None on an engine with none.
    pub fn pool(&self) -> Option<WarmPool<'_>> {
        match self {
            Engine::Local(l) => Some(WarmPool::Local(l)),
            Engine::Swarm(s) => Some(WarmPool::Swarm(s)),
            #[cfg(test)]
            Engine::Fake(_) => None,
        }
    }

    /// The removals an ended launch leaves to be done once it is safe to
    /// (on a swarm in the background; collection did them on this host).
    pub fn removals(&self) -> Removals<'_> {
        Removals(self)
    }

    /// A parked task's kept workspace, collected into `dest`.
    pub async fn collect_kept(
        &self,
        id: TaskId,
        spec: &TaskSpec,
        dest: &Path,
    ) -> anyhow::Result<crate::collect::Collected> {
        match self {
            Engine::Local(l) => l.collect_kept(id, spec, dest).await,
            Engine::Swarm(s) => s.collect_kept(id, dest).await,
            #[cfg(test)]
            Engine::Fake(f) => f.collect_kept(id, dest),
        }
    }

    /// The servo of a task whose foreman stopped (`recorded`: the
    /// container its row names, a warm servo's found by it).
    pub async fn find(&self, id: TaskId, recorded: Option<&str>) -> Found {
        match self {
            Engine::Local(l) => l.find(id, recorded).await,
            Engine::Swarm(s) => s.find(id, recorded).await,
            #[cfg(test)]
            Engine::Fake(f) => f.find(id),
        }
    }

    /// What carries Saheeli's labels (for the sweeper).
    pub async fn leftovers(&self) -> Result<Leftovers<'_>, EngineError> {
        match self {
            Engine::Local(l) => Ok(Leftovers::Local(l, l.leftovers().await?)),
            Engine::Swarm(s) => Ok(Leftovers::Swarm(s, s.leftovers().await?)),
            #[cfg(test)]
            Engine::Fake(_) => Err(EngineError::Gone("a fake engine leaves nothing".into())),
        }
    }

    /// The logs of task `id`'s servo containers, oldest first, each with
    /// its container's id (a parked task's next container comes after).
    /// A log asks the daemon nothing until it is polled.
    pub async fn servo_logs(&self, id: TaskId) -> anyhow::Result<Vec<(String, ServoLog)>> {
        let docker = match self {
            Engine::Local(l) => l.docker.clone(),
            Engine::Swarm(s) => s.manager.clone(),
            #[cfg(test)]
            Engine::Fake(f) => f.docker(),
        };
        let ids = super::docker::task_containers_in_order(&docker, id).await?;
        Ok(ids
            .into_iter()
            .map(|cid| {
                let opts = bollard::query_parameters::LogsOptionsBuilder::default()
                    .stdout(true)
                    .follow(true)
                    .build();
                let log = docker
                    .logs(&cid, Some(opts))
                    .take_while(|r| std::future::ready(r.is_ok()))
                    .filter_map(|r| std::future::ready(r.ok().map(|c| c.into_bytes())))
                    .boxed();
                (cid, log)
            })
            .collect())
    }
}

/// Whether a servo that exited `exit` needs the engine asked whether it
/// was OOM-killed (a container inspect, on a swarm its node's). An OOM
/// kill decides a task's reason only when it did not end cleanly
/// (`outcome::why_incomplete`): a servo that exited 0 ended its loop
/// itself, and its own ending says why. Asking anyway cost the daemon an
/// inspect per task (issue 28's thousand).
pub(crate) fn may_be_oom(exit: Option<i64>) -> bool {
    exit != Some(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_a_servo_that_did_not_exit_cleanly_is_asked_about_an_oom_kill() {
        assert!(!super::may_be_oom(Some(0)));
        for exit in [Some(1), Some(137), Some(143), None] {
            assert!(super::may_be_oom(exit), "{exit:?}");
        }
    }
}
