//! Issue 52 on real git and real Docker: a task that starts from a
//! repository at a ref (a local bare repository with two commits), its
//! start commit recorded, its changes delivered as a commit on a branch
//! (the same change as its patch, with the trailers), the mirror reused by
//! the next task, a push to a diverged branch refused with the outcome
//! kept, a follow-up on the delivered head pushing a second commit, a
//! hostile `.git` the agent planted never run on the host, and a remote
//! URL refused at submit.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use crate::util::{Saheeli, require_docker, script};

/// Host git for the test's own repositories (never the foreman's).
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "protocol.file.allow=always",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `origin.git` in the project: a bare repository whose `main` has two
/// commits (the second adds `b.txt` and a binary file); returns main's id.
fn origin(s: &Saheeli) -> String {
    let src = s.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    git(&src, &["init", "-q"]);
    std::fs::write(src.join("a.txt"), "hello\n").unwrap();
    git(&src, &["add", "-A"]);
    git(&src, &["commit", "-q", "-m", "first"]);
    std::fs::write(src.join("b.txt"), "second commit\n").unwrap();
    std::fs::write(src.join("logo.bin"), [0u8, 1, 2, 255]).unwrap();
    git(&src, &["add", "-A"]);
    git(&src, &["commit", "-q", "-m", "second"]);
    git(s.path(), &["clone", "-q", "--bare", "src", "origin.git"]);
    git(&s.path().join("origin.git"), &["rev-parse", "main"])
}

/// The agent: records what it sees, changes a text and a binary file, adds one, completes.
fn agent(s: &Saheeli, extra: &str) {
    let command = format!(
        "cat a.txt b.txt > /tmp/seen && ls -a > /tmp/ls && echo fixed >> a.txt && \
         printf '\\001\\002\\003' > logo.bin && echo new > new.txt {extra}; \
         cp /tmp/seen seen.txt"
    );
    s.write(
        "agent.json",
        &script(&[
            ("execute_shell", json!({ "command": command })),
            ("task_complete", json!({ "message": "Fixed the greeting." })),
        ]),
    );
}

fn prompt(s: &Saheeli, name: &str, workspace: &str, deliver: &str) {
    s.write(
        name,
        &format!(
            "---\nmodel: replay:agent.json\ntitle: Fix the greeting\ntimeout: 2m\n\
             workspace: {workspace}\n{deliver}---\nFix the greeting in a.txt.\n"
        ),
    );
}

const DELIVER: &str = "deliver: { branch: \"saheeli/{task_id_short}-{slug}\" }\n";

