//! The offline `replay:` model: the files and exit codes the foreman
//! relies on, without a gateway.

use saheeli_protocol::{AuditEvent, ReplayScript, ServoExit};

use crate::util::Servo;

#[test]
fn completes_and_writes_its_files() {
    let ws = Servo::replay(
        "turns:
  - content: Let me start.
    tool_calls:
      - name: execute_shell
        arguments: { command: 'echo hi > out.txt; echo to stderr >&2' }
    usage: { input_tokens: 10, output_tokens: 2 }
  - tool_calls:
      - name: create_file
        arguments: { path: sub/b.txt, content: B }
  - tool_calls:
      - name: task_complete
        arguments: { message: all done }
    usage: { input_tokens: 12, output_tokens: 3 }
",
    )
    .run();
    assert_eq!(ws.code, Some(ServoExit::Complete.code()), "{}", ws.stderr);

    let c = ws.completion().expect("complete.json");
    assert_eq!(c.task_id, ws.id);
    assert_eq!(c.message, "all done");
    assert_eq!(c.steps, 3);
    assert_eq!((c.usage.input_tokens, c.usage.output_tokens), (22, 5));
    assert!(c.finished_at.ends_with('Z'), "{}", c.finished_at);
    assert_eq!(std::fs::read_to_string(ws.path("out.txt")).unwrap(), "hi\n");
    assert_eq!(std::fs::read_to_string(ws.path("sub/b.txt")).unwrap(), "B");

    let events = ws.audit();
    assert!(
        matches!(&events[0], AuditEvent::Start { task_id, max_steps: 10, .. } if *task_id == ws.id)
    );
    let llm_calls = events
        .iter()
        .filter(|e| matches!(e, AuditEvent::LlmCall { error: None, .. }))
        .count();
    assert_eq!(llm_calls, 3);
    let tools: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            AuditEvent::ToolCall {
                tool,
                ok,
                exit_code,
                step,
                ..
            } => Some((*step, tool.as_str(), *ok, *exit_code)),
            _ => None,
        })
        .collect();
    assert_eq!(
        tools,
        [
            (1, "execute_shell", true, Some(0)),
            (2, "create_file", true, None),
            (3, "task_complete", true, None)
        ]
    );
    assert!(matches!(
        events.last(),
        Some(AuditEvent::Finish { outcome, steps: 3, usage, .. })
            if outcome == "complete" && usage.total() == 27
    ));

    let s = ws.session();
    assert_eq!((s.task_id, s.steps), (ws.id, 3));
    // system, user, (assistant, tool) × 3
    assert_eq!(s.messages.len(), 8);
    let shell = s.messages[3].content.as_deref().unwrap();
    assert!(
        shell.contains("to stderr") && shell.contains("[exit code 0]"),
        "{shell}"
    );
    assert_eq!(s.messages[3].tool_call_id.as_deref(), Some("replay-1-0"));
    // A recorded session replays as the same turns.
    assert_eq!(ReplayScript::from_session(&s).turns.len(), 3);
}

#[test]
fn stops_at_max_steps_without_completing() {
    let ws = Servo::replay(
        "turns:
  - tool_calls: [ { name: execute_shell, arguments: { command: 'echo 1 >> n' } } ]
  - tool_calls: [ { name: execute_shell, arguments: { command: 'echo 2 >> n' } } ]
  - tool_calls: [ { name: execute_shell, arguments: { command: 'echo 3 >> n' } } ]
  - tool_calls: [ { name: execute_shell, arguments: { command: 'echo 4 >> n' } } ]
  - tool_calls: [ { name: task_complete, arguments: { message: late } } ]
",
    )
    .max_steps(3)
    .run();
    assert_eq!(ws.code, Some(ServoExit::MaxSteps.code()), "{}", ws.stderr);
    assert!(ws.completion().is_none());
    assert!(!ws.path("complete.json").exists());
    assert_eq!(std::fs::read_to_string(ws.path("n")).unwrap(), "1\n2\n3\n");
    assert_eq!(ws.outcome(), "max_steps");
    assert_eq!(ws.session().steps, 3);
}

