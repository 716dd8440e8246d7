//! Nothing stalls the servo (issue 9 §1, §6): a gateway that is gone for
//! longer than a foreman takes to be replaced is waited for (and the wait
//! audited); a blocking tool call leaves SIGTERM and the time budget
//! working; the request limit comes from the task.

use std::process::Child;
use std::time::{Duration, Instant};

use saheeli_protocol::{AuditEvent, ServoExit};
use serde_json::json;

use crate::util::{Fake, Reply, Servo, Workspace};

/// Waits for the child to exit, at most `limit`.
fn exit_within(child: &mut Child, limit: Duration) -> Option<i32> {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the servo did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_gateway_gone_longer_than_a_lease_is_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("gateway.sock");
    let (mut child, ws) = Servo::model("gpt-test")
        .gateway(&format!("unix:{}", sock.display()))
        .spawn();
    // A foreman's take-over can take two leases (20 s by default); the old
    // servo gave up after five attempts, about 7.5 s.
    std::thread::sleep(Duration::from_secs(14));
    assert!(child.try_wait().unwrap().is_none(), "the servo gave up");
    let fake = Fake::unix(
        &sock,
        vec![Reply::tool_call(
            "c1",
            "task_complete",
            json!({"message": "done"}),
            (10, 2),
        )],
    );
    let code = exit_within(&mut child, Duration::from_secs(15));
    assert_eq!(code, Some(ServoExit::Complete.code()));
    assert_eq!(fake.requests().len(), 1);
    let events = ws.audit();
    let wait = events
        .iter()
        .position(|e| matches!(e, AuditEvent::GatewayWait { .. }))
        .expect("the wait is in the audit log");
    let back = events
        .iter()
        .position(
            |e| matches!(e, AuditEvent::GatewayBack { waited_ms, .. } if *waited_ms >= 13_000),
        )
        .expect("the return is in the audit log");
    assert!(wait < back);
}

/// A replay that makes a FIFO, then writes to it: `create_file` blocks in
/// `open` until a reader comes, which none does.
const BLOCKING: &str = "turns:
  - tool_calls: [ { name: execute_shell, arguments: { command: 'mkfifo pipe' } } ]
  - tool_calls: [ { name: create_file, arguments: { path: pipe, content: x } } ]
  - tool_calls: [ { name: task_complete, arguments: { message: never } } ]
";

fn wait_for_step_two(ws: &Workspace) {
    let start = Instant::now();
    while !std::fs::read_to_string(ws.path(&format!("servo-{}-audit.log", ws.id)))
        .is_ok_and(|a| a.contains("mkfifo"))
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "step one never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
}

#[test]
fn sigterm_during_a_blocking_tool_flushes_promptly() {
    let (mut child, ws) = Servo::replay(BLOCKING).spawn();
    wait_for_step_two(&ws);
    // SAFETY: signals our own child.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let code = exit_within(&mut child, Duration::from_secs(5));
    assert_eq!(code, Some(ServoExit::Terminated.code()));
    assert_eq!(ws.outcome(), "terminated");
    assert_eq!(ws.session().steps, 2);
}

#[test]
fn the_time_budget_fires_during_a_blocking_tool() {
    let started = Instant::now();
    let (mut child, ws) = Servo::replay(BLOCKING).timeout_s(4).spawn();
    let code = exit_within(&mut child, Duration::from_secs(12));
    assert_eq!(code, Some(ServoExit::TimeLimit.code()));
    assert!(started.elapsed() < Duration::from_secs(8));
    assert_eq!(ws.outcome(), "timeout");
    assert_eq!(ws.session().steps, 2);
}

#[test]
fn the_request_limit_comes_from_the_task() {
    // A gateway that accepts and never answers.
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("gateway.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept() {
            held.push(s);
        }
    });
    let started = Instant::now();
    let ws = Servo::model("gpt-test")
        .gateway(&format!("unix:{}", sock.display()))
        .request_timeout_s(1)
        .run();
    assert_eq!(ws.code, Some(ServoExit::LlmError.code()), "{}", ws.stderr);
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "{:?}",
        started.elapsed()
    );
    let events = ws.audit();
    let error = events
        .iter()
        .find_map(|e| match e {
            AuditEvent::LlmCall { error, .. } => error.clone(),
            _ => None,
        })
        .unwrap();
    assert!(error.contains("timed out"), "{error}");
}
