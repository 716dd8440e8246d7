//! Wide: N tasks submitted at once, each making K LLM calls that a fake
//! LLM (real HTTP, OpenAI wire format) answers after D, served with
//! `concurrency: N` by one `saheeli serve --drain`, through the real path
//! (servo → gateway socket → foreman → provider and back, plus
//! `execute_shell true` between calls).
//!
//! The floor is the same number of raw containers living as long
//! (`sleep K×D` in the base image), created and started all at once
//! through the API, waited for and removed. While the tasks run, the
//! foreman's memory, CPU, file descriptors and sockets are sampled, and
//! every running servo's RSS and its container's memory charge.

use std::time::{Duration, Instant};

use anyhow::bail;
use futures_util::StreamExt;

use crate::cpu::Snapshot;
use crate::env::{Env, progress};
use crate::floor;
use crate::probe;
use crate::project::{Project, wait_child};
use crate::stats::{Figure, median};

/// The prompt every task runs: an OpenAI-compatible model, the fake's.
fn prompt(p: &Project) -> anyhow::Result<String> {
    std::fs::write(
        p.path().join("wide.md"),
        "---\nmodel: gpt-4o-mini\nmax_steps: 20\ntimeout: 20m\n---\nCall the tools you are given.\n",
    )?;
    Ok("wide.md".into())
}

/// What the sampler saw while the foreman ran.
#[derive(Default)]
struct Seen {
    rss_mb: Vec<f64>,
    fds_max: usize,
    sockets_max: usize,
    /// The sample with the most servos running.
    fullest: probe::Servos,
}

pub async fn wide(env: &Env) -> anyhow::Result<Vec<Figure>> {
    let n = env.sizes.wide;
    let calls = env.sizes.wide_calls;
    let delay = Duration::from_millis(env.sizes.wide_delay_ms);
    let life_s = calls as f64 * delay.as_secs_f64();
    progress(&format!(
        "wide: {n} raw containers living {life_s:.0} s, all created and started at once"
    ));
    let t0 = Instant::now();
    let cycles: Vec<anyhow::Result<floor::Cycle>> = futures_util::stream::iter(0..n)
        .map(|_| floor::raw_sleeper(env, life_s))
        .buffer_unordered(n)
        .collect()
        .await;
    let floor_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let mut started = vec![];
    for c in cycles {
        started.push(c?.create_start_ms);
    }
    let floor_started = started.iter().copied().fold(0.0, f64::max);

    progress(&format!(
        "wide: {n} Saheeli tasks of {calls} LLM calls answered after {} ms, concurrency {n}",
        delay.as_millis()
    ));
    let llm = crate::llm::start(calls, delay).await?;
    let mut p = Project::new(env, n)?;
    p.env.push(("OPENAI_BASE_URL".into(), llm.base_url()));
    p.env
        .push(("OPENAI_API_KEY".into(), "sk-bench-not-a-secret".into()));
    let result = run(&p, n, calls, floor_ms, floor_started, &llm).await;
    p.cleanup(env).await;
    result
}

