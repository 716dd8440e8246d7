//! A scripted engine for the supervisor's unit tests: phases are sent by
//! the test, stops are recorded (and may end the servo with a code), and
//! collection brings back an empty workspace. No Docker.

use std::sync::{Arc, Mutex};

use saheeli_protocol::TaskId;
use tokio::sync::mpsc;

use super::facts::{
    Collected, EngineError, Launched, Phase, Prepared, Servo, ServoKind, Stop, Workspace,
};

/// The test's handle on the fake servo.
#[derive(Clone)]
pub(crate) struct Fake {
    script: Arc<Mutex<Script>>,
    /// A handle that connects only when used (never, in these tests).
    docker: bollard::Docker,
    /// The engine whose capabilities it declares (this host's unless
    /// [`Fake::declaring`] says otherwise).
    kind: crate::config::BackendKind,
}

struct Script {
    tx: mpsc::UnboundedSender<Result<Phase, EngineError>>,
    /// Shared by every watcher of this fake, one after another.
    rx: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Result<Phase, EngineError>>>>,
    stops: Vec<Stop>,
    /// The exit code a stop of this kind ends the servo with.
    exits_on: Vec<(Stop, i64)>,
    /// Launches asked so far.
    launches: usize,
}

impl Fake {
    pub fn new() -> Fake {
        let (tx, rx) = mpsc::unbounded_channel();
        Fake {
            script: Arc::new(Mutex::new(Script {
                tx,
                rx: Arc::new(tokio::sync::Mutex::new(rx)),
                stops: Vec::new(),
                exits_on: Vec::new(),
                launches: 0,
            })),
            docker: bollard::Docker::connect_with_http(
                "http://127.0.0.1:1",
                1,
                bollard::API_DEFAULT_VERSION,
            )
            .expect("an http handle connects lazily"),
            kind: crate::config::BackendKind::Docker,
        }
    }

    /// The same fake, declaring `kind`'s capabilities.
    pub fn declaring(mut self, kind: crate::config::BackendKind) -> Fake {
        self.kind = kind;
        self
    }

    pub fn kind(&self) -> crate::config::BackendKind {
        self.kind
    }

    /// How many launches were asked.
    pub fn launches(&self) -> usize {
        self.script.lock().unwrap().launches
    }

    pub fn docker(&self) -> bollard::Docker {
        self.docker.clone()
    }

    /// The servo's next phase.
    pub fn phase(&self, p: Phase) {
        let _ = self.script.lock().unwrap().tx.send(Ok(p));
    }

    /// Watching the servo fails (the engine never came back).
    pub fn fails(&self, why: &str) {
        let e = EngineError::Other(anyhow::anyhow!("{why}"));
        let _ = self.script.lock().unwrap().tx.send(Err(e));
    }

    /// A stop of kind `how` ends the servo with `code`.
    pub fn exits_on(&self, how: Stop, code: i64) {
        self.script.lock().unwrap().exits_on.push((how, code));
    }

    /// The stops asked so far, in order.
    pub fn stops(&self) -> Vec<Stop> {
        self.script.lock().unwrap().stops.clone()
    }

    pub fn launch(&self, id: TaskId) -> Result<Launched, EngineError> {
        self.script.lock().unwrap().launches += 1;
        Ok(Launched {
            servo: Servo {
                task: id,
                id: format!("fake-{id}"),
                prepared: Prepared::socket(),
                kind: ServoKind::Fake,
            },
            engine_time: None,
            setup: None,
        })
    }

    pub fn phase_change(&self) -> FakePhases {
        FakePhases(self.script.lock().unwrap().rx.clone())
    }

    pub fn stop(&self, how: Stop) -> Result<(), EngineError> {
        let mut s = self.script.lock().unwrap();
        s.stops.push(how);
        if let Some((_, code)) = s.exits_on.iter().find(|(h, _)| *h == how) {
            let _ = s.tx.send(Ok(Phase::Exited(*code)));
        }
        Ok(())
    }

    pub fn collect(&self) -> Collected {
        Collected {
            workspace: Workspace::Results(Ok(crate::collect::Collected::default())),
            oom: false,
            took: std::time::Duration::ZERO,
        }
    }
}

/// The scripted phases.
pub(crate) struct FakePhases(
    Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Result<Phase, EngineError>>>>,
);

impl FakePhases {
    pub async fn change(&mut self) -> Result<Phase, EngineError> {
        match self.0.lock().await.recv().await {
            Some(p) => p,
            None => std::future::pending().await,
        }
    }
}
