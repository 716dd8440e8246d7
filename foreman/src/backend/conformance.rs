//! The conformance suite (issue 53): every case of a task's life, written
//! once against the engine seam and run on every engine. An engine is done
//! when it passes [`all`]: each case whose capability it declares passes,
//! and a task needing a capability it does not declare is refused at
//! submit, naming the capability (never launched, never skipped).
//!
//! Where it runs:
//! - the Fake engine, in the supervisor's unit tests with a paused clock
//!   (`supervisor/conformance_tests.rs`: the real serve loop, the Fake
//!   playing each servo's acts as phases, store writes and files), once
//!   declaring each engine's capabilities;
//! - this host's Docker (`tests/it/conformance_local.rs`);
//! - a real three-node swarm (`tests/it/conformance_swarm.rs`), and one
//!   whose foreman keeps a warm pool, each case's task served by a warm
//!   job (`tests/it/conformance_swarm_pool.rs`).
//!
//! The file names no crate item: `tests/it` includes it as it is
//! (`#[path]`). Each place supplies a [`Bench`], the engine factory: a
//! foreman on the engine under test, a servo that acts as the case says
//! (a replay script on a real engine), and what the engine left.
//!
//! The cases, in [`all`]'s order: [`launch_watch_collect`], [`stop`],
//! [`cancel`], [`adopt`], [`park_and_resume`], [`verify`], [`lost`],
//! [`refused`], and [`nothing_left`] over every task the others made.

#![allow(dead_code)] // each place that includes it uses its own part

use std::time::Duration;

/// What a case's servo does. A real engine's servo runs it as a replay
/// script; the Fake plays the same acts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Act {
    /// Writes `marker.txt` ("done") and completes.
    Completes,
    /// Writes `before.txt` ("before"), then works (a shell step of a
    /// minute) until it is stopped.
    Works,
    /// Writes `before.txt` ("before"), works for [`WORK_S`] seconds,
    /// writes `marker.txt` ("done") and completes.
    WorksThenCompletes,
    /// Writes `before.txt` ("1"), asks a human (`park_after: 1s`: it
    /// parks), then copies `before.txt` to `out.txt` and completes.
    Asks,
    /// Claims done before `marker.txt` exists (`verify: test -f
    /// marker.txt` fails, attempt 1), writes it and claims again (passes).
    Verified,
}

/// How long [`Act::WorksThenCompletes`] works.
pub(crate) const WORK_S: u64 = 12;

/// The task as `task status --json` shows it: what the cases read.
#[derive(Clone, Debug, Default)]
pub(crate) struct Seen {
    pub state: String,
    pub reason: String,
    pub detail: String,
    pub parked: bool,
    pub attempt: i64,
    /// Its events: (the state it went to, or the event's kind; detail).
    pub events: Vec<(String, String)>,
}

impl Seen {
    /// How many events went to `to`.
    pub fn count(&self, to: &str) -> usize {
        self.events.iter().filter(|(t, _)| t == to).count()
    }

    /// Whether it is in a terminal state.
    pub fn ended(&self) -> bool {
        ["complete", "incomplete", "failed", "cancelled"].contains(&self.state.as_str())
    }

    /// How many times it ended (events into a terminal state).
    pub fn endings(&self) -> usize {
        ["complete", "incomplete", "failed", "cancelled"]
            .iter()
            .map(|s| self.count(s))
            .sum()
    }
}

/// A foreman on the engine under test, and what the cases ask of it.
#[allow(async_fn_in_trait)] // implemented and called in this crate only
pub(crate) trait Bench {
    /// The `backend:` value of the engine under test.
    fn engine(&self) -> &'static str;
    /// Whether the engine's declaration says yes to `capability` (the
    /// name `saheeli doctor` prints).
    fn declares(&self, capability: &str) -> bool;
    /// Submits a task whose servo does `act`, with `front` added to its
    /// front-matter; Err: the refusal's message.
    async fn submit(&mut self, act: Act, front: &str) -> Result<String, String>;
    /// Queues a task as a foreman of another engine would, with no
    /// refusal at submit (it lacks nothing there): the engine under test
    /// must refuse it when it claims it.
    async fn submit_elsewhere(&mut self, act: Act, front: &str) -> String;
    /// Starts a foreman (`serve`; `drain`: it ends when nothing runs).
    async fn start_foreman(&mut self, drain: bool);
    /// Waits until the foreman started with `drain` has ended.
    async fn wait_foreman(&mut self);
    /// Kills the foreman with no goodbye (`kill -9`).
    async fn kill_foreman(&mut self);
    async fn task(&mut self, id: &str) -> Seen;
    /// A file of the task's results, if it came home.
    async fn results(&mut self, id: &str, file: &str) -> Option<String>;
    /// Waits until the servo of `id` wrote `before.txt`: it works now.
    async fn working(&mut self, id: &str);
    async fn cancel(&mut self, id: &str);
    async fn answer(&mut self, id: &str, text: &str);
    /// The infrastructure under `id`'s running servo dies: its node's
    /// daemon (a swarm), this host's daemon (local), a lost phase (fake).
    async fn lose(&mut self, id: &str);
    /// Brings back what [`Bench::lose`] killed.
    async fn revive(&mut self);
    /// `saheeli gc`: what ended tasks left is removed.
    async fn gc(&mut self);
    /// Servos of `id` on the engine: containers, job services.
    async fn servos(&mut self, id: &str) -> Vec<String>;
    /// Anything of `id` on the engine: servos, volumes, secrets, mounts.
    async fn leftovers(&mut self, id: &str) -> Vec<String>;
    /// Waits a little before looking again (a paused clock moves).
    async fn tick(&mut self);
}