async fn run(
    p: &Project,
    n: usize,
    calls: usize,
    floor_ms: f64,
    floor_started: f64,
    llm: &crate::llm::Fake,
) -> anyhow::Result<Vec<Figure>> {
    let first = p.submit(&prompt(p)?)?;
    p.clone_queued(&first, n - 1)?;
    let cpu = Snapshot::now();
    let t0 = Instant::now();
    let mut serve = p.spawn(&["serve", "--drain"], "serve.log", "saheeli=warn,warn")?;
    let pid = serve.id();
    let mut seen = Seen::default();
    let mut peak_mb = 0.0_f64;
    let mut foreman_cpu_s = 0.0;
    loop {
        if let Some(status) = serve.try_wait()? {
            if !status.success() {
                bail!(
                    "`saheeli serve --drain` exited {status}: {}",
                    p.read_log("serve.log")
                );
            }
            break;
        }
        if let Ok((rss, hwm)) = crate::project::rss_mb(pid) {
            seen.rss_mb.push(rss);
            peak_mb = peak_mb.max(hwm);
        }
        foreman_cpu_s = probe::cpu_s(pid).max(foreman_cpu_s);
        let (fds, sockets) = probe::fds(pid);
        seen.fds_max = seen.fds_max.max(fds);
        seen.sockets_max = seen.sockets_max.max(sockets);
        let servos = probe::servos();
        if servos.rss_mb.len() > seen.fullest.rss_mb.len() {
            seen.fullest = servos;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let _ = wait_child(&mut serve).await;
    let wall_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let cpu = cpu.since();
    let complete = p.count("complete")?;
    let requeued: i64 =
        p.db()?
            .query_row("SELECT COUNT(*) FROM tasks WHERE requeues > 0", [], |r| {
                r.get(0)
            })?;
    let log = p.read_log("serve.log");
    let docker_errors = log.lines().filter(|l| l.contains("launch failed")).count();
    let requests = llm.seen().len();
    if complete != n as i64 {
        bail!(
            "only {complete} of {n} tasks completed; serve log:\n{}",
            log.lines().rev().take(40).collect::<Vec<_>>().join("\n")
        );
    }
    let running = seen.fullest.rss_mb.len();
    let servo_rss = median(&seen.fullest.rss_mb);
    let servo_rss_max = seen.fullest.rss_mb.iter().copied().fold(0.0, f64::max);
    let cgroup = median(&seen.fullest.cgroup_mb);
    let name = format!("wide: {n} tasks × {calls} LLM calls, concurrency {n}");
    let wall = Figure::new(&name, "ms", &[wall_ms])
        .against(&format!("raw: {n} containers at once"), floor_ms, 1.2)
        .detail("floor: all created and started (ms)", floor_started)
        .detail("foreman peak RSS (MB)", peak_mb)
        .detail("foreman CPU (s)", foreman_cpu_s)
        .detail("saheeli CPU incl. children (s)", cpu.saheeli)
        .detail("machine CPU (s)", cpu.machine)
        .detail("dockerd+containerd CPU (s)", cpu.daemons)
        .detail("docker errors", docker_errors as f64)
        .detail("tasks requeued by the daemon", requeued as f64)
        .detail("LLM requests", requests as f64)
        .detail("servos running at once (max seen)", running as f64)
        .detail("foreman fds (max)", seen.fds_max as f64)
        .detail("foreman sockets (max)", seen.sockets_max as f64)
        .note(format!(
            "all {n} complete, {requests} LLM requests, {docker_errors} Docker errors, {requeued} requeued; \
             floor: last of {n} raw containers started at {floor_started:.0} ms"
        ))
        .note(format!(
            "foreman: peak RSS {peak_mb:.1} MB, CPU {foreman_cpu_s:.1} s, up to {} fds ({} sockets); \
             machine CPU {:.1} s, daemons {:.1} s",
            seen.fds_max, seen.sockets_max, cpu.machine, cpu.daemons
        ));
    let rss = Figure::new(
        &format!("wide: foreman peak RSS, {n} running"),
        "MB",
        &[peak_mb],
    )
    .at_most(100.0)
    .note(format!(
        "median RSS over the run {:.1} MB",
        median(&seen.rss_mb)
    ));
    let servo = Figure::new(
        &format!("wide: servo RSS, {running} running"),
        "MB",
        &seen.fullest.rss_mb,
    )
    .at_most(8.0)
    .detail("max (MB)", servo_rss_max)
    .detail("container memory charge, median (MB)", cgroup)
    .note(format!(
        "servo RSS median {servo_rss:.1} MB, max {servo_rss_max:.1} MB; its container's cgroup charge median {cgroup:.1} MB"
    ));
    Ok(vec![wall, rss, servo])
}
