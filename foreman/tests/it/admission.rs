//! Issue 15 §3: adaptive admission and its circuit breaker against a real
//! Docker daemon that goes away: a private dockerd (see `daemon.rs`) is
//! stopped under `saheeli serve -j auto` while tasks are submitted, then
//! started again.

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;

use crate::daemon::{PrivateDockerd, libc_kill};
use crate::lifecycle::wait_for;
use crate::metrics::{get, parse};
use crate::util::{Saheeli, replay_prompt, require_docker, script};

/// `task status`'s footer line, if a foreman is serving (and the database
/// exists yet).
fn footer(s: &Saheeli) -> String {
    let out = s.run(&["task", "status"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with("foreman: "))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn issue_15_daemon_errors_open_the_breaker_and_tasks_wait_uncounted() {
    require_docker();
    let mut dockerd = PrivateDockerd::start();
    dockerd.load_image();
    let s = Saheeli::with_config("lease: 2s\n").env("DOCKER_HOST", &dockerd.socket());
    s.write(
        "done.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    s.write("t.md", &replay_prompt("done.json", ""));
    let log = s.path().join("serve.log");
    let mut serve = s
        .cmd(&["serve", "-j", "auto"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let serve_log = || std::fs::read_to_string(&log).unwrap_or_default();

    // Serving, with the daemon up: the footer shows `auto` and a closed breaker.
    assert!(
        wait_for(Duration::from_secs(30), || footer(&s)
            .contains("breaker closed")),
        "no admission footer: {:?}\n{}",
        footer(&s),
        serve_log()
    );
    assert!(footer(&s).contains("concurrency auto (limit now 4)"));

    // The daemon goes away; tasks come in.
    dockerd.stop();
    let ids: Vec<String> = (0..6).map(|_| s.submit("t.md")).collect();
    assert!(
        wait_for(Duration::from_secs(60), || footer(&s)
            .contains("breaker open")),
        "the breaker did not open: {:?}\n{}",
        footer(&s),
        serve_log()
    );
    // Open: metrics say so, and every task waits in the queue, not failed.
    let m = parse(&s.expect(&["metrics"], 0));
    assert_eq!(
        get(&m, "saheeli_admission_breaker_state", &[("state", "open")]),
        1.0
    );
    assert_eq!(
        get(
            &m,
            "saheeli_admission_breaker_state",
            &[("state", "closed")]
        ),
        0.0
    );
    assert_eq!(get(&m, "saheeli_admission_limit", &[]), 1.0);
    for id in &ids {
        let t = s.task(id);
        assert_eq!(t["state"], "queued", "{t:#}");
    }
    let requeued = s.task(&ids[0]);
    let details: Vec<String> = requeued["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["detail"].as_str().map(String::from))
        .collect();
    assert!(
        details
            .iter()
            .any(|d| d.contains("for the Docker daemon's sake (unreachable")
                && d.contains("not counted")),
        "{details:#?}"
    );

    // The daemon returns: the breaker half-opens, one trial launch closes it,
    // and every task completes.
    dockerd.boot();
    let all_done = wait_for(Duration::from_secs(150), || {
        ids.iter().all(|id| s.task(id)["state"] == "complete")
    });
    assert!(all_done, "not all complete:\n{}", serve_log());
    assert!(wait_for(Duration::from_secs(10), || footer(&s)
        .contains("breaker closed")));

    unsafe { libc_kill(serve.id() as i32, 2) };
    let status = serve.wait().unwrap();
    let text = serve_log();
    assert!(status.success(), "{status:?}\n{text}");
    for line in [
        "admission: Docker daemon failing; no launches for a while",
        "admission: trying one launch",
        "admission: Docker daemon answers again; launching",
    ] {
        assert!(text.contains(line), "no `{line}` in the log:\n{text}");
    }
    // Nothing lost and nothing counted against the tasks: one attempt each,
    // no retries, no requeues.
    for id in &ids {
        let t = s.task(id);
        assert_eq!(t["attempt"], 1, "{t:#}");
        assert_eq!(t["attempts"].as_array().map(Vec::len), Some(1), "{t:#}");
    }
    let db = rusqlite::Connection::open(s.path().join("saheeli.db")).unwrap();
    let (n, requeues): (i64, i64) = db
        .query_row("SELECT COUNT(*), SUM(requeues) FROM tasks", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!((n, requeues), (6, 0));
    // Every container and volume of theirs is gone from the daemon.
    let left = dockerd.docker(&["ps", "-aq", "--filter", "label=saheeli.task"])
        + &dockerd.docker(&["volume", "ls", "-q", "--filter", "label=saheeli.task"]);
    assert!(left.trim().is_empty(), "leftovers: {left}");
    // The foreman stopped serving: no footer.
    assert_eq!(footer(&s), "");
}

#[test]
fn issue_15_a_bad_concurrency_names_the_key_and_what_to_write() {
    let s = Saheeli::new();
    s.write("bad.yaml", "concurrency: fast\n");
    let err = s.expect_err(&["--config", "bad.yaml", "task", "status"], 2);
    assert!(
        err.contains("bad.yaml:1")
            && err.contains("concurrency")
            && err.contains("a number of tasks (at least 1) or `auto`"),
        "{err}"
    );
    s.write("zero.yaml", "concurrency: 0\n");
    let err = s.expect_err(&["--config", "zero.yaml", "task", "status"], 2);
    assert!(
        err.contains("zero.yaml:1") && err.contains("or `auto`"),
        "{err}"
    );
    let err = s.expect_err(&["serve", "--drain", "-j", "lots"], 2);
    assert!(
        err.contains("--concurrency") && err.contains("`lots` is not a number of tasks"),
        "{err}"
    );
}
