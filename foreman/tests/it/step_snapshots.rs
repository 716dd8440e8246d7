//! Issue 51, snapshots at steps (`snapshots: every | on_request`) and forks
//! from them: a replay task kept at every step, forked at step 2 into
//! three tasks with different replay scripts, each starting from the
//! step-2 workspace and the first two turns; forks of a running task that
//! leave it alone; `task snapshot` for `on_request`; the refusals; a link
//! planted in the workspace kept as a link. Real containers, real serve.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::human::{Serve, until};
use crate::util::{Saheeli, replay_prompt, require_docker, script};

fn snapshots_of(s: &Saheeli, id: &str) -> PathBuf {
    s.path().join(".saheeli/snapshots").join(id)
}

fn kept(s: &Saheeli, id: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(snapshots_of(s, id))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("step-"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The conversation a task's results hold (its sealed session).
fn conversation(results: &Path, id: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(results.join(format!("servo-{id}-session.json"))).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["messages"].as_array().unwrap().clone()
}

fn assistant_turns(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(Value::to_string)
        .collect()
}

fn results_of(t: &Value) -> PathBuf {
    PathBuf::from(t["results"].as_str().unwrap())
}

/// Two turns the fork's script skips (the conversation has two already),
/// then its own.
fn fork_script(n: u32) -> String {
    script(&[
        ("execute_shell", json!({"command": "true"})),
        ("execute_shell", json!({"command": "true"})),
        (
            "create_file",
            json!({"path": "fork.txt", "content": format!("fork {n}")}),
        ),
        (
            "task_complete",
            json!({"message": format!("fork {n} done")}),
        ),
    ])
}

#[test]
fn a_task_kept_at_every_step_forks_at_step_2_into_three() {
    require_docker();
    let s = Saheeli::new();
    s.write("ws/base.txt", "submitted");
    s.write(
        "parent.json",
        &script(&[
            // Step 1: a file, and a link planted to a host file.
            (
                "execute_shell",
                json!({"command": "echo one > a.txt && ln -s /etc/passwd planted"}),
            ),
            ("create_file", json!({"path": "b.txt", "content": "two"})),
            (
                "create_file",
                json!({"path": "late.txt", "content": "after step 2"}),
            ),
            ("task_complete", json!({"message": "parent done"})),
        ]),
    );
    s.write(
        "p.md",
        &replay_prompt("parent.json", "workspace: ws\nsnapshots: every\n"),
    );
    let parent: Value = s.expect_json(&["run", "p.md", "--json"], 0);
    assert_eq!(parent["state"], "complete", "{parent}");
    let pid = parent["id"].as_str().unwrap().to_string();
    assert_eq!(parent["steps"], 4);
    // Kept before each call: steps 0 to 3 (the last step is the results).
    assert_eq!(
        kept(&s, &pid),
        ["step-000000", "step-000001", "step-000002", "step-000003"]
    );
    let at2 = snapshots_of(&s, &pid).join("step-000002");
    assert_eq!(std::fs::read_to_string(at2.join("b.txt")).unwrap(), "two");
    assert!(!at2.join("late.txt").exists());
    // The planted link is a link in the snapshot, never what it points at.
    let m = std::fs::symlink_metadata(at2.join("planted")).unwrap();
    assert!(m.file_type().is_symlink());
    assert_eq!(
        std::fs::read_link(at2.join("planted")).unwrap(),
        Path::new("/etc/passwd")
    );
    // The foreman's alone: no one else may read them.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(snapshots_of(&s, &pid))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");

    // Three forks at step 2, each with its own script.
    let mut forks = Vec::new();
    for n in 1..=3 {
        s.write(&format!("fork{n}.json"), &fork_script(n));
        let model = format!("replay:fork{n}.json");
        let out = s.expect_json(
            &[
                "task",
                "fork",
                &pid,
                "--at-step",
                "2",
                "--model",
                &model,
                "--note",
                "Go on.",
                "--json",
            ],
            0,
        );
        forks.push(out["ids"][0].as_str().unwrap().to_string());
    }
    s.drain();
    for (i, id) in forks.iter().enumerate() {
        let n = i + 1;
        let t = s.task(id);
        assert_eq!(t["state"], "complete", "{t}");
        assert_eq!(t["forked_from"]["task"], pid.as_str());
        assert_eq!(t["forked_from"]["at_step"], 2);
        let r = results_of(&t);
        // The step-2 workspace: what steps 1 and 2 wrote, not step 3's.
        assert_eq!(std::fs::read_to_string(r.join("a.txt")).unwrap(), "one\n");
        assert_eq!(std::fs::read_to_string(r.join("b.txt")).unwrap(), "two");
        assert_eq!(
            std::fs::read_to_string(r.join("base.txt")).unwrap(),
            "submitted"
        );
        assert!(!r.join("late.txt").exists(), "fork {n}: {}", r.display());
        assert_eq!(
            std::fs::read_to_string(r.join("fork.txt")).unwrap(),
            format!("fork {n}")
        );
        let planted = std::fs::symlink_metadata(r.join("planted")).unwrap();
        assert!(planted.file_type().is_symlink(), "fork {n}");
        // The first two turns are the parent's, then the fork's own.
        let messages = conversation(&r, id);
        let turns = assistant_turns(&messages);
        assert_eq!(turns.len(), 4, "fork {n}: {turns:#?}");
        assert!(
            turns[0].contains("ln -s /etc/passwd planted"),
            "{}",
            turns[0]
        );
        assert!(turns[1].contains("b.txt"), "{}", turns[1]);
        assert!(turns[2].contains("fork.txt"), "{}", turns[2]);
        let all = serde_json::to_string(&messages).unwrap();
        assert!(!all.contains("late.txt"), "fork {n} saw step 3: {all}");
        assert!(all.contains("This conversation is fork 1 of 1 of task"));
        assert!(all.contains("as it was at that step"), "{all}");
        assert!(all.contains("Go on."));
    }
    // The parent is untouched.
    let again = s.task(&pid);
    assert_eq!(again["state"], "complete");
    assert_eq!(again["steps"], 4);
    let r = results_of(&again);
    assert_eq!(
        std::fs::read_to_string(r.join("late.txt")).unwrap(),
        "after step 2"
    );
    assert!(!r.join("fork.txt").exists());
    let tree = s.expect(&["task", "status", &pid, "--tree"], 0);
    assert_eq!(tree.matches("⑂ fork 1/1 at step 2").count(), 3, "{tree}");

    // Refused, saying why: a step with no snapshot, too far.
    let err = s.expect_err(&["task", "fork", &pid, "--at-step", "7"], 2);
    assert!(
        err.contains("has no snapshot at step 7; it has snapshots at steps 0, 1, 2, 3"),
        "{err}"
    );
    // The last step is the results, as before.
    s.expect(&["task", "fork", &pid, "--at-step", "4", "--json"], 0);
    // Ended: nothing more to snapshot.
    let err = s.expect_err(&["task", "snapshot", &pid], 2);
    assert!(err.contains("it takes no more steps"), "{err}");
    // gc removes an ended task's snapshots.
    s.expect(&["gc"], 0);
    assert!(!snapshots_of(&s, &pid).exists());
    let err = s.expect_err(&["task", "fork", &pid, "--at-step", "2"], 2);
    assert!(err.contains("has no snapshot at step 2"), "{err}");
}

#[test]
fn a_task_without_snapshots_is_refused_a_fork_at_an_earlier_step() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "r.json",
        &script(&[
            ("create_file", json!({"path": "a.txt", "content": "a"})),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write("p.md", &replay_prompt("r.json", ""));
    let t: Value = s.expect_json(&["run", "p.md", "--json"], 0);
    let id = t["id"].as_str().unwrap();
    let err = s.expect_err(&["task", "fork", id, "--at-step", "1"], 2);
    assert!(
        err.contains("keeps no snapshots (`snapshots: off`)")
            && err.contains("fork it at its last step (2)"),
        "{err}"
    );
    assert!(!s.path().join(".saheeli/snapshots").join(id).exists());
    // Queued with snapshots off: `task snapshot` says how to ask for them.
    let queued = s.submit("p.md");
    let err = s.expect_err(&["task", "snapshot", &queued], 2);
    assert!(err.contains("`snapshots: on_request`"), "{err}");
}

#[test]
fn a_running_task_is_forked_and_snapshotted_on_request_undisturbed() {
    require_docker();
    let s = Saheeli::new();
    // P: kept at every step; step 3 writes late.txt, then takes a while.
    s.write(
        "running.json",
        &script(&[
            ("create_file", json!({"path": "a.txt", "content": "one"})),
            ("create_file", json!({"path": "b.txt", "content": "two"})),
            (
                "execute_shell",
                json!({"command": "echo late > late.txt && while [ ! -e release ]; do sleep 0.2; done"}),
            ),
            ("task_complete", json!({"message": "parent done"})),
        ]),
    );
    s.write("p.md", &replay_prompt("running.json", "snapshots: every\n"));
    // Q: snapshots on request; waits at step 1 until asked.
    s.write(
        "asked.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "echo q > q.txt && while [ ! -e go ]; do sleep 0.2; done"}),
            ),
            ("create_file", json!({"path": "q2.txt", "content": "two"})),
            ("task_complete", json!({"message": "q done"})),
        ]),
    );
    s.write(
        "q.md",
        &replay_prompt("asked.json", "snapshots: on_request\n"),
    );
    s.write("fork.json", &fork_script(1));
    let pid = s.submit("p.md");
    let qid = s.submit("q.md");
    let serve = Serve::start(&s, &["-j", "3"]);
    let ws_of = |id: &str| s.path().join(".saheeli/workspaces").join(id).join("mnt");
    // P is in step 3 (late.txt written, waiting), Q in step 1.
    wait_until(&serve, "P waits in step 3", || {
        ws_of(&pid).join("late.txt").exists() && kept(&s, &pid).len() == 3
    });
    wait_until(&serve, "Q waits in step 1", || {
        ws_of(&qid).join("q.txt").exists()
    });
    assert_eq!(s.task(&pid)["state"], "running");
    let out = s.expect_json(
        &[
            "task",
            "fork",
            &pid,
            "--at-step",
            "2",
            "--model",
            "replay:fork.json",
            "--json",
        ],
        0,
    );
    let fork = out["ids"][0].as_str().unwrap().to_string();
    let done = until(&s, &fork, &serve, "the fork completes", |t| {
        t["state"] == "complete"
    });
    let r = results_of(&done);
    assert_eq!(std::fs::read_to_string(r.join("b.txt")).unwrap(), "two");
    assert!(!r.join("late.txt").exists());
    assert_eq!(
        std::fs::read_to_string(r.join("fork.txt")).unwrap(),
        "fork 1"
    );
    // The parent ran on meanwhile, undisturbed.
    assert_eq!(s.task(&pid)["state"], "running");

    // Q: asked while at step 1; kept before its next call.
    let asked = s.expect_json(&["task", "snapshot", &qid, "--json"], 0);
    assert_eq!(asked["every_step"], false);
    assert!(kept(&s, &qid).is_empty(), "{:?}", kept(&s, &qid));
    // Release both.
    std::fs::write(ws_of(&qid).join("go"), "").unwrap();
    std::fs::write(ws_of(&pid).join("release"), "").unwrap();
    for id in [&pid, &qid] {
        until(&s, id, &serve, "completes", |t| t["state"] == "complete");
    }
    assert_eq!(kept(&s, &qid), ["step-000001"]);
    let at1 = snapshots_of(&s, &qid).join("step-000001");
    assert!(at1.join("q.txt").exists() && !at1.join("q2.txt").exists());
    let p = s.task(&pid);
    assert_eq!(p["steps"], 4);
    assert_eq!(
        std::fs::read_to_string(results_of(&p).join("late.txt")).unwrap(),
        "late\n"
    );
    drop(serve);
}

