//! A Harbor task directory (`task.toml` schema 1.4, or the legacy
//! `version`) as a suite case: `instruction.md` is the text; the image is
//! `[environment].docker_image` or `environment/` built; `tests/` are the
//! hidden verify files run by `bash /tests/test.sh`, which writes Harbor's
//! reward file; `solution/` is the oracle's. Unknown keys are ignored (newer
//! Harbor versions add some); what cannot run here is refused by name.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde::Deserialize;

use super::dockerfile::{self, is_root};
use super::model::{
    Ids, ImportedTask, Limits, Place, Problem, TaskImage, Verify, fetch_note, whole_secs,
};

/// `task.toml`, the parts an import reads.
#[derive(Debug, Default, Deserialize)]
struct TaskToml {
    schema_version: Option<String>,
    version: Option<String>,
    #[serde(default)]
    metadata: toml::Table,
    #[serde(default)]
    agent: Phase,
    #[serde(default)]
    verifier: Verifier,
    #[serde(default)]
    environment: Environment,
    #[serde(default)]
    solution: SolutionTable,
    steps: Option<Vec<toml::Value>>,
}

#[derive(Debug, Default, Deserialize)]
struct Phase {
    timeout_sec: Option<f64>,
    user: Option<toml::Value>,
    network_mode: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct Verifier {
    timeout_sec: Option<f64>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    user: Option<toml::Value>,
    network_mode: Option<String>,
    environment_mode: Option<String>,
    environment: Option<toml::Table>,
}

#[derive(Debug, Default, Deserialize)]
struct Environment {
    docker_image: Option<String>,
    os: Option<String>,
    cpus: Option<f64>,
    memory_mb: Option<u64>,
    storage_mb: Option<u64>,
    /// Legacy `"4G"` / `"512M"`.
    memory: Option<String>,
    storage: Option<String>,
    gpus: Option<u64>,
    gpu_types: Option<Vec<String>>,
    tpu: Option<toml::Value>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    workdir: Option<String>,
    healthcheck: Option<toml::Value>,
    #[serde(default)]
    mcp_servers: Vec<toml::Value>,
    network_mode: Option<String>,
    allow_internet: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
struct SolutionTable {
    #[serde(default)]
    env: BTreeMap<String, String>,
}

/// Reads the Harbor task in `dir`. `Ok(None)`: refused (the reasons are in
/// `problems`). `Err`: the task's files cannot be read or parsed.
pub(crate) fn import_task(
    dir: &Path,
    ids: &mut Ids,
    problems: &mut Vec<Problem>,
) -> anyhow::Result<Option<ImportedTask>> {
    let name = dir_name(dir);
    let toml_path = dir.join("task.toml");
    let text = std::fs::read_to_string(&toml_path)
        .with_context(|| format!("reading `{}`", toml_path.display()))?;
    let cfg: TaskToml = toml::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "`{}`: {}; fix the file (Harbor's schema: `harbor task schema`)",
            toml_path.display(),
            e.to_string().trim_end()
        )
    })?;
    let Some(id) = ids.claim(&name) else {
        anyhow::bail!(
            "task directory `{}`: its name has no letter or digit to make a case id from; rename it",
            dir.display()
        );
    };
    let version = cfg.schema_version.as_deref().or(cfg.version.as_deref());
    if let Some(v) = version.filter(|v| !v.starts_with("1.")) {
        problems.push(Problem::warning(
            &id,
            format!("schema version `{v}` is newer than 1.x; read as 1.4"),
        ));
    }
    let refusals = refusals(dir, &cfg);
    if !refusals.is_empty() {
        problems.extend(refusals.into_iter().map(|r| Problem::refused(&id, r)));
        return Ok(None);
    }
    let instruction = dir.join("instruction.md");
    let text = std::fs::read_to_string(&instruction)
        .with_context(|| format!("reading `{}`", instruction.display()))?;
    if text.trim().is_empty() {
        problems.push(Problem::refused(&id, "`instruction.md` is empty"));
        return Ok(None);
    }
    let category = cfg
        .metadata
        .get("category")
        .and_then(|c| c.as_str())
        .unwrap_or("harbor")
        .to_string();
    let mut task = ImportedTask::new(id, category, text, dir.display().to_string());
    environment(dir, &cfg, &mut task, problems)?;
    verify(dir, &cfg, &mut task, problems);
    if dir.join("solution/solve.sh").is_file() {
        task.solution = Some(Place::Source(dir.join("solution")));
        if !cfg.solution.env.is_empty() {
            problems.push(Problem::warning(
                &task.id,
                "`[solution].env` is not passed to the oracle (no such key yet)",
            ));
        }
    }
    Ok(Some(task))
}

