//! A job service's phases (from the board's looks, every 200 ms) and
//! stopping its servo through its node's engine.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Swarm;
use super::observe::Phase as Swarmed;
use crate::backend::facts::{EngineError, Phase, Seen, Servo, ServoKind, Stop};

/// The phases of one job service. Cancel-safe: a dropped
/// [`SwarmPhases::change`] only loses a look.
pub(crate) struct SwarmPhases {
    watching: super::board::Watching,
    seen: Arc<Mutex<Seen>>,
    running: bool,
}

impl SwarmPhases {
    pub async fn change(&mut self) -> Result<Phase, EngineError> {
        loop {
            if self.watching.looks.changed().await.is_err() {
                // The board's loop ended (no runtime left): look again.
                self.watching = self.watching.again();
                continue;
            }
            let look = self.watching.looks.borrow_and_update().clone();
            if look.failed {
                continue;
            }
            let Some(o) = look.seen.get(&self.watching.service).cloned() else {
                continue;
            };
            {
                let mut seen = self.seen.lock().unwrap();
                seen.node = o.node.clone().or(seen.node.take());
                seen.container = o.container.clone().or(seen.container.take());
            }
            match o.phase {
                Swarmed::Waiting => {}
                Swarmed::Running if self.running => {}
                Swarmed::Running => {
                    self.running = true;
                    return Ok(Phase::Running);
                }
                Swarmed::Exited(code) => return Ok(Phase::Exited(code)),
                Swarmed::Lost(why) => return Ok(Phase::Lost(why)),
            }
        }
    }
}

/// A swarm servo's objects and where it was seen.
pub(super) fn parts(servo: &Servo) -> (&super::LaunchObjects, &Arc<Mutex<Seen>>) {
    match &servo.kind {
        ServoKind::Swarm { objects, seen } => (objects, seen),
        _ => unreachable!("a swarm engine acts only on the servos it launched or found"),
    }
}

impl Swarm {
    pub fn phase_change(&self, servo: &Servo) -> SwarmPhases {
        let (objects, seen) = parts(servo);
        SwarmPhases {
            watching: self.board.watch(&objects.service),
            seen: seen.clone(),
            running: false,
        }
    }

    /// Stops the servo through its node's engine (SIGTERM with the grace:
    /// it then uploads; or SIGKILL), else removes the job service (no
    /// upload then).
    pub async fn stop(&self, servo: &Servo, how: Stop, grace: Duration) -> Result<(), EngineError> {
        let (objects, seen) = parts(servo);
        let Seen { node, container } = seen.lock().unwrap().clone();
        if let (Some(node), Some(container)) = (node, container)
            && let Ok(d) = super::node_engine(&self.manager, &self.manager_addr, &node).await
        {
            match how {
                Stop::Term => {
                    if crate::backend::docker::stop(&d, &container, grace)
                        .await
                        .is_ok()
                    {
                        return Ok(());
                    }
                }
                // Removing the service now would lose the upload under way.
                Stop::Kill => return Ok(crate::backend::docker::kill(&d, &container).await?),
            }
        }
        self.manager
            .delete_service(&objects.service)
            .await
            .map_err(|e| {
                EngineError::of(anyhow::Error::from(e).context("removing the job service"))
            })
    }
}
