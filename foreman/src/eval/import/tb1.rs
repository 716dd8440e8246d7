//! A Terminal-Bench 1 task directory (`task.yaml`) as a suite case:
//! `instruction` is the text; the image is built from the task's
//! `Dockerfile` (the compose file's `client` service); `tests/` and
//! `run-tests.sh` are hidden until verify, which runs `bash
//! /tests/run-tests.sh` with `TEST_DIR=/tests` and passes on its exit status
//! (as Harbor's TB1 mapper scores it); `solution.sh` becomes the oracle's
//! `solve.sh`. Nothing of the task is copied but `solution.sh`: the suite
//! names the task's own files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;
use serde_yaml::Value;

use super::dockerfile::{self, is_root};
use super::model::{
    Generated, Ids, ImportedTask, Place, Problem, TaskImage, Verify, fetch_note, whole_secs,
};

/// `task.yaml`, the parts an import reads (TB1's defaults: 360 s for the
/// agent, 60 s for the tests).
#[derive(Debug, Deserialize)]
struct TaskYaml {
    instruction: String,
    category: Option<String>,
    max_agent_timeout_sec: Option<f64>,
    max_test_timeout_sec: Option<f64>,
    parser_name: Option<String>,
    run_tests_in_same_shell: Option<bool>,
}

/// The compose file's main service, the parts that shape the container.
#[derive(Debug, Default)]
struct Client {
    /// The build context (relative to the task) and Dockerfile name.
    build: Option<(PathBuf, String)>,
    image: Option<String>,
    env: BTreeMap<String, String>,
    working_dir: Option<String>,
}

/// Reads the TB1 task in `dir`. `Ok(None)`: refused (the reasons are in
/// `problems`). `Err`: its files cannot be read or parsed.
pub(crate) fn import_task(
    dir: &Path,
    ids: &mut Ids,
    problems: &mut Vec<Problem>,
) -> anyhow::Result<Option<ImportedTask>> {
    let yaml_path = dir.join("task.yaml");
    let text = std::fs::read_to_string(&yaml_path)
        .with_context(|| format!("reading `{}`", yaml_path.display()))?;
    let cfg: TaskYaml = serde_yaml::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "`{}`: {e}; a TB1 task.yaml needs at least `instruction`",
            yaml_path.display()
        )
    })?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Some(id) = ids.claim(&name) else {
        anyhow::bail!(
            "task directory `{}`: its name has no letter or digit to make a case id from; rename it",
            dir.display()
        );
    };
    let compose = dir.join("docker-compose.yaml");
    let client = match client(&compose) {
        Ok(c) => c,
        Err(why) => {
            problems.push(Problem::refused(&id, why));
            return Ok(None);
        }
    };
    let mut refused = Vec::new();
    if !dir.join("run-tests.sh").is_file() {
        refused.push("`run-tests.sh` is missing: nothing to verify with".to_string());
    }
    if cfg.instruction.trim().is_empty() {
        refused.push("`instruction` in `task.yaml` is empty".into());
    }
    let image = match (&client.build, &client.image) {
        (Some((context, file)), _) => {
            let context = if context == Path::new(".") {
                dir.to_path_buf()
            } else {
                dir.join(context)
            };
            if file != "Dockerfile" {
                refused.push(format!(
                    "the client service builds `{file}`; only a file named `Dockerfile` is built"
                ));
            } else if !context.join("Dockerfile").is_file() {
                refused.push(format!(
                    "`{}` is missing",
                    context.join("Dockerfile").display()
                ));
            }
            TaskImage::Build(Place::Source(context))
        }
        (None, Some(image)) => TaskImage::Image(image.clone()),
        (None, None) => {
            refused.push("the client service has neither `build` nor `image`".into());
            TaskImage::Default
        }
    };
    if !refused.is_empty() {
        problems.extend(refused.into_iter().map(|r| Problem::refused(&id, r)));
        return Ok(None);
    }
    let category = cfg
        .category
        .clone()
        .unwrap_or_else(|| "software_engineering".into());
    let mut task = ImportedTask::new(
        id,
        category,
        cfg.instruction.clone(),
        dir.display().to_string(),
    );
    let stage = match &image {
        TaskImage::Build(Place::Source(context)) => {
            let path = context.join("Dockerfile");
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading `{}`", path.display()))?;
            dockerfile::final_stage(&text)
        }
        _ => dockerfile::Stage::default(),
    };
    task.image = image;
    task.workdir = Some(
        client
            .working_dir
            .clone()
            .or(stage.workdir)
            .unwrap_or_else(|| "/app".into()),
    );
    // TB1 runs the agent as the image's user: root unless the Dockerfile says USER.
    task.root = stage.user.as_deref().is_none_or(is_root);
    if let Some(u) = stage.user.filter(|u| !is_root(u)) {
        problems.push(Problem::warning(
            &task.id,
            format!("the agent runs as Saheeli's agent user (uid 1000), not `{u}`"),
        ));
    }
    task.timeout_secs = whole_secs(cfg.max_agent_timeout_sec.unwrap_or(360.0));
    task.env = client.env;
    let mut files = Vec::new();
    if dir.join("tests").is_dir() {
        files.push(Place::Source(dir.join("tests")));
    }
    files.push(Place::Source(dir.join("run-tests.sh")));
    task.verify = Verify {
        files,
        run: vec!["bash /tests/run-tests.sh".into()],
        timeout_secs: whole_secs(cfg.max_test_timeout_sec.unwrap_or(60.0)),
        env: BTreeMap::from([("TEST_DIR".to_string(), "/tests".to_string())]),
    };
    // TB1 containers are on Docker's default network in both phases.
    problems.push(Problem::warning(
        &task.id,
        format!(
            "TB1 runs tasks online: runs offline until egress rules land{}",
            fetch_note(&dir.join("run-tests.sh"), "run-tests.sh")
        ),
    ));
    if let Some(parser) = cfg.parser_name.as_deref().filter(|p| *p != "pytest") {
        problems.push(Problem::warning(
            &task.id,
            format!("passes on `run-tests.sh`'s exit status, not TB1's `{parser}` parser"),
        ));
    }
    if cfg.run_tests_in_same_shell == Some(true) {
        problems.push(Problem::warning(
            &task.id,
            "`run_tests_in_same_shell`: the tests run in a fresh verify container, not the agent's shell",
        ));
    }
    solution(dir, &mut task, problems);
    Ok(Some(task))
}

