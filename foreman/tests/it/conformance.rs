//! The conformance suite (issue 53) on the real binary: its cases are
//! `foreman/src/backend/conformance.rs`, included as they are; this is
//! their [`Bench`] for a real engine. A servo acts as a case says through
//! a replay script; the foreman is `saheeli serve`; what an engine left
//! is read from its daemons by label. `conformance_local` runs it on
//! this host's engine (a private dockerd, so its dead-daemon case may stop
//! it), `conformance_swarm` on a real three-node swarm.

use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::{Saheeli, replay_prompt, script};

#[path = "../../src/backend/conformance.rs"]
pub(crate) mod suite;

pub(crate) use suite::{Act, Bench, Seen};

/// What a bench runs on, and how it loses a servo's infrastructure.
pub(crate) enum Infra {
    /// This host's engine on a private dockerd: `lose` restarts it.
    Local(crate::daemon::PrivateDockerd),
    /// A test swarm: `lose` kills the dockerd of the node running the
    /// servo (a worker: the manager runs no jobs), `revive` restarts it.
    Swarm(crate::swarm::TestSwarm),
}

/// The suite's bench on the real binary.
pub(crate) struct Cli {
    pub s: Saheeli,
    engine: &'static str,
    /// Capabilities the engine's column says yes to (`doctor --capabilities`).
    declared: Vec<String>,
    foreman: Option<Child>,
    pub infra: Infra,
    /// The swarm node whose dockerd `lose` killed.
    killed: Option<u32>,
    prompts: usize,
}

impl Cli {
    pub fn new(s: Saheeli, engine: &'static str, infra: Infra) -> Cli {
        let table = s.expect(&["doctor", "--capabilities"], 0);
        let declared = declared(&table, engine);
        assert!(
            declared.iter().any(|c| c == "verify"),
            "{engine}: no capability read from\n{table}"
        );
        Cli {
            s,
            engine,
            declared,
            foreman: None,
            infra,
            killed: None,
            prompts: 0,
        }
    }

    /// The daemons the engine's servos may be on (`-H` values).
    pub fn hosts(&self) -> Vec<(u32, String)> {
        match &self.infra {
            Infra::Local(d) => vec![(0, d.socket())],
            Infra::Swarm(sw) => (1..=3)
                .filter(|n| Some(*n) != self.killed)
                .map(|n| (n, format!("unix://{}/n{n}/docker.sock", sw.base)))
                .collect(),
        }
    }

    fn docker(host: &str, args: &[&str]) -> Vec<String> {
        let o = std::process::Command::new("docker")
            .arg("-H")
            .arg(host)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    }

    /// The task's containers, on whichever daemon: (node, container).
    /// A warm job's (issue 53) carries its pool's labels, not the
    /// task's: found by its name, which the task's events give.
    fn containers(&self, id: &str, all: bool) -> Vec<(u32, String)> {
        let mut out = Vec::new();
        for filter in &self.filters(id, &format!("label=saheeli.task={id}")) {
            let args: &[&str] = if all {
                &["ps", "-aq", "--filter", filter]
            } else {
                &["ps", "-q", "--filter", filter]
            };
            for (n, h) in self.hosts() {
                out.extend(Self::docker(&h, args).into_iter().map(|c| (n, c)));
            }
        }
        out
    }

    /// The warm jobs task `id` was served by (`saheeli-pool-<slot>`, the
    /// name of each one's service, secret and volume, and the start of its
    /// container's), from its events (`warm job <name> on node …`).
    pub fn warm_jobs(&self, id: &str) -> Vec<String> {
        let t = self.s.task(id);
        let mut jobs: Vec<String> = t["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["detail"].as_str()?.strip_prefix("warm job "))
            .filter_map(|d| d.split_whitespace().next())
            .map(String::from)
            .collect();
        jobs.dedup();
        jobs
    }

    /// The swarm's manager (node 1), for services and secrets.
    fn manager(&self) -> Option<String> {
        match &self.infra {
            Infra::Swarm(sw) => Some(format!("unix://{}/n1/docker.sock", sw.base)),
            Infra::Local(_) => None,
        }
    }

    /// `label`, and a name filter for each warm job `id` was served by.
    fn filters(&self, id: &str, label: &str) -> Vec<String> {
        let mut all = vec![label.to_string()];
        all.extend(self.warm_jobs(id).iter().map(|w| format!("name={w}")));
        all
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.s.path().join("serve.log")).unwrap_or_default()
    }
}

