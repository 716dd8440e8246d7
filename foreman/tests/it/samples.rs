//! Issue 51, best-of-N: `samples: K` runs K samples of a task, each an
//! ordinary task under it (`SAMPLE_INDEX` tells each its number, which
//! is how these tests make them differ), and `select:` picks the one whose
//! results become the task's. Real Docker and SQLite; replay scripts, and
//! the fake LLM where an assessor is needed.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::children::children;
use crate::fake_llm::{FakeLlm, Reply};
use crate::human::{Serve, until};
use crate::util::{Saheeli, assert_nothing_queued, require_docker, script};

/// The samples of task `t` (its children), each in full.
fn samples(s: &Saheeli, t: &Value) -> Vec<Value> {
    children(t)
        .iter()
        .map(|c| s.task(c["id"].as_str().unwrap()))
        .collect()
}

fn index(t: &Value) -> i64 {
    t["sample_of"]["index"].as_i64().unwrap()
}

fn results(t: &Value) -> PathBuf {
    PathBuf::from(t["results"].as_str().expect("collected results"))
}

#[test]
fn select_verify_keeps_the_one_sample_whose_verify_passes() {
    require_docker();
    let s = Saheeli::new().env("SAHEELI_CONCURRENCY", "3");
    s.write(
        "pick.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "echo $SAMPLE_INDEX > pick.txt"}),
            ),
            ("task_complete", json!({"message": "picked"})),
        ]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:pick.json\nsamples: 3\nselect: verify\nverify: test \"$(cat pick.txt)\" = 2\nverify_retries: 0\n---\nPick a number.\n",
    );
    let t = s.expect_json(&["run", "p.md", "--json"], 0);
    let id = t["id"].as_str().unwrap();
    let t = s.task(id);
    assert_eq!(t["state"], "complete", "{t:#}");
    assert_eq!(t["reason"], "complete");
    let all = samples(&s, &t);
    assert_eq!(all.len(), 3, "{t:#}");
    let mut indexes: Vec<i64> = all.iter().map(index).collect();
    indexes.sort();
    assert_eq!(indexes, [1, 2, 3]);
    for sample in &all {
        assert_eq!(sample["parent"], id);
        assert_eq!(sample["sample_of"]["task"], id);
        if index(sample) == 2 {
            assert_eq!(sample["state"], "complete", "{sample:#}");
        } else {
            // The others stay under the task with their own outcomes.
            assert_eq!(sample["state"], "incomplete", "{sample:#}");
            assert_eq!(sample["reason"], "verification_failed");
        }
    }
    let winner = all.iter().find(|x| index(x) == 2).unwrap();
    assert_eq!(t["samples"]["winner"], winner["id"], "{t:#}");
    assert_eq!(t["samples"]["count"], 3);
    assert_eq!(t["samples"]["select"], "verify");
    assert_eq!(t["samples"]["ended"], 3);
    assert_eq!(t["samples"]["complete"], 1);
    // The winner's results are the task's, with the record of who won.
    let dir = results(&t);
    assert!(dir.ends_with(id), "{}", dir.display());
    assert_eq!(
        std::fs::read_to_string(dir.join("pick.txt")).unwrap(),
        "2\n"
    );
    let record: Value =
        serde_json::from_slice(&std::fs::read(dir.join(".saheeli/samples.json")).unwrap()).unwrap();
    assert_eq!(record["winner"]["index"], 2, "{record:#}");
    assert_eq!(record["winner"]["task"], winner["id"]);
    assert_eq!(record["select"], "verify");
    assert_eq!(record["samples"].as_array().unwrap().len(), 3);
    // Its report is the winner's, its samples listed below it.
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let (winners, table) = report.split_once("## Children").expect("a Children table");
    assert!(winners.contains("# Report: p [sample 2/3]"), "{report}");
    assert_eq!(table.matches("[sample ").count(), 3, "{report}");
    let shown = s.expect(&["task", "status", id], 0);
    assert!(
        shown.contains("samples:   3 (select: verify): 3 ended, 1 complete; winner"),
        "{shown}"
    );
    let tree = s.expect(&["task", "status", id, "--tree"], 0);
    assert_eq!(tree.matches("[sample ").count(), 3, "{tree}");
}

