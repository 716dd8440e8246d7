//! The conformance suite (`foreman/src/backend/conformance.rs`, issue 53)
//! on a real three-node swarm whose foreman keeps a warm pool (`pool: [{
//! size: 2 }]`): each case's task is served by a warm job claimed through
//! the gateway's hub, not by a service made for it, and must keep every
//! promise a cold job keeps: watched and collected, stopped at its
//! timeout, cancelled, adopted by the next foreman, parked (the answer
//! starts a cold job on the workspace it parked with), verified in a
//! fresh container beside it on its node, and its node's dockerd killed
//! mid-run (the task ends once, queued again once: no idle job of the
//! lost node is claimed by its next launch). Nothing of the tasks or the
//! pool is left on any node after the drain.
//!
//! A drain claims its queue before any warm job runs, so this bench keeps
//! one foreman serving (not draining) across the cases, submits each task
//! once the pool is full, and waits for the tasks a drain would have
//! waited for. One swarm, its own octet (249), the manager drained as in
//! `conformance_swarm`.

use std::process::Child;
use std::time::{Duration, Instant};

use crate::conformance::{Act, Bench, Cli, Infra, Seen, suite};
use crate::swarm::{Fixture, elapsed, serve};
use crate::swarm_pool::{pool_db, pool_objects};
use crate::util::require_docker;

/// The pool's size.
const SIZE: i64 = 2;

/// The suite's bench on a foreman serving with a warm pool.
struct Warm {
    cli: Cli,
    foreman: Option<Child>,
    /// When the serving foreman started (ms since the epoch).
    started_ms: i64,
    /// Every task submitted: what a drain would wait for.
    ids: Vec<String>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

impl Warm {
    /// A foreman serves (one is started when none does).
    fn serving(&mut self) {
        if self.foreman.is_none() {
            self.started_ms = now_ms();
            self.foreman = Some(serve(&self.cli.s, false));
        }
    }

    /// Waits until the serving foreman's pool has [`SIZE`] idle jobs
    /// (its admission row, written since it started).
    fn warm(&mut self) {
        self.serving();
        let db = rusqlite::Connection::open(self.cli.s.path().join("saheeli.db")).unwrap();
        db.busy_timeout(Duration::from_secs(5)).unwrap();
        let t = Instant::now();
        loop {
            let idle: Option<i64> = db
                .query_row(
                    "SELECT pool_idle FROM admission WHERE updated_at >= ?1 \
                     ORDER BY updated_at DESC LIMIT 1",
                    [self.started_ms],
                    |r| r.get(0),
                )
                .ok()
                .flatten();
            if idle.is_some_and(|n| n >= SIZE) {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(180),
                "the pool never had {SIZE} idle jobs ({idle:?})\n{}",
                self.cli.log()
            );
            std::thread::sleep(suite::TICK);
        }
    }

    /// Stops the serving foreman as `serve` is stopped (SIGINT: it drains
    /// and removes its idle jobs).
    fn drain(&mut self) {
        let Some(mut f) = self.foreman.take() else {
            return;
        };
        unsafe { libc::kill(f.id() as i32, libc::SIGINT) };
        crate::swarm::wait_exit(&mut f, &self.cli.s);
    }
}

impl Bench for Warm {
    fn engine(&self) -> &'static str {
        self.cli.engine()
    }

    fn declares(&self, capability: &str) -> bool {
        self.cli.declares(capability)
    }

    async fn submit(&mut self, act: Act, front: &str) -> Result<String, String> {
        self.warm();
        let id = self.cli.submit(act, front).await?;
        self.ids.push(id.clone());
        Ok(id)
    }

    async fn submit_elsewhere(&mut self, act: Act, front: &str) -> String {
        let id = self.cli.submit_elsewhere(act, front).await;
        self.ids.push(id.clone());
        id
    }

    async fn start_foreman(&mut self, _drain: bool) {
        self.serving();
    }

    /// As a drain: until every task submitted has ended.
    async fn wait_foreman(&mut self) {
        let t = Instant::now();
        for id in self.ids.clone() {
            while !self.cli.task(&id).await.ended() {
                assert!(
                    t.elapsed() < Duration::from_secs(300),
                    "task {id} never ended: {:#?}\n{}",
                    self.cli.task(&id).await,
                    self.cli.log()
                );
                std::thread::sleep(suite::TICK);
            }
        }
    }

