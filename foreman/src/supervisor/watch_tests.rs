//! Every arm of the watch loop, on the fake engine with a paused clock:
//! no Docker, and time only moves when every task waits.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use saheeli_protocol::{Reason, TaskId};

use super::*;
use crate::backend::{Engine, Fake, Phase, Servo, Stop};
use crate::config::{Config, ConfigFile};
use crate::llm::Meter;
use crate::state::TaskState;
use crate::store::{Lease, Store, TaskRow};
use crate::supervisor::{Control, Ctx, Inbox, channel};

/// A foreman's context on a temporary directory, its engine `fake`.
struct Rig {
    ctx: Arc<Ctx>,
    fake: Fake,
    _dir: tempfile::TempDir,
}

impl Rig {
    fn new() -> Rig {
        Rig::with(Fake::new())
    }

    fn with(fake: Fake) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let file = ConfigFile {
            database: dir.path().join("saheeli.db"),
            results_dir: dir.path().join("results"),
            state_dir: dir.path().join("state"),
            run_dir: Some(dir.path().join("run")),
            stop_grace: Duration::from_secs(10),
            ..ConfigFile::default()
        };
        let cfg = Config {
            source: None,
            base_dir: dir.path().to_path_buf(),
            file,
            set_keys: Default::default(),
        };
        let upstream = Arc::new(crate::llm::Upstream::from_config(&cfg).unwrap());
        let ctx = Ctx {
            lease: Lease::new(Duration::from_millis(1)),
            engine: Engine::Fake(fake.clone()),
            store: Arc::new(Mutex::new(Store::open(&cfg.database()).unwrap())),
            bus: crate::events::Bus::new(16),
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
        };
        Rig {
            ctx: Arc::new(ctx),
            fake,
            _dir: dir,
        }
    }

    /// A task claimed by this foreman (`starting`), timing out after
    /// `timeout_s`; `running`: recorded as running already.
    fn task(&self, timeout_s: u64, running: bool) -> TaskRow {
        let mut spec = crate::store::tests::spec("watched");
        spec.timeout_s = timeout_s;
        let mut store = self.ctx.store.lock().unwrap();
        let id = TaskId::new();
        store.submit(id, &spec, 0, None, 1).unwrap();
        let task = store
            .claim_next(Some(id), &self.ctx.lease)
            .unwrap()
            .unwrap();
        if running {
            store.started(id, &self.ctx.lease, "fake").unwrap();
        }
        task
    }

    fn servo(&self, task: &TaskRow) -> Servo {
        match &self.ctx.engine {
            Engine::Fake(f) => f.launch(task.id).unwrap().servo,
            _ => unreachable!(),
        }
    }

    fn state(&self, id: TaskId) -> TaskRow {
        let store = self.ctx.store.lock().unwrap();
        store.get(&id.to_string()).unwrap().unwrap()
    }

    /// Another foreman takes `id` over (this one's lease has lapsed).
    fn lose(&self) {
        std::thread::sleep(Duration::from_millis(20));
        let mut other = Store::open(&self.ctx.cfg.database()).unwrap();
        let taken = other
            .take_over_expired(&Lease::new(Duration::from_secs(60)))
            .unwrap();
        assert_eq!(taken.len(), 1, "the task was taken over");
    }

    /// Watches `task` on its own tokio task.
    fn watch(
        &self,
        task: &TaskRow,
        running: bool,
        meter: Option<Arc<Meter>>,
    ) -> (
        Control,
        tokio::task::JoinHandle<Option<Watched>>,
        Arc<std::sync::atomic::AtomicBool>,
    ) {
        let (control, inbox): (Control, Inbox) = channel();
        let waiting = inbox.waiting();
        let (ctx, task, servo) = (self.ctx.clone(), task.clone(), self.servo(task));
        let started = crate::store::now_ms();
        let handle = tokio::spawn(async move {
            watch(
                &ctx,
                &task,
                &servo,
                meter.as_deref().map(|meter| Llm {
                    meter,
                    held: Arc::default(),
                }),
                started,
                running,
                inbox,
            )
            .await
        });
        (control, handle, waiting)
    }
}

#[tokio::test(start_paused = true)]
async fn an_exit_code_ends_the_watch_as_it_came() {
    let rig = Rig::new();
    let task = rig.task(60, true);
    let (_control, watching, _) = rig.watch(&task, true, None);
    rig.fake.phase(Phase::Exited(3));
    let w = watching.await.unwrap().expect("still held");
    assert!(matches!(w.ended, Ended::Exited(3)), "{w:?}");
    assert!(!w.timed_out && w.stopped.is_none());
    assert!(rig.fake.stops().is_empty(), "nothing was stopped");
}

