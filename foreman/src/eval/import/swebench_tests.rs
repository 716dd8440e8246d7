use super::*;
use crate::eval::import::fixtures::{Repo, instance, put, swebench_repo};

fn opts(repos: &Path) -> Options {
    Options {
        repos: Some(repos.to_path_buf()),
        image: Some("python:3.13-slim".into()),
        ..Options::default()
    }
}

fn read(file: &Path, opts: &Options) -> anyhow::Result<(Vec<ImportedTask>, Vec<Problem>)> {
    let mut problems = Vec::new();
    let tasks = import_file(file, opts, &mut Ids::default(), &mut problems)?;
    Ok((tasks, problems))
}

fn setup() -> (tempfile::TempDir, Repo) {
    let tmp = tempfile::tempdir().unwrap();
    let repo = swebench_repo(&tmp.path().join("repos"));
    (tmp, repo)
}

fn generated_file<'a>(task: &'a ImportedTask, rel: &str) -> &'a [u8] {
    task.generated
        .iter()
        .find_map(|g| match g {
            Generated::File { path, bytes, .. } if path == Path::new(rel) => Some(bytes.as_slice()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no generated `{rel}` in {:?}", task.generated))
}

#[test]
fn an_instance_maps_to_a_checkout_hidden_tests_and_the_gold_patch() {
    let (tmp, repo) = setup();
    let file = put(
        tmp.path(),
        "instances.jsonl",
        &(instance(&repo, "acme__calc-7") + "\n\n"),
    );
    let (tasks, problems) = read(&file, &opts(&tmp.path().join("repos"))).unwrap();
    assert_eq!(problems, vec![]);
    let [task] = tasks.as_slice() else {
        panic!("{tasks:?}")
    };
    assert_eq!(task.id, "acme-calc-7");
    assert_eq!(task.category, "acme/calc");
    assert_eq!(task.text, "add() subtracts.\n");
    assert_eq!(task.source, format!("{}:1", file.display()));
    assert_eq!(task.image, TaskImage::Image("python:3.13-slim".into()));
    assert_eq!(task.workdir.as_deref(), Some("/testbed"));
    assert!(task.root && task.network_none && task.workspace_include_ignored);
    assert_eq!(task.workspace, Some(Place::Out("acme-calc-7/repo".into())));
    assert!(task.generated.contains(&Generated::Checkout {
        repo: repo.dir.clone(),
        commit: repo.base.clone(),
        path: "acme-calc-7/repo".into(),
    }));
    assert_eq!(
        task.verify.files,
        vec![Place::Out("acme-calc-7/tests".into())]
    );
    assert_eq!(task.verify.run, vec!["sh /tests/grade.sh".to_string()]);
    assert_eq!(task.verify.timeout_secs, Some(1800));
    let config: Value =
        serde_json::from_slice(generated_file(task, "acme-calc-7/tests/config.json")).unwrap();
    assert_eq!(
        config["test_cmd"], "python3 runtests.py",
        "the instance's own test_cmd"
    );
    assert_eq!(
        config["directives"],
        serde_json::json!(["tests/test_calc.py"]),
        "data.json is not a test file"
    );
    assert_eq!(
        config["fail_to_pass"],
        serde_json::json!(["tests/test_calc.py::test_add"])
    );
    assert_eq!(
        config["pass_to_pass"],
        serde_json::json!(["tests/test_calc.py::test_zero"])
    );
    let stored = String::from_utf8_lossy(generated_file(
        task,
        "acme-calc-7/tests/files/tests/test_calc.py",
    ));
    assert!(
        stored.contains("def test_add"),
        "the test file as the test patch leaves it"
    );
    assert_eq!(
        generated_file(task, "acme-calc-7/tests/test.patch"),
        repo.test_patch.as_bytes()
    );
    assert_eq!(
        generated_file(task, "acme-calc-7/solution/gold.patch"),
        repo.gold.as_bytes()
    );
    let solve = String::from_utf8_lossy(generated_file(task, "acme-calc-7/solution/solve.sh"));
    assert!(solve.contains("git apply") && solve.contains("patch --batch --fuzz=5 -p1"));
    assert_eq!(
        task.solution,
        Some(Place::Out("acme-calc-7/solution".into()))
    );
}

#[test]
fn the_test_command_and_image_fall_back_to_the_flags_then_the_defaults() {
    let (tmp, repo) = setup();
    let mut line: Value = serde_json::from_str(&instance(&repo, "acme__calc-1")).unwrap();
    line.as_object_mut().unwrap().remove("test_cmd");
    let file = put(tmp.path(), "i.jsonl", &line.to_string());
    let repos = tmp.path().join("repos");
    let mut o = opts(&repos);
    o.test_cmd = Some("pytest -rA -x".into());
    let (tasks, _) = read(&file, &o).unwrap();
    let config: Value =
        serde_json::from_slice(generated_file(&tasks[0], "acme-calc-1/tests/config.json")).unwrap();
    assert_eq!(config["test_cmd"], "pytest -rA -x");
    let o = Options {
        repos: Some(repos),
        ..Options::default()
    };
    let (tasks, problems) = read(&file, &o).unwrap();
    let config: Value =
        serde_json::from_slice(generated_file(&tasks[0], "acme-calc-1/tests/config.json")).unwrap();
    assert_eq!(config["test_cmd"], DEFAULT_TEST_CMD);
    assert_eq!(
        tasks[0].image,
        TaskImage::Image("sweb.eval.x86_64.acme__calc-1:latest".into())
    );
    assert!(problems[0].what.contains("--image"), "{problems:?}");
}

#[test]
fn a_missing_clone_or_commit_refuses_that_instance_only() {
    let (tmp, repo) = setup();
    let good = instance(&repo, "acme__calc-1");
    let other = good.replace("acme/calc", "other/thing");
    let unknown = instance(&repo, "acme__calc-2")
        .replace(&repo.base, "0123456789abcdef0123456789abcdef01234567");
    let file = put(
        tmp.path(),
        "i.jsonl",
        &format!("{good}\n{other}\n{unknown}\n"),
    );
    let (tasks, problems) = read(&file, &opts(&tmp.path().join("repos"))).unwrap();
    assert_eq!(tasks.len(), 1);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].refused && problems[0].what.contains("other__thing"),
        "{problems:?}"
    );
    assert!(problems[1].what.contains("git -C"), "{problems:?}");
}

