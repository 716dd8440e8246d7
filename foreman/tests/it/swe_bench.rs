//! A SWE-bench-shaped instance end to end (issue 49): a local repository
//! (a bug, a passing test), an instance with its base commit, gold patch,
//! test patch, FAIL_TO_PASS and PASS_TO_PASS, imported with `saheeli
//! import` and run through Docker in an image with real pytest (the
//! importer's default test command, `python3 -m pytest -rA`): the oracle's
//! gold patch passes with reward 1, an agent that changes nothing fails
//! with reward 0.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::util::{Saheeli, require_docker, script};

/// Removes the test's image when the test ends, passed or not.
struct Image(String);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

fn sh(dir: &Path, cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `saheeli-base:bookworm` with pytest's wheels (fetched on this host from
/// PyPI; the build itself has no network) unpacked into its site packages.
fn pytest_image(ctx: &Path) -> Image {
    let wheels = ctx.join("wheels");
    sh(
        ctx,
        "python3",
        &[
            "-m",
            "pip",
            "download",
            "-q",
            "--only-binary=:all:",
            "--dest",
            wheels.to_str().unwrap(),
            "pytest",
        ],
    );
    std::fs::write(
        ctx.join("Dockerfile"),
        "FROM saheeli-base:bookworm\nCOPY wheels /wheels\n\
         RUN for w in /wheels/*.whl; do python3 -m zipfile -e \"$w\" /usr/local/lib/python3.11/dist-packages/; done\n",
    )
    .unwrap();
    let tag = format!("saheeli-it-swe-eval-export-{}:latest", std::process::id());
    let image = Image(tag.clone());
    sh(
        ctx,
        "docker",
        &["build", "-q", "--network=none", "-t", &tag, "."],
    );
    let v = sh(
        ctx,
        "docker",
        &[
            "run",
            "--rm",
            "--network=none",
            &tag,
            "python3",
            "-m",
            "pytest",
            "--version",
        ],
    );
    assert!(v.starts_with("pytest "), "python3 -m pytest --version: {v}");
    image
}

/// `repos/acme__calc`: `sub` is wrong at the base commit; the gold patch
/// fixes it; the test patch adds `test_sub` beside the passing `test_add`.
fn repo(repos: &Path) -> Value {
    let dir = repos.join("acme__calc");
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    sh(&dir, "git", &["init", "-q"]);
    sh(&dir, "git", &["config", "user.email", "t@example.com"]);
    sh(&dir, "git", &["config", "user.name", "t"]);
    let put = |rel: &str, text: &str| std::fs::write(dir.join(rel), text).unwrap();
    put(
        "calc.py",
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n",
    );
    put(
        "tests/test_calc.py",
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    );
    sh(&dir, "git", &["add", "-A"]);
    sh(&dir, "git", &["commit", "-q", "-m", "base"]);
    let base = sh(&dir, "git", &["rev-parse", "HEAD"]).trim().to_string();
    put(
        "calc.py",
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n",
    );
    let gold = sh(&dir, "git", &["diff"]);
    sh(&dir, "git", &["checkout", "-q", "--", "."]);
    put(
        "tests/test_calc.py",
        "from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n\
         def test_sub():\n    assert sub(5, 3) == 2\n",
    );
    sh(&dir, "git", &["add", "-A"]);
    let test_patch = sh(&dir, "git", &["diff", "--cached"]);
    sh(&dir, "git", &["reset", "-q", "--hard"]);
    json!({
        "instance_id": "acme__calc-1",
        "repo": "acme/calc",
        "base_commit": base,
        "patch": gold,
        "test_patch": test_patch,
        "problem_statement": "sub() adds.\n",
        "FAIL_TO_PASS": "[\"tests/test_calc.py::test_sub\"]",
        "PASS_TO_PASS": ["tests/test_calc.py::test_add"],
    })
}

fn only_case(report: &Value) -> &Value {
    let cases = report["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 1, "{report}");
    &cases[0]
}

#[test]
fn a_swe_bench_instance_passes_with_the_gold_patch_and_fails_without_it() {
    require_docker();
    let s = Saheeli::new();
    let ctx = s.path().join("image");
    std::fs::create_dir_all(&ctx).unwrap();
    let image = pytest_image(&ctx);
    let inst = repo(&s.path().join("repos"));
    s.write("swe.jsonl", &format!("{inst}\n"));
    s.expect(
        &[
            "import",
            "swe.jsonl",
            "--repos",
            "repos",
            "--image",
            &image.0,
            "--out",
            "suite",
        ],
        0,
    );
    let suite: PathBuf = s.path().join("suite/suite.yaml");
    let suite_arg = suite.to_str().unwrap();

    // The oracle applies the gold patch: FAIL_TO_PASS and PASS_TO_PASS pass.
    let report = s.expect_json(&["eval", suite_arg, "--param", "agent=oracle", "--json"], 0);
    let case = only_case(&report);
    assert_eq!(case["passed"], true, "{report}");
    let task = s.task(case["task_id"].as_str().unwrap());
    assert_eq!(task["reward"], 1.0, "{task}");
    assert_eq!(task["rewards"]["fail_to_pass"], 1.0, "{task}");
    assert_eq!(task["rewards"]["pass_to_pass"], 1.0, "{task}");
    let results = PathBuf::from(task["results"].as_str().unwrap());
    let log = std::fs::read_to_string(results.join(".saheeli/verify-1.log")).unwrap();
    assert!(log.contains("python3 -m pytest -rA"), "{log}");
    assert!(log.contains("PASSED tests/test_calc.py::test_sub"), "{log}");
    assert!(log.contains("resolved"), "{log}");

    // An agent that only says it is done: test_sub still fails, reward 0.
    s.write(
        "suite/noop.json",
        &script(&[("task_complete", json!({"message": "done"}))]),
    );
    let model = format!("replay:{}", s.path().join("suite/noop.json").display());
    let report = s.expect_json(&["eval", suite_arg, "--model", &model, "--json"], 1);
    let case = only_case(&report);
    assert_eq!(case["passed"], false, "{report}");
    assert_eq!(case["reason"], "verification_failed", "{report}");
    let task = s.task(case["task_id"].as_str().unwrap());
    assert_eq!(task["reward"], 0.0, "{task}");
    assert_eq!(task["rewards"]["fail_to_pass"], 0.0, "{task}");
    assert_eq!(task["rewards"]["pass_to_pass"], 1.0, "{task}");
    let results = PathBuf::from(task["results"].as_str().unwrap());
    let log = std::fs::read_to_string(results.join(".saheeli/verify-1.log")).unwrap();
    assert!(log.contains("FAILED tests/test_calc.py::test_sub"), "{log}");
    assert!(log.contains("not resolved"), "{log}");
}
