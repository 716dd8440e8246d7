//! `local` (issue 27): what Saheeli adds to one LLM call against a real
//! local model server. llama-server (as `scripts/setup.sh llama` caches
//! it, the tests' own `llama.rs`) serves SmolLM2-135M with greedy sampling
//! behind the tests' recording proxy. N one-step tasks (`max_steps: 1`)
//! each make the same first call; the servo's own wait for it (the
//! `llm_us` of its audit log's timings: servo → gateway socket → foreman →
//! proxy → server → back) is set against the very request the proxy
//! recorded, sent N times straight to the proxy with a keep-alive client.
//! Both paths cross the proxy, so the difference is Saheeli's own: the
//! socket hop, the gateway's checks, reservation and settlement, and the
//! reshaping of the request. Needs the cached server; says which command
//! makes it when it is missing.

use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::env::{Env, progress};
use crate::project::Project;
use crate::stats::{Figure, median};

// Its llama-cpp-python starter is the tests' alone.
#[allow(dead_code)]
#[path = "../../foreman/tests/it/llama.rs"]
mod llama;
#[allow(dead_code)]
#[path = "../../foreman/tests/it/recording_proxy.rs"]
mod recording_proxy;

use llama::LlamaServer;
use recording_proxy::RecordingProxy;

/// The server and the proxy, made and dropped off the async threads (each
/// proxy has a runtime of its own).
struct Served {
    server: Option<LlamaServer>,
    proxy: Option<RecordingProxy>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let (server, proxy) = (self.server.take(), self.proxy.take());
        std::thread::spawn(move || {
            drop(proxy);
            drop(server);
        });
    }
}

pub async fn local(env: &Env, quick: bool) -> anyhow::Result<Vec<Figure>> {
    let files = llama::find().map_err(|e| {
        anyhow::anyhow!("`local` needs the llama-server that `scripts/setup.sh llama` builds: {e}")
    })?;
    let n = if quick { 3 } else { 10 };
    progress(&format!(
        "local: {n} one-call tasks through llama-server (SmolLM2-135M) against the same call made straight to it"
    ));
    let logs = tempfile::tempdir()?;
    let dir = logs.path().to_path_buf();
    let served = tokio::task::spawn_blocking(move || -> anyhow::Result<Served> {
        let server = LlamaServer::start(&files, &dir, &[]).map_err(anyhow::Error::msg)?;
        let proxy = RecordingProxy::start(&server.url);
        Ok(Served {
            server: Some(server),
            proxy: Some(proxy),
        })
    })
    .await??;
    let proxy = served.proxy.as_ref().context("the proxy")?;
    let p = Project::with_config(
        env,
        1,
        &format!(
            "providers:\n  local: {{ kind: openai, base_url: '{}/v1' }}\nllm: {{ max_output_tokens: 64 }}\n",
            proxy.url()
        ),
    )?;
    let result = measure(env, &p, proxy, n).await;
    p.cleanup(env).await;
    drop(served);
    result
}

async fn measure(
    _env: &Env,
    p: &Project,
    proxy: &RecordingProxy,
    n: usize,
) -> anyhow::Result<Vec<Figure>> {
    std::fs::write(
        p.path().join("local.md"),
        "---\nmodel: local/smollm2\nmax_steps: 1\n---\nList the files in the workspace with the list_files tool.\n",
    )?;
    // One task first, unmeasured: the server's prompt cache then holds the
    // request both paths send.
    let mut through = Vec::with_capacity(n);
    for i in 0..=n {
        let out = p.run(&["run", "local.md", "--json"])?;
        let task: Value = serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "`saheeli run` printed no task: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
        if task["reason"] != "max_steps" {
            bail!("the one-step task did not end by max_steps: {task}");
        }
        if i > 0 {
            through.push(llm_ms(&task)?);
        }
    }
    let seen = proxy.seen();
    let calls: Vec<_> = seen
        .iter()
        .filter(|e| e.path.ends_with("/chat/completions"))
        .collect();
    if calls.len() != n + 1 {
        bail!("{} calls reached the server, not {}", calls.len(), n + 1);
    }
    // The same request but for what is each task's own (its cache key).
    let same = |r: &str| -> anyhow::Result<Value> {
        let mut v: Value = serde_json::from_str(r).context("a call's body is not JSON")?;
        if let Some(o) = v.as_object_mut() {
            o.remove("prompt_cache_key");
        }
        Ok(v)
    };
    let first = same(&calls[0].request)?;
    for c in &calls[1..] {
        let other = same(&c.request)?;
        if other != first {
            bail!(
                "the tasks' calls differ beyond their cache key (the comparison needs the same \
                 request): {first} against {other}"
            );
        }
    }
    let server_ms: Vec<f64> = calls[1..]
        .iter()
        .map(|c| c.elapsed.as_secs_f64() * 1e3)
        .collect();
    // The same request straight to the proxy, as a client of the server.
    let client = reqwest::Client::new();
    let url = format!("{}{}", proxy.url(), calls[0].path);
    let body = calls[0].request.clone();
    let mut direct = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        let r = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await?;
        let status = r.status();
        let text = r.text().await?;
        if !status.is_success() {
            bail!("llama-server answered {status}: {text}");
        }
        direct.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let floor = median(&direct);
    let overhead: Vec<f64> = through.iter().map(|t| t - floor).collect();
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
    Ok(vec![
        Figure::new("local: one call through saheeli (llama-server)", "ms", &through)
            .against("the same request straight to it", floor, 1.1)
            .detail("through_mean_ms", mean(&through))
            .detail("direct_mean_ms", mean(&direct))
            .detail("direct_median_ms", floor)
            .detail("server_median_ms", median(&server_ms))
            .note(format!(
                "the servo's wait for its one call (socket, gateway, proxy, server) against the same request sent {n} times straight to the proxy; overhead median {:.1} ms, mean {:.1} ms",
                median(&overhead),
                mean(&through) - mean(&direct)
            )),
        Figure::new("local: per-call overhead (through − direct)", "ms", &overhead)
            .detail("mean_ms", mean(&overhead)),
    ])
}

/// The servo's wait for LLM answers (its audit log's `finish` timings), ms.
fn llm_ms(task: &Value) -> anyhow::Result<f64> {
    let dir = std::path::Path::new(task["results"].as_str().context("no results path")?);
    let id = task["id"].as_str().context("no id")?;
    let path = dir.join(format!("servo-{id}-audit.log"));
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading `{}`", path.display()))?;
    text.lines()
        .filter_map(|l| serde_json::from_str::<saheeli_protocol::AuditEvent>(l).ok())
        .find_map(|e| match e {
            saheeli_protocol::AuditEvent::Finish { timings, .. } => timings,
            _ => None,
        })
        .map(|t| t.llm_us as f64 / 1e3)
        .with_context(|| format!("no timings in `{}`", path.display()))
}
