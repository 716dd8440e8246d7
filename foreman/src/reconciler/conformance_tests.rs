//! The conformance suite (`backend/conformance.rs`, issue 53) on the Fake
//! engine with a paused clock: the real serve loop (claims, take-overs,
//! cancels passed on, parked tasks) and the real supervisor over
//! `Engine::Fake`, whose servos a player acts out as each case says —
//! phases, the store writes a real servo's gateway makes (a question, a
//! verify attempt), and the files of its workspace. Run once declaring
//! each engine's capabilities: what that engine lacks is refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use saheeli_protocol::verify::{Check, CheckKind};
use saheeli_protocol::{Completion, ServoExit, TaskId};
use tokio_util::sync::CancellationToken;

use super::{ServeOptions, run};
use crate::backend::capabilities::{Support, support};
use crate::backend::conformance::{self as suite, Act, Bench, Seen};
use crate::backend::{Engine, Fake, Phase, Stop};
use crate::config::{BackendKind, Config, ConfigFile};
use crate::store::{HumanAct, Lease, Store};
use crate::supervisor::Ctx;
use crate::task::{Capability, TaskSpec};

type Serving = tokio::task::JoinHandle<anyhow::Result<super::options::ServeSummary>>;

struct FakeBench {
    fake: Fake,
    kind: BackendKind,
    cfg: Config,
    acts: Arc<Mutex<HashMap<TaskId, Act>>>,
    /// The running foreman's lease: the player's store writes are its
    /// gateway's, fenced by it.
    lease: Arc<Mutex<Option<Lease>>>,
    foreman: Option<(Serving, CancellationToken)>,
    player: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl FakeBench {
    fn new(kind: BackendKind) -> FakeBench {
        let dir = tempfile::tempdir().unwrap();
        let mut file: ConfigFile = serde_yaml::from_str(
            "providers:\n  openai: { kind: openai, base_url: 'http://127.0.0.1:9/v1' }\n",
        )
        .unwrap();
        file.database = dir.path().join("saheeli.db");
        file.results_dir = dir.path().join("results");
        file.state_dir = dir.path().join("state");
        file.run_dir = Some(dir.path().join("run"));
        file.stop_grace = Duration::from_secs(2);
        file.lease = Duration::from_secs(1);
        file.backend = kind;
        let cfg = Config {
            source: None,
            base_dir: dir.path().to_path_buf(),
            file,
            set_keys: Default::default(),
        };
        for d in [cfg.results_dir(), cfg.state_dir()] {
            std::fs::create_dir_all(d).unwrap();
        }
        Store::open(&cfg.database()).unwrap();
        let fake = Fake::new().declaring(kind);
        // A stopped servo ends: TERM as a servo does, KILL always.
        fake.exits_on(Stop::Term, 143);
        fake.exits_on(Stop::Kill, 137);
        let acts = Arc::new(Mutex::new(HashMap::new()));
        let lease = Arc::new(Mutex::new(None));
        let player = tokio::spawn(play(
            fake.clone(),
            cfg.database(),
            acts.clone(),
            lease.clone(),
        ));
        FakeBench {
            fake,
            kind,
            cfg,
            acts,
            lease,
            foreman: None,
            player,
            _dir: dir,
        }
    }

    fn ctx(&self) -> Arc<Ctx> {
        let cfg = self.cfg.clone();
        let upstream = Arc::new(crate::llm::Upstream::from_config(&cfg).unwrap());
        Arc::new(Ctx {
            lease: Lease::new(cfg.file.lease),
            engine: Engine::Fake(self.fake.clone()),
            store: Arc::new(Mutex::new(Store::open(&cfg.database()).unwrap())),
            bus: crate::events::Bus::new(64),
            desk_store: Arc::new(Mutex::new(Store::open(&cfg.database()).unwrap())),
            metrics: crate::metrics::Metrics::new(
                cfg.database(),
                upstream.providers.clone(),
                crate::metrics::Source::Foreman,
            ),
            admission: Mutex::new(crate::admission::Admission::new(
                cfg.file.concurrency,
                crate::admission::Tuning::default(),
            )),
            upstream,
            sockets: crate::door::Sockets::from_config(&cfg).unwrap(),
            cfg,
        })
    }

    fn store(&self) -> Store {
        Store::open(&self.cfg.database()).unwrap()
    }

    fn id(id: &str) -> TaskId {
        id.parse().unwrap()
    }
}

impl Drop for FakeBench {
    fn drop(&mut self) {
        self.player.abort();
        if let Some((f, _)) = self.foreman.take() {
            f.abort();
        }
    }
}

/// The servo of each launch, acting as its task's case says.
async fn play(
    fake: Fake,
    db: std::path::PathBuf,
    acts: Arc<Mutex<HashMap<TaskId, Act>>>,
    lease: Arc<Mutex<Option<Lease>>>,
) {
    let mut seen = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let launched = fake.launched();
        for (n, id) in launched.iter().enumerate().skip(seen) {
            let nth = launched[..=n].iter().filter(|t| *t == id).count();
            let act = acts.lock().unwrap()[id];
            let servo = Player {
                fake: fake.clone(),
                db: db.clone(),
                lease: lease.clone(),
                id: *id,
                nth,
            };
            tokio::spawn(servo.act(act));
        }
        seen = launched.len();
    }
}

