//! A local servo's phases (`docker wait`, asked again after the daemon
//! comes back) and stopping it.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bollard::Docker;
use tracing::warn;

use super::{DAEMON_PATIENCE, Local};
use crate::backend::docker;
use crate::backend::facts::{EngineError, Phase, Servo, Stop};

/// How many times waiting is asked again after losing the daemon.
const RECONNECTS: u32 = 5;

type Wait = Pin<Box<dyn Future<Output = anyhow::Result<i64>> + Send>>;

/// The phases of one local servo. Cancel-safe: the wait lives here, so a
/// `select!` that drops [`LocalPhases::change`] loses nothing.
pub(crate) struct LocalPhases {
    docker: Docker,
    container: String,
    wait: Wait,
    reconnects: u32,
    done: bool,
}

impl LocalPhases {
    /// The next change: the servo's exit (it runs from `start` on).
    pub async fn change(&mut self) -> Result<Phase, EngineError> {
        loop {
            if self.done {
                return std::future::pending().await;
            }
            let r = (&mut self.wait).await;
            match r {
                // The daemon went away (a restart?): wait for it, then ask again.
                Err(e) if self.reconnects < RECONNECTS => {
                    self.reconnects += 1;
                    warn!(container = %self.container, error = %format!("{e:#}"), "lost Docker while waiting; reconnecting");
                    let (d, c) = (self.docker.clone(), self.container.clone());
                    self.wait = Box::pin(async move {
                        docker::await_daemon(&d, DAEMON_PATIENCE).await;
                        docker::wait(&d, &c).await
                    });
                }
                Ok(code) => {
                    self.done = true;
                    return Ok(Phase::Exited(code));
                }
                Err(e) => {
                    self.done = true;
                    return Err(EngineError::of(e));
                }
            }
        }
    }
}

impl Local {
    pub fn phase_change(&self, servo: &Servo) -> LocalPhases {
        let (d, c) = (self.docker.clone(), servo.id.clone());
        LocalPhases {
            docker: self.docker.clone(),
            container: servo.id.clone(),
            wait: Box::pin(async move { docker::wait(&d, &c).await }),
            reconnects: 0,
            done: false,
        }
    }

    /// Docker's pause (the cgroup freezer), or its unpause.
    pub async fn freeze(&self, servo: &Servo, frozen: bool) -> Result<(), EngineError> {
        match frozen {
            true => docker::pause(&self.docker, &servo.id).await?,
            false => docker::unpause(&self.docker, &servo.id).await?,
        }
        Ok(())
    }

    /// Docker's stop (SIGTERM, SIGKILL after `grace`) or kill.
    pub async fn stop(&self, servo: &Servo, how: Stop, grace: Duration) -> Result<(), EngineError> {
        match how {
            Stop::Term => docker::stop(&self.docker, &servo.id, grace).await?,
            Stop::Kill => docker::kill(&self.docker, &servo.id).await?,
        }
        Ok(())
    }
}
