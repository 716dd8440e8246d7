//! `backend: swarm` on a real 3-node Docker Swarm of this test's own
//! (scripts/swarm.sh: three dockerd in private network namespaces, a
//! registry), brought up once and torn down at the end, failure included.
//! If the swarm cannot start, the test fails.
//!
//! The engines serve their APIs only over TLS (`--tlsverify`, with
//! certificates the test makes: `swarm_certs`), as do the other swarm
//! tests' (they share `Fixture`).
//!
//! One test, in steps sharing the swarm (starting one takes ~15 s): TLS
//! (refused with another CA's client certificate or an engine certificate
//! the foreman's CA did not sign, a missing key file named); twelve
//! tasks over at least two nodes; the hardening of a task container on a
//! worker as `docker inspect` shows it; the gateway refusing no token, a
//! wrong one and another task's (from the host and from inside a servo).
//! A worker's dockerd killed mid-task, the foreman killed mid-task, a
//! cancel mid-run and nothing left on any node are the conformance
//! suite's cases, run on a swarm of their own (`conformance_swarm`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::*;

/// A test's own swarm: addresses `10.<octet>.0.x`, namespaces `s<octet>-…`,
/// node directories under `/tmp/saheeli-swarm-it-<octet>`. Each swarm test
/// takes its own octet (235 and up: none shared with scripts/swarm.sh's
/// defaults or the shared recipe), so tests run side by side;
/// `SAHEELI_SWARM_IT_SHIFT=k` adds k to every octet (two checkouts testing
/// at once on one machine).
pub(crate) struct TestSwarm {
    pub pfx: String,
    pub ns: String,
    pub base: String,
    /// The certificates its engines are served with (`--tlsverify`) and
    /// the foreman's client certificate (`swarm_certs::make`).
    pub tls: tempfile::TempDir,
}

impl TestSwarm {
    fn script_cmd(&self, args: &[&str]) -> Command {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut c = Command::new(root.join("scripts/swarm.sh"));
        c.args(args)
            .env("PFX", &self.pfx)
            .env("NS", &self.ns)
            .env("BASE", &self.base)
            .env("TLS_DIR", self.tls.path())
            .env("IMAGE", "saheeli-base:bookworm");
        c
    }