    async fn kill_foreman(&mut self) {
        let mut f = self.foreman.take().expect("a foreman");
        f.kill().unwrap();
        f.wait().unwrap();
    }

    async fn task(&mut self, id: &str) -> Seen {
        self.cli.task(id).await
    }

    async fn results(&mut self, id: &str, file: &str) -> Option<String> {
        self.cli.results(id, file).await
    }

    async fn working(&mut self, id: &str) {
        self.cli.working(id).await
    }

    async fn cancel(&mut self, id: &str) {
        self.cli.cancel(id).await
    }

    async fn answer(&mut self, id: &str, text: &str) {
        self.cli.answer(id, text).await
    }

    async fn lose(&mut self, id: &str) {
        self.cli.lose(id).await
    }

    async fn revive(&mut self) {
        self.cli.revive().await
    }

    async fn gc(&mut self) {
        self.cli.gc().await
    }

    async fn servos(&mut self, id: &str) -> Vec<String> {
        self.cli.servos(id).await
    }

    async fn leftovers(&mut self, id: &str) -> Vec<String> {
        self.cli.leftovers(id).await
    }

    async fn tick(&mut self) {
        self.cli.tick().await
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        if let Some(mut f) = self.foreman.take() {
            let _ = f.kill();
            let _ = f.wait();
        }
    }
}

#[test]
fn the_swarm_engine_passes_the_conformance_suite_with_warm_jobs() {
    require_docker();
    let t0 = Instant::now();
    let Fixture { swarm, s, base, .. } = Fixture::up(249);
    s.write(
        "config.yaml",
        &format!("{base}pool:\n  - {{ size: {SIZE} }}\n"),
    );
    let db = pool_db(&s);
    // Jobs on the workers only: the lost-node case kills one's dockerd.
    let me = swarm.lines(1, &["info", "--format", "{{.Swarm.NodeID}}"]);
    let drained = swarm.docker(1, &["node", "update", "--availability", "drain", &me[0]]);
    assert!(drained.status.success(), "{drained:?}");
    let mut bench = Warm {
        cli: Cli::new(s, "swarm", Infra::Swarm(swarm)),
        foreman: None,
        started_ms: 0,
        ids: Vec::new(),
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(suite::all(&mut bench));
    eprintln!("the swarm engine with warm jobs passed in {}", elapsed(t0));

    // Each task that ran was served by a warm job first (a parked task's
    // next launch, and a lost one's, may be cold). The lost one was queued
    // again once: its node's idle jobs died with it, and none of them was
    // claimed by its next launch (to be lost again).
    let mut warm = 0;
    for id in &bench.ids {
        let task = bench.cli.s.task(id);
        let events = task["events"].as_array().unwrap();
        let down = events
            .iter()
            .filter(|e| e["to"] == "queued")
            .filter(|e| e["detail"].as_str().is_some_and(|d| d.contains("is down")))
            .count();
        assert!(down <= 1, "lost more than once: {task:#}");
        // Its first launch's place (recorded as it runs; a servo that
        // asks at once may be waiting for a human by then).
        let first = events
            .iter()
            .filter_map(|e| e["detail"].as_str())
            .find(|d| d.contains(" on node "))
            .map(String::from);
        let Some(first) = first else { continue };
        assert!(first.starts_with("warm job "), "{task:#}");
        warm += 1;
    }
    assert!(warm >= 7, "{warm} tasks served warm");

    // The drain removes the idle jobs: nothing of the pool anywhere.
    bench.drain();
    let Infra::Swarm(swarm) = &bench.cli.infra else {
        unreachable!()
    };
    let t = Instant::now();
    loop {
        let left = pool_objects(swarm, &db);
        if left.is_empty() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the pool left {left:?}\n{}",
            bench.cli.log()
        );
        std::thread::sleep(suite::TICK);
    }
    eprintln!("{warm} tasks served warm; done in {}", elapsed(t0));
}