#[test]
fn first_complete_wins_at_once_and_the_other_samples_are_cancelled() {
    require_docker();
    let s = Saheeli::new().env("SAHEELI_CONCURRENCY", "3");
    // Sample 1 is done at once; the others would work for minutes.
    s.write(
        "race.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "[ \"$SAMPLE_INDEX\" = 1 ] || sleep 300; echo $SAMPLE_INDEX > done.txt", "timeout_s": 400}),
            ),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:race.json\nsamples: 3\nselect: first_complete\n---\nRace.\n",
    );
    let t = s.expect_json(&["run", "p.md", "--json"], 0);
    let id = t["id"].as_str().unwrap();
    let t = s.task(id);
    assert_eq!(t["state"], "complete", "{t:#}");
    let all = samples(&s, &t);
    assert_eq!(all.len(), 3);
    for sample in &all {
        let want = if index(sample) == 1 {
            "complete"
        } else {
            "cancelled"
        };
        assert_eq!(sample["state"], want, "{sample:#}");
    }
    let winner = all.iter().find(|x| index(x) == 1).unwrap();
    assert_eq!(t["samples"]["winner"], winner["id"]);
    assert_eq!(
        std::fs::read_to_string(results(&t).join("done.txt")).unwrap(),
        "1\n"
    );
}

#[test]
fn cancelling_the_task_cancels_every_sample() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "slow.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "sleep 300", "timeout_s": 400}),
            ),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    // Three samples at concurrency 2: two run, one waits in the queue
    // (the task itself holds no slot).
    s.write(
        "p.md",
        "---\nmodel: replay:slow.json\nsamples: 3\n---\nWork slowly.\n",
    );
    let id = s.submit("p.md");
    let serve = Serve::start(&s, &["-j", "2"]);
    until(&s, &id, &serve, "two samples running", |t| {
        t["state"] == "running"
            && t["samples"]["queued"] == 3
            && samples(&s, t)
                .iter()
                .filter(|x| x["state"] == "running")
                .count()
                == 2
    });
    s.expect(&["task", "cancel", &id], 0);
    let t = until(&s, &id, &serve, "all cancelled", |t| {
        t["state"] == "cancelled" && samples(&s, t).iter().all(|x| x["state"] == "cancelled")
    });
    assert_eq!(t["reason"], "cancelled", "{t:#}");
    assert!(t["samples"]["winner"].is_null());
}

#[test]
fn samples_are_refused_at_submit_when_they_cannot_run() {
    let s = Saheeli::new();
    s.write(
        "x.json",
        &script(&[("task_complete", json!({"message": "ok"}))]),
    );
    let cases = [
        (
            "samples: 4\nmax_tokens: 3000\n",
            "`max_tokens` 3000 cannot cover 4 samples: each gets 750 tokens",
        ),
        ("samples: 17\n", "`samples` 17 is out of range; use 1 to 16"),
        ("samples: 2\nselect: verify\n", "add `verify:` commands"),
        ("samples: 2\nselect: assess\n", "add `assess: true`"),
        ("select: first_complete\n", "add `samples: K`"),
    ];
    for (fm, want) in cases {
        s.write(
            "p.md",
            &format!("---\nmodel: replay:x.json\n{fm}---\nDo it.\n"),
        );
        let err = s.expect_err(&["task", "submit", "--prompt", "p.md"], 2);
        assert!(err.contains(want), "{fm}: {err}");
    }
    assert_nothing_queued(&s);
    // `--param` sets them like the front-matter.
    s.write(
        "p.md",
        "---\nmodel: replay:x.json\nmax_tokens: 3000\n---\nDo it.\n",
    );
    let err = s.expect_err(
        &["task", "submit", "--prompt", "p.md", "--param", "samples=4"],
        2,
    );
    assert!(err.contains("cannot cover 4 samples"), "{err}");
    let dry = s.expect(
        &[
            "task",
            "submit",
            "--prompt",
            "p.md",
            "--param",
            "samples=3",
            "--dry-run",
        ],
        0,
    );
    assert!(dry.contains("samples"), "{dry}");
    assert_nothing_queued(&s);
}

/// The fake answers a sample's first call with a shell command that says
/// which sample it is, its second with `task_complete` naming it, and the
/// assessor with a score by sample: 0.3, 0.9, 0.6.
fn scoring_llm() -> FakeLlm {
    FakeLlm::start_matching(Vec::new(), |body| {
        let text = body["messages"].to_string();
        let system = body["messages"][0]["content"].as_str().unwrap_or("");
        let which = (1..=3).find(|n| text.contains(&format!("sample-{n}")));
        if system.contains("Saheeli's assessor") {
            let score = [0.3, 0.9, 0.6][which? - 1];
            let v = json!({"verdict": "met", "feedback": "fine", "findings": [], "score": score});
            return Some(Reply::Text(v.to_string(), (300, 30)));
        }
        Some(match which {
            None => Reply::tool(
                "execute_shell",
                json!({"command": "echo sample-$SAMPLE_INDEX"}),
            ),
            Some(n) => Reply::tool(
                "task_complete",
                json!({"message": format!("done as sample-{n}")}),
            ),
        })
    })
}

