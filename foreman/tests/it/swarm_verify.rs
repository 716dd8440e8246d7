//! What acts on a running servo, on a real 3-node swarm (issue 14's
//! gaps): `verify` commands run in a fresh verify container on whichever
//! node runs the task, with its workspace volume, the task's container
//! paused meanwhile (issue 23; verify_files restored first, the failure
//! fed back to the model, the attempts counted in SQLite, no verify
//! container left on any node), OOM detection from
//! the container on its node, and `task logs --follow` reading the live
//! audit lines from that node while the task runs. The assessor
//! (`assess: true`) reads the workspace of the container on its node.
//!
//! One test sharing one swarm (`Fixture::up(236)`).

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use saheeli_protocol::{AuditEvent, Completion, Session};
use serde_json::json;

use crate::fake_llm::{FakeLlm, Reply};
use crate::swarm::{Fixture, elapsed, serve, wait_exit, wait_running};
use crate::util::*;

/// A small project with a planted bug: `add.sh` subtracts; its test says so.
const BUGGY: &str = "echo $(($1 - $2))\n";
const FIXED: &str = "echo $(($1 + $2))\n";
const TEST: &str = "out=$(sh add.sh 2 2)\n\
    if [ \"$out\" = 4 ]; then echo 'ok: add 2 2 = 4'; exit 0; fi\n\
    echo \"FAIL: add 2 2 = $out, expected 4\"; exit 1\n";

