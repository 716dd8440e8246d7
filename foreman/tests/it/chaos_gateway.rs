//! A foreman crash is invisible to the agent (issue 9 §1): `saheeli serve`
//! is killed with SIGKILL twice while six tasks run, once while their
//! servos sleep in a tool and once while their LLM calls are in flight;
//! every servo waits for its gateway, the next foreman serves it, all six
//! complete, and each task is charged once for every call that reached
//! the provider (a call cut off mid-flight at its reservation, once).

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::lifecycle::wait_for;
use crate::util::{Saheeli, leftovers, require_docker};

fn serve(s: &Saheeli) -> Child {
    s.cmd(&["serve", "--drain", "-j", "6"])
        .env("RUST_LOG", "saheeli=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn kill(mut child: Child) {
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
}

/// The marker in task `i`'s prompt, which every call it makes carries.
fn marker(i: usize) -> String {
    format!("chaos-task-{i}.")
}

#[test]
fn a_foreman_killed_twice_is_invisible_to_the_agents() {
    require_docker();
    // First turn: a tool that sleeps. Second turn (and its retries): a slow
    // answer, so the second kill cuts the calls mid-flight.
    let llm = FakeLlm::start_matching(vec![], |body| {
        Some(if body["messages"].as_array().map_or(0, Vec::len) <= 2 {
            Reply::tool("execute_shell", json!({"command": "sleep 4"}))
        } else {
            Reply::Slow(
                Duration::from_secs(6),
                Box::new(Reply::tool("task_complete", json!({"message": "done"}))),
            )
        })
    });
    // The default lease (10 s): longer than the old servo's five retries.
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test-gateway-000")
        .env("OPENAI_BASE_URL", &llm.base_url());
    let ids: Vec<String> = (0..6)
        .map(|i| {
            s.write(
                &format!("t{i}.md"),
                &format!("---\nmodel: gpt-test\ntimeout: 5m\n---\n{}\n", marker(i)),
            );
            s.submit(&format!("t{i}.md"))
        })
        .collect();
    let started = Instant::now();

    let first = serve(&s);
    assert!(
        wait_for(Duration::from_secs(60), || llm.seen_count() >= 6),
        "the tasks never made their first call"
    );
    std::thread::sleep(Duration::from_secs(1));
    kill(first); // while every servo sleeps in its tool
    let second = serve(&s);
    // It takes the tasks over once the lease expires; their servos, which
    // have been waiting for a gateway, call again.
    let all_called = wait_for(Duration::from_secs(60), || llm.seen_count() >= 12);
    std::thread::sleep(Duration::from_secs(1));
    kill(second); // while the second calls are in flight upstream
    let mut last = serve(&s);
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(st) = last.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "the last serve never drained");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(status.success(), "the final serve exited {status}");
    assert!(
        all_called,
        "the second foreman never served the waiting servos"
    );

    let seen = llm.seen();
    let db = rusqlite::Connection::open(s.path().join("saheeli.db")).unwrap();
    let mut lost_total = 0;
    for (i, id) in ids.iter().enumerate() {
        let t = s.task(id);
        assert_eq!(t["state"], "complete", "task {id}: {t:#}");
        let runs = t["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["to"] == "running")
            .count();
        assert_eq!(runs, 1, "task {id} ran {runs} times");
        assert!(
            leftovers(id).is_empty(),
            "task {id} leaked {:?}",
            leftovers(id)
        );
        // The servo told its audit log it was waiting, and when it was back.
        let results = std::path::Path::new(t["results"].as_str().unwrap());
        let audit = std::fs::read_to_string(results.join(format!("servo-{id}-audit.log"))).unwrap();
        assert!(audit.contains("\"gateway_wait\""), "task {id}: {audit}");
        assert!(audit.contains("\"gateway_back\""), "task {id}: {audit}");

        // Each call that reached the provider is charged exactly once.
        let upstream = seen
            .iter()
            .filter(|c| c.body["messages"].to_string().contains(&marker(i)))
            .count() as i64;
        let rows: Vec<(String, i64, i64)> = db
            .prepare(
                "SELECT state, input_tokens + output_tokens, reserved_tokens
                 FROM llm_calls WHERE task_id = ?1",
            )
            .unwrap()
            .query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let settled: Vec<_> = rows.iter().filter(|r| r.0 == "settled").collect();
        let lost: Vec<_> = rows.iter().filter(|r| r.0 == "lost").collect();
        assert_eq!(
            settled.len() + lost.len(),
            rows.len(),
            "task {id}: calls still in flight: {rows:?}"
        );
        // Every call that reached the provider has its row. A kill can also
        // land between a call's reservation and its sending: that row is
        // `lost` (charged its reservation, never settled), at most one per
        // kill, and never more settled rows than calls upstream.
        let unsent = rows.len() as i64 - upstream;
        assert!(
            (0..=2).contains(&unsent) && settled.len() as i64 <= upstream,
            "task {id}: {upstream} calls upstream, ledger {rows:?}"
        );
        assert!(settled.iter().all(|r| r.1 == 120), "task {id}: {rows:?}");
        let expected = settled.len() as i64 * 120 + lost.iter().map(|r| r.2).sum::<i64>();
        assert_eq!(t["tokens"], Value::from(expected), "task {id}: {rows:?}");
        lost_total += lost.len();
    }
    assert!(
        lost_total > 0,
        "no call was cut mid-flight; the test proved less than it should"
    );
    eprintln!(
        "6/6 complete after two kill -9s, {lost_total} calls cut mid-flight, {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
