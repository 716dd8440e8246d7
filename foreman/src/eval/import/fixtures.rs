//! Test fixtures: small tasks in each format, made in a temporary folder,
//! and a local git repository shaped like a SWE-bench instance's.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Writes `text` at `root/rel`, making its folders.
pub(super) fn put(root: &Path, rel: &str, text: &str) -> PathBuf {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

pub(super) const HARBOR_TOML: &str = r#"schema_version = "1.4"

[metadata]
category = "python"

[agent]
timeout_sec = 120.5

[verifier]
timeout_sec = 30
env = { PYTHONDONTWRITEBYTECODE = "1" }

[environment]
cpus = 2
memory_mb = 2048
storage_mb = 4096
network_mode = "no-network"
"#;

/// A Harbor task `root/name` with `task_toml` and the usual files.
pub(super) fn harbor_task(root: &Path, name: &str, task_toml: &str) -> PathBuf {
    let dir = root.join(name);
    put(&dir, "task.toml", task_toml);
    put(&dir, "instruction.md", "Write hello to /app/hello.txt.\n");
    put(
        &dir,
        "environment/Dockerfile",
        "FROM python:3.13-slim\nWORKDIR /app\n",
    );
    put(
        &dir,
        "tests/test.sh",
        "#!/bin/bash\ngrep -q hello /app/hello.txt && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
    );
    put(
        &dir,
        "solution/solve.sh",
        "#!/bin/bash\necho hello > /app/hello.txt\n",
    );
    dir
}

pub(super) const TB1_YAML: &str = "instruction: |-\n  Create /app/hello.txt holding \"Hello, world!\".\n\
author_name: someone\ndifficulty: easy\ncategory: file-operations\ntags: [file]\n\
parser_name: pytest\n";

/// TB1's template compose file: one `client` service built from `Dockerfile`.
pub(super) const TB1_COMPOSE: &str = r#"services:
  client:
    build:
      dockerfile: Dockerfile
    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    container_name: ${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
      - LANG=C.UTF-8
    volumes:
      - ${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}
"#;

/// A Terminal-Bench 1 task `root/name` with `task_yaml` and the usual files.
pub(super) fn tb1_task(root: &Path, name: &str, task_yaml: &str) -> PathBuf {
    let dir = root.join(name);
    put(&dir, "task.yaml", task_yaml);
    put(&dir, "Dockerfile", "FROM python:3.13-slim\nWORKDIR /app\n");
    put(&dir, "docker-compose.yaml", TB1_COMPOSE);
    put(
        &dir,
        "run-tests.sh",
        "#!/bin/bash\npip install pytest\npytest $TEST_DIR/test_outputs.py -rA\n",
    );
    put(
        &dir,
        "tests/test_outputs.py",
        "def test_hello():\n    assert open('/app/hello.txt').read().strip() == 'Hello, world!'\n",
    );
    put(
        &dir,
        "solution.sh",
        "#!/bin/bash\necho 'Hello, world!' > /app/hello.txt\n",
    );
    dir
}

/// Runs git in `dir`; its stdout.
pub(super) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t.invalid",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A test runner that needs only Python: runs the `test_*` functions of
/// the files it is given and prints pytest's `-rA` summary lines.
pub(super) const RUNTESTS: &str = r#"import importlib.util, os, sys
sys.path.insert(0, os.getcwd())
for path in sys.argv[1:]:
    if not path.endswith(".py"):
        continue
    spec = importlib.util.spec_from_file_location("t", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name in sorted(dir(mod)):
        if name.startswith("test_"):
            try:
                getattr(mod, name)()
                print("PASSED %s::%s" % (path, name))
            except Exception as e:
                print("FAILED %s::%s - %r" % (path, name, e))
"#;

/// A SWE-bench-shaped repository in `repos/acme__calc`.
pub(super) struct Repo {
    pub dir: PathBuf,
    pub base: String,
    pub gold: String,
    pub test_patch: String,
}

/// `add` is wrong at the base commit; the gold patch fixes it; the test
/// patch adds `test_add` (and a data file SWE-bench's directives drop). A
/// later commit holds the fix, which a checkout must not carry.
pub(super) fn swebench_repo(repos: &Path) -> Repo {
    let dir = repos.join("acme__calc");
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q"]);
    put(&dir, "calc.py", "def add(a, b):\n    return a - b\n");
    put(
        &dir,
        "tests/test_calc.py",
        "from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n",
    );
    put(&dir, "runtests.py", RUNTESTS);
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "-q", "-m", "base"]);
    let base = git(&dir, &["rev-parse", "HEAD"]).trim().to_string();
    put(&dir, "calc.py", "def add(a, b):\n    return a + b\n");
    let gold = git(&dir, &["diff"]);
    git(&dir, &["checkout", "-q", "--", "."]);
    put(
        &dir,
        "tests/test_calc.py",
        "from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    );
    put(&dir, "tests/data.json", "{}\n");
    git(&dir, &["add", "-A"]);
    let test_patch = git(&dir, &["diff", "--cached"]);
    git(&dir, &["reset", "-q", "--hard"]);
    put(
        &dir,
        "calc.py",
        "def add(a, b):\n    return a + b  # fixed later\n",
    );
    git(&dir, &["commit", "-q", "-am", "the future"]);
    Repo {
        dir,
        base,
        gold,
        test_patch,
    }
}

/// One instance of `repo` as a JSONL line: FAIL_TO_PASS as a JSON string
/// (SWE-bench's datasets), PASS_TO_PASS as a list.
pub(super) fn instance(repo: &Repo, id: &str) -> String {
    serde_json::json!({
        "instance_id": id,
        "repo": "acme/calc",
        "base_commit": repo.base,
        "patch": repo.gold,
        "test_patch": repo.test_patch,
        "problem_statement": "add() subtracts.\n",
        "hints_text": "",
        "created_at": "2026-01-01T00:00:00Z",
        "version": "1.0",
        "FAIL_TO_PASS": "[\"tests/test_calc.py::test_add\"]",
        "PASS_TO_PASS": ["tests/test_calc.py::test_zero"],
        "environment_setup_commit": repo.base,
        "test_cmd": "python3 runtests.py",
    })
    .to_string()
}
