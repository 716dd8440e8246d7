//! Issue 26's fleet figures.
//!
//! - `rate limits`: a fake provider enforcing a rate limit (60 requests and
//!   100k tokens a minute, with OpenAI's real headers and 429s) and N tasks
//!   of K calls at `concurrency: auto`: every task completes, 429s stay
//!   under 5% of the calls, and the wall time is measured against the
//!   limit's floor (N×K calls at 60 a minute). `--rate-scale F` shortens
//!   the provider's window F times (the same limits per window), so a run
//!   takes F times less than the real 17 minutes.
//! - `auto`: N tasks of 3 LLM calls answered after 2 s, served with
//!   `concurrency: N` (all at once: the best fixed setting for LLM-bound
//!   work) and with `auto`, on a quiet machine and with a CPU-bound load
//!   the bench starts beside it (a spinning thread per core): `auto`
//!   within 1.1× of the fixed setting in both.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::env::{Env, progress};
use crate::fake_limit::RateLimit;
use crate::project::{Project, wait_child};
use crate::stats::Figure;

/// The rate-limit figure's shape.
pub struct RateSizes {
    pub tasks: usize,
    pub calls: usize,
    /// How many times shorter than a minute the provider's window is.
    pub scale: f64,
}

/// The auto figure's shape.
pub struct AutoSizes {
    pub tasks: usize,
    pub calls: usize,
    pub delay: Duration,
}

fn prompt(p: &Project) -> anyhow::Result<String> {
    std::fs::write(
        p.path().join("fleet.md"),
        "---\nmodel: gpt-4o-mini\nmax_steps: 30\ntimeout: 60m\n---\nCall the tools you are given.\n",
    )?;
    Ok("fleet.md".into())
}

/// A served fleet: wall ms, tasks complete and failed, and the log.
struct Served {
    ms: f64,
    complete: i64,
    failed: i64,
    log: String,
}

/// Queues `n` tasks and times `serve --drain -j SETTING` against `llm`.
async fn serve(
    env: &Env,
    llm: &crate::llm::Fake,
    setting: &str,
    n: usize,
) -> anyhow::Result<Served> {
    let mut p = Project::new(env, 4)?;
    p.env.push(("OPENAI_BASE_URL".into(), llm.base_url()));
    p.env
        .push(("OPENAI_API_KEY".into(), "sk-bench-not-a-secret".into()));
    let r = serve_in(&p, setting, n).await;
    p.cleanup(env).await;
    r
}

async fn serve_in(p: &Project, setting: &str, n: usize) -> anyhow::Result<Served> {
    let first = p.submit(&prompt(p)?)?;
    p.clone_queued(&first, n - 1)?;
    let t0 = Instant::now();
    let mut child = p.spawn(
        &["serve", "--drain", "-j", setting],
        "serve.log",
        "saheeli=info,warn",
    )?;
    let status = wait_child(&mut child).await?;
    let ms = t0.elapsed().as_secs_f64() * 1000.0;
    let log = p.read_log("serve.log");
    if !status.success() {
        bail!("`serve --drain -j {setting}` exited {status}: {log}");
    }
    let failed = p.count("failed")? + p.count("incomplete")?;
    Ok(Served {
        ms,
        complete: p.count("complete")?,
        failed,
        log,
    })
}