#[tokio::test(start_paused = true)]
async fn a_failed_watch_is_an_unknown_exit() {
    let rig = Rig::new();
    let task = rig.task(60, true);
    let (_control, watching, _) = rig.watch(&task, true, None);
    rig.fake.fails("the daemon never came back");
    let w = watching.await.unwrap().unwrap();
    assert!(matches!(w.ended, Ended::WaitFailed(_)), "{w:?}");
    assert_eq!(w.exit(), None);
}

#[tokio::test(start_paused = true)]
async fn the_running_phase_is_recorded_and_a_quick_exit_too() {
    let rig = Rig::new();
    let task = rig.task(60, false);
    let (_control, watching, _) = rig.watch(&task, false, None);
    rig.fake.phase(Phase::Running);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rig.state(task.id).state, TaskState::Running);
    rig.fake.phase(Phase::Exited(0));
    assert!(matches!(
        watching.await.unwrap().unwrap().ended,
        Ended::Exited(0)
    ));

    // A servo that ended before any look is recorded as having run.
    let task = rig.task(60, false);
    let (_control, watching, _) = rig.watch(&task, false, None);
    rig.fake.phase(Phase::Exited(0));
    assert!(watching.await.unwrap().is_some());
    assert_eq!(rig.state(task.id).state, TaskState::Running);
}

