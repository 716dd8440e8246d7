//! Suspend in a model wait (issue 51): `n` tasks whose first model call
//! the gateway holds through a provider's rate limit (the fake LLM's one
//! 429 with `retry-after: 60` pauses the provider's shared budget for
//! every call) are frozen after `suspend_after`, thawed when their calls
//! go on, and complete. The figures are the freeze and the thaw, from the
//! tasks' `frozen` and `thawed` events.

use std::time::Duration;

use anyhow::{Context, bail};

use crate::env::{Env, progress};
use crate::fake_llm::FakeLlm;
use crate::project::{Project, interrupt_twice};
use crate::stats::Figure;
use crate::suspend::{event_ms, until_all};

/// The freeze comes this long into the wait, the thaw at [`PAUSE_S`]:
/// every servo has started and asked by then.
const SUSPEND_AFTER_S: u64 = 30;
const PAUSE_S: u64 = 60;

pub async fn model_wait(env: &Env, n: usize) -> anyhow::Result<Vec<Figure>> {
    progress(&format!("suspend: {n} servos in a rate-limit wait, frozen"));
    let llm = FakeLlm::start().await?;
    let mut p = Project::with_config(env, n, &format!("suspend_after: {SUSPEND_AFTER_S}s\n"))?;
    p.env.push(("OPENAI_BASE_URL".into(), llm.base_url()));
    p.env
        .push(("OPENAI_API_KEY".into(), "sk-bench-not-a-secret".into()));
    let result = measure(&p, n).await;
    p.cleanup(env).await;
    result
}

async fn measure(p: &Project, n: usize) -> anyhow::Result<Vec<Figure>> {
    std::fs::write(
        p.path().join("limited.md"),
        format!("---\nmodel: limited-{PAUSE_S}\ntimeout: 30m\n---\nBenchmark.\n"),
    )?;
    let first = p.submit("limited.md")?;
    p.clone_queued(&first, n - 1)?;
    let ids: Vec<String> = {
        let db = p.db()?;
        let mut stmt = db.prepare("SELECT id FROM tasks ORDER BY id")?;
        stmt.query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?
    };
    let mut serve = p.spawn(
        &["serve", "-j", &n.to_string()],
        "serve.log",
        "saheeli=info,warn",
    )?;
    let run = async {
        let limit = Duration::from_secs(PAUSE_S + 120);
        let done = until_all(p, &ids, "complete", limit, |t| t["state"] == "complete").await?;
        let mut freeze_ms = Vec::new();
        let mut thaw_ms = Vec::new();
        for t in &done {
            freeze_ms.extend(event_ms(t, "frozen", "froze in "));
            thaw_ms.extend(event_ms(t, "thawed", "thawed in "));
        }
        if freeze_ms.is_empty() {
            bail!("no servo was frozen in its model wait");
        }
        Ok::<_, anyhow::Error>((freeze_ms, thaw_ms))
    };
    let outcome = run.await;
    interrupt_twice(&mut serve).await?;
    let (freeze_ms, thaw_ms) = outcome.with_context(|| p.read_log("serve.log"))?;
    let frozen = freeze_ms.len() as f64;
    Ok(vec![
        Figure::new("suspend: freeze in a model wait (docker pause)", "ms", &freeze_ms)
            .detail("servos_frozen", frozen)
            .note(format!(
                "{n} servos whose first call waits out a 429 (retry-after {PAUSE_S}s); suspend_after {SUSPEND_AFTER_S}s"
            )),
        Figure::new("suspend: thaw before a model call's answer (docker unpause)", "ms", &thaw_ms)
            .note("the answer waits for the thaw"),
    ])
}
