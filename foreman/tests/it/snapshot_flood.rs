//! Issue 51: the snapshot route paced per task, and snapshots that go on
//! after a restart. A flood of snapshot points on a running task's gateway
//! socket (from the host, as the agent's shell cannot reach it) gets 429s
//! with a clear JSON error once the burst is spent, never more snapshots
//! than the pace allows, never more disk than the task's cap, and the task
//! completes. A foreman killed between two snapshots leaves their record:
//! the next one's first snapshot links the unchanged files instead of
//! copying them again. Real Docker, a real `saheeli serve`.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::human::{Serve, until};
use crate::util::{Saheeli, replay_prompt, require_docker, script};

/// The test project's `run_dir` (from its config.yaml).
fn run_dir(s: &Saheeli) -> PathBuf {
    let config = std::fs::read_to_string(s.path().join("config.yaml")).unwrap();
    let dir = config
        .lines()
        .find_map(|l| l.strip_prefix("run_dir: "))
        .unwrap()
        .trim()
        .to_string();
    PathBuf::from(dir)
}

fn snapshots_of(s: &Saheeli, id: &str) -> PathBuf {
    s.path().join(".saheeli/snapshots").join(id)
}

/// What a directory tree holds on disk, each inode once.
fn disk_use(dir: &Path) -> u64 {
    fn walk(p: &Path, seen: &mut HashSet<u64>, total: &mut u64) {
        let Ok(m) = std::fs::symlink_metadata(p) else {
            return;
        };
        if seen.insert(m.ino()) {
            *total += m.blocks() * 512;
        }
        if m.is_dir() {
            for e in std::fs::read_dir(p).unwrap().flatten() {
                walk(&e.path(), seen, total);
            }
        }
    }
    let (mut seen, mut total) = (HashSet::new(), 0);
    walk(dir, &mut seen, &mut total);
    total
}