#[test]
fn select_assess_keeps_the_sample_the_assessor_scores_highest() {
    require_docker();
    let llm = scoring_llm();
    let s = Saheeli::new()
        .env("SAHEELI_CONCURRENCY", "3")
        .env("OPENAI_API_KEY", "sk-test-samples-000")
        .env("OPENAI_BASE_URL", &llm.base_url());
    s.write(
        "p.md",
        "---\nmodel: gpt-test\nsamples: 3\nselect: assess\nassess: true\nmax_tokens: 60000\n---\nSay which sample you are.\n",
    );
    let t = s.expect_json(&["run", "p.md", "--json"], 0);
    let id = t["id"].as_str().unwrap();
    let t = s.task(id);
    assert_eq!(t["state"], "complete", "{t:#}");
    let all = samples(&s, &t);
    assert!(all.iter().all(|x| x["state"] == "complete"), "{all:#?}");
    // Each sample's budget is the task's divided by 3.
    for x in &all {
        assert!(x["tokens"].as_i64().unwrap_or(0) <= 20_000, "{x:#}");
    }
    let winner = all.iter().find(|x| index(x) == 2).unwrap();
    assert_eq!(t["samples"]["winner"], winner["id"], "{t:#}");
    let record: Value =
        serde_json::from_slice(&std::fs::read(results(&t).join(".saheeli/samples.json")).unwrap())
            .unwrap();
    let scores: Vec<(i64, f64)> = record["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["index"].as_i64().unwrap(), x["score"].as_f64().unwrap()))
        .collect();
    assert!(
        scores.contains(&(2, 0.9)) && scores.contains(&(1, 0.3)),
        "{scores:?}"
    );
}

#[test]
fn kill_9_of_the_foreman_between_the_samples_ends_neither_loses_nor_doubles_the_pick() {
    require_docker();
    let s = Saheeli::with_config("lease: 2s\n");
    // Both pass their verify; sample 1 ends first, sample 2 seconds later.
    s.write(
        "both.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "[ \"$SAMPLE_INDEX\" = 1 ] || sleep 8; echo $SAMPLE_INDEX > n.txt", "timeout_s": 60}),
            ),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:both.json\nsamples: 2\nselect: verify\nverify: test -s n.txt\n---\nBoth pass.\n",
    );
    let id = s.submit("p.md");
    let first = Serve::start(&s, &["-j", "2"]);
    until(&s, &id, &first, "sample 1 ended, sample 2 running", |t| {
        let all = samples(&s, t);
        all.len() == 2
            && all
                .iter()
                .any(|x| index(x) == 1 && x["state"] == "complete")
            && all.iter().any(|x| index(x) == 2 && x["state"] == "running")
    });
    first.kill9();
    let second = Serve::start(&s, &["-j", "2"]);
    let t = until(&s, &id, &second, "ended", |t| {
        t["state"] == "complete" || t["state"] == "failed"
    });
    assert_eq!(t["state"], "complete", "{t:#}\n{}", second.log());
    let all = samples(&s, &t);
    assert!(all.iter().all(|x| x["state"] == "complete"), "{all:#?}");
    // Queued once, won once, by the first to pass.
    assert_eq!(s.tasks().len(), 3);
    let kinds: Vec<&str> = t["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "samples_spawned").count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "sample_won").count(),
        1,
        "{kinds:?}"
    );
    let winner = all.iter().find(|x| index(x) == 1).unwrap();
    assert_eq!(t["samples"]["winner"], winner["id"]);
    assert_eq!(
        std::fs::read_to_string(results(&t).join("n.txt")).unwrap(),
        "1\n"
    );
}