/// The capabilities `engine`'s column of `doctor --capabilities` says yes to.
fn declared(table: &str, engine: &str) -> Vec<String> {
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .by_ref()
        .find(|l| l.trim_start().starts_with("capability"))
        .expect("the table's header")
        .split_whitespace()
        .collect();
    let col = header.iter().position(|c| *c == engine).expect("a column");
    lines
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|t| t.len() > col && t[col] == "yes")
        .map(|t| t[0].to_string())
        .collect()
}

/// The replay script a servo runs for `act`.
fn turns(act: Act) -> String {
    let file = |p: &str, c: &str| ("create_file", json!({"path": p, "content": c}));
    let shell = |c: &str| ("execute_shell", json!({"command": c, "timeout_s": 600}));
    let done = |m: &str| ("task_complete", json!({"message": m}));
    let work = format!("sleep {}; echo done > marker.txt", suite::WORK_S);
    script(&match act {
        Act::Completes => vec![file("marker.txt", "done\n"), done("ok")],
        Act::Works => vec![
            file("before.txt", "before\n"),
            shell("sleep 120"),
            done("no"),
        ],
        Act::WorksThenCompletes => vec![file("before.txt", "before\n"), shell(&work), done("ok")],
        Act::Asks => vec![
            file("before.txt", "1\n"),
            ("ask_user", json!({"question": "Name of the output file?"})),
            shell("cat before.txt > out.txt"),
            done("ok"),
        ],
        Act::Verified => vec![
            done("looks done"),
            file("marker.txt", "done\n"),
            done("done"),
        ],
    })
}

