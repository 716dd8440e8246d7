//! Throughput: N one-step tasks at concurrency 8 (`saheeli serve --drain
//! -j 8` after submitting them), against N raw containers at concurrency 8,
//! and N hardened cycles (Saheeli's Docker calls with `true`) at 8.
//! Repetitions are interleaved (raw, hardened, Saheeli, raw, …) so drift
//! in the machine hits all three alike.
//!
//! Where the time goes, per burst: CPU seconds by consumer (machine,
//! dockerd+containerd, the `saheeli` process, the rest); the median of each
//! Docker call of the floors; and from the Docker events, how many
//! containers were alive on average (create → destroy) out of the 8 slots.
//! For Saheeli, the task rows add the foreman's side of each slot: from the
//! claim to the container's create, and from its destroy to the recorded
//! outcome.

use std::time::{Duration, Instant, UNIX_EPOCH};

use anyhow::bail;

use crate::cpu::{Snapshot, Usage};
use crate::env::{Env, progress};
use crate::events::ms_between;
use crate::floor;
use crate::project::Project;
use crate::stats::{Figure, median};

struct Run {
    ms: f64,
    cpu: Usage,
    /// Median ms of each Docker call (the floors only).
    calls: Vec<(&'static str, f64)>,
    /// Containers alive on average (Docker events).
    alive: f64,
    /// Named parts (Saheeli only).
    parts: Vec<(&'static str, f64)>,
}

pub struct Bursts {
    pub raw: Figure,
    pub hardened: Figure,
    pub saheeli: Figure,
}

/// Mean number of these containers alive (create → destroy) over `wall`.
fn alive(env: &Env, keys: &[String], wall_ms: f64) -> f64 {
    let lived: f64 = keys
        .iter()
        .map(|k| env.events.times(k))
        .filter_map(|t| Some(ms_between(t.create?, t.destroy?)))
        .sum();
    lived / wall_ms
}

async fn floor_run(env: &Env, hardened: bool, n: usize) -> anyhow::Result<Run> {
    let cpu = Snapshot::now();
    let b = floor::burst(env, hardened, n, 8).await?;
    let cpu = cpu.since();
    tokio::time::sleep(Duration::from_millis(200)).await; // the last events
    Ok(Run {
        ms: b.wall_ms,
        cpu,
        calls: b.calls,
        alive: alive(env, &b.ids, b.wall_ms),
        parts: vec![],
    })
}

pub async fn bursts(env: &Env) -> anyhow::Result<Bursts> {
    let n = env.sizes.burst;
    let of = env.sizes.burst_reps;
    let (mut raw, mut hard, mut ours) = (vec![], vec![], vec![]);
    for rep in 1..=of {
        let share = crate::cpu::busy_share(Duration::from_millis(300)).await;
        if share > 0.25 {
            progress(&format!(
                "warning: {:.0}% of the CPU busy before repetition {rep} with nothing of ours running",
                share * 100.0
            ));
        }
        progress(&format!(
            "throughput {rep}/{of}: {n} raw containers at concurrency 8"
        ));
        raw.push(floor_run(env, false, n).await?);
        progress(&format!(
            "throughput {rep}/{of}: {n} hardened cycles at concurrency 8"
        ));
        hard.push(floor_run(env, true, n).await?);
        progress(&format!(
            "throughput {rep}/{of}: {n} one-step Saheeli tasks at concurrency 8"
        ));
        let p = Project::new(env, 8)?;
        let r = saheeli_burst(env, &p, n).await;
        p.cleanup(env).await;
        ours.push(r?);
    }
    let raw_fig = figure(format!("floor: {n} containers at concurrency 8"), &raw, n);
    let hard_fig = figure(
        format!("floor: {n} hardened cycles at concurrency 8"),
        &hard,
        n,
    );
    let (raw_ms, hard_ms) = (raw_fig.median, hard_fig.median);
    let per_rep: Vec<String> = ours
        .iter()
        .zip(&raw)
        .map(|(o, r)| format!("{:.2}", o.ms / r.ms))
        .collect();
    let ours_ms = median(&ours.iter().map(|r| r.ms).collect::<Vec<_>>());
    let ours_fig = figure(format!("throughput: {n} tasks at concurrency 8"), &ours, n)
        .against("raw burst", raw_ms, 1.2)
        .detail("hardened burst", hard_ms)
        .note(format!(
            "ratio to the raw burst of the same repetition: {}; to the hardened floor ({hard_ms:.0} ms): {:.2}",
            per_rep.join(", "),
            ours_ms / hard_ms
        ));
    Ok(Bursts {
        raw: raw_fig,
        hardened: hard_fig,
        saheeli: ours_fig,
    })
}

/// A burst figure, with the last repetition's breakdown.
fn figure(name: String, runs: &[Run], n: usize) -> Figure {
    let ms: Vec<f64> = runs.iter().map(|r| r.ms).collect();
    let k = runs.len().max(1) as f64;
    let mean = |f: fn(&Usage) -> f64| runs.iter().map(|r| f(&r.cpu)).sum::<f64>() / k;
    let cpu = Usage {
        machine: mean(|u| u.machine),
        daemons: mean(|u| u.daemons),
        saheeli: mean(|u| u.saheeli),
        rest: mean(|u| u.rest),
    };
    let alive = runs.iter().map(|r| r.alive).sum::<f64>() / k;
    let mut f = Figure::new(&name, "ms", &ms)
        .detail("cpu_s_machine", cpu.machine)
        .detail("cpu_s_dockerd_containerd", cpu.daemons)
        .detail("cpu_s_saheeli", cpu.saheeli)
        .detail("cpu_s_rest", cpu.rest)
        .detail("containers alive (mean of 8)", alive)
        .note(cpu.describe(n));
    let Some(last) = runs.last() else { return f };
    if !last.calls.is_empty() {
        let calls: Vec<String> = last
            .calls
            .iter()
            .map(|(c, ms)| format!("{c} {ms:.0}"))
            .collect();
        f = f.note(format!(
            "{alive:.1} containers alive on average; per cycle, median ms of each call: {}",
            calls.join(", ")
        ));
        for (c, ms) in &last.calls {
            f = f.detail(&format!("call: {c}"), *ms);
        }
    }
    if !last.parts.is_empty() {
        let parts: Vec<String> = last
            .parts
            .iter()
            .map(|(c, ms)| format!("{c} {ms:.0}"))
            .collect();
        f = f.note(format!(
            "{alive:.1} containers alive on average; per task, median ms: {}",
            parts.join(", ")
        ));
        for (c, ms) in &last.parts {
            f = f.detail(c, *ms);
        }
    }
    f
}

/// Submits `n` one-step tasks (`saheeli task submit`, one process each),
/// then times `serve --drain -j 8`.
async fn saheeli_burst(env: &Env, p: &Project, n: usize) -> anyhow::Result<Run> {
    let one = p.one_step()?;
    for _ in 0..n {
        p.submit(&one)?;
    }
    let cpu = Snapshot::now();
    let t0 = Instant::now();
    let mut serve = p.spawn(
        &["serve", "--drain", "-j", "8"],
        "serve.log",
        "saheeli=warn,warn",
    )?;
    let status = crate::project::wait_child(&mut serve).await?;
    let ms = t0.elapsed().as_secs_f64() * 1000.0;
    let cpu = cpu.since();
    let complete = p.count("complete")?;
    if complete != n as i64 || !status.success() {
        bail!(
            "only {complete} of {n} tasks completed ({status}): {}",
            p.read_log("serve.log")
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await; // the last events
    let rows: Vec<(String, i64, i64)> = {
        let db = p.db()?;
        let mut stmt = db.prepare("SELECT id, started_at, finished_at FROM tasks")?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<Result<_, _>>()?
    };
    let at = |ms: i64| UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    let (mut before, mut cs, mut run, mut tail, mut after) =
        (vec![], vec![], vec![], vec![], vec![]);
    for (id, claimed, finished) in &rows {
        let t = env.events.times(id);
        if let (Some(c), Some(s), Some(d), Some(x)) = (t.create, t.start, t.die, t.destroy) {
            before.push(ms_between(at(*claimed), c));
            cs.push(ms_between(c, s));
            run.push(ms_between(s, d));
            tail.push(ms_between(d, x));
            after.push(ms_between(x, at(*finished)));
        }
    }
    let ids: Vec<String> = rows.into_iter().map(|r| r.0).collect();
    Ok(Run {
        ms,
        cpu,
        calls: vec![],
        alive: alive(env, &ids, ms),
        parts: vec![
            ("claim→create", median(&before)),
            ("create→start", median(&cs)),
            ("servo start→die", median(&run)),
            ("die→destroy (collect, remove)", median(&tail)),
            ("destroy→outcome recorded", median(&after)),
        ],
    })
}
