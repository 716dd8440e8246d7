//! A task's start with a cached set-up (issue 50): `task submit` → the
//! servo's first LLM request, with a `saheeli serve` waiting, for the same
//! task three ways, measured in the same run and alternated: plain (no
//! `setup:`), its set-up run (a cache miss: the first task of a key), and
//! its set-up reused from the cache (a hit). The set-up writes what a
//! small virtual environment holds (1,000 files, 8 MB in all), so a hit
//! restores that much into the new workspace (the servo unpacks the
//! host's copy, bound into its container). Target: a hit starts within
//! 1.2× a plain task's start. Then the same two tasks warm: a pool of two
//! classes, one plain and one holding the cached set-up (`setup_key:`),
//! alternated, each claim after the pool refilled.

use std::time::{Duration, Instant};

use anyhow::bail;

use crate::env::{Env, progress};
use crate::first::submit_to_first_request;
use crate::project::{Project, interrupt_twice};
use crate::stats::{Figure, median};

/// The set-up: 1,000 files of 8 KiB under `.venv/lib`, as a `pip install`
/// into a virtual environment leaves, made with the shell alone.
const SETUP: &str = "mkdir -p .venv/lib && i=0 && while [ $i -lt 1000 ]; do \
                     head -c 8192 /dev/urandom > .venv/lib/m$i.py; i=$((i+1)); done";

pub async fn setup_start(env: &Env) -> anyhow::Result<Vec<Figure>> {
    let n = env.sizes.dispatch_n;
    progress(&format!(
        "set-up cache: {n} plain starts against {n} starts with a cached set-up, timed to the first LLM request"
    ));
    let llm = crate::llm::start(1, Duration::ZERO).await?;
    let mut p = Project::new(env, 8)?;
    p.env.push(("OPENAI_BASE_URL".into(), llm.base_url()));
    p.env
        .push(("OPENAI_API_KEY".into(), "sk-bench-not-a-secret".into()));
    let result = measure(env, &p, n, &llm).await;
    // The cache's images are this project's own (scoped by its state
    // directory): removed with it.
    let _ = p.run(&["cache", "prune", "--all"]);
    p.cleanup(env).await;
    let (plain, hit, miss, via_image, (warm_plain, warm_hit)) = result?;
    let plain_ms = median(&plain);
    let warm_plain_ms = median(&warm_plain);
    Ok(vec![
        Figure::new("set-up cache hit: submit → first LLM call", "ms", &hit)
            .against("the same task with no set-up", plain_ms, 1.2)
            .detail("plain start (median)", plain_ms)
            .detail(
                "set-up run, cache miss (first task of the key)",
                median(&miss),
            )
            .detail(
                "cache hit without the host's copy (read back from the image)",
                median(&via_image),
            )
            .note(format!(
                "a set-up of 1,000 files (8 MB) restored from the cache; the miss ran it: {:.0} ms",
                median(&miss)
            )),
        Figure::new(
            "set-up cache hit, warm: submit → first LLM call",
            "ms",
            &warm_hit,
        )
        .against("the same task with no set-up, warm", warm_plain_ms, 1.2)
        .detail("plain warm start (median)", warm_plain_ms)
        .note(
            "a pool class holding the cached set-up (`setup_key:`), unpacked before the claim; \
             the plain task from a plain class of the same pool",
        ),
    ])
}

/// Whether task `id`'s set-up was a cache hit (`task status --json`).
fn was_hit(p: &Project, id: &str) -> anyhow::Result<bool> {
    let task: serde_json::Value = serde_json::from_str(&p.ok(&["task", "status", id, "--json"])?)?;
    Ok(task["setup"]["hit"] == true)
}

/// Plain starts, hits, misses, hits read back from the image, and warm
/// (plain, hit) starts.
type Samples = (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, (Vec<f64>, Vec<f64>));

