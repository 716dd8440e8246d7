//! SWE-bench instances (JSONL, or a JSON array) as suite cases. The
//! repository comes from a local clone (`--repos DIR`); its base commit is
//! checked out as the case's workspace (`workdir: /testbed`, SWE-bench's
//! place). The gold patch is the oracle's solution. Hidden until verify: the
//! test patch, the test files as it leaves them, and a grading script that
//! puts them in place, runs the test command on the test patch's files,
//! reads pytest's `-rA` summary as SWE-bench does and writes
//! `/logs/verifier/reward.json` (1 iff every FAIL_TO_PASS and PASS_TO_PASS
//! test passed).

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;

use super::git;
use super::model::{
    DEFAULT_TEST_CMD, Generated, Ids, ImportedTask, Options, Place, Problem, TaskImage, Verify,
};

/// The grading script, run in the verify container by `grade.sh`.
const GRADE_PY: &str = include_str!("grade.py");

/// SWE-bench's eval script timeout (`--timeout`, 1800 s).
const VERIFY_SECS: u64 = 1800;

/// Extensions SWE-bench drops from the test directives.
const NON_TEST_EXTS: &[&str] = &[
    ".json", ".png", ".csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml",
];

/// One instance; fields an import does not use are ignored.
#[derive(Debug, Deserialize)]
struct Instance {
    instance_id: String,
    repo: String,
    base_commit: String,
    #[serde(default)]
    patch: String,
    test_patch: String,
    problem_statement: String,
    #[serde(rename = "FAIL_TO_PASS")]
    fail_to_pass: Value,
    #[serde(rename = "PASS_TO_PASS", default)]
    pass_to_pass: Value,
    /// Not SWE-bench's: a test command for this instance.
    test_cmd: Option<String>,
    /// SWE-bench 5: the instance's image.
    image: Option<String>,
    /// SWE-bench 5: the log parser's name.
    log_parser: Option<String>,
}

/// Reads every instance of `path` (JSONL, or one JSON array).
pub(crate) fn import_file(
    path: &Path,
    opts: &Options,
    ids: &mut Ids,
    problems: &mut Vec<Problem>,
) -> anyhow::Result<Vec<ImportedTask>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading `{}`", path.display()))?;
    let repos = opts.repos.as_deref().with_context(|| {
        format!(
            "`{}`: SWE-bench instances need their repositories: give `--repos DIR`, where \
             `DIR/<owner>__<name>` (or `DIR/<name>`) is a clone",
            path.display()
        )
    })?;
    let mut tasks = Vec::new();
    for (line, value) in records(path, &text)? {
        let where_ = format!("{}:{line}", path.display());
        let inst: Instance = serde_json::from_value(value)
            .map_err(|e| anyhow::anyhow!("`{where_}`: {e}; an instance needs `instance_id`, `repo`, `base_commit`, `test_patch`, `problem_statement` and `FAIL_TO_PASS`"))?;
        if let Some(task) = instance(&inst, &where_, repos, opts, ids, problems)? {
            tasks.push(task);
        }
    }
    Ok(tasks)
}

/// `(line, object)` of each record: a JSON array's elements (all on the
/// array's first line), or one object a non-blank line.
fn records(path: &Path, text: &str) -> anyhow::Result<Vec<(usize, Value)>> {
    if text.trim_start().starts_with('[') {
        let all: Vec<Value> =
            serde_json::from_str(text).map_err(|e| anyhow::anyhow!("`{}`: {e}", path.display()))?;
        let first = text.lines().position(|l| !l.trim().is_empty()).unwrap_or(0) + 1;
        return Ok(all.into_iter().map(|v| (first, v)).collect());
    }
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| {
            anyhow::anyhow!(
                "`{}:{}`: {e}; each line must be one JSON object",
                path.display(),
                i + 1
            )
        })?;
        out.push((i + 1, v));
    }
    Ok(out)
}

/// FAIL_TO_PASS / PASS_TO_PASS: a list, or a JSON string holding one.
fn test_list(v: &Value, field: &str, where_: &str) -> anyhow::Result<Vec<String>> {
    let bad = || {
        anyhow::anyhow!(
            "`{where_}`: `{field}` must be a list of test ids or a JSON string of one (`\"[\\\"tests/test_x.py::test_y\\\"]\"`)"
        )
    };
    let list = match v {
        Value::Null => return Ok(Vec::new()),
        Value::String(s) => serde_json::from_str::<Value>(s).map_err(|_| bad())?,
        other => other.clone(),
    };
    let Value::Array(items) = list else {
        return Err(bad());
    };
    items
        .into_iter()
        .map(|i| match i {
            Value::String(s) => Ok(s),
            _ => Err(bad()),
        })
        .collect()
}