    pub fn up(octet: u8) -> TestSwarm {
        let shift: u8 = std::env::var("SAHEELI_SWARM_IT_SHIFT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let octet = octet
            .checked_add(shift)
            .expect("SAHEELI_SWARM_IT_SHIFT too large");
        let pfx = format!("10.{octet}.0");
        let tls = tempfile::tempdir().unwrap();
        crate::swarm_certs::make(tls.path(), &pfx, 3);
        let swarm = TestSwarm {
            pfx,
            ns: format!("s{octet}"),
            base: format!("/tmp/saheeli-swarm-it-{octet}"),
            tls,
        };
        // What a crashed earlier run of this test left (same names: ours).
        let _ = swarm.script_cmd(&["down"]).output();
        let out = swarm
            .script_cmd(&["up"])
            .output()
            .expect("running scripts/swarm.sh");
        assert!(
            out.status.success(),
            "the test swarm did not start (scripts/swarm.sh up); these tests need root, \
             docker.io and docker-registry (scripts/setup.sh swarm)\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        swarm
    }

    pub fn docker(&self, node: u32, args: &[&str]) -> Output {
        Command::new("docker")
            .arg("-H")
            .arg(format!("unix://{}/n{node}/docker.sock", self.base))
            .args(args)
            .output()
            .unwrap()
    }

    pub fn lines(&self, node: u32, args: &[&str]) -> Vec<String> {
        let o = self.docker(node, args);
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    }

    pub fn kill_dockerd(&self, node: u32) {
        let pid = std::fs::read_to_string(format!("{}/n{node}/docker.pid", self.base)).unwrap();
        let st = Command::new("kill")
            .args(["-9", pid.trim()])
            .status()
            .unwrap();
        assert!(st.success());
    }

    pub fn restart(&self, node: u32) {
        let out = self
            .script_cmd(&["restart", &node.to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for TestSwarm {
    fn drop(&mut self) {
        let _ = self.script_cmd(&["down"]).output();
    }
}

/// The servo binary of the test image, for `build-servo --push`.
fn servo_binary(dir: &Path) -> PathBuf {
    let name = format!("saheeli-swarm-it-{}", std::process::id());
    let created = Command::new("docker")
        .args(["create", "--name", &name, &image()])
        .output()
        .unwrap();
    assert!(created.status.success(), "test image `{}` missing", image());
    let bin = dir.join("servo");
    let cp = Command::new("docker")
        .args(["cp", &format!("{name}:/usr/local/bin/servo")])
        .arg(&bin)
        .status()
        .unwrap();
    let _ = Command::new("docker").args(["rm", "-f", &name]).output();
    assert!(cp.success());
    bin
}

fn free_port(pfx: &str) -> u16 {
    let l = std::net::TcpListener::bind(format!("{pfx}.1:0")).unwrap();
    l.local_addr().unwrap().port()
}

pub(crate) fn elapsed(t: Instant) -> String {
    format!("{:.1}s", t.elapsed().as_secs_f64())
}

/// The node a task's `running` event names (`… on node s235-node2`).
pub(crate) fn node_of(task: &Value) -> Option<u32> {
    let events = task["events"].as_array()?;
    let detail = events.iter().rev().find(|e| e["to"] == "running")?["detail"].as_str()?;
    let name = detail.rsplit("on node ").next()?;
    name.rsplit_once("-node")?.1.parse().ok()
}

pub(crate) fn serve(s: &Saheeli, drain: bool) -> Child {
    let mut args = vec!["serve"];
    if drain {
        args.push("--drain");
    }
    s.cmd(&args)
        .env("RUST_LOG", "saheeli=info")
        .stdout(Stdio::null())
        .stderr(Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(s.path().join("serve.log"))
                .unwrap(),
        ))
        .spawn()
        .unwrap()
}

/// Waits until every task in `ids` runs, and returns their nodes.
pub(crate) fn wait_running(s: &Saheeli, ids: &[String]) -> Vec<u32> {
    let t = Instant::now();
    loop {
        let nodes: Vec<Option<u32>> = ids
            .iter()
            .map(|id| {
                let task = s.task(id);
                (task["state"] == "running")
                    .then(|| node_of(&task))
                    .flatten()
            })
            .collect();
        if nodes.iter().all(Option::is_some) {
            return nodes.into_iter().map(Option::unwrap).collect();
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "tasks not running: {}\n{}",
            ids.iter()
                .map(|id| s.task(id).to_string())
                .collect::<Vec<_>>()
                .join("\n"),
            std::fs::read_to_string(s.path().join("serve.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until `file` exists in the workspace of task `id`'s container on
/// `node`: the servo's work has reached that point (polled, not slept on).
pub(crate) fn wait_in_workspace(swarm: &TestSwarm, node: u32, id: &str, file: &str) {
    let t = Instant::now();
    let path = format!("{}/{file}", saheeli_protocol::paths::WORKSPACE);
    loop {
        let label = format!("label=saheeli.task={id}");
        let there = swarm
            .lines(node, &["ps", "-q", "--filter", &label])
            .first()
            .is_some_and(|c| {
                swarm
                    .docker(node, &["exec", c, "test", "-e", &path])
                    .status
                    .success()
            });
        if there {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(90),
            "`{path}` never appeared in task {id}'s container on node {node}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub(crate) fn wait_exit(child: &mut Child, s: &Saheeli) {
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert!(
                st.code().is_some(),
                "serve died: {st}\n{}",
                std::fs::read_to_string(s.path().join("serve.log")).unwrap_or_default()
            );
            return;
        }
        if t.elapsed() > Duration::from_secs(240) {
            let _ = child.kill();
            panic!(
                "serve did not finish\n{}",
                std::fs::read_to_string(s.path().join("serve.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `curl` against the gateway: the HTTP status.
fn curl_status(url: &str, headers: &[String]) -> String {
    let mut c = Command::new("curl");
    c.args([
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "10",
    ]);
    for h in headers {
        c.args(["-H", h]);
    }
    let o = c.arg(url).output().unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A task completed once, from one launch that uploaded its workspace.
pub(crate) fn assert_complete_once(s: &Saheeli, id: &str, marker: &str) {
    let t = s.task(id);
    assert_eq!(t["state"], "complete", "{t:#}");
    assert_eq!(t["attempt"], 1, "{t:#}");
    let completes = t["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["to"] == "complete")
        .count();
    assert_eq!(completes, 1, "{t:#}");
    let dir = s.path().join("results").join(id);
    assert!(dir.join("complete.json").is_file(), "{t:#}");
    assert_eq!(
        std::fs::read_to_string(dir.join(marker)).unwrap().trim(),
        "done",
        "{t:#}"
    );
}

/// A test's swarm and a project using it: `build-servo --push` done, the
/// config naming the pushed image (`base` is that config without `image:`,
/// for tests that add keys).
pub(crate) struct Fixture {
    pub swarm: TestSwarm,
    pub s: Saheeli,
    pub pfx: String,
    /// The gateway's port on `<pfx>.1`.
    pub port: u16,
    #[allow(dead_code)] // the config, for tests that add keys to it
    pub base: String,
}

impl Fixture {
    pub fn up(octet: u8) -> Fixture {
        let t0 = Instant::now();
        let swarm = TestSwarm::up(octet);
        let pfx = swarm.pfx.clone();
        eprintln!("swarm {pfx}.x up in {}", elapsed(t0));
        let s = Saheeli::new();
        let bin = servo_binary(s.path());
        let port = free_port(&pfx);
        // The engines' APIs only over TLS, with the test's own certificates.
        let tls = swarm.tls.path().display();
        let base = format!(
            "backend: swarm\nswarm:\n  manager: tcp://{pfx}.11:2376\n  registry: {pfx}.1:5000\n  \
             network: saheeli-jobs\n  gateway_listen: {pfx}.1:{port}\n  \
             tls: {{ ca: {tls}/ca.pem, cert: {tls}/client-cert.pem, key: {tls}/client-key.pem }}\n\
             concurrency: 12\nrun_dir: {}\nstop_grace: 3s\nlease: 3s\n",
            s.run_dir().display()
        );
        s.write("config.yaml", &base);
        // build-servo --push: built on the manager, pushed, named by digest.
        let t = Instant::now();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let pushed = s.expect(
            &[
                "build-servo",
                "--push",
                "--servo-bin",
                bin.to_str().unwrap(),
                "--context",
                root.to_str().unwrap(),
            ],
            0,
        );
        let pushed = pushed.trim().to_string();
        assert!(
            pushed.starts_with(&format!("{pfx}.1:5000/saheeli-servo@sha256:")),
            "{pushed}"
        );
        eprintln!("build-servo --push in {}", elapsed(t));
        let base = format!("{base}image: {pushed}\n");
        s.write("config.yaml", &base);
        Fixture {
            swarm,
            s,
            pfx,
            port,
            base,
        }
    }
}

#[test]
fn swarm_backend_on_a_real_three_node_swarm() {
    require_docker();
    let t0 = Instant::now();
    let Fixture {
        swarm,
        s,
        pfx,
        port,
        base: _,
    } = Fixture::up(235);

    // 1. Twelve tasks, spread over the nodes, all collected and complete.
    s.write(
        "quick.replay.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "hostname > node.txt; echo done > marker.txt"}),
            ),
            ("task_complete", json!({"message": "ok"})),
        ]),
    );
    s.write("quick.md", &replay_prompt("quick.replay.json", ""));
    let ids: Vec<String> = (0..12).map(|_| s.submit("quick.md")).collect();
    let t = Instant::now();
    s.drain();
    eprintln!("12 tasks on the swarm in {}", elapsed(t));
    let mut nodes = std::collections::BTreeSet::new();
    for id in &ids {
        assert_complete_once(&s, id, "marker.txt");
        nodes.insert(node_of(&s.task(id)).expect("the node is in `task status`"));
    }
    assert!(nodes.len() >= 2, "all on one node: {nodes:?}");

    // 1b. TLS: the engines answer only a client their CA signed, the
    // foreman trusts only `swarm.tls.ca`, and a bad file is named.
    let tls = swarm.tls.path().display().to_string();
    let good = s.path().join("config.yaml");
    let good = std::fs::read_to_string(&good).unwrap();
    let with_tls = |ca: &str, cert: &str, key: &str| {
        let cfg = good.replace(
            &format!(
                "tls: {{ ca: {tls}/ca.pem, cert: {tls}/client-cert.pem, key: {tls}/client-key.pem }}"
            ),
            &format!("tls: {{ ca: {tls}/{ca}, cert: {tls}/{cert}, key: {tls}/{key} }}"),
        );
        assert_ne!(cfg, good);
        s.write("other.yaml", &cfg);
        s.expect_err(&["--config", "other.yaml", "gc", "--dry-run"], 2)
    };
    let manager = format!("tcp://{pfx}.11:2376");
    // A client certificate of another CA: the engine refuses the handshake.
    let e = with_tls("ca.pem", "other-cert.pem", "other-key.pem");
    assert!(e.contains(&manager) && e.contains("over TLS"), "{e}");
    // The engine's certificate not signed by the CA the foreman trusts.
    let e = with_tls("other-ca.pem", "client-cert.pem", "client-key.pem");
    assert!(e.contains(&manager) && e.contains("over TLS"), "{e}");
    // A key file that is not there: named by its key and path.
    let e = with_tls("ca.pem", "client-cert.pem", "missing-key.pem");
    assert!(
        e.contains("`swarm.tls.key`") && e.contains("missing-key.pem"),
        "{e}"
    );
    // Plain HTTP to the TLS port is refused too.
    let plain = good.replace(
        &format!(
            "  tls: {{ ca: {tls}/ca.pem, cert: {tls}/client-cert.pem, key: {tls}/client-key.pem }}\n"
        ),
        "",
    );
    assert_ne!(plain, good);
    s.write("plain.yaml", &plain);
    s.expect_err(&["--config", "plain.yaml", "gc", "--dry-run"], 2);
    // The right certificates: gc (through the manager and every node's
    // engine over TLS) finds nothing to remove yet.
    s.expect(&["gc", "--dry-run"], 0);

    // 2. Long tasks: the hardening of a worker's container, its token.
    s.write(
        "slow.replay.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "sleep 20; echo done > marker.txt"}),
            ),
            ("task_complete", json!({"message": "ok"})),
        ]),
    );
    s.write("slow.md", &replay_prompt("slow.replay.json", ""));
    let slow: Vec<String> = (0..3).map(|_| s.submit("slow.md")).collect();
    let mut server = serve(&s, true);
    let on = wait_running(&s, &slow);
    let (victim, worker) = slow
        .iter()
        .zip(&on)
        .find(|(_, n)| **n != 1)
        .map(|(id, n)| (id.clone(), *n))
        .expect("a task on a worker");
    let other = slow.iter().find(|id| **id != victim).unwrap().clone();
    let container = |node: u32, id: &str| -> String {
        let t = Instant::now();
        loop {
            let found = swarm.lines(
                node,
                &[
                    "ps",
                    "-q",
                    "--no-trunc",
                    "--filter",
                    &format!("label=saheeli.task={id}"),
                ],
            );
            if let Some(c) = found.first() {
                return c.clone();
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "no container of {id} on node {node}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let cid = container(worker, &victim);
    let inspect: Value =
        serde_json::from_slice(&swarm.docker(worker, &["inspect", &cid]).stdout).unwrap();
    let c = &inspect[0];
    let hc = &c["HostConfig"];
    assert_eq!(hc["CapDrop"], json!(["ALL"]), "{hc:#}");
    assert_eq!(hc["ReadonlyRootfs"], true);
    assert_eq!(hc["Init"], true);
    assert_eq!(hc["Privileged"], false);
    assert_eq!(hc["PidsLimit"], 512);
    assert_eq!(hc["Memory"], 2i64 << 30);
    assert_eq!(hc["NanoCpus"], 1_000_000_000i64);
    // Separated as on one host: root with three capabilities, the servo
    // becoming uid 999 and its tools uid 1000.
    assert_eq!(c["Config"]["User"], "0:0");
    assert_eq!(
        hc["CapAdd"],
        json!(["CAP_SETUID", "CAP_SETGID", "CAP_KILL"]),
        "{hc:#}"
    );
    let mounts = hc["Mounts"].as_array().unwrap();
    assert!(
        mounts
            .iter()
            .any(|m| m["Type"] == "tmpfs" && m["Target"] == "/tmp"),
        "{mounts:#?}"
    );
    // Not expressible on 20.10 (see README): no-new-privileges is absent.
    eprintln!("SecurityOpt on the worker: {}", hc["SecurityOpt"]);
    // The token is a secret file of the servo's uid, never in the
    // environment or labels; the agent's uid cannot read it (hostile case
    // 42: it could otherwise upload a workspace of its own first).
    let token_file = "/run/secrets/saheeli-gateway-token";
    let as_agent = swarm.docker(
        worker,
        &["exec", "--user", "1000:1000", &cid, "cat", token_file],
    );
    assert!(
        !as_agent.status.success(),
        "the agent read the token: {}",
        String::from_utf8_lossy(&as_agent.stdout)
    );
    let token = String::from_utf8(
        swarm
            .docker(
                worker,
                &["exec", "--user", "999:999", &cid, "cat", token_file],
            )
            .stdout,
    )
    .unwrap();
    let token = token.trim().to_string();
    assert_eq!(token.len(), 64, "{token:?}");
    let env = c["Config"]["Env"].to_string();
    let labels = c["Config"]["Labels"].to_string();
    assert!(!env.contains(&token) && !labels.contains(&token));

    // The gateway: no token 401; wrong token, or another task's, 403.
    let gw = format!("http://{pfx}.1:{port}/saheeli/v1/launch");
    let auth = |tok: &str| format!("Authorization: Bearer {tok}");
    let task = |id: &str| format!("x-saheeli-task: {id}");
    assert_eq!(curl_status(&gw, &[task(&victim)]), "401");
    assert_eq!(
        curl_status(&gw, &[task(&victim), auth(&"0".repeat(64))]),
        "403"
    );
    assert_eq!(curl_status(&gw, &[task(&other), auth(&token)]), "403");
    assert_eq!(curl_status(&gw, &[task(&victim), auth(&token)]), "200");
    // From inside the servo's container: another task's gateway refuses.
    let py = format!(
        "import urllib.request as u, urllib.error as e\n\
         r = u.Request('{gw}', headers={{'Authorization': 'Bearer {token}', 'x-saheeli-task': '{other}'}})\n\
         try:\n    print(u.urlopen(r, timeout=10).status)\n\
         except e.HTTPError as x:\n    print(x.code)\n"
    );
    let inside = swarm.docker(worker, &["exec", &cid, "python3", "-c", &py]);
    assert_eq!(String::from_utf8_lossy(&inside.stdout).trim(), "403");

    // The tasks end on their own (a worker's dockerd killed mid-task, the
    // foreman killed and its job adopted, a cancel mid-run and nothing left
    // on any node are the conformance suite's cases: conformance_swarm.rs).
    let t = Instant::now();
    wait_exit(&mut server, &s);
    eprintln!("long tasks done in {}", elapsed(t));
    for id in &slow {
        assert_complete_once(&s, id, "marker.txt");
    }
    eprintln!("swarm test done in {}", elapsed(t0));
}
