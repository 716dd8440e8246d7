//! The servo binary outside a container: a temporary workspace, a replay
//! script, and the files and exit codes the foreman relies on.

use std::path::Path;
use std::process::Command;

use saheeli_protocol::{
    AuditEvent, Completion, ReplayScript, ServoExit, ServoTask, Session, TaskId,
};

fn run(script: &str, max_steps: u32) -> (tempfile::TempDir, TaskId, i32) {
    let d = tempfile::tempdir().unwrap();
    let id = TaskId::new();
    let task = ServoTask {
        task_id: id,
        title: "t".into(),
        model: "replay:s.yaml".into(),
        max_steps,
        max_tokens: None,
        timeout_s: 60,
        max_output_bytes: 4096,
        replay: Some(ReplayScript::parse(script).unwrap()),
    };
    std::fs::create_dir(d.path().join(".saheeli")).unwrap();
    std::fs::write(
        d.path().join(".saheeli/task.json"),
        serde_json::to_vec(&task).unwrap(),
    )
    .unwrap();
    std::fs::write(d.path().join("prompt.md"), "Do it.\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_servo"))
        .env("SAHEELI_WORKSPACE", d.path())
        .output()
        .unwrap();
    (d, id, out.status.code().unwrap())
}

fn audit(dir: &Path, id: TaskId) -> Vec<AuditEvent> {
    std::fs::read_to_string(dir.join(format!("servo-{id}-audit.log")))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn completes_and_writes_its_files() {
    let (d, id, code) = run(
        "turns:
  - tool_calls:
      - name: execute_shell
        arguments: { command: 'echo hi > out.txt' }
      - name: create_file
        arguments: { path: b.txt, content: B }
    usage: { input_tokens: 10, output_tokens: 2 }
  - tool_calls:
      - name: task_complete
        arguments: { message: all done }
    usage: { input_tokens: 12, output_tokens: 3 }
",
        10,
    );
    assert_eq!(code, ServoExit::Complete.code());
    let c: Completion =
        serde_json::from_slice(&std::fs::read(d.path().join("complete.json")).unwrap()).unwrap();
    assert_eq!(c.task_id, id);
    assert_eq!(c.message, "all done");
    assert_eq!(c.steps, 2);
    assert_eq!((c.usage.input_tokens, c.usage.output_tokens), (22, 5));
    assert_eq!(
        std::fs::read_to_string(d.path().join("out.txt")).unwrap(),
        "hi\n"
    );
    let events = audit(d.path(), id);
    assert!(matches!(events[0], AuditEvent::Start { .. }));
    let tools: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            AuditEvent::ToolCall { tool, ok, .. } => Some((tool.as_str(), *ok)),
            _ => None,
        })
        .collect();
    assert_eq!(
        tools,
        vec![
            ("execute_shell", true),
            ("create_file", true),
            ("task_complete", true)
        ]
    );
    assert!(
        matches!(events.last(), Some(AuditEvent::Finish { outcome, steps: 2, .. }) if outcome == "complete")
    );
    let s: Session = serde_json::from_slice(
        &std::fs::read(d.path().join(format!("servo-{id}-session.json"))).unwrap(),
    )
    .unwrap();
    // system, user, (assistant, tool, tool), (assistant, tool)
    assert_eq!(s.messages.len(), 7);
    // A recorded session replays as the same turns.
    let again = ReplayScript::from_session(&s);
    assert_eq!(again.turns.len(), 2);
}

#[test]
fn stops_at_max_steps_without_completing() {
    let (d, id, code) = run(
        "turns:
  - tool_calls: [ { name: execute_shell, arguments: { command: 'true' } } ]
  - tool_calls: [ { name: execute_shell, arguments: { command: 'true' } } ]
  - tool_calls: [ { name: task_complete, arguments: { message: late } } ]
",
        2,
    );
    assert_eq!(code, ServoExit::MaxSteps.code());
    assert!(!d.path().join("complete.json").exists());
    assert!(
        matches!(audit(d.path(), id).last(), Some(AuditEvent::Finish { outcome, .. }) if outcome == "max_steps")
    );
}

#[test]
fn bad_tool_arguments_go_back_to_the_model() {
    let (d, id, code) = run(
        "turns:
  - tool_calls: [ { name: create_file, arguments: '{not json' } ]
  - content: no tools this turn
  - tool_calls: [ { name: task_complete, arguments: { message: recovered } } ]
",
        10,
    );
    assert_eq!(code, ServoExit::Complete.code());
    let s: Session = serde_json::from_slice(
        &std::fs::read(d.path().join(format!("servo-{id}-session.json"))).unwrap(),
    )
    .unwrap();
    let text = serde_json::to_string(&s.messages).unwrap();
    assert!(
        text.contains("invalid arguments for `create_file`"),
        "{text}"
    );
    assert!(
        text.contains("call task_complete"),
        "the nudge after a turn without tools"
    );
}

#[test]
fn running_out_of_script_is_reported() {
    let (d, id, code) = run("turns:\n  - content: thinking\n", 10);
    assert_eq!(code, ServoExit::ReplayExhausted.code());
    assert!(
        matches!(audit(d.path(), id).last(), Some(AuditEvent::Finish { outcome, .. }) if outcome == "replay_exhausted")
    );
}

#[test]
fn missing_task_file_is_a_bad_task() {
    let d = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_servo"))
        .env("SAHEELI_WORKSPACE", d.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(ServoExit::BadTask.code()));
    assert!(String::from_utf8_lossy(&out.stderr).contains("task.json"));
}
