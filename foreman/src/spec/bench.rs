//! Issue 49's keys, checked: the task's own image (`image:`,
//! `environment:`), `workdir:`, `agent_user:`, the hidden tests and reward
//! of `verify: { files, run, reward, env }`, `pass_reward:`, and the
//! oracle (`agent: oracle` with `solution:`).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use anyhow::bail;
use saheeli_protocol::front_matter::{AgentUser, FrontMatter};
use saheeli_protocol::{Agent, AgentName, ReplayScript};

use crate::config::Config;
use crate::task::TaskImage;

/// The issue 49 keys of one task, checked; paths absolute.
#[derive(Debug, Default)]
pub(super) struct BenchKeys {
    pub image: Option<TaskImage>,
    pub workdir: Option<String>,
    pub agent_user: AgentUser,
    pub hidden: Vec<PathBuf>,
    pub reward: Option<String>,
    pub env: BTreeMap<String, String>,
    pub pass_reward: f64,
    pub solution: Option<PathBuf>,
}

impl BenchKeys {
    /// Checks every key; `dir` is what relative paths resolve against.
    pub fn checked(prompt: &Path, dir: &Path, a: &FrontMatter) -> anyhow::Result<BenchKeys> {
        let p = prompt.display();
        let image = match (a.image.clone(), a.environment.as_ref()) {
            (Some(_), Some(_)) => {
                bail!("{p}: `image` and `environment` both name the task's image; keep one")
            }
            (Some(i), None) => {
                if i.trim().is_empty() || i.len() > 512 || i.chars().any(char::is_whitespace) {
                    bail!(
                        "{p}: `image` `{i}` is not an image name; write a tag like `python:3.13-slim`"
                    );
                }
                Some(TaskImage::Named(i))
            }
            (None, Some(e)) => {
                let d = existing(prompt, dir, &e.dockerfile, "environment.dockerfile")?;
                if !d.join("Dockerfile").is_file() {
                    bail!(
                        "{p}: `environment.dockerfile` `{}` has no `Dockerfile`; name the directory \
                         that holds it (its build context)",
                        e.dockerfile.display()
                    );
                }
                Some(TaskImage::Dockerfile(d))
            }
            (None, None) => None,
        };
        let workdir = a
            .workdir
            .as_deref()
            .map(|w| check_workdir(prompt, w))
            .transpose()?;
        let mut keys = BenchKeys {
            image,
            workdir,
            agent_user: a.agent_user.unwrap_or_default(),
            pass_reward: a.pass_reward.unwrap_or(1.0),
            ..BenchKeys::default()
        };
        if !keys.pass_reward.is_finite() || !(0.0..=1e9).contains(&keys.pass_reward) {
            bail!("{p}: `pass_reward` must be a number from 0 (e.g. 1.0, the default)");
        }
        if let Some(v) = &a.verify {
            for f in &v.files {
                keys.hidden.push(existing(prompt, dir, f, "verify.files")?);
            }
            if let Some(r) = &v.reward {
                check_reward_path(prompt, r)?;
                keys.reward = Some(r.clone());
            }
            for k in v.env.keys() {
                if k.is_empty() || k.contains('=') || k.contains('\0') {
                    bail!("{p}: `verify.env` has a bad name `{k}`");
                }
            }
            keys.env = v.env.clone();
        }
        if let Some(s) = &a.solution {
            let d = existing(prompt, dir, s, "solution")?;
            if !d.join("solve.sh").is_file() {
                bail!(
                    "{p}: `solution` `{}` has no `solve.sh`; the oracle runs `solve.sh` from it",
                    s.display()
                );
            }
            keys.solution = Some(d);
        }
        Ok(keys)
    }
}

/// A path named by a key: resolved against `dir`, present.
fn existing(prompt: &Path, dir: &Path, path: &Path, key: &str) -> anyhow::Result<PathBuf> {
    let full = dir.join(path);
    match std::fs::canonicalize(&full) {
        Ok(p) => Ok(p),
        Err(e) => bail!(
            "{}: `{key}` `{}` cannot be read ({e}); name a path relative to the prompt or suite",
            prompt.display(),
            path.display()
        ),
    }
}

/// `workdir:`: absolute, clean, and not a path the container needs for
/// itself.
fn check_workdir(prompt: &Path, w: &str) -> anyhow::Result<String> {
    let p = prompt.display();
    let path = Path::new(w);
    let clean = path.is_absolute()
        && path
            .components()
            .skip(1)
            .all(|c| matches!(c, Component::Normal(_)))
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+".contains(&b));
    if !clean || path.components().count() < 2 || w.len() > 256 {
        bail!(
            "{p}: `workdir` `{w}` must be an absolute path like `/app`, without `..`, spaces or `/` alone"
        );
    }
    const RESERVED: [&str; 11] = [
        "/workspace",
        "/tmp",
        "/proc",
        "/sys",
        "/dev",
        "/run",
        "/etc",
        "/usr",
        "/bin",
        "/lib",
        "/.saheeli",
    ];
    let trimmed = w.trim_end_matches('/');
    if RESERVED
        .iter()
        .any(|r| trimmed == *r || (trimmed.starts_with(r) && trimmed[r.len()..].starts_with('/')))
        || trimmed == "/logs"
        || trimmed.starts_with("/logs/")
        || trimmed == "/tests"
        || trimmed == "/solution"
    {
        bail!(
            "{p}: `workdir` `{w}` is a path the container needs for itself; pick another \
             (e.g. `/app`), or leave it unset to work in /workspace"
        );
    }
    Ok(trimmed.to_string())
}

