//! Issue 51: third-party agents that survive the loss of their container.
//! Claude Code and Codex (the real CLIs in their agent images, against
//! the fake LLM) run their first call; their container is killed with
//! SIGKILL while the second is held (as an OOM kill or a lost node would
//! end it); the retry from the session restores their own session and
//! resumes it with the CLI's own option, so its next request carries the
//! earlier turns. A kept session file removed or corrupted before the
//! retry gives `restore_incomplete` and a fresh start, said in status and
//! the trail; links in the agent's home are never followed and an
//! oversize file is refused.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use crate::agents_cli::{CLAUDE, CODEX, Cli};
use crate::fake_llm::{FakeLlm, Reply};
use crate::lifecycle::wait_for;
use crate::util::leftovers;

/// What the retry's note starts with (the foreman's words to the model).
const NOTE: &str = "[saheeli] Attempt 1 of this task ended";

/// Turn one's command: a file, and what `extra` does in the agent's home.
fn first(extra: &str) -> String {
    format!("{extra}echo one > one.txt && cat one.txt")
}

/// The fake's script: turn one runs `command`; the second call of attempt
/// one is held (the test kills the container meanwhile); the retry's
/// first call, which carries the note, is answered and ends it.
fn script(cli: Cli, command: String) -> impl Fn(&Value) -> Option<Reply> + Send + 'static {
    move |body| {
        let text = body.to_string();
        Some(if text.contains(NOTE) {
            Reply::Text("went on after the kill".into(), (300, 10))
        } else if cli.results(body) == 0 {
            cli.shell(&command, (400, 60))
        } else {
            Reply::Slow(
                Duration::from_secs(600),
                Box::new(Reply::Text("never".into(), (1, 1))),
            )
        })
    }
}