/// Polls `id` until `done` holds; fails naming `what` after `secs`
/// (counted in looks: a paused clock has no wall time).
pub(crate) async fn until<B: Bench>(
    b: &mut B,
    id: &str,
    what: &str,
    secs: u64,
    done: impl Fn(&Seen) -> bool,
) -> Seen {
    // A tick is ~200 ms on a real engine.
    for _ in 0..secs * 5 {
        let seen = b.task(id).await;
        if done(&seen) {
            return seen;
        }
        b.tick().await;
    }
    let seen = b.task(id).await;
    panic!("{}: {what}: not reached in {secs}s: {seen:#?}", b.engine());
}

/// Every case, in order, on one bench; then nothing left of any task.
pub(crate) async fn all<B: Bench>(b: &mut B) {
    let mut made = Vec::new();
    let t = std::time::Instant::now();
    let e = b.engine();
    let mut done = |case: &str, ids: Vec<String>| {
        eprintln!("{e}: {case} passed at {:.1}s", t.elapsed().as_secs_f64());
        made.extend(ids);
    };
    done("launch_watch_collect", launch_watch_collect(b).await);
    done("stop", stop(b).await);
    done("cancel", cancel(b).await);
    done("adopt", adopt(b).await);
    done("park_and_resume", park_and_resume(b).await);
    done("verify", verify(b).await);
    done("lost", lost(b).await);
    done("refused", refused(b).await);
    nothing_left(b, &made).await;
    eprintln!("{e}: nothing_left passed");
}

/// Launch, watch, collect: the servo runs (the phases seen in order:
/// starting, running, the ending), its workspace comes home, and the task
/// completes once, on its first attempt.
pub(crate) async fn launch_watch_collect<B: Bench>(b: &mut B) -> Vec<String> {
    let id = b.submit(Act::Completes, "").await.expect("accepted");
    b.start_foreman(true).await;
    b.wait_foreman().await;
    let seen = b.task(&id).await;
    let e = b.engine();
    assert_eq!(seen.state, "complete", "{e}: {seen:#?}");
    assert_eq!((seen.reason.as_str(), seen.attempt), ("complete", 1), "{e}");
    let order: Vec<&str> = seen
        .events
        .iter()
        .map(|(t, _)| t.as_str())
        .filter(|t| ["starting", "running", "complete"].contains(t))
        .collect();
    assert_eq!(order, ["starting", "running", "complete"], "{e}: {seen:#?}");
    let marker = b.results(&id, "marker.txt").await;
    assert_eq!(marker.as_deref().map(str::trim), Some("done"), "{e}");
    vec![id]
}

/// Stop: at its timeout the servo is stopped (TERM, then KILL), what it
/// wrote comes home, and the task ends `incomplete`, reason `timeout`.
pub(crate) async fn stop<B: Bench>(b: &mut B) -> Vec<String> {
    let id = b
        .submit(Act::Works, "timeout: 20s\n")
        .await
        .expect("accepted");
    b.start_foreman(true).await;
    b.wait_foreman().await;
    let seen = b.task(&id).await;
    let e = b.engine();
    assert_eq!(
        (seen.state.as_str(), seen.reason.as_str()),
        ("incomplete", "timeout"),
        "{e}: {seen:#?}"
    );
    assert_eq!(seen.endings(), 1, "{e}: {seen:#?}");
    let before = b.results(&id, "before.txt").await;
    assert_eq!(before.as_deref().map(str::trim), Some("before"), "{e}");
    vec![id]
}

