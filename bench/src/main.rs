//! `saheeli-bench`: Saheeli side by side with raw Docker, on the local
//! daemon, offline (replay model, or a fake LLM on 127.0.0.1). It drives the real `saheeli` binary in
//! throwaway project directories and talks to Docker through bollard for
//! the floors. Every figure is compared with a floor measured in the same
//! run. Progress goes to stderr; the table to stdout; the same figures as
//! JSON to `results/bench-<UTC time>.json`. Targets are reported, never
//! enforced: the exit code is non-zero only when a measurement broke.
//!
//! # Layout
//!
//! - `env`: what measurements share, and cleanup of what the bench made.
//! - `events`: Docker's container events, recorded with their timestamps.
//! - `floor`: raw and hardened Docker cycles; `cpu`: CPU accounting.
//! - `extract`: a reference collector, to compare the foreman's with.
//! - `project`: a throwaway Saheeli project; `history`: bulk task rows.
//! - `llm`: the tests' own fake LLM (real HTTP, the OpenAI format, delays)
//!   for many tasks at once; `fake_llm`: an OpenAI-compatible model
//!   answering at once, for the per-step figure; `hops`: the floors of a
//!   step's HTTP hops; `probe`: descriptors, sockets and servo memory
//!   from `/proc`.
//! - `dispatch`, `first`, `steps`, `throughput`, `wide`, `thousand`,
//!   `collection`, `footprint`, `admission` (a fixed-concurrency sweep
//!   against `auto`), `long` (issue 26: `cost` with and without prompt
//!   caching, `length` in a 16k window), `rates` (issue 26: a fleet under a
//!   provider's rate limit; `auto` on LLM-bound work, quiet and beside a
//!   CPU-bound load), `swarm` (issue 28: a private 3-node swarm against
//!   this host; full runs and `--only swarm`): the measurements.
//! - `local` (issue 27): one call through Saheeli to a real llama-server
//!   against the same call straight to it.
//! - `pool`: the warm pool (issue 28): first request warm and cold,
//!   a burst, its idle cost (and `thousand` with the pool on).
//! - `egress` (issue 50): a download and small requests through a task's
//!   egress proxy against the same client straight on this host.
//! - `setup` (issue 50): a task's start with its set-up reused from the
//!   cache against the same task without a set-up.
//! - `fork` (issue 51): a snapshot's cost per step on a 100 MB
//!   workspace (time and disk, against a whole copy and an image copy),
//!   and a fork at step 5 against a cold launch of the same task.
//! - `vetting` (issue 47): the gateway's vetting of a third-party agent's
//!   requests, per call, against parsing them alone.
//! - `suspend` (issue 51): what a waiting servo holds, running and
//!   frozen, the freeze and thaw times, and the waiting servos a host
//!   holds; `suspend_model`: the freeze and thaw of servos in a model wait.
//! - `stats`: medians, p95 and the report.

mod admission;
mod collection;
mod cpu;
mod dispatch;
mod egress;
mod env;
mod events;
mod extract;
// The tests' prompt cache, shared by their fake LLM (`llm`) and `long`.
#[path = "../../foreman/tests/it/fake_cache.rs"]
mod fake_cache;
// The tests' provider rate limit, enforced by their fake LLM (`llm`).
#[path = "../../foreman/tests/it/fake_limit.rs"]
mod fake_limit;
mod fake_llm;
// The test double's answers in each API's format, which its
// `foreman/tests/it/fake_llm.rs` (included by `llm`) renders with.
#[allow(dead_code)]
#[path = "../../foreman/tests/it/fake_stream.rs"]
mod fake_stream;
mod first;
mod floor;
mod footprint;
mod fork;
mod history;
mod hops;
mod llm;
mod local;
mod long;
mod pool;
mod probe;
mod project;
mod rates;
mod setup_start;
mod stats;
mod steps;
mod suspend;
mod suspend_model;
mod swarm;
mod task_overhead;
mod thousand;
mod throughput;
mod vetting;
mod wide;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;

use env::{Env, Sizes, progress};