/// One launch's servo.
struct Player {
    fake: Fake,
    db: std::path::PathBuf,
    lease: Arc<Mutex<Option<Lease>>>,
    id: TaskId,
    /// Which launch of its task (1 for the first).
    nth: usize,
}

impl Player {
    async fn act(self, act: Act) {
        let id = self.id;
        let f = &self.fake;
        // A servo asks its gateway anything only once it runs.
        self.until_running().await;
        match act {
            Act::Completes => {
                f.put(id, "marker.txt", "done\n");
                self.complete(Vec::new());
            }
            Act::Works => f.put(id, "before.txt", "before\n"),
            Act::WorksThenCompletes => {
                // A new launch starts on a fresh workspace (another node's).
                f.wipe(id);
                f.put(id, "before.txt", "before\n");
                tokio::time::sleep(Duration::from_secs(suite::WORK_S)).await;
                if self.current() {
                    f.put(id, "marker.txt", "done\n");
                    self.complete(Vec::new());
                }
            }
            Act::Asks if self.nth == 1 => {
                f.put(id, "before.txt", "1\n");
                self.ask();
                // `park_after: 1s`: it saves its session and exits parked.
                tokio::time::sleep(Duration::from_secs(1)).await;
                f.end(id, Phase::Exited(i64::from(ServoExit::Parked.code())));
            }
            Act::Asks => {
                let before = f.files(id).get("before.txt").cloned().unwrap_or_default();
                f.put(id, "out.txt", &before);
                self.complete(Vec::new());
            }
            Act::Verified => {
                let checks = [self.check(1, false), self.check(2, true)];
                let lease = self.held();
                let mut s = Store::open(&self.db).unwrap();
                s.record_verify(id, &lease, "c1", 1, &checks[..1]).unwrap();
                f.put(id, "marker.txt", "done\n");
                s.record_verify(id, &lease, "c2", 2, &checks[1..]).unwrap();
                self.complete(checks.to_vec());
            }
        }
    }

