//! A benchmark task's overhead (issue 49): what Saheeli adds to a Harbor
//! task's own work. A folder of identical Harbor tasks (their own image
//! from the base, a solution, hidden tests writing a reward) runs with
//! `saheeli eval DIR --param agent=oracle -j 1`, its image built once
//! before; each run's wall divided by its tasks is a task's time. The
//! floor, measured in the same run: the same solution and tests run in one
//! bare `docker run` of the same image, timed inside it (the task's own
//! work). Target: the difference at most 0.3 s a task.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

use crate::env::{Env, progress};
use crate::project::Project;
use crate::stats::{Figure, median};

const SOLVE: &str = "#!/bin/bash\nsed -i 's/a - b/a + b/' calc.py\n";

const TEST: &str = "#!/bin/bash\ncd /app\n\
    if python3 -c 'import calc; assert calc.add(2, 3) == 5'; then\n  \
    echo 1 > /logs/verifier/reward.txt\nelse\n  echo 0 > /logs/verifier/reward.txt\nfi\n";

const TOML: &str = "schema_version = \"1.4\"\n[agent]\ntimeout_sec = 120.0\n\
    [verifier]\ntimeout_sec = 60.0\n[environment]\nnetwork_mode = \"no-network\"\n";

/// Writes Harbor task `dir` on `base`.
fn write_task(dir: &Path, base: &str) -> anyhow::Result<()> {
    for sub in ["environment", "solution", "tests"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    std::fs::write(
        dir.join("environment/Dockerfile"),
        format!(
            "FROM {base}\nWORKDIR /app\nRUN printf 'def add(a, b):\\n    return a - b\\n' > /app/calc.py\n"
        ),
    )?;
    std::fs::write(
        dir.join("instruction.md"),
        "`/app/calc.py` has an `add` that subtracts. Make it add.\n",
    )?;
    std::fs::write(dir.join("solution/solve.sh"), SOLVE)?;
    std::fs::write(dir.join("tests/test.sh"), TEST)?;
    std::fs::write(dir.join("task.toml"), TOML)?;
    Ok(())
}

pub async fn task_overhead(env: &Env, quick: bool) -> anyhow::Result<Vec<Figure>> {
    let (tasks, runs) = if quick { (3, 1) } else { (8, 3) };
    progress(&format!(
        "benchmark task overhead: {runs} runs of {tasks} Harbor tasks with the oracle, against their own work in a bare container"
    ));
    let p = Project::new(env, 1)?;
    let suite = p.path().join("suite");
    for i in 0..tasks {
        write_task(&suite.join(format!("t{i}")), &env.base)?;
    }
    let result = measure(&p, &suite, tasks, runs).await;
    p.cleanup(env).await;
    let (per_task, own, phases) = result?;
    let own_ms = median(&own);
    let overhead: Vec<f64> = per_task.iter().map(|t| t - own_ms).collect();
    let mut fig = Figure::new("benchmark task: overhead over its own work", "ms", &overhead)
        .at_most(300.0)
        .detail("per task, Saheeli (median)", median(&per_task))
        .detail("the task's own work in a bare container (median)", own_ms)
        .note(format!(
            "a Harbor task with its own image, the oracle, hidden tests and a reward; {tasks} a run at -j 1"
        ));
    for (name, v) in phases {
        fig = fig.detail(&name, v);
    }
    Ok(vec![fig])
}

type Measured = (Vec<f64>, Vec<f64>, Vec<(String, f64)>);

async fn measure(p: &Project, suite: &Path, tasks: usize, runs: usize) -> anyhow::Result<Measured> {
    let dir = suite.to_str().context("a temporary path is UTF-8")?;
    let eval = |json: bool| -> anyhow::Result<(f64, serde_json::Value)> {
        let mut args = vec!["eval", dir, "--param", "agent=oracle", "-j", "1"];
        if json {
            args.push("--json");
        }
        let t0 = Instant::now();
        let out = p.ok(&args)?;
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        let report: serde_json::Value = serde_json::from_str(&out)
            .with_context(|| format!("`saheeli eval --json` printed: {out}"))?;
        if report["passed"].as_u64() != Some(tasks as u64) {
            bail!("not every task passed with the oracle: {out}");
        }
        Ok((ms, report))
    };
    // The first builds the task image (cached by content for the rest).
    eval(true)?;
    let tag = format!("saheeli-bench-task:{}", crate::env::bench_label_value());
    build(&tag, &suite.join("t0"))?;
    let timed = async {
        let (mut per_task, mut own) = (vec![], vec![]);
        let mut last = serde_json::Value::Null;
        for _ in 0..runs {
            let (ms, report) = eval(true)?;
            per_task.push(ms / tasks as f64);
            last = report;
            for _ in 0..3 {
                own.push(own_work(&tag, &suite.join("t0"))?);
            }
        }
        anyhow::Ok((per_task, own, last))
    }
    .await;
    let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
    let (per_task, own, last) = timed?;
    let n = tasks as f64;
    let phases = ["setup_ms", "agent_ms", "verify_ms"]
        .iter()
        .filter_map(|k| {
            let v = last[*k].as_f64()?;
            Some((format!("{k} a task (last run's mean)"), v / n))
        })
        .collect();
    Ok((per_task, own, phases))
}

/// The task's image as a plain `docker build` makes it (removed by the caller).
fn build(tag: &str, task: &Path) -> anyhow::Result<()> {
    let built = Command::new("docker")
        .args(["build", "-q", "--network", "none", "-t", tag])
        .arg(task.join("environment"))
        .output()?;
    if !built.status.success() {
        bail!(
            "docker build: {}",
            String::from_utf8_lossy(&built.stderr).trim()
        );
    }
    Ok(())
}

/// The task's own work: its solution then its tests, in one bare
/// container of its image `tag`, timed inside it.
fn own_work(tag: &str, task: &Path) -> anyhow::Result<f64> {
    let mount = |sub: &str, to: &str| format!("{}:{to}:ro", task.join(sub).display());
    let script = "t0=$(date +%s%N); bash /solution/solve.sh >/dev/null; \
                  mkdir -p /logs/verifier; bash /tests/test.sh; \
                  t1=$(date +%s%N); cat /logs/verifier/reward.txt >&2; echo $(( (t1 - t0) / 1000 ))";
    let out = Command::new("docker")
        .args(["run", "--rm", "--network", "none", "-w", "/app"])
        .args([
            "--label",
            &format!(
                "{}={}",
                crate::env::BENCH_LABEL,
                crate::env::bench_label_value()
            ),
        ])
        .args(["-v", &mount("solution", "/solution")])
        .args(["-v", &mount("tests", "/tests")])
        .args([tag, "bash", "-c", script])
        .output()?;
    if !out.status.success() || String::from_utf8_lossy(&out.stderr).trim() != "1" {
        bail!(
            "the bare run of the task failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let us: f64 = String::from_utf8_lossy(&out.stdout).trim().parse()?;
    Ok(us / 1000.0)
}
