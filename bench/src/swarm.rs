//! The swarm against this host (issue 28): N one-step tasks through
//! `serve --drain` on a private 3-node Docker Swarm against the same N on
//! the local engine, at the same concurrency, repetitions interleaved
//! (local, swarm, local, …); and dispatch on the swarm, `task submit` →
//! the servo's first LLM request (its p50), beside the same on this host.
//!
//! The swarm is `scripts/swarm.sh`'s: three dockerd in network namespaces
//! of this machine, their APIs served with `--tlsverify` on certificates
//! made here (the swarm tests' own `swarm_certs`), torn down at the end,
//! failure included. It needs root, `docker-registry` and a minute to
//! start and take the image, so it runs in the full benchmark and with
//! `--only swarm`, never in `--quick` (CI runs the swarm tests already).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::env::{Env, progress};
use crate::project::{Project, interrupt_twice, wait_child};
use crate::stats::{Figure, median, percentile};

#[allow(dead_code)]
#[path = "../../foreman/tests/it/swarm_certs.rs"]
mod swarm_certs;

/// Tasks at once, on the swarm and here.
const CONCURRENCY: usize = 12;
/// Addresses, namespaces and directories of the bench's swarm: none shared
/// with the tests' (10.235 and up) or `scripts/swarm.sh`'s defaults.
const PFX: &str = "10.229.0";
const NS: &str = "b229";
const BASE: &str = "/tmp/saheeli-bench-swarm";

/// The bench's swarm, brought down when dropped.
struct Up {
    script: PathBuf,
    tls: tempfile::TempDir,
}

impl Up {
    fn cmd(&self, what: &str, image: &str) -> Command {
        let mut c = Command::new(&self.script);
        c.arg(what)
            .env("PFX", PFX)
            .env("NS", NS)
            .env("BASE", BASE)
            .env("IMAGE", image)
            .env("TLS_DIR", self.tls.path());
        c
    }