pub async fn rate_limits(env: &Env, s: &RateSizes) -> anyhow::Result<Figure> {
    let calls = s.tasks * s.calls;
    let limit = RateLimit {
        requests: 60,
        tokens: 100_000,
        window: Duration::from_secs_f64(60.0 / s.scale),
    };
    // Every call but the first group's waits for the refill: the limit's
    // floor is the calls at 60 a window.
    let floor_ms = calls as f64 / 60.0 * limit.window.as_secs_f64() * 1000.0;
    progress(&format!(
        "rate limits: {} tasks × {} calls at concurrency auto, 60 requests and 100k tokens per {:.0?} (floor {:.0} s)",
        s.tasks,
        s.calls,
        limit.window,
        floor_ms / 1000.0
    ));
    let llm = crate::llm::start(s.calls, Duration::ZERO).await?;
    llm.limit(limit);
    let served = serve(env, &llm, "auto", s.tasks).await?;
    let (answered, refused) = llm.rate_limited();
    let share = refused as f64 / calls as f64;
    let held = served
        .log
        .lines()
        .filter(|l| l.contains("rate limit holds launches"))
        .count();
    if served.complete != s.tasks as i64 {
        bail!(
            "rate limits: {} of {} tasks complete, {} failed: {}",
            served.complete,
            s.tasks,
            served.failed,
            served
                .log
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    Ok(Figure::new(
        &format!(
            "rate limits: {} tasks × {} calls, 60 req/{:.0?}, auto",
            s.tasks, s.calls, limit.window
        ),
        "ms",
        &[served.ms],
    )
    .against("the limit's floor", floor_ms, 1.15)
    .detail("tasks failed", served.failed as f64)
    .detail("429s", refused as f64)
    .detail("429s per call", share)
    .detail("calls answered", answered as f64)
    .detail("times admission held launches", held as f64)
    .note(format!(
        "{} of {} complete, {} failed; {refused} 429s for {calls} calls ({:.1}%, target ≤ 5%); \
         floor {calls} calls at 60 per {:.1} s = {:.0} s (scale {}: the real limit is per minute)",
        served.complete,
        s.tasks,
        served.failed,
        share * 100.0,
        limit.window.as_secs_f64(),
        floor_ms / 1000.0,
        s.scale
    )))
}

/// A spinning thread per core until dropped: a CPU-bound load beside the
/// foreman, as builds and other work make on a busy host.
struct CpuLoad {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl CpuLoad {
    fn start() -> CpuLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let n = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for i in 0..10_000u64 {
                            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i);
                        }
                        std::hint::black_box(x);
                    }
                })
            })
            .collect();
        CpuLoad { stop, threads }
    }
}

impl Drop for CpuLoad {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// How often `auto` lowered its limit, from its log.
fn backoffs(log: &str) -> usize {
    log.lines().filter(|l| l.contains("limit lowered")).count()
}

pub async fn auto(env: &Env, s: &AutoSizes) -> anyhow::Result<Vec<Figure>> {
    let n = s.tasks;
    let llm = crate::llm::start(s.calls, s.delay).await?;
    let mut figures = vec![];
    for loaded in [false, true] {
        let load = loaded.then(CpuLoad::start);
        let beside = if loaded {
            ", CPU-bound load beside"
        } else {
            ", quiet"
        };
        progress(&format!(
            "auto: {n} tasks × {} calls answered after {:?}, concurrency {n}{beside}",
            s.calls, s.delay
        ));
        let fixed = serve(env, &llm, &n.to_string(), n).await?;
        progress(&format!(
            "auto: {n} tasks × {} calls answered after {:?}, concurrency auto{beside}",
            s.calls, s.delay
        ));
        let auto = serve(env, &llm, "auto", n).await?;
        drop(load);
        for (name, r) in [("fixed", &fixed), ("auto", &auto)] {
            if r.complete != n as i64 {
                bail!("auto ({name}{beside}): {} of {n} complete", r.complete);
            }
        }
        figures.push(
            Figure::new(
                &format!(
                    "auto: {n} tasks × {} LLM calls, concurrency auto{beside}",
                    s.calls
                ),
                "ms",
                &[auto.ms],
            )
            .against(&format!("concurrency {n}"), fixed.ms, 1.1)
            .detail("back-offs", backoffs(&auto.log) as f64)
            .note(format!(
                "fixed {n}: {:.0} ms; auto: {:.0} ms, lowered its limit {} times",
                fixed.ms,
                auto.ms,
                backoffs(&auto.log)
            )),
        );
    }
    Ok(figures)
}
