//! The warm pool (issue 28), against floors measured in the same run:
//!
//! - **first (warm)**: `task submit` → the servo's first LLM request with a
//!   pool of 8 filled, one task at a time (the pool refilled between
//!   them), p50 and p99 against raw create+start (target ≤ 0.2×; p50 ≤
//!   20 ms, p99 ≤ 100 ms), and the same task cold (no pool) beside it;
//! - **burst**: as many tasks as a filled class holds, submitted at once
//!   (one `task submit` process each): the first submit to the last
//!   task's first LLM request (target ≤ 1 s);
//! - **cost**: the idle foreman's CPU and RSS over a few seconds with the
//!   class filled, and each idle servo's RSS;
//! - **thousand** with the pool on is `thousand`'s own run with a class of
//!   its concurrency (see `thousand::thousand_pool`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::dispatch::Floors;
use crate::env::{Env, progress};
use crate::probe;
use crate::project::{Project, interrupt_twice};
use crate::stats::{Figure, median, percentile};

/// The config lines of a pool of one class of `size`.
pub fn pool_config(size: usize) -> String {
    format!("pool:\n  - {{ size: {size}, max_idle: 30m }}\n")
}

/// The pool label's value for a project (its database's path, hashed, as
/// the foreman labels what its pool makes).
pub fn pool_db(p: &Project) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(p.db_path().as_os_str().as_encoded_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The project's warm servos (running ones when `running`), by name.
pub fn warm(p: &Project, running: bool) -> Vec<String> {
    let label = format!("label=saheeli.pool={}", pool_db(p));
    let mut args = vec!["ps", "--filter", label.as_str(), "--format", "{{.Names}}"];
    if !running {
        args.insert(1, "-a");
    }
    let out = Command::new("docker").args(&args).output();
    out.map(|o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    })
    .unwrap_or_default()
}

/// The project's warm servos' volumes.
pub fn warm_volumes(p: &Project) -> usize {
    let label = format!("label=saheeli.pool={}", pool_db(p));
    Command::new("docker")
        .args(["volume", "ls", "-q", "--filter", &label])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().count())
        .unwrap_or(0)
}

