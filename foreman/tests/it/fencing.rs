//! Issue 9 §2: leases are fenced. A foreman that is paused past its lease
//! (SIGSTOP), whose task another foreman then takes over, must not write,
//! stop, collect or retry anything for that task once it runs again.

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;

use crate::lifecycle::wait_for;
use crate::util::{Saheeli, leftovers, replay_prompt, require_docker, script};

/// Whether task `id`'s lease has run out (read from the database as a
/// second foreman would: `lease_until` in the past).
fn lease_expired(s: &Saheeli, id: &str) -> bool {
    let db = rusqlite::Connection::open(s.path().join("saheeli.db")).unwrap();
    let until: Option<i64> = db
        .query_row("SELECT lease_until FROM tasks WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    until.is_none_or(|u| u < now)
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

#[test]
fn a_paused_foreman_whose_lease_was_taken_over_touches_nothing() {
    require_docker();
    let s = Saheeli::with_config("lease: 2s\n")
        // The default model needs its key at submit.
        .env("OPENAI_API_KEY", "sk-test-not-used");
    s.write(
        "slow.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "sleep 9 && echo done > work.txt"}),
            ),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write("slow.md", &replay_prompt("slow.json", "timeout: 2m\n"));
    let id = s.submit("slow.md");

    let a_log = s.path().join("a.log");
    let mut a = s
        .cmd(&["serve"])
        .env("RUST_LOG", "saheeli=info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&a_log).unwrap())
        .spawn()
        .unwrap();
    assert!(
        wait_for(Duration::from_secs(30), || s.task(&id)["state"]
            == "running"),
        "the task never ran: {}",
        s.task(&id)
    );
    signal(a.id(), "-STOP");
    // Past A's lease, B takes the task over and adopts the running servo.
    assert!(
        wait_for(Duration::from_secs(20), || lease_expired(&s, &id)),
        "A's lease never ran out while A was stopped"
    );
    let b_log = s.path().join("b.log");
    let mut b = s
        .cmd(&["serve", "--drain"])
        .env("RUST_LOG", "saheeli=info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&b_log).unwrap())
        .spawn()
        .unwrap();
    let b_said = || std::fs::read_to_string(&b_log).unwrap_or_default();
    assert!(
        wait_for(Duration::from_secs(20), || b_said()
            .contains("adopting servo")),
        "B did not adopt: {}\n{}",
        s.task(&id),
        b_said()
    );
    // A wakes up while the servo still runs: both now see the same container.
    signal(a.id(), "-CONT");
    let b_ok = b.wait().unwrap().success();
    let b_err = b_said();
    assert!(b_ok, "B: {b_err}");
    // Once A has noticed, let it drain and exit.
    let a_said = || std::fs::read_to_string(&a_log).unwrap_or_default();
    assert!(
        wait_for(Duration::from_secs(20), || a_said().contains("lease lost")),
        "A never noticed it lost the task:\n{}",
        a_said()
    );
    signal(a.id(), "-TERM");
    assert!(a.wait().unwrap().success());
    let a_err = std::fs::read_to_string(&a_log).unwrap();

    let t = s.task(&id);
    assert_eq!(t["state"], "complete", "{t:#}\nA: {a_err}\nB: {b_err}");
    let events = t["events"].as_array().unwrap();
    let terminal = events
        .iter()
        .filter(|e| e["to"] == "complete" || e["to"] == "incomplete" || e["to"] == "failed")
        .count();
    assert_eq!(terminal, 1, "{t:#}");
    assert!(
        a_err.contains("lease lost"),
        "A never noticed it lost the task:\n{a_err}"
    );
    for written in [
        "task finished",
        "recording the outcome failed",
        "stopping servo",
    ] {
        assert!(
            !a_err.contains(written),
            "A acted on a task it no longer held ({written}):\n{a_err}"
        );
    }
    let results = s.path().join("results");
    assert!(results.join(&id).join("work.txt").is_file());
    let partial: Vec<_> = std::fs::read_dir(&results)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("partial"))
        .collect();
    assert!(partial.is_empty(), "left behind: {partial:?}");
    assert!(leftovers(&id).is_empty(), "{:?}", leftovers(&id));
}

/// Issue 9 §2: retrying a task that has not ended would run it twice.
#[test]
fn retry_of_a_task_that_has_not_ended_is_refused() {
    let s = Saheeli::new()
        // The default model needs its key at submit.
        .env("OPENAI_API_KEY", "sk-test-not-used");
    s.write("p.md", "Hello.\n");
    let id = s.submit("p.md");
    let err = s.expect_err(&["task", "retry", &id], 2);
    assert!(err.contains("only an ended task can be retried"), "{err}");
    assert_eq!(s.tasks().len(), 1, "a retry was queued anyway");
    s.expect(&["task", "cancel", &id], 0);
    s.expect(&["task", "retry", &id], 0);
    assert_eq!(s.tasks().len(), 2);
}

/// Issue 9 §6: ten processes opening a new database at once all work.
#[test]
fn ten_processes_open_a_new_database_at_once() {
    let s = Saheeli::new()
        // The default model needs its key at submit.
        .env("OPENAI_API_KEY", "sk-test-not-used");
    s.write("p.md", "Hello.\n");
    let children: Vec<_> = (0..10)
        .map(|_| {
            s.cmd(&["task", "submit", "--prompt", "p.md"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(s.tasks().len(), 10);
}

/// Issue 9 §2: a database error in the serve loop lets the running
/// supervisors finish their tasks instead of dropping them mid-run.
#[test]
fn a_database_error_in_the_loop_drains_running_tasks() {
    require_docker();
    let s = Saheeli::new()
        // The default model needs its key at submit.
        .env("OPENAI_API_KEY", "sk-test-not-used");
    s.write(
        "slow.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "sleep 18 && echo done > work.txt"}),
            ),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write("slow.md", &replay_prompt("slow.json", ""));
    let id = s.submit("slow.md");
    let log = s.path().join("serve.log");
    let mut serve = s
        .cmd(&["serve"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(wait_for(Duration::from_secs(30), || s.task(&id)["state"]
        == "running"));
    // Another process holds the write lock past the 10 s busy timeout
    // (while the servo still runs, so only the loop meets the error).
    let db = s.path().join("saheeli.db");
    let locked = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys,time\n\
             c=sqlite3.connect(sys.argv[1],isolation_level=None)\n\
             c.execute('BEGIN EXCLUSIVE')\ntime.sleep(14)\nc.execute('COMMIT')",
            db.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(locked.success());
    let out = {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = serve.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = serve.kill();
                panic!("serve never exited:\n{}", said());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let err = said();
    assert_eq!(out.code(), Some(2), "the loop's error is reported: {err}");
    let t = s.task(&id);
    assert_eq!(t["state"], "complete", "{t:#}\n{err}");
    assert!(
        s.path()
            .join("results")
            .join(&id)
            .join("work.txt")
            .is_file()
    );
    assert!(leftovers(&id).is_empty(), "{:?}", leftovers(&id));
}