#[tokio::test(start_paused = true)]
async fn a_lost_servo_ends_the_watch_as_lost() {
    let rig = Rig::new();
    let task = rig.task(60, true);
    let (_control, watching, _) = rig.watch(&task, true, None);
    rig.fake.phase(Phase::Lost("node `n1` is down".into()));
    let w = watching.await.unwrap().unwrap();
    assert!(
        matches!(&w.ended, Ended::Lost(why) if why.contains("n1")),
        "{w:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_timeout_stops_the_servo_with_term() {
    let rig = Rig::new();
    let task = rig.task(60, true);
    rig.fake.exits_on(Stop::Term, 143);
    let (_control, watching, _) = rig.watch(&task, true, None);
    let w = watching.await.unwrap().unwrap();
    assert!(w.timed_out && w.stopped.is_none());
    assert!(matches!(w.ended, Ended::Exited(143)));
    assert_eq!(rig.fake.stops(), [Stop::Term]);
}

#[tokio::test(start_paused = true)]
async fn a_stop_that_did_not_take_is_sent_again_as_kill_until_the_servo_is_gone() {
    let rig = Rig::new();
    let task = rig.task(1, true);
    let (_control, watching, _) = rig.watch(&task, true, None);
    // The servo ignores TERM and the first kills: asked again and again.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let stops = rig.fake.stops();
    assert!(stops.len() >= 3, "{stops:?}");
    assert_eq!(stops[0], Stop::Term);
    assert!(stops[1..].iter().all(|s| *s == Stop::Kill), "{stops:?}");
    rig.fake.phase(Phase::Exited(137));
    let w = watching.await.unwrap().unwrap();
    assert!(w.timed_out && matches!(w.ended, Ended::Exited(137)));
    let after = rig.fake.stops().len();
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        rig.fake.stops().len(),
        after,
        "no stop after the servo is gone"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancel_stops_the_servo_and_says_why() {
    let rig = Rig::new();
    let task = rig.task(3600, true);
    rig.fake.exits_on(Stop::Term, 143);
    let (control, watching, _) = rig.watch(&task, true, None);
    tokio::time::sleep(Duration::from_secs(2)).await;
    control.stop(Reason::Cancelled);
    let w = watching.await.unwrap().unwrap();
    assert_eq!(w.stopped, Some(Reason::Cancelled));
    assert!(!w.timed_out);
    assert_eq!(rig.fake.stops(), [Stop::Term]);
}

#[tokio::test(start_paused = true)]
async fn a_task_lost_to_another_foreman_is_let_go_untouched() {
    let rig = Rig::new();
    let task = rig.task(3600, true);
    let (control, watching, _) = rig.watch(&task, true, None);
    control.lose();
    assert!(watching.await.unwrap().is_none());
    assert!(rig.fake.stops().is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_lease_is_checked_before_a_timeout_stops_anything() {
    let rig = Rig::new();
    let task = rig.task(5, true);
    rig.lose();
    let (_control, watching, _) = rig.watch(&task, true, None);
    assert!(watching.await.unwrap().is_none(), "the new holder's servo");
    assert!(
        rig.fake.stops().is_empty(),
        "the other foreman's servo was not stopped"
    );
}

#[tokio::test(start_paused = true)]
async fn the_lease_is_checked_before_a_cancel_stops_anything() {
    let rig = Rig::new();
    let task = rig.task(3600, true);
    let (control, watching, _) = rig.watch(&task, true, None);
    rig.lose();
    control.stop(Reason::Cancelled);
    assert!(watching.await.unwrap().is_none());
    assert!(rig.fake.stops().is_empty());
}

#[tokio::test(start_paused = true)]
async fn live_usage_is_written_each_second() {
    let rig = Rig::new();
    let task = rig.task(3600, true);
    let meter = Arc::new(Meter::default());
    meter.seed(100, 20, 0.5);
    meter.calls.store(2, Ordering::Relaxed);
    let (_control, watching, _) = rig.watch(&task, true, Some(meter));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let row = rig.state(task.id);
    assert_eq!((row.input_tokens, row.output_tokens), (100, 20));
    assert!((row.cost_usd - 0.5).abs() < 1e-9);
    rig.fake.phase(Phase::Exited(0));
    assert!(watching.await.unwrap().is_some());
}

#[tokio::test(start_paused = true)]
async fn a_lost_lease_when_writing_usage_ends_the_watch() {
    let rig = Rig::new();
    let task = rig.task(3600, true);
    let meter = Arc::new(Meter::default());
    meter.seed(1, 1, 0.0);
    meter.calls.store(1, Ordering::Relaxed);
    rig.lose();
    let (_control, watching, _) = rig.watch(&task, true, Some(meter));
    assert!(watching.await.unwrap().is_none());
    assert!(rig.fake.stops().is_empty());
}

#[tokio::test(start_paused = true)]
async fn time_waiting_for_a_human_does_not_count_against_the_timeout() {
    let rig = Rig::new();
    let task = rig.task(10, true);
    rig.fake.exits_on(Stop::Term, 143);
    let (_control, watching, waiting) = rig.watch(&task, true, None);
    waiting.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(rig.fake.stops().is_empty(), "no timeout while waiting");
    waiting.store(false, Ordering::Relaxed);
    let w = watching.await.unwrap().unwrap();
    assert!(w.timed_out);
    assert!((29_000..=31_000).contains(&w.waited_ms), "{}", w.waited_ms);
    assert_eq!(rig.fake.stops(), [Stop::Term]);
}

/// Issue 9 §6: a stop that did not take is asked again, as a kill.
#[test]
fn a_stop_that_did_not_take_escalates_to_kill_and_keeps_asking() {
    let grace = Duration::from_secs(10);
    assert_eq!(stop_step(0, grace), (Stop::Term, Duration::from_secs(5)));
    for attempt in 1..5 {
        assert_eq!(
            stop_step(attempt, grace),
            (Stop::Kill, Duration::from_secs(5))
        );
    }
    assert_eq!(stop_step(1, Duration::ZERO).1, Duration::from_secs(1));
}

/// Issue 53: a task needing a capability its engine lacks (queued under
/// another backend) ends `failed`, reason `unsupported`, naming the
/// capability and the setting, and nothing is launched.
#[tokio::test(start_paused = true)]
async fn a_task_needing_what_its_engine_lacks_fails_unsupported_unlaunched() {
    let rig = Rig::with(Fake::new().declaring(crate::config::BackendKind::Swarm));
    let mut spec = crate::store::tests::spec("sized");
    spec.disk = Some(1 << 30);
    spec.disk_asked = true;
    let id = TaskId::new();
    let task = {
        let mut store = rig.ctx.store.lock().unwrap();
        store.submit(id, &spec, 0, None, 1).unwrap();
        store.claim_next(Some(id), &rig.ctx.lease).unwrap().unwrap()
    };
    let (_control, inbox): (Control, Inbox) = channel();
    crate::supervisor::run(rig.ctx.clone(), task, inbox).await;
    let t = rig.state(id);
    assert_eq!(t.state, TaskState::Failed);
    assert_eq!(t.reason.as_deref(), Some("unsupported"));
    let detail = t.detail.unwrap_or_default();
    assert!(
        detail.contains("`resources.disk` needs the engine capability `disk_quota`")
            && detail.contains("`backend: swarm` lacks")
            && detail.contains("run it with `backend: docker`"),
        "{detail}"
    );
    assert_eq!(rig.fake.launches(), 0);
    // The same task on this host's engine is launched.
    let local = Rig::new();
    let id = TaskId::new();
    let task = {
        let mut store = local.ctx.store.lock().unwrap();
        store.submit(id, &spec, 0, None, 1).unwrap();
        store
            .claim_next(Some(id), &local.ctx.lease)
            .unwrap()
            .unwrap()
    };
    let (control, inbox): (Control, Inbox) = channel();
    let ctx = local.ctx.clone();
    let run = tokio::spawn(crate::supervisor::run(ctx, task, inbox));
    while local.fake.launches() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    control.stop(Reason::Cancelled);
    local.fake.phase(Phase::Exited(0));
    let _ = run.await;
}
