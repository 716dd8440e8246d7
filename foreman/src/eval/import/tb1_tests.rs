use super::*;
use crate::eval::import::fixtures::{TB1_YAML, put, tb1_task};

/// The task and its problems but the warning every TB1 task gets (TB1
/// runs online), which is checked here.
fn read(dir: &Path) -> (Option<ImportedTask>, Vec<Problem>) {
    let mut problems = Vec::new();
    let task = import_task(dir, &mut Ids::default(), &mut problems).unwrap();
    if task.is_some() {
        let online = problems.remove(0);
        assert!(!online.refused);
        assert!(
            online
                .what
                .starts_with("TB1 runs tasks online: runs offline until egress rules land"),
            "{online}"
        );
    }
    (task, problems)
}

#[test]
fn a_tb1_task_maps_to_the_contract_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tb1_task(tmp.path(), "hello-world", TB1_YAML);
    let (task, problems) = read(&dir);
    let task = task.expect("imported");
    assert_eq!(problems, vec![]);
    assert_eq!(task.id, "hello-world");
    assert_eq!(task.category, "file-operations");
    assert_eq!(
        task.text,
        "Create /app/hello.txt holding \"Hello, world!\"."
    );
    assert_eq!(task.image, TaskImage::Build(Place::Source(dir.clone())));
    assert_eq!(task.workdir.as_deref(), Some("/app"));
    assert!(task.root, "TB1 runs as the image's root");
    assert_eq!(task.timeout_secs, Some(360), "TB1's default agent limit");
    assert_eq!(
        task.env,
        BTreeMap::from([("LANG".to_string(), "C.UTF-8".to_string())]),
        "the compose env without the harness's ${{…}} values"
    );
    assert_eq!(
        task.verify.files,
        vec![
            Place::Source(dir.join("tests")),
            Place::Source(dir.join("run-tests.sh"))
        ]
    );
    assert_eq!(
        task.verify.run,
        vec!["bash /tests/run-tests.sh".to_string()]
    );
    assert_eq!(
        task.verify.timeout_secs,
        Some(60),
        "TB1's default test limit"
    );
    assert_eq!(
        task.verify.env.get("TEST_DIR").map(String::as_str),
        Some("/tests")
    );
    assert_eq!(
        task.solution,
        Some(Place::Out(PathBuf::from("hello-world/solution")))
    );
    assert_eq!(
        task.generated,
        vec![Generated::Copy {
            from: dir.join("solution.sh"),
            path: PathBuf::from("hello-world/solution/solve.sh"),
            executable: true,
        }],
        "only solution.sh is copied, as the oracle's solve.sh"
    );
}

#[test]
fn timeouts_working_dir_and_a_prebuilt_image_are_read() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = format!("{TB1_YAML}max_agent_timeout_sec: 900\nmax_test_timeout_sec: 180.0\n");
    let dir = tb1_task(tmp.path(), "slow", &yaml);
    put(
        &dir,
        "docker-compose.yaml",
        "services:\n  client:\n    image: ghcr.io/laude-institute/t-bench/python-3-13:20250620\n    \
         working_dir: /work\n    environment:\n      FOO: bar\n      N: 3\n",
    );
    std::fs::remove_file(dir.join("Dockerfile")).unwrap();
    let (task, problems) = read(&dir);
    let task = task.expect("imported");
    assert_eq!(problems, vec![]);
    assert_eq!(task.timeout_secs, Some(900));
    assert_eq!(task.verify.timeout_secs, Some(180));
    assert_eq!(
        task.image,
        TaskImage::Image("ghcr.io/laude-institute/t-bench/python-3-13:20250620".into())
    );
    assert_eq!(task.workdir.as_deref(), Some("/work"));
    assert_eq!(task.env.get("N").map(String::as_str), Some("3"));
}

#[test]
fn multi_container_and_missing_tests_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tb1_task(tmp.path(), "web", TB1_YAML);
    put(
        &dir,
        "docker-compose.yaml",
        "services:\n  client:\n    build: .\n  db:\n    image: postgres:16\n",
    );
    let (task, problems) = read(&dir);
    assert!(task.is_none());
    assert!(
        problems[0].refused && problems[0].what.contains("client, db"),
        "{problems:?}"
    );

    let dir = tb1_task(tmp.path(), "untested", TB1_YAML);
    std::fs::remove_file(dir.join("run-tests.sh")).unwrap();
    let (task, problems) = read(&dir);
    assert!(task.is_none());
    assert!(problems[0].what.contains("run-tests.sh"), "{problems:?}");
}

#[test]
fn a_solution_yaml_leaves_no_oracle_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tb1_task(tmp.path(), "keys", TB1_YAML);
    std::fs::remove_file(dir.join("solution.sh")).unwrap();
    put(
        &dir,
        "solution.yaml",
        "- command: echo hi\n  min_timeout_sec: 1\n",
    );
    let (task, problems) = read(&dir);
    let task = task.expect("the task still runs with a model");
    assert_eq!(task.solution, None);
    assert!(!problems[0].refused && problems[0].what.contains("solution.yaml"));
}

#[test]
fn other_parsers_and_same_shell_are_warned() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = TB1_YAML.replace("parser_name: pytest", "parser_name: swebench")
        + "run_tests_in_same_shell: true\n";
    let dir = tb1_task(tmp.path(), "swe", &yaml);
    std::fs::remove_file(dir.join("docker-compose.yaml")).unwrap();
    let (task, problems) = read(&dir);
    assert_eq!(
        task.unwrap().image,
        TaskImage::Build(Place::Source(dir.clone())),
        "no compose file: TB1's template, the task's Dockerfile"
    );
    assert!(
        problems[0].what.contains("`swebench` parser"),
        "{problems:?}"
    );
    assert!(
        problems[1].what.contains("run_tests_in_same_shell"),
        "{problems:?}"
    );
}

#[test]
fn a_bad_task_yaml_names_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tb1_task(tmp.path(), "bad", "difficulty: easy\n");
    let err = import_task(&dir, &mut Ids::default(), &mut Vec::new()).unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("bad/task.yaml") && msg.contains("instruction"),
        "{msg}"
    );
}

#[test]
fn what_run_tests_fetches_is_named_in_the_network_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tb1_task(tmp.path(), "fetching", TB1_YAML);
    put(
        &dir,
        "run-tests.sh",
        "apt-get update\napt-get install -y curl\ncurl -LsSf https://astral.sh/uv/install.sh | sh\n\
         uv add pytest\nuv run pytest $TEST_DIR/test_outputs.py -rA\n",
    );
    let mut problems = Vec::new();
    import_task(&dir, &mut Ids::default(), &mut problems).unwrap();
    assert!(
        problems[0]
            .what
            .ends_with("; `run-tests.sh` fetches with apt-get, curl, uv"),
        "{problems:?}"
    );
}