async fn measure(
    env: &Env,
    p: &Project,
    n: usize,
    llm: &crate::llm::Fake,
) -> anyhow::Result<Samples> {
    let head = "---\nmodel: gpt-4o-mini\nmax_steps: 5\n";
    std::fs::write(
        p.path().join("plain.md"),
        format!("{head}---\nFinish at once.\n"),
    )?;
    // Each miss gets a key of its own (a comment in the command).
    let setup = |tag: &str| format!("{head}setup: \"{SETUP} # {tag}\"\n---\nFinish at once.\n");
    std::fs::write(p.path().join("cached.md"), setup("cached"))?;
    let log = "serve.log";
    let mut serve = p.serve_up(log, "saheeli=info,warn").await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let run = async {
        let (mut plain, mut hit, mut miss) = (vec![], vec![], vec![]);
        // The first fills the cache (and warms the image and the servo).
        submit_to_first_request(env, p, llm, "cached.md").await?;
        submit_to_first_request(env, p, llm, "plain.md").await?;
        for i in 0..n {
            plain.push(submit_to_first_request(env, p, llm, "plain.md").await?.0);
            let (ms, id) = submit_to_first_request(env, p, llm, "cached.md").await?;
            if !was_hit(p, &id)? {
                bail!("task {id}'s set-up was not reused from the cache");
            }
            hit.push(ms);
            if i < 3 {
                let name = format!("miss-{i}.md");
                std::fs::write(p.path().join(&name), setup(&format!("miss {i}")))?;
                miss.push(submit_to_first_request(env, p, llm, &name).await?.0);
            }
        }
        // Without the host's copy of the tar (as an entry kept by an
        // older foreman): read back from a container of the cache image.
        let mut via_image = vec![];
        let copies = p.path().join(".saheeli/setup-cache");
        let aside = p.path().join("copies-aside");
        std::fs::rename(&copies, &aside)?;
        std::fs::create_dir(&copies)?;
        for _ in 0..n.min(3) {
            via_image.push(submit_to_first_request(env, p, llm, "cached.md").await?.0);
        }
        std::fs::remove_dir_all(&copies)?;
        std::fs::rename(&aside, &copies)?;
        anyhow::Ok((plain, hit, miss, via_image))
    }
    .await;
    interrupt_twice(&mut serve).await?;
    let (plain, hit, miss, via_image) =
        run.map_err(|e| e.context(format!("serve log:\n{}", p.read_log(log))))?;
    let warm = warm_starts(p, n, llm).await;
    crate::pool::remove_warm(p);
    Ok((plain, hit, miss, via_image, warm?))
}

/// The plain and the cached task, alternated, each served by a warm servo
/// of its own class (the pool refilled before each claim).
async fn warm_starts(
    p: &Project,
    n: usize,
    llm: &crate::llm::Fake,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let key = cached_key(p)?;
    let config = p.path().join("config.yaml");
    let mut text = std::fs::read_to_string(&config)?;
    text.push_str(&format!(
        "pool:\n  - {{ size: 1, max_idle: 30m, setup_key: {key} }}\n  - {{ size: 1, max_idle: 30m }}\n"
    ));
    std::fs::write(&config, text)?;
    let log = "serve-warm.log";
    let mut serve = p.serve_up(log, "saheeli=info,warn").await?;
    let run = async {
        let (mut plain, mut hit) = (vec![], vec![]);
        for i in 0..n + 1 {
            for (prompt, out) in [("plain.md", &mut plain), ("cached.md", &mut hit)] {
                crate::pool::filled(p, 2, 0).await?;
                // The cached class's servo unpacks as it starts.
                tokio::time::sleep(Duration::from_millis(500)).await;
                let (ms, id) = warm_first_request(p, llm, prompt).await?;
                if prompt == "cached.md" && !was_hit(p, &id)? {
                    bail!("task {id}'s set-up was not reused from the cache");
                }
                // The first of each warms the foreman's paths.
                if i > 0 {
                    out.push(ms);
                }
            }
        }
        anyhow::Ok((plain, hit))
    }
    .await;
    interrupt_twice(&mut serve).await?;
    run.map_err(|e| e.context(format!("serve log:\n{}", p.read_log(log))))
}

/// The key of `cached.md`'s set-up, from the tasks so far.
fn cached_key(p: &Project) -> anyhow::Result<String> {
    let listed: serde_json::Value = serde_json::from_str(&p.ok(&["cache", "ls", "--json"])?)?;
    let hits = |e: &&serde_json::Value| e["hits"].as_u64().unwrap_or(0);
    let top = listed
        .as_array()
        .and_then(|a| a.iter().max_by_key(hits))
        .and_then(|e| e["key"].as_str())
        .ok_or_else(|| anyhow::anyhow!("no cached set-up"))?;
    Ok(top.to_string())
}

/// `task submit` → the first LLM request of a task served warm (checked),
/// waiting for its end before returning.
async fn warm_first_request(
    p: &Project,
    llm: &crate::llm::Fake,
    prompt: &str,
) -> anyhow::Result<(f64, String)> {
    let t0 = Instant::now();
    let (ms, id) = crate::first::submit_timed(p, llm, prompt).await?;
    loop {
        let task: serde_json::Value =
            serde_json::from_str(&p.ok(&["task", "status", &id, "--json"])?)?;
        let state = task["state"].as_str().unwrap_or("");
        if ["complete", "failed", "incomplete", "cancelled"].contains(&state) {
            let warm = task["events"].as_array().is_some_and(|ev| {
                ev.iter().any(|e| {
                    e["to"] == "running"
                        && e["detail"].as_str().is_some_and(|d| d.starts_with("warm"))
                })
            });
            if !warm {
                bail!("task {id} ({prompt}) was not served warm");
            }
            return Ok((ms, id));
        }
        if t0.elapsed() > Duration::from_secs(120) {
            bail!("task {id} still {state} after 2 minutes");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
