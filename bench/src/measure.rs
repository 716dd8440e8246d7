//! Each measurement of the benchmark, as a function returning figures.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bollard::Docker;
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::floor;
use crate::project::Project;
use crate::stats::{Figure, median};

/// Sizes of one run: the full benchmark or `--quick`.
pub struct Sizes {
    pub floor_n: usize,
    pub burst: usize,
    pub dispatch_n: usize,
    pub step_runs: usize,
    pub collect_files: usize,
    pub collect_runs: usize,
    pub queued: usize,
    pub status_rows: usize,
}

pub struct Env {
    pub docker: Docker,
    pub saheeli: std::path::PathBuf,
    pub image: String,
    pub base: String,
    pub sizes: Sizes,
}

fn progress(msg: &str) {
    eprintln!("bench: {msg}");
}

/// Raw Docker: create+start, and create…remove, sequential and in a burst.
pub async fn floors(env: &Env) -> anyhow::Result<(Figure, Figure, Figure)> {
    progress(&format!(
        "floor: {} sequential create+start+wait+remove of `true`",
        env.sizes.floor_n
    ));
    floor::cycle(&env.docker, &env.base, &["true"]).await?; // warm-up
    let mut cs = Vec::new();
    let mut total = Vec::new();
    for _ in 0..env.sizes.floor_n {
        let c = floor::cycle(&env.docker, &env.base, &["true"]).await?;
        cs.push(c.create_start_ms);
        total.push(c.total_ms);
    }
    progress(&format!(
        "floor: {} containers at concurrency 8",
        env.sizes.burst
    ));
    let burst = floor::concurrent(&env.docker, &env.base, env.sizes.burst, 8).await?;
    Ok((
        Figure::new("floor: create+start (raw API)", "ms", &cs),
        Figure::new("floor: create+start+wait+remove (raw API)", "ms", &total),
        Figure::new(
            &format!("floor: {} containers at concurrency 8", env.sizes.burst),
            "ms",
            &[burst],
        ),
    ))
}

