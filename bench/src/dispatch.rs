//! The sequential floors and dispatch: `task submit` → container started,
//! with a `saheeli serve` waiting, against raw create+start.
//!
//! Dispatch is timed from just before the `saheeli task submit` process is
//! spawned to the `start` event of the task's container (the daemon's
//! nanosecond timestamp, same clock). One task at a time: the next submit
//! waits for the previous container's `destroy`, so no dispatch competes
//! with a collection. The serve log (debug level) gives the foreman's own
//! laps, which split the time into: the submit process, the wait until
//! the serve loop claims the task, and each Docker call of the launch.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};

use crate::env::{Env, progress};
use crate::events::{Kind, ms_between};
use crate::floor;
use crate::project::{Project, interrupt_twice};
use crate::stats::{Figure, median};

/// Raw and hardened create+start, and the raw create…remove cycle.
pub struct Floors {
    pub raw_cs: Figure,
    pub raw_cycle: Figure,
    pub hardened_cs: Figure,
}

pub async fn floors(env: &Env) -> anyhow::Result<Floors> {
    let n = env.sizes.floor_n;
    progress(&format!(
        "floor: {n} sequential raw create+start+wait+remove of `true`, {n} hardened create+start"
    ));
    floor::raw_cycle(env).await?; // warm-up
    floor::hardened_cycle(env, false).await?;
    let (mut cs, mut total, mut hard) = (vec![], vec![], vec![]);
    let (mut raw_create, mut hard_create) = (vec![], vec![]);
    for _ in 0..n {
        let c = floor::raw_cycle(env).await?;
        cs.push(c.create_start_ms);
        raw_create.push(c.create_ms);
        total.push(c.total_ms);
        let h = floor::hardened_cycle(env, false).await?;
        hard.push(h.create_start_ms);
        hard_create.push(h.create_ms);
    }
    let split = |create: &[f64], both: &[f64]| {
        let starts: Vec<f64> = both.iter().zip(create).map(|(b, c)| b - c).collect();
        (median(create), median(&starts))
    };
    let (rc, rs) = split(&raw_create, &cs);
    let (hc, hs) = split(&hard_create, &hard);
    Ok(Floors {
        raw_cs: Figure::new("floor: create+start (raw API)", "ms", &cs)
            .detail("create", rc)
            .detail("start", rs)
            .note(format!("create {rc:.1} ms, start {rs:.1} ms")),
        raw_cycle: Figure::new("floor: create+start+wait+remove (raw)", "ms", &total),
        hardened_cs: Figure::new("floor: hardened create+start", "ms", &hard)
            .detail("image check + volume + create", hc)
            .detail("start", hs)
            .note(format!(
                "Saheeli's launch calls without Saheeli: image check + volume + create {hc:.1} ms, start {hs:.1} ms"
            )),
    })
}

/// The foreman's laps for one task, from its debug log, in ms after `t0`.
fn laps(log: &str, id: &str, t0: SystemTime) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in log.lines().filter(|l| l.contains(id)) {
        let Some(at) = line
            .split_whitespace()
            .next()
            .and_then(|ts| humantime::parse_rfc3339(ts).ok())
        else {
            continue;
        };
        let at = ms_between(t0, at);
        if line.contains("task claimed") {
            out.insert("claimed".to_string(), at);
        } else if let Some(what) = line.split("launch: ").nth(1) {
            let what = what.split(" task_id").next().unwrap_or(what).trim();
            out.insert(what.to_string(), at);
        }
    }
    out
}

pub async fn dispatch(env: &Env, floors: &Floors) -> anyhow::Result<Figure> {
    let n = env.sizes.dispatch_n;
    progress(&format!(
        "dispatch: {n} submits to a waiting `saheeli serve`"
    ));
    let p = Project::new(env, 8)?;
    let result = measure_dispatch(env, &p, n, floors).await;
    p.cleanup(env).await;
    result
}

async fn measure_dispatch(
    env: &Env,
    p: &Project,
    n: usize,
    floors: &Floors,
) -> anyhow::Result<Figure> {
    let prompt = p.one_step()?;
    let log = "serve.log";
    let mut serve = p.serve_up(log, "saheeli=debug,warn").await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut samples = Vec::new();
    let mut runs = Vec::new();
    let mut failure = None;
    for _ in 0..n {
        let t0 = SystemTime::now();
        let i0 = Instant::now();
        let id = match p.submit(&prompt) {
            Ok(id) => id,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        let submit_ms = i0.elapsed().as_secs_f64() * 1000.0;
        let Some(start) = env
            .events
            .wait_for(&id, Kind::Start, Duration::from_secs(120))
            .await
        else {
            failure = Some(anyhow::anyhow!("task {id} never started"));
            break;
        };
        samples.push(ms_between(t0, start));
        runs.push((id.clone(), t0, submit_ms));
        // One at a time: the next dispatch starts on a quiet foreman.
        if env
            .events
            .wait_for(&id, Kind::Destroy, Duration::from_secs(120))
            .await
            .is_none()
        {
            failure = Some(anyhow::anyhow!("task {id}'s container was never removed"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    interrupt_twice(&mut serve).await?;
    if let Some(e) = failure {
        return Err(e.context(format!("serve log:\n{}", p.read_log(log))));
    }
    let complete = p.count("complete")?;
    if complete != n as i64 {
        bail!("only {complete} of {n} dispatched tasks completed");
    }

    // Where the time goes: medians of each lap, as increments.
    let text = p.read_log(log);
    let mut parts: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (id, t0, submit_ms) in &runs {
        let l = laps(&text, id, *t0);
        let start = ms_between(*t0, env.events.times(id).start.context("no start")?);
        let mut prev = *submit_ms;
        parts.entry("submit process".into()).or_default().push(prev);
        for (name, key) in [
            ("serve loop notices and claims", "claimed"),
            ("image check", "image checked"),
            ("volume create", "volume created"),
            ("container create", "container created"),
            ("record container id + uploads", "uploaded"),
            ("start (API call returns)", "started"),
        ] {
            if let Some(at) = l.get(key) {
                parts.entry(name.into()).or_default().push(at - prev);
                prev = *at;
            }
        }
        parts
            .entry("start event vs API return".into())
            .or_default()
            .push(start - prev);
    }
    let order = [
        "submit process",
        "serve loop notices and claims",
        "image check",
        "volume create",
        "container create",
        "record container id + uploads",
        "start (API call returns)",
        "start event vs API return",
    ];
    let raw = floors.raw_cs.median;
    let hard = floors.hardened_cs.median;
    let mut fig = Figure::new("dispatch: submit → container started", "ms", &samples).against(
        "raw create+start",
        raw,
        1.15,
    );
    let mut breakdown = Vec::new();
    for name in order {
        if let Some(xs) = parts.get(name) {
            let m = median(xs);
            fig = fig.detail(name, m);
            breakdown.push(format!("{name} {m:.1}"));
        }
    }
    Ok(fig
        .detail("hardened create+start floor", hard)
        .note(format!("medians, ms: {}", breakdown.join(", ")))
        .note(format!(
            "vs the hardened floor ({hard:.0} ms, same Docker calls as Saheeli): {:.2}×",
            median(&samples) / hard
        )))
}
