//! Launch at the floor: `task submit` → the servo's first LLM request, with
//! a `saheeli serve` waiting, against raw create+start measured in the
//! same run. The request is timed where the fake LLM receives it (the
//! same process's clock as the submit), so the figure holds everything a
//! real task pays before the model is asked anything: the submit process,
//! the serve loop noticing it, the claim, the gateway, the volume, the
//! container's create and start, the servo's own start and its request
//! through the gateway to the provider.

use std::time::{Duration, Instant};

use crate::dispatch::Floors;
use crate::env::{Env, progress};
use crate::events::Kind;
use crate::project::{Project, interrupt_twice};
use crate::stats::Figure;

pub async fn first_request(env: &Env, floors: &Floors) -> anyhow::Result<Figure> {
    let n = env.sizes.dispatch_n;
    progress(&format!(
        "first request: {n} submits to a waiting `saheeli serve`, timed to the servo's first LLM request"
    ));
    let llm = crate::llm::start(1, Duration::ZERO).await?;
    let mut p = Project::new(env, 8)?;
    p.env.push(("OPENAI_BASE_URL".into(), llm.base_url()));
    p.env
        .push(("OPENAI_API_KEY".into(), "sk-bench-not-a-secret".into()));
    let result = measure(env, &p, n, &llm).await;
    p.cleanup(env).await;
    let samples = result?;
    let raw = floors.raw_cs.median;
    Ok(Figure::new(
        "first request: submit → servo's first LLM call",
        "ms",
        &samples,
    )
    .against("raw create+start", raw, 1.0))
}

async fn measure(
    env: &Env,
    p: &Project,
    n: usize,
    llm: &crate::llm::Fake,
) -> anyhow::Result<Vec<f64>> {
    std::fs::write(
        p.path().join("first.md"),
        "---\nmodel: gpt-4o-mini\nmax_steps: 5\n---\nFinish at once.\n",
    )?;
    let log = "serve.log";
    let mut serve = p.serve_up(log, "saheeli=info,warn").await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut samples = vec![];
    let mut failure = None;
    for _ in 0..n {
        match submit_to_first_request(env, p, llm, "first.md").await {
            Ok((ms, _)) => samples.push(ms),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    interrupt_twice(&mut serve).await?;
    if let Some(e) = failure {
        return Err(e.context(format!("serve log:\n{}", p.read_log(log))));
    }
    Ok(samples)
}

/// One `task submit` of `prompt` to a waiting serve: ms to the servo's
/// first LLM request, and the task's id (its container gone before this
/// returns).
pub async fn submit_to_first_request(
    env: &Env,
    p: &Project,
    llm: &crate::llm::Fake,
    prompt: &str,
) -> anyhow::Result<(f64, String)> {
    let (ms, id) = submit_timed(p, llm, prompt).await?;
    if env
        .events
        .wait_for(&id, Kind::Destroy, Duration::from_secs(120))
        .await
        .is_none()
    {
        anyhow::bail!("task {id}'s container was never removed");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok((ms, id))
}

/// `task submit` of `prompt`: ms to the servo's first LLM request, and
/// the task's id (returned at once; the task goes on).
pub async fn submit_timed(
    p: &Project,
    llm: &crate::llm::Fake,
    prompt: &str,
) -> anyhow::Result<(f64, String)> {
    let before = llm.seen_count();
    let t0 = Instant::now();
    let id = p.submit(prompt)?;
    let first = loop {
        if let Some(at) = llm.seen_at(before) {
            break at;
        }
        if t0.elapsed() > Duration::from_secs(120) {
            anyhow::bail!("task {id} ({prompt}) never called the LLM");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    Ok((first.duration_since(t0).as_secs_f64() * 1000.0, id))
}