/// Waits (up to a minute) until `f` holds; panics with the foreman's log.
fn wait_until(serve: &Serve, what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..600 {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what}: never happened\n--- serve log\n{}", serve.log());
}

#[test]
fn a_fork_at_a_step_reads_the_cached_prefix_on_its_first_call() {
    require_docker();
    let llm = FakeLlm::start_caching(vec![
        Reply::tool("create_file", json!({"path": "a.txt", "content": "one"})),
        Reply::tool("create_file", json!({"path": "b.txt", "content": "two"})),
        Reply::tool("create_file", json!({"path": "late.txt", "content": "3"})),
        Reply::tool("task_complete", json!({"message": "parent done"})),
        Reply::tool("task_complete", json!({"message": "fork done"})),
    ]);
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test-gateway-000")
        .env("OPENAI_BASE_URL", &llm.base_url());
    let context = "Background the model reads first. ".repeat(200);
    s.write(
        "p.md",
        &format!("---\nmodel: gpt-test\nsnapshots: every\n---\nWrite files.\n\n{context}\n"),
    );
    let parent: Value = s.expect_json(&["run", "p.md", "--json"], 0);
    assert_eq!(parent["state"], "complete");
    let pid = parent["id"].as_str().unwrap();
    let out = s.expect_json(&["task", "fork", pid, "--at-step", "2", "--json"], 0);
    let fork = out["ids"][0].as_str().unwrap().to_string();
    s.drain();
    let seen = llm.seen();
    assert_eq!(seen.len(), 5);
    let first = &seen[4];
    let body = first.body["messages"].to_string();
    assert!(
        body.contains("b.txt") && !body.contains("late.txt"),
        "{body}"
    );
    assert_eq!(first.body["prompt_cache_key"], pid);
    let billed = first.billed.as_ref().unwrap();
    assert!(billed.read > 1000, "the fork's first call read {billed:?}");
    eprintln!(
        "a fork at step 2: its first call read {} of {} input tokens from the cache",
        billed.read, billed.total
    );
    let t = s.task(&fork);
    assert_eq!(t["state"], "complete");
    assert_eq!(t["cache_read_tokens"].as_u64(), Some(billed.read));
    // The report says where it came from and what its first call read.
    let report = std::fs::read_to_string(results_of(&t).join("report.md")).unwrap();
    assert!(
        report.contains(&format!(
            "Fork 1 of 1 of task `{pid}` at step 2; its first call read {} of {} input tokens from the prompt cache",
            billed.read, billed.total
        )),
        "{report}"
    );
    let shown = s.expect(&["task", "status", &fork], 0);
    assert!(
        shown.contains(&format!("fork of:   {pid} at step 2 (1 of 1)")),
        "{shown}"
    );
}