fn dir_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string())
}

/// Why the task cannot run here at all.
fn refusals(dir: &Path, cfg: &TaskToml) -> Vec<String> {
    let env = &cfg.environment;
    let mut out = Vec::new();
    if cfg.steps.as_ref().is_some_and(|s| !s.is_empty()) {
        out.push(
            "a multi-step task (`[[steps]]`) is not supported; only single-step tasks run".into(),
        );
    }
    if env.gpus.is_some_and(|g| g > 0) || env.gpu_types.as_ref().is_some_and(|g| !g.is_empty()) {
        out.push("it asks for GPUs (`[environment].gpus`); containers here get none".into());
    }
    if env.tpu.is_some() {
        out.push("it asks for a TPU (`[environment].tpu`); containers here get none".into());
    }
    if env.os.as_deref().is_some_and(|os| os != "linux") {
        out.push(format!(
            "`[environment].os` is `{}`; only linux containers run",
            env.os.as_deref().unwrap_or_default()
        ));
    }
    if let Some(n) = compose_services(&dir.join("environment/docker-compose.yaml"))
        .filter(|n| n.len() > 1 || n.iter().any(|s| s != "main"))
    {
        out.push(format!(
            "`environment/docker-compose.yaml` has services {}; only a single container runs",
            n.join(", ")
        ));
    }
    if env.docker_image.is_none() && !dir.join("environment/Dockerfile").is_file() {
        out.push(
            "neither `[environment].docker_image` nor `environment/Dockerfile`: nothing to run it in"
                .into(),
        );
    }
    if !dir.join("tests/test.sh").is_file() {
        out.push("`tests/test.sh` is missing: nothing to verify with".into());
    }
    if !dir.join("instruction.md").is_file() {
        out.push("`instruction.md` is missing".into());
    }
    out
}

/// The service names of a compose file, or `None` without one (or with no
/// `services`).
pub(crate) fn compose_services(path: &Path) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(path).ok()?;
    let value: serde_yaml::Value = serde_yaml::from_str(&text).ok()?;
    let services = value.get("services")?.as_mapping()?;
    Some(
        services
            .keys()
            .filter_map(|k| k.as_str().map(str::to_string))
            .collect(),
    )
}

/// The image, working directory, user, limits, network and env.
fn environment(
    dir: &Path,
    cfg: &TaskToml,
    task: &mut ImportedTask,
    problems: &mut Vec<Problem>,
) -> anyhow::Result<()> {
    let env = &cfg.environment;
    let id = task.id.clone();
    let stage = if let Some(image) = &env.docker_image {
        task.image = TaskImage::Image(image.clone());
        dockerfile::Stage::default()
    } else {
        let path = dir.join("environment/Dockerfile");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading `{}`", path.display()))?;
        task.image = TaskImage::Build(Place::Source(dir.join("environment")));
        dockerfile::final_stage(&text)
    };
    if dir.join("environment/docker-compose.yaml").is_file() {
        problems.push(Problem::warning(
            &id,
            "the overrides in `environment/docker-compose.yaml` are not applied",
        ));
    }
    task.workdir = Some(
        env.workdir
            .clone()
            .or(stage.workdir)
            .unwrap_or_else(|| "/app".into()),
    );
    // Harbor runs as the image's user (root unless the Dockerfile says
    // USER) unless `[agent].user` or `[verifier].user` names one.
    let agent_user = cfg.agent.user.as_ref().map(user_name).or(stage.user);
    let verifier_root = cfg
        .verifier
        .user
        .as_ref()
        .map(user_name)
        .is_some_and(|u| is_root(&u));
    task.root = agent_user.as_deref().is_none_or(is_root) || verifier_root;
    if let Some(u) = agent_user.filter(|u| !is_root(u)) {
        problems.push(Problem::warning(
            &id,
            format!("the agent runs as Saheeli's agent user (uid 1000), not `{u}`"),
        ));
    }
    task.timeout_secs = cfg.agent.timeout_sec.and_then(whole_secs);
    task.limits = Limits {
        cpus: env.cpus,
        memory_mb: env
            .memory_mb
            .or_else(|| env.memory.as_deref().and_then(legacy_mb)),
        disk_mb: env
            .storage_mb
            .or_else(|| env.storage.as_deref().and_then(legacy_mb)),
    };
    for (key, given) in [("memory", &env.memory), ("storage", &env.storage)] {
        if let Some(g) = given.as_deref().filter(|g| legacy_mb(g).is_none()) {
            problems.push(Problem::warning(
                &id,
                format!("`[environment].{key}` `{g}` is not a size like `4G` or `512M`; ignored"),
            ));
        }
    }
    network(dir, cfg, task, problems);
    task.env = env.env.clone();
    host_vars(&id, "[environment].env", &task.env, problems);
    if env.healthcheck.is_some() {
        problems.push(Problem::warning(
            &id,
            "`[environment].healthcheck` is not run",
        ));
    }
    if !env.mcp_servers.is_empty() {
        problems.push(Problem::warning(
            &id,
            "`[environment].mcp_servers` are not offered; configure them as capabilities",
        ));
    }
    Ok(())
}

