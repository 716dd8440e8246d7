//! Per-step overhead through the path a real task takes: `saheeli run` of
//! a 1-step task against a 101-step one (100 `execute_shell {"command":
//! "true"}`, then `task_complete`), the model being the bench's fake LLM
//! over real HTTP at zero delay: servo → gateway socket → foreman →
//! provider → back, and the command run. The step is (t101 − t1) / 100,
//! where t is how long the task's container lived (Docker's start → die
//! events): the launch and the collection, the same for both tasks, are
//! left out with their noise; the wall time of `saheeli run` is reported
//! beside it.
//!
//! Its parts come from the servo's own timings (the `finish` line of its
//! audit log: LLM calls, inbox looks, tools, audit and session writes,
//! each summed over the run), differenced the same way; what the servo
//! does not account for is its own work, and what the wall time adds over
//! the container's life is the foreman's. Floors measured in the same run:
//! the two HTTP hops alone (`hops`), and spawning `bash -c true` inside
//! the same kind of container (a replay task that times 200 spawns).
//! A 101-step replay task (no gateway, no provider) is run beside them.

use std::time::Duration;

use anyhow::{Context, bail};
use saheeli_protocol::{AuditEvent, Timings};
use serde_json::{Value, json};

use crate::env::{Env, progress};
use crate::events::ms_between;
use crate::fake_llm::FakeLlm;
use crate::hops;
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

/// The servo's timings, from the `finish` line of a finished task's audit log.
fn timings(task: &Value) -> anyhow::Result<Timings> {
    let dir = std::path::Path::new(task["results"].as_str().context("no results path")?);
    let id = task["id"].as_str().context("no id")?;
    let path = dir.join(format!("servo-{id}-audit.log"));
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading `{}`", path.display()))?;
    text.lines()
        .filter_map(|l| serde_json::from_str::<AuditEvent>(l).ok())
        .find_map(|e| match e {
            AuditEvent::Finish { timings, .. } => timings,
            _ => None,
        })
        .with_context(|| format!("no timings in `{}`", path.display()))
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
    progress("per-step overhead: 1-step vs 101-step tasks through the gateway");
    let llm = FakeLlm::start().await?;
    let mut p = Project::new(env, 8)?;
    p.env.push(("OPENAI_BASE_URL".into(), llm.base_url()));
    // A key, as a real user has: the gateway adds it and redacts for it.
    p.env
        .push(("OPENAI_API_KEY".into(), "sk-bench-0123456789abcdef".into()));
    let result = measure(env, &p, &llm).await;
    p.cleanup(env).await;
    result
}

/// A prompt for the fake LLM's `steps-N` model.
fn gateway_prompt(p: &Project, turns: usize) -> anyhow::Result<String> {
    let name = format!("gateway-{turns}.md");
    std::fs::write(
        p.path().join(&name),
        format!("---\nmodel: steps-{turns}\nmax_steps: 1000\ntimeout: 30m\n---\nBenchmark.\n"),
    )?;
    Ok(name)
}

/// One run's figures, all in ms (timings per step where they say so).
struct Run {
    wall: f64,
    servo: f64,
    t: Timings,
}

async fn run_once(env: &Env, p: &Project, prompt: &str, steps: u64) -> anyhow::Result<Run> {
    let (wall, task) = p.timed_run(prompt)?;
    if task["steps"] != steps {
        bail!("the {steps}-step task took {} steps", task["steps"]);
    }
    Ok(Run {
        wall,
        servo: servo_ms(env, &task).await?,
        t: timings(&task)?,
    })
}

/// Per step, ms: (many − one) / 100 of a timing field.
fn per(many: &[Run], one: &[Run], f: impl Fn(&Run) -> f64) -> Vec<f64> {
    many.iter()
        .zip(one)
        .map(|(a, b)| (f(a) - f(b)) / 100.0)
        .collect()
}

fn us(x: u64) -> f64 {
    x as f64 / 1e3
}