/// One snapshot point posted on `sock`: the status, the retry-after
/// header and the body.
fn point(sock: &Path, step: u32) -> Option<(u16, Option<String>, Value)> {
    let mut c = UnixStream::connect(sock).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = json!({ "step": step }).to_string();
    let req = format!(
        "POST /saheeli/v1/snapshot HTTP/1.1\r\nhost: gateway\r\ncontent-type: \
         application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    c.write_all(req.as_bytes()).ok()?;
    let mut out = String::new();
    c.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let retry = head.lines().find_map(|l| {
        l.to_ascii_lowercase()
            .strip_prefix("retry-after: ")
            .map(String::from)
    });
    Some((status, retry, serde_json::from_str(body).ok()?))
}

const CAP: u64 = 6 << 20;

#[test]
fn a_flood_of_snapshot_points_is_paced_capped_and_does_not_stall_the_task() {
    require_docker();
    let s = Saheeli::with_config("max_results_size: 6m\n");
    // The agent writes a new 1 MB file every second: each snapshot the
    // flood gets copies what is new. It removes them before it ends (the
    // results have the same small cap).
    s.write(
        "w.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "for i in $(seq 1 30); do head -c 1000000 /dev/urandom > blob$i; sleep 1; done; rm -f blob*; echo wrote", "timeout_s": 120}),
            ),
            ("create_file", json!({"path": "after.txt", "content": "after the flood"})),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write(
        "p.md",
        &replay_prompt("w.json", "snapshots: every\ntimeout: 3m\n"),
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    until(&s, &id, &serve, "running", |t| t["state"] == "running");
    let sock = run_dir(&s).join(&id).join("gateway.sock");

    // Four callers, as fast as the route answers, for 20 seconds.
    let t0 = Instant::now();
    let answers: Vec<(u16, Option<String>, Value)> = std::thread::scope(|scope| {
        let callers: Vec<_> = (0..4u32)
            .map(|n| {
                let sock = sock.clone();
                scope.spawn(move || {
                    let mut got = Vec::new();
                    let mut step = 1000 + n * 100_000;
                    while t0.elapsed() < Duration::from_secs(20) {
                        step += 1;
                        match point(&sock, step) {
                            Some(a) => got.push(a),
                            None => std::thread::sleep(Duration::from_millis(50)),
                        }
                    }
                    got
                })
            })
            .collect();
        callers
            .into_iter()
            .flat_map(|c| c.join().unwrap())
            .collect()
    });
    let flooded_for = t0.elapsed();
    let taken = answers
        .iter()
        .filter(|(st, _, b)| *st == 200 && b["taken"] == true)
        .count();
    let capped = answers
        .iter()
        .filter(|(st, _, b)| *st == 200 && b["why"].as_str().is_some_and(|w| w.contains("cap")))
        .count();
    let refused: Vec<_> = answers.iter().filter(|(st, _, _)| *st == 429).collect();
    eprintln!(
        "measure: {} points in {flooded_for:?}: {taken} taken, {capped} over the cap, {} refused",
        answers.len(),
        refused.len()
    );
    assert!(answers.iter().all(|(st, _, _)| [200, 429].contains(st)));
    assert!(!refused.is_empty(), "nothing refused");
    for (_, retry, body) in &refused {
        let kind = body["error"]["type"].as_str().unwrap_or("");
        assert!(["snapshot_busy", "snapshot_rate"].contains(&kind), "{body}");
        assert!(!body["error"]["message"].as_str().unwrap_or("").is_empty());
        assert!(
            retry.as_deref().is_some_and(|r| r.parse::<u64>().is_ok()),
            "{retry:?}"
        );
    }
    // The pace: a burst of 10, then one a second, whatever the flood.
    assert!(
        taken as u64 <= 10 + flooded_for.as_secs() + 1,
        "{taken} taken in {flooded_for:?}"
    );
    assert!(capped > 0, "the cap was never reached");

    // Not stalled: the task goes on and completes.
    let t = until(&s, &id, &serve, "ended", |t| {
        ["complete", "incomplete", "failed"].contains(&t["state"].as_str().unwrap_or(""))
    });
    assert_eq!(t["reason"], "complete", "{t:#}\n{}", serve.log());
    // The disk: the cap, and at most one snapshot past it (what a step
    // adds: a file or two of 1 MB, its directory).
    let used = disk_use(&snapshots_of(&s, &id));
    assert!(used <= CAP + (4 << 20), "{used} bytes of snapshots");
    // `task status` lists what is kept, in text and JSON.
    let v = s.expect_json(&["task", "status", &id, "--json"], 0);
    let kept = v["snapshots"].as_array().unwrap();
    assert_eq!(kept.len() as u64, taken as u64 + kept_by_servo(kept));
    assert!(kept.iter().all(|k| k["bytes"].as_u64().is_some()), "{v:#}");
    let text = s.expect(&["task", "status", &id], 0);
    assert!(
        text.contains(&format!("snapshots: {} kept", kept.len())),
        "{text}"
    );
}

/// Of the kept snapshots, those of the servo's own points (steps below
/// the flood's numbers).
fn kept_by_servo(kept: &[Value]) -> u64 {
    kept.iter()
        .filter(|k| k["step"].as_u64().is_some_and(|n| n < 1000))
        .count() as u64
}

/// Issue 51 item 4: the per-file record of the newest snapshot outlives
/// its foreman, so the first snapshot after a restart is incremental.
#[test]
fn the_first_snapshot_after_a_restart_links_what_the_last_one_copied() {
    require_docker();
    let s = Saheeli::with_config("lease: 2s\n");
    s.write("ws/big.bin", &"x".repeat(4 << 20));
    s.write(
        "w.json",
        &script(&[
            ("create_file", json!({"path": "a.txt", "content": "one"})),
            (
                "execute_shell",
                json!({"command": "sleep 20; echo small > b.txt", "timeout_s": 60}),
            ),
            ("create_file", json!({"path": "c.txt", "content": "three"})),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write(
        "p.md",
        &replay_prompt("w.json", "workspace: ws\nsnapshots: every\ntimeout: 3m\n"),
    );
    let id = s.submit("p.md");
    let first = Serve::start(&s, &["-j", "1"]);
    let dir = snapshots_of(&s, &id);
    // Kept at steps 0 and 1 (step 2's point comes after its sleep).
    assert!(
        crate::lifecycle::wait_for(Duration::from_secs(90), || dir.join("step-000001").is_dir()
            && dir.join("stamps").is_file()),
        "{}",
        first.log()
    );
    first.kill9();
    let second = Serve::start(&s, &["-j", "1"]);
    let t = until(&s, &id, &second, "complete", |t| t["state"] == "complete");
    assert_eq!(t["reason"], "complete", "{t:#}");
    // The next foreman's first snapshot (step 2) linked the 4 MB file.
    let ino = |step: &str| {
        std::fs::metadata(dir.join(step).join("big.bin"))
            .unwrap()
            .ino()
    };
    assert_eq!(ino("step-000002"), ino("step-000001"));
    assert_eq!(ino("step-000001"), ino("step-000000"));
    let cost = std::fs::read_to_string(dir.join("cost-000002")).unwrap();
    let copied: u64 = cost.split_whitespace().next().unwrap().parse().unwrap();
    assert!(copied < 1 << 20, "copied {copied} bytes again: {cost}");
    let v = s.expect_json(&["task", "status", &id, "--json"], 0);
    let steps: Vec<u64> = v["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [0, 1, 2, 3]);
}