/// The local clone of `owner/name`: `DIR/owner__name`, else `DIR/name`.
fn clone_of(repos: &Path, repo: &str) -> Option<PathBuf> {
    let name = repo.rsplit('/').next().unwrap_or(repo);
    [repo.replace('/', "__"), name.to_string()]
        .into_iter()
        .filter(|n| git::safe_path(n))
        .map(|n| repos.join(n))
        .find(|p| p.is_dir() && git::is_repo(p))
}

fn instance(
    inst: &Instance,
    where_: &str,
    repos: &Path,
    opts: &Options,
    ids: &mut Ids,
    problems: &mut Vec<Problem>,
) -> anyhow::Result<Option<ImportedTask>> {
    let f2p = test_list(&inst.fail_to_pass, "FAIL_TO_PASS", where_)?;
    let p2p = test_list(&inst.pass_to_pass, "PASS_TO_PASS", where_)?;
    let commit = &inst.base_commit;
    if !(4..=64).contains(&commit.len()) || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
        anyhow::bail!("`{where_}`: `base_commit` `{commit}` is not a commit id (hex)");
    }
    let Some(id) = ids.claim(&inst.instance_id) else {
        anyhow::bail!(
            "`{where_}`: `instance_id` `{}` has no letter or digit",
            inst.instance_id
        );
    };
    let refuse = |problems: &mut Vec<Problem>, why: String| {
        problems.push(Problem::refused(&id, why));
        Ok(None)
    };
    let Some(clone) = clone_of(repos, &inst.repo) else {
        let name = inst.repo.rsplit('/').next().unwrap_or(&inst.repo);
        return refuse(
            problems,
            format!(
                "no clone of `{}` in `{}` (looked for `{}` and `{name}`): `git clone` it there",
                inst.repo,
                repos.display(),
                inst.repo.replace('/', "__"),
            ),
        );
    };
    let Some(full) = git::resolve(&clone, commit) else {
        return refuse(
            problems,
            format!(
                "base commit `{commit}` is not in `{}`: fetch it (`git -C {} fetch origin {commit}`)",
                clone.display(),
                clone.display()
            ),
        );
    };
    let test_paths = git::touched(&inst.test_patch);
    let gold_paths = git::touched(&inst.patch);
    if test_paths.is_empty() {
        return refuse(problems, "`test_patch` changes no file".into());
    }
    if let Some(bad) = test_paths
        .iter()
        .chain(&gold_paths)
        .find(|p| !git::safe_path(p))
    {
        return refuse(problems, format!("a patch names the unsafe path `{bad}`"));
    }
    let test_files = match git::patched(&clone, &full, &inst.test_patch) {
        Ok(files) => files,
        Err(e) => {
            return refuse(
                problems,
                format!("`test_patch` does not apply to `{commit}`: {e}"),
            );
        }
    };
    let mut task = ImportedTask::new(
        id.clone(),
        inst.repo.clone(),
        inst.problem_statement.clone(),
        where_.to_string(),
    );
    task.image = TaskImage::Image(match inst.image.clone().or_else(|| opts.image.clone()) {
        Some(image) => image,
        None => {
            let image = format!(
                "sweb.eval.x86_64.{}:latest",
                inst.instance_id.to_ascii_lowercase()
            );
            problems.push(Problem::warning(
                &id,
                format!("no image given: `{image}` (SWE-bench's name) must exist locally; give `--image` for another"),
            ));
            image
        }
    });
    task.workdir = Some("/testbed".into());
    // SWE-bench's harness does everything as root in its images.
    task.root = true;
    task.network_none = true;
    let dir = PathBuf::from(&id);
    task.generated.push(Generated::Checkout {
        repo: clone.clone(),
        commit: full.clone(),
        path: dir.join("repo"),
    });
    task.workspace = Some(Place::Out(dir.join("repo")));
    task.workspace_include_ignored = true;
    if let Some(parser) = inst.log_parser.as_deref().filter(|p| !p.contains("pytest")) {
        problems.push(Problem::warning(
            &id,
            format!("`log_parser` `{parser}`: graded with the pytest `-rA` parser"),
        ));
    }
    let test_cmd = inst
        .test_cmd
        .clone()
        .or_else(|| opts.test_cmd.clone())
        .unwrap_or_else(|| DEFAULT_TEST_CMD.to_string());
    hidden_tests(&mut task, inst, &test_cmd, test_files, &f2p, &p2p);
    gold(&mut task, inst, &clone, &full, problems);
    Ok(Some(task))
}

