//! The offline path end to end: a replay task in a real servo container.

use std::path::Path;

use saheeli_protocol::{AuditEvent, Completion, Session};
use serde_json::json;

use crate::util::{Saheeli, leftovers, replay_prompt, require_docker, script};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// Copies the repository's prompts/ into the test project.
fn with_examples(s: &Saheeli) {
    let src = repo().join("prompts");
    let status = std::process::Command::new("cp")
        .args(["-r", src.to_str().unwrap(), s.path().to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn example_prompt_runs_offline_and_collects_everything() {
    require_docker();
    let s = Saheeli::new();
    with_examples(&s);
    let out = s.run(&["run", "prompts/hello.md"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let results = Path::new(stdout.trim());
    assert!(results.starts_with(s.path().join("results")), "{stdout}");
    let id = results.file_name().unwrap().to_str().unwrap().to_string();

    let completion: Completion =
        serde_json::from_slice(&std::fs::read(results.join("complete.json")).unwrap()).unwrap();
    assert_eq!(completion.task_id.to_string(), id);
    assert_eq!(completion.steps, 3);
    assert_eq!(
        std::fs::read_to_string(results.join("hello.txt")).unwrap(),
        "Hello from a Saheeli servo!\n"
    );
    let audit = std::fs::read_to_string(results.join(format!("servo-{id}-audit.log"))).unwrap();
    let events: Vec<AuditEvent> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let shell = events.iter().find_map(|e| match e {
        AuditEvent::ToolCall {
            tool, exit_code, ..
        } if tool == "execute_shell" => Some(*exit_code),
        _ => None,
    });
    assert_eq!(shell, Some(Some(0)));
    assert!(
        matches!(events.last(), Some(AuditEvent::Finish { outcome, .. }) if outcome == "complete")
    );
    let session: Session = serde_json::from_slice(
        &std::fs::read(results.join(format!("servo-{id}-session.json"))).unwrap(),
    )
    .unwrap();
    // The shell ran as the unprivileged servo user.
    let shell_output = session
        .messages
        .iter()
        .filter_map(|m| m.content.as_deref())
        .find(|c| c.contains("Hello from a Saheeli servo!"))
        .expect("the shell output is in the session");
    assert!(shell_output.contains("1000"), "{shell_output}");

    let t = s.task(&id);
    assert_eq!(t["state"], "complete");
    assert_eq!(t["steps"], 3);
    assert_eq!(t["results"], results.to_str().unwrap());
    let states: Vec<_> = t["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["to"].clone())
        .collect();
    assert_eq!(states, vec!["queued", "starting", "running", "complete"]);
    assert!(leftovers(&id).is_empty(), "{:?}", leftovers(&id));

    // logs and results work on the finished task.
    let logs = s.expect(&["task", "logs", &id], 0);
    assert!(
        logs.contains("execute_shell") && logs.contains("finish"),
        "{logs}"
    );
    let dest = s.path().join("copy");
    s.expect(
        &["task", "results", &id, "--dest", dest.to_str().unwrap()],
        0,
    );
    assert!(dest.join(&id).join("complete.json").is_file());
}

#[test]
fn workspace_directory_is_copied_in_and_changes_come_back() {
    require_docker();
    let s = Saheeli::new();
    with_examples(&s);
    let out = s.run(&[
        "run",
        "prompts/fix-test.md",
        "--param",
        "model=replay:fix-test.replay.yaml",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results = Path::new(stdout.trim());
    let fixed = std::fs::read_to_string(results.join("calc.py")).unwrap();
    assert!(fixed.contains("/ len(values)\n"), "{fixed}");
    // The original is untouched.
    let original = std::fs::read_to_string(s.path().join("prompts/calc/calc.py")).unwrap();
    assert!(original.contains("len(values) + 1"));
    let session = std::fs::read_to_string(
        std::fs::read_dir(results)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with("-session.json"))
            .unwrap(),
    )
    .unwrap();
    assert!(
        session.contains("Ran 3 tests") && session.contains("OK"),
        "tests ran and passed in the servo"
    );
}

#[test]
fn task_without_task_complete_is_incomplete_and_still_collected() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "loop.json",
        &script(&[
            (
                "create_file",
                json!({"path": "notes/progress.txt", "content": "started"}),
            ),
            ("execute_shell", json!({"command": "echo still working"})),
            ("execute_shell", json!({"command": "echo never done"})),
        ]),
    );
    s.write("p.md", &replay_prompt("loop.json", "max_steps: 2\n"));
    let t = s.expect_json(&["run", "p.md", "--json"], 1);
    assert_eq!(t["state"], "incomplete");
    assert_eq!(t["reason"], "max_steps");
    assert_eq!(t["steps"], 2);
    let results = Path::new(t["results"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(results.join("notes/progress.txt")).unwrap(),
        "started"
    );
    assert!(!results.join("complete.json").exists());
    assert!(leftovers(t["id"].as_str().unwrap()).is_empty());
}

#[test]
fn serve_drain_runs_the_queue_and_reports() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "ok.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    s.write(
        "short.json",
        &script(&[("execute_shell", json!({"command": "true"}))]),
    );
    s.write("ok.md", &replay_prompt("ok.json", ""));
    s.write("short.md", &replay_prompt("short.json", "max_steps: 1\n"));
    let ids = [s.submit("ok.md"), s.submit("ok.md"), s.submit("short.md")];
    // One task did not complete: exit 1.
    s.expect(&["serve", "--drain"], 1);
    let states: Vec<_> = ids.iter().map(|id| s.task(id)["state"].clone()).collect();
    assert_eq!(states, vec!["complete", "complete", "incomplete"]);
    for id in &ids {
        assert!(leftovers(id).is_empty());
    }
    // Nothing left: serving again is a no-op that succeeds.
    s.expect(&["serve", "--drain"], 0);
}

#[test]
fn both_collection_paths_bring_back_the_same_workspace() {
    require_docker();
    let mut trees = Vec::new();
    for mode in ["auto", "archive"] {
        let s = Saheeli::with_config(&format!("collection: {mode}\n"));
        s.write(
            "s.json",
            &script(&[
                (
                    "execute_shell",
                    json!({"command": "mkdir -p a/b && echo x > a/b/f && ln -s a/b/f link && ln -s /etc etc && mkfifo pipe && chmod +x a/b/f"}),
                ),
                ("task_complete", json!({"message": "done"})),
            ]),
        );
        s.write("p.md", &replay_prompt("s.json", ""));
        let out = s.run(&["run", "p.md"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let results = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let listing = std::process::Command::new("sh")
            .arg("-c")
            .arg("find . -path ./.saheeli -prune -o -printf '%y %p %l\\n' | grep -v -e servo- -e complete.json | sort")
            .current_dir(&results)
            .output()
            .unwrap();
        trees.push(String::from_utf8(listing.stdout).unwrap());
        assert_eq!(
            std::fs::read_to_string(results.join("a/b/f")).unwrap(),
            "x\n",
            "{mode}"
        );
        assert!(results.join("etc").is_symlink(), "{mode}");
        assert!(
            !results.join("pipe").exists(),
            "{mode}: a FIFO is not collected"
        );
    }
    assert_eq!(trees[0], trees[1]);
}
