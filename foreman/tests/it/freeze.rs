//! Issue 51: a servo frozen while its task waits (`suspend_after`). A task
//! waiting on `ask_user` is frozen (Docker says paused, its cgroup says
//! frozen, its CPU time stands still), shown frozen in `task status` and
//! `saheeli metrics`, thawed by `task answer`, and completes with the
//! answer; a frozen task cancelled ends `cancelled` with nothing left.
//! Real Docker, a real `saheeli serve`, the fake LLM scripted to ask.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::human::{Serve, project, request_text, until};
use crate::metrics::{get, parse};
use crate::util::{leftovers, require_docker};

/// Freezes a servo after one second of waiting.
const CONFIG: &str = "suspend_after: 1s\n";

/// Asks, then (once answered) completes. `park_after` is long: the servo
/// keeps its container, so it is frozen rather than parked.
const PROMPT: &str = "---\nmodel: gpt-test\npark_after: 10m\n---\nPaint the button.\n";

fn asker() -> FakeLlm {
    FakeLlm::start(vec![
        Reply::tool(
            "ask_user",
            json!({"question": "Which colour should the button be?"}),
        ),
        Reply::tool("task_complete", json!({"message": "painted"})),
    ])
}

pub fn inspect(container: &str, format: &str) -> String {
    let o = Command::new("docker")
        .args(["inspect", "--format", format, container])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The container's cgroup directory for `controller` (cgroup v1), or its
/// one directory (v2), read from its first process's `/proc/PID/cgroup`.
fn cgroup_dir(container: &str, controller: &str) -> std::path::PathBuf {
    let pid = inspect(container, "{{.State.Pid}}");
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let root = std::path::Path::new("/sys/fs/cgroup");
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, names, path) = (parts.next(), parts.next().unwrap(), parts.next().unwrap());
        let path = path.trim_start_matches('/');
        if names.is_empty() {
            return root.join(path);
        }
        if names.split(',').any(|n| n == controller) {
            return root.join(controller).join(path);
        }
    }
    panic!("no `{controller}` cgroup for pid {pid}:\n{text}");
}

/// Whether the kernel's freezer holds the container's cgroup.
pub fn cgroup_frozen(container: &str) -> bool {
    let dir = cgroup_dir(container, "freezer");
    match std::fs::read_to_string(dir.join("freezer.state")) {
        Ok(state) => state.trim() == "FROZEN",
        Err(_) => {
            std::fs::read_to_string(dir.join("cgroup.freeze"))
                .unwrap()
                .trim()
                == "1"
        }
    }
}

/// The CPU time the container's cgroup used so far, in nanoseconds.
pub fn cpu_ns(container: &str) -> u64 {
    let dir = cgroup_dir(container, "cpuacct");
    if let Ok(n) = std::fs::read_to_string(dir.join("cpuacct.usage")) {
        return n.trim().parse().unwrap();
    }
    let stat = std::fs::read_to_string(dir.join("cpu.stat")).unwrap();
    let usec = stat
        .lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .unwrap();
    usec.trim().parse::<u64>().unwrap() * 1000
}

/// The container's memory use (the cgroup's RSS), in bytes.
fn rss(container: &str) -> u64 {
    let stat =
        std::fs::read_to_string(cgroup_dir(container, "memory").join("memory.stat")).unwrap();
    // cgroup v1 says `total_rss`, v2 `anon`.
    let n = |key: &str| {
        stat.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|n| n.trim().parse().unwrap())
    };
    n("total_rss ").or_else(|| n("anon ")).unwrap_or(0)
}

