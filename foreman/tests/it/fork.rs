//! Issue 51, `task fork`: new tasks going on from an ended task's
//! conversation and collected workspace, each with a note its model reads
//! first; linked by `forked_from`, shown under the task in `--tree`; the
//! parent untouched. Real containers; the model is the fake LLM.

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::util::{Saheeli, require_docker};
use crate::web::{WebServe, post, until_api};

fn project(llm: &FakeLlm) -> Saheeli {
    let s = Saheeli::new()
        .env("OPENAI_API_KEY", "sk-test-gateway-000")
        .env("OPENAI_BASE_URL", &llm.base_url());
    // Long enough (past 1,024 tokens) for a provider to cache its prefix.
    let context = "Background the model reads first. ".repeat(200);
    s.write(
        "p.md",
        &format!("---\nmodel: gpt-test\n---\nWrite work.txt, then be done.\n\n{context}\n"),
    );
    s
}

fn text_of(messages: &Value) -> String {
    messages.to_string()
}

#[test]
fn forks_go_on_from_the_conversation_and_workspace_with_a_note() {
    require_docker();
    let llm = FakeLlm::start_caching(vec![
        Reply::tool(
            "create_file",
            json!({"path": "work.txt", "content": "from the parent"}),
        ),
        Reply::tool("task_complete", json!({"message": "parent done"})),
        Reply::tool("task_complete", json!({"message": "fork one done"})),
        Reply::tool("task_complete", json!({"message": "fork two done"})),
        Reply::tool("task_complete", json!({"message": "the API's fork done"})),
    ]);
    let s = project(&llm);
    let parent: Value = s.expect_json(&["run", "p.md", "--json"], 0);
    assert_eq!(parent["state"], "complete");
    let pid = parent["id"].as_str().unwrap().to_string();
    let steps = parent["steps"].as_i64().unwrap();

    // Refused: an earlier step (no snapshots kept), too many, a bad id.
    let err = s.expect_err(&["task", "fork", &pid, "--at-step", "1"], 2);
    assert!(
        err.contains("keeps no snapshots (`snapshots: off`), so there is no workspace at step 1"),
        "{err}"
    );
    let err = s.expect_err(&["task", "fork", &pid, "--count", "17"], 2);
    assert!(err.contains("`--count` must be 1 to 16"), "{err}");

    let out = s.expect_json(
        &[
            "task",
            "fork",
            &pid,
            "--count",
            "2",
            "--note",
            "Try another way.",
            "--json",
        ],
        0,
    );
    let ids: Vec<String> = out["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2);
    // One task at a time: the fake answers requests in order.
    s.expect(&["serve", "--drain", "-j", "1"], 0);

    for (i, id) in ids.iter().enumerate() {
        let t = s.task(id);
        assert_eq!(t["state"], "complete", "{t}");
        assert_eq!(t["forked_from"]["task"], pid.as_str());
        assert_eq!(t["forked_from"]["at_step"], steps);
        assert_eq!(t["forked_from"]["index"], i as i64 + 1);
        assert_eq!(t["forked_from"]["count"], 2);
        // The parent's workspace came with it.
        let results = std::path::PathBuf::from(t["results"].as_str().unwrap());
        assert_eq!(
            std::fs::read_to_string(results.join("work.txt")).unwrap(),
            "from the parent"
        );
    }
    // Each fork's first call carries the parent's conversation, then the note.
    let seen = llm.seen();
    assert_eq!(
        seen.len(),
        4,
        "two calls of the parent's, one of each fork's"
    );
    for (n, index) in [(2, 1), (3, 2)] {
        let body = text_of(&seen[n].body["messages"]);
        assert!(body.contains("Write work.txt, then be done."), "{body}");
        assert!(
            body.contains("from the parent"),
            "the parent's tool call: {body}"
        );
        assert!(
            body.contains(&format!("This conversation is fork {index} of 2 of task")),
            "{body}"
        );
        assert!(body.contains("Try another way."), "{body}");
        // It reads the prefix the parent's calls cached: the same key.
        assert_eq!(seen[n].body["prompt_cache_key"], pid.as_str());
        let billed = seen[n].billed.as_ref().unwrap();
        assert!(
            billed.read > 1000,
            "fork {index}'s first call read {billed:?}"
        );
        eprintln!(
            "fork {index}'s first call: {} input tokens, {} read from the cache",
            billed.total, billed.read
        );
    }
    for id in &ids {
        assert!(s.task(id)["cache_read_tokens"].as_i64().unwrap() > 1000);
    }
    // The parent is untouched, and its forks are shown under it.
    let again = s.task(&pid);
    assert_eq!(again["state"], "complete");
    assert_eq!(again["steps"], steps);
    let tree = s.expect(&["task", "status", &pid, "--tree"], 0);
    assert!(tree.contains("⑂ fork 1/2 at step"), "{tree}");
    assert!(tree.contains("⑂ fork 2/2 at step"), "{tree}");
    let shown = s.expect(&["task", "status", &ids[0]], 0);
    assert!(
        shown.contains(&format!("fork of:   {pid} at step {steps} (1 of 2)")),
        "{shown}"
    );

    // The same over HTTP, from a serving foreman.
    let w = WebServe::start(&s, "127.0.0.1:0", &["-j", "1"]);
    let bad = post(
        &w.addr,
        &format!("/api/tasks/{pid}/fork"),
        json!({"count": "two"}),
    );
    assert_eq!(bad.status, 400, "{}", bad.body);
    let r = post(
        &w.addr,
        &format!("/api/tasks/{pid}/fork"),
        json!({"note": "Via the API."}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["forked_from"], pid.as_str());
    let id = v["ids"][0].as_str().unwrap().to_string();
    let done = until_api(&w, &id, "the API's fork completes", |t| {
        t["state"] == "complete"
    });
    assert_eq!(done["forked_from"]["index"], 1);
    assert!(text_of(&llm.seen()[4].body["messages"]).contains("Via the API."));
}

#[test]
fn a_task_that_has_not_ended_is_not_forked() {
    require_docker();
    let llm = FakeLlm::start(vec![]);
    let s = project(&llm);
    let id = s.submit("p.md");
    let err = s.expect_err(&["task", "fork", &id], 2);
    assert!(
        err.contains("is queued and keeps no snapshots (`snapshots: off`)")
            && err.contains("fork it once it ends"),
        "{err}"
    );
}