/// `verify.reward`: an absolute path in the verify container.
fn check_reward_path(prompt: &Path, r: &str) -> anyhow::Result<()> {
    let path = Path::new(r);
    let ok = path.is_absolute()
        && path
            .components()
            .skip(1)
            .all(|c| matches!(c, Component::Normal(_)))
        && r.len() <= 512
        && !r.chars().any(|c| c.is_control());
    if !ok {
        bail!(
            "{}: `verify.reward` `{r}` must be an absolute path in the verify container, \
             e.g. /logs/verifier/reward.txt",
            prompt.display()
        );
    }
    Ok(())
}

/// The task's issue 49 keys, checked, and the model it runs with: the
/// oracle's scripted turns (`agent: oracle`), a replay script, or a model.
pub(super) fn resolve(
    cfg: &Config,
    prompt: &Path,
    dir: &Path,
    fm: &FrontMatter,
    timeout: std::time::Duration,
) -> anyhow::Result<(BenchKeys, String, Option<ReplayScript>)> {
    let keys = BenchKeys::checked(prompt, dir, fm)?;
    let oracle = check_oracle(prompt, fm.agent.as_ref(), keys.solution.as_deref())?;
    if oracle {
        let script = oracle_script(timeout.as_secs().max(1), keys.workdir.as_deref());
        return Ok((keys, "replay:oracle".to_string(), Some(script)));
    }
    let model = fm
        .model
        .clone()
        .unwrap_or_else(|| cfg.file.task.model.clone());
    let replay = match model.strip_prefix("replay:") {
        Some(file) => Some(super::read_replay(prompt, dir, file)?),
        None => None,
    };
    Ok((keys, model, replay))
}

/// The oracle's scripted turns: run the solution, then finish. `timeout_s`
/// is the task's wall clock (the solution may take all of it).
fn oracle_script(timeout_s: u64, workdir: Option<&str>) -> ReplayScript {
    let command = format!(
        "cp -r /solution /tmp/solution && chmod +x /tmp/solution/solve.sh && cd {} && \
         DEBIAN_FRONTEND=noninteractive /tmp/solution/solve.sh",
        workdir.unwrap_or("/workspace")
    );
    let turns = serde_json::json!({
        "turns": [
            {"content": "Running the task's solution (the oracle).",
             "tool_calls": [{"name": "execute_shell", "arguments": {
                 "command": command,
                 "timeout_s": timeout_s}}]},
            {"tool_calls": [{"name": "task_complete", "arguments": {
                 "message": "The oracle ran the task's solution."}}]}
        ]
    });
    serde_json::from_value(turns).expect("the oracle's script is a replay script")
}

/// Whether `agent` is the oracle, and it has what it needs.
fn check_oracle(
    prompt: &Path,
    agent: Option<&Agent>,
    solution: Option<&Path>,
) -> anyhow::Result<bool> {
    let oracle = matches!(agent, Some(Agent::Named(AgentName::Oracle)));
    if oracle && solution.is_none() {
        bail!(
            "{}: `agent: oracle` runs the task's solution; add `solution: DIR` (a directory with \
             `solve.sh`)",
            prompt.display()
        );
    }
    Ok(oracle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workdir_is_absolute_clean_and_not_the_containers_own() {
        let p = Path::new("p.md");
        assert_eq!(check_workdir(p, "/app").unwrap(), "/app");
        assert_eq!(check_workdir(p, "/testbed/").unwrap(), "/testbed");
        assert_eq!(check_workdir(p, "/srv/app").unwrap(), "/srv/app");
        for bad in [
            "app",
            "/",
            "/app/../etc",
            "/workspace",
            "/workspace/x",
            "/tmp",
            "/etc/x",
            "/a b",
            "/logs/verifier",
            "/tests",
            "/usr/local",
        ] {
            assert!(check_workdir(p, bad).is_err(), "{bad}");
        }
        assert!(check_workdir(p, "/usrx").is_ok());
    }

    #[test]
    fn a_reward_path_is_absolute() {
        let p = Path::new("p.md");
        assert!(check_reward_path(p, "/logs/verifier/reward.txt").is_ok());
        assert!(check_reward_path(p, "reward.txt").is_err());
        assert!(check_reward_path(p, "/logs/../x").is_err());
    }

    #[test]
    fn the_oracle_runs_the_solution_then_completes() {
        let s = oracle_script(300, Some("/app"));
        assert!(
            s.turns[0].tool_calls[0].arguments["command"]
                .as_str()
                .unwrap()
                .contains("cd /app &&")
        );
        assert_eq!(s.turns.len(), 2);
        assert_eq!(s.turns[0].tool_calls[0].name, "execute_shell");
        assert_eq!(s.turns[0].tool_calls[0].arguments["timeout_s"], 300);
        assert_eq!(s.turns[1].tool_calls[0].name, "task_complete");
    }
}
