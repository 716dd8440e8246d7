//! The floors of a step's two HTTP hops, measured alone on this host with
//! pooled keep-alive clients: a chat completion from the fake LLM over
//! localhost TCP (the foreman → provider hop, same body size as a step
//! sends), and a small request over a unix socket to a server that only
//! answers (the servo → gateway hop).

use std::time::Instant;

use anyhow::Context;
use axum::Router;
use axum::routing::get;
use serde_json::json;

use crate::fake_llm::FakeLlm;
use crate::stats::median;

/// Round trips per floor.
const N: usize = 300;

/// Medians, in ms.
pub struct Hops {
    pub tcp_completion_ms: f64,
    pub unix_ms: f64,
}

pub async fn measure(llm: &FakeLlm, body_bytes: usize) -> anyhow::Result<Hops> {
    let client = reqwest::Client::builder().build()?;
    let url = format!("{}/chat/completions", llm.base_url());
    let filler = "x".repeat(body_bytes.saturating_sub(200));
    let body = serde_json::to_vec(&json!({
        "model": "steps-1000000",
        "messages": [{"role": "user", "content": filler}],
    }))?;
    let mut tcp = Vec::with_capacity(N);
    for i in 0..N + 10 {
        let t0 = Instant::now();
        let r = client.post(&url).body(body.clone()).send().await?;
        anyhow::ensure!(
            r.status().is_success(),
            "the fake LLM answered {}",
            r.status()
        );
        r.bytes().await?;
        if i >= 10 {
            tcp.push(t0.elapsed().as_secs_f64() * 1e3);
        }
    }
    llm.take();

    let dir = tempfile::tempdir()?;
    let sock = dir.path().join("floor.sock");
    let listener = tokio::net::UnixListener::bind(&sock).context("binding a unix socket")?;
    let app = Router::new().route("/", get(|| async { "{}" }));
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let client = reqwest::Client::builder().unix_socket(sock).build()?;
    let mut unix = Vec::with_capacity(N);
    for i in 0..N + 10 {
        let t0 = Instant::now();
        let r = client.get("http://floor/").send().await?;
        r.bytes().await?;
        if i >= 10 {
            unix.push(t0.elapsed().as_secs_f64() * 1e3);
        }
    }
    server.abort();
    Ok(Hops {
        tcp_completion_ms: median(&tcp),
        unix_ms: median(&unix),
    })
}
