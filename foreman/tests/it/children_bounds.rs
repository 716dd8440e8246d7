//! Issue 47 (cases N18, N19): what a parent's model may set on a child.
//! `spawn_task`'s `params` fill only the template's declared parameters
//! (a setting is refused, `spawn_refused` naming the key); the budget
//! carved for a child covers its whole chain of retries (a child's
//! template asking `budget_per_attempt: true` gets what the chain has
//! left), and `--tree` shows what every attempt spent; a child never
//! names a host directory as its workspace, and `task retry` (CLI and
//! `POST /api/tasks/ID/retry`) copies no directory that was not checked.
//! Real Docker, a real `saheeli serve`, replay scripts and the fake LLM.

use serde_json::{Value, json};

use crate::children::{children, events_of};
use crate::fake_llm::{FakeLlm, Reply};
use crate::human::{Serve, project, until};
use crate::util::{Saheeli, require_docker, script};

fn ended(t: &Value) -> bool {
    ["complete", "incomplete", "failed", "cancelled"].contains(&t["state"].as_str().unwrap_or(""))
}

#[test]
fn spawn_params_set_only_the_templates_parameters() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "w.json",
        &script(&[("task_complete", json!({"message": "worked"}))]),
    );
    s.write(
        "tpl.md",
        "---\nmodel: replay:w.json\nparameters:\n  - { name: n, required: true }\n---\nWork {{ n }}.\n",
    );
    let keys = [
        ("budget_per_attempt", "true"),
        ("retries", "2"),
        ("retry_from", "session"),
        ("timeout", "1h"),
        ("verify", "true"),
        ("workspace", "/tmp"),
        ("max_tokens", "15000"),
    ];
    let mut turns: Vec<(&str, Value)> = keys
        .iter()
        .map(|(k, v)| {
            (
                "spawn_task",
                json!({"template": "tpl.md", "params": {"n": "a", *k: v}}),
            )
        })
        .collect();
    turns.push((
        "spawn_task",
        json!({"template": "tpl.md", "params": {"n": "a"}}),
    ));
    turns.push(("wait_tasks", json!({})));
    turns.push(("task_complete", json!({"message": "done"})));
    s.write("parent.json", &script(&turns));
    s.write(
        "p.md",
        "---\nmodel: replay:parent.json\nmax_tokens: 20000\ndelegate: { max_children: 8 }\n---\nGo.\n",
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "2"]);
    let t = until(&s, &id, &serve, "ended", ended);
    assert_eq!(t["state"], "complete", "{t:#}");
    let refused = events_of(&t, "spawn_refused");
    assert_eq!(refused.len(), keys.len(), "{refused:#?}");
    for ((key, _), why) in keys.iter().zip(&refused) {
        assert!(
            why.contains(&format!(
                "`params.{key}`: template `tpl.md` declares no parameter `{key}`; its parameters are n"
            )),
            "{why}"
        );
    }
    assert_eq!(children(&t).len(), 1, "{t:#}");
}