#[test]
fn bad_input_names_the_file_line_and_field() {
    let (tmp, repo) = setup();
    let repos = tmp.path().join("repos");
    let file = put(
        tmp.path(),
        "a.jsonl",
        &format!("{}\n{{not json\n", instance(&repo, "x-1")),
    );
    let msg = format!("{:#}", read(&file, &opts(&repos)).unwrap_err());
    assert!(msg.contains("a.jsonl:2"), "{msg}");
    let bad = instance(&repo, "x-1").replace("\"[\\\"tests/test_calc.py::test_add\\\"]\"", "42");
    let file = put(tmp.path(), "b.jsonl", &bad);
    let msg = format!("{:#}", read(&file, &opts(&repos)).unwrap_err());
    assert!(
        msg.contains("b.jsonl:1") && msg.contains("FAIL_TO_PASS"),
        "{msg}"
    );
    let file = put(tmp.path(), "c.jsonl", "{\"instance_id\": \"x\"}\n");
    let msg = format!("{:#}", read(&file, &opts(&repos)).unwrap_err());
    assert!(msg.contains("c.jsonl:1") && msg.contains("repo"), "{msg}");
    let file = put(tmp.path(), "d.jsonl", &instance(&repo, "x-1"));
    let msg = format!("{:#}", read(&file, &Options::default()).unwrap_err());
    assert!(msg.contains("--repos"), "{msg}");
}

#[test]
fn a_json_array_of_instances_is_read_too() {
    let (tmp, repo) = setup();
    let file = put(
        tmp.path(),
        "all.json",
        &format!(
            "[{}, {}]",
            instance(&repo, "acme__calc-1"),
            instance(&repo, "acme__calc-2")
        ),
    );
    let (tasks, problems) = read(&file, &opts(&tmp.path().join("repos"))).unwrap();
    assert_eq!(problems, vec![]);
    assert_eq!(tasks.len(), 2);
}

#[test]
fn unsafe_patch_paths_are_refused() {
    let (tmp, repo) = setup();
    let evil = "diff --git a/../../etc/x b/../../etc/x\n--- a/../../etc/x\n+++ b/../../etc/x\n";
    let mut line: Value = serde_json::from_str(&instance(&repo, "acme__calc-1")).unwrap();
    line["test_patch"] = Value::String(evil.into());
    let file = put(tmp.path(), "i.jsonl", &line.to_string());
    let (tasks, problems) = read(&file, &opts(&tmp.path().join("repos"))).unwrap();
    assert!(tasks.is_empty());
    assert!(problems[0].what.contains("unsafe path"), "{problems:?}");
}
