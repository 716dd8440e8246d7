//! Parking and foreman-less endings on a real 3-node swarm (the fixture of
//! `swarm.rs`, its own octet). One test, two steps sharing the swarm:
//!
//! 1. A task asks a human with a short `park_after`: its servo uploads its
//!    workspace marked parked and exits; the foreman keeps it (not as
//!    results) and leaves no job service or secret on the swarm. `task
//!    answer` queues it; a new job (on any node) fetches the kept
//!    workspace and goes on from its session: it completes, with the
//!    answer in its conversation and the file written before parking.
//!    Another parked task, cancelled, is collected from its kept workspace.
//! 2. The foreman is killed (-9) while a task runs; the servo ends its
//!    work with no foreman listening and keeps trying its upload; a new
//!    `serve` started after that adopts the job with the same token, the
//!    upload lands, and the task completes once, never requeued.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::swarm::*;
use crate::util::*;

/// Polls `task status` until `done` holds (or fails after `secs`).
fn until(s: &Saheeli, id: &str, what: &str, secs: u64, done: impl Fn(&Value) -> bool) -> Value {
    let t = Instant::now();
    loop {
        let task = s.task(id);
        if done(&task) {
            return task;
        }
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "{what}: not reached in {secs}s\n{task:#}\n{}",
            std::fs::read_to_string(s.path().join("serve.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn epoch_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn a_swarm_task_parks_without_a_service_and_a_job_ending_without_a_foreman_is_kept() {
    require_docker();
    let t0 = Instant::now();
    let Fixture { swarm, s, .. } = Fixture::up(237);
    let label = |id: &str| format!("label=saheeli.task={id}");

    // 1. Parked: no service, no secret; the workspace kept, not in results.
    s.write(
        "ask.replay.json",
        &script(&[
            (
                "create_file",
                json!({"path": "before.txt", "content": "1\n"}),
            ),
            ("ask_user", json!({"question": "Name of the output file?"})),
            (
                "execute_shell",
                json!({"command": "cat before.txt > out.txt; hostname > resumed_on.txt"}),
            ),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write(
        "ask.md",
        &replay_prompt("ask.replay.json", "park_after: 1s\n"),
    );
    let id = s.submit("ask.md");
    let dropped = s.submit("ask.md");
    let lost = s.submit("ask.md");
    let mut server = serve(&s, false);
    let t = Instant::now();
    until(&s, &id, "parked", 60, |t| {
        t["state"] == "waiting_human" && t["parked"] == true
    });
    eprintln!("parked in {}", elapsed(t));
    // Removed after the park is recorded (the slot is free meanwhile).
    let t = Instant::now();
    loop {
        let mut left = swarm.lines(1, &["service", "ls", "-q", "--filter", &label(&id)]);
        left.extend(swarm.lines(1, &["secret", "ls", "-q", "--filter", &label(&id)]));
        for n in 1..=3 {
            left.extend(swarm.lines(n, &["ps", "-aq", "--filter", &label(&id)]));
            left.extend(swarm.lines(n, &["volume", "ls", "-q", "--filter", &label(&id)]));
        }
        if left.is_empty() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "a parked task keeps no job service, secret, container or volume: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let kept = s.path().join(".saheeli/parked").join(&id);
    assert_eq!(
        std::fs::read_to_string(kept.join("before.txt")).unwrap(),
        "1\n",
        "the parked workspace is kept by the foreman"
    );
    assert!(
        !s.path().join("results").join(&id).exists(),
        "a parked workspace is not a result"
    );

    // A parked task cancelled: its kept workspace is collected as results.
    until(&s, &dropped, "the other parked", 60, |t| {
        t["parked"] == true
    });
    s.expect(&["task", "cancel", &dropped], 0);
    let ended = until(&s, &dropped, "cancelled while parked", 30, |t| {
        t["state"] == "cancelled"
    });
    assert_eq!(ended["reason"], "cancelled", "{ended:#}");
    let collected = s.path().join("results").join(&dropped);
    assert_eq!(
        std::fs::read_to_string(collected.join("before.txt")).unwrap(),
        "1\n",
        "{ended:#}"
    );
    assert!(
        collected
            .join(format!("servo-{dropped}-session.json"))
            .is_file(),
        "the session it parked with is in its results"
    );
    assert!(!s.path().join(".saheeli/parked").join(&dropped).exists());

    // A parked task whose kept workspace is gone (the state directory
    // lost) fails saying so, rather than starting over from scratch.
    until(&s, &lost, "the third parked", 60, |t| t["parked"] == true);
    std::fs::remove_dir_all(s.path().join(".saheeli/parked").join(&lost)).unwrap();
    s.expect(&["task", "answer", &lost, "x.txt"], 0);
    let failed = until(&s, &lost, "failed without its workspace", 60, |t| {
        t["state"] == "failed"
    });
    let said = failed.to_string();
    assert!(said.contains("cannot go on from its session"), "{failed:#}");

    // The answer: a new job goes on from the session, on any node.
    let t = Instant::now();
    s.expect(&["task", "answer", &id, "out.txt"], 0);
    let done = until(&s, &id, "complete after the answer", 90, |t| {
        t["state"] == "complete"
    });
    let nodes: Vec<&str> = done["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["detail"].as_str())
        .filter(|d| d.starts_with("service ") && d.contains(" on node "))
        .collect();
    eprintln!(
        "answered → complete in {}; its launches: {nodes:?}",
        elapsed(t)
    );
    assert_eq!(
        nodes.len(),
        2,
        "two launches, before and after parking: {done:#}"
    );
    let results = s.path().join("results").join(&id);
    assert_eq!(
        std::fs::read_to_string(results.join("out.txt")).unwrap(),
        "1\n",
        "the file written before parking was there after it"
    );
    // The answer reached the same conversation: in the audit trail and in
    // the session the resumed servo went on from.
    let audit = std::fs::read_to_string(results.join(format!("servo-{id}-audit.log"))).unwrap();
    let replied = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .any(|e| e["event"] == "replied" && e["reply"]["text"] == "out.txt");
    assert!(replied, "{audit}");
    assert!(audit.contains(r#""event":"unparked""#), "{audit}");
    let session =
        std::fs::read_to_string(results.join(format!("servo-{id}-session.json"))).unwrap();
    assert!(
        session.contains("answered: out.txt") && session.contains("before.txt"),
        "{session}"
    );
    assert_eq!(done["steps"], 4, "{done:#}");
    let events = done["events"].as_array().unwrap();
    assert_eq!(
        events.iter().filter(|e| e["to"] == "complete").count(),
        1,
        "{done:#}"
    );
    assert!(!kept.exists(), "the parked copy goes when the task ends");

    // 2. The foreman killed just before the servo ends; a new one started
    // after the job's work is done gets its upload (retried meanwhile).
    s.write(
        "slow.replay.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": ": > begun.txt; sleep 4; date +%s.%N > ended_at.txt; echo done > marker.txt"}),
            ),
            ("task_complete", json!({"message": "ok"})),
        ]),
    );
    s.write("slow.md", &replay_prompt("slow.replay.json", ""));
    let slow = s.submit("slow.md");
    let on = wait_running(&s, std::slice::from_ref(&slow));
    // The foreman goes while the shell step runs; the work then ends
    // and the servo finds no foreman (its upload tried again meanwhile).
    wait_in_workspace(&swarm, on[0], &slow, "begun.txt");
    server.kill().unwrap();
    server.wait().unwrap();
    wait_in_workspace(&swarm, on[0], &slow, "marker.txt");
    let restarted_at = epoch_s();
    let t = Instant::now();
    let mut second = serve(&s, true);
    wait_exit(&mut second, &s);
    eprintln!(
        "a job that ended without a foreman, collected in {}",
        elapsed(t)
    );
    assert_complete_once(&s, &slow, "marker.txt");
    let task = s.task(&slow);
    let queued = task["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["to"] == "queued")
        .count();
    assert_eq!(queued, 1, "adopted, never requeued: {task:#}");
    let ended: f64 =
        std::fs::read_to_string(s.path().join("results").join(&slow).join("ended_at.txt"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
    assert!(
        ended < restarted_at,
        "the job's work ended {:.1}s after the new foreman started: not the case tested",
        ended - restarted_at
    );

    // Nothing left on the swarm (once the last removals are done).
    let t = Instant::now();
    for id in [&id, &dropped, &slow, &lost] {
        while !swarm
            .lines(1, &["service", "ls", "-q", "--filter", &label(id)])
            .is_empty()
        {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "service of {id} left"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    // `saheeli gc` removes a parked workspace an ended task left (as a
    // foreman that died mid-finish would), and nothing of a live one.
    let stray = s.path().join(".saheeli/parked").join(&id);
    std::fs::create_dir_all(stray.join("sub")).unwrap();
    std::fs::write(stray.join("sub/x"), "x").unwrap();
    let dry = s.expect(&["gc", "--dry-run"], 0);
    assert!(
        dry.contains("parked workspace") && dry.contains(&id),
        "{dry}"
    );
    assert!(stray.is_dir(), "a dry run removes nothing");
    s.expect(&["gc"], 0);
    assert!(
        !stray.exists(),
        "gc removes an ended task's parked workspace"
    );
    eprintln!("swarm park test done in {}", elapsed(t0));
}