#[test]
fn no_qualifying_sample_ends_the_task_incomplete_with_each_samples_outcome() {
    require_docker();
    let s = Saheeli::new();
    s.write(
        "x.json",
        &script(&[("task_complete", json!({"message": "claimed"}))]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:x.json\nsamples: 2\nverify: \"false\"\nverify_retries: 0\n---\nNever passes.\n",
    );
    let t = s.expect_json(&["run", "p.md", "--json"], 1);
    let t = s.task(t["id"].as_str().unwrap());
    assert_eq!(t["state"], "incomplete", "{t:#}");
    assert_eq!(t["reason"], "no_sample_qualified");
    assert_eq!(t["recoverable"], true, "`task retry` runs new samples");
    let detail = t["detail"].as_str().unwrap();
    assert!(
        detail.contains(
            "no sample of 2 passed its verify (select: verify): sample 1 incomplete, sample 2 incomplete"
        ),
        "{detail}"
    );
    assert!(t["samples"]["winner"].is_null());
    for x in samples(&s, &t) {
        assert_eq!(x["reason"], "verification_failed", "{x:#}");
    }
}

/// `fork_at: 2`: the first run keeps its steps, and the other samples are
/// forked from its step 2: they go on from its workspace and conversation
/// there, never run steps 1 and 2 again.
#[test]
fn fork_at_forks_the_other_samples_from_the_first_runs_step() {
    require_docker();
    let s = Saheeli::new().env("SAHEELI_CONCURRENCY", "3");
    s.write(
        "steps.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "echo $SAMPLE_INDEX >> one.txt"}),
            ),
            (
                "execute_shell",
                json!({"command": "echo $SAMPLE_INDEX >> two.txt"}),
            ),
            (
                "execute_shell",
                json!({"command": "echo $SAMPLE_INDEX >> three.txt"}),
            ),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:steps.json\nsamples: 3\nfork_at: 2\nselect: verify\nverify: test -f three.txt\nverify_retries: 0\n---\nThree steps.\n",
    );
    let t = s.expect_json(&["run", "p.md", "--json"], 0);
    let t = s.task(t["id"].as_str().unwrap());
    assert_eq!(t["state"], "complete", "{t:#}");
    let all = samples(&s, &t);
    assert_eq!(all.len(), 3, "{t:#}");
    let first = all.iter().find(|x| index(x) == 1).expect("the first run");
    assert!(first["forked_from"].is_null(), "{first:#}");
    for fork in all.iter().filter(|x| index(x) != 1) {
        assert_eq!(fork["state"], "complete", "{fork:#}");
        assert_eq!(fork["forked_from"]["task"], first["id"], "{fork:#}");
        assert_eq!(fork["forked_from"]["at_step"], 2, "{fork:#}");
        // Steps 1 and 2 ran once, in the first run; the fork ran step 3.
        let dir = results(fork);
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(read("one.txt"), "1\n", "{fork:#}");
        assert_eq!(read("two.txt"), "1\n");
        // Each fork is its own sample: its commands see its own number
        // and its title says it, not the first run's.
        let i = index(fork);
        assert_eq!(read("three.txt"), format!("{i}\n"), "{fork:#}");
        assert_eq!(fork["title"], format!("p [sample {i}/3]"), "{fork:#}");
    }
    let mut indexes: Vec<i64> = all.iter().map(index).collect();
    indexes.sort();
    assert_eq!(indexes, [1, 2, 3]);
    assert_eq!(first["title"], "p [sample 1/3]");
}

/// A first Ctrl-C of `serve` (a drain: finish what runs, start nothing
/// new) while a best-of-N task runs: its samples still queued are part of
/// that running work, so the drain runs them, the task ends with its
/// winner, and the foreman exits by itself (it used to wait for a second
/// Ctrl-C, the task waiting on samples nobody would claim).
#[test]
fn a_drain_runs_the_queued_samples_of_a_running_best_of_n_task() {
    require_docker();
    let s = Saheeli::new();
    // Sample 1 waits for the test's `/tmp/go` and fails its verify; only
    // sample 2 can win, and at `-j 1` it is queued behind sample 1.
    s.write(
        "gate.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "if [ \"$SAMPLE_INDEX\" = 1 ]; then until [ -e /tmp/go ]; do sleep 0.1; done; fi; echo $SAMPLE_INDEX > n.txt", "timeout_s": 300}),
            ),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    s.write(
        "p.md",
        "---\nmodel: replay:gate.json\nsamples: 2\nselect: verify\nverify: test \"$(cat n.txt)\" = 2\nverify_retries: 0\n---\nGated.\n",
    );
    let id = s.submit("p.md");
    let mut serve = Serve::start(&s, &["-j", "1"]);
    let t = until(&s, &id, &serve, "sample 1 running, sample 2 queued", |t| {
        let all = samples(&s, t);
        all.len() == 2
            && all.iter().any(|x| index(x) == 1 && x["state"] == "running")
            && all.iter().any(|x| index(x) == 2 && x["state"] == "queued")
    });
    let first = samples(&s, &t).into_iter().find(|x| index(x) == 1).unwrap();
    serve.interrupt();
    crate::gateway_guard::release(first["id"].as_str().unwrap(), "go");
    let status = serve.wait_exit(std::time::Duration::from_secs(120));
    let t = s.task(&id);
    assert!(
        status.is_some(),
        "serve did not end after the drain\n{t:#}\n--- serve log\n{}",
        serve.log()
    );
    // It exited by itself (1: sample 1 ended incomplete, as it must).
    assert_eq!(status.unwrap().code(), Some(1), "{}", serve.log());
    assert!(
        serve.log().contains("served 3 tasks, 2 complete"),
        "{}",
        serve.log()
    );
    assert_eq!(t["state"], "complete", "{t:#}\n{}", serve.log());
    let all = samples(&s, &t);
    let winner = all.iter().find(|x| index(x) == 2).unwrap();
    assert_eq!(winner["state"], "complete", "{all:#?}");
    assert_eq!(t["samples"]["winner"], winner["id"]);
    assert_eq!(
        std::fs::read_to_string(results(&t).join("n.txt")).unwrap(),
        "2\n"
    );
}