/// What `docker stats` says the container uses.
fn mem_usage(container: &str) -> String {
    let o = Command::new("docker")
        .args([
            "stats",
            "--no-stream",
            "--format",
            "{{.MemUsage}}",
            container,
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

pub fn kinds(t: &Value) -> Vec<String> {
    t["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str().map(String::from))
        .collect()
}

pub fn detail_of(t: &Value, kind: &str) -> String {
    t["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == kind)
        .map(|e| e["detail"].as_str().unwrap_or("").to_string())
        .unwrap_or_default()
}

pub fn metrics(
    s: &crate::util::Saheeli,
) -> std::collections::BTreeMap<crate::metrics::Series, f64> {
    parse(&s.expect(&["metrics"], 0))
}

/// Waits until the task is frozen; its container then.
fn frozen(s: &crate::util::Saheeli, id: &str, serve: &Serve) -> (Value, String) {
    let t = until(s, id, serve, "frozen", |t| t["frozen"] == true);
    assert_eq!(t["state"], "waiting_human", "{t:#}");
    assert!(t["frozen_at"].is_string(), "{t:#}");
    let container = t["container"].as_str().expect("a container").to_string();
    (t, container)
}

#[test]
fn a_waiting_task_is_frozen_then_thawed_by_its_answer_and_completes() {
    require_docker();
    let llm = asker();
    let s = project(&llm, CONFIG);
    s.write("p.md", PROMPT);
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let running = until(&s, &id, &serve, "waiting_human", |t| {
        t["state"] == "waiting_human"
    });
    let container = running["container"].as_str().unwrap().to_string();
    let rss_waiting = rss(&container);
    let mem_waiting = mem_usage(&container);
    let (_, c) = frozen(&s, &id, &serve);
    assert_eq!(c, container);
    // Docker and the kernel agree: every process is in the freezer.
    assert_eq!(inspect(&container, "{{.State.Paused}}"), "true");
    assert!(cgroup_frozen(&container));
    // A frozen servo uses no CPU at all.
    let before = cpu_ns(&container);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(cpu_ns(&container), before, "CPU time grew while frozen");
    let rss_frozen = rss(&container);
    let mem_frozen = mem_usage(&container);
    // Shown frozen, and counted apart.
    let detail = s.expect(&["task", "status", &id], 0);
    assert!(detail.contains("frozen:"), "{detail}");
    let m = metrics(&s);
    assert_eq!(get(&m, "saheeli_tasks_frozen", &[]), 1.0);
    assert_eq!(get(&m, "saheeli_servo_freezes_total", &[]), 1.0);

    s.expect(&["task", "answer", &id, "blue"], 0);
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    assert_eq!(t["reason"], "complete");
    assert_eq!(t["frozen"], false);
    // No step lost: the answer reached the model on the next call.
    assert!(request_text(&llm, 1).contains("answered: blue"));
    let t = s.expect_json(&["task", "status", &id, "--json"], 0);
    let k = kinds(&t);
    let at = |kind: &str| {
        k.iter()
            .position(|x| x == kind)
            .unwrap_or_else(|| panic!("no `{kind}` in {k:?}"))
    };
    assert!(
        at("asked") < at("frozen")
            && at("frozen") < at("answered")
            && at("answered") < at("thawed"),
        "{k:?}"
    );
    let m = metrics(&s);
    assert_eq!(get(&m, "saheeli_tasks_frozen", &[]), 0.0);
    assert_eq!(get(&m, "saheeli_servo_thaws_total", &[]), 1.0);
    eprintln!(
        "measure: rss waiting {} KiB, rss frozen {} KiB; docker stats waiting {mem_waiting}, \
         frozen {mem_frozen}; {}; {}",
        rss_waiting / 1024,
        rss_frozen / 1024,
        detail_of(&t, "frozen"),
        detail_of(&t, "thawed")
    );
    assert!(leftovers(&id).is_empty(), "{:?}", leftovers(&id));
}

#[test]
fn a_frozen_task_cancelled_ends_cancelled_with_nothing_left() {
    require_docker();
    let llm = asker();
    let s = project(&llm, CONFIG);
    s.write("p.md", PROMPT);
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let (_, container) = frozen(&s, &id, &serve);
    assert_eq!(inspect(&container, "{{.State.Paused}}"), "true");

    s.expect(&["task", "cancel", &id], 0);
    let t = until(&s, &id, &serve, "cancelled", |t| t["state"] == "cancelled");
    assert_eq!(t["frozen"], false);
    let t = s.expect_json(&["task", "status", &id, "--json"], 0);
    let k = kinds(&t);
    assert!(k.contains(&"thawed".to_string()), "{k:?}");
    // It was stopped, not lost: the servo ended on its SIGTERM.
    assert_eq!(t["reason"], "cancelled", "{t:#}");
    assert_eq!(get(&metrics(&s), "saheeli_tasks_frozen", &[]), 0.0);
    let gone = crate::lifecycle::wait_for(Duration::from_secs(30), || leftovers(&id).is_empty());
    assert!(gone, "{:?}", leftovers(&id));
}

#[test]
fn a_servo_left_frozen_by_a_dead_foreman_is_thawed_by_the_next_and_completes() {
    require_docker();
    let llm = asker();
    let s = project(&llm, "suspend_after: 1s\nlease: 2s\n");
    s.write("p.md", PROMPT);
    let id = s.submit("p.md");
    let first = Serve::start(&s, &["-j", "1"]);
    let (_, container) = frozen(&s, &id, &first);
    first.kill9();
    // No foreman runs: the servo stays frozen, the answer is a row.
    s.expect(&["task", "answer", &id, "green"], 0);
    assert_eq!(inspect(&container, "{{.State.Paused}}"), "true");
    let second = Serve::start(&s, &["-j", "1"]);
    let t = until(&s, &id, &second, "complete", |t| t["state"] == "complete");
    assert_eq!(t["reason"], "complete");
    assert_eq!(llm.seen_count(), 2, "asked once, answered once");
    assert!(request_text(&llm, 1).contains("answered: green"));
    let t = s.expect_json(&["task", "status", &id, "--json"], 0);
    let thawed = detail_of(&t, "thawed");
    assert!(
        thawed.contains("the foreman that froze it stopped"),
        "{thawed}"
    );
    drop(second);
    let gone = crate::lifecycle::wait_for(Duration::from_secs(30), || leftovers(&id).is_empty());
    assert!(gone, "{:?}", leftovers(&id));
}

#[test]
fn a_parent_waiting_for_its_child_is_frozen_and_thawed_when_the_child_ends() {
    require_docker();
    let llm = FakeLlm::start(vec![
        Reply::tool(
            "spawn_task",
            json!({"prompt": "Write out.txt.", "model": "replay:w.json"}),
        ),
        Reply::tool("wait_tasks", json!({})),
        Reply::tool("task_complete", json!({"message": "the child is done"})),
    ]);
    let s = project(&llm, CONFIG);
    s.write(
        "w.json",
        &crate::util::script(&[
            (
                "execute_shell",
                json!({"command": "sleep 8; echo done > out.txt", "timeout_s": 60}),
            ),
            ("task_complete", json!({"message": "worker wrote out.txt"})),
        ]),
    );
    s.write(
        "p.md",
        "---\nmodel: gpt-test\ndelegate: { max_children: 1 }\n---\nFan out.\n",
    );
    let id = s.submit("p.md");
    // One slot: the frozen parent holds none, so its child runs.
    let serve = Serve::start(&s, &["-j", "1"]);
    let t = until(&s, &id, &serve, "frozen", |t| t["frozen"] == true);
    assert_eq!(t["state"], "running", "{t:#}");
    let container = t["container"].as_str().unwrap().to_string();
    assert!(cgroup_frozen(&container));
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    assert_eq!(t["reason"], "complete");
    assert!(request_text(&llm, 2).contains("worker wrote out.txt"));
    let t = s.expect_json(&["task", "status", &id, "--json"], 0);
    let k = kinds(&t);
    assert!(
        k.contains(&"frozen".to_string()) && k.contains(&"thawed".to_string()),
        "{k:?}"
    );
}

#[test]
fn time_frozen_does_not_count_against_the_timeout() {
    require_docker();
    let llm = asker();
    let s = project(&llm, CONFIG);
    s.write(
        "p.md",
        "---\nmodel: gpt-test\npark_after: 10m\ntimeout: 6s\n---\nPaint the button.\n",
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    frozen(&s, &id, &serve);
    // Frozen past the whole timeout: neither the foreman's clock nor the
    // servo's counts it.
    std::thread::sleep(Duration::from_secs(10));
    assert_eq!(s.task(&id)["state"], "waiting_human");
    s.expect(&["task", "answer", &id, "blue"], 0);
    let t = until(&s, &id, &serve, "ended", |t| {
        ["complete", "incomplete", "failed"].contains(&t["state"].as_str().unwrap_or(""))
    });
    assert_eq!(t["reason"], "complete", "{t:#}\n{}", serve.log());
    assert!(request_text(&llm, 1).contains("answered: blue"));
}

#[test]
fn a_paused_task_is_frozen_with_its_memory_and_thawed_by_resume() {
    require_docker();
    // The first call is slow (the pause lands during it); its command
    // leaves a process holding ~100 MB, as an agent's build or server would.
    let hold = "nohup sh -c 'x=$(head -c 100000000 /dev/zero | tr \"\\000\" a); sleep 3600' >/dev/null 2>&1 &";
    let llm = FakeLlm::start(vec![
        Reply::Slow(
            Duration::from_millis(1500),
            Box::new(Reply::tool("execute_shell", json!({"command": hold}))),
        ),
        // Slow too: the thawed servo is measured running meanwhile.
        Reply::Slow(
            Duration::from_millis(3000),
            Box::new(Reply::tool("task_complete", json!({"message": "done"}))),
        ),
    ]);
    let s = project(&llm, CONFIG);
    s.write("p.md", PROMPT);
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    until(&s, &id, &serve, "running", |t| t["state"] == "running");
    s.expect(&["task", "pause", &id], 0);
    until(&s, &id, &serve, "paused", |t| t["state"] == "paused");
    let t = until(&s, &id, &serve, "frozen", |t| t["frozen"] == true);
    assert_eq!(t["state"], "paused");
    let container = t["container"].as_str().unwrap().to_string();
    assert!(cgroup_frozen(&container));
    let frozen_rss = rss(&container);
    let before = cpu_ns(&container);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(cpu_ns(&container), before, "CPU time grew while frozen");
    assert_eq!(rss(&container), frozen_rss);

    s.expect(&["task", "resume", &id], 0);
    until(&s, &id, &serve, "thawed", |t| t["frozen"] == false);
    let running_rss = rss(&container);
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    assert_eq!(t["reason"], "complete");
    let t = s.expect_json(&["task", "status", &id, "--json"], 0);
    eprintln!(
        "measure: rss frozen {} KiB, rss after the thaw {} KiB; {}; {}",
        frozen_rss / 1024,
        running_rss / 1024,
        detail_of(&t, "frozen"),
        detail_of(&t, "thawed")
    );
    // Freezing gives no memory back: the held 100 MB stay frozen.
    assert!(frozen_rss > 90_000_000, "{frozen_rss}");
}
