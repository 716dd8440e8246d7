//! Suspend (issue 51): what one waiting servo holds on this host, waiting
//! and frozen (`suspend_after`), the freeze and thaw times, and from them
//! how many waiting servos the host holds. `n` tasks ask a question (a
//! replay model) and wait with their containers (`park_after: 10m`); the
//! foreman freezes them after `suspend_after`; then every one is answered
//! and completes. Checkpointing (`suspend: checkpoint`) is refused by the
//! foreman (docs/design/checkpoint.md), so it has no figure here.
//!
//! What a waiting servo holds is counted where it is: its container's
//! memory charge (cgroup), and the host processes that exist for it alone,
//! Docker's per-container shim and, with the `fuse-overlayfs` storage
//! driver, the FUSE daemon of its root (proportional set sizes, so shared
//! pages are split), plus the foreman's own growth per task.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::env::{Env, progress};
use crate::project::{Project, interrupt_twice, rss_mb};
use crate::stats::{Figure, median};

/// Longer than it takes `n` servos to start here, so that all of them
/// are measured waiting before the first is frozen.
const SUSPEND_AFTER_S: u64 = 40;

/// Host memory kept back for the system, Docker and the foreman when the
/// host's capacity is extrapolated.
const RESERVE_MB: f64 = 2048.0;

pub async fn suspend(env: &Env, n: usize) -> anyhow::Result<Vec<Figure>> {
    progress(&format!("suspend: {n} waiting servos, running then frozen"));
    let p = Project::with_config(env, n, &format!("suspend_after: {SUSPEND_AFTER_S}s\n"))?;
    let result = measure(env, &p, n).await;
    p.cleanup(env).await;
    result
}

/// One servo's holding, in MB.
#[derive(Clone, Copy, Default)]
struct Held {
    cgroup: f64,
    shim: f64,
    fuse: f64,
}

impl Held {
    fn total(self) -> f64 {
        self.cgroup + self.shim + self.fuse
    }
}

fn prompt(p: &Project) -> anyhow::Result<String> {
    let turns = json!({"turns": [
        {"tool_calls": [{"name": "ask_user", "arguments": {"question": "Go on?"}}]},
        {"tool_calls": [{"name": "task_complete", "arguments": {"message": "ok"}}]},
    ]});
    std::fs::write(p.path().join("ask.json"), serde_json::to_vec(&turns)?)?;
    std::fs::write(
        p.path().join("ask.md"),
        "---\nmodel: replay:ask.json\npark_after: 10m\ntimeout: 30m\n---\nBenchmark.\n",
    )?;
    Ok("ask.md".into())
}

pub(crate) fn status(p: &Project, id: &str) -> anyhow::Result<Value> {
    Ok(serde_json::from_str(
        &p.ok(&["task", "status", id, "--json"])?,
    )?)
}