/// `task submit` → container started, with `saheeli serve` waiting.
pub async fn dispatch(env: &Env, floor_cs: f64) -> anyhow::Result<Figure> {
    progress(&format!(
        "dispatch: {} submits to a running `saheeli serve`",
        env.sizes.dispatch_n
    ));
    let p = Project::new(&env.saheeli, &env.image, 8)?;
    let prompt = p.replay_prompt("one", &[("task_complete", json!({"message": "ok"}))])?;
    p.ok(&["task", "status"])?; // create the database
    let started: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let opts = bollard::query_parameters::EventsOptionsBuilder::default()
        .filters(&HashMap::from([
            ("type", vec!["container"]),
            ("event", vec!["start"]),
        ]))
        .build();
    let mut events = env.docker.events(Some(opts));
    let seen = started.clone();
    let listener = tokio::spawn(async move {
        while let Some(Ok(ev)) = events.next().await {
            let task = ev
                .actor
                .and_then(|a| a.attributes)
                .and_then(|a| a.get("saheeli.task").cloned());
            if let Some(id) = task {
                seen.lock().unwrap().insert(id, Instant::now());
            }
        }
    });
    let mut serve = p.spawn(&["serve"])?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut samples = Vec::new();
    for _ in 0..env.sizes.dispatch_n {
        let t0 = Instant::now();
        let id = p.submit(&prompt)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(at) = started.lock().unwrap().get(&id) {
                samples.push((*at - t0).as_secs_f64() * 1000.0);
                break;
            }
            if Instant::now() > deadline {
                bail!("task {id} never started");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await; // let it finish
    }
    listener.abort();
    stop(&mut serve);
    Ok(Figure::new("dispatch: submit → container started", "ms", &samples)
        .against("raw create+start", floor_cs, 1.15)
        .note("includes the `saheeli task submit` process, the SQLite insert, the claim, volume, uploads"))
}

fn stop(child: &mut std::process::Child) {
    // SIGINT twice: drain, then stop.
    for _ in 0..2 {
        unsafe { libc_kill(child.id() as i32, 2) };
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = child.wait();
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// The tool result texts of a finished task's session.
fn tool_outputs(task: &Value) -> anyhow::Result<Vec<String>> {
    let dir = std::path::Path::new(task["results"].as_str().context("no results")?);
    let id = task["id"].as_str().context("no id")?;
    let session: Value = serde_json::from_slice(&std::fs::read(
        dir.join(format!("servo-{id}-session.json")),
    )?)?;
    Ok(session["messages"]
        .as_array()
        .context("no messages")?
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(String::from))
        .collect())
}

/// (t101 − t1)/100 minus the cost of spawning `bash -c true` in the container.
pub async fn per_step(env: &Env) -> anyhow::Result<Figure> {
    progress("per-step overhead: 1-step vs 101-step replay tasks");
    let p = Project::new(&env.saheeli, &env.image, 8)?;
    let one = p.replay_prompt("one", &[("task_complete", json!({"message": "ok"}))])?;
    let mut calls: Vec<(&str, Value)> = (0..100)
        .map(|_| ("execute_shell", json!({"command": "true"})))
        .collect();
    calls.push(("task_complete", json!({"message": "ok"})));
    let many = p.replay_prompt("many", &calls)?;
    let spawn = p.replay_prompt(
        "spawn",
        &[
            (
                "execute_shell",
                json!({"command": "s=$(date +%s%N); for i in $(seq 100); do bash -c true; done; e=$(date +%s%N); echo $(( (e - s) / 100000 ))"}),
            ),
            ("task_complete", json!({"message": "ok"})),
        ],
    )?;
    p.timed_run(&one)?; // warm-up
    let (mut t1, mut t101, mut inside) = (vec![], vec![], vec![]);
    for _ in 0..env.sizes.step_runs {
        t1.push(p.timed_run(&one)?.0);
        let (ms, task) = p.timed_run(&many)?;
        if task["state"] != "complete" || task["steps"] != 101 {
            bail!("the 101-step task did not complete: {task}");
        }
        t101.push(ms);
        let (_, task) = p.timed_run(&spawn)?;
        let out = tool_outputs(&task)?;
        let per_spawn_ms = out
            .first()
            .and_then(|t| t.lines().next())
            .and_then(|l| l.trim().parse::<f64>().ok())
            .context("reading the in-container spawn time")?
            / 1000.0; // the command prints microseconds per spawn
        inside.push(per_spawn_ms);
    }
    let spawn_ms = median(&inside);
    let per: Vec<f64> = t101
        .iter()
        .zip(&t1)
        .map(|(a, b)| (a - b) / 100.0 - spawn_ms)
        .collect();
    Ok(
        Figure::new("per-step overhead (minus spawning `true`)", "ms", &per)
            .at_most(2.0)
            .note(format!(
                "t1 {:.0} ms, t101 {:.0} ms, `bash -c true` inside the container {spawn_ms:.2} ms",
                median(&t1),
                median(&t101)
            )),
    )
}

/// N one-step tasks at concurrency 8, against N raw containers at 8.
pub async fn throughput(env: &Env, floor_burst: f64) -> anyhow::Result<Figure> {
    let n = env.sizes.burst;
    progress(&format!("throughput: {n} one-step tasks at concurrency 8"));
    let p = Project::new(&env.saheeli, &env.image, 8)?;
    let one = p.replay_prompt("one", &[("task_complete", json!({"message": "ok"}))])?;
    let first = p.submit(&one)?;
    p.clone_queued(&first, n - 1)?;
    let t0 = Instant::now();
    p.ok(&["serve", "--drain", "-j", "8"])?;
    let ms = t0.elapsed().as_secs_f64() * 1000.0;
    let done = p.ok(&["task", "status", "--json", "--limit", &n.to_string()])?;
    let tasks: Vec<Value> = serde_json::from_str(&done)?;
    let complete = tasks.iter().filter(|t| t["state"] == "complete").count();
    if complete != n {
        bail!("only {complete} of {n} tasks completed");
    }
    Ok(Figure::new(
        &format!("throughput: {n} tasks at concurrency 8"),
        "ms",
        &[ms],
    )
    .against("raw burst", floor_burst, 1.2))
}