/// `solution.sh` copied as the oracle's `solve.sh`; a `solution.yaml`
/// (keystrokes for TB1's tmux session) cannot be replayed.
fn solution(dir: &Path, task: &mut ImportedTask, problems: &mut Vec<Problem>) {
    let script = dir.join("solution.sh");
    if script.is_file() {
        let out = PathBuf::from(&task.id).join("solution");
        task.generated.push(Generated::Copy {
            from: script,
            path: out.join("solve.sh"),
            executable: true,
        });
        task.solution = Some(Place::Out(out));
    } else if dir.join("solution.yaml").is_file() {
        problems.push(Problem::warning(
            &task.id,
            "`solution.yaml` (keystrokes for a tmux session) cannot be replayed: no oracle; \
             write a `solution.sh`",
        ));
    }
}

/// The compose file's one service. Without a compose file, TB1's template:
/// build `Dockerfile` in the task directory. `Err`: why it cannot run.
fn client(path: &Path) -> Result<Client, String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(Client {
            build: Some((PathBuf::from("."), "Dockerfile".into())),
            ..Client::default()
        });
    };
    let doc: Value = serde_yaml::from_str(&text)
        .map_err(|e| format!("`docker-compose.yaml` does not parse: {e}"))?;
    let services = doc
        .get("services")
        .and_then(Value::as_mapping)
        .ok_or("`docker-compose.yaml` has no `services`")?;
    if services.len() != 1 {
        let names: Vec<&str> = services.keys().filter_map(Value::as_str).collect();
        return Err(format!(
            "`docker-compose.yaml` has services {}; only a single container runs",
            names.join(", ")
        ));
    }
    let (_, svc) = services.iter().next().expect("one service");
    let mut client = Client::default();
    match svc.get("build") {
        Some(Value::String(ctx)) => client.build = Some((ctx.into(), "Dockerfile".into())),
        Some(Value::Mapping(b)) => {
            let field = |k: &str| b.get(k).and_then(Value::as_str).map(str::to_string);
            client.build = Some((
                field("context").unwrap_or_else(|| ".".into()).into(),
                field("dockerfile").unwrap_or_else(|| "Dockerfile".into()),
            ));
        }
        _ => {}
    }
    // `${T_BENCH_…}` names are the harness's own; a literal image is real.
    client.image = svc
        .get("image")
        .and_then(Value::as_str)
        .filter(|i| !i.contains("${"))
        .map(str::to_string);
    client.working_dir = svc
        .get("working_dir")
        .and_then(Value::as_str)
        .map(str::to_string);
    client.env = compose_env(svc.get("environment"));
    Ok(client)
}

/// A service's `environment` (a list of `K=V` or a map), without the
/// harness's `${…}` values (`TEST_DIR` is set for verify anyway).
fn compose_env(env: Option<&Value>) -> BTreeMap<String, String> {
    let pairs: Vec<(String, String)> = match env {
        Some(Value::Sequence(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        Some(Value::Mapping(m)) => m
            .iter()
            .filter_map(|(k, v)| {
                let v = match v {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    _ => return None,
                };
                Some((k.as_str()?.to_string(), v))
            })
            .collect(),
        _ => Vec::new(),
    };
    pairs
        .into_iter()
        .filter(|(_, v)| !v.contains("${"))
        .collect()
}

#[cfg(test)]
#[path = "tb1_tests.rs"]
mod tests;