/// Waits until `n` warm servos run idle (two minutes at most).
pub async fn filled(p: &Project, n: usize, running_tasks: usize) -> anyhow::Result<()> {
    let t0 = Instant::now();
    while warm(p, true).len() < n + running_tasks {
        if t0.elapsed() > Duration::from_secs(120) {
            bail!(
                "the pool never filled to {n}: {} running",
                warm(p, true).len()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Removes what a failed measurement left of the project's pool.
pub fn remove_warm(p: &Project) {
    for name in warm(p, false) {
        let _ = Command::new("docker").args(["rm", "-fv", &name]).output();
        let _ = Command::new("docker")
            .args(["volume", "rm", "-f", &name])
            .output();
    }
}

pub async fn pool(env: &Env, floors: &Floors) -> anyhow::Result<Vec<Figure>> {
    let mut figures = first(env, floors).await?;
    figures.push(burst(env).await?);
    figures.extend(cost(env).await?);
    Ok(figures)
}

/// First request, warm and cold, one task at a time.
async fn first(env: &Env, floors: &Floors) -> anyhow::Result<Vec<Figure>> {
    let n = env.sizes.dispatch_n;
    let raw = floors.raw_cs.median;
    let mut out = vec![];
    for warm_pool in [true, false] {
        progress(&format!(
            "pool: first request, {n} tasks {}",
            if warm_pool {
                "with a warm pool of 8"
            } else {
                "cold (no pool)"
            }
        ));
        let llm = crate::llm::start(1, Duration::ZERO).await?;
        let extra = if warm_pool {
            pool_config(8)
        } else {
            String::new()
        };
        let mut p = Project::with_config(env, 8, &extra)?;
        p.env.push(("OPENAI_BASE_URL".into(), llm.base_url()));
        p.env
            .push(("OPENAI_API_KEY".into(), "sk-bench-not-a-secret".into()));
        let samples = first_samples(&p, n, &llm, warm_pool.then_some(8)).await;
        remove_warm(&p);
        p.cleanup(env).await;
        let samples = samples?;
        let (p50, p99) = (median(&samples), percentile(&samples, 0.99));
        let fig = if warm_pool {
            Figure::new("pool: first (warm): submit → first LLM call, pool of 8", "ms", &samples)
                .against("raw create+start", raw, 0.2)
                .note(format!(
                    "p50 {p50:.1} ms (target ≤ 20), p99 {p99:.1} ms (target ≤ 100); {:.2}× raw create+start {raw:.1} ms",
                    p50 / raw
                ))
        } else {
            Figure::new("pool: first (cold): the same task, no pool", "ms", &samples)
                .against("raw create+start", raw, 1.5)
                .note(format!("p50 {p50:.1} ms, p99 {p99:.1} ms"))
        };
        out.push(fig.detail("p50", p50).detail("p99", p99));
    }
    Ok(out)
}

async fn first_samples(
    p: &Project,
    n: usize,
    llm: &crate::llm::Fake,
    pool: Option<usize>,
) -> anyhow::Result<Vec<f64>> {
    std::fs::write(
        p.path().join("first.md"),
        "---\nmodel: gpt-4o-mini\nmax_steps: 5\n---\nFinish at once.\n",
    )?;
    let log = "serve.log";
    let mut serve = p.serve_up(log, "saheeli=info,warn").await?;
    let mut samples = vec![];
    let result = async {
        for _ in 0..n {
            if let Some(size) = pool {
                filled(p, size, 0).await?;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            let before = llm.seen_count();
            let t0 = Instant::now();
            let id = p.submit("first.md")?;
            let first = loop {
                if let Some(at) = llm.seen_at(before) {
                    break at;
                }
                if t0.elapsed() > Duration::from_secs(120) {
                    bail!("task {id} never called the LLM");
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            };
            samples.push(first.duration_since(t0).as_secs_f64() * 1000.0);
            ended(p, &id).await?;
        }
        Ok(())
    }
    .await;
    interrupt_twice(&mut serve).await?;
    result.map_err(|e: anyhow::Error| e.context(format!("serve log:\n{}", p.read_log(log))))?;
    Ok(samples)
}

/// Waits until task `id` has ended and its container is gone.
async fn ended(p: &Project, id: &str) -> anyhow::Result<()> {
    let t0 = Instant::now();
    loop {
        let state: String =
            p.db()?
                .query_row("SELECT state FROM tasks WHERE id = ?1", [id], |r| r.get(0))?;
        if ["complete", "failed", "incomplete", "cancelled"].contains(&state.as_str()) {
            return Ok(());
        }
        if t0.elapsed() > Duration::from_secs(120) {
            bail!("task {id} still {state} after 2 minutes");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A class's worth of tasks submitted at once.
async fn burst(env: &Env) -> anyhow::Result<Figure> {
    let n = env.sizes.pool_burst;
    progress(&format!(
        "pool: burst of {n} submits at once, a class of {n} warm"
    ));
    let llm = crate::llm::start(1, Duration::ZERO).await?;
    let mut p = Project::with_config(env, n, &pool_config(n))?;
    p.env.push(("OPENAI_BASE_URL".into(), llm.base_url()));
    p.env
        .push(("OPENAI_API_KEY".into(), "sk-bench-not-a-secret".into()));
    std::fs::write(
        p.path().join("first.md"),
        "---\nmodel: gpt-4o-mini\nmax_steps: 5\n---\nFinish at once.\n",
    )?;
    let log = "serve.log";
    let mut serve = p.serve_up(log, "saheeli=info,warn").await?;
    let result = async {
        filled(&p, n, 0).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let t0 = Instant::now();
        let mut submits = vec![];
        for _ in 0..n {
            submits.push(
                p.cmd(&["task", "submit", "--prompt", "first.md"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()?,
            );
        }
        for mut s in submits {
            let st = crate::project::wait_child(&mut s).await?;
            anyhow::ensure!(st.success(), "a submit failed: {st}");
        }
        let submitted = t0.elapsed().as_secs_f64() * 1000.0;
        loop {
            if llm.seen_count() >= n {
                break;
            }
            if t0.elapsed() > Duration::from_secs(120) {
                bail!("{} of {n} tasks called the LLM", llm.seen_count());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let last = llm.seen().iter().map(|s| s.at).max().expect("n calls");
        Ok((last.duration_since(t0).as_secs_f64() * 1000.0, submitted))
    }
    .await;
    interrupt_twice(&mut serve).await?;
    remove_warm(&p);
    p.cleanup(env).await;
    let (ms, submitted) =
        result.map_err(|e| e.context(format!("serve log:\n{}", p.read_log(log))))?;
    Ok(Figure::new(
        &format!("pool: burst: {n} submits at once → the last first LLM call"),
        "ms",
        &[ms],
    )
    .at_most(1000.0)
    .detail("submits done (ms)", submitted)
    .note(format!(
        "{ms:.0} ms from the first submit to the {n}th task's first LLM call (target ≤ 1000); \
         the {n} `task submit` processes had all exited at {submitted:.0} ms"
    )))
}

/// The idle foreman's CPU and RSS with a class filled, and idle servos' RSS.
async fn cost(env: &Env) -> anyhow::Result<Vec<Figure>> {
    let n = env.sizes.pool_burst;
    progress(&format!("pool: cost of {n} idle warm servos"));
    let p = Project::with_config(env, 4, &pool_config(n))?;
    let log = "serve.log";
    let mut serve = p.serve_up(log, "saheeli=info,warn").await?;
    let pid = serve.id();
    let result = async {
        filled(&p, n, 0).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let cpu0 = probe::cpu_s(pid);
        let window = Duration::from_secs(5);
        tokio::time::sleep(window).await;
        let cpu = (probe::cpu_s(pid) - cpu0) / window.as_secs_f64();
        let (rss, _) = crate::project::rss_mb(pid)?;
        let servos = probe::servos();
        Ok((cpu, rss, servos))
    }
    .await;
    interrupt_twice(&mut serve).await?;
    let left = warm(&p, false).len() + warm_volumes(&p);
    remove_warm(&p);
    p.cleanup(env).await;
    let (cpu, rss, servos) =
        result.map_err(|e: anyhow::Error| e.context(format!("serve log:\n{}", p.read_log(log))))?;
    let servo_rss = median(&servos.rss_mb);
    Ok(vec![
        Figure::new(
            &format!("pool: idle foreman CPU, {n} warm"),
            "cores",
            &[cpu],
        )
        .detail("foreman RSS (MB)", rss)
        .note(format!(
            "{:.1}% of a core; foreman RSS {rss:.1} MB",
            cpu * 100.0
        )),
        Figure::new("pool: an idle warm servo's RSS", "MB", &servos.rss_mb).note(format!(
            "median {servo_rss:.1} MB over {} servos",
            servos.rss_mb.len()
        )),
        Figure::new("pool: left after serve stopped", "items", &[left as f64])
            .at_most(0.0)
            .note(format!(
                "{left} warm containers and volumes left after the drain"
            )),
    ])
}