    async fn until_running(&self) {
        for _ in 0..1000 {
            let s = Store::open(&self.db).unwrap();
            let row = s.get(&self.id.to_string()).unwrap().expect("the task");
            if row.state == crate::state::TaskState::Running {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("task {} never ran", self.id);
    }

    /// Whether this launch still runs (not lost, stopped or relaunched).
    fn current(&self) -> bool {
        let launches = self.fake.launched();
        self.fake.alive(self.id) && launches.iter().filter(|t| **t == self.id).count() == self.nth
    }

    fn held(&self) -> Lease {
        self.lease.lock().unwrap().clone().expect("a foreman")
    }

    /// `task_complete`: complete.json written, the servo exits 0.
    fn complete(&self, verification: Vec<Check>) {
        let c = Completion {
            task_id: self.id,
            message: "done".into(),
            steps: 2,
            usage: Default::default(),
            finished_at: "2026-01-01T00:00:00Z".into(),
            verification,
        };
        let json = serde_json::to_string(&c).unwrap();
        self.fake.put(self.id, "complete.json", &json);
        self.fake.end(self.id, Phase::Exited(0));
    }

    /// `ask_user`, as the task's gateway records it.
    fn ask(&self) {
        let waiting = saheeli_protocol::human::Waiting::Answer {
            question: "Name of the output file?".into(),
        };
        let mut s = Store::open(&self.db).unwrap();
        s.ask(self.id, &self.held(), "ask-1", &waiting, None, 3_600_000)
            .unwrap();
    }

    fn check(&self, attempt: u32, passed: bool) -> Check {
        Check {
            attempt,
            kind: CheckKind::Verify,
            command: "test -f marker.txt".into(),
            exit_code: Some(if passed { 0 } else { 1 }),
            duration_ms: 5,
            passed,
            output: String::new(),
            limited: false,
            findings: Vec::new(),
            graded: None,
        }
    }
}

impl Bench for FakeBench {
    fn engine(&self) -> &'static str {
        match self.kind {
            BackendKind::Docker => "docker",
            BackendKind::Swarm => "swarm",
        }
    }

    fn declares(&self, capability: &str) -> bool {
        Capability::ALL
            .iter()
            .find(|c| c.name() == capability)
            .is_some_and(|c| support(self.kind, *c) == Support::Yes)
    }

    async fn submit(&mut self, act: Act, front: &str) -> Result<String, String> {
        let text = format!("---\nmodel: gpt-test\n{front}---\nGo.\n");
        let path = self.cfg.base_dir.join("p.md");
        let spec = TaskSpec::from_text(&self.cfg, &path, &text, &[]).map_err(|e| e.to_string())?;
        // The refusal `task submit` makes.
        if let Some(why) = crate::backend::capabilities::refusal(self.kind, &spec) {
            return Err(why);
        }
        let id = TaskId::new();
        self.store().submit(id, &spec, 0, None, 1).unwrap();
        self.acts.lock().unwrap().insert(id, act);
        Ok(id.to_string())
    }

    async fn submit_elsewhere(&mut self, act: Act, front: &str) -> String {
        let text = format!("---\nmodel: gpt-test\n{front}---\nGo.\n");
        let path = self.cfg.base_dir.join("p.md");
        let spec = TaskSpec::from_text(&self.cfg, &path, &text, &[]).unwrap();
        let id = TaskId::new();
        self.store().submit(id, &spec, 0, None, 1).unwrap();
        self.acts.lock().unwrap().insert(id, act);
        id.to_string()
    }

    async fn start_foreman(&mut self, drain: bool) {
        assert!(self.foreman.is_none(), "one foreman at a time");
        let ctx = self.ctx();
        *self.lease.lock().unwrap() = Some(ctx.lease.clone());
        let (d, stop) = (CancellationToken::new(), CancellationToken::new());
        let opts = ServeOptions { drain, only: None };
        let serving = tokio::spawn(run(ctx, opts, d.clone(), stop));
        self.foreman = Some((serving, d));
    }

    async fn wait_foreman(&mut self) {
        let (f, _) = self.foreman.take().expect("a foreman");
        f.await.unwrap().unwrap();
    }

    async fn kill_foreman(&mut self) {
        let (f, _) = self.foreman.take().expect("a foreman");
        // Dropped mid-flight, as `kill -9` leaves it: no goodbye.
        f.abort();
        let _ = f.await;
        // Its lease lapses in wall-clock time.
        std::thread::sleep(self.cfg.file.lease + Duration::from_millis(100));
    }

    async fn task(&mut self, id: &str) -> Seen {
        let s = self.store();
        let t = s.get(id).unwrap().expect("the task");
        let events = s.events(t.id).unwrap();
        Seen {
            state: t.state.to_string(),
            reason: t.reason.clone().unwrap_or_default(),
            detail: t.detail.clone().unwrap_or_default(),
            parked: t.parked,
            attempt: t.attempt,
            events: events
                .into_iter()
                .map(|e| {
                    let to = e.kind.clone().unwrap_or_else(|| e.to.to_string());
                    (to, e.detail.unwrap_or_default())
                })
                .collect(),
        }
    }

    async fn results(&mut self, id: &str, file: &str) -> Option<String> {
        std::fs::read_to_string(self.cfg.results_dir().join(id).join(file)).ok()
    }

    async fn working(&mut self, id: &str) {
        let id = Self::id(id);
        for _ in 0..1000 {
            if self.fake.files(id).contains_key("before.txt") {
                return;
            }
            self.tick().await;
        }
        panic!("task {id} never worked");
    }

    async fn cancel(&mut self, id: &str) {
        self.store().request_cancel(Self::id(id)).unwrap();
    }

    async fn answer(&mut self, id: &str, text: &str) {
        let act = HumanAct::Answer(text.into());
        self.store()
            .reply(Self::id(id), &act, "conformance")
            .unwrap();
    }

    async fn lose(&mut self, id: &str) {
        let why = "node `fake-2` is down".to_string();
        self.fake.end(Self::id(id), Phase::Lost(why));
    }

    async fn revive(&mut self) {}

    async fn gc(&mut self) {}

    async fn servos(&mut self, id: &str) -> Vec<String> {
        let id = Self::id(id);
        if self.fake.alive(id) {
            vec![format!("fake-{id}")]
        } else {
            Vec::new()
        }
    }

    async fn leftovers(&mut self, id: &str) -> Vec<String> {
        self.servos(id).await
    }

    async fn tick(&mut self) {
        tokio::time::sleep(suite::TICK).await;
        // Leases and backoffs are wall-clock: let some pass too.
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[tokio::test(start_paused = true)]
async fn the_fake_engine_declaring_the_local_engine_passes_the_suite() {
    let mut b = FakeBench::new(BackendKind::Docker);
    suite::all(&mut b).await;
}

#[tokio::test(start_paused = true)]
async fn the_fake_engine_declaring_a_swarm_passes_the_suite() {
    let mut b = FakeBench::new(BackendKind::Swarm);
    suite::all(&mut b).await;
}