/// Cancel: a running servo is stopped, its workspace collected, and the
/// task ends `cancelled`.
pub(crate) async fn cancel<B: Bench>(b: &mut B) -> Vec<String> {
    let id = b.submit(Act::Works, "").await.expect("accepted");
    b.start_foreman(true).await;
    b.working(&id).await;
    b.cancel(&id).await;
    b.wait_foreman().await;
    let seen = b.task(&id).await;
    let e = b.engine();
    assert_eq!(
        (seen.state.as_str(), seen.reason.as_str()),
        ("cancelled", "cancelled"),
        "{e}: {seen:#?}"
    );
    assert_eq!(seen.endings(), 1, "{e}: {seen:#?}");
    let before = b.results(&id, "before.txt").await;
    assert_eq!(before.as_deref().map(str::trim), Some("before"), "{e}");
    vec![id]
}

/// Adopt after a foreman restart: the foreman is killed while its servo
/// works; another adopts the servo (never requeued, never launched
/// again) and collects it: complete once, on the first attempt.
pub(crate) async fn adopt<B: Bench>(b: &mut B) -> Vec<String> {
    let id = b
        .submit(Act::WorksThenCompletes, "")
        .await
        .expect("accepted");
    b.start_foreman(false).await;
    b.working(&id).await;
    b.kill_foreman().await;
    b.start_foreman(true).await;
    b.wait_foreman().await;
    let seen = b.task(&id).await;
    let e = b.engine();
    assert_eq!(seen.state, "complete", "{e}: {seen:#?}");
    assert_eq!((seen.attempt, seen.endings()), (1, 1), "{e}: {seen:#?}");
    assert_eq!(seen.count("queued"), 1, "never requeued: {e}: {seen:#?}");
    assert_eq!(seen.count("starting"), 1, "launched once: {e}: {seen:#?}");
    let marker = b.results(&id, "marker.txt").await;
    assert_eq!(marker.as_deref().map(str::trim), Some("done"), "{e}");
    vec![id]
}

/// Park and resume (`parking`): a task waiting on a human past
/// `park_after` gives up its servo, keeps its workspace, and the answer
/// launches a new servo that goes on from it to complete.
pub(crate) async fn park_and_resume<B: Bench>(b: &mut B) -> Vec<String> {
    let front = "park_after: 1s\n";
    if !b.declares("parking") {
        expect_refused(b, Act::Asks, front, "parking").await;
        return Vec::new();
    }
    let id = b.submit(Act::Asks, front).await.expect("accepted");
    b.start_foreman(false).await;
    until(b, &id, "parked", 90, |t| {
        t.state == "waiting_human" && t.parked
    })
    .await;
    // No servo while parked (it goes once the park is recorded).
    let mut left = b.servos(&id).await;
    for _ in 0..150 {
        if left.is_empty() {
            break;
        }
        b.tick().await;
        left = b.servos(&id).await;
    }
    assert_eq!(left, Vec::<String>::new(), "{}: a parked servo", b.engine());
    b.answer(&id, "out.txt").await;
    let seen = until(b, &id, "complete after the answer", 120, Seen::ended).await;
    b.kill_foreman().await;
    let e = b.engine();
    assert_eq!(seen.state, "complete", "{e}: {seen:#?}");
    assert_eq!(seen.count("starting"), 2, "two launches: {e}: {seen:#?}");
    let out = b.results(&id, "out.txt").await;
    assert_eq!(
        out.as_deref().map(str::trim),
        Some("1"),
        "{e}: the resumed servo went on from the parked workspace"
    );
    vec![id]
}

/// Verify (`verify`): `verify:` runs on the task's workspace in a fresh
/// container; a failing attempt goes back to the agent, a passing one
/// completes the task, both recorded in `complete.json`.
pub(crate) async fn verify<B: Bench>(b: &mut B) -> Vec<String> {
    let front = "verify: test -f marker.txt\n";
    if !b.declares("verify") {
        expect_refused(b, Act::Verified, front, "verify").await;
        return Vec::new();
    }
    let id = b.submit(Act::Verified, front).await.expect("accepted");
    b.start_foreman(true).await;
    b.wait_foreman().await;
    let seen = b.task(&id).await;
    let e = b.engine();
    assert_eq!(seen.state, "complete", "{e}: {seen:#?}");
    let completion = b
        .results(&id, "complete.json")
        .await
        .expect("complete.json");
    let completion: serde_json::Value = serde_json::from_str(&completion).unwrap();
    let checks: Vec<(u64, bool)> = completion["verification"]
        .as_array()
        .expect("verification")
        .iter()
        .map(|c| (c["attempt"].as_u64().unwrap(), c["passed"] == true))
        .collect();
    assert_eq!(checks, [(1, false), (2, true)], "{e}: {completion:#}");
    vec![id]
}

