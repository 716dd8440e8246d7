use std::collections::BTreeMap;
use std::process::Command;

use super::*;
use crate::eval::import::fixtures::{
    HARBOR_TOML, TB1_YAML, harbor_task, instance, put, swebench_repo, tb1_task,
};
use crate::eval::import::model::Options;

/// A Harbor task, a TB1 dataset of two and one SWE-bench instance, written
/// into `root/out`. Returns the suite file.
fn write_all(root: &Path) -> PathBuf {
    let harbor = harbor_task(&root.join("harbor"), "hello", HARBOR_TOML);
    tb1_task(&root.join("tb"), "hello", TB1_YAML);
    tb1_task(&root.join("tb"), "other", TB1_YAML);
    let repo = swebench_repo(&root.join("repos"));
    let jsonl = put(root, "swe.jsonl", &instance(&repo, "acme__calc-7"));
    let opts = Options {
        repos: Some(root.join("repos")),
        image: Some("python:3.13-slim".into()),
        name: Some("mixed".into()),
        ..Options::default()
    };
    let (path, problems) =
        import_to(&[harbor, root.join("tb"), jsonl], &opts, &root.join("out")).unwrap();
    let ids: Vec<&str> = problems.iter().map(|p| p.task.as_str()).collect();
    assert_eq!(
        ids,
        ["hello-2", "other"],
        "TB1's online warnings only: {problems:?}"
    );
    path
}

fn suite(path: &Path) -> BTreeMap<String, Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let doc: Value = serde_yaml::from_str(&text).unwrap();
    assert_eq!(doc["name"], "mixed");
    doc["cases"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| (c["id"].as_str().unwrap().to_string(), c.clone()))
        .collect()
}

/// Every path a case names, resolved against the suite's folder, exists.
fn assert_paths_exist(out: &Path, case: &Value) {
    let mut paths = vec![];
    for key in ["workspace", "solution"] {
        paths.extend(case.get(key).and_then(Value::as_str));
    }
    paths.extend(
        case.get("environment")
            .and_then(|e| e["dockerfile"].as_str()),
    );
    match &case["verify"]["files"] {
        Value::String(s) => paths.push(s),
        Value::Sequence(s) => paths.extend(s.iter().filter_map(Value::as_str)),
        other => panic!("verify.files: {other:?}"),
    }
    for p in paths {
        assert!(
            !Path::new(p).is_absolute(),
            "`{p}` is relative to the suite"
        );
        assert!(out.join(p).exists(), "`{p}` of {case:?}");
    }
}

#[test]
fn a_written_suite_has_the_contract_keys_with_relative_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write_all(tmp.path());
    let out = tmp.path().join("out").canonicalize().unwrap();
    assert_eq!(path, out.join("suite.yaml"));
    let cases = suite(&path);
    assert_eq!(
        cases.keys().collect::<Vec<_>>(),
        vec!["acme-calc-7", "hello", "hello-2", "other"],
        "the second `hello` gets -2"
    );
    for case in cases.values() {
        assert_paths_exist(&out, case);
        assert_eq!(
            case["verify_retries"], 0,
            "one try, as the benchmark scores it"
        );
    }
    let h = &cases["hello"];
    assert_eq!(
        h["environment"]["dockerfile"],
        "../harbor/hello/environment/"
    );
    assert_eq!(h["verify"]["files"], "../harbor/hello/tests/");
    assert_eq!(h["verify"]["run"], "bash /tests/test.sh");
    assert_eq!(h["verify"]["timeout"], "30s");
    assert_eq!(h["solution"], "../harbor/hello/solution/");
    assert_eq!(h["workdir"], "/app");
    assert!(
        h.get("agent_user").is_none(),
        "root is not asked for: {h:?}"
    );
    assert_eq!(h["timeout"], "121s");
    assert_eq!(h["resources"]["memory"], "2048m");
    assert_eq!(h["resources"]["cpus"], 2.0);
    assert_eq!(h["resources"]["disk"], "4096m");
    assert_eq!(h["network"], "none");
    assert_eq!(h["category"], "python");
    let t = &cases["hello-2"];
    assert_eq!(t["environment"]["dockerfile"], "../tb/hello/");
    assert_eq!(
        t["verify"]["files"],
        serde_yaml::from_str::<Value>("[../tb/hello/tests/, ../tb/hello/run-tests.sh]").unwrap()
    );
    assert_eq!(t["verify"]["env"]["TEST_DIR"], "/tests");
    assert_eq!(t["solution"], "hello-2/solution/");
    let solve = out.join("hello-2/solution/solve.sh");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&solve).unwrap().permissions().mode() & 0o777,
        0o755
    );
    assert!(
        std::fs::read_to_string(solve)
            .unwrap()
            .contains("Hello, world!")
    );
    let s = &cases["acme-calc-7"];
    assert_eq!(s["image"], "python:3.13-slim");
    assert_eq!(s["workspace"], "acme-calc-7/repo/");
    assert_eq!(s["workspace_include_ignored"], true);
    assert_eq!(s["verify"]["files"], "acme-calc-7/tests/");
    assert_eq!(s["verify"]["run"], "sh /tests/grade.sh");
    assert!(out.join("acme-calc-7/repo/.git").is_dir());
    assert!(
        out.join("acme-calc-7/tests/files/tests/test_calc.py")
            .is_file()
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("# Written by `saheeli import`"), "{text}");
}