#[test]
fn verify_oom_and_live_logs_on_a_real_swarm() {
    require_docker();
    let t0 = Instant::now();
    let Fixture { swarm, s, .. } = Fixture::up(236);
    // The agent of the assessed task and its assessor (through the
    // foreman's gateway, so a fake LLM on this host serves both).
    let assessor = std::sync::atomic::AtomicBool::new(false);
    let llm = FakeLlm::start_matching(
        vec![
            Reply::tool("create_file", json!({"path": "add.sh", "content": FIXED})),
            Reply::tool("task_complete", json!({"message": "fixed add"})),
        ],
        move |body| {
            let system = body["messages"][0]["content"].as_str().unwrap_or("");
            if !system.contains("Saheeli's assessor") || assessor.swap(true, Ordering::SeqCst) {
                return None;
            }
            let met = r#"{"met": true, "feedback": "objective met"}"#;
            Some(Reply::Text(met.to_string(), (300, 30)))
        },
    );
    let s = s
        .env("OPENAI_API_KEY", "sk-test-swarm-verify-000")
        .env("OPENAI_BASE_URL", &llm.base_url());

    // A verified task: the agent tampers with the test (restored before
    // verify runs), claims done while add.sh is buggy (attempt 1 fails,
    // the output reaches the model), fixes it (attempt 2 passes). The
    // sleep gives `task logs --follow` a running task to read.
    s.write("proj/add.sh", BUGGY);
    s.write("proj/tests/test.sh", TEST);
    s.write(
        "verify.replay.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "echo 'echo ok; exit 0' > tests/test.sh; sleep 6"}),
            ),
            ("task_complete", json!({"message": "looks done"})),
            ("create_file", json!({"path": "add.sh", "content": FIXED})),
            ("task_complete", json!({"message": "fixed add.sh"})),
        ]),
    );
    s.write(
        "verify.md",
        &replay_prompt(
            "verify.replay.json",
            "workspace: proj\nverify: sh tests/test.sh\nverify_files: [tests/]\n",
        ),
    );
    // A task past its memory limit: the kernel kills the shell's child.
    s.write(
        "oom.replay.json",
        &script(&[
            (
                "create_file",
                json!({"path": "work.txt", "content": "before the oom"}),
            ),
            (
                "execute_shell",
                json!({"command": "python3 -c \"b = bytearray(512 * 1024 * 1024); print(len(b))\""}),
            ),
        ]),
    );
    s.write(
        "oom.md",
        &replay_prompt("oom.replay.json", "resources: { memory: 64m }\n"),
    );
    s.write(
        "assess.md",
        "---\nmodel: gpt-test\nworkspace: proj\nverify: sh tests/test.sh\nassess: true\n\
         objective: Fix add.sh.\n---\nFix add.sh.\n",
    );
    let v = s.submit("verify.md");
    let oom = s.submit("oom.md");
    let assessed = s.submit("assess.md");
    let t = Instant::now();
    let mut server = serve(&s, true);
    wait_running(&s, std::slice::from_ref(&v));

    // `task logs --follow` on the running task: lines as they come.
    let mut logs = s
        .cmd(&["task", "logs", &v, "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<(Instant, String)>();
    let out = logs.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send((Instant::now(), line));
        }
    });
    let ended_at = loop {
        if s.task(&v)["state"]
            .as_str()
            .is_some_and(|st| !matches!(st, "queued" | "starting" | "running"))
        {
            break Instant::now();
        }
        assert!(t.elapsed() < Duration::from_secs(90), "{}", s.task(&v));
        std::thread::sleep(Duration::from_millis(100));
    };
    let waited = Instant::now();
    let status = loop {
        if let Some(st) = logs.try_wait().unwrap() {
            break st;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "`task logs --follow` did not end with its task"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    reader.join().unwrap();
    let lines: Vec<(Instant, String)> = rx.try_iter().collect();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut logs.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "task logs: {status}\n{err}");
    let live = lines.iter().filter(|(at, _)| *at < ended_at).count();
    assert!(
        live >= 1,
        "no audit line before the task ended ({} after)\n{err}",
        lines.len()
    );
    assert!(
        lines.iter().any(|(_, l)| l.contains("execute_shell")),
        "{lines:?}"
    );
    eprintln!(
        "task logs --follow: {live} of {} lines while it ran",
        lines.len()
    );

    wait_exit(&mut server, &s);
    eprintln!("verify and oom tasks done in {}", elapsed(t));

    // Each attempt had its own verify container on the task's node (two
    // for the verified task, one for the assessed one), and none is left.
    let log = std::fs::read_to_string(s.path().join("serve.log")).unwrap();
    let used: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("verify container released"))
        .collect();
    assert_eq!(used.iter().filter(|l| l.contains(&v)).count(), 2, "{log}");
    assert_eq!(used.iter().filter(|l| l.contains(&assessed)).count(), 1);
    eprintln!("swarm verify containers: {used:#?}");
    for node in 1..=3 {
        let left = swarm.lines(
            node,
            &["ps", "-aq", "--filter", "label=saheeli.role=verify"],
        );
        assert_eq!(left, Vec::<String>::new(), "node {node}");
    }

    // Verified on the swarm: complete after two attempts.
    let task = s.task(&v);
    assert_eq!(task["state"], "complete", "{task:#}");
    let dir = s.path().join("results").join(&v);
    let c: Completion =
        serde_json::from_str(&std::fs::read_to_string(dir.join("complete.json")).unwrap()).unwrap();
    let attempts: Vec<(u32, bool, Option<i64>)> = c
        .verification
        .iter()
        .map(|c| (c.attempt, c.passed, c.exit_code))
        .collect();
    assert_eq!(attempts, [(1, false, Some(1)), (2, true, Some(0))]);
    // verify_files restored: the submitted test ran, not the agent's.
    assert!(
        c.verification[0]
            .output
            .contains("FAIL: add 2 2 = 0, expected 4"),
        "{:?}",
        c.verification[0]
    );
    assert_eq!(c.verification[1].output, "ok: add 2 2 = 4\n");
    assert_eq!(
        std::fs::read_to_string(dir.join("tests/test.sh")).unwrap(),
        TEST
    );
    // Counted in SQLite by the foreman.
    let db = rusqlite::Connection::open(s.path().join("saheeli.db")).unwrap();
    let counted: Vec<(i64, i64)> = db
        .prepare("SELECT attempt, passed FROM verify_checks WHERE task_id = ?1 ORDER BY attempt")
        .unwrap()
        .query_map([&v], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(counted, [(1, 0), (2, 1)]);
    // The failure reached the model as the result of its task_complete.
    let session: Session = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("servo-{v}-session.json"))).unwrap(),
    )
    .unwrap();
    let fed = session
        .messages
        .iter()
        .filter(|m| m.tool_call_id.is_some())
        .filter_map(|m| m.content.clone())
        .find(|t| t.contains("verification failed"))
        .expect("the verify feedback in the session");
    assert!(fed.contains("FAIL: add 2 2 = 0, expected 4"), "{fed}");
    let audit = std::fs::read_to_string(dir.join(format!("servo-{v}-audit.log"))).unwrap();
    let verified: Vec<(u32, bool)> = audit
        .lines()
        .filter_map(|l| match serde_json::from_str(l).unwrap() {
            AuditEvent::Verified {
                attempt, passed, ..
            } => Some((attempt, passed)),
            _ => None,
        })
        .collect();
    assert_eq!(verified, [(1, false), (2, true)]);

    // OOM on the swarm: the same state and reason as on one host.
    let task = s.task(&oom);
    assert_eq!(task["state"], "incomplete", "{task:#}");
    assert_eq!(task["reason"], "oom", "{task:#}");
    assert!(
        s.path()
            .join("results")
            .join(&oom)
            .join("work.txt")
            .is_file(),
        "{task:#}"
    );
    // The assessor judged from the container's workspace on its node.
    let task = s.task(&assessed);
    assert_eq!(task["state"], "complete", "{task:#}");
    let asked: Vec<String> = llm
        .seen()
        .iter()
        .map(|r| r.body.to_string())
        .filter(|b| b.contains("Saheeli's assessor"))
        .collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    for part in ["ok: add 2 2 = 4", "- add.sh", "+echo $(($1 + $2))"] {
        assert!(asked[0].contains(part), "{part}: {}", asked[0]);
    }
    eprintln!("swarm verify test done in {}", elapsed(t0));
}