async fn measure(env: &Env, p: &Project, llm: &FakeLlm) -> anyhow::Result<Figure> {
    let one = gateway_prompt(p, 1)?;
    let many = gateway_prompt(p, 101)?;
    let mut calls: Vec<(&str, Value)> = (0..100)
        .map(|_| ("execute_shell", json!({"command": "true"})))
        .collect();
    calls.push(("task_complete", json!({"message": "ok"})));
    let replay = p.replay_prompt("replay-many", &calls)?;
    let replay_one = p.one_step()?;
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
    run_once(env, p, &one, 1).await?; // warm-up
    let (mut ones, mut manys, mut inside) = (vec![], vec![], vec![]);
    let (mut r1, mut r101) = (vec![], vec![]);
    for _ in 0..env.sizes.step_runs {
        ones.push(run_once(env, p, &one, 1).await?);
        manys.push(run_once(env, p, &many, 101).await?);
        r1.push(run_once(env, p, &replay_one, 1).await?);
        r101.push(run_once(env, p, &replay, 101).await?);
        let (_, task) = p.timed_run(&spawn)?;
        let out = first_tool_output(&task)?;
        let ns: f64 = out
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .with_context(|| format!("reading the in-container spawn time from `{out}`"))?;
        inside.push(ns / SPAWNS as f64 / 1e6);
    }
    let handler: Vec<f64> = llm.take().iter().map(|s| s.handler_us / 1e3).collect();
    // The largest request of the 101-step task, for the hop floor.
    let hops = hops::measure(llm, 40_000).await?;

    let step = per(&manys, &ones, |r| r.servo);
    let m = |xs: Vec<f64>| median(&xs);
    let wall = m(per(&manys, &ones, |r| r.wall));
    let total = m(per(&manys, &ones, |r| us(r.t.total_us)));
    let llm_ms = m(per(&manys, &ones, |r| us(r.t.llm_us)));
    let inbox = m(per(&manys, &ones, |r| us(r.t.inbox_us)));
    let tool = m(per(&manys, &ones, |r| us(r.t.tools_us)));
    let writes = m(per(&manys, &ones, |r| us(r.t.writes_us)));
    let own = m(per(&manys, &ones, |r| {
        us(r.t.total_us - r.t.llm_us - r.t.inbox_us - r.t.tools_us - r.t.writes_us)
    }));
    let replay_step = m(per(&r101, &r1, |r| r.servo));
    let replay_tool = m(per(&r101, &r1, |r| us(r.t.tools_us)));
    let spawn_ms = median(&inside);
    let handler_ms = median(&handler);
    let hop_floor = hops.tcp_completion_ms + hops.unix_ms;
    Ok(
        Figure::new("per-step overhead through the gateway", "ms", &step)
            .at_most(1.5)
            .detail("t1 (wall)", median(&ones.iter().map(|r| r.wall).collect::<Vec<_>>()))
            .detail("t101 (wall)", median(&manys.iter().map(|r| r.wall).collect::<Vec<_>>()))
            .detail("wall time of saheeli run, per step", wall)
            .detail("servo loop, per step", total)
            .detail("LLM round trip (servo→gateway→provider→back), per step", llm_ms)
            .detail("inbox look, per step", inbox)
            .detail("tool (execute_shell true), per step", tool)
            .detail("audit and session writes, per step", writes)
            .detail("servo's own work, per step", own)
            .detail("fake LLM's own time per call", handler_ms)
            .detail("floor: HTTP hop to the provider (TCP, keep-alive)", hops.tcp_completion_ms)
            .detail("floor: HTTP hop on a unix socket", hops.unix_ms)
            .detail("floor: bash -c true spawn inside the container", spawn_ms)
            .detail("replay model (no gateway): servo per step", replay_step)
            .detail("replay model: tool per step", replay_tool)
            .note(format!(
                "step {:.2} ms = LLM round trip {llm_ms:.2} (floor: two hops {hop_floor:.2}: provider {:.2} + unix socket {:.2}) \
                 + inbox look {inbox:.2} (floor {:.2})",
                median(&step),
                hops.tcp_completion_ms,
                hops.unix_ms,
                hops.unix_ms
            ))
            .note(format!(
                "  + tool {tool:.2} (a `bash -c true` spawn alone: {spawn_ms:.2}) + audit/session writes {writes:.2} \
                 + servo's own work {own:.2} + outside the servo's loop {:.2}",
                median(&step) - total
            ))
            .note(format!(
                "(container start→die per step; `saheeli run` wall time per step {wall:.2} ms; \
                 replay model, no gateway: {replay_step:.2} ms/step)"
            )),
    )
}