#[test]
fn a_non_empty_out_needs_force_and_force_replaces_only_the_cases() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tb1_task(&tmp.path().join("tb"), "hello", TB1_YAML);
    let out = tmp.path().join("out");
    put(&out, "notes.txt", "mine\n");
    put(&out, "hello/stale.txt", "old\n");
    let opts = Options::default();
    let err = import_to(std::slice::from_ref(&dir), &opts, &out).unwrap_err();
    assert!(format!("{err:#}").contains("--force"), "{err:#}");
    let opts = Options {
        force: true,
        ..Options::default()
    };
    import_to(&[dir], &opts, &out).unwrap();
    assert!(
        out.join("notes.txt").is_file(),
        "other files are left alone"
    );
    assert!(
        !out.join("hello/stale.txt").exists(),
        "the case's folder is replaced"
    );
    assert!(out.join("hello/solution/solve.sh").is_file());
}

#[test]
fn an_out_that_would_replace_a_source_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("tb");
    tb1_task(&ds, "hello", TB1_YAML);
    let opts = Options {
        force: true,
        ..Options::default()
    };
    let err = import_to(std::slice::from_ref(&ds), &opts, &ds).unwrap_err();
    assert!(format!("{err:#}").contains("reads from"), "{err:#}");
    assert!(ds.join("hello/task.yaml").is_file(), "the source is intact");
}

#[test]
fn nothing_importable_is_an_error_listing_why() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = harbor_task(tmp.path(), "gpu", "[environment]\ngpus = 2\n");
    let err = import_to(&[dir], &Options::default(), &tmp.path().join("out")).unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("no task could be imported") && msg.contains("GPUs"),
        "{msg}"
    );
}

/// Runs the written `grade.py` in the checkout with python3 (the verify
/// container's part, without Docker); the reward it writes.
fn grade(out: &Path, reward: &Path) -> serde_json::Value {
    let status = Command::new("python3")
        .arg(out.join("acme-calc-7/tests/grade.py"))
        .current_dir(out.join("acme-calc-7/repo"))
        .env("SAHEELI_REWARD_JSON", reward)
        .status()
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(&std::fs::read(reward).unwrap()).unwrap();
    assert_eq!(
        status.success(),
        value["reward"] == 1,
        "exit status follows the reward"
    );
    value
}

#[test]
fn the_grader_passes_the_gold_patch_and_fails_without_it() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write_all(tmp.path());
    let out = path.parent().unwrap();
    let repo = out.join("acme-calc-7/repo");
    let reward = tmp.path().join("reward.json");
    // Without the fix: the new test fails, the old one passes.
    let r = grade(out, &reward);
    assert_eq!(
        (
            r["reward"].as_u64(),
            r["fail_to_pass"].as_f64(),
            r["pass_to_pass"].as_f64()
        ),
        (Some(0), Some(0.0), Some(1.0))
    );
    // The oracle's solve.sh, pointed at the written patch instead of /solution.
    let solve = std::fs::read_to_string(out.join("acme-calc-7/solution/solve.sh")).unwrap();
    let gold = out.join("acme-calc-7/solution/gold.patch");
    let solve = solve.replace("/solution/gold.patch", &gold.display().to_string());
    let st = Command::new("sh")
        .arg("-c")
        .arg(&solve)
        .current_dir(&repo)
        .status()
        .unwrap();
    assert!(st.success());
    // An agent that broke the test file does not change the grade.
    std::fs::write(
        repo.join("tests/test_calc.py"),
        "def test_add():\n    pass\n",
    )
    .unwrap();
    let r = grade(out, &reward);
    assert_eq!(
        (
            r["reward"].as_u64(),
            r["fail_to_pass"].as_f64(),
            r["pass_to_pass"].as_f64()
        ),
        (Some(1), Some(1.0), Some(1.0))
    );
    let test = std::fs::read_to_string(repo.join("tests/test_calc.py")).unwrap();
    assert!(
        test.contains("assert add(2, 3) == 5"),
        "the test patch's version: {test}"
    );
}

/// The suite reader takes what the writer writes.
#[test]
fn an_imported_suite_parses_with_the_suite_reader() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write_all(tmp.path());
    let text = std::fs::read_to_string(&path).unwrap();
    let suite = crate::eval::parse(&path, &text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(suite.cases.len(), 4);
}
