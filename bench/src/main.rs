//! `saheeli-bench`: Saheeli side by side with raw Docker, on the local
//! daemon, offline (replay model). Every figure is compared with a floor
//! measured in the same run. Progress goes to stderr; the table to stdout;
//! the same figures as JSON to `results/bench-<time>.json`.
//!
//! # Layout
//!
//! - `floor`: raw Docker API cycles; `project`: a throwaway Saheeli project.
//! - `measure`: dispatch, per-step overhead, throughput.
//! - `footprint`: collection, memory, status latency, sizes.
//! - `stats`: medians, p95 and the report.

mod floor;
mod footprint;
mod measure;
mod project;
mod stats;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;

use measure::{Env, Sizes};

/// Measure Saheeli against raw Docker (offline, on the local daemon).
#[derive(Parser)]
struct Args {
    /// Small sizes: checks that every measurement works, in about two minutes.
    #[arg(long)]
    quick: bool,
    /// The `saheeli` binary (default: target/release/saheeli, else target/debug/saheeli).
    #[arg(long)]
    saheeli: Option<PathBuf>,
    /// The servo binary whose size is reported.
    #[arg(long, default_value = "target/release/servo")]
    servo: PathBuf,
    #[arg(long, default_value = "saheeli-servo:latest")]
    image: String,
    #[arg(long, default_value = "saheeli-base:bookworm")]
    base: String,
    /// Where the JSON report goes.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Run only these measurements: floor, dispatch, step, throughput,
    /// collection, rss, status, size (repeatable).
    #[arg(long)]
    only: Vec<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let saheeli = args.saheeli.clone().unwrap_or_else(|| {
        let release = PathBuf::from("target/release/saheeli");
        if release.is_file() {
            release
        } else {
            PathBuf::from("target/debug/saheeli")
        }
    });
    let saheeli = std::path::absolute(&saheeli)?;
    anyhow::ensure!(
        saheeli.is_file(),
        "`{}` not found; build it first (scripts/bench.sh does)",
        saheeli.display()
    );
    let docker = bollard::Docker::connect_with_local_defaults()?
        .negotiate_version()
        .await?;
    let sizes = if args.quick {
        Sizes {
            floor_n: 5,
            burst: 16,
            dispatch_n: 5,
            step_runs: 1,
            collect_files: 1000,
            collect_runs: 1,
            queued: 1000,
            status_rows: 5000,
        }
    } else {
        Sizes {
            floor_n: 20,
            burst: 200,
            dispatch_n: 20,
            step_runs: 3,
            collect_files: 10_000,
            collect_runs: 3,
            queued: 10_000,
            status_rows: 100_000,
        }
    };
    let env = Env {
        docker,
        saheeli,
        image: args.image.clone(),
        base: args.base.clone(),
        sizes,
    };
    let started = Instant::now();
    let result = run(&env, &args).await;
    floor::clean(&env.docker).await;
    let figures = result?;
    println!("{}", stats::table(&figures));
    std::fs::create_dir_all(&args.out)?;
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .replace(':', "");
    let path = args.out.join(format!(
        "bench-{stamp}{}.json",
        if args.quick { "-quick" } else { "" }
    ));
    let report = serde_json::json!({
        "quick": args.quick,
        "seconds": started.elapsed().as_secs_f64(),
        "saheeli": env.saheeli,
        "figures": figures,
    });
    std::fs::write(&path, serde_json::to_vec_pretty(&report)?)
        .with_context(|| format!("writing `{}`", path.display()))?;
    eprintln!(
        "bench: done in {:.0}s; figures in {}",
        started.elapsed().as_secs_f64(),
        path.display()
    );
    Ok(())
}

async fn run(env: &Env, args: &Args) -> anyhow::Result<Vec<stats::Figure>> {
    let want = |name: &str| args.only.is_empty() || args.only.iter().any(|o| o == name);
    let mut figures = vec![];
    let (mut cs_median, mut burst_ms) = (f64::NAN, f64::NAN);
    if want("floor") || want("dispatch") || want("throughput") {
        let (cs, total, burst) = measure::floors(env).await?;
        (cs_median, burst_ms) = (cs.median, burst.median);
        figures.extend([cs, total, burst]);
    }
    if want("dispatch") {
        figures.push(measure::dispatch(env, cs_median).await?);
    }
    if want("step") {
        figures.push(measure::per_step(env).await?);
    }
    if want("throughput") {
        figures.push(measure::throughput(env, burst_ms).await?);
    }
    if want("collection") {
        figures.push(footprint::collection(env).await?);
    }
    if want("rss") {
        figures.push(footprint::foreman_rss(env).await?);
    }
    if want("status") {
        let (table, json) = footprint::status_latency(env).await?;
        figures.extend([table, json]);
    }
    if want("size") {
        let (bin, img) = footprint::sizes(env, &args.servo).await?;
        figures.extend([bin, img]);
    }
    Ok(figures)
}