fn run(s: &Saheeli, prompt: &str) -> Value {
    let out = s.run(&["run", prompt, "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ms(t: &Value, key: &str) -> SystemTime {
    humantime::parse_rfc3339(t[key].as_str().unwrap()).unwrap()
}

/// Submit (the fetch and the copy included) to `running`, from the
/// submit's wall clock and the task's `created_at`/`started_at`.
fn time_to_start(s: &Saheeli, prompt: &str) -> (Duration, Value) {
    let t0 = Instant::now();
    let id = s.submit(prompt);
    let submit = t0.elapsed();
    s.drain();
    let t = s.task(&id);
    let queued = ms(&t, "started_at")
        .duration_since(ms(&t, "created_at"))
        .unwrap();
    (submit + queued, t)
}

fn results(t: &Value) -> PathBuf {
    PathBuf::from(t["results"].as_str().unwrap())
}

#[test]
fn a_task_starts_at_the_ref_and_delivers_a_branch_of_its_patch_with_trailers() {
    require_docker();
    let s = Saheeli::with_config("deliver_author: \"Review Bot <bot@example.com>\"\n");
    let main = origin(&s);
    agent(&s, "");
    prompt(
        &s,
        "p.md",
        "{ git: origin.git, ref: main, depth: 1 }",
        DELIVER,
    );
    let t = run(&s, "p.md");
    assert_eq!(t["state"], "complete", "{t}");
    // It started at main's commit and saw that commit's files, and no `.git`.
    assert_eq!(t["git"]["commit"], main.as_str(), "{t}");
    assert_eq!(t["git"]["ref"], "main");
    let res = results(&t);
    let seen = std::fs::read_to_string(res.join("seen.txt")).unwrap();
    assert_eq!(seen, "hello\nsecond commit\n");
    // The branch: one commit on main, the patch's change, the trailers.
    let id = t["id"].as_str().unwrap();
    let short = &id.replace('-', "")[20..];
    let d = &t["delivery"];
    assert_eq!(
        d["branch"],
        format!("saheeli/{short}-fix-the-greeting"),
        "{t}"
    );
    assert_eq!(d["pushed"], true, "{t}");
    let commit = d["commit"].as_str().unwrap();
    let bare = s.path().join("origin.git");
    let branch = d["branch"].as_str().unwrap();
    assert_eq!(git(&bare, &["rev-parse", branch]), commit);
    assert_eq!(git(&bare, &["rev-parse", &format!("{commit}^")]), main);
    let body = git(&bare, &["log", "-1", "--format=%an <%ae>%n%B", commit]);
    for want in [
        "Review Bot <bot@example.com>".to_string(),
        "Fix the greeting".into(),
        "Fixed the greeting.".into(),
        format!("Saheeli-Task: {id}"),
        "Saheeli-Model: replay:agent.json".into(),
        "Saheeli-Agent: saheeli".into(),
        "Saheeli-Tokens: ".into(),
        "Saheeli-Cost: ".into(),
    ] {
        assert!(body.contains(&want), "{want}: {body}");
    }
    // The commit's tree is main's with the patch applied (binary included).
    let check = s.path().join("check");
    git(s.path(), &["clone", "-q", "origin.git", "check"]);
    let patch = res.join(".saheeli/changes.patch");
    git(&check, &["apply", "--index", patch.to_str().unwrap()]);
    assert_eq!(
        git(&check, &["write-tree"]),
        git(&bare, &["rev-parse", &format!("{commit}^{{tree}}")])
    );
    assert_eq!(
        git(&bare, &["show", &format!("{commit}:logo.bin")]).len(),
        3
    );
    let report = std::fs::read_to_string(res.join("report.md")).unwrap();
    assert!(
        report.contains(&format!("Delivered: branch `{branch}`")),
        "{report}"
    );
    let status = s.expect(&["task", "status", id], 0);
    assert!(
        status.contains(&format!("delivered: {branch} {commit} (pushed)")),
        "{status}"
    );
    assert!(
        status.contains(&format!("git:       origin.git @ main, {main}")),
        "{status}"
    );

    // Time to start: the mirror cold (above), warm, and a directory of the same files.
    let first_fetch = t["git"]["fetch_ms"].as_u64().unwrap();
    assert_eq!(t["git"]["cold"], true, "{t}");
    let (warm, t2) = time_to_start(&s, "p.md");
    assert_eq!(t2["git"]["cold"], false, "{t2}");
    assert_eq!(t2["git"]["commit"], main.as_str());
    let (cold_again, t3) = {
        std::fs::remove_dir_all(s.path().join(".saheeli/git")).unwrap();
        time_to_start(&s, "p.md")
    };
    assert_eq!(t3["git"]["cold"], true, "{t3}");
    git(s.path(), &["clone", "-q", "origin.git", "plain"]);
    std::fs::remove_dir_all(s.path().join("plain/.git")).unwrap();
    prompt(&s, "plain.md", "plain", "");
    let (plain, _) = time_to_start(&s, "plain.md");
    println!(
        "time to start: mirror cold {cold_again:?} (fetch {} ms; first task's fetch {first_fetch} ms), \
         warm {warm:?} (fetch {} ms), plain directory {plain:?}",
        t3["git"]["fetch_ms"], t2["git"]["fetch_ms"]
    );
}

#[test]
fn a_push_to_a_diverged_branch_fails_and_the_outcome_stays_complete() {
    require_docker();
    let s = Saheeli::new();
    origin(&s);
    // `review/fix` exists already, on a line of its own.
    let src = s.path().join("src");
    git(&src, &["checkout", "-q", "--orphan", "other"]);
    std::fs::write(src.join("other.txt"), "x\n").unwrap();
    git(&src, &["add", "-A"]);
    git(&src, &["commit", "-q", "-m", "elsewhere"]);
    git(
        &src,
        &["push", "-q", "../origin.git", "other:refs/heads/review/fix"],
    );
    let before = git(&s.path().join("origin.git"), &["rev-parse", "review/fix"]);
    agent(&s, "");
    let deliver = "deliver: { branch: review/fix, on: [complete, incomplete] }\n";
    prompt(&s, "p.md", "{ git: origin.git, ref: main }", deliver);
    let t = run(&s, "p.md");
    assert_eq!(t["state"], "complete", "{t}");
    let d = &t["delivery"];
    assert_eq!(d["pushed"], false, "{t}");
    assert!(d["commit"].is_string(), "{t}");
    let why = d["error"].as_str().unwrap();
    assert!(
        why.contains("push refused") && why.contains("rejected"),
        "{why}"
    );
    let after = git(&s.path().join("origin.git"), &["rev-parse", "review/fix"]);
    assert_eq!(before, after, "the diverged branch is untouched");
    let events = s.task(t["id"].as_str().unwrap())["events"].to_string();
    assert!(events.contains("delivery_failed"), "{events}");
}

#[test]
fn a_follow_up_starts_on_the_delivered_head_and_pushes_a_second_commit() {
    require_docker();
    let s = Saheeli::new();
    origin(&s);
    agent(&s, "");
    prompt(&s, "p.md", "{ git: origin.git, ref: main }", DELIVER);
    let first = run(&s, "p.md");
    let first_id = first["id"].as_str().unwrap();
    let delivered = first["delivery"]["commit"].as_str().unwrap().to_string();
    let branch = first["delivery"]["branch"].as_str().unwrap().to_string();
    s.write("review.txt", "Please also rename new.txt to added.txt.\n");
    let v = s.expect_json(
        &[
            "task",
            "follow-up",
            first_id,
            "--prompt",
            "review.txt",
            "--json",
        ],
        0,
    );
    let id = v["id"].as_str().unwrap();
    s.drain();
    let t = s.task(id);
    assert_eq!(t["state"], "complete", "{t}");
    assert_eq!(t["follow_up_of"], first_id, "{t}");
    // It started on the delivered head: the first task's change is there.
    assert_eq!(t["git"]["commit"], delivered.as_str(), "{t}");
    let seen = std::fs::read_to_string(results(&t).join("seen.txt")).unwrap();
    assert_eq!(seen, "hello\nfixed\nsecond commit\n");
    // Its prompt: the objective, the diff so far, the feedback.
    let p = std::fs::read_to_string(results(&t).join("prompt.md")).unwrap();
    let at = |needle: &str| p.find(needle).unwrap_or_else(|| panic!("{needle}: {p}"));
    assert!(at("Fix the greeting in a.txt.") < at("+fixed") && at("+fixed") < at("rename new.txt"));
    // A second commit on the same branch, a fast-forward.
    let d = &t["delivery"];
    assert_eq!(d["branch"], branch.as_str(), "{t}");
    assert_eq!(d["pushed"], true, "{t}");
    let bare = s.path().join("origin.git");
    let head = git(&bare, &["rev-parse", &branch]);
    assert_eq!(head, d["commit"].as_str().unwrap());
    assert_eq!(git(&bare, &["rev-parse", &format!("{head}^")]), delivered);
    let body = git(&bare, &["log", "-1", "--format=%B", &head]);
    assert!(
        body.contains(&format!("Saheeli-Follow-Up-Of: {first_id}")),
        "{body}"
    );
    // Not delivered: nothing to follow up, said so.
    prompt(&s, "nodeliver.md", "{ git: origin.git }", "");
    let plain = run(&s, "nodeliver.md");
    let err = s.expect_err(
        &[
            "task",
            "follow-up",
            plain["id"].as_str().unwrap(),
            "--prompt",
            "more",
        ],
        2,
    );
    assert!(err.contains("delivered no branch"), "{err}");
}

#[test]
fn a_git_directory_the_agent_planted_never_runs_on_the_host() {
    require_docker();
    let s = Saheeli::new();
    origin(&s);
    let marker = s.path().join("pwned");
    let m = marker.display();
    // A hook and an fsmonitor command, and the same at the top of the
    // workspace where a careless `git -C results` would find them.
    let plant = format!(
        "&& mkdir -p .git/hooks sub/.git && printf '#!/bin/sh\\ntouch {m}\\n' > .git/hooks/post-commit \
         && chmod +x .git/hooks/post-commit && printf '[core]\\n\\tfsmonitor = touch {m}\\n\\thooksPath = .git/hooks\\n' > .git/config \
         && cp .git/config sub/.git/config && echo 'ref: refs/heads/main' > .git/HEAD"
    );
    agent(&s, &plant);
    prompt(&s, "p.md", "{ git: origin.git, ref: main }", DELIVER);
    let t = run(&s, "p.md");
    assert_eq!(t["state"], "complete", "{t}");
    assert_eq!(t["delivery"]["pushed"], true, "{t}");
    let res = results(&t);
    assert!(
        res.join(".git/config").is_file(),
        "the planted files were collected"
    );
    let patch = std::fs::read_to_string(res.join(".saheeli/changes.patch")).unwrap();
    assert!(!patch.contains(".git/"), "{patch}");
    let bare = s.path().join("origin.git");
    let files = git(
        &bare,
        &[
            "ls-tree",
            "-r",
            "--name-only",
            t["delivery"]["commit"].as_str().unwrap(),
        ],
    );
    assert!(!files.contains(".git/"), "{files}");
    assert!(files.contains("new.txt"), "{files}");
    // A follow-up runs git on the host again (the diff so far).
    s.expect(
        &[
            "task",
            "follow-up",
            t["id"].as_str().unwrap(),
            "--prompt",
            "again",
        ],
        0,
    );
    assert!(
        !marker.exists(),
        "a command of the planted .git ran on the host"
    );
}

#[test]
fn a_remote_url_not_in_egress_setup_is_refused_at_submit() {
    let s = Saheeli::new();
    agent(&s, "");
    for url in ["https://github.com/o/r.git", "git@github.com:o/r.git"] {
        prompt(&s, "p.md", &format!("{{ git: \"{url}\", ref: main }}"), "");
        let err = s.expect_err(&["task", "submit", "--prompt", "p.md"], 2);
        assert!(err.contains("`workspace.git`"), "{err}");
        assert!(
            err.contains("`egress: setup` does not list `github.com`"),
            "{err}"
        );
    }
    prompt(&s, "p.md", "{ git: missing-repo }", "");
    let err = s.expect_err(&["task", "submit", "--prompt", "p.md"], 2);
    assert!(
        err.contains("`workspace.git`") && err.contains("missing-repo"),
        "{err}"
    );
    // A repository on this host is held to a directory's bounds.
    origin(&s);
    s.write(
        "sub/agent.json",
        &std::fs::read_to_string(s.path().join("agent.json")).unwrap(),
    );
    prompt(&s, "sub/p.md", "{ git: ../origin.git }", "");
    let err = s.expect_err(&["task", "submit", "--prompt", "sub/p.md"], 2);
    assert!(err.contains("outside the prompt's directory"), "{err}");
    prompt(&s, "p.md", "ws", DELIVER);
    std::fs::create_dir_all(s.path().join("ws")).unwrap();
    let err = s.expect_err(&["task", "submit", "--prompt", "p.md"], 2);
    assert!(err.contains("`deliver` needs a repository"), "{err}");
    assert!(!s.path().join(".saheeli/git").exists());
}

#[test]
fn post_follow_up_from_a_review_webhook_queues_the_next_task_on_the_branch() {
    use crate::web::{WebServe, post, until_api};
    require_docker();
    let s = Saheeli::new();
    origin(&s);
    agent(&s, "");
    prompt(&s, "p.md", "{ git: origin.git, ref: main }", DELIVER);
    let first = run(&s, "p.md");
    let id = first["id"].as_str().unwrap();
    let short = &id.replace('-', "")[20..];
    let w = WebServe::start(&s, "127.0.0.1:0", &[]);
    let missing = post(&w.addr, &format!("/api/tasks/{id}/follow-up"), json!({}));
    let why = missing.error(400, "bad_input");
    assert!(why.contains("\"prompt\""), "{why}");
    let r = post(
        &w.addr,
        &format!("/api/tasks/{id}/follow-up"),
        json!({ "prompt": "Changes requested: keep a.txt short." }),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let new = r.json()["id"].as_str().unwrap().to_string();
    let t = until_api(&w, &new, "the follow-up delivered", |t| {
        t["delivery"]["pushed"] == true
    });
    assert_eq!(t["follow_up_of"], id);
    assert_eq!(t["delivery"]["branch"], first["delivery"]["branch"]);
    assert!(t["delivery"]["branch"].as_str().unwrap().contains(short));
    assert_eq!(t["git"]["commit"], first["delivery"]["commit"]);
}

#[test]
fn a_retry_starts_again_at_the_same_commit_even_after_main_moved() {
    require_docker();
    let s = Saheeli::new();
    let main = origin(&s);
    agent(&s, "");
    prompt(&s, "p.md", "{ git: origin.git, ref: main }", "");
    let first = run(&s, "p.md");
    // main moves on; the retry is of what the first task was given.
    let src = s.path().join("src");
    std::fs::write(src.join("b.txt"), "moved on\n").unwrap();
    git(&src, &["commit", "-qam", "third"]);
    git(&src, &["push", "-q", "../origin.git", "main"]);
    let v = s.expect_json(
        &["task", "retry", first["id"].as_str().unwrap(), "--json"],
        0,
    );
    s.drain();
    let t = s.task(v["id"].as_str().unwrap());
    assert_eq!(t["state"], "complete", "{t}");
    assert_eq!(t["git"]["commit"], main.as_str(), "{t}");
    let seen = std::fs::read_to_string(results(&t).join("seen.txt")).unwrap();
    assert_eq!(seen, "hello\nsecond commit\n");
}
