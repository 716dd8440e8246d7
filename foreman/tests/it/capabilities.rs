//! Issue 17: capabilities. Real MCP servers from the Python package index
//! (`mcp-server-git`, `mcp-server-time`, installed by scripts/setup.sh into
//! .mcp/venv) run on the foreman's side; a task sees only the tools of the
//! capabilities it was granted, and their credentials never reach it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::human::{Serve, project, request_text, until};
use crate::util::require_docker;

const SECRET: &str = "capsecret-7f3a9c2e41d8b6";

/// A real MCP server from the project's venv (fails, never skips, when
/// setup has not installed it).
fn server(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.mcp/venv/bin")
        .join(name);
    assert!(
        p.is_file(),
        "`{}` is missing: run `scripts/setup.sh mcp` (scripts/test.sh does)",
        p.display()
    );
    p.canonicalize().unwrap()
}

/// A git repository on the host with one commit.
fn repo(dir: &Path) -> PathBuf {
    let r = dir.join("repo");
    std::fs::create_dir_all(&r).unwrap();
    std::fs::write(r.join("README"), "hello\n").unwrap();
    for args in [
        vec!["init", "-q", "-b", "trunk"],
        vec!["add", "README"],
        vec![
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "first commit",
        ],
    ] {
        assert!(
            Command::new("git")
                .args(&args)
                .current_dir(&r)
                .status()
                .unwrap()
                .success()
        );
    }
    std::fs::write(r.join("untracked.txt"), "x\n").unwrap();
    r
}

fn config(git: &Path, repo: &Path, time: &Path) -> String {
    format!(
        "capabilities:\n  git:\n    command: {}\n    args: [\"--repository\", \"{}\"]\n    env: [GIT_CAP_TOKEN]\n  time:\n    command: {}\n",
        git.display(),
        repo.display(),
        time.display()
    )
}

/// Every file below `dir`, as text (lossy).
fn all_text(dir: &Path) -> String {
    let mut out = String::new();
    for e in walkdir::WalkDir::new(dir).into_iter().flatten() {
        if e.file_type().is_file() {
            out.push_str(&String::from_utf8_lossy(
                &std::fs::read(e.path()).unwrap_or_default(),
            ));
        }
    }
    out
}