#[test]
fn bad_tool_calls_go_back_to_the_model() {
    let ws = Servo::replay(
        "turns:
  - tool_calls:
      - { name: create_file, arguments: '{not json' }
      - { name: read_file, arguments: { path: a, extra: 1 } }
      - { name: execute_shell, arguments: { command: 5 } }
      - { name: launch_missiles }
      - { name: read_file, arguments: { path: ../../etc/passwd } }
      - { name: edit_file, arguments: { path: missing.txt, old_str: a, new_str: b } }
  - content: no tools this turn
  - tool_calls: [ { name: task_complete, arguments: { message: recovered } } ]
",
    )
    .run();
    assert_eq!(ws.code, Some(ServoExit::Complete.code()), "{}", ws.stderr);
    let text = ws.conversation();
    for needle in [
        "invalid arguments for `create_file`",
        "unknown field `extra`",
        "invalid type: integer `5`",
        "unknown tool `launch_missiles`",
        "outside the workspace",
        "reading `missing.txt`",
        // The nudge after a turn without tool calls.
        "call task_complete",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    let failed = ws
        .audit()
        .iter()
        .filter(|e| matches!(e, AuditEvent::ToolCall { ok: false, .. }))
        .count();
    assert_eq!(failed, 6);
}

#[test]
fn long_output_is_capped_in_the_conversation() {
    let ws = Servo::replay(
        "turns:
  - tool_calls: [ { name: execute_shell, arguments: { command: 'echo FIRST; seq 1 100000; echo LAST' } } ]
  - tool_calls: [ { name: task_complete, arguments: { message: ok } } ]
",
    )
    .run();
    assert_eq!(ws.code, Some(0), "{}", ws.stderr);
    let s = ws.session();
    let out = s.messages[3].content.as_deref().unwrap();
    assert!(out.starts_with("FIRST\n") && out.contains("LAST\n[exit code 0]"));
    assert!(out.contains("bytes cut"));
    assert!(out.len() <= 4096 + 200, "{}", out.len()); // + the budget note
    assert!(ws.audit().iter().any(|e| matches!(
        e,
        AuditEvent::ToolCall { truncated: true, result_bytes, .. } if *result_bytes <= 4096
    )));
}

#[test]
fn running_out_of_script_is_reported() {
    let ws = Servo::replay("turns:\n  - content: thinking\n").run();
    assert_eq!(ws.code, Some(ServoExit::ReplayExhausted.code()));
    assert_eq!(ws.outcome(), "replay_exhausted");
}

#[test]
fn the_time_budget_ends_a_long_command() {
    let ws = Servo::replay(
        "turns:\n  - tool_calls: [ { name: execute_shell, arguments: { command: 'sleep 30' } } ]\n",
    )
    .timeout_s(2)
    .run();
    assert_eq!(ws.code, Some(ServoExit::TimeLimit.code()), "{}", ws.stderr);
    assert!(ws.elapsed.as_secs() < 10, "{:?}", ws.elapsed);
    assert_eq!(ws.outcome(), "timeout");
    assert!(ws.completion().is_none());
}

#[test]
fn a_launch_in_the_environment_is_unpacked() {
    let ws = Servo::replay(
        "turns:\n  - tool_calls: [ { name: task_complete, arguments: { message: ok } } ]\n",
    )
    .launch_in_env()
    .run();
    assert_eq!(ws.code, Some(0), "{}", ws.stderr);
    assert!(ws.path(".saheeli/task.json").exists());
    assert_eq!(
        std::fs::read_to_string(ws.path("prompt.md")).unwrap(),
        "Do it.\n"
    );
}

#[test]
fn a_missing_task_file_is_a_bad_task() {
    let d = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_servo"))
        .env("SAHEELI_WORKSPACE", d.path())
        .env_remove(saheeli_protocol::LAUNCH_ENV)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(ServoExit::BadTask.code()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("task.json"), "{stderr}");
}

#[test]
fn an_invalid_task_file_is_a_bad_task() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join(".saheeli")).unwrap();
    std::fs::write(d.path().join(".saheeli/task.json"), r#"{"task_id": 1}"#).unwrap();
    std::fs::write(d.path().join("prompt.md"), "x").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_servo"))
        .env("SAHEELI_WORKSPACE", d.path())
        .env_remove(saheeli_protocol::LAUNCH_ENV)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(ServoExit::BadTask.code()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("task.json") && stderr.contains("invalid type"),
        "{stderr}"
    );
}

#[test]
fn a_replay_model_without_a_script_is_a_bad_task() {
    let ws = Servo::model("replay:script.yaml").run();
    assert_eq!(ws.code, Some(ServoExit::BadTask.code()));
    assert!(ws.stderr.contains("no `replay` script"), "{}", ws.stderr);
}

/// A parked servo's session is the agent's file: a link (to /dev/zero, to
/// a host path) or a FIFO in its place is refused at once, never followed
/// or waited on; a session that is too big is read only up to its cap.
#[test]
fn a_session_that_is_a_link_or_a_fifo_is_refused_at_once() {
    let script =
        "turns:\n  - tool_calls:\n      - name: task_complete\n        arguments: { message: m }\n";
    type Plant = fn(&std::path::Path);
    let plant: [(&str, Plant); 3] = [
        ("link to /dev/zero", |p| {
            std::os::unix::fs::symlink("/dev/zero", p).unwrap()
        }),
        ("link to a host file", |p| {
            std::os::unix::fs::symlink("/etc/passwd", p).unwrap()
        }),
        ("fifo", |p| {
            let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a valid C string.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        }),
    ];
    for (what, make) in plant {
        let ws = Servo::replay(script)
            .before(|dir, id| make(&dir.join(saheeli_protocol::paths::session(&id))))
            .run();
        assert_eq!(
            ws.code,
            Some(ServoExit::BadTask.code()),
            "{what}: {}",
            ws.stderr
        );
        assert!(
            ws.elapsed < std::time::Duration::from_secs(10),
            "{what}: {:?}",
            ws.elapsed
        );
        assert!(
            ws.stderr.contains("session") || ws.stderr.contains("regular file"),
            "{what}: {}",
            ws.stderr
        );
    }
}