    fn start(root: &Path, image: &str) -> anyhow::Result<Up> {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            bail!("the swarm figure starts dockerd in network namespaces: run it as root");
        }
        let tls = tempfile::tempdir()?;
        swarm_certs::make(tls.path(), PFX, 3);
        let up = Up {
            script: root.join("scripts/swarm.sh"),
            tls,
        };
        let _ = up.cmd("down", image).output(); // a crashed earlier run's
        let out = up
            .cmd("up", image)
            .output()
            .context("running scripts/swarm.sh up")?;
        if !out.status.success() {
            bail!(
                "scripts/swarm.sh up failed (needs root, docker.io and docker-registry: scripts/setup.sh swarm): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(up)
    }

    /// `network`: the overlay `saheeli-jobs` or `none` (the relay).
    fn config(&self, gateway_port: u16, network: &str) -> String {
        let t = self.tls.path().display();
        format!(
            "backend: swarm\nswarm:\n  manager: tcp://{PFX}.11:2376\n  registry: {PFX}.1:5000\n  \
             network: {network}\n  gateway_listen: {PFX}.1:{gateway_port}\n  \
             tls: {{ ca: {t}/ca.pem, cert: {t}/client-cert.pem, key: {t}/client-key.pem }}\n"
        )
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.cmd("down", "").output();
    }
}

/// A project on the swarm: its config names the image pushed to the
/// swarm's registry (`build-servo --push`).
fn swarm_project(
    env: &Env,
    up: &Up,
    root: &Path,
    servo: &Path,
    network: &str,
) -> anyhow::Result<Project> {
    let port = std::net::TcpListener::bind(format!("{PFX}.1:0"))?
        .local_addr()?
        .port();
    let p = Project::with_config(env, CONCURRENCY, &up.config(port, network))?;
    let servo = std::path::absolute(servo)?;
    let root = root.to_str().context("the checkout's path is not UTF-8")?;
    let pushed = p.ok(&[
        "build-servo",
        "--push",
        "--servo-bin",
        servo.to_str().context("the servo's path is not UTF-8")?,
        "--context",
        root,
    ])?;
    let config = std::fs::read_to_string(p.path().join("config.yaml"))?;
    let config: String = config
        .lines()
        .filter(|l| !l.starts_with("image:"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(
        p.path().join("config.yaml"),
        format!("{config}image: {}\n", pushed.trim()),
    )?;
    Ok(p)
}

/// Submits `n` one-step tasks, then times `serve --drain`; ms.
async fn drain(p: &Project, n: usize) -> anyhow::Result<f64> {
    let one = p.one_step()?;
    for _ in 0..n {
        p.submit(&one)?;
    }
    // After the submits: the first one makes the database.
    let before = p.count("complete")?;
    let t0 = Instant::now();
    let mut serve = p.spawn(&["serve", "--drain"], "drain.log", "saheeli=warn,warn")?;
    let status = wait_child(&mut serve).await?;
    let ms = t0.elapsed().as_secs_f64() * 1000.0;
    let done = p.count("complete")? - before;
    if done != n as i64 || !status.success() {
        bail!(
            "only {done} of {n} tasks completed ({status}): {}",
            p.read_log("drain.log")
        );
    }
    Ok(ms)
}

/// `task submit` → the servo's first LLM request, `n` times, each task
/// completed before the next; ms. `warm`: the project keeps a pool of
/// that many jobs (issue 53), and each submit waits until it is full
/// (the foreman's `warm job idle` lines), each task then served warm.
async fn dispatch(p: &mut Project, n: usize, warm: Option<usize>) -> anyhow::Result<Vec<f64>> {
    let llm = crate::llm::start(1, Duration::ZERO).await?;
    p.env.push(("OPENAI_BASE_URL".into(), llm.base_url()));
    p.env
        .push(("OPENAI_API_KEY".into(), "sk-bench-not-a-secret".into()));
    std::fs::write(
        p.path().join("first.md"),
        "---\nmodel: gpt-4o-mini\nmax_steps: 5\n---\nFinish at once.\n",
    )?;
    let log = "dispatch.log";
    let mut serve = p.serve_up(log, "saheeli=info,warn").await?;
    let mut samples = vec![];
    let mut failure = None;
    for i in 0..n {
        if let Some(size) = warm {
            let t = Instant::now();
            while p.read_log(log).matches("warm job idle").count() < size + i {
                if t.elapsed() > Duration::from_secs(120) {
                    bail!("the swarm's pool did not fill: {}", p.read_log(log));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let before = llm.seen_count();
        let t0 = Instant::now();
        let id = p.submit("first.md")?;
        // Counted after the submit (the first one makes the database);
        // the task cannot be complete yet: it has not called the LLM.
        let complete = p.count("complete")?;
        let deadline = Duration::from_secs(120);
        let first = loop {
            if let Some(at) = llm.seen_at(before) {
                break Some(at);
            }
            if t0.elapsed() > deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let Some(first) = first else {
            failure = Some(anyhow::anyhow!("task {id} never called the LLM"));
            break;
        };
        samples.push(first.duration_since(t0).as_secs_f64() * 1000.0);
        while p.count("complete")? == complete {
            if t0.elapsed() > deadline {
                failure = Some(anyhow::anyhow!("task {id} did not complete"));
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    interrupt_twice(&mut serve).await?;
    p.env.truncate(p.env.len() - 2);
    let claimed = p.read_log(log).matches("warm job claimed").count();
    if failure.is_none() && warm.is_some() && claimed != n {
        failure = Some(anyhow::anyhow!("{claimed} of {n} tasks were served warm"));
    }
    match failure {
        Some(e) => Err(e.context(format!("serve log:\n{}", p.read_log(log)))),
        None => Ok(samples),
    }
}

/// The swarm figures: throughput against this host, and dispatch.
pub async fn swarm(env: &Env, servo: &Path, quick: bool) -> anyhow::Result<Vec<Figure>> {
    let (n, reps, n_dispatch) = if quick { (12, 1, 3) } else { (50, 2, 10) };
    let root = std::env::current_dir()?;
    anyhow::ensure!(
        root.join("scripts/swarm.sh").is_file() && root.join("Dockerfile").is_file(),
        "the swarm figure runs from the checkout's root (scripts/bench.sh does)"
    );
    progress("swarm: starting a private 3-node swarm (scripts/swarm.sh, TLS)");
    let t = Instant::now();
    let up = tokio::task::block_in_place(|| Up::start(&root, &env.base))?;
    progress(&format!(
        "swarm: up in {:.0}s; pushing the servo image",
        t.elapsed().as_secs_f64()
    ));
    let mut on_swarm = swarm_project(env, &up, &root, servo, "none")?;
    let on_overlay = swarm_project(env, &up, &root, servo, "saheeli-jobs")?;
    let local = Project::new(env, CONCURRENCY)?;
    let result = async {
        // Every node pulls the image once, and the relay and the overlay's
        // keeper start: not part of any figure.
        progress("swarm: warming up (each node pulls the image)");
        drain(&on_swarm, 6).await?;
        drain(&on_overlay, 6).await?;
        let (mut here, mut there, mut overlay) = (vec![], vec![], vec![]);
        for rep in 1..=reps {
            progress(&format!(
                "swarm {rep}/{reps}: {n} one-step tasks on this host, concurrency {CONCURRENCY}"
            ));
            here.push(drain(&local, n).await?);
            local.cleanup(env).await;
            progress(&format!(
                "swarm {rep}/{reps}: {n} one-step tasks on the swarm (network: none), concurrency {CONCURRENCY}"
            ));
            there.push(drain(&on_swarm, n).await?);
            progress(&format!(
                "swarm {rep}/{reps}: {n} one-step tasks on the swarm (overlay), concurrency {CONCURRENCY}"
            ));
            overlay.push(drain(&on_overlay, n).await?);
        }
        progress(&format!("swarm: dispatch, {n_dispatch} tasks one by one"));
        let local_dispatch = {
            let mut local = Project::new(env, CONCURRENCY)?;
            let d = dispatch(&mut local, n_dispatch, None).await;
            local.cleanup(env).await;
            d?
        };
        let swarm_dispatch = dispatch(&mut on_swarm, n_dispatch, None).await?;
        anyhow::Ok((here, there, overlay, local_dispatch, swarm_dispatch))
    }
    .await;
    local.cleanup(env).await;
    drop(up);
    let (here, there, overlay, local_dispatch, swarm_dispatch) = result?;
    let local_ms = median(&here);
    let per_rep: Vec<String> = there
        .iter()
        .zip(&here)
        .map(|(s, l)| format!("{:.2}", s / l))
        .collect();
    let throughput = Figure::new(
        &format!("swarm: {n} tasks on 3 nodes, concurrency {CONCURRENCY}, network: none"),
        "ms",
        &there,
    )
    .against("the same on this host", local_ms, 1.5)
    .note(format!(
        "ratio per repetition: {}; jobs with no network, the gateway through each node's relay; \
         servo image pushed to the swarm's registry, engines over TLS",
        per_rep.join(", ")
    ));
    let on_overlay = Figure::new(
        &format!("swarm: {n} tasks on 3 nodes, concurrency {CONCURRENCY}, on the overlay"),
        "ms",
        &overlay,
    )
    .against("the same on this host", local_ms, 1.5)
    .note("jobs on the attachable overlay `saheeli-jobs` (the gateway through NAT)".to_string());
    let local_p50 = median(&local_dispatch);
    let dispatch = Figure::new(
        "swarm dispatch: submit → servo's first LLM call (network: none)",
        "ms",
        &swarm_dispatch,
    )
    .against("this host's", local_p50, 1.5)
    .detail("this host p50", local_p50)
    .detail("this host p95", percentile(&local_dispatch, 0.95))
    .note(format!(
        "p50 {:.0} ms on the swarm, {local_p50:.0} ms on this host; of the swarm's, about 150 ms \
         is Swarm's own scheduling (a 50 ms debounce) and dispatch (100 ms of batching) \
         between the job's creation and its node starting it",
        median(&swarm_dispatch)
    ));
    Ok(vec![throughput, on_overlay, dispatch])
}

/// Dispatch alone (issue 53), `task submit` → the servo's first LLM
/// request, one task at a time, `network: none`: a cold job on the swarm,
/// a warm job claimed from a pool of one, and this host's cold launch,
/// rounds interleaved (cold, warm, here, …).
pub async fn swarm_start(env: &Env, servo: &Path, quick: bool) -> anyhow::Result<Vec<Figure>> {
    let (rounds, per) = if quick { (1, 3) } else { (2, 5) };
    let root = std::env::current_dir()?;
    progress("swarm-start: starting a private 3-node swarm (scripts/swarm.sh, TLS)");
    let up = tokio::task::block_in_place(|| Up::start(&root, &env.base))?;
    let mut cold = swarm_project(env, &up, &root, servo, "none")?;
    let mut warm = swarm_project(env, &up, &root, servo, "none")?;
    let config = std::fs::read_to_string(warm.path().join("config.yaml"))?;
    std::fs::write(
        warm.path().join("config.yaml"),
        format!("{config}pool:\n  - {{ size: 1, max_idle: 30m }}\n"),
    )?;
    let result = async {
        progress("swarm-start: warming up (each node pulls the image)");
        drain(&cold, 6).await?;
        let (mut c, mut w, mut h) = (vec![], vec![], vec![]);
        for round in 1..=rounds {
            progress(&format!(
                "swarm-start {round}/{rounds}: {per} cold, {per} warm, {per} here"
            ));
            c.extend(dispatch(&mut cold, per, None).await?);
            w.extend(dispatch(&mut warm, per, Some(1)).await?);
            let mut local = Project::new(env, CONCURRENCY)?;
            let d = dispatch(&mut local, per, None).await;
            local.cleanup(env).await;
            h.extend(d?);
        }
        anyhow::Ok((c, w, h))
    }
    .await;
    drop(up);
    let (c, w, h) = result?;
    let here = median(&h);
    let note = |what: &str, v: &[f64]| {
        format!(
            "{what}: p50 {:.0} ms ({:.2}x this host's {here:.0} ms); all: {}",
            median(v),
            median(v) / here,
            v.iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    Ok(vec![
        Figure::new(
            "swarm start, cold job: submit → servo's first LLM call (network: none)",
            "ms",
            &c,
        )
        .against("this host's", here, 1.5)
        .note(note("cold", &c)),
        Figure::new(
            "swarm start, warm job: submit → servo's first LLM call (network: none)",
            "ms",
            &w,
        )
        .against("this host's", here, 1.5)
        .note(note("warm", &w)),
    ])
}
