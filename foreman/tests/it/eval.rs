//! Evaluation suites (issue 16) on real containers: a small suite made
//! here (tiny workspaces, `python3` verify commands, replay scripts, some
//! cases scripted to fail), run by `saheeli eval`; its report.json, the
//! HTML report in headless Chromium, `--repeat`, `eval compare`, and
//! `--resume` after `kill -9` of the eval process.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::lifecycle::wait_for;
use crate::util::{Saheeli, assert_nothing_queued, require_docker, script};

const BUGGY: &str = "def add(a, b):\n    return a - b\n";
const TEST: &str =
    "import calc\nassert calc.add(2, 2) == 4, 'add is wrong'\nprint('ok: add works')\n";
/// Agent-made text that must stay text in the HTML report.
const HOSTILE: &str = "<script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">done";

/// The project, prompt and replay scripts the suites below use.
fn fixture(s: &Saheeli) {
    s.write("cases/calc/repo/calc.py", BUGGY);
    s.write("cases/calc/repo/test_calc.py", TEST);
    s.write(
        "cases/calc/fix.md",
        "---\nparameters:\n  - name: module\n    type: string\n---\n# Fix add in {{ module }}\n\
         `add` in {{ module }} subtracts; make it add.\n",
    );
    s.write("scripts/fix.json", &fix_script("ok", "fixed add"));
    s.write("scripts/wrong-file.json", &fix_script("nope", "fixed add"));
    s.write(
        "scripts/no-fix.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "echo nothing > out.txt"}),
            ),
            ("task_complete", json!({"message": HOSTILE})),
        ]),
    );
}

/// Fixes calc.py, writes `out.txt`, completes with `message`.
fn fix_script(out: &str, message: &str) -> String {
    script(&[
        (
            "edit_file",
            json!({"path": "calc.py", "old_str": "a - b", "new_str": "a + b"}),
        ),
        (
            "execute_shell",
            json!({"command": format!("echo {out} > out.txt")}),
        ),
        ("task_complete", json!({"message": message})),
    ])
}

/// Six cases: three pass, one fails verify, two fail an expectation.
const SUITE: &str = r#"name: tiny-calc
pass_threshold: 0.9
defaults: { max_steps: 10, timeout: 2m, verify_retries: 0 }
cases:
  - id: calc-add
    category: arithmetic
    prompt: cases/calc/fix.md
    params: { module: calc.py }
    workspace: cases/calc/repo
    model: replay:scripts/fix.json
    verify: python3 test_calc.py
    expect: { files: { "out.txt": "^ok" }, message: "fixed" }
  - id: calc-unfixed
    category: arithmetic
    text: "Fix add() in calc.py"
    workspace: cases/calc/repo
    model: replay:scripts/no-fix.json
    verify: python3 test_calc.py
  - id: calc-wrong-file
    category: arithmetic
    prompt: cases/calc/fix.md
    params: { module: calc.py }
    workspace: cases/calc/repo
    model: replay:scripts/wrong-file.json
    expect: { files: { "out.txt": "^ok" } }
  - id: calc-wrong-message
    category: arithmetic
    prompt: cases/calc/fix.md
    params: { module: calc.py }
    workspace: cases/calc/repo
    model: replay:scripts/fix.json
    expect: { message: "^never" }
  - id: say-done
    category: chat
    text: "Say done."
    model: replay:scripts/no-fix.json
    expect: { message: "done$", files: { "out.txt": "nothing" } }
  - id: gives-up
    category: chat
    text: "Fix add() in calc.py"
    workspace: cases/calc/repo
    model: replay:scripts/no-fix.json
    verify: python3 test_calc.py
    expect: { state: incomplete }
"#;

fn cases_by_id(report: &Value) -> BTreeMap<String, Vec<Value>> {
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for c in report["cases"].as_array().unwrap() {
        out.entry(c["id"].as_str().unwrap().to_string())
            .or_default()
            .push(c.clone());
    }
    out
}

fn report_file(s: &Saheeli, run_id: &str, name: &str) -> std::path::PathBuf {
    s.path()
        .join("results")
        .join(format!("eval-{run_id}"))
        .join(name)
}

