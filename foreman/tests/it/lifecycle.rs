//! Timeouts, cancel and retry on real containers.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::util::{Saheeli, leftovers, replay_prompt, require_docker, script};

/// Polls until `f` is true or `limit` passes.
pub fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

fn sleeper(s: &Saheeli, seconds: u32, front_matter: &str) {
    s.write(
        "sleep.json",
        &script(&[
            (
                "create_file",
                json!({"path": "before.txt", "content": "written before the wait"}),
            ),
            (
                "execute_shell",
                json!({"command": format!("sleep {seconds}"), "timeout_s": 600}),
            ),
            ("task_complete", json!({"message": "woke up"})),
        ]),
    );
    s.write("sleep.md", &replay_prompt("sleep.json", front_matter));
}

#[test]
fn timeout_stops_the_servo_and_collects() {
    require_docker();
    let s = Saheeli::new();
    sleeper(&s, 300, "timeout: 4s\n");
    let started = Instant::now();
    let out = s.run(&["run", "sleep.md", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    let t: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(t["state"], "incomplete");
    assert_eq!(t["reason"], "timeout");
    let results = Path::new(t["results"].as_str().unwrap());
    assert!(results.join("before.txt").is_file());
    assert!(!results.join("complete.json").exists());
    assert!(leftovers(t["id"].as_str().unwrap()).is_empty());
}

#[test]
fn cancel_a_running_task() {
    require_docker();
    let s = Saheeli::new();
    sleeper(&s, 300, "");
    let id = s.submit("sleep.md");
    let mut serve = s
        .cmd(&["serve", "--drain"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_for(Duration::from_secs(60), || s.task(&id)["state"]
            == "running"),
        "task never ran"
    );
    // The audit trail is readable live, from the container's log.
    let mut logs = String::new();
    assert!(
        wait_for(Duration::from_secs(30), || {
            logs = s.expect(&["task", "logs", &id], 0);
            logs.contains("start") && logs.contains("create_file")
        }),
        "{logs}"
    );
    let out = s.expect(&["task", "cancel", &id], 0);
    assert!(out.contains("cancel requested"), "{out}");
    let status = serve.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    let t = s.task(&id);
    assert_eq!(t["state"], "cancelled");
    let results = Path::new(t["results"].as_str().unwrap());
    assert!(
        results.join("before.txt").is_file(),
        "collected after cancel"
    );
    // SIGTERM reached the servo, which flushed its trail before exiting.
    let audit = std::fs::read_to_string(results.join(format!("servo-{id}-audit.log"))).unwrap();
    let last: saheeli_protocol::AuditEvent =
        serde_json::from_str(audit.lines().last().unwrap()).unwrap();
    assert!(
        matches!(last, saheeli_protocol::AuditEvent::Finish { ref outcome, .. } if outcome == "terminated"),
        "{last:?}"
    );
    assert!(results.join(format!("servo-{id}-session.json")).is_file());
    assert!(leftovers(&id).is_empty());
    // A finished task cannot be cancelled again.
    s.expect(&["task", "cancel", &id], 2);
}

#[test]
fn retry_makes_a_new_linked_task_from_the_same_prompt() {
    require_docker();
    let s = Saheeli::new();
    s.write("ws/data.txt", "input");
    s.write(
        "s.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "cat data.txt > copy.txt"}),
            ),
            ("task_complete", json!({"message": "copied"})),
        ]),
    );
    s.write("p.md", &replay_prompt("s.json", "workspace: ws\n"));
    let first = s.submit("p.md");
    // Only an ended task can be retried (issue 9: else it would run twice).
    s.expect(&["serve", "--drain"], 0);
    let out = s.expect(&["task", "retry", &first, "--json"], 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let second = v["id"].as_str().unwrap().to_string();
    assert_ne!(first, second);
    s.expect(&["serve", "--drain"], 0);
    let t = s.task(&second);
    assert_eq!(t["retry_of"], first.as_str());
    assert_eq!(t["state"], "complete");
    let results = Path::new(t["results"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(results.join("copy.txt")).unwrap(),
        "input"
    );
}

#[test]
fn the_retry_policy_makes_linked_attempts() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "never.json",
        &script(&[
            ("execute_shell", json!({"command": "true"})),
            ("task_complete", json!({"message": "too late"})),
        ]),
    );
    s.write(
        "p.md",
        // Each attempt its own step (issue 30: budgets span the chain
        // otherwise), and a short backoff.
        &replay_prompt(
            "never.json",
            "max_steps: 1\nretries: 2\nbudget_per_attempt: true\n\
             retry_backoff: { initial: 1s, multiplier: 1, max: 1s }\n",
        ),
    );
    let out = s.run(&["run", "p.md", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(last["attempt"], 3);
    assert_eq!(last["reason"], "max_steps");
    let tasks = s.tasks();
    assert_eq!(tasks.len(), 3);
    // `run` follows the attempts on the event bus: each one's transitions.
    let progress = String::from_utf8_lossy(&out.stderr);
    for t in &tasks {
        let short = t["id"].as_str().unwrap().replace('-', "")[20..].to_string();
        for line in ["starting", "running", "incomplete (max_steps)"] {
            assert!(
                progress.contains(&format!("task {short} {line}")),
                "no `{line}` for attempt {}:\n{progress}",
                t["attempt"]
            );
        }
        let queued = format!("task {short} queued");
        assert_eq!(progress.contains(&queued), t["attempt"] != 1, "{progress}");
    }
    let first = tasks.iter().find(|t| t["attempt"] == 1).unwrap();
    let detail = s.task(first["id"].as_str().unwrap());
    let attempts: Vec<_> = detail["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["attempt"].clone())
        .collect();
    assert_eq!(attempts, vec![1, 2, 3]);
    assert!(
        detail["events"].as_array().unwrap().last().unwrap()["detail"]
            .as_str()
            .unwrap()
            .contains("retried as"),
        "{detail:#}"
    );
    // Each attempt kept its own results.
    for t in &tasks {
        assert!(
            Path::new(t["results"].as_str().unwrap())
                .join(".saheeli/task.json")
                .is_file()
        );
        assert!(leftovers(t["id"].as_str().unwrap()).is_empty());
    }
}

#[test]
fn a_retry_can_succeed_and_run_reports_it() {
    require_docker();
    use crate::fake_llm::{FakeLlm, Reply};
    let llm = FakeLlm::start(vec![
        Reply::tool("execute_shell", json!({"command": "true"})),
        Reply::tool("task_complete", json!({"message": "second time lucky"})),
    ]);
    let s = Saheeli::new().env("OPENAI_BASE_URL", &llm.base_url());
    s.write(
        "p.md",
        "---\nmodel: gpt-test\nmax_steps: 1\nretries: 1\nretry_on: [max_steps]\n\
         budget_per_attempt: true\nretry_backoff: { initial: 1s, max: 1s }\n---\nTry.\n",
    );
    let t = s.expect_json(&["run", "p.md", "--json"], 0);
    assert_eq!(
        (t["state"].as_str(), t["attempt"].as_i64()),
        (Some("complete"), Some(2))
    );
    assert!(t["retry_of"].is_string());

    // Unknown reasons are refused at submit time.
    s.write("q.md", "---\nretry_on: [budget]\n---\nTry.\n");
    let out = s.run(&["task", "submit", "--prompt", "q.md"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("`retry_on` reason `budget` is not retryable")
    );
}

#[test]
fn submit_wait_returns_when_the_task_ends() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "ok.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    s.write("ok.md", &replay_prompt("ok.json", ""));
    // The database exists before two processes race to create it (status
    // no longer creates one; an idle `serve --drain` does).
    s.expect(&["serve", "--drain"], 0);
    let waiter = s
        .cmd(&["task", "submit", "--prompt", "ok.md", "--wait"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_for(Duration::from_secs(30), || s.tasks().len() == 1),
        "never queued"
    );
    s.expect(&["serve", "--drain"], 0);
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_eq!(s.task(&id)["state"], "complete");
    // `--watch` on a finished task prints it once and returns.
    let shown = s.expect(&["task", "status", &id, "--watch"], 0);
    assert!(shown.contains("complete"), "{shown}");
}

/// The image is checked once when serve starts, not at every launch: one
/// removed while serve runs fails the next launch at create, clearly
/// (reason `launch`, the image named, what to do), with no retry.
#[test]
fn an_image_removed_while_serving_fails_the_launch_without_retries() {
    require_docker();
    let tag = format!("saheeli-it-removed:{}", std::process::id());
    let docker = |args: &[&str]| {
        let out = std::process::Command::new("docker")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    docker(&["tag", &crate::util::image(), &tag]);
    let s = Saheeli::new();
    let config = std::fs::read_to_string(s.path().join("config.yaml")).unwrap();
    let config = config.replace(
        &format!("image: {}", crate::util::image()),
        &format!("image: {tag}"),
    );
    std::fs::write(s.path().join("config.yaml"), config).unwrap();
    s.write(
        "ok.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    s.write("ok.md", &replay_prompt("ok.json", ""));
    let first = s.submit("ok.md");
    let mut serve = s.cmd(&["serve"]).stderr(Stdio::null()).spawn().unwrap();
    let ended = |id: &str| {
        let state = s.task(id)["state"].as_str().unwrap_or("").to_string();
        ["complete", "failed", "incomplete"].contains(&state.as_str())
    };
    assert!(
        wait_for(Duration::from_secs(60), || ended(&first)),
        "the first task never ended"
    );
    assert_eq!(s.task(&first)["state"], "complete");
    // Untagging removes the image under this name (the test image keeps it).
    docker(&["rmi", &tag]);
    let second = s.submit("ok.md");
    let ok = wait_for(Duration::from_secs(60), || ended(&second));
    unsafe { libc::kill(serve.id() as i32, libc::SIGINT) };
    let _ = serve.wait();
    assert!(ok, "the task never ended");
    let t = s.task(&second);
    assert_eq!(t["state"], "failed", "{t}");
    assert_eq!(t["reason"], "launch", "{t}");
    let last = t["events"].as_array().unwrap().last().unwrap()["detail"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        last.contains(&tag) && last.contains("build-servo"),
        "{last}"
    );
    let requeued = t["events"].as_array().unwrap().iter().any(|e| {
        e["detail"]
            .as_str()
            .is_some_and(|d| d.contains("queued again"))
    });
    assert!(!requeued, "a missing image was retried: {t}");
    assert!(leftovers(&second).is_empty(), "{:?}", leftovers(&second));
}
