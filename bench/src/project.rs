//! A throwaway Saheeli project (its own config.yaml, database and results
//! in a temporary directory) driven through the real `saheeli` binary, and
//! removal of the containers and volumes of its tasks afterwards.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListVolumesOptionsBuilder, RemoveContainerOptionsBuilder,
    RemoveVolumeOptionsBuilder,
};
use serde_json::{Value, json};

use crate::env::Env;

pub struct Project {
    pub dir: tempfile::TempDir,
    pub saheeli: PathBuf,
    /// Extra environment for every `saheeli` command.
    pub env: Vec<(String, String)>,
}

impl Project {
    /// A project running `env.image`, `concurrency` tasks at a time.
    pub fn new(env: &Env, concurrency: usize) -> anyhow::Result<Project> {
        Project::with_config(env, concurrency, "")
    }

    /// Like `new`, with `extra` lines appended to config.yaml.
    pub fn with_config(env: &Env, concurrency: usize, extra: &str) -> anyhow::Result<Project> {
        let dir = tempfile::Builder::new()
            .prefix("saheeli-bench-")
            .tempdir()?;
        std::fs::write(
            dir.path().join("config.yaml"),
            format!(
                "image: {}\nconcurrency: {concurrency}\nrun_dir: {}\nstop_grace: 1s\n{extra}",
                env.image,
                env.run_dir.display()
            ),
        )?;
        Ok(Project {
            dir,
            saheeli: env.saheeli.clone(),
            env: Vec::new(),
        })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn db_path(&self) -> PathBuf {
        self.path().join("saheeli.db")
    }

    /// `saheeli ARGS` in the project, with no API keys in its environment
    /// (so no redaction pass) unless `self.env` sets one.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.saheeli);
        c.current_dir(self.path())
            .args(args)
            .env_remove("SAHEELI_CONFIG")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .env("RUST_LOG", "saheeli=warn,warn")
            // The figures read the text log (its timestamps and key=value
            // fields); off a terminal the default would be JSON lines.
            .env("SAHEELI_LOG_FORMAT", "text")
            .stdin(Stdio::null());
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    pub fn run(&self, args: &[&str]) -> anyhow::Result<Output> {
        self.cmd(args).output().context("running saheeli")
    }

    /// Runs and requires success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.run(args)?;
        if !out.status.success() {
            bail!(
                "`saheeli {}` exited {}: {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Starts `saheeli ARGS` in the background, its stderr into `log` (in
    /// the project directory) at `rust_log`.
    pub fn spawn(&self, args: &[&str], log: &str, rust_log: &str) -> anyhow::Result<Child> {
        let file = std::fs::File::create(self.path().join(log))?;
        self.cmd(args)
            .env("RUST_LOG", rust_log)
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .context("starting saheeli")
    }

    /// Starts `saheeli serve` (like `spawn`) and waits until it says it is
    /// serving (a minute at most).
    pub async fn serve_up(&self, log: &str, rust_log: &str) -> anyhow::Result<Child> {
        let mut serve = self.spawn(&["serve"], log, rust_log)?;
        let started = Instant::now();
        while !self.read_log(log).contains("serving") {
            if started.elapsed() > std::time::Duration::from_secs(60) || serve.try_wait()?.is_some()
            {
                bail!("`saheeli serve` did not start: {}", self.read_log(log));
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        Ok(serve)
    }

    pub fn read_log(&self, log: &str) -> String {
        std::fs::read_to_string(self.path().join(log)).unwrap_or_default()
    }

    /// Writes a replay prompt with these tool calls, one per turn.
    pub fn replay_prompt(&self, name: &str, calls: &[(&str, Value)]) -> anyhow::Result<String> {
        let turns: Vec<Value> = calls
            .iter()
            .map(|(t, a)| json!({"tool_calls": [{"name": t, "arguments": a}]}))
            .collect();
        std::fs::write(
            self.path().join(format!("{name}.json")),
            serde_json::to_vec(&json!({ "turns": turns }))?,
        )?;
        let prompt = format!("{name}.md");
        std::fs::write(
            self.path().join(&prompt),
            format!(
                "---\nmodel: replay:{name}.json\nmax_steps: 1000\ntimeout: 30m\n---\nBenchmark.\n"
            ),
        )?;
        Ok(prompt)
    }

    /// A replay prompt of one `task_complete`.
    pub fn one_step(&self) -> anyhow::Result<String> {
        self.replay_prompt("one", &[("task_complete", json!({"message": "ok"}))])
    }

    /// `saheeli run PROMPT --json`, timed; the task as JSON.
    pub fn timed_run(&self, prompt: &str) -> anyhow::Result<(f64, Value)> {
        let t0 = Instant::now();
        let out = self.ok(&["run", prompt, "--json"])?;
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        let task: Value = serde_json::from_str(&out)?;
        if task["state"] != "complete" {
            bail!("the task did not complete: {task}");
        }
        Ok((ms, task))
    }

    pub fn submit(&self, prompt: &str) -> anyhow::Result<String> {
        Ok(self
            .ok(&["task", "submit", "--prompt", prompt])?
            .trim()
            .to_string())
    }

    pub fn db(&self) -> anyhow::Result<rusqlite::Connection> {
        let db = rusqlite::Connection::open(self.db_path())?;
        db.busy_timeout(std::time::Duration::from_secs(10))?;
        Ok(db)
    }

    /// Copies task `template`'s row `n` times as new queued tasks, in one
    /// transaction (thousands of `task submit` processes would take minutes).
    pub fn clone_queued(&self, template: &str, n: usize) -> anyhow::Result<()> {
        let mut db = self.db()?;
        let tx = db.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        {
            let mut stmt = tx.prepare(
                "INSERT INTO tasks (id, title, state, priority, spec, created_at)
                 SELECT ?1, title, 'queued', priority, spec, created_at FROM tasks WHERE id = ?2",
            )?;
            for _ in 0..n {
                stmt.execute(rusqlite::params![
                    uuid::Uuid::now_v7().to_string(),
                    template
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// How many of the project's tasks are in `state`.
    pub fn count(&self, state: &str) -> anyhow::Result<i64> {
        Ok(self.db()?.query_row(
            "SELECT COUNT(*) FROM tasks WHERE state = ?1",
            [state],
            |r| r.get(0),
        )?)
    }

    /// The containers (ids) and volumes (names) of this project's tasks:
    /// those whose `saheeli.task` label names a task in its database.
    async fn labelled_ids(&self, env: &Env) -> anyhow::Result<(Vec<String>, Vec<String>)> {
        let db = self.db()?;
        let mine = |task: &str| {
            db.query_row("SELECT 1 FROM tasks WHERE id = ?1", [task], |_| Ok(()))
                .is_ok()
        };
        let filters = HashMap::from([("label", vec!["saheeli.task"])]);
        let opts = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let containers = env
            .docker
            .list_containers(Some(opts))
            .await?
            .into_iter()
            .filter(|c| {
                c.labels
                    .as_ref()
                    .and_then(|l| l.get("saheeli.task"))
                    .is_some_and(|t| mine(t))
            })
            .filter_map(|c| c.id)
            .collect();
        let opts = ListVolumesOptionsBuilder::default()
            .filters(&filters)
            .build();
        let volumes = env
            .docker
            .list_volumes(Some(opts))
            .await?
            .volumes
            .unwrap_or_default()
            .into_iter()
            .filter(|v| v.labels.get("saheeli.task").is_some_and(|t| mine(t)))
            .map(|v| v.name)
            .collect();
        Ok((containers, volumes))
    }

    /// How many containers and volumes of this project's tasks exist.
    pub async fn labelled(&self, env: &Env) -> anyhow::Result<(usize, usize)> {
        let (containers, volumes) = self.labelled_ids(env).await?;
        Ok((containers.len(), volumes.len()))
    }

    /// Removes the containers and volumes of this project's tasks.
    pub async fn cleanup(&self, env: &Env) {
        let Ok((containers, volumes)) = self.labelled_ids(env).await else {
            return;
        };
        for id in containers {
            let rm = RemoveContainerOptionsBuilder::default()
                .force(true)
                .v(true)
                .build();
            let _ = env.docker.remove_container(&id, Some(rm)).await;
        }
        for name in volumes {
            let rm = RemoveVolumeOptionsBuilder::default().force(true).build();
            let _ = env.docker.remove_volume(&name, Some(rm)).await;
        }
    }
}

/// Sends `sig` to a child we started.
pub fn signal(child: &Child, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions; the pid is our child's.
    unsafe { libc::kill(child.id() as i32, sig) };
}

/// Resident and peak memory of a process, in MB.
pub fn rss_mb(pid: u32) -> anyhow::Result<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> f64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
            .unwrap_or(f64::NAN)
    };
    Ok((field("VmRSS:"), field("VmHWM:")))
}

/// Stops a `saheeli serve` we started as its user would: SIGINT (drain),
/// then SIGINT again (stop running containers); waits for it to exit.
pub async fn interrupt_twice(child: &mut Child) -> anyhow::Result<std::process::ExitStatus> {
    signal(child, libc::SIGINT);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    signal(child, libc::SIGINT);
    wait_child(child).await
}

/// Waits for a child without blocking the runtime.
pub async fn wait_child(child: &mut Child) -> anyhow::Result<std::process::ExitStatus> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