pub(crate) async fn until_all(
    p: &Project,
    ids: &[String],
    what: &str,
    limit: Duration,
    f: impl Fn(&Value) -> bool,
) -> anyhow::Result<Vec<Value>> {
    let t0 = Instant::now();
    loop {
        let all: Vec<Value> = ids
            .iter()
            .map(|id| status(p, id))
            .collect::<Result<_, _>>()?;
        if all.iter().all(&f) {
            return Ok(all);
        }
        if t0.elapsed() > limit {
            let states: Vec<&Value> = all.iter().map(|t| &t["state"]).collect();
            bail!("not all {what} after {}s: {states:?}", limit.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn measure(env: &Env, p: &Project, n: usize) -> anyhow::Result<Vec<Figure>> {
    let prompt = prompt(p)?;
    let first = p.submit(&prompt)?;
    p.clone_queued(&first, n - 1)?;
    let ids: Vec<String> = {
        let db = p.db()?;
        let mut stmt = db.prepare("SELECT id FROM tasks ORDER BY id")?;
        stmt.query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?
    };
    let mut serve = p.spawn(
        &["serve", "-j", &n.to_string()],
        "serve.log",
        "saheeli=info,warn",
    )?;
    let (rss0, _) = rss_mb(serve.id())?;
    let run = async {
        let waiting = until_all(p, &ids, "waiting", Duration::from_secs(180), |t| {
            t["state"] == "waiting_human" && t["container"].is_string()
        })
        .await?;
        if waiting.iter().any(|t| t["frozen"] == true) {
            bail!("a servo was frozen before all {n} waited: raise SUSPEND_AFTER_S");
        }
        let containers: Vec<String> = waiting
            .iter()
            .map(|t| t["container"].as_str().unwrap_or_default().to_string())
            .collect();
        let running = held_all(env, &containers).await?;
        let (rss_waiting, _) = rss_mb(serve.id())?;
        until_all(
            p,
            &ids,
            "frozen",
            Duration::from_secs(SUSPEND_AFTER_S + 60),
            |t| t["frozen"] == true,
        )
        .await?;
        let frozen = held_all(env, &containers).await?;
        for id in &ids {
            p.ok(&["task", "answer", id, "go on"])?;
        }
        let done = until_all(p, &ids, "complete", Duration::from_secs(120), |t| {
            t["state"] == "complete"
        })
        .await?;
        let mut freeze_ms = Vec::new();
        let mut thaw_ms = Vec::new();
        for t in &done {
            freeze_ms.extend(event_ms(t, "frozen", "froze in "));
            thaw_ms.extend(event_ms(t, "thawed", "thawed in "));
        }
        let foreman_per_task = ((rss_waiting - rss0) / n as f64).max(0.0);
        Ok::<_, anyhow::Error>((running, frozen, foreman_per_task, freeze_ms, thaw_ms))
    };
    let outcome = run.await;
    interrupt_twice(&mut serve).await?;
    let (running, frozen, foreman, freeze_ms, thaw_ms) =
        outcome.with_context(|| p.read_log("serve.log"))?;
    Ok(figures(n, &running, &frozen, foreman, &freeze_ms, &thaw_ms))
}

fn figures(
    n: usize,
    running: &[Held],
    frozen: &[Held],
    foreman: f64,
    freeze_ms: &[f64],
    thaw_ms: &[f64],
) -> Vec<Figure> {
    let totals = |h: &[Held]| h.iter().map(|x| x.total() + foreman).collect::<Vec<_>>();
    let (run_t, frz_t) = (totals(running), totals(frozen));
    let part = |h: &[Held], f: fn(&Held) -> f64| median(&h.iter().map(f).collect::<Vec<_>>());
    let total_mb = host_mb();
    let hold = |per: f64| ((total_mb - RESERVE_MB) / per).floor();
    let with_parts = |fig: Figure, h: &[Held]| {
        fig.detail("cgroup_mb", part(h, |x| x.cgroup))
            .detail("shim_pss_mb", part(h, |x| x.shim))
            .detail("fuse_pss_mb", part(h, |x| x.fuse))
            .detail("foreman_mb_per_task", foreman)
    };
    let run_fig = with_parts(
        Figure::new("suspend: memory per waiting servo, running", "MB", &run_t),
        running,
    )
    .note(format!(
        "{n} servos waiting on ask_user with their containers"
    ));
    let frz_fig = with_parts(
        Figure::new("suspend: memory per waiting servo, frozen", "MB", &frz_t),
        frozen,
    )
    .detail("running_mb", median(&run_t))
    .note("the cgroup freezer gives no memory back (issue 51)");
    let density = |name: &str, per: f64, note: &str| {
        Figure::new(name, "servos", &[hold(per)])
            .detail("host_mb", total_mb)
            .detail("reserve_mb", RESERVE_MB)
            .detail("mb_per_servo", per)
            .note(note.to_string())
    };
    vec![
        run_fig,
        frz_fig,
        Figure::new("suspend: freeze (docker pause)", "ms", freeze_ms),
        Figure::new("suspend: thaw (docker unpause)", "ms", thaw_ms),
        density(
            "suspend: waiting servos this host holds, without suspension",
            median(&run_t),
            "memory-bound: (host memory - reserve) / memory per waiting servo; a waiting servo holds no slot",
        ),
        density(
            "suspend: waiting servos this host holds, frozen",
            median(&frz_t),
            "frozen servos hold the same memory: the same bound, without their CPU",
        ),
    ]
}

/// The `N` of `PREFIX N ms` in the task's first `kind` event's detail.
pub(crate) fn event_ms(t: &Value, kind: &str, prefix: &str) -> Option<f64> {
    let detail = t["events"].as_array()?.iter().find(|e| e["kind"] == kind)?["detail"].as_str()?;
    let rest = &detail[detail.find(prefix)? + prefix.len()..];
    rest.split_whitespace().next()?.parse().ok()
}

fn host_mb() -> f64 {
    meminfo_kb("MemTotal:") / 1024.0
}

fn meminfo_kb(field: &str) -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with(field))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(f64::NAN)
}

async fn held_all(env: &Env, containers: &[String]) -> anyhow::Result<Vec<Held>> {
    let mut out = Vec::new();
    for c in containers {
        out.push(held(env, c).await?);
    }
    Ok(out)
}

/// What container `id` holds: its cgroup's charge, its shim's and its
/// root's FUSE daemon's PSS, in MB.
async fn held(env: &Env, id: &str) -> anyhow::Result<Held> {
    let c = env.docker.inspect_container(id, None).await?;
    let pid = c.state.and_then(|s| s.pid).unwrap_or(0);
    let full = c.id.unwrap_or_default();
    let upper = c
        .graph_driver
        .and_then(|g| g.data.get("UpperDir").cloned())
        .unwrap_or_default();
    let cgroup = crate::probe::cgroup_mb(&pid.to_string())
        .with_context(|| format!("no memory cgroup for container {id}"))?;
    let shim = processes_with(&[b"containerd-shim", full.as_bytes()])
        .into_iter()
        .map(pss_mb)
        .sum();
    let fuse = if upper.is_empty() {
        0.0
    } else {
        processes_with(&[b"fuse-overlayfs", upper.as_bytes()])
            .into_iter()
            .map(pss_mb)
            .sum()
    };
    Ok(Held { cgroup, shim, fuse })
}

/// The pids whose command line contains every one of `needles`.
fn processes_with(needles: &[&[u8]]) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if needles
            .iter()
            .all(|n| !n.is_empty() && cmd.windows(n.len()).any(|w| w == *n))
        {
            out.push(pid);
        }
    }
    out
}

/// A process's proportional set size (shared pages split among their
/// users), in MB.
fn pss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Pss:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<f64>()
                .ok()
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}
