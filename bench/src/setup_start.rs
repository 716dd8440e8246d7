//! A task's start with a cached set-up (issue 50): `task submit` → the
//! servo's first LLM request, with a `saheeli serve` waiting, for the same
//! task three ways, measured in the same run and alternated: plain (no
//! `setup:`), its set-up run (a cache miss: the first task of a key), and
//! its set-up reused from the cache (a hit). The set-up writes what a
//! small virtual environment holds (1,000 files, 8 MB in all), so a hit
//! restores that much into the new workspace. Target: a hit starts within
//! 1.2× a plain task's start.

use std::time::Duration;

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
    let (plain, hit, miss, via_image) = result?;
    let plain_ms = median(&plain);
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
    ])
}

/// Whether task `id`'s set-up was a cache hit (`task status --json`).
fn was_hit(p: &Project, id: &str) -> anyhow::Result<bool> {
    let task: serde_json::Value = serde_json::from_str(&p.ok(&["task", "status", id, "--json"])?)?;
    Ok(task["setup"]["hit"] == true)
}

async fn measure(
    env: &Env,
    p: &Project,
    n: usize,
    llm: &crate::llm::Fake,
) -> anyhow::Result<(Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>)> {
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
        for e in std::fs::read_dir(p.path().join(".saheeli/setup-cache"))? {
            let e = e?;
            if e.file_name().to_string_lossy().ends_with(".tar") {
                std::fs::remove_file(e.path())?;
            }
        }
        for _ in 0..n.min(3) {
            via_image.push(submit_to_first_request(env, p, llm, "cached.md").await?.0);
        }
        anyhow::Ok((plain, hit, miss, via_image))
    }
    .await;
    interrupt_twice(&mut serve).await?;
    run.map_err(|e| e.context(format!("serve log:\n{}", p.read_log(log))))
}