#[test]
fn a_granted_capability_answers_for_real_and_its_secret_stays_outside() {
    require_docker();
    let tmp = tempfile::tempdir().unwrap();
    let repo = repo(tmp.path());
    let llm = FakeLlm::start(vec![
        Reply::tool(
            "git__git_status",
            json!({"repo_path": repo.display().to_string()}),
        ),
        Reply::tool(
            "execute_shell",
            json!({"command": "env; cat /proc/1/environ | tr '\\0' '\\n'"}),
        ),
        Reply::tool("task_complete", json!({"message": "read the status"})),
    ]);
    let s = project(
        &llm,
        &config(&server("mcp-server-git"), &repo, &server("mcp-server-time")),
    )
    .env("GIT_CAP_TOKEN", SECRET);
    s.write(
        "p.md",
        "---\nmodel: gpt-test\ncapabilities: [git]\n---\nWhat is the status?\n",
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    let seen = llm.seen();
    let tools = seen[0].body["tools"].to_string();
    assert!(
        tools.contains("git__git_status") && tools.contains("git__git_log"),
        "{tools}"
    );
    assert!(
        !tools.contains("time__"),
        "only granted capabilities are offered: {tools}"
    );
    // The real server's answer (the branch and the untracked file) reached the model.
    let second = request_text(&llm, 1);
    assert!(
        second.contains("trunk") && second.contains("untracked.txt"),
        "{second}"
    );
    // The secret is nowhere the task can see or leaves behind.
    let env_dump = request_text(&llm, 2);
    assert!(
        env_dump.contains("PATH="),
        "the shell printed its environment: {env_dump}"
    );
    assert!(
        !env_dump.contains(SECRET),
        "the secret reached the container"
    );
    let results = PathBuf::from(t["results"].as_str().unwrap());
    assert!(
        !all_text(&results).contains(SECRET),
        "the secret is in the results"
    );
    assert!(!seen.iter().any(|r| r.body.to_string().contains(SECRET)));
    let db = std::fs::read(s.path().join("saheeli.db")).unwrap();
    assert!(
        !String::from_utf8_lossy(&db).contains(SECRET),
        "the secret is in the database"
    );
    // The call is audited, with its duration (servo → gateway → MCP → back).
    let logs = s.expect(&["task", "logs", &id], 0);
    let line = logs
        .lines()
        .find(|l| l.contains("git__git_status"))
        .expect("audited");
    eprintln!("capability call, as audited: {line}");
    assert!(line.contains("→ ok"), "{line}");
}

#[test]
fn calls_to_capabilities_not_granted_are_refused_by_the_gateway() {
    require_docker();
    let tmp = tempfile::tempdir().unwrap();
    let repo = repo(tmp.path());
    // The agent's shell cannot open the gateway socket (issue 23); a
    // direct call from the host, asking for a capability the task was not
    // granted, is refused by the gateway itself.
    let probe = r#"python3 -c "
import socket
socket.socket(socket.AF_UNIX).connect('/run/saheeli/gateway.sock')
"; sleep 6"#;
    let llm = FakeLlm::start(vec![
        Reply::tool(
            "git__git_status",
            json!({"repo_path": repo.display().to_string()}),
        ),
        Reply::tool("execute_shell", json!({"command": probe})),
        Reply::tool("time__get_current_time", json!({"timezone": "UTC"})),
        Reply::tool("task_complete", json!({"message": "done"})),
    ]);
    let s = project(
        &llm,
        &config(&server("mcp-server-git"), &repo, &server("mcp-server-time")),
    );
    s.write(
        "p.md",
        "---\nmodel: gpt-test\ncapabilities: [time]\n---\nTry.\n",
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    assert!(
        crate::lifecycle::wait_for(std::time::Duration::from_secs(60), || llm.seen_count() >= 2),
        "the task never reached its second step"
    );
    let sock = crate::gateway_guard::socket(&s, &id);
    let direct = std::process::Command::new("python3")
        .args([
            "-c",
            r#"
import socket, json, sys
body = json.dumps({'tool': 'git__git_status', 'arguments': '{}'}).encode()
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.sendall(b'POST /saheeli/v1/capability HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n' % len(body) + body)
print(s.recv(4096).decode().split('\r\n')[0])
"#,
        ])
        .arg(&sock)
        .output()
        .unwrap();
    let status_line = String::from_utf8_lossy(&direct.stdout);
    assert!(status_line.contains("403"), "{status_line}");
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    assert!(request_text(&llm, 1).contains("is not one of this task's tools"));
    assert!(
        request_text(&llm, 2).contains("PermissionError"),
        "{}",
        request_text(&llm, 2)
    );
    // The granted one works: a real time came back.
    assert!(
        request_text(&llm, 3).contains("datetime"),
        "{}",
        request_text(&llm, 3)
    );
    let refused: Vec<&Value> = t["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "capability_refused")
        .collect();
    assert_eq!(refused.len(), 1, "{:#}", t["events"]);
}

#[test]
fn a_capability_server_killed_mid_task_is_started_again() {
    require_docker();
    let tmp = tempfile::tempdir().unwrap();
    // A path of its own, so that only this test's server is killed.
    let time = tmp.path().join("mcp-time-under-test");
    std::os::unix::fs::symlink(server("mcp-server-time"), &time).unwrap();
    let call = || Reply::tool("time__get_current_time", json!({"timezone": "UTC"}));
    let llm = FakeLlm::start(vec![
        call(),
        Reply::Slow(Duration::from_secs(3), Box::new(call())),
        call(),
        Reply::tool("task_complete", json!({"message": "done"})),
    ]);
    let cfg = format!("capabilities:\n  time:\n    command: {}\n", time.display());
    let s = project(&llm, &cfg);
    s.write(
        "p.md",
        "---\nmodel: gpt-test\ncapabilities: [time]\n---\nTell the time.\n",
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    assert!(crate::lifecycle::wait_for(Duration::from_secs(60), || llm
        .seen()
        .len()
        >= 2));
    let killed = Command::new("pkill")
        .args(["-9", "-f", &time.display().to_string()])
        .status()
        .unwrap();
    assert!(killed.success(), "the capability server was running");
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    assert_eq!(t["reason"], "complete");
    // The call right after the kill failed as a tool error or was served by
    // a new server; the one after that was served for sure.
    assert!(
        request_text(&llm, 3).contains("datetime"),
        "{}",
        request_text(&llm, 3)
    );
    assert!(serve.log().contains("capability server started"));
}

#[test]
fn tools_narrows_the_built_in_tools() {
    require_docker();
    let llm = FakeLlm::start(vec![
        Reply::tool("execute_shell", json!({"command": "touch nope.txt"})),
        Reply::tool("task_complete", json!({"message": "reviewed"})),
    ]);
    let s = project(&llm, "");
    s.write(
        "p.md",
        "---\nmodel: gpt-test\ntools: [read_file, list_files, task_complete]\n---\nReview.\n",
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "1"]);
    let t = until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    let names: Vec<String> = llm.seen()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    // Exactly the listed built-in tools (and the two that reach a human,
    // which `tools:` cannot remove: ask_user and task_blocked).
    assert_eq!(
        names,
        [
            "read_file",
            "list_files",
            "task_complete",
            "ask_user",
            "task_blocked"
        ]
    );
    assert!(request_text(&llm, 1).contains("is not one of this task's tools"));
    assert!(
        !PathBuf::from(t["results"].as_str().unwrap())
            .join("nope.txt")
            .exists()
    );
    s.write(
        "bad.md",
        "---\nmodel: gpt-test\ntools: [read_file]\ncapabilities: [nope]\n---\nx\n",
    );
    let err = s.expect_err(&["task", "submit", "--prompt", "bad.md"], 2);
    assert!(err.contains("capability `nope` is not configured"), "{err}");
    s.write(
        "bad2.md",
        "---\nmodel: gpt-test\ntools: [read_file]\n---\nx\n",
    );
    let err = s.expect_err(&["task", "submit", "--prompt", "bad2.md"], 2);
    assert!(err.contains("must include task_complete"), "{err}");
}

#[test]
fn the_readme_example_runs_offline_with_a_gate_on_a_capability_tool() {
    require_docker();
    let s = crate::util::Saheeli::with_config(&format!(
        "capabilities:\n  time:\n    command: {}\n",
        server("mcp-server-time").display()
    ));
    let prompts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../prompts");
    for f in ["what-time.md", "what-time.replay.yaml"] {
        s.write(f, &std::fs::read_to_string(prompts.join(f)).unwrap());
    }
    let t = s.expect_json(&["run", "what-time.md", "--json"], 0);
    assert_eq!(t["state"], "complete");
    let logs = s.expect(&["task", "logs", t["id"].as_str().unwrap()], 0);
    assert!(
        logs.contains("time__get_current_time") && logs.contains("→ ok"),
        "{logs}"
    );
    let session = all_text(Path::new(t["results"].as_str().unwrap()));
    assert!(
        session.contains("Asia/Tokyo") && session.contains("datetime"),
        "{session}"
    );
    // Approval gates apply to capability tools by name: without a human, denied.
    let gated = std::fs::read_to_string(prompts.join("what-time.md"))
        .unwrap()
        .replace(
            "capabilities: [time]",
            "capabilities: [time]\napprove: [time__get_current_time]",
        );
    s.write("gated.md", &gated);
    let t = s.expect_json(&["run", "--no-human", "gated.md", "--json"], 0);
    let session = all_text(Path::new(t["results"].as_str().unwrap()));
    assert!(session.contains("denied this call"), "{session}");
}