/// A lost node or a dead daemon: the infrastructure under a working
/// servo dies. The task ends exactly once, never `failed`: completed
/// after a requeue (a swarm runs it on another node), or ended with what
/// its workspace held.
pub(crate) async fn lost<B: Bench>(b: &mut B) -> Vec<String> {
    let id = b
        .submit(Act::WorksThenCompletes, "")
        .await
        .expect("accepted");
    b.start_foreman(true).await;
    b.working(&id).await;
    b.lose(&id).await;
    b.wait_foreman().await;
    b.revive().await;
    let seen = b.task(&id).await;
    let e = b.engine();
    let requeued: Vec<&str> = seen
        .events
        .iter()
        .filter(|(t, _)| t == "queued")
        .skip(1)
        .map(|(_, d)| d.as_str())
        .collect();
    eprintln!(
        "{e}: lost: ended {} ({}), requeued {requeued:?}",
        seen.state, seen.reason
    );
    assert!(seen.ended(), "{e}: {seen:#?}");
    assert_eq!(seen.endings(), 1, "ended once: {e}: {seen:#?}");
    assert!(
        ["complete", "incomplete"].contains(&seen.state.as_str()),
        "{e}: {seen:#?}"
    );
    let file = if seen.state == "complete" {
        "marker.txt"
    } else {
        "before.txt"
    };
    assert!(
        b.results(&id, file).await.is_some(),
        "{e}: {file}: {seen:#?}"
    );
    vec![id]
}

/// The front-matter that needs each capability a prompt can ask for
/// (`hidden_tests` comes only with an imported benchmark task, `gpus`
/// and `suspension` with no setting yet).
pub(crate) const ASKED: [(&str, &str); 9] = [
    ("third_party_agents", "agent: codex\n"),
    ("task_images", "image: saheeli-conformance-none:latest\n"),
    ("root_agent", "agent_user: root\n"),
    ("setup", "setup: [\"true\"]\n"),
    ("egress", "egress: {agent: [example.org]}\n"),
    ("child_tasks", "delegate: {max_children: 2}\n"),
    ("disk_quota", "resources: {disk: 1g}\n"),
    ("parking", "park_after: 1s\n"),
    ("snapshots", "snapshots: every\n"),
];

/// Capabilities whose settings need nothing of this host at submit (no
/// agent's or task's image), so that another engine's foreman queues them.
const QUEUED_ELSEWHERE: [&str; 7] = [
    "root_agent",
    "setup",
    "egress",
    "child_tasks",
    "disk_quota",
    "parking",
    "snapshots",
];

/// Refusals: a task needing a capability the engine does not declare is
/// refused at submit, naming the capability, the engine and the setting;
/// one queued meanwhile by a foreman of another engine is failed
/// `unsupported` when claimed, never launched. (What it declares is
/// covered by the case or test its declaration names.)
pub(crate) async fn refused<B: Bench>(b: &mut B) -> Vec<String> {
    let mut made = Vec::new();
    for (capability, front) in ASKED {
        if b.declares(capability) {
            continue;
        }
        expect_refused(b, Act::Completes, front, capability).await;
        if !QUEUED_ELSEWHERE.contains(&capability) {
            continue;
        }
        let id = b.submit_elsewhere(Act::Completes, front).await;
        b.start_foreman(true).await;
        b.wait_foreman().await;
        let seen = b.task(&id).await;
        let e = b.engine();
        assert_eq!(
            (seen.state.as_str(), seen.reason.as_str()),
            ("failed", "unsupported"),
            "{e}: {seen:#?}"
        );
        assert!(
            seen.detail
                .contains(&format!("the engine capability `{capability}`")),
            "{e}: {seen:#?}"
        );
        assert_eq!(seen.count("running"), 0, "never launched: {e}: {seen:#?}");
        assert_eq!(b.servos(&id).await, Vec::<String>::new(), "{e}");
        made.push(id);
    }
    made
}

async fn expect_refused<B: Bench>(b: &mut B, act: Act, front: &str, capability: &str) {
    let e = b.engine();
    match b.submit(act, front).await {
        Ok(id) => panic!("{e}: a task needing `{capability}` was accepted: {id}"),
        Err(why) => assert!(
            why.contains(&format!("the engine capability `{capability}`"))
                && why.contains(&format!("`backend: {e}` lacks")),
            "{e}: {why}"
        ),
    }
}

/// Nothing left behind: once `gc` ran, no servo, volume, secret or mount
/// of any task the cases made is on the engine.
pub(crate) async fn nothing_left<B: Bench>(b: &mut B, ids: &[String]) {
    let mut left = Vec::new();
    for _ in 0..150 {
        b.gc().await;
        left.clear();
        for id in ids {
            left.extend(b.leftovers(id).await);
        }
        if left.is_empty() {
            return;
        }
        b.tick().await;
    }
    panic!("{}: left behind: {left:?}", b.engine());
}

/// A tick on a real engine.
pub(crate) const TICK: Duration = Duration::from_millis(200);
