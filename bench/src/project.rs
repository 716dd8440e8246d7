//! A throwaway Saheeli project (config.yaml, database, results) driven
//! through the real `saheeli` binary, plus fast bulk inserts for the
//! footprint figures.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::{Value, json};

pub struct Project {
    pub dir: tempfile::TempDir,
    pub saheeli: PathBuf,
}

impl Project {
    pub fn new(saheeli: &Path, image: &str, concurrency: usize) -> anyhow::Result<Project> {
        let dir = tempfile::Builder::new()
            .prefix("saheeli-bench-")
            .tempdir()?;
        let run_dir = format!("/tmp/saheeli-bench-run-{}", std::process::id());
        std::fs::write(
            dir.path().join("config.yaml"),
            format!(
                "image: {image}\nconcurrency: {concurrency}\nrun_dir: {run_dir}\nstop_grace: 1s\n"
            ),
        )?;
        Ok(Project {
            dir,
            saheeli: saheeli.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.saheeli);
        c.current_dir(self.path())
            .args(args)
            .env_remove("SAHEELI_CONFIG")
            .env("RUST_LOG", "warn");
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
                "saheeli {args:?} exited {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub fn spawn(&self, args: &[&str]) -> anyhow::Result<Child> {
        self.cmd(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting saheeli")
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

    /// `saheeli run PROMPT --json`, timed; the task as JSON.
    pub fn timed_run(&self, prompt: &str) -> anyhow::Result<(f64, Value)> {
        let t0 = Instant::now();
        let out = self.ok(&["run", prompt, "--json"])?;
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        Ok((ms, serde_json::from_str(&out)?))
    }

    pub fn submit(&self, prompt: &str) -> anyhow::Result<String> {
        Ok(self
            .ok(&["task", "submit", "--prompt", prompt])?
            .trim()
            .to_string())
    }

    /// Copies task `template`'s row `n` times as new queued tasks, in one
    /// transaction (thousands of `task submit` processes would take minutes).
    pub fn clone_queued(&self, template: &str, n: usize) -> anyhow::Result<()> {
        let mut db = rusqlite::Connection::open(self.path().join("saheeli.db"))?;
        let tx = db.transaction()?;
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