/// N18: the child's own template asks for a budget per attempt and two
/// retries; every call is billed 6,000 tokens and asks for a command that
/// outlives the child's `timeout` (retried by default).
#[test]
fn a_childs_retries_stay_within_its_carve_and_the_tree_counts_them() {
    require_docker();
    let llm = FakeLlm::start_matching(vec![], |_| {
        Some(Reply::Tools(
            vec![(
                "execute_shell".into(),
                json!({"command": "sleep 60", "timeout_s": 120}),
            )],
            (5000, 1000),
        ))
    });
    let s = project(&llm, "");
    s.write(
        "childA.md",
        "---\nmodel: gpt-test\ntimeout: 4s\nretries: 2\nbudget_per_attempt: true\n\
         retry_backoff: { initial: 1s, multiplier: 1, max: 1s }\n---\nWork.\n",
    );
    s.write(
        "parent.json",
        &script(&[
            (
                "spawn_task",
                json!({"template": "childA.md", "max_tokens": 8000}),
            ),
            ("wait_tasks", json!({})),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:parent.json\nmax_tokens: 20000\ndelegate: { max_children: 1 }\n---\nGo.\n",
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "2"]);
    let t = until(&s, &id, &serve, "ended", ended);
    let db = rusqlite::Connection::open(s.path().join("saheeli.db")).unwrap();
    let (attempts, spent): (i64, i64) = db
        .query_row(
            "SELECT COUNT(*), SUM(input_tokens + output_tokens) FROM tasks WHERE id != ?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    // Each attempt but the first got what the chain had left of the 8,000
    // carved, not 8,000 again (three attempts spent 18,000 before).
    assert!(attempts <= 2, "{attempts} attempts spent {spent}: {t:#}");
    assert!(spent <= 20_000, "{spent}");
    // The tree and the child's line count every attempt.
    assert_eq!(t["tree"]["tokens"], json!(spent), "{t:#}");
    assert_eq!(children(&t)[0]["tokens"], json!(spent), "{t:#}");
    let tree = s.expect(&["task", "status", &id, "--tree"], 0);
    assert!(tree.contains(&format!(", {spent} tokens,")), "{tree}");
    let results = std::path::PathBuf::from(t["results"].as_str().unwrap());
    let report = std::fs::read_to_string(results.join("report.md")).unwrap();
    assert!(report.contains(&format!(" | {spent} | $")), "{report}");
    // A retry by hand goes on from what the chain used: the carve again
    // is not given.
    let child = children(&t)[0]["id"].as_str().unwrap().to_string();
    let out = s.expect(&["task", "retry", &child, "--json"], 0);
    let again: Value = serde_json::from_str(&out).unwrap();
    let used: i64 = db
        .query_row(
            "SELECT json_extract(spec, '$.chain.used.tokens') FROM tasks WHERE id = ?1",
            [again["id"].as_str().unwrap()],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(used, spent);
}

/// N19: a template that names its workspace from a parameter, spawned
/// with a host directory holding a secret; the child then retried by
/// hand, from the CLI and from the HTTP API.
#[test]
fn a_child_never_copies_a_host_directory_not_even_on_retry() {
    require_docker();
    let s = Saheeli::new();
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("secret.txt"), "TOP-SECRET-HOSTDIR-4242\n").unwrap();
    s.write(
        "wb.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "cat secret.txt > got.txt 2>&1; echo read >> got.txt"}),
            ),
            ("task_complete", json!({"message": "read"})),
        ]),
    );
    s.write(
        "tb.md",
        "---\nmodel: replay:wb.json\nparameters:\n  - { name: dir, required: true }\n\
         workspace: \"{{ dir }}\"\n---\nRead.\n",
    );
    s.write(
        "parent.json",
        &script(&[
            (
                "spawn_task",
                json!({"template": "tb.md", "params": {"dir": host.path()}}),
            ),
            ("wait_tasks", json!({})),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:parent.json\ndelegate: { max_children: 1 }\n---\nGo.\n",
    );
    let id = s.submit("p.md");
    let w = crate::web::WebServe::start(&s, "127.0.0.1:0", &["-j", "2"]);
    let t = until(&s, &id, &w.serve, "ended", ended);
    assert_eq!(t["state"], "complete", "{t:#}");
    let child = children(&t)[0]["id"].as_str().unwrap().to_string();
    let read = |task: &str| {
        let t = s.task(task);
        let results = std::path::PathBuf::from(t["results"].as_str().unwrap());
        std::fs::read_to_string(results.join("got.txt")).unwrap_or_default()
    };
    assert!(!read(&child).contains("TOP-SECRET"));
    let db = rusqlite::Connection::open(s.path().join("saheeli.db")).unwrap();
    let named: Option<String> = db
        .query_row(
            "SELECT json_extract(spec, '$.workspace') FROM tasks WHERE id = ?1",
            [&child],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(named, None, "the child names no host directory");

    let out = s.expect(&["task", "retry", &child, "--json"], 0);
    let by_cli: Value = serde_json::from_str(&out).unwrap();
    let by_cli = by_cli["id"].as_str().unwrap().to_string();
    assert!(!out.contains("copied"), "{out}");
    let r = crate::web::post(&w.addr, &format!("/api/tasks/{child}/retry"), json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    let by_api: Value = serde_json::from_str(&r.body).unwrap();
    let by_api = by_api["id"].as_str().unwrap().to_string();
    for retried in [&by_cli, &by_api] {
        let t = until(&s, retried, &w.serve, "retry ended", ended);
        assert_eq!(t["state"], "complete", "{t:#}");
        let got = read(retried);
        assert!(got.contains("read"), "{got}");
        assert!(!got.contains("TOP-SECRET"), "{got}");
    }

    // A task queued before the fix, whose spec names a host directory out
    // of its prompt's: a retry refuses to copy it.
    db.execute(
        "UPDATE tasks SET spec = json_set(spec, '$.workspace', ?2) WHERE id = ?1",
        rusqlite::params![child, host.path().to_str().unwrap()],
    )
    .unwrap();
    let err = s.expect_err(&["task", "retry", &child], 2);
    assert!(err.contains("is outside the prompt's directory"), "{err}");
    let r = crate::web::post(&w.addr, &format!("/api/tasks/{child}/retry"), json!({}));
    assert!(r.status >= 400, "{} {}", r.status, r.body);
    assert!(
        r.body.contains("is outside the prompt's directory"),
        "{}",
        r.body
    );
}

/// Issue 52 (from George): `breakpoint: on_subtask` pauses the parent
/// each time its model spawns a child (the child queued, and run while the
/// parent waits); `task resume` goes on; `task breakpoint ID --on-subtask
/// --clear` stops it, so the next spawn does not pause.
#[test]
fn on_subtask_pauses_the_parent_at_a_spawn_until_resumed_or_cleared() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "w.json",
        &script(&[("task_complete", json!({"message": "worked"}))]),
    );
    s.write("w.md", "---\nmodel: replay:w.json\n---\nWork.\n");
    s.write(
        "parent.json",
        &script(&[
            ("spawn_task", json!({"template": "w.md"})),
            ("spawn_task", json!({"template": "w.md"})),
            ("wait_tasks", json!({})),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:parent.json\nbreakpoint: on_subtask\npark_after: 60s\n\
         delegate: { max_children: 4 }\n---\nFan out.\n",
    );
    // Without delegate the key is refused, naming it.
    s.write(
        "bad.md",
        "---\nmodel: replay:w.json\nbreakpoint: on_subtask\n---\nGo.\n",
    );
    let err = s.expect_err(&["task", "submit", "--prompt", "bad.md"], 2);
    assert!(
        err.contains("`breakpoint: on_subtask`") && err.contains("delegate"),
        "{err}"
    );

    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "2"]);
    let t = until(&s, &id, &serve, "paused at the first spawn", |t| {
        t["state"] == "paused"
    });
    let hits = events_of(&t, "breakpoint");
    assert_eq!(hits.len(), 1, "{t:#}");
    assert!(
        hits[0].starts_with("breakpoint on_subtask: spawned child "),
        "{hits:?}"
    );
    assert_eq!(children(&t).len(), 1, "the child is queued: {t:#}");
    // Cleared by a person, then resumed: the second spawn does not pause.
    let out = s.expect(&["task", "breakpoint", &id, "--on-subtask", "--clear"], 0);
    assert!(out.contains("breakpoint on_subtask of"), "{out}");
    s.expect(&["task", "resume", &id], 0);
    let t = until(&s, &id, &serve, "ended", ended);
    assert_eq!(t["state"], "complete", "{t:#}");
    assert_eq!(events_of(&t, "breakpoint").len(), 1, "{t:#}");
    assert_eq!(children(&t).len(), 2, "{t:#}");
}