#[test]
fn a_suite_with_a_bad_key_or_case_exits_2_naming_the_line_and_submits_nothing() {
    let s = Saheeli::new();
    fixture(&s);
    let head = "name: bad\ncases:\n  - id: calc-add\n    category: arithmetic\n";
    let bad = [
        (
            format!("{head}    text: hi\n    modle: gpt-4o\n"),
            6,
            "unknown key `modle`",
        ),
        (
            format!("{head}    text: hi\n  - id: calc-add\n    text: again\n"),
            6,
            "duplicate case id `calc-add`",
        ),
        (
            format!("{head}    prompt: cases/missing.md\n"),
            5,
            "prompt file `cases/missing.md` does not exist",
        ),
        (
            format!("{head}    text: hi\n    workspace: no/such/dir\n"),
            6,
            "`workspace` `no/such/dir` is not a directory",
        ),
        (
            format!("{head}    text: hi\n    expect: {{ message: \"(\" }}\n"),
            6,
            "does not compile",
        ),
        (
            format!("{head}    text: hi\n    max_steps: 0\n"),
            3,
            "`max_steps` 0 is out of range",
        ),
        (
            "name: bad\nthreshold: 1\ncases: []\n".to_string(),
            2,
            "unknown field `threshold`",
        ),
        (
            format!("{head}    text: hi\n    id2: x\n"),
            6,
            "unknown key `id2`",
        ),
        (
            format!("{head}    text: hi\n    samples: 0\n"),
            6,
            "`samples` 0 is out of range; use 1 to 1000",
        ),
    ];
    for (text, line, what) in bad {
        s.write("bad.yaml", &text);
        let err = s.expect_err(&["eval", "bad.yaml"], 2);
        assert!(
            err.contains(&format!("bad.yaml:{line}:")) && err.contains(what),
            "expected line {line} and `{what}` for\n{text}\ngot: {err}"
        );
        assert_nothing_queued(&s);
    }
    let listed = s.expect_json(&["eval", "list", "--json"], 0);
    assert_eq!(listed, json!([]), "no run was recorded");
    let err = s.expect_err(&["eval", "--resume", "0000"], 2);
    assert!(
        err.contains("no eval run") || err.contains("no database"),
        "{err}"
    );
}

