//! What people read: every `--help`, and the main error messages, as
//! snapshots (ids, paths and times redacted). A change here is a change of
//! the interface users and scripts rely on: review it as one.

use insta::assert_snapshot;

use crate::util::Saheeli;

/// The subcommands a `--help` text lists under `Commands:` (not `help`).
fn listed_commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("    "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// Every command's `--help`, found by walking the tree the binary prints
/// (issue 24: a hand-written list missed seven task subcommands).
#[test]
fn help_texts() {
    let s = Saheeli::new();
    let mut queue: Vec<Vec<String>> = vec![Vec::new()];
    let mut seen = 0;
    while let Some(path) = queue.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = s.expect(&args, 0);
        for c in listed_commands(&help).into_iter().rev() {
            let mut deeper = path.clone();
            deeper.push(c);
            queue.push(deeper);
        }
        let name = if path.is_empty() {
            "help".to_string()
        } else {
            format!("help_{}", path.join("_"))
        };
        assert_snapshot!(name, help);
        seen += 1;
    }
    // The tree as it stood when this test was written: 7 task subcommands
    // had no snapshot then.
    assert!(seen >= 26, "walked only {seen} commands");
}

/// Error messages name the file, line, key or id and say what to do.
#[test]
fn error_messages() {
    let s = Saheeli::new();
    let dir = s.path().display().to_string();
    let redact = |text: String| text.replace(&dir, "[project]");

    s.write("bad.md", "---\ntitle: x\nmodle: gpt-4o\n---\nDo it.\n");
    let err = s.expect_err(&["task", "submit", "--prompt", "bad.md"], 2);
    assert_snapshot!("error_bad_front_matter", redact(err));

    let err = s.expect_err(&["task", "status", "0123456789abcdef"], 2);
    assert_snapshot!("error_unknown_id", redact(err));

    s.write("p.md", "Hello.\n");
    let err = s.expect_err(
        &[
            "--config",
            "other.yaml",
            "task",
            "submit",
            "--prompt",
            "p.md",
        ],
        2,
    );
    assert_snapshot!("error_missing_config", redact(err));

    s.write("broken.yaml", "concurency: 3\n");
    let err = s.expect_err(&["--config", "broken.yaml", "task", "status"], 2);
    assert_snapshot!("error_bad_config", redact(err));

    s.write("img.yaml", "image: saheeli-servo:does-not-exist\n");
    let err = s.expect_err(&["--config", "img.yaml", "serve", "--drain"], 2);
    assert_snapshot!("error_missing_image", redact(err));
}

/// Issue 24: `--log-format json` writes the foreman's log as JSON lines,
/// and a task that ends incomplete is a WARN with what to do next.
#[test]
fn the_log_is_json_lines_and_an_incomplete_task_warns_with_a_hint() {
    crate::util::require_docker();
    let s = Saheeli::new();
    s.write(
        "s.json",
        &crate::util::script(&[("execute_shell", serde_json::json!({"command": "echo hi"}))]),
    );
    s.write("p.md", &crate::util::replay_prompt("s.json", ""));
    let out = s.run(&["--log-format", "json", "run", "p.md"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(lines.len() >= 2, "{stderr}");
    for l in &lines {
        assert!(l["timestamp"].is_string() && l["level"].is_string(), "{l}");
    }
    let ended = lines
        .iter()
        .find(|l| l["message"] == "task finished")
        .unwrap_or_else(|| panic!("no `task finished` line: {stderr}"));
    assert_eq!(ended["level"], "WARN", "{ended}");
    assert_eq!(ended["state"], "incomplete", "{ended}");
    let hint = ended["hint"].as_str().unwrap_or_default();
    assert!(
        hint.contains("report.md") && hint.contains("saheeli task retry"),
        "{ended}"
    );

    // Without `--log-format`: JSON lines when stderr is not a terminal
    // (a service's log collector)...
    let by_default =
        |mut c: std::process::Command| c.env_remove("SAHEELI_LOG_FORMAT").output().unwrap();
    let out = by_default(s.cmd(&["run", "p.md"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .any(|l| l["message"] == "task finished" && l["level"] == "WARN"),
        "{stderr}"
    );
    // ... and text, for people, on a terminal.
    let out = by_default(s.in_pty(&["run", "p.md"]));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown
            .lines()
            .any(|l| l.contains("WARN") && l.contains("task finished") && l.contains("task retry")),
        "{shown}"
    );
    assert!(!shown.lines().any(|l| l.starts_with('{')), "{shown}");
}
