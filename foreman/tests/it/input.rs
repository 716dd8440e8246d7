//! Bad input: a clear error naming the file, line and key; exit 2; nothing queued.

use crate::util::{Saheeli, assert_nothing_queued};

#[test]
fn unknown_front_matter_key_names_file_line_and_key() {
    let s = Saheeli::new();
    s.write("p.md", "---\ntitle: x\nmodle: gpt-4o\n---\nDo it.\n");
    let out = s.run(&["task", "submit", "--prompt", "p.md"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("p.md:3:") && err.contains("unknown field `modle`"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    assert_nothing_queued(&s);
}

#[test]
fn wrong_type_and_bad_values_are_rejected() {
    let s = Saheeli::new();
    for (fm, needle) in [
        ("max_steps: many", "max_steps"),
        ("timeout: soon", "invalid duration `soon`"),
        ("network: wifi", "network"),
        ("resources: { memory: lots }", "invalid memory size"),
        ("resources: { cpu: 2 }", "unknown field `cpu`"),
        ("model: replay:missing.yaml", "missing.yaml"),
        ("workspace: ./nope", "is not a directory"),
    ] {
        s.write("p.md", &format!("---\n{fm}\n---\nDo it.\n"));
        let out = s.run(&["task", "submit", "--prompt", "p.md"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{fm}: {err}");
        assert!(err.contains(needle), "{fm}: {err}");
        assert!(err.contains("p.md"), "{fm}: {err}");
    }
    assert_nothing_queued(&s);
}

#[test]
fn missing_file_empty_body_and_bad_utf8() {
    let s = Saheeli::new();
    assert!(
        s.expect_err(&["task", "submit", "--prompt", "absent.md"], 2)
            .contains("absent.md")
    );

    s.write("empty.md", "---\ntitle: x\n---\n\n");
    assert!(
        s.expect_err(&["task", "submit", "--prompt", "empty.md"], 2)
            .contains("prompt is empty")
    );

    std::fs::write(s.path().join("bin.md"), b"hello \xff\xfe world").unwrap();
    assert!(
        s.expect_err(&["task", "submit", "--prompt", "bin.md"], 2)
            .contains("not valid UTF-8")
    );
    assert_nothing_queued(&s);
}

#[test]
fn bad_config_is_named() {
    let s = Saheeli::new();
    s.write("config.yaml", "concurency: 3\n");
    let err = s.expect_err(&["task", "status"], 2);
    assert!(
        err.contains("config.yaml:1") && err.contains("unknown field `concurency`"),
        "{err}"
    );
}

#[test]
fn unknown_task_id_is_named() {
    let s = Saheeli::new().env("OPENAI_API_KEY", "sk-test-not-used");
    s.write("p.md", "Hello.\n");
    s.submit("p.md");
    for cmd in [
        ["task", "status"],
        ["task", "results"],
        ["task", "cancel"],
        ["task", "retry"],
    ] {
        let out = s.run(&[cmd[0], cmd[1], "0000dead"]);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("no task with id `0000dead`"),
            "{cmd:?}"
        );
    }
}

#[test]
fn submit_prints_a_v7_id_and_queues() {
    // The default model needs its key at submit.
    let s = Saheeli::new().env("OPENAI_API_KEY", "sk-test-not-used");
    s.write("p.md", "# Hello\nSay hi.\n");
    let id = s.submit("p.md");
    let uuid: uuid::Uuid = id.parse().unwrap();
    assert_eq!(uuid.get_version_num(), 7);
    let t = s.task(&id);
    assert_eq!(t["state"], "queued");
    assert_eq!(t["title"], "Hello");
    assert_eq!(t["events"][0]["to"], "queued");
    // A queued task can be cancelled and then never starts.
    s.expect(&["task", "cancel", &id[..8]], 0);
    assert_eq!(s.task(&id)["state"], "cancelled");
}