/// `[agent].user` as a string (Harbor takes a name or a uid).
fn user_name(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

/// Harbor's legacy sizes: `"4G"` → 4096, `"512M"` → 512 (MB).
fn legacy_mb(s: &str) -> Option<u64> {
    let s = s.trim().to_ascii_uppercase();
    let s = s.strip_suffix('B').unwrap_or(&s);
    let (num, factor) = match s.chars().last()? {
        'G' => (&s[..s.len() - 1], 1024.0),
        'M' => (&s[..s.len() - 1], 1.0),
        'K' => (&s[..s.len() - 1], 1.0 / 1024.0),
        _ => (s, 1.0 / (1024.0 * 1024.0)),
    };
    let n: f64 = num.trim().parse().ok()?;
    (n.is_finite() && n > 0.0).then(|| (n * factor).ceil() as u64)
}

/// `no-network` (or `allow_internet = false`) is `network: none`; Harbor's
/// default `public` and `allowlist` run offline until egress rules land.
fn network(dir: &Path, cfg: &TaskToml, task: &mut ImportedTask, problems: &mut Vec<Problem>) {
    let env = &cfg.environment;
    let base = env
        .network_mode
        .clone()
        .or_else(|| {
            env.allow_internet
                .map(|open| if open { "public" } else { "no-network" }.to_string())
        })
        .unwrap_or_else(|| "public".into());
    let agent = cfg
        .agent
        .network_mode
        .clone()
        .unwrap_or_else(|| base.clone());
    let verify = cfg
        .verifier
        .network_mode
        .clone()
        .unwrap_or_else(|| base.clone());
    task.network_none = agent == "no-network";
    let phases = match (agent != "no-network", verify != "no-network") {
        (true, true) if agent == verify => format!("network `{agent}` for the agent and verify"),
        (true, true) => format!("network `{agent}` for the agent and `{verify}` for verify"),
        (true, false) => format!("network `{agent}` for the agent"),
        (false, true) => format!("network `{verify}` for verify"),
        (false, false) => return,
    };
    problems.push(Problem::warning(
        &task.id,
        format!(
            "{phases} (Harbor's default is `public`): runs offline until egress rules land{}",
            fetch_note(&dir.join("tests/test.sh"), "tests/test.sh")
        ),
    ));
}

/// Harbor resolves `${VAR}` in env values from the host when it runs; an
/// import writes them as they are.
fn host_vars(id: &str, table: &str, env: &BTreeMap<String, String>, problems: &mut Vec<Problem>) {
    let named: Vec<&str> = env
        .iter()
        .filter(|(_, v)| v.contains("${"))
        .map(|(k, _)| k.as_str())
        .collect();
    if !named.is_empty() {
        problems.push(Problem::warning(
            id,
            format!(
                "`{table}` {} name host variables (`${{…}}`); written as they are, not resolved",
                named.join(", ")
            ),
        ));
    }
}

/// `tests/` hidden until verify; `bash /tests/test.sh` writes the reward.
fn verify(dir: &Path, cfg: &TaskToml, task: &mut ImportedTask, problems: &mut Vec<Problem>) {
    let v = &cfg.verifier;
    task.verify = Verify {
        files: vec![Place::Source(dir.join("tests"))],
        run: vec!["bash /tests/test.sh".into()],
        timeout_secs: whole_secs(v.timeout_sec.unwrap_or(600.0)),
        env: v.env.clone(),
    };
    host_vars(&task.id, "[verifier].env", &v.env, problems);
    let separate = v.environment_mode.as_deref() == Some("separate")
        || v.environment.is_some()
        || dir.join("tests/Dockerfile").is_file();
    if separate {
        problems.push(Problem::warning(
            &task.id,
            "a separate verifier image (`tests/Dockerfile` or `[verifier.environment]`) is not \
             built; verify runs in a fresh container of the task's image",
        ));
    }
}

#[cfg(test)]
#[path = "harbor_tests.rs"]
mod tests;
