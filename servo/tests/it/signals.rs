//! SIGTERM (the foreman's timeout or a cancel): the servo flushes its
//! files and exits 143 promptly, ending the command it was running.

use std::time::{Duration, Instant};

use saheeli_protocol::ServoExit;

use crate::util::Servo;

#[test]
fn sigterm_flushes_and_exits_promptly() {
    let (mut child, ws) = Servo::replay(
        "turns:
  - tool_calls: [ { name: execute_shell, arguments: { command: 'sleep 60 & echo $! > bg.pid; wait' } } ]
",
    )
    .spawn();
    let pid_file = ws.path("bg.pid");
    let start = Instant::now();
    while std::fs::read_to_string(&pid_file).map_or(true, |p| !p.ends_with('\n')) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the command never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signals our own child.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let signalled = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(15),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(ServoExit::Terminated.code()));
    assert_eq!(ws.outcome(), "terminated");
    assert!(ws.completion().is_none());
    // The session was saved on the way out, the running command included.
    let s = ws.session();
    assert_eq!(s.steps, 1);
    assert_eq!(s.messages.len(), 3);
    // The command's process group went with it.
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let stat = format!("/proc/{}/stat", pid.trim());
    while std::fs::read_to_string(&stat)
        .is_ok_and(|s| s.contains("(sleep) ") && !s.contains(") Z "))
    {
        assert!(
            signalled.elapsed() < Duration::from_secs(15),
            "`sleep 60` survived: {:?}",
            std::fs::read_to_string(&stat)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
