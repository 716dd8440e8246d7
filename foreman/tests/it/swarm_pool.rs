//! Issue 53: the warm pool on a real three-node swarm. `pool:` keeps job
//! services started on the nodes, each carrying its pool's labels and no
//! task's; a task is served by one with no service created for it (the
//! manager's events say so), completes, and the pool refills; its `env:`
//! reaches it through the claim. A foreman killed mid-task with idle and
//! claimed jobs: the next one adopts the claimed job (the task completes
//! once) and removes the dead foreman's idle ones; a task's live log
//! (`task logs --follow`) is read from its warm job while it runs, and
//! its cancel removes the job; `serve`'s drain removes the idle ones,
//! leaving nothing of the pool on any node. Verify, parking, a timeout
//! and a lost node on warm jobs are the conformance suite's cases, run
//! with a pool by `conformance_swarm_pool`.

use std::collections::BTreeSet;
use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::swarm::{Fixture, TestSwarm, assert_complete_once, node_of, serve};
use crate::util::*;

/// The pool label's value for a project (as the foreman labels what its
/// pool makes).
pub(crate) fn pool_db(s: &Saheeli) -> String {
    use sha2::Digest;
    let db = s.path().join("saheeli.db");
    let digest = sha2::Sha256::digest(db.as_os_str().as_encoded_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The project's warm job services' names, through the manager.
fn warm_services(swarm: &TestSwarm, db: &str) -> Vec<String> {
    swarm.lines(
        1,
        &[
            "service",
            "ls",
            "--filter",
            &format!("label=saheeli.pool={db}"),
            "--format",
            "{{.Name}}",
        ],
    )
}

/// Warm job services whose servo runs on a node now.
fn running_warm(swarm: &TestSwarm, db: &str) -> Vec<String> {
    warm_services(swarm, db)
        .into_iter()
        .filter(|name| {
            swarm
                .lines(1, &["service", "ps", name, "--format", "{{.CurrentState}}"])
                .iter()
                .any(|s| s.starts_with("Running"))
        })
        .collect()
}

/// Everything of the project's pool anywhere: services and secrets (the
/// manager), containers and volumes (every node).
pub(crate) fn pool_objects(swarm: &TestSwarm, db: &str) -> Vec<String> {
    let label = format!("label=saheeli.pool={db}");
    let mut all = Vec::new();
    for args in [
        vec!["service", "ls", "-q", "--filter", &label],
        vec!["secret", "ls", "-q", "--filter", &label],
    ] {
        all.extend(swarm.lines(1, &args));
    }
    for node in 1..=3 {
        for args in [
            vec!["ps", "-aq", "--filter", &label],
            vec!["volume", "ls", "-q", "--filter", &label],
        ] {
            all.extend(
                swarm
                    .lines(node, &args)
                    .into_iter()
                    .map(|o| format!("n{node}:{o}")),
            );
        }
    }
    all
}

/// Waits until `f` holds (polled every 250 ms), failing with `what`, the
/// tasks and the foreman's log.
fn until(s: &Saheeli, patience: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < patience,
            "{what}\n{:#?}\n{}",
            s.tasks(),
            std::fs::read_to_string(s.path().join("serve.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The names of the services the manager created since `since` (unix s).
fn services_created(swarm: &TestSwarm, since: u64) -> Vec<String> {
    let until = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 1;
    swarm.lines(
        1,
        &[
            "events",
            "--since",
            &since.to_string(),
            "--until",
            &until.to_string(),
            "--filter",
            "type=service",
            "--filter",
            "event=create",
            "--format",
            "{{.Actor.Attributes.name}}",
        ],
    )
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A `serve` of this test: drained (SIGINT) when dropped still running.
struct Serving(Child);

impl Serving {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    fn drain(&mut self) {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        let t = Instant::now();
        while !matches!(self.0.try_wait(), Ok(Some(_))) {
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "serve did not drain"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
            let t = Instant::now();
            while !matches!(self.0.try_wait(), Ok(Some(_))) && t.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `task logs ID --follow`, its lines read as they come.
struct Follow {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Follow {
    fn start(s: &Saheeli, id: &str) -> Follow {
        use std::io::BufRead;
        let mut child = s
            .cmd(&["task", "logs", id, "--follow"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Follow { child, lines }
    }

    /// The next line, within `patience`.
    fn line(&mut self, patience: Duration) -> String {
        match self.lines.recv_timeout(patience) {
            Ok(line) => line,
            Err(e) => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("no live log line ({e}): {}", stderr_of(&mut self.child));
            }
        }
    }

    /// The command ends, successfully, once its task has.
    fn ends(&mut self) {
        let t = Instant::now();
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "`task logs --follow` did not end with its task"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(status.success(), "{status}: {}", stderr_of(&mut self.child));
    }
}

/// What a finished command wrote to stderr.
fn stderr_of(child: &mut Child) -> String {
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    err
}

impl Drop for Follow {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn warm_jobs_on_a_real_three_node_swarm() {
    require_docker();
    let Fixture { swarm, s, base, .. } = Fixture::up(247);
    s.write("config.yaml", &format!("{base}pool:\n  - {{ size: 2 }}\n"));
    let db = pool_db(&s);
    let log = || std::fs::read_to_string(s.path().join("serve.log")).unwrap_or_default();

    // 1. Two warm jobs run on the nodes, labelled as the pool's, no task's.
    let mut server = Serving(serve(&s, false));
    let t = Instant::now();
    while running_warm(&swarm, &db).len() != 2 {
        if t.elapsed() > Duration::from_secs(120) {
            let all: Vec<String> = warm_services(&swarm, &db)
                .into_iter()
                .map(|n| {
                    let o = swarm.docker(1, &["service", "ps", "--no-trunc", &n]);
                    String::from_utf8_lossy(&o.stdout).into_owned()
                })
                .collect();
            panic!("two warm jobs never ran: {all:#?}\n{}", log());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let first: BTreeSet<String> = warm_services(&swarm, &db).into_iter().collect();
    for name in &first {
        assert!(name.starts_with("saheeli-pool-"), "{name}");
        let labels = swarm.lines(
            1,
            &[
                "service",
                "inspect",
                name,
                "--format",
                "{{json .Spec.Labels}}",
            ],
        );
        assert!(!labels[0].contains("saheeli.task"), "{labels:?}");
    }

    // 2. A task is served by one: no service is created for it, its
    // `env:` reaches it, it completes, its job goes and the pool refills.
    s.write(
        "quick.replay.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "echo \"$GREETING\" > env.txt; echo done > marker.txt"}),
            ),
            ("task_complete", json!({"message": "ok"})),
        ]),
    );
    s.write(
        "quick.md",
        &replay_prompt("quick.replay.json", "env: { GREETING: warm-hello }\n"),
    );
    let since = now_s();
    let id = s.submit("quick.md");
    until(
        &s,
        Duration::from_secs(120),
        "the warm task never ended",
        || s.task(&id)["state"] == "complete",
    );
    assert_complete_once(&s, &id, "marker.txt");
    let dir = s.path().join("results").join(&id);
    assert_eq!(
        std::fs::read_to_string(dir.join("env.txt")).unwrap().trim(),
        "warm-hello"
    );
    let task = s.task(&id);
    let node = node_of(&task).expect("the node is in `task status`");
    let ran = task["events"].as_array().unwrap().iter();
    let ran: Vec<&str> = ran
        .filter(|e| e["to"] == "running")
        .filter_map(|e| e["detail"].as_str())
        .collect();
    // `task status` names the warm job it ran in: one of the idle ones.
    let job = ran.first().and_then(|d| d.strip_prefix("warm job "));
    let job = job.and_then(|d| d.split_whitespace().next());
    assert!(
        ran.len() == 1 && job.is_some_and(|j| first.contains(j)),
        "{first:?}: {task:#}"
    );
    eprintln!("warm task ran on node {node}");
    let created = services_created(&swarm, since);
    assert!(
        !created.iter().any(|n| n.contains(&id)),
        "a service was created for the task: {created:?}"
    );
    until(
        &s,
        Duration::from_secs(120),
        "the pool never refilled",
        || {
            let now: BTreeSet<String> = running_warm(&swarm, &db).into_iter().collect();
            now.len() == 2 && now.iter().filter(|n| first.contains(*n)).count() == 1
        },
    );
    // The refill is what was created since the claim: pool jobs only.
    let created = services_created(&swarm, since);
    assert!(
        !created.is_empty() && created.iter().all(|n| n.starts_with("saheeli-pool-")),
        "{created:?}"
    );

    // 3. A foreman killed with an idle and a claimed job: the next one
    // adopts the claimed one (the task completes once, in that job) and
    // removes the dead foreman's idle one.
    s.write(
        "slow.replay.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "sleep 12; echo done > marker.txt"}),
            ),
            ("task_complete", json!({"message": "ok"})),
        ]),
    );
    s.write("slow.md", &replay_prompt("slow.replay.json", ""));
    let slow = s.submit("slow.md");
    until(
        &s,
        Duration::from_secs(60),
        "the slow task never ran",
        || s.task(&slow)["state"] == "running",
    );
    let claimed = s.task(&slow)["container"].as_str().unwrap().to_string();
    assert!(claimed.starts_with("saheeli-pool-"), "{claimed}");
    let before: BTreeSet<String> = warm_services(&swarm, &db).into_iter().collect();
    server.kill();
    let old_idle: Vec<String> = before.into_iter().filter(|n| *n != claimed).collect();
    assert!(!old_idle.is_empty(), "no idle job when the foreman died");
    let mut server = Serving(serve(&s, false));
    until(
        &s,
        Duration::from_secs(120),
        "the adopted warm task never completed",
        || s.task(&slow)["state"] == "complete",
    );
    assert_complete_once(&s, &slow, "marker.txt");
    until(
        &s,
        Duration::from_secs(60),
        "the dead foreman's idle jobs were not removed",
        || {
            let now = warm_services(&swarm, &db);
            old_idle.iter().all(|o| !now.contains(o)) && !now.contains(&claimed)
        },
    );

    // 4. A cancel mid-run: the task's job goes with it.
    let cancelled = s.submit("slow.md");
    until(
        &s,
        Duration::from_secs(60),
        "the task to cancel never ran",
        || s.task(&cancelled)["state"] == "running",
    );
    let job = s.task(&cancelled)["container"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(job.starts_with("saheeli-pool-"), "{job}");
    // Its live log (`task logs --follow`) is the warm job's container's,
    // on its node: the task's audit lines (its start first) while it
    // runs, and the command ends with the task.
    let mut follow = Follow::start(&s, &cancelled);
    let live = follow.line(Duration::from_secs(60));
    assert!(
        live.contains("replay:slow.replay.json"),
        "not its start: {live}"
    );
    assert_eq!(s.task(&cancelled)["state"], "running");
    s.expect(&["task", "cancel", &cancelled], 0);
    until(
        &s,
        Duration::from_secs(60),
        "the cancelled task never ended",
        || s.task(&cancelled)["state"] == "cancelled",
    );
    follow.ends();
    until(
        &s,
        Duration::from_secs(60),
        "the cancelled task's job stayed",
        || !warm_services(&swarm, &db).contains(&job),
    );

    // 5. The drain removes the idle jobs: nothing of the pool is left
    // anywhere (services, secrets, containers, volumes on every node).
    until(
        &s,
        Duration::from_secs(120),
        "the pool never refilled",
        || running_warm(&swarm, &db).len() == 2,
    );
    server.drain();
    until(
        &s,
        Duration::from_secs(60),
        "warm jobs left after the drain",
        || pool_objects(&swarm, &db).is_empty(),
    );
}