#[test]
fn eval_scores_every_case_and_writes_the_json_report() {
    require_docker();
    let s = Saheeli::new();
    fixture(&s);
    s.write("suite.yaml", SUITE);
    // 3 of 6 pass, under the 0.9 threshold: exit 1.
    let printed = s.expect_json(&["eval", "suite.yaml", "--json"], 1);
    let run_id = printed["run_id"].as_str().unwrap();
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(report_file(&s, run_id, "report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(printed, file, "--json prints report.json's object");
    assert_eq!(file["suite"], "tiny-calc");
    assert_eq!(
        (file["passed"].as_u64(), file["failed"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(file["pass_rate"].as_f64(), Some(0.5));
    let cases = cases_by_id(&file);
    let verdict = |id: &str| cases[id][0]["passed"].as_bool().unwrap();
    for (id, passed) in [
        ("calc-add", true),
        ("calc-unfixed", false),
        ("calc-wrong-file", false),
        ("calc-wrong-message", false),
        ("say-done", true),
        ("gives-up", true),
    ] {
        assert_eq!(verdict(id), passed, "{id}: {:#}", cases[id][0]);
        assert_eq!(cases[id].len(), 1);
    }
    let add = &cases["calc-add"][0];
    assert_eq!(add["state"], "complete");
    assert_eq!(add["score"].as_f64(), Some(1.0));
    assert_eq!(add["category"], "arithmetic");
    assert_eq!(add["verify_attempts"].as_u64(), Some(1));
    assert_eq!(add["tool_calls"]["edit_file"].as_u64(), Some(1));
    assert!(
        add["verify"][0]["output"]
            .as_str()
            .unwrap()
            .contains("ok: add works")
    );
    for key in ["results", "report", "patch"] {
        let p = add[key]
            .as_str()
            .unwrap_or_else(|| panic!("calc-add has no `{key}`"));
        assert!(
            std::path::Path::new(p).is_file() || key == "results",
            "{key}: {p}"
        );
    }
    assert!(add["duration_ms"].as_i64().is_some() && add["queue_wait_ms"].as_i64().is_some());
    let unfixed = &cases["calc-unfixed"][0];
    assert_eq!(
        (unfixed["state"].as_str(), unfixed["reason"].as_str()),
        (Some("incomplete"), Some("verification_failed"))
    );
    assert!(
        unfixed["verify"][0]["output"]
            .as_str()
            .unwrap()
            .contains("add is wrong")
    );
    let wrong = &cases["calc-wrong-file"][0];
    assert_eq!(wrong["state"], "complete");
    assert_eq!(wrong["score"].as_f64(), Some(0.5));
    assert!(
        wrong["why"]
            .to_string()
            .contains("fail: `out.txt` does not match `^ok`"),
        "{}",
        wrong["why"]
    );
    assert!(
        cases["calc-wrong-message"][0]["why"]
            .to_string()
            .contains("the message does not match")
    );
    assert_eq!(cases["say-done"][0]["message"], HOSTILE);
    assert_eq!(
        file["failures_by_reason"],
        json!({"expect_failed": 2, "verification_failed": 1})
    );
    assert_eq!(
        file["by_category"]["chat"],
        json!({"passed": 2, "total": 2, "pass_rate": 1.0})
    );
    assert_eq!(file["by_category"]["arithmetic"]["passed"], 1);
    assert!(
        file["latency_ms"]["p50"].as_i64().unwrap() <= file["latency_ms"]["max"].as_i64().unwrap()
    );
    assert_eq!(file["tool_calls"]["task_complete"].as_u64(), Some(6));
    // The HTML report is one file, with the agent's text escaped.
    let html = std::fs::read_to_string(report_file(&s, run_id, "report.html")).unwrap();
    assert!(
        !html.contains("<script>window.pwned"),
        "agent text reached the page as markup"
    );
    assert!(html.contains("&lt;script&gt;window.pwned=1&lt;/script&gt;"));
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "nothing is fetched"
    );
    // Every case is an ordinary task, HITL off.
    let tasks = s.tasks();
    assert_eq!(tasks.len(), 6);
    let listed = s.expect_json(&["eval", "list", "--json"], 0);
    assert_eq!(listed[0]["run_id"], run_id);
    assert_eq!(listed[0]["state"], "failed");
    assert_eq!(listed[0]["pass_rate"].as_f64(), Some(0.5));
}

#[test]
fn repeat_gives_k_results_per_case_and_compare_finds_a_planted_regression() {
    require_docker();
    let s = Saheeli::new();
    fixture(&s);
    s.write(
        "suite.yaml",
        "name: two\ndefaults: { verify_retries: 0 }\ncases:\n\
         \x20 - id: calc-add\n    prompt: cases/calc/fix.md\n    params: { module: calc.py }\n\
         \x20   workspace: cases/calc/repo\n    model: replay:scripts/fix.json\n    verify: python3 test_calc.py\n\
         \x20 - id: say-done\n    category: chat\n    text: Say done.\n    model: replay:scripts/no-fix.json\n",
    );
    let a = s.expect_json(&["eval", "suite.yaml", "--repeat", "3", "--json"], 0);
    let cases = cases_by_id(&a);
    assert_eq!(cases.len(), 2);
    for (id, results) in &cases {
        let repeats: Vec<u64> = results
            .iter()
            .map(|c| c["repeat"].as_u64().unwrap())
            .collect();
        assert_eq!(repeats, vec![1, 2, 3], "{id}");
        let ids: std::collections::BTreeSet<&str> = results
            .iter()
            .map(|c| c["task_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), 3, "{id}: a task per repeat");
    }
    assert_eq!(a["pass_at_1"].as_f64(), Some(1.0));
    assert_eq!(a["pass_at_k"], json!({"1": 1.0, "2": 1.0, "3": 1.0}));
    assert_eq!(
        a["case_pass_fraction"],
        json!({"calc-add": 1.0, "say-done": 1.0})
    );
    // The planted regression: the fix stops fixing.
    s.write(
        "scripts/fix.json",
        &script(&[("task_complete", json!({"message": "fixed, honestly"}))]),
    );
    let b = s.expect_json(&["eval", "suite.yaml", "--json"], 1);
    let (ra, rb) = (a["run_id"].as_str().unwrap(), b["run_id"].as_str().unwrap());
    let c = s.expect_json(
        &[
            "eval",
            "compare",
            ra,
            rb,
            "--json",
            "--html",
            "compare.html",
        ],
        0,
    );
    assert_eq!(c["pass_to_fail"], json!(["calc-add"]));
    assert_eq!(c["fail_to_pass"], json!([]));
    assert_eq!(c["pass_rate_delta"].as_f64(), Some(-0.5));
    let table = s.expect(&["eval", "compare", ra, rb], 0);
    assert!(
        table.contains("pass → fail") && table.contains("calc-add"),
        "{table}"
    );
    let page = std::fs::read_to_string(s.path().join("compare.html")).unwrap();
    assert!(page.contains("calc-add") && page.contains("pass → fail"));
    let listed = s.expect_json(&["eval", "list", "--json"], 0);
    let states: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, vec!["failed", "passed"], "newest first");
}

#[test]
fn resume_after_kill_9_completes_only_the_missing_cases() {
    require_docker();
    let s = Saheeli::with_config("lease: 2s\n");
    s.write(
        "scripts/slow.json",
        &script(&[
            (
                "execute_shell",
                json!({"command": "sleep 1; echo ok > out.txt"}),
            ),
            ("task_complete", json!({"message": "done"})),
        ]),
    );
    let mut suite =
        String::from("name: slow\ndefaults: { model: replay:scripts/slow.json }\ncases:\n");
    let n = 6;
    for i in 0..n {
        suite.push_str(&format!(
            "  - id: case-{i}\n    text: Write ok.\n    expect: {{ files: {{ out.txt: ok }} }}\n"
        ));
    }
    s.write("suite.yaml", &suite);
    let mut child = s
        .cmd(&["eval", "suite.yaml", "-j", "1", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let complete = || {
        if !s.path().join("saheeli.db").exists() {
            return Vec::new();
        }
        s.tasks()
            .into_iter()
            .filter(|t| t["state"] == "complete")
            .map(|t| t["id"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert!(
        wait_for(Duration::from_secs(120), || complete().len() >= 2),
        "two cases never completed"
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let before = complete();
    assert!(before.len() < n, "the run ended before it was killed");
    let run_id = s.expect_json(&["eval", "list", "--json"], 0)[0]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        wait_for(Duration::from_secs(15), || {
            s.expect_json(&["eval", "list", "--json"], 0)[0]["state"] == "interrupted"
        }),
        "the killed run is listed as interrupted"
    );
    let report = s.expect_json(&["eval", "--resume", &run_id, "--json"], 0);
    assert_eq!(report["run_id"], run_id.as_str());
    let cases = cases_by_id(&report);
    assert_eq!(cases.len(), n);
    for (id, results) in &cases {
        assert_eq!(results.len(), 1, "{id} appears once");
        assert!(
            results[0]["passed"].as_bool().unwrap(),
            "{id}: {:#}",
            results[0]
        );
    }
    let in_report: Vec<&str> = report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["task_id"].as_str().unwrap())
        .collect();
    for id in &before {
        assert!(
            in_report.contains(&id.as_str()),
            "finished task {id} was rerun or lost"
        );
    }
    assert_eq!(s.tasks().len(), n, "no case was submitted twice");
    let listed = s.expect_json(&["eval", "list", "--json"], 0);
    assert_eq!(listed[0]["state"], "passed");
    // Issue 24: resuming a run that has ended printed an error and
    // exited 2; it prints that run's report and exits by its pass rate.
    let again = s.expect(&["eval", "--resume", &run_id], 0);
    assert!(again.contains("100% passed"), "{again}");
    assert!(again.contains("report.html"), "{again}");
    let again = s.expect_json(&["eval", "--resume", &run_id, "--json"], 0);
    assert_eq!(again["run_id"], run_id.as_str());
    assert_eq!(again["pass_rate"], report["pass_rate"]);
    assert_eq!(s.tasks().len(), n, "nothing was submitted again");
}