/// The verify files: `test.patch`, the test files as it leaves them,
/// `config.json`, `grade.py` and `grade.sh`.
fn hidden_tests(
    task: &mut ImportedTask,
    inst: &Instance,
    test_cmd: &str,
    files: Vec<git::Patched>,
    f2p: &[String],
    p2p: &[String],
) {
    let dir = PathBuf::from(&task.id).join("tests");
    let directives: Vec<String> = git::headers(&inst.test_patch)
        .into_iter()
        .map(|(_, b)| b)
        .filter(|b| !NON_TEST_EXTS.iter().any(|ext| b.ends_with(ext)))
        .collect();
    let listed: Vec<Value> = files
        .iter()
        .map(|(path, bytes)| serde_json::json!({ "path": path, "stored": bytes.is_some() }))
        .collect();
    let config = serde_json::json!({
        "instance_id": inst.instance_id,
        "test_cmd": test_cmd,
        "directives": directives,
        "files": listed,
        "fail_to_pass": f2p,
        "pass_to_pass": p2p,
    });
    let mut file = |name: &str, bytes: Vec<u8>, executable: bool| {
        task.generated.push(Generated::File {
            path: dir.join(name),
            bytes,
            executable,
        });
    };
    file("test.patch", inst.test_patch.clone().into_bytes(), false);
    file(
        "config.json",
        serde_json::to_vec_pretty(&config).expect("a JSON value serializes"),
        false,
    );
    file("grade.py", GRADE_PY.as_bytes().to_vec(), true);
    file("grade.sh", grade_sh(&inst.instance_id).into_bytes(), true);
    for (path, bytes) in files {
        if let Some(bytes) = bytes {
            file(&format!("files/{path}"), bytes, false);
        }
    }
    task.verify = Verify {
        files: vec![Place::Out(dir)],
        run: vec!["sh /tests/grade.sh".into()],
        timeout_secs: Some(VERIFY_SECS),
        env: Default::default(),
    };
}

/// Runs `grade.py` in SWE-bench's conda env `testbed` when the image has
/// one (its Python holds the project's dependencies), else with `python3`.
fn grade_sh(instance_id: &str) -> String {
    format!(
        "#!/bin/sh\n\
         # Grades SWE-bench instance {instance_id} (written by `saheeli import`).\n\
         if [ -f /opt/miniconda3/bin/activate ] && command -v bash >/dev/null 2>&1; then\n\
         \x20 exec bash -c '. /opt/miniconda3/bin/activate && conda activate testbed && exec python3 /tests/grade.py'\n\
         fi\n\
         exec python3 /tests/grade.py\n"
    )
}

/// The gold patch as the oracle's `solve.sh` (`git apply`, then `patch
/// --fuzz=5` as SWE-bench's harness falls back); a warning when it does not
/// apply cleanly to the base commit.
fn gold(
    task: &mut ImportedTask,
    inst: &Instance,
    clone: &Path,
    commit: &str,
    problems: &mut Vec<Problem>,
) {
    if inst.patch.trim().is_empty() {
        problems.push(Problem::warning(&task.id, "no gold `patch`: no oracle"));
        return;
    }
    if let Err(e) = git::patched(clone, commit, &inst.patch) {
        problems.push(Problem::warning(
            &task.id,
            format!("the gold `patch` does not apply with `git apply` ({e}); the oracle tries `patch --fuzz=5`"),
        ));
    }
    let dir = PathBuf::from(&task.id).join("solution");
    task.generated.push(Generated::File {
        path: dir.join("gold.patch"),
        bytes: inst.patch.clone().into_bytes(),
        executable: false,
    });
    task.generated.push(Generated::File {
        path: dir.join("solve.sh"),
        bytes: solve_sh(&inst.instance_id).into_bytes(),
        executable: true,
    });
    task.solution = Some(Place::Out(dir));
}

fn solve_sh(instance_id: &str) -> String {
    format!(
        "#!/bin/sh\n\
         # The gold patch of SWE-bench instance {instance_id} (written by `saheeli import`),\n\
         # applied in the working directory as SWE-bench's harness does.\n\
         if command -v git >/dev/null 2>&1 && git apply --verbose /solution/gold.patch; then\n\
         \x20 exit 0\n\
         fi\n\
         exec patch --batch --fuzz=5 -p1 -i /solution/gold.patch\n"
    )
}

#[cfg(test)]
#[path = "swebench_tests.rs"]
mod tests;
