//! Issue 28: the warm pool. A task served by a warm servo gives what the
//! same task gives cold, in a container `docker inspect` shows hardened
//! alike; its `env:` reaches it and no other; a task no class is exactly
//! launches cold; an idle servo killed is replaced; a foreman killed with
//! idle and claimed servos leaves nothing running twice and nothing
//! behind; `serve` (its drain) and `gc` remove idle servos; a class of
//! `size: auto` keeps as many warm as launches came lately.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::lifecycle::wait_for;
use crate::util::{Saheeli, leftovers, replay_prompt, require_docker, script};

/// The pool label's value for a project: its database's path, hashed
/// (as the foreman labels what its pool makes).
fn pool_db(s: &Saheeli) -> String {
    use sha2::Digest;
    let db = s.path().join("saheeli.db");
    let digest = sha2::Sha256::digest(db.as_os_str().as_encoded_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

fn docker(args: &[&str]) -> String {
    let o = Command::new("docker").args(args).output().unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn lines(s: String) -> Vec<String> {
    s.lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// The project's warm servos' containers (`running`: only running ones).
fn warm(s: &Saheeli, running: bool) -> Vec<String> {
    let label = format!("label=saheeli.pool={}", pool_db(s));
    let mut args = vec!["ps", "--filter", &label, "--format", "{{.Names}}"];
    if !running {
        args.insert(1, "-a");
    }
    lines(docker(&args))
}

/// The project's warm servos' workspaces: volumes (no disk limit) and
/// images on this host (`.saheeli/workspaces/p-<hex>`), by servo name.
fn warm_volumes(s: &Saheeli) -> Vec<String> {
    let label = format!("label=saheeli.pool={}", pool_db(s));
    let mut all = lines(docker(&["volume", "ls", "-q", "--filter", &label]));
    if let Ok(dirs) = std::fs::read_dir(s.path().join(".saheeli/workspaces")) {
        all.extend(dirs.filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(format!("saheeli-pool-{}", name.strip_prefix("p-")?))
        }));
    }
    all
}

/// The type of a container's /workspace mount (`bind`, `volume`).
fn workspace_type(c: &Value) -> String {
    c["Mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["Destination"] == "/workspace")
        .and_then(|m| m["Type"].as_str())
        .unwrap_or("none")
        .to_string()
}

fn inspect(container: &str) -> Value {
    let v: Value = serde_json::from_str(&docker(&["inspect", container])).unwrap();
    v[0].clone()
}

/// What `docker inspect` shows of a servo's hardening and limits.
fn hardening(c: &Value) -> Value {
    let hc = &c["HostConfig"];
    let mut mounts: Vec<Value> = c["Mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| json!([m["Type"], m["Destination"], m["RW"]]))
        .collect();
    mounts.sort_by_key(|m| m.to_string());
    json!({
        "hc": [hc["CapDrop"], hc["CapAdd"], hc["ReadonlyRootfs"], hc["Privileged"],
               hc["NetworkMode"], hc["Init"], hc["PidsLimit"], hc["Memory"],
               hc["MemorySwap"], hc["NanoCpus"], hc["SecurityOpt"], hc["LogConfig"],
               hc["Ulimits"], hc["Tmpfs"]],
        "config": [c["Config"]["User"], c["Config"]["Image"], c["Config"]["WorkingDir"],
                   c["Config"]["StopSignal"], c["Config"]["NetworkDisabled"]],
        "mounts": mounts,
    })
}

fn ended(s: &Saheeli, id: &str) -> bool {
    let t = s.task(id);
    ["complete", "failed", "incomplete"].contains(&t["state"].as_str().unwrap_or(""))
}

/// The detail of the task's move to `running` (where it ran).
fn ran_in(s: &Saheeli, id: &str) -> String {
    s.task(id)["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["to"] == "running")
        .and_then(|e| e["detail"].as_str())
        .unwrap_or("")
        .to_string()
}

/// The files in `results/<id>/`, by path, with their text: the task's
/// id, times and paths made the same (`ID`, `T`), the servo's own session
/// and audit log (named by the task) left out.
fn agent_files(results: &Path, id: &str) -> BTreeMap<String, String> {
    let short = &id[id.len() - 12..];
    let same = |text: String| -> String {
        text.lines()
            .map(|l| {
                if ["finished", "started", "duration", "collected "]
                    .iter()
                    .any(|w| l.contains(w))
                {
                    "T".to_string()
                } else {
                    l.replace(id, "ID").replace(short, "ID")
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut out = BTreeMap::new();
    let mut stack = vec![results.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(results).unwrap().display().to_string();
            if rel.starts_with("servo-") || rel.starts_with(".saheeli") {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                out.insert(rel, same(std::fs::read_to_string(&p).unwrap_or_default()));
            }
        }
    }
    out
}

/// The tasks' prompt: reads the submitted workspace, writes what the
/// agent's shell sees of `FOO`, completes.
fn project(s: &Saheeli, extra: &str) {
    s.write("ws/hello.txt", "hello from the workspace\n");
    s.write(
        "s.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "cat hello.txt > seen.txt; echo \"FOO=$FOO\" > env.txt; sleep 1"}),
            ),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write(
        "env.md",
        &replay_prompt(
            "s.json",
            &format!("workspace: ws\nenv: {{ FOO: bar }}\n{extra}"),
        ),
    );
    s.write(
        "plain.md",
        &replay_prompt("s.json", &format!("workspace: ws\n{extra}")),
    );
    s.write(
        "big.md",
        &replay_prompt(
            "s.json",
            &format!("workspace: ws\nresources: {{ memory: 512m }}\n{extra}"),
        ),
    );
}

/// A `saheeli serve` of a test: drained (SIGINT, its warm servos removed)
/// when dropped still running, so that a failing test leaves no foreman
/// refilling its pool after it.
struct Serving(Child);

impl Serving {
    /// `kill -9`: a foreman that dies without draining.
    fn kill(&mut self) -> std::io::Result<()> {
        self.0.kill()?;
        self.0.wait().map(drop)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
            if !wait_for(Duration::from_secs(30), || {
                matches!(self.0.try_wait(), Ok(Some(_)))
            }) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
    }
}

fn serve(s: &Saheeli) -> Serving {
    Serving(
        s.cmd(&["serve"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn interrupt(mut serve: Serving) {
    unsafe { libc::kill(serve.0.id() as i32, libc::SIGINT) };
    let _ = serve.0.wait();
}

#[test]
fn a_warm_task_is_a_cold_task_launched_sooner() {
    warm_is_cold("", "bind");
}

/// With no size limit, warm and cold servos alike work on a named volume.
#[test]
fn without_a_disk_limit_a_warm_task_is_a_cold_task_on_a_volume() {
    warm_is_cold("limits: { disk_enforcement: off }\n", "volume");
}

/// Warm and cold servos of projects configured with `extra` give the same
/// results and hardening, their /workspace a `mount` mount.
fn warm_is_cold(extra: &str, mount: &str) {
    require_docker();
    let pool = Saheeli::with_config(&format!("pool:\n  - {{ size: 2, max_idle: 10m }}\n{extra}"));
    project(&pool, "");
    let cold = Saheeli::with_config(extra);
    project(&cold, "");

    // Cold: the same task, no pool; its container inspected while it runs.
    let cold_id = cold.submit("env.md");
    let mut drain = cold
        .cmd(&["serve", "--drain"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut cold_container = String::new();
    assert!(wait_for(Duration::from_secs(60), || {
        let label = format!("label=saheeli.task={cold_id}");
        cold_container = docker(&["ps", "-q", "--no-trunc", "--filter", &label])
            .trim()
            .to_string();
        !cold_container.is_empty()
    }));
    let cold_inspect = inspect(&cold_container);
    assert!(drain.wait().unwrap().success());
    assert_eq!(workspace_type(&cold_inspect), mount);

    // Warm: the pool fills, an idle servo is inspected, then claimed.
    let serving = serve(&pool);
    assert!(
        wait_for(Duration::from_secs(60), || warm(&pool, true).len() == 2),
        "the pool never filled: {:?}",
        warm(&pool, false)
    );
    let idle = warm(&pool, true);
    let warm_inspect = inspect(&idle[0]);
    assert_eq!(hardening(&warm_inspect), hardening(&cold_inspect));
    let env = warm_inspect["Config"]["Env"].to_string();
    assert!(
        env.contains("SAHEELI_WARM=1") && env.contains("SAHEELI_PRIVSEP=1"),
        "{env}"
    );
    assert!(
        !env.contains("FOO"),
        "a warm servo holds no task's env: {env}"
    );
    assert!(
        warm_inspect["Config"]["Labels"]
            .get("saheeli.task")
            .is_none()
    );

    let with_env = pool.submit("env.md");
    // Its live log while it runs (its shell sleeps a second): the claimed
    // warm servo's container log (its start line, the task's model),
    // though no container carries the task's label.
    let mut live = String::new();
    assert!(wait_for(Duration::from_secs(60), || {
        let running = |s: &Saheeli| s.task(&with_env)["state"] == "running";
        if ended(&pool, &with_env) {
            return true;
        }
        if !running(&pool) {
            return false;
        }
        let out =
            String::from_utf8_lossy(&pool.run(&["task", "logs", &with_env]).stdout).into_owned();
        if running(&pool) && out.contains("replay:s.json") {
            live = out;
        }
        !live.is_empty()
    }));
    assert!(
        live.contains("start") && live.contains("replay:s.json"),
        "no live log of a warm task: {live}"
    );
    assert!(wait_for(Duration::from_secs(60), || ended(
        &pool, &with_env
    )));
    // The next claim (another servo: one is never reused) sees no FOO.
    assert!(wait_for(Duration::from_secs(60), || warm(&pool, true)
        .len()
        == 2));
    let without = pool.submit("plain.md");
    assert!(wait_for(Duration::from_secs(60), || ended(&pool, &without)));
    // Resources no class has: cold, beside a pool that has servos idle.
    let big = pool.submit("big.md");
    assert!(wait_for(Duration::from_secs(60), || ended(&pool, &big)));
    let idle_after = warm(&pool, true);
    interrupt(serving);

    for id in [&with_env, &without] {
        let ran = ran_in(&pool, id);
        let short = ran
            .strip_prefix("warm container ")
            .unwrap_or_else(|| panic!("{ran}"));
        // Claimed, then gone with its task: never idle again.
        assert!(idle_after.iter().all(|n| !n.contains(short)), "{ran}");
    }
    assert!(
        !ran_in(&pool, &big).contains("warm"),
        "{}",
        ran_in(&pool, &big)
    );
    assert!(ran_in(&cold, &cold_id).starts_with("container "));

    // Identical results and state.
    let (w, c) = (pool.task(&with_env), cold.task(&cold_id));
    for key in ["state", "reason", "steps"] {
        assert_eq!(w[key], c[key], "{key}");
    }
    assert_eq!(w["state"], "complete", "{w}");
    let wf = agent_files(Path::new(w["results"].as_str().unwrap()), &with_env);
    let cf = agent_files(Path::new(c["results"].as_str().unwrap()), &cold_id);
    assert_eq!(wf, cf, "results and reports differ");
    assert_eq!(wf["env.txt"], "FOO=bar");
    assert_eq!(wf["seen.txt"], "hello from the workspace");
    assert!(wf.contains_key("report.md") && wf.contains_key("complete.json"));
    let next = agent_files(
        Path::new(pool.task(&without)["results"].as_str().unwrap()),
        &without,
    );
    assert_eq!(next["env.txt"], "FOO=", "the next claim sees no FOO");
    assert_eq!(pool.task(&big)["state"], "complete");

    // The drain removed every idle servo; the claimed ones went with
    // their tasks: nothing of the pool is left.
    assert_eq!(warm(&pool, false), Vec::<String>::new());
    assert_eq!(warm_volumes(&pool), Vec::<String>::new());
    for id in [&with_env, &without, &big] {
        assert_eq!(leftovers(id), Vec::<String>::new());
    }
}

#[test]
fn an_idle_servo_that_dies_is_replaced_and_gc_removes_idle_ones() {
    require_docker();
    let s = Saheeli::with_config("pool:\n  - { size: 2, max_idle: 10m }\n");
    let mut serving = serve(&s);
    assert!(wait_for(Duration::from_secs(60), || warm(&s, true).len() == 2));
    let before = warm(&s, true);
    docker(&["kill", &before[0]]);
    assert!(
        wait_for(Duration::from_secs(60), || {
            let now = warm(&s, true);
            now.len() == 2 && !now.contains(&before[0])
        }),
        "the dead servo was not replaced: {:?}",
        warm(&s, false)
    );
    // Gone, not merely stopped: container and volume.
    assert!(wait_for(Duration::from_secs(30), || {
        !warm(&s, false).contains(&before[0]) && !warm_volumes(&s).contains(&before[0])
    }));
    // A foreman killed outright leaves its idle servos; `gc` removes them.
    serving.kill().unwrap();
    let left = warm(&s, false);
    assert_eq!(left.len(), 2, "{left:?}");
    // A crash between a slot's workspace and its container: the image is
    // removed too, once it is too old to be one a serving foreman is
    // making right now.
    docker(&["rm", "-f", &left[1]]);
    let hex = left[1].trim_start_matches("saheeli-pool-");
    let slot = s.path().join(format!(".saheeli/workspaces/p-{hex}"));
    assert!(slot.join("mnt/.").is_dir(), "{}", slot.display());
    let dry = s.expect(&["gc", "--dry-run"], 0);
    assert!(!dry.contains(&left[1]), "a young slot is left alone: {dry}");
    let aged = std::process::Command::new("touch")
        .args(["-d", "2 minutes ago"])
        .arg(&slot)
        .status()
        .unwrap();
    assert!(aged.success());
    let out = s.expect(&["gc"], 0);
    for name in &left {
        assert!(out.contains(&format!("warm servo {name}")), "{out}");
    }
    assert_eq!(warm(&s, false), Vec::<String>::new());
    assert_eq!(warm_volumes(&s), Vec::<String>::new());
    assert!(!slot.exists(), "{}", slot.display());
}

#[test]
fn a_foreman_killed_with_idle_and_claimed_servos_leaves_each_task_run_once() {
    require_docker();
    let s = Saheeli::with_config("lease: 2s\npool:\n  - { size: 2, max_idle: 10m }\n");
    s.write(
        "s.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "echo run >> /workspace/runs.txt; sleep 6"}),
            ),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write("p.md", &replay_prompt("s.json", ""));
    let mut first = serve(&s);
    assert!(wait_for(Duration::from_secs(60), || warm(&s, true).len() == 2));
    let id = s.submit("p.md");
    // Claimed (and running), and the pool refilled beside it.
    assert!(wait_for(Duration::from_secs(60), || {
        s.task(&id)["state"] == "running" && warm(&s, true).len() == 3
    }));
    assert!(ran_in(&s, &id).contains("warm container"));
    let all = warm(&s, false);
    first.kill().unwrap();

    // A new foreman adopts the claimed servo and removes the idle ones
    // the dead one left (its heartbeat stopped).
    let second = serve(&s);
    assert!(
        wait_for(Duration::from_secs(90), || ended(&s, &id)),
        "{}",
        s.task(&id)
    );
    let claimed_name = all
        .iter()
        .find(|n| ran_in(&s, &id).contains(&n[13..25]))
        .cloned()
        .expect("the claimed servo was one of the pool's");
    assert!(
        wait_for(Duration::from_secs(60), || {
            let now = warm(&s, false);
            all.iter().all(|n| !now.contains(n))
        }),
        "the dead foreman's servos are still there: {:?} of {all:?}",
        warm(&s, false)
    );
    interrupt(second);
    let t = s.task(&id);
    assert_eq!(t["state"], "complete", "{t}");
    let runs = std::fs::read_to_string(Path::new(t["results"].as_str().unwrap()).join("runs.txt"))
        .unwrap();
    assert_eq!(runs, "run\n", "the task ran once");
    // Nothing leaks: containers, volumes, socket directories.
    assert_eq!(warm(&s, false), Vec::<String>::new());
    assert_eq!(warm_volumes(&s), Vec::<String>::new());
    assert_eq!(leftovers(&id), Vec::<String>::new());
    for name in all.iter().chain([&claimed_name]) {
        let sock = s.run_dir().join(format!("p-{}", &name[13..]));
        assert!(!sock.exists(), "{} left", sock.display());
    }
}

/// Watches the running warm servos for a while (a few of the keeper's
/// looks): how many there were, each time.
fn watched(s: &Saheeli) -> Vec<usize> {
    (0..8)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(300));
            warm(s, true).len()
        })
        .collect()
}

#[test]
fn an_auto_sized_class_keeps_as_many_warm_as_launches_came_lately() {
    require_docker();
    let s = Saheeli::with_config("pool:\n  - { size: auto, max_idle: 10m }\n");
    s.write(
        "s.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    s.write("p.md", &replay_prompt("s.json", ""));
    let serving = serve(&s);
    // No launch yet: one servo is kept warm, and only one.
    assert!(wait_for(Duration::from_secs(60), || !warm(&s, true).is_empty()));
    assert_eq!(watched(&s), vec![1; 8], "no demand yet");
    // Three launches of the class (one warm, two cold: the pool held one).
    let ids: Vec<String> = (0..3).map(|_| s.submit("p.md")).collect();
    assert!(
        wait_for(Duration::from_secs(90), || ids
            .iter()
            .all(|id| ended(&s, id))),
        "the tasks did not end"
    );
    for id in &ids {
        assert_eq!(s.task(id)["state"], "complete", "{}", s.task(id));
    }
    // The claimed servo went with its task; the class grows to the three
    // launches it saw in its window, and no further.
    assert!(
        wait_for(Duration::from_secs(60), || warm(&s, true).len() == 3),
        "the class did not grow to its demand: {:?}",
        warm(&s, false)
    );
    assert_eq!(watched(&s), vec![3; 8], "grown to the demand, no more");
    interrupt(serving);
    assert_eq!(warm(&s, false), Vec::<String>::new());
    assert_eq!(warm_volumes(&s), Vec::<String>::new());
}
