//! Adaptive admission (issue 15 §3): the same N one-step tasks served with
//! fixed concurrency 4, 8, 16, 32 and 64 (a sweep), then with `auto`, in
//! the same run; `auto`'s wall time against the best fixed one (target
//! ≤ 1.1×). Each setting gets a fresh project; the tasks are queued first
//! and `serve --drain -j SETTING` is timed to its exit.

use std::time::{Duration, Instant};

use anyhow::bail;

use crate::env::{Env, progress};
use crate::project::Project;
use crate::stats::Figure;

/// The fixed settings of the sweep.
const SWEEP: &[usize] = &[4, 8, 16, 32, 64];

/// One setting's run: wall ms, and for `auto` what its log said.
struct Served {
    ms: f64,
    log: String,
}

async fn serve(env: &Env, setting: &str, n: usize) -> anyhow::Result<Served> {
    progress(&format!(
        "admission: {n} one-step tasks at concurrency {setting}"
    ));
    let p = Project::new(env, 4)?;
    let r = serve_in(&p, setting, n).await;
    p.cleanup(env).await;
    r
}

async fn serve_in(p: &Project, setting: &str, n: usize) -> anyhow::Result<Served> {
    let one = p.one_step()?;
    let first = p.submit(&one)?;
    p.clone_queued(&first, n - 1)?;
    let t0 = Instant::now();
    let mut child = p.spawn(
        &["serve", "--drain", "-j", setting],
        "serve.log",
        "saheeli=info,warn",
    )?;
    let status = crate::project::wait_child(&mut child).await?;
    let ms = t0.elapsed().as_secs_f64() * 1000.0;
    let complete = p.count("complete")?;
    let log = p.read_log("serve.log");
    if complete != n as i64 || !status.success() {
        bail!("only {complete} of {n} tasks completed at -j {setting} ({status}): {log}");
    }
    // Let the daemon settle (removals finish) before the next setting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(Served { ms, log })
}

/// What `auto` did, from its log: back-offs, breaker trips and the last
/// limit it lowered to.
fn auto_story(log: &str) -> (usize, usize, Option<u64>) {
    let lowered: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("limit lowered"))
        .collect();
    let opened = log
        .lines()
        .filter(|l| l.contains("no launches for a while"))
        .count();
    let last = lowered.last().and_then(|l| {
        let rest = &l[l.find("limit=")? + "limit=".len()..];
        rest.split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    });
    (lowered.len(), opened, last)
}

pub async fn admission(env: &Env) -> anyhow::Result<Vec<Figure>> {
    let n = env.sizes.admission_n;
    let mut figures = Vec::new();
    let mut best: Option<(usize, f64)> = None;
    for &j in SWEEP {
        let s = serve(env, &j.to_string(), n).await?;
        if best.is_none_or(|(_, ms)| s.ms < ms) {
            best = Some((j, s.ms));
        }
        figures.push(Figure::new(
            &format!("admission: {n} tasks at concurrency {j}"),
            "ms",
            &[s.ms],
        ));
    }
    let auto = serve(env, "auto", n).await?;
    let Some((best_j, best_ms)) = best else {
        bail!("the sweep ran nothing");
    };
    let (backoffs, trips, last) = auto_story(&auto.log);
    let sweep: Vec<String> = figures
        .iter()
        .zip(SWEEP)
        .map(|(f, j)| format!("-j {j} {:.0}", f.median))
        .collect();
    figures.push(
        Figure::new(
            &format!("admission: {n} tasks at concurrency auto"),
            "ms",
            &[auto.ms],
        )
        .against(&format!("best fixed (-j {best_j})"), best_ms, 1.1)
        .detail("back-offs", backoffs as f64)
        .detail("breaker trips", trips as f64)
        .note(format!(
            "sweep ms: {}; auto lowered its limit {backoffs} times{}, breaker opened {trips} times",
            sweep.join(", "),
            last.map(|l| format!(" (last to {l})")).unwrap_or_default()
        )),
    );
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_story_is_read_from_the_log() {
        let log = "\
2026 INFO admission: Docker slowing down; limit lowered limit=24 latency_ms=300
2026 INFO admission: Docker slowing down; limit lowered limit=18 latency_ms=280
2026 WARN admission: Docker daemon failing; no launches for a while breaker=\"open\"";
        assert_eq!(auto_story(log), (2, 1, Some(18)));
        assert_eq!(auto_story(""), (0, 0, None));
    }
}
