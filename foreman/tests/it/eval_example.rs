//! The shipped example suite (issue 16) end to end on real containers:
//! `saheeli eval evals/pyfixes/suite.yaml --json`, whose eight cases are
//! bugs planted by `evals/prepare.py` in real packages from the Python
//! package index (`scripts/setup.sh evals` fetches them, pinned by hash).
//!
//! What each case must come to is written here, not read from the run:
//! six replays make the real fix and pass, one makes a wrong fix twice
//! (`verification_failed`) and one gives up (`max_steps`). The collected
//! workspaces are checked against `bugs.json` as well, so a report that
//! says "passed" for a bug that is still there fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::util::{Saheeli, require_docker};

/// One case's expected outcome.
struct Expected {
    id: &'static str,
    category: &'static str,
    passed: bool,
    state: &'static str,
    /// The reason code of a failed case (a passed one has none, or
    /// `complete`).
    reason: Option<&'static str>,
}

const fn pass(id: &'static str, category: &'static str) -> Expected {
    Expected {
        id,
        category,
        passed: true,
        state: "complete",
        reason: None,
    }
}

const EXPECTED: &[Expected] = &[
    pass("cachetools-lru", "caching"),
    pass("cachetools-typedkey", "caching"),
    pass("idna-label-length", "encoding"),
    pass("jsonpointer-escape", "parsing"),
    pass("markdown-setext", "markup"),
    pass("markdown-ol-start", "markup"),
    Expected {
        id: "pathspec-star-slash",
        category: "parsing",
        passed: false,
        state: "incomplete",
        reason: Some("max_steps"),
    },
    Expected {
        id: "simplejson-surrogates",
        category: "encoding",
        passed: false,
        state: "incomplete",
        reason: Some("verification_failed"),
    },
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The case workspaces, made from the cached sdists (never downloads: a
/// missing cache fails with the set-up step to run). `--check` proves each
/// planted bug on the host's python3: the tests `bugs.json` names for it
/// pass on the untouched sdist and fail on the case's workspace.
fn prepare() {
    let out = Command::new("python3")
        .arg(repo().join("evals/prepare.py"))
        .args(["--offline", "--check"])
        .output()
        .expect("running python3 evals/prepare.py");
    assert!(
        out.status.success(),
        "evals/prepare.py --offline --check failed (run `scripts/setup.sh evals` first):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn example_suite_report_has_the_expected_pass_and_fail_per_case() {
    require_docker();
    prepare();
    let s = Saheeli::new();
    let suite = repo().join("evals/pyfixes/suite.yaml");
    let out = s
        .cmd(&[
            "eval",
            suite.to_str().unwrap(),
            "--json",
            "--concurrency",
            "4",
        ])
        .output()
        .expect("running saheeli eval");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // 6 of 8 pass: 0.75, exactly the suite's pass_threshold.
    assert_eq!(
        out.status.code(),
        Some(0),
        "saheeli eval\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("eval --json: not JSON ({e}):\n{stdout}\n{stderr}"));

    let run_id = report["run_id"].as_str().expect("run_id");
    let file = s
        .path()
        .join("results")
        .join(format!("eval-{run_id}"))
        .join("report.json");
    let written: Value = serde_json::from_str(
        &std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display())),
    )
    .unwrap();
    assert_eq!(written, report, "--json must print report.json's object");

    assert_eq!(report["suite"], "pyfixes");
    assert_eq!(report["passed"], 6, "{report:#}");
    assert_eq!(report["failed"], 2, "{report:#}");
    assert_eq!(report["pass_rate"].as_f64(), Some(0.75));

    let cases = report["cases"].as_array().expect("cases");
    assert_eq!(
        cases.len(),
        EXPECTED.len(),
        "one result per case: {cases:#?}"
    );
    let bugs: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("evals/pyfixes/bugs.json")).unwrap(),
    )
    .unwrap();
    for want in EXPECTED {
        let got: Vec<&Value> = cases.iter().filter(|c| c["id"] == want.id).collect();
        assert_eq!(got.len(), 1, "case `{}` exactly once: {cases:#?}", want.id);
        let got = got[0];
        let show = format!("case `{}`: {got:#}", want.id);
        assert_eq!(got["category"], want.category, "{show}");
        assert_eq!(got["passed"], want.passed, "{show}");
        assert_eq!(got["state"], want.state, "{show}");
        match want.reason {
            Some(r) => assert_eq!(got["reason"], r, "{show}"),
            None => assert!(
                got["reason"].is_null() || got["reason"] == "complete",
                "{show}"
            ),
        }
        let task_id = got["task_id"].as_str().expect("task_id");
        let task = s.task(task_id);
        assert_eq!(task["state"], want.state, "an ordinary task: {task:#}");
        check_workspace(&s, task_id, want, &bugs["cases"][want.id]);
    }
}

/// The collected workspace of a passed case has the package's own code
/// back where the bug was planted; a failed one still has the bug.
fn check_workspace(s: &Saheeli, task_id: &str, want: &Expected, bug: &Value) {
    // `task results` exits as the task ended: 1 for an incomplete one.
    let code = if want.passed { 0 } else { 1 };
    let results = s.expect_json(&["task", "results", task_id, "--json"], code);
    let dir = PathBuf::from(results["results"].as_str().unwrap());
    let file = dir.join(bug["file"].as_str().unwrap());
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("case `{}`: reading {}: {e}", want.id, file.display()));
    let original = bug["find"].as_str().unwrap();
    let planted = bug["replace"].as_str().unwrap();
    if want.passed {
        assert!(
            text.contains(original) && !text.contains(planted),
            "case `{}` passed but {} is not fixed",
            want.id,
            file.display()
        );
    } else {
        assert!(
            !text.contains(original),
            "case `{}` failed yet {} has the original code",
            want.id,
            file.display()
        );
    }
    if want.reason == Some("verification_failed") {
        // verify_retries: 1 in the suite's defaults: two attempts, both run.
        let logs = dir.join(".saheeli");
        assert!(logs.join("verify-1.log").is_file() && logs.join("verify-2.log").is_file());
        assert!(!logs.join("verify-3.log").exists());
    }
}