const MEASUREMENTS: &[&str] = &[
    "floor",
    "fork",
    "dispatch",
    "first",
    "step",
    "throughput",
    "wide",
    "thousand",
    "collection",
    "rss",
    "status",
    "size",
    "admission",
    "cost",
    "length",
    "pool",
    "rates",
    "auto",
    "swarm",
    "swarm-start",
    "local",
    "vetting",
    "egress",
    "setup",
    "task",
    "suspend",
];

/// Measure Saheeli against raw Docker (offline, on the local daemon).
#[derive(Parser)]
struct Args {
    /// Small sizes: checks that every measurement works, in about two
    /// minutes; never fails on a timing.
    #[arg(long)]
    quick: bool,
    /// The `saheeli` binary (default: target/release/saheeli, else target/debug/saheeli).
    #[arg(long)]
    saheeli: Option<PathBuf>,
    /// The servo binary whose size is reported (default: where
    /// scripts/servo-bin.sh builds it, target/<arch>-unknown-linux-gnu/release/servo).
    #[arg(long)]
    servo: Option<PathBuf>,
    /// The servo image tasks run in.
    #[arg(long, default_value = "saheeli-servo:latest")]
    image: String,
    /// The base image the raw floor runs `true` in.
    #[arg(long, default_value = "saheeli-base:bookworm")]
    base: String,
    /// Where the JSON report goes.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Run only these measurements (repeatable): floor, dispatch, first,
    /// step, throughput, wide, thousand, collection, rss, status, size,
    /// admission, cost, length (`cost` and `length` run together), pool
    /// (issue 28: warm first request, burst, cost, and the thousand with
    /// the pool on), rates, auto, swarm (not in `--quick` unless named: it
    /// starts a 3-node swarm), swarm-start (issue 53, only when named: a
    /// cold job, a warm one and this host's start, one task at a time),
    /// local (issue 27: one call through Saheeli to
    /// a real llama-server against the same call straight to it; needs
    /// `scripts/setup.sh llama`), vetting (issue 47: the gateway's
    /// reading and vetting of a third-party agent's request of 10, 100 and
    /// 400 KB against parsing it alone), egress (issue 50: MB/s and the
    /// latency per request through a task's egress proxy against straight),
    /// setup (issue 50: a start with a cached set-up against a plain one),
    /// task (issue 49: a Harbor task with the oracle against its own work
    /// in a bare container), suspend (issue 51: memory per waiting servo,
    /// running and frozen, freeze and thaw times, how many waiting servos
    /// this host holds; the freeze and thaw of servos in a model wait),
    /// fork (issue 51: a snapshot's cost per step, and a
    /// fork at step 5 of a 100 MB workspace against a cold launch).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(MEASUREMENTS))]
    only: Vec<String>,
    /// Tasks at once in `wide` (default 500; 20 with --quick).
    #[arg(long)]
    wide: Option<usize>,
    /// Tasks through one foreman in `thousand` (default 1000; 30 with --quick).
    #[arg(long)]
    thousand: Option<usize>,
    /// How many times shorter than a minute the fake provider's rate-limit
    /// window is in `rates` (default 1: the real figure, about 17
    /// minutes; 30 with --quick).
    #[arg(long)]
    rate_scale: Option<f64>,
    /// Tasks (of 10 calls) in `rates` (default 100; 12 with --quick).
    #[arg(long)]
    rate_tasks: Option<usize>,
    /// Tasks (of 3 calls answered after 2 s) in `auto` (default 200; 20
    /// with --quick).
    #[arg(long)]
    auto_tasks: Option<usize>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(bench(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn default_saheeli() -> PathBuf {
    let release = PathBuf::from("target/release/saheeli");
    if release.is_file() {
        release
    } else {
        PathBuf::from("target/debug/saheeli")
    }
}

/// Where scripts/servo-bin.sh builds the servo.
fn default_servo() -> PathBuf {
    PathBuf::from(format!(
        "target/{}-unknown-linux-gnu/release/servo",
        std::env::consts::ARCH
    ))
}

fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

async fn bench(args: Args) -> anyhow::Result<()> {
    let saheeli = std::path::absolute(args.saheeli.clone().unwrap_or_else(default_saheeli))?;
    anyhow::ensure!(
        saheeli.is_file(),
        "`{}` not found; build it first (scripts/bench.sh does)",
        saheeli.display()
    );
    let docker = bollard::Docker::connect_with_local_defaults()
        .context("connecting to Docker")?
        .negotiate_version()
        .await
        .context("connecting to Docker: is the daemon running? (`docker info`)")?;
    for img in [&args.image, &args.base] {
        docker.inspect_image(img).await.with_context(|| {
            format!("image `{img}` not found (`saheeli build-servo`, `scripts/setup.sh base`)")
        })?;
    }
    progress("starting");
    let host = host_info(&docker).await;
    let load = loadavg();
    let mut sizes = if args.quick {
        Sizes::quick()
    } else {
        Sizes::full()
    };
    sizes.wide = args.wide.unwrap_or(sizes.wide);
    sizes.thousand = args.thousand.unwrap_or(sizes.thousand);
    let events = events::Events::start(&docker).await;
    let env = Env::new(
        docker,
        saheeli,
        args.image.clone(),
        args.base.clone(),
        sizes,
        events,
    );
    let started = Instant::now();
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .replace(':', "");
    let mut figures = vec![];
    let mut busy = serde_json::Map::new();
    let result = run(&env, &args, &mut figures, &mut busy).await;
    env.clean().await;
    if let Err(e) = &result {
        progress(&format!("failed after {} figures: {e:#}", figures.len()));
    }
    result?;
    println!("{}", stats::table(&figures));
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating `{}`", args.out.display()))?;
    let path = args.out.join(format!(
        "bench-{stamp}{}.json",
        if args.quick { "-quick" } else { "" }
    ));
    let report = serde_json::json!({
        "quick": args.quick,
        "started": stamp,
        "seconds": started.elapsed().as_secs_f64(),
        "saheeli": env.saheeli,
        "host": host,
        "load_average_before": load,
        "load_average_after": loadavg(),
        "busy_before": busy,
        "figures": figures,
    });
    std::fs::write(&path, serde_json::to_vec_pretty(&report)?)
        .with_context(|| format!("writing `{}`", path.display()))?;
    progress(&format!(
        "done in {:.0}s; figures in {}",
        started.elapsed().as_secs_f64(),
        path.display()
    ));
    Ok(())
}

async fn host_info(docker: &bollard::Docker) -> serde_json::Value {
    let info = docker.info().await.ok();
    let version = docker.version().await.ok();
    let git = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    serde_json::json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "docker": version.and_then(|v| v.version),
        "storage_driver": info.as_ref().and_then(|i| i.driver.clone()),
        "cgroup_version": info.and_then(|i| i.cgroup_version).and_then(|c| serde_json::to_value(c).ok()),
        "git": git,
    })
}

/// Measures how busy the machine is before a measurement (nothing of ours
/// runs then) and warns when something else is using it.
async fn quiet_check(section: &str, busy: &mut serde_json::Map<String, serde_json::Value>) {
    let share = cpu::busy_share(std::time::Duration::from_millis(500)).await;
    busy.insert(section.into(), share.into());
    if share > 0.25 {
        progress(&format!(
            "warning: {:.0}% of the CPU busy before `{section}` with nothing of ours running: its figures will be noisy",
            share * 100.0
        ));
    }
}

async fn run(
    env: &Env,
    args: &Args,
    figures: &mut Vec<stats::Figure>,
    busy: &mut serde_json::Map<String, serde_json::Value>,
) -> anyhow::Result<()> {
    let want = |name: &str| args.only.is_empty() || args.only.iter().any(|o| o == name);
    let servo = args.servo.clone().unwrap_or_else(default_servo);
    if want("floor") || want("dispatch") || want("first") || want("pool") {
        quiet_check("floor", busy).await;
        let floors = dispatch::floors(env).await?;
        let mut more = vec![];
        if want("dispatch") {
            more.push(dispatch::dispatch(env, &floors).await?);
        }
        if want("first") {
            quiet_check("first", busy).await;
            more.push(first::first_request(env, &floors).await?);
        }
        if want("pool") {
            quiet_check("pool", busy).await;
            more.extend(pool::pool(env, &floors).await?);
            figures.extend(thousand::thousand_pool(env).await?);
        }
        figures.extend([floors.raw_cs, floors.hardened_cs, floors.raw_cycle]);
        figures.extend(more);
    }
    if want("egress") {
        quiet_check("egress", busy).await;
        figures.extend(egress::egress(env).await?);
    }
    if want("setup") {
        quiet_check("setup", busy).await;
        figures.extend(setup_start::setup_start(env).await?);
    }
    if want("task") {
        quiet_check("task", busy).await;
        figures.extend(task_overhead::task_overhead(env, args.quick).await?);
    }
    if want("suspend") {
        quiet_check("suspend", busy).await;
        figures.extend(suspend::suspend(env, if args.quick { 4 } else { 16 }).await?);
        figures.extend(suspend_model::model_wait(env, 4).await?);
    }
    if want("fork") {
        quiet_check("fork", busy).await;
        figures.extend(fork::fork(env).await?);
    }
    if want("step") {
        quiet_check("step", busy).await;
        figures.push(steps::per_step(env).await?);
    }
    if want("throughput") {
        quiet_check("throughput", busy).await;
        let b = throughput::bursts(env).await?;
        figures.extend([b.raw, b.hardened, b.saheeli]);
    }
    if want("wide") {
        quiet_check("wide", busy).await;
        figures.extend(wide::wide(env).await?);
    }
    if want("thousand") {
        quiet_check("thousand", busy).await;
        figures.extend(thousand::thousand(env).await?);
    }
    if want("collection") {
        quiet_check("collection", busy).await;
        figures.extend(collection::collection(env).await?);
    }
    if want("rss") {
        quiet_check("rss", busy).await;
        figures.push(footprint::foreman_rss(env).await?);
    }
    if want("status") {
        quiet_check("status", busy).await;
        figures.extend(footprint::status_latency(env).await?);
    }
    if want("admission") {
        quiet_check("admission", busy).await;
        figures.extend(admission::admission(env).await?);
    }
    if want("cost") || want("length") {
        quiet_check("long", busy).await;
        figures.extend(long::long_tasks(env, args.quick).await?);
    }
    if want("rates") {
        quiet_check("rates", busy).await;
        let (tasks, scale) = if args.quick { (12, 30.0) } else { (100, 1.0) };
        let sizes = rates::RateSizes {
            tasks: args.rate_tasks.unwrap_or(tasks),
            calls: 10,
            scale: args.rate_scale.unwrap_or(scale),
        };
        figures.push(rates::rate_limits(env, &sizes).await?);
    }
    if want("auto") {
        quiet_check("auto", busy).await;
        let sizes = rates::AutoSizes {
            tasks: args.auto_tasks.unwrap_or(if args.quick { 20 } else { 200 }),
            calls: 3,
            delay: std::time::Duration::from_secs(2),
        };
        figures.extend(rates::auto(env, &sizes).await?);
    }
    // A private swarm of three dockerd: in full runs, or when named.
    if args.only.iter().any(|o| o == "swarm") || (args.only.is_empty() && !args.quick) {
        quiet_check("swarm", busy).await;
        figures.extend(swarm::swarm(env, &servo, args.quick).await?);
    }
    if args.only.iter().any(|o| o == "swarm-start") {
        quiet_check("swarm-start", busy).await;
        figures.extend(swarm::swarm_start(env, &servo, args.quick).await?);
    }
    if want("vetting") {
        quiet_check("vetting", busy).await;
        figures.extend(vetting::vetting(env).await?);
    }
    if want("local") {
        quiet_check("local", busy).await;
        figures.extend(local::local(env, args.quick).await?);
    }
    if want("size") {
        let (bin, img) = footprint::sizes(env, &servo).await?;
        figures.extend([bin, img]);
    }
    Ok(())
}