fn container_of(id: &str) -> String {
    let ps = Command::new("docker")
        .args(["ps", "-q", "--filter", &format!("label=saheeli.task={id}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&ps.stdout).trim().to_string()
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One run: the task's first attempt is killed once its second call is
/// held, after `before_kill(container)`; returns the project, the fake,
/// both attempts (first, last) and when the kill was.
fn killed_and_retried(
    cli: Cli,
    command: String,
    before_kill: impl FnOnce(&str),
) -> (crate::util::Saheeli, FakeLlm, Value, Value, Instant) {
    killed_and_retried_then(cli, command, before_kill, "1s", |_| {})
}

/// [`killed_and_retried`], the retry waiting `backoff` and
/// `before_retry(project)` run once it is queued (its workspace packed).
fn killed_and_retried_then(
    cli: Cli,
    command: String,
    before_kill: impl FnOnce(&str),
    backoff: &str,
    before_retry: impl FnOnce(&crate::util::Saheeli),
) -> (crate::util::Saheeli, FakeLlm, Value, Value, Instant) {
    cli.require();
    let llm = FakeLlm::start_matching(vec![], script(cli, command));
    let s = cli.project(&llm);
    s.write(
        "p.md",
        &cli.prompt(&format!(
            "retries: 1\nretry_from: session\n\
             retry_backoff: {{ initial: {backoff}, multiplier: 1, max: {backoff} }}\n"
        )),
    );
    let run = s
        .cmd(&["run", "p.md", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_for(Duration::from_secs(180), || {
            llm.seen().iter().any(|c| cli.results(&c.body) > 0)
        }),
        "{}: the agent made no second call",
        cli.name
    );
    let id = s.tasks()[0]["id"].as_str().unwrap().to_string();
    let cid = container_of(&id);
    assert!(!cid.is_empty(), "no running container for {id}");
    // The session is kept before each call and again while the held one
    // is out (a CLI may write the turn it sends after sending it): the
    // kill comes after that keep, as a lost container's would come later.
    assert!(
        wait_for(Duration::from_secs(30), || {
            let logs = Command::new("docker")
                .args(["logs", &cid])
                .output()
                .unwrap();
            String::from_utf8_lossy(&logs.stderr).contains("its call still out")
                || String::from_utf8_lossy(&logs.stdout).contains("its call still out")
        }),
        "{}: the session was not kept while its call was out",
        cli.name
    );
    before_kill(&cid);
    // SIGKILL to every process in it, as the OOM killer or a lost node.
    docker(&["kill", &cid]);
    let killed = Instant::now();
    assert!(
        wait_for(Duration::from_secs(120), || s.tasks().len() == 2),
        "{}: no retry was queued",
        cli.name
    );
    before_retry(&s);
    let out = run.wait_with_output().unwrap();
    let last: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let first_id = last["retry_of"]
        .as_str()
        .expect("the last attempt is a retry");
    let first = s.task(first_id);
    let last = s.task(last["id"].as_str().unwrap());
    for t in [&first, &last] {
        assert!(leftovers(t["id"].as_str().unwrap()).is_empty());
    }
    (s, llm, first, last, killed)
}

/// The first request of the retry (the one carrying the note).
fn resumed_request(llm: &FakeLlm, killed: Instant) -> crate::fake_llm::Seen {
    llm.seen()
        .into_iter()
        .find(|c| c.at > killed && c.body.to_string().contains(NOTE))
        .expect("the retry made a call with the foreman's note")
}

/// When a task started (its `started_at`), on the test's clock.
fn started(t: &Value, reference: (Instant, SystemTime)) -> Instant {
    let at = humantime::parse_rfc3339(t["started_at"].as_str().unwrap()).unwrap();
    match at.duration_since(reference.1) {
        Ok(d) => reference.0 + d,
        Err(e) => reference.0 - e.duration(),
    }
}

fn resumes_its_own_session(cli: Cli) {
    let reference = (Instant::now(), SystemTime::now());
    let (s, llm, first, last, killed) = killed_and_retried(cli, first(""), |_| {});
    assert_eq!(first["state"], "incomplete", "{first:#}");
    assert_eq!(
        (last["state"].as_str(), last["attempt"].as_i64()),
        (Some("complete"), Some(2)),
        "{last:#}"
    );
    let detail = first["detail"].as_str().unwrap();
    assert!(detail.contains("kept for the retry"), "{detail}");
    // The retry's next request carries the earlier turns: turn one's call
    // with its command, and its result, then the note.
    let resumed = resumed_request(&llm, killed);
    let body = resumed.body.to_string();
    assert!(
        cli.results(&resumed.body) >= 1,
        "no earlier tool result: {body}"
    );
    assert!(
        body.contains("echo one > one.txt"),
        "turn one is not in it: {body}"
    );
    assert!(
        body.contains("Write hello.txt"),
        "the task's prompt is not in it"
    );
    assert!(!body.contains("restore_incomplete"), "{body}");
    let status = s.expect(&["task", "status", last["id"].as_str().unwrap()], 0);
    assert!(!status.contains("restore_incomplete"), "{status}");
    // With the workspace it had.
    let results = Path::new(last["results"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(results.join("one.txt")).unwrap(),
        "one\n"
    );
    // The figure: from each attempt's start to its first model request.
    let fresh = llm.seen()[0].at - started(&first, reference);
    let again = resumed.at - started(&last, reference);
    eprintln!(
        "FIGURE {}: start to first request: fresh {:?}, resumed {:?}",
        cli.name, fresh, again
    );
}

#[test]
fn claude_code_killed_after_its_first_call_resumes_its_session() {
    resumes_its_own_session(CLAUDE);
}

#[test]
fn codex_killed_after_its_first_call_resumes_its_session() {
    resumes_its_own_session(CODEX);
}

/// The kept session damaged by `damage` (run as the agent's uid in the container
/// before the kill): the retry says `restore_incomplete` and starts over.
fn a_damaged_session_starts_over(cli: Cli, damage: &str) {
    let damage = damage.to_string();
    let (s, llm, first, last, killed) = killed_and_retried(cli, first(""), |cid| {
        docker(&["exec", "-u", "1000", cid, "sh", "-c", &damage]);
    });
    assert_eq!(last["state"], "complete", "{last:#}");
    let detail = first["detail"].as_str().unwrap();
    assert!(detail.contains("restore_incomplete"), "{detail}");
    let id = last["id"].as_str().unwrap();
    let status = s.expect(&["task", "status", id], 0);
    assert!(
        status.contains("restore_incomplete"),
        "not in status: {status}"
    );
    let trail = s.expect(&["task", "status", id, "--json"], 0);
    assert!(
        trail.contains("restore_incomplete"),
        "not in the trail: {trail}"
    );
    // A fresh conversation, told so: no earlier turn, the task's prompt.
    let resumed = resumed_request(&llm, killed);
    let body = resumed.body.to_string();
    assert_eq!(cli.results(&resumed.body), 0, "{body}");
    assert!(!body.contains("echo one > one.txt"), "{body}");
    assert!(body.contains("starts over"), "{body}");
    assert!(body.contains("Write hello.txt"), "{body}");
}

#[test]
fn claude_code_with_its_session_file_removed_starts_over() {
    a_damaged_session_starts_over(
        CLAUDE,
        "rm /workspace/.saheeli/agent-session/home/.claude/projects/-workspace/*.jsonl",
    );
}

#[test]
fn codex_with_its_session_file_corrupted_starts_over() {
    a_damaged_session_starts_over(
        CODEX,
        "for f in $(find /workspace/.saheeli/agent-session/home -name 'rollout-*'); do \
         echo '{not json' > \"$f\"; done",
    );
}

/// Hostile: the agent plants links and an oversize file in its session
/// directory. Neither is kept nor restored; the session still resumes.
#[test]
fn links_and_oversize_files_in_the_agents_home_are_not_kept() {
    let plant = "d=$HOME/.claude/projects/-workspace; mkdir -p $d; \
                 ln -s /etc/passwd $d/passwd.jsonl; ln -s /workspace $d/ws; \
                 truncate -s 100M $d/big.jsonl; ";
    let (_s, llm, first, last, killed) = killed_and_retried(CLAUDE, first(plant), |_| {});
    assert_eq!(last["state"], "complete", "{last:#}");
    let kept = Path::new(first["results"].as_str().unwrap())
        .join(".saheeli/agent-session/home/.claude/projects/-workspace");
    assert!(kept.is_dir(), "nothing kept at {}", kept.display());
    for name in ["passwd.jsonl", "ws", "big.jsonl"] {
        assert!(
            kept.join(name).symlink_metadata().is_err(),
            "`{name}` was kept"
        );
    }
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(kept.join("../../../../session.json")).unwrap())
            .unwrap();
    let refused = manifest["refused"].to_string();
    assert!(refused.contains("big.jsonl"), "{manifest}");
    // The session itself was resumed.
    let resumed = resumed_request(&llm, killed);
    assert!(CLAUDE.results(&resumed.body) >= 1);
    assert!(!resumed.body.to_string().contains("root:x:0:0"));
}

/// The foreman's check of the kept session passes, but the servo's
/// restore in the retry's container fails (here: the session file taken
/// out of the packed workspace after the check, before the retry starts).
/// The agent starts over, told so, and the retry's trail says
/// `restore_incomplete` by the servo with its reason: not only a line in
/// the container's log.
#[test]
fn a_restore_that_fails_in_the_servo_reaches_the_retrys_trail() {
    let (s, llm, first, last, killed) = killed_and_retried_then(
        CLAUDE,
        first(""),
        |_| {},
        "6s",
        |s| {
            let retry = s.tasks().into_iter().find(|t| t["retry_of"].is_string());
            let retry = retry.expect("the retry")["id"]
                .as_str()
                .unwrap()
                .to_string();
            let tar = s.path().join(format!(".saheeli/inputs/{retry}.resume.tar"));
            let list = Command::new("tar").arg("-tf").arg(&tar).output().unwrap();
            assert!(list.status.success(), "{}", tar.display());
            let sessions: Vec<String> = String::from_utf8_lossy(&list.stdout)
                .lines()
                .filter(|l| l.contains("agent-session/home/") && l.ends_with(".jsonl"))
                .map(String::from)
                .collect();
            assert!(!sessions.is_empty(), "no session file in the packed retry");
            let deleted = Command::new("tar")
                .arg("--delete")
                .arg("-f")
                .arg(&tar)
                .args(&sessions)
                .status()
                .unwrap();
            assert!(deleted.success());
        },
    );
    assert_eq!(last["state"], "complete", "{last:#}");
    // The foreman's check passed: it brought the session along.
    let detail = first["detail"].as_str().unwrap();
    assert!(detail.contains("kept for the retry"), "{detail}");
    let said: Vec<&Value> = last["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "restore_incomplete")
        .collect();
    assert_eq!(said.len(), 1, "not on the retry's trail: {last:#}");
    assert_eq!(said[0]["by"], "servo", "{said:?}");
    let why = said[0]["detail"].as_str().unwrap();
    assert!(
        why.contains("the servo could not restore its agent's own session")
            && why.contains(".jsonl"),
        "{why}"
    );
    // A fresh conversation, told so.
    let resumed = resumed_request(&llm, killed);
    let body = resumed.body.to_string();
    assert_eq!(CLAUDE.results(&resumed.body), 0, "{body}");
    assert!(body.contains("restore_incomplete"), "{body}");
    assert!(body.contains("Write hello.txt"), "{body}");
    let status = s.expect(&["task", "status", last["id"].as_str().unwrap()], 0);
    assert!(status.contains("restore_incomplete"), "{status}");
}
