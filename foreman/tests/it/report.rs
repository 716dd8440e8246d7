//! What a user takes away from a task (issue 11, "Report and patch"):
//! `.saheeli/changes.patch`, which the real `git apply` applies to the
//! submitted workspace, and `report.md`; `task diff` and `task report`
//! print them.

use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::process::Command;

use serde_json::json;

use crate::util::{Saheeli, replay_prompt, require_docker, script};

/// Every file and link below `root` but `.git` and the names in `skip`
/// (top-level): (path, "file" | "exec" | "link", bytes or target).
fn listing(root: &Path, skip: &[&str]) -> Vec<(String, String, Vec<u8>)> {
    let mut out = vec![];
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let top = rel.split('/').next().unwrap();
            if top == ".git" || skip.contains(&top) {
                continue;
            }
            let meta = path.symlink_metadata().unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.push((rel, "link".into(), target.into_os_string().into_vec()));
            } else {
                let kind = if meta.permissions().mode() & 0o100 != 0 {
                    "exec"
                } else {
                    "file"
                };
                out.push((rel, kind.into(), std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs")
}

/// Saheeli's own files in a results directory (not the agent's work).
fn own_files(id: &str) -> Vec<String> {
    [
        ".saheeli",
        "prompt.md",
        "complete.json",
        "report.md",
        &format!("servo-{id}-audit.log"),
        &format!("servo-{id}-session.json"),
    ]
    .map(String::from)
    .to_vec()
}

#[test]
fn the_patch_applies_to_the_submitted_workspace_and_the_report_tells_what_happened() {
    require_docker();
    let s = Saheeli::new();
    s.write("ws/keep.txt", "same\n");
    s.write(
        "ws/calc.py",
        "def mean(v):\n    return sum(v) / (len(v) + 1)\n\nprint(mean([1, 2]))\n",
    );
    s.write("ws/gone.txt", "bye\n");
    s.write("ws/tail.txt", "one\ntwo");
    std::fs::write(s.path().join("ws/logo.bin"), [0x89, b'P', 0, 1, 2]).unwrap();
    symlink("keep.txt", s.path().join("ws/link")).unwrap();
    s.write(
        "s.json",
        &script(&[
            (
                "edit_file",
                json!({"path": "calc.py", "old_str": "(len(v) + 1)", "new_str": "len(v)"}),
            ),
            (
                "create_file",
                json!({"path": "src/new/added.txt", "content": "fresh\nno newline at the end"}),
            ),
            (
                "execute_shell",
                json!({"command": "rm gone.txt && printf 'one\\nthree' > tail.txt \
                    && printf '\\211P\\000\\001\\003' > logo.bin && ln -s /etc/passwd outside \
                    && ln -sfn calc.py link"}),
            ),
            ("execute_shell", json!({"command": "false"})),
            // A test run leaves bytecode behind (issue 24: the patch carried
            // it as a "Binary files differ" note git refused).
            (
                "execute_shell",
                json!({"command": "python3 -c 'import calc' && ls __pycache__"}),
            ),
            (
                "task_complete",
                json!({"message": "Fixed mean(); could not check the logo by eye."}),
            ),
        ]),
    );
    s.write(
        "p.md",
        &replay_prompt("s.json", "title: Change the workspace\nworkspace: ws\n"),
    );
    let t = s.expect_json(&["run", "p.md", "--json"], 0);
    let id = t["id"].as_str().unwrap();
    let results = Path::new(t["results"].as_str().unwrap());

    let patch = s.expect(&["task", "diff", id], 0);
    assert_eq!(
        patch,
        std::fs::read_to_string(results.join(".saheeli/changes.patch")).unwrap()
    );
    // Links are noted by their target, never followed; binary files noted.
    assert!(
        patch.contains("+/etc/passwd\n\\ No newline at end of file\n"),
        "{patch}"
    );
    assert!(!patch.contains("root:"), "{patch}");
    assert!(
        patch.contains("diff --git a/logo.bin b/logo.bin\n")
            && patch.contains("GIT binary patch\nliteral 5\n"),
        "{patch}"
    );
    assert!(!patch.contains("Binary files"), "{patch}");
    assert!(
        patch.starts_with("# left out of this patch: __pycache__/calc."),
        "{patch}"
    );
    for own in own_files(id) {
        assert!(!patch.contains(&format!("a/{own}")), "{own} in\n{patch}");
    }

    // The real git applies all of it to a copy of the submitted workspace
    // and reproduces the results (but the bytecode it left out).
    let copy = s.path().join("applied");
    let cp = Command::new("cp")
        .args(["-a", "ws", copy.to_str().unwrap()])
        .current_dir(s.path())
        .status()
        .unwrap();
    assert!(cp.success());
    assert!(git(&copy, &["init", "-q"]).status.success());
    let patch_file = results.join(".saheeli/changes.patch");
    let out = git(&copy, &["apply", patch_file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "git apply: {}\n{patch}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut skip: Vec<String> = own_files(id);
    skip.push("__pycache__".into());
    let skip: Vec<&str> = skip.iter().map(String::as_str).collect();
    assert_eq!(listing(&copy, &skip), listing(results, &skip));
    assert_eq!(
        std::fs::read_to_string(copy.join("src/new/added.txt")).unwrap(),
        "fresh\nno newline at the end"
    );

    let report = s.expect(&["task", "report", id], 0);
    assert_eq!(
        report,
        std::fs::read_to_string(results.join("report.md")).unwrap()
    );
    for part in [
        "# Report: Change the workspace",
        "> Do the scripted thing.",
        "**complete**",
        "6 steps of",
        "| `execute_shell` | 3 | 1 |",
        "| `edit_file` | 1 | 0 |",
        "| `create_file` | 1 | 0 |",
        "| `calc.py` | modified | +1 -1 |",
        "| `gone.txt` | deleted | +0 -1 |",
        "| `src/new/added.txt` | added | +2 -0 |",
        "| `tail.txt` | modified | +1 -1 |",
        "| `logo.bin` | modified | binary |",
        "not in the patch (ignored)",
        "| `outside` | added | +1 -0 |",
        "Fixed mean(); could not check the logo by eye.",
    ] {
        assert!(report.contains(part), "missing {part:?} in\n{report}");
    }
}

#[test]
fn an_unchanged_workspace_has_an_empty_patch_and_planted_files_are_replaced() {
    require_docker();
    let s = Saheeli::new();
    s.write("ws/a.txt", "a\n");
    s.write(
        "look.json",
        &script(&[
            ("execute_shell", json!({"command": "cat a.txt"})),
            ("task_complete", json!({"message": "looked"})),
        ]),
    );
    s.write(
        "look.md",
        &replay_prompt("look.json", "title: Look only\nworkspace: ws\n"),
    );
    // No `workspace:`: diffed against an empty tree. The agent plants its
    // own patch and report, as links out of the results.
    s.write(
        "plant.json",
        &script(&[
            (
                "execute_shell",
                // `.saheeli/` is the servo's (issue 23): that link fails.
                json!({"command": "echo hi > hello.txt; ln -sf /etc/passwd .saheeli/changes.patch; \
                    ln -s /etc/hostname report.md"}),
            ),
            ("task_complete", json!({"message": "all good, trust me"})),
        ]),
    );
    s.write("plant.md", &replay_prompt("plant.json", "title: Plant\n"));
    let look = s.submit("look.md");
    let plant = s.submit("plant.md");
    s.expect(&["serve", "--drain"], 0);

    assert_eq!(s.expect(&["task", "diff", &look], 0), "");
    let report = s.expect(&["task", "report", &look], 0);
    assert!(
        report.contains("None: the workspace is as it was submitted."),
        "{report}"
    );

    let results = s.task(&plant)["results"].as_str().unwrap().to_string();
    let results = Path::new(&results);
    for own in [".saheeli/changes.patch", "report.md"] {
        let meta = results.join(own).symlink_metadata().unwrap();
        assert!(
            meta.is_file(),
            "{own} is Saheeli's file, not the agent's link"
        );
    }
    let patch = s.expect(&["task", "diff", &plant], 0);
    assert!(
        patch.starts_with("diff --git a/hello.txt b/hello.txt\nnew file mode 100644\n"),
        "{patch}"
    );
    assert!(patch.contains("--- /dev/null\n+++ b/hello.txt\n@@ -0,0 +1 @@\n+hi\n"));
    // The agent's report.md is a change of its own, in the patch.
    assert!(patch.contains("diff --git a/report.md b/report.md\nnew file mode 120000\n"));
    assert!(!patch.contains("root:"), "{patch}");
    let report = s.expect(&["task", "report", &plant], 0);
    assert!(report.starts_with("# Report: Plant\n"), "{report}");
    assert!(report.contains("held a `report.md` of its own"), "{report}");
}

#[test]
fn diff_and_report_say_why_a_task_has_none() {
    let s = Saheeli::new();
    s.write(
        "ok.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    s.write("p.md", &replay_prompt("ok.json", ""));
    let id = s.submit("p.md");
    for (cmd, what) in [("diff", "patch"), ("report", "report")] {
        let err = s.expect_err(&["task", cmd, &id], 2);
        assert!(
            err.contains(&format!(
                "task `{id}` has no {what} yet: it is queued; wait for it"
            )),
            "{err}"
        );
    }
    s.expect(&["task", "cancel", &id], 0);
    let err = s.expect_err(&["task", "report", &id], 2);
    assert!(
        err.contains("has no report: it ended cancelled")
            && err.contains("before a workspace was collected"),
        "{err}"
    );
}
