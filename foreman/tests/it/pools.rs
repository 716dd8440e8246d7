//! Issue 52, agent types and pools: a task's `agent_type` gives it its
//! type's defaults, and `pools:` cap the tasks of an agent type, a model
//! or a provider key beside `concurrency`, the tightest winning, without a
//! full pool holding up another's tasks. Real Docker and SQLite, the fake
//! LLM answering every call slowly so tasks overlap.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use crate::fake_llm::{FakeLlm, Reply};
use crate::metrics::{get, parse};
use crate::util::{Saheeli, assert_nothing_queued, leftovers, require_docker};

const TYPES_AND_POOLS: &str = "\
agent_types:
  a: { model: gpt-a, max_steps: 5, tools: [read_file, task_complete] }
pools:
  - { agent_type: a, max: 1 }
  - { model: m, max: 2 }
";

/// When each task held a slot: from its claim (`starting`) to its end,
/// as the store's event trail recorded them (ms).
pub fn slots(s: &Saheeli) -> BTreeMap<String, (i64, i64)> {
    let db = rusqlite::Connection::open(s.path().join("saheeli.db")).unwrap();
    let mut stmt = db
        .prepare(
            "SELECT task_id,
                    (SELECT MIN(at) FROM events e WHERE e.task_id = t.task_id AND to_state = 'starting'),
                    (SELECT MAX(at) FROM events e WHERE e.task_id = t.task_id
                       AND to_state IN ('complete', 'incomplete', 'failed', 'cancelled'))
             FROM (SELECT DISTINCT task_id FROM events) t",
        )
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// The most of `ids`' slots held at one moment (an end at the same
/// millisecond as a start frees its slot first: the claim counted it so).
pub fn most_at_once(slots: &BTreeMap<String, (i64, i64)>, ids: &[&String]) -> usize {
    let mut edges: Vec<(i64, i32)> = ids
        .iter()
        .flat_map(|id| {
            let (start, end) = slots[*id];
            [(start, 1), (end, -1)]
        })
        .collect();
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}

#[test]
fn issue_52_pools_cap_their_tasks_while_other_work_proceeds() {
    require_docker();
    // Every call takes 2 s, then completes: a task holds its slot a while.
    let llm = FakeLlm::start_matching(vec![], |_| {
        Some(Reply::Slow(
            Duration::from_secs(2),
            Box::new(Reply::tool("task_complete", json!({"message": "done"}))),
        ))
    });
    let s = Saheeli::with_config(TYPES_AND_POOLS)
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", &llm.base_url());
    s.write("a.md", "---\nagent_type: a\n---\nReview the change.\n");
    s.write("plain.md", "---\nmodel: gpt-a\n---\nReview the change.\n");
    s.write("m.md", "---\nmodel: m\n---\nDo the thing.\n");
    s.write("free.md", "---\nmodel: free\n---\nDo another thing.\n");

    // In the queue's order: the type's tasks first (one by `--agent-type`),
    // then the model's, then two in no pool.
    let mut a = vec![s.submit("a.md"), s.submit("a.md")];
    let out = s.expect(
        &[
            "task",
            "submit",
            "--prompt",
            "plain.md",
            "--agent-type",
            "a",
            "--json",
        ],
        0,
    );
    a.push(
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string(),
    );
    let m: Vec<String> = (0..4).map(|_| s.submit("m.md")).collect();
    let free: Vec<String> = (0..2).map(|_| s.submit("free.md")).collect();

    // The type is recorded, its values under the prompt's own.
    let t = s.task(&a[0]);
    assert_eq!(
        (t["agent_type"].as_str(), t["model"].as_str()),
        (Some("a"), Some("gpt-a")),
        "{t:#}"
    );
    assert_eq!(s.task(&m[0])["agent_type"], serde_json::Value::Null);

    // Before serving: every pool is in the metrics and the footer, its
    // tasks queued.
    let metrics = parse(&s.expect(&["metrics"], 0));
    for (pool, max, queued) in [("agent_type=a", 1.0, 3.0), ("model=m", 2.0, 4.0)] {
        let at = [("pool", pool)];
        assert_eq!(get(&metrics, "saheeli_pool_max", &at), max, "{pool}");
        assert_eq!(get(&metrics, "saheeli_pool_queued", &at), queued, "{pool}");
        assert_eq!(get(&metrics, "saheeli_pool_running", &at), 0.0, "{pool}");
    }
    let footer = s.expect(&["task", "status"], 0);
    assert!(
        footer.contains("pools: agent_type=a 0/1 (3 queued), model=m 0/2 (4 queued)"),
        "{footer}"
    );

    let out = s.run(&["serve", "--drain", "-j", "4"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for id in a.iter().chain(&m).chain(&free) {
        let t = s.task(id);
        assert_eq!(t["state"], "complete", "{t:#}");
        assert!(leftovers(id).is_empty(), "{id}: {:?}", leftovers(id));
    }

    // What the store saw, not what the test slept: neither pool ever held
    // more than its cap, nor all tasks more than `concurrency`.
    let slots = slots(&s);
    let (a_ids, m_ids): (Vec<&String>, Vec<&String>) = (a.iter().collect(), m.iter().collect());
    let all: Vec<&String> = a.iter().chain(&m).chain(&free).collect();
    assert_eq!(most_at_once(&slots, &a_ids), 1, "{slots:#?}");
    assert_eq!(
        most_at_once(&slots, &m_ids),
        2,
        "the model's pool filled: {slots:#?}"
    );
    let most = most_at_once(&slots, &all);
    let span = |ids: &[&String]| {
        let first = ids.iter().map(|i| slots[*i].0).min().unwrap();
        let last = ids.iter().map(|i| slots[*i].1).max().unwrap();
        last - first
    };
    eprintln!(
        "at once: type a {}, model m {}, all {most}; type a's 3 tasks over {} ms, all 9 over {} ms",
        most_at_once(&slots, &a_ids),
        most_at_once(&slots, &m_ids),
        span(&a_ids),
        span(&all)
    );
    assert!((3..=4).contains(&most), "{most} at once: {slots:#?}");
    // No head-of-line blocking: the tasks behind the type's waiting ones
    // started while those still waited.
    let start = |id: &String| slots[id].0;
    assert!(start(&m[0]) < start(&a[1]), "{slots:#?}");
    assert!(start(&free[0]) < start(&a[1]), "{slots:#?}");
    assert!(start(&free[1]) < start(&a[2]), "{slots:#?}");
    // A full pool's tasks ran in their order.
    assert!(start(&a[0]) < start(&a[1]) && start(&a[1]) < start(&a[2]));

    // After: nothing running or queued in either pool.
    let metrics = parse(&s.expect(&["metrics"], 0));
    for pool in ["agent_type=a", "model=m"] {
        let at = [("pool", pool)];
        assert_eq!(get(&metrics, "saheeli_pool_queued", &at), 0.0, "{pool}");
        assert_eq!(get(&metrics, "saheeli_pool_running", &at), 0.0, "{pool}");
        assert_eq!(
            get(&metrics, "saheeli_pool_max", &at),
            if pool == "model=m" { 2.0 } else { 1.0 }
        );
    }
    // The type's tools were what its tasks offered the model.
    let offered: Vec<Vec<String>> = llm
        .seen()
        .iter()
        .filter(|r| r.body["model"] == "gpt-a")
        .map(|r| {
            r.body["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect()
        })
        .collect();
    assert_eq!(offered.len(), 3);
    for tools in offered {
        // The type's built-in tools, beside the human ones (always offered).
        let builtin: Vec<&String> = tools
            .iter()
            .filter(|t| !["ask_user", "task_blocked"].contains(&t.as_str()))
            .collect();
        assert_eq!(builtin, ["read_file", "task_complete"], "{tools:?}");
    }
}

#[test]
fn issue_52_an_unknown_agent_type_is_refused_naming_the_known_ones() {
    let s = Saheeli::with_config(TYPES_AND_POOLS).env("OPENAI_API_KEY", "sk-test");
    s.write("p.md", "---\nmodel: replay:x.json\n---\nDo it.\n");
    s.write("x.json", r#"{"turns": []}"#);
    let err = s.expect_err(
        &[
            "task",
            "submit",
            "--prompt",
            "p.md",
            "--agent-type",
            "reviewer",
        ],
        2,
    );
    assert!(
        err.contains("`agent_type` `reviewer` is not defined")
            && err.contains("config.yaml")
            && err.contains("(known: a)"),
        "{err}"
    );
    s.write(
        "q.md",
        "---\nagent_type: coder\nmodel: replay:x.json\n---\nDo it.\n",
    );
    let err = s.expect_err(&["run", "q.md"], 2);
    assert!(
        err.contains("q.md: `agent_type` `coder` is not defined"),
        "{err}"
    );
    assert_nothing_queued(&s);

    // A type's values show where they came from in `--dry-run`.
    s.write("r.md", "---\nagent_type: a\nmax_steps: 3\n---\nDo it.\n");
    let v = s.expect_json(
        &["task", "submit", "--prompt", "r.md", "--dry-run", "--json"],
        0,
    );
    assert_eq!(v["settings"]["model"], "gpt-a", "{v:#}");
    assert_eq!(v["sources"]["model"], "agent_type");
    assert_eq!(v["sources"]["tools"], "agent_type");
    assert_eq!(
        (
            v["settings"]["max_steps"].as_u64(),
            v["sources"]["max_steps"].as_str()
        ),
        (Some(3), Some("front-matter"))
    );
    assert_eq!(v["sources"]["agent_type"], "front-matter");
    assert_eq!(v["task"]["provider_key"], "OPENAI_API_KEY");
}

#[test]
fn issue_52_a_bad_pool_is_refused_naming_the_entry() {
    let s = Saheeli::new();
    for (yaml, want) in [
        (
            "pools:\n  - { model: m, max: 2 }\n  - { model: n, max: 0 }\n",
            "`pools[1]` (model=n): `max` must be at least 1",
        ),
        (
            "pools:\n  - { max: 3 }\n",
            "`pools[0]` must select by exactly one of `agent_type`, `model` or `key`",
        ),
        (
            "pools:\n  - { agent_type: reviewer, max: 3 }\n",
            "`pools[0]`: agent type `reviewer` is not under `agent_types` (none is defined)",
        ),
        (
            "pools:\n  - { model: m, maximum: 3 }\n",
            "unknown field `maximum`",
        ),
    ] {
        s.write("bad.yaml", yaml);
        let err = s.expect_err(&["--config", "bad.yaml", "task", "status"], 2);
        assert!(
            err.contains("bad.yaml") && err.contains(want),
            "{yaml}: {err}"
        );
    }
}

/// Named approvers (issue 52): a step's `approve: { from, message }` is
/// decided by one of those named only (the CLI's `--as`), who is recorded;
/// the message is shown where the approval is asked.
#[test]
fn issue_52_only_a_named_approver_decides_a_step() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "ship.json",
        &crate::util::script(&[
            ("step_start", json!({"name": "ship"})),
            ("step_done", json!({"name": "ship", "evidence": "shipped"})),
            ("task_complete", json!({"message": "shipped"})),
        ]),
    );
    s.write(
        "ship.md",
        "---\nmodel: replay:ship.json\npark_after: 60s\nsteps:\n\
         \x20 - { name: ship, approve: { from: [alice, ops], message: Check the release notes first } }\n\
         ---\nShip it.\n",
    );
    let id = s.submit("ship.md");
    let serve = crate::human::Serve::start(&s, &["-j", "1"]);
    let t = crate::human::until(&s, &id, &serve, "the step's approval", |t| {
        t["state"] == "waiting_human"
    });
    assert_eq!(t["waiting_for"]["tool"], "step_start", "{t:#}");
    let asked = "step `ship`: only alice, ops may approve or deny: Check the release notes first";
    assert_eq!(t["approval"], asked, "{t:#}");
    let text = s.expect(&["task", "status", &id], 0);
    assert!(text.contains(asked), "{text}");

    // Not named: refused, nothing recorded, the task still waits.
    for args in [
        vec!["task", "approve", &id],
        vec!["task", "approve", &id, "--as", "bob"],
        vec!["task", "deny", &id, "--reason", "no", "--as", "mallory"],
    ] {
        let err = s.expect_err(&args, 2);
        assert!(
            err.contains("may not decide step `ship`")
                && err.contains("only alice, ops may approve or deny it"),
            "{args:?}: {err}"
        );
    }
    let t = s.task(&id);
    assert_eq!(t["state"], "waiting_human", "{t:#}");

    // Named: it counts, and who approved is recorded.
    s.expect(&["task", "approve", &id, "--as", "ops"], 0);
    let t = crate::human::until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    let approved: Vec<&serde_json::Value> = t["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "approved")
        .collect();
    assert_eq!(approved.len(), 1, "{t:#}");
    assert_eq!(approved[0]["by"], "ops", "{t:#}");
    assert_eq!(t["approval"], serde_json::Value::Null);

    // A tool gate's approvers: `approve: { tools, from, message }`.
    s.write(
        "shell.json",
        &crate::util::script(&[
            ("execute_shell", json!({"command": "echo gated"})),
            ("task_complete", json!({"message": "ran it"})),
        ]),
    );
    s.write(
        "shell.md",
        "---\nmodel: replay:shell.json\npark_after: 60s\n\
         approve: { tools: [execute_shell], from: [ops], message: Shell calls need ops }\n\
         ---\nRun it.\n",
    );
    let id = s.submit("shell.md");
    let t = crate::human::until(&s, &id, &serve, "the gate", |t| {
        t["state"] == "waiting_human"
    });
    assert_eq!(
        t["approval"],
        "the `execute_shell` call: only ops may approve or deny: Shell calls need ops",
        "{t:#}"
    );
    let err = s.expect_err(&["task", "approve", &id, "--as", "alice"], 2);
    assert!(
        err.contains("`alice` may not decide the `execute_shell` call") && err.contains("only ops"),
        "{err}"
    );
    s.expect(&["task", "approve", &id, "--as", "ops"], 0);
    let t = crate::human::until(&s, &id, &serve, "complete", |t| t["state"] == "complete");
    let by: Vec<&serde_json::Value> = t["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "approved")
        .map(|e| &e["by"])
        .collect();
    assert_eq!(by, [&json!("ops")], "{t:#}");
}

/// The HTTP API: a submit's `agent_type`, an unknown one refused, and the
/// pools the dashboard's header shows (`GET /api/foreman`).
#[test]
fn issue_52_the_api_submits_by_agent_type_and_shows_the_pools() {
    use crate::web::{WebServe, get, post, until_api};
    require_docker();
    let s = Saheeli::with_config(
        "agent_types:\n  r: { model: replay:done.json, max_steps: 4 }\n\
         pools:\n  - { agent_type: r, max: 1 }\n",
    );
    s.write(
        "done.json",
        &crate::util::script(&[("task_complete", json!({"message": "done"}))]),
    );
    let w = WebServe::start(&s, "127.0.0.1:0", &["-j", "2"]);
    let pools = |w: &WebServe| get(&w.addr, "/api/foreman").json()["pools"].clone();
    assert_eq!(
        pools(&w),
        json!([{"pool": "agent_type=r", "max": 1, "running": 0, "queued": 0}])
    );

    let r = post(
        &w.addr,
        "/api/tasks",
        json!({"prompt": "Do it.\n", "agent_type": "nope"}),
    );
    let e = r.error(400, "bad_input");
    assert!(
        e.contains("`agent_type` `nope` is not defined") && e.contains("(known: r)"),
        "{e}"
    );

    let r = post(
        &w.addr,
        "/api/tasks",
        json!({"prompt": "Do it.\n", "agent_type": "r"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let v = r.json();
    assert_eq!(v["task"]["agent_type"], "r", "{v:#}");
    let id = v["id"].as_str().unwrap().to_string();
    let t = until_api(&w, &id, "complete", |t| t["state"] == "complete");
    assert_eq!(t["agent_type"], "r");
    assert_eq!(
        pools(&w),
        json!([{"pool": "agent_type=r", "max": 1, "running": 0, "queued": 0}])
    );
}

/// Named API tokens (issue 52): over HTTP, a step `approve: { from: [ops] }`
/// is decided by a request bearing `ops`'s token (`http.api_tokens`) and
/// recorded as `ops`; the main token and another name's token are refused
/// and nothing is recorded; a name whose variable is unset stops `serve`.
#[test]
fn issue_52_a_named_api_token_decides_a_restricted_approval_over_http() {
    use crate::web::{WebServe, request};
    require_docker();
    const MAIN: &str = "main-token-0123456789abcdef";
    const OPS: &str = "ops-token-0123456789abcdef";
    const BOB: &str = "bob-token-0123456789abcdef";
    let s = Saheeli::with_config(
        "http:\n  api_tokens: { ops: SAHEELI_TOKEN_OPS, bob: SAHEELI_TOKEN_BOB }\n",
    )
    .env("SAHEELI_HTTP_TOKEN", MAIN)
    .env("SAHEELI_TOKEN_OPS", OPS)
    .env("SAHEELI_TOKEN_BOB", BOB);
    s.write(
        "ship.json",
        &crate::util::script(&[
            ("step_start", json!({"name": "ship"})),
            ("step_done", json!({"name": "ship", "evidence": "shipped"})),
            ("task_complete", json!({"message": "shipped"})),
        ]),
    );
    s.write(
        "ship.md",
        "---\nmodel: replay:ship.json\npark_after: 60s\nsteps:\n\
         \x20 - { name: ship, approve: { from: [ops] } }\n---\nShip it.\n",
    );
    let id = s.submit("ship.md");
    let w = WebServe::start(&s, "127.0.0.1:0", &["-j", "1"]);
    let t = crate::human::until(&s, &id, &w.serve, "the step's approval", |t| {
        t["state"] == "waiting_human"
    });
    assert_eq!(t["waiting_for"]["tool"], "step_start", "{t:#}");
    let approve = |token: &str| {
        request(
            &w.addr,
            "POST",
            &format!("/api/tasks/{id}/approve"),
            &[
                ("Authorization", &format!("Bearer {token}")),
                ("Content-Type", "application/json"),
            ],
            "{}",
        )
    };
    for (token, who) in [(MAIN, "(http)"), (BOB, "`bob`")] {
        let msg = approve(token).error(409, "wrong_state");
        assert!(
            msg.contains(who)
                && msg.contains("may not decide step `ship`")
                && msg.contains("only ops"),
            "{msg}"
        );
    }
    assert_eq!(approve("not-a-token-0123456789").status, 401);
    assert_eq!(s.task(&id)["state"], "waiting_human");
    let r = approve(OPS);
    assert_eq!(r.status, 200, "{}", r.body);
    let t = crate::human::until(&s, &id, &w.serve, "complete", |t| t["state"] == "complete");
    let by: Vec<&serde_json::Value> = t["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "approved")
        .map(|e| &e["by"])
        .collect();
    assert_eq!(by, [&json!("ops")], "{t:#}");
    drop(w);
    // A name without its token: `serve` says which key and variable.
    let bad = Saheeli::with_config("http:\n  api_tokens: { ops: SAHEELI_TOKEN_NOPE }\n");
    let err = bad.expect_err(&["serve", "--drain", "--http", "127.0.0.1:0"], 2);
    assert!(
        err.contains("`http.api_tokens.ops`: the variable `SAHEELI_TOKEN_NOPE` is not set"),
        "{err}"
    );
}
