//! A scripted engine for the supervisor's unit tests: phases are sent by
//! the test, stops are recorded (and may end the servo with a code), and
//! collection brings back the files the test put in a servo's workspace
//! (none unless it put some). A servo launched and not ended is found
//! again after a foreman restart. No Docker.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use saheeli_protocol::TaskId;
use tokio::sync::mpsc;

use super::facts::{
    Collected, EngineError, Found, Launched, Phase, Prepared, Servo, ServoKind, Stop, Workspace,
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
    /// The tasks launched, in order.
    launched: Vec<TaskId>,
    /// The servos that run now (launched, not ended).
    alive: HashSet<TaskId>,
    /// Each task's workspace: path to text.
    files: HashMap<TaskId, BTreeMap<String, String>>,
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
                launched: Vec::new(),
                alive: Default::default(),
                files: HashMap::new(),
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

    /// The tasks launched so far, in order (a task once per launch).
    pub fn launched(&self) -> Vec<TaskId> {
        self.script.lock().unwrap().launched.clone()
    }

    /// Whether task `id`'s servo runs now.
    pub fn alive(&self, id: TaskId) -> bool {
        self.script.lock().unwrap().alive.contains(&id)
    }

    /// The servo's next phase.
    pub fn phase(&self, p: Phase) {
        let _ = self.script.lock().unwrap().tx.send(Ok(p));
    }

    /// Task `id`'s servo ends with `p` (an exit, or lost).
    pub fn end(&self, id: TaskId, p: Phase) {
        let mut s = self.script.lock().unwrap();
        s.alive.remove(&id);
        let _ = s.tx.send(Ok(p));
    }

    /// Writes `text` at `path` in task `id`'s workspace.
    pub fn put(&self, id: TaskId, path: &str, text: &str) {
        let mut s = self.script.lock().unwrap();
        s.files
            .entry(id)
            .or_default()
            .insert(path.into(), text.into());
    }

    /// Task `id`'s workspace, as collection would bring it home.
    pub fn files(&self, id: TaskId) -> BTreeMap<String, String> {
        let s = self.script.lock().unwrap();
        s.files.get(&id).cloned().unwrap_or_default()
    }

    /// Starts task `id`'s next servo on an empty workspace.
    pub fn wipe(&self, id: TaskId) {
        self.script.lock().unwrap().files.remove(&id);
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
        let mut s = self.script.lock().unwrap();
        s.launches += 1;
        s.launched.push(id);
        s.alive.insert(id);
        Ok(Launched {
            servo: servo(id),
            engine_time: None,
            setup: None,
        })
    }

    /// A servo a stopped foreman left: the one that still runs.
    pub fn find(&self, id: TaskId) -> Found {
        if self.alive(id) {
            Found::Running(servo(id))
        } else {
            Found::Gone
        }
    }

    pub fn phase_change(&self) -> FakePhases {
        FakePhases(self.script.lock().unwrap().rx.clone())
    }

    pub fn stop(&self, id: TaskId, how: Stop) -> Result<(), EngineError> {
        let mut s = self.script.lock().unwrap();
        s.stops.push(how);
        if let Some((_, code)) = s.exits_on.iter().find(|(h, _)| *h == how) {
            let code = *code;
            s.alive.remove(&id);
            let _ = s.tx.send(Ok(Phase::Exited(code)));
        }
        Ok(())
    }

    /// Brings the servo's workspace home into `dest` (`parked`: keeps it
    /// for the next launch).
    pub fn collect(&self, id: TaskId, dest: &Path, parked: bool) -> Collected {
        let workspace = if parked {
            Workspace::Kept
        } else {
            let files = self.script.lock().unwrap().files.remove(&id);
            Workspace::Results(write_all(dest, files.unwrap_or_default()))
        };
        Collected {
            workspace,
            oom: false,
            took: std::time::Duration::ZERO,
        }
    }

    /// A parked task's kept workspace, brought home into `dest`.
    pub fn collect_kept(
        &self,
        id: TaskId,
        dest: &Path,
    ) -> anyhow::Result<crate::collect::Collected> {
        let files = self.script.lock().unwrap().files.remove(&id);
        write_all(dest, files.unwrap_or_default())
    }

    /// Ends task `id`'s servo, if one runs (what its removal does).
    pub fn remove(&self, id: TaskId) {
        self.script.lock().unwrap().alive.remove(&id);
    }
}

fn servo(id: TaskId) -> Servo {
    Servo {
        task: id,
        id: format!("fake-{id}"),
        prepared: Prepared::socket(),
        kind: ServoKind::Fake,
    }
}

fn write_all(
    dest: &Path,
    files: BTreeMap<String, String>,
) -> anyhow::Result<crate::collect::Collected> {
    std::fs::create_dir_all(dest)?;
    let mut c = crate::collect::Collected::default();
    for (path, text) in files {
        std::fs::write(dest.join(path), &text)?;
        c.files += 1;
        c.bytes += text.len() as u64;
    }
    Ok(c)
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