/// A task's events as the suite reads them: a note's kind, else the
/// state it went to.
fn seen(t: &Value) -> Seen {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    Seen {
        state: s(&t["state"]),
        reason: s(&t["reason"]),
        detail: s(&t["detail"]),
        parked: t["parked"] == true,
        attempt: t["attempt"].as_i64().unwrap_or_default(),
        events: t["events"]
            .as_array()
            .map(|es| {
                es.iter()
                    .map(|e| {
                        let to = if e["kind"].is_string() {
                            &e["kind"]
                        } else {
                            &e["to"]
                        };
                        (s(to), s(&e["detail"]))
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

impl Bench for Cli {
    fn engine(&self) -> &'static str {
        self.engine
    }

    fn declares(&self, capability: &str) -> bool {
        self.declared.iter().any(|c| c == capability)
    }

    async fn submit(&mut self, act: Act, front: &str) -> Result<String, String> {
        self.prompts += 1;
        let name = format!("{act:?}-{}", self.prompts).to_lowercase();
        self.s.write(&format!("{name}.json"), &turns(act));
        let prompt = format!("{name}.md");
        self.s
            .write(&prompt, &replay_prompt(&format!("{name}.json"), front));
        let out = self
            .s
            .run(&["task", "submit", "--prompt", &prompt, "--json"]);
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        Ok(v["id"].as_str().unwrap().to_string())
    }

    async fn submit_elsewhere(&mut self, act: Act, front: &str) -> String {
        // This project's config with `backend: docker` and this host's
        // image: the same database and results.
        assert!(
            matches!(self.infra, Infra::Swarm(_)),
            "docker lacks nothing"
        );
        let config = std::fs::read_to_string(self.s.path().join("config.yaml")).unwrap();
        let mut local: String = config
            .lines()
            .filter(|l| !l.starts_with("image:") && !l.starts_with("backend:"))
            .map(|l| format!("{l}\n"))
            .collect();
        local.push_str(&format!(
            "backend: docker\nimage: {}\n",
            crate::util::image()
        ));
        self.s.write("elsewhere.yaml", &local);
        self.prompts += 1;
        let name = format!("elsewhere-{}", self.prompts);
        self.s.write(&format!("{name}.json"), &turns(act));
        let prompt = format!("{name}.md");
        self.s
            .write(&prompt, &replay_prompt(&format!("{name}.json"), front));
        let out = self.s.expect(
            &[
                "--config",
                "elsewhere.yaml",
                "task",
                "submit",
                "--prompt",
                &prompt,
                "--json",
            ],
            0,
        );
        let v: Value = serde_json::from_str(&out).unwrap();
        v["id"].as_str().unwrap().to_string()
    }

    async fn start_foreman(&mut self, drain: bool) {
        assert!(self.foreman.is_none(), "one foreman at a time");
        self.foreman = Some(crate::swarm::serve(&self.s, drain));
    }

    async fn wait_foreman(&mut self) {
        let mut f = self.foreman.take().expect("a foreman");
        crate::swarm::wait_exit(&mut f, &self.s);
    }

    async fn kill_foreman(&mut self) {
        let mut f = self.foreman.take().expect("a foreman");
        f.kill().unwrap();
        f.wait().unwrap();
    }

    async fn task(&mut self, id: &str) -> Seen {
        seen(&self.s.task(id))
    }

    async fn results(&mut self, id: &str, file: &str) -> Option<String> {
        std::fs::read_to_string(self.s.path().join("results").join(id).join(file)).ok()
    }

    async fn working(&mut self, id: &str) {
        let t = Instant::now();
        let path = format!("{}/before.txt", saheeli_protocol::paths::WORKSPACE);
        loop {
            let there = self.containers(id, false).iter().any(|(n, c)| {
                let host = &self.hosts().into_iter().find(|(m, _)| m == n).unwrap().1;
                std::process::Command::new("docker")
                    .args(["-H", host, "exec", c, "test", "-e", &path])
                    .status()
                    .is_ok_and(|s| s.success())
            });
            if there {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "{}: task {id} never wrote before.txt: {:#}\n{}",
                self.engine,
                self.s.task(id),
                self.log()
            );
            std::thread::sleep(suite::TICK);
        }
    }

    async fn cancel(&mut self, id: &str) {
        self.s.expect(&["task", "cancel", id], 0);
    }

    async fn answer(&mut self, id: &str, text: &str) {
        self.s.expect(&["task", "answer", id, text], 0);
    }

    async fn lose(&mut self, id: &str) {
        match &mut self.infra {
            Infra::Local(d) => {
                d.stop();
                std::thread::sleep(Duration::from_secs(2));
                d.boot();
            }
            Infra::Swarm(sw) => {
                let on = crate::swarm::wait_running(&self.s, &[id.to_string()])[0];
                assert_ne!(on, 1, "the manager runs no jobs");
                sw.kill_dockerd(on);
                self.killed = Some(on);
            }
        }
    }

    async fn revive(&mut self) {
        let (Infra::Swarm(sw), Some(n)) = (&self.infra, self.killed.take()) else {
            return;
        };
        sw.restart(n);
        let t = Instant::now();
        loop {
            let ready = sw.lines(1, &["node", "ls", "--format", "{{.Status}}"]);
            if ready.iter().filter(|l| *l == "Ready").count() == 3 {
                return;
            }
            assert!(t.elapsed() < Duration::from_secs(60), "{ready:?}");
            std::thread::sleep(suite::TICK);
        }
    }

    async fn gc(&mut self) {
        self.s.expect(&["gc"], 0);
    }

    async fn servos(&mut self, id: &str) -> Vec<String> {
        let label = format!("label=saheeli.task={id}");
        let mut out: Vec<String> = self.containers(id, true).into_iter().map(|c| c.1).collect();
        if let Some(m) = self.manager() {
            for filter in self.filters(id, &label) {
                out.extend(Self::docker(
                    &m,
                    &["service", "ls", "-q", "--filter", &filter],
                ));
            }
        }
        out
    }

    async fn leftovers(&mut self, id: &str) -> Vec<String> {
        let label = format!("label=saheeli.task={id}");
        let mut out = self.servos(id).await;
        let filters = self.filters(id, &label);
        for (filter, (_, h)) in filters
            .iter()
            .flat_map(|f| self.hosts().into_iter().map(move |h| (f, h)))
        {
            out.extend(Self::docker(
                &h,
                &["volume", "ls", "-q", "--filter", filter],
            ));
        }
        if let Some(m) = self.manager() {
            for filter in &filters {
                out.extend(Self::docker(
                    &m,
                    &["secret", "ls", "-q", "--filter", filter],
                ));
            }
        }
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        out.extend(
            mounts
                .lines()
                .filter_map(|l| l.split(' ').nth(4))
                .filter(|m| m.ends_with(&format!("/workspaces/{id}/mnt")))
                .map(String::from),
        );
        out
    }

    async fn tick(&mut self) {
        std::thread::sleep(suite::TICK);
    }
}

impl Drop for Cli {
    fn drop(&mut self) {
        if let Some(mut f) = self.foreman.take() {
            let _ = f.kill();
            let _ = f.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- serve.log\n{}", self.log());
        }
    }
}
