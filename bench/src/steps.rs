//! Per-step overhead: `saheeli run` of a 1-step replay task against a
//! 101-step one (100 `execute_shell` of `true`, then `task_complete`):
//! (t101 − t1) / 100, minus what spawning `bash -c true` costs inside the
//! same kind of container (measured by a replay task that times 200 such
//! spawns in a shell loop).
//!
//! The containers' own lifetimes (start → die events) give a second view
//! with the launch and collection taken out: the servo's time per step.

use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::env::{Env, progress};
use crate::events::ms_between;
use crate::project::Project;
use crate::stats::{Figure, median};

/// How many spawns the in-container measurement times.
const SPAWNS: usize = 200;

/// The text of the first tool result in a finished task's session.
fn first_tool_output(task: &Value) -> anyhow::Result<String> {
    let dir = std::path::Path::new(task["results"].as_str().context("no results path")?);
    let id = task["id"].as_str().context("no id")?;
    let path = dir.join(format!("servo-{id}-session.json"));
    let session: Value = serde_json::from_slice(
        &std::fs::read(&path).with_context(|| format!("reading `{}`", path.display()))?,
    )?;
    session["messages"]
        .as_array()
        .context("no messages in the session")?
        .iter()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .map(String::from)
        .context("no tool result in the session")
}

/// The servo's run time (container start → die), ms.
async fn servo_ms(env: &Env, task: &Value) -> anyhow::Result<f64> {
    let id = task["id"].as_str().context("no id")?;
    // The die event may trail the run's exit by a moment.
    for _ in 0..100 {
        let t = env.events.times(id);
        if let (Some(s), Some(d)) = (t.start, t.die) {
            return Ok(ms_between(s, d));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    bail!("no start/die events for task {id}")
}

pub async fn per_step(env: &Env) -> anyhow::Result<Figure> {
    progress("per-step overhead: 1-step vs 101-step replay tasks");
    let p = Project::new(env, 8)?;
    let result = measure(env, &p).await;
    p.cleanup(env).await;
    result
}

async fn measure(env: &Env, p: &Project) -> anyhow::Result<Figure> {
    let one = p.one_step()?;
    let mut calls: Vec<(&str, Value)> = (0..100)
        .map(|_| ("execute_shell", json!({"command": "true"})))
        .collect();
    calls.push(("task_complete", json!({"message": "ok"})));
    let many = p.replay_prompt("many", &calls)?;
    // Nanoseconds for SPAWNS spawns of `bash -c true`, minus the bare loop.
    let script = format!(
        "n={SPAWNS}; s=$(date +%s%N); for i in $(seq $n); do bash -c true; done; \
         m=$(date +%s%N); for i in $(seq $n); do :; done; e=$(date +%s%N); \
         echo $(( (m - s) - (e - m) ))"
    );
    let spawn = p.replay_prompt(
        "spawn",
        &[
            ("execute_shell", json!({"command": script})),
            ("task_complete", json!({"message": "ok"})),
        ],
    )?;
    p.timed_run(&one)?; // warm-up
    let (mut t1, mut t101, mut inside) = (vec![], vec![], vec![]);
    let (mut s1, mut s101) = (vec![], vec![]);
    for _ in 0..env.sizes.step_runs {
        let (ms, task) = p.timed_run(&one)?;
        t1.push(ms);
        s1.push(servo_ms(env, &task).await?);
        let (ms, task) = p.timed_run(&many)?;
        if task["steps"] != 101 {
            bail!("the 101-step task took {} steps", task["steps"]);
        }
        t101.push(ms);
        s101.push(servo_ms(env, &task).await?);
        let (_, task) = p.timed_run(&spawn)?;
        let out = first_tool_output(&task)?;
        let ns: f64 = out
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .with_context(|| format!("reading the in-container spawn time from `{out}`"))?;
        inside.push(ns / SPAWNS as f64 / 1e6);
    }
    let spawn_ms = median(&inside);
    let per: Vec<f64> = t101
        .iter()
        .zip(&t1)
        .map(|(a, b)| (a - b) / 100.0 - spawn_ms)
        .collect();
    let servo_per: Vec<f64> = s101
        .iter()
        .zip(&s1)
        .map(|(a, b)| (a - b) / 100.0 - spawn_ms)
        .collect();
    let gross = (median(&t101) - median(&t1)) / 100.0;
    Ok(
        Figure::new("per-step overhead (minus spawning `true`)", "ms", &per)
            .at_most(2.0)
            .detail("t1", median(&t1))
            .detail("t101", median(&t101))
            .detail("per step before subtracting the spawn", gross)
            .detail("bash -c true spawn inside the container", spawn_ms)
            .detail("servo only (container start→die), per step", median(&servo_per))
            .note(format!(
                "t1 {:.0} ms, t101 {:.0} ms: {gross:.2} ms/step, of which spawning `bash -c true` in the container {spawn_ms:.2} ms",
                median(&t1),
                median(&t101)
            ))
            .note(format!(
                "servo alone (container start→die: 1 step {:.0} ms, 101 steps {:.0} ms): {:.2} ms/step over the spawn",
                median(&s1),
                median(&s101),
                median(&servo_per)
            )),
    )
}
