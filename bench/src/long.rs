//! Long tasks (issue 26): `cost` and `length`, through the real gateway
//! against a fake Anthropic Messages server that bills like Anthropic's
//! prompt cache (the tests' `fake_cache`: breakpoints read what earlier
//! requests wrote, the rest is written) and refuses, as Anthropic does,
//! a request larger than its model's window ("prompt is too long").
//!
//! - `cost`: a task of N steps (200; 30 with --quick), each reading a 4 KB
//!   file, run with `cache: 5m` and with `cache: off`; the provider's bill
//!   (input $3, cache write 1.25×, cache read 0.1×, output $15 per Mtok)
//!   with caching against without (target ≤ 0.25×), and the share of
//!   input read from the cache from step 3 on (target ≥ 90%).
//! - `length`: a model declared with a 16k-token window (`windows:`) runs
//!   300 steps (60 with --quick) of 2 KB tool outputs to `task_complete`;
//!   context errors that reach the task (target 0) and the tokens sent per
//!   step before the first compaction and after it.
//! - `budget`: a task with `max_tokens: 100000` whose steps add little
//!   (a short shell command and its output) runs until the gateway refuses
//!   a call for its budget; what it spent over its budget at the refusal
//!   (target ≥ 95% and never over: a call is reserved at what the provider
//!   billed the call before it plus one token per byte added, issue 47;
//!   reserved at one per byte, a long task was refused with a quarter of
//!   its budget left unspent).
//!
//! The turn a task is at is counted by the server (a compacted
//! conversation no longer shows every turn); a request without tools is a
//! summary call, answered with a note.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use crate::env::{Env, progress};
use crate::fake_cache::{Billed, PromptCache};
use crate::project::Project;
use crate::stats::Figure;

/// One request the server billed.
#[derive(Clone, Copy, Debug)]
struct Call {
    billed: Billed,
    summary: bool,
}

#[derive(Default)]
struct Server {
    cache: PromptCache,
    /// Tool turns answered, by model.
    turns: HashMap<String, usize>,
    calls: Vec<Call>,
    /// Requests refused as longer than the window.
    too_long: usize,
}

type Shared = Arc<Mutex<Server>>;

/// `claude-bench-<kind>-<steps>-<window>`: steps and window (tokens).
fn model_shape(model: &str) -> Option<(usize, u64)> {
    let mut parts = model.rsplit('-');
    let window = parts.next()?.parse().ok()?;
    let steps = parts.next()?.parse().ok()?;
    Some((steps, window))
}

/// The tool call of turn `turn` (1-based) of `steps`.
fn tool_turn(model: &str, turn: usize, steps: usize) -> (&'static str, Value) {
    let length = model.contains("-length-");
    if model.contains("-budget-") {
        return (
            "execute_shell",
            json!({"command": format!("echo step {turn}")}),
        );
    }
    if turn >= steps {
        ("task_complete", json!({"message": "done"}))
    } else if turn == 1 {
        let line = format!("{}\n", "0123456789abcdef".repeat(4));
        (
            "create_file",
            json!({"path": "data.txt", "content": line.repeat(62)}),
        )
    } else if length {
        (
            "execute_shell",
            json!({"command": format!("head -c 2000 data.txt; echo {turn}")}),
        )
    } else {
        ("read_file", json!({"path": "data.txt"}))
    }
}

async fn messages(State(s): State<Shared>, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    let model = req["model"].as_str().unwrap_or("").to_string();
    let Some((steps, window)) = model_shape(&model) else {
        return (
            StatusCode::BAD_REQUEST,
            "model must be claude-bench-KIND-STEPS-WINDOW",
        )
            .into_response();
    };
    let summary = req["tools"].as_array().is_none_or(|t| t.is_empty());
    let mut g = s.lock().unwrap();
    // Measured as the provider would (its own count, uncached).
    let size = PromptCache::default().anthropic(&req, 0).0.total;
    if size > window {
        g.too_long += 1;
        let msg = format!("prompt is too long: {size} tokens > {window} maximum");
        let body =
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": msg}});
        return (StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
    }
    let content = if summary {
        vec![
            json!({"type": "text", "text": "Goal: read data.txt.\nWhat was done: read it.\nWhat is known: it holds hex lines.\nWhat remains: finish."}),
        ]
    } else {
        let turn = {
            let t = g.turns.entry(model.clone()).or_default();
            *t += 1;
            *t
        };
        let (name, input) = tool_turn(&model, turn, steps);
        vec![
            json!({"type": "tool_use", "id": format!("toolu_{turn}"), "name": name, "input": input}),
        ]
    };
    let (billed, usage) = g.cache.anthropic(&req, 20);
    g.calls.push(Call { billed, summary });
    let stop = if summary { "end_turn" } else { "tool_use" };
    axum::Json(json!({
        "id": format!("msg_{}", g.calls.len()), "type": "message", "role": "assistant",
        "model": model, "content": content, "stop_reason": stop, "usage": usage
    }))
    .into_response()
}

struct Fake {
    addr: SocketAddr,
    state: Shared,
    server: tokio::task::JoinHandle<()>,
}

impl Fake {
    async fn start() -> anyhow::Result<Fake> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the fake provider")?;
        let addr = listener.local_addr()?;
        let state = Shared::default();
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .with_state(state.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Fake {
            addr,
            state,
            server,
        })
    }

    /// What was billed since the last take, and how many were too long.
    fn take(&self) -> (Vec<Call>, usize) {
        let mut g = self.state.lock().unwrap();
        (
            std::mem::take(&mut g.calls),
            std::mem::take(&mut g.too_long),
        )
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Anthropic's bill for a call (USD): input $3, write 1.25×, read 0.1×,
/// output $15 per million tokens.
fn bill(c: &Billed) -> f64 {
    let plain = c.total - c.read - c.write;
    (plain as f64 * 3.0 + c.read as f64 * 0.3 + c.write as f64 * 3.75 + 20.0 * 15.0) / 1e6
}

fn project(env: &Env, fake: &Fake) -> anyhow::Result<Project> {
    let mut prices = String::from("prices:\n");
    for steps in [30, 200] {
        for cache in ["5m", "off"] {
            prices.push_str(&format!(
                "  {}: {{ input_per_mtok: 3, output_per_mtok: 15 }}\n",
                cost_model(cache, steps)
            ));
        }
    }
    let mut p = Project::with_config(
        env,
        2,
        &format!("{prices}windows:\n  claude-bench-length*: 16000\n"),
    )?;
    p.env
        .push(("ANTHROPIC_BASE_URL".into(), format!("http://{}", fake.addr)));
    p.env
        .push(("ANTHROPIC_API_KEY".into(), "sk-ant-bench-0123456789".into()));
    Ok(p)
}

fn cost_model(cache: &str, steps: usize) -> String {
    format!("claude-bench-cost-{cache}-{steps}-1000000")
}

fn prompt(p: &Project, name: &str, model: &str, extra: &str) -> anyhow::Result<String> {
    let file = format!("{name}.md");
    std::fs::write(
        p.path().join(&file),
        format!("---\nmodel: {model}\nmax_steps: 1000\ntimeout: 60m\n{extra}---\nRead data.txt.\n"),
    )?;
    Ok(file)
}

pub async fn long_tasks(env: &Env, quick: bool) -> anyhow::Result<Vec<Figure>> {
    let fake = Fake::start().await?;
    let p = project(env, &fake)?;
    let r = measure(&p, &fake, quick).await;
    p.cleanup(env).await;
    r
}

async fn measure(p: &Project, fake: &Fake, quick: bool) -> anyhow::Result<Vec<Figure>> {
    let steps = if quick { 30 } else { 200 };
    progress(&format!(
        "cost: {steps}-step task reading 4 KB a step, cached and not"
    ));
    let mut bills = vec![];
    let mut hit = 0.0;
    for cache in ["5m", "off"] {
        let model = cost_model(cache, steps);
        let file = prompt(
            p,
            &format!("cost-{cache}"),
            &model,
            &format!("cache: {cache}\n"),
        )?;
        let (_, task) = p.timed_run(&file)?;
        let (calls, _) = fake.take();
        if calls.len() != steps {
            bail!("the {cache} task made {} calls, not {steps}", calls.len());
        }
        let billed: f64 = calls.iter().map(|c| bill(&c.billed)).sum();
        let counted = task["cost_usd"].as_f64().unwrap_or(f64::NAN);
        if (counted - billed).abs() > 1e-4 {
            bail!(
                "saheeli counted ${counted:.4} for the {cache} task; the provider billed ${billed:.4}"
            );
        }
        if cache == "5m" {
            let later = &calls[2..];
            hit = later.iter().map(|c| c.billed.read).sum::<u64>() as f64
                / later.iter().map(|c| c.billed.total).sum::<u64>() as f64;
        }
        bills.push(billed);
    }
    let mut cost = Figure::new("cost: billed with caching", "usd", &[bills[0]]).against(
        "without caching",
        bills[1],
        0.25,
    );
    cost.note = format!(
        "{steps} steps; {:.1}% of input from the cache from step 3 (target ≥ 90%)",
        hit * 100.0
    );
    cost.details.insert("cache_hit_from_step_3".into(), hit);
    cost.details.insert("usd_uncached".into(), bills[1]);
    cost.met = cost.met.map(|m| m && hit >= 0.9);

    let steps = if quick { 60 } else { 300 };
    progress(&format!(
        "length: {steps} steps of 2 KB outputs in a 16k window"
    ));
    let model = format!("claude-bench-length-{steps}-16000");
    let file = prompt(p, "length", &model, "")?;
    let (_, task) = p.timed_run(&file)?;
    let (calls, too_long) = fake.take();
    let tools: Vec<&Call> = calls.iter().filter(|c| !c.summary).collect();
    let first_summary = calls.iter().position(|c| c.summary);
    let sizes: Vec<f64> = tools.iter().map(|c| c.billed.total as f64).collect();
    // Before the first compaction: the largest request; after: the median.
    let compactions = task["compactions"].as_i64().unwrap_or(0);
    let peak = sizes.iter().copied().fold(0.0, f64::max);
    let tail = &sizes[sizes.len() / 2..];
    let mut length = Figure::new("length: context errors reaching the task", "errors", &[0.0]);
    length.target = "0, and task_complete".into();
    length.met = Some(task["state"] == "complete" && too_long == 0);
    length.note = format!(
        "{steps} steps, {compactions} compactions, {} summary calls; tokens per step: up to \
         {peak:.0} before compacting, median {:.0} in the second half; provider refusals {too_long}",
        calls.iter().filter(|c| c.summary).count(),
        crate::stats::median(tail),
    );
    length
        .details
        .insert("compactions".into(), compactions as f64);
    length
        .details
        .insert("provider_too_long".into(), too_long as f64);
    length.details.insert("tokens_per_step_peak".into(), peak);
    length.details.insert(
        "tokens_per_step_median_after".into(),
        crate::stats::median(tail),
    );
    if let Some(i) = first_summary {
        length
            .details
            .insert("first_summary_call".into(), i as f64 + 1.0);
    }
    Ok(vec![cost, length, budget(p, fake).await?])
}

/// The budget a task can spend: `max_tokens` against what it was billed
/// when the gateway refused its next call.
const BUDGET: u64 = 100_000;

async fn budget(p: &Project, fake: &Fake) -> anyhow::Result<Figure> {
    progress(&format!(
        "budget: short steps until max_tokens {BUDGET} refuses a call"
    ));
    let model = "claude-bench-budget-100000-1000000";
    let file = prompt(
        p,
        "budget",
        model,
        &format!(
            "max_tokens: {BUDGET}
cache: off
"
        ),
    )?;
    // It ends incomplete (exit 1): its JSON is read whatever the status.
    let out = p.run(&["run", &file, "--json"])?;
    let task: Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "the budget task printed no JSON: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })?;
    let (calls, _) = fake.take();
    let spent = task["tokens"].as_u64().unwrap_or(0);
    let share = spent as f64 / BUDGET as f64;
    let refused = task["reason"] == "budget";
    let mut f = Figure::new("budget: spent at the refusal", "share", &[share]);
    f.target = "≥ 0.95 of max_tokens, never over".into();
    f.met = Some(refused && share >= 0.95 && spent <= BUDGET);
    f.note = format!(
        "{spent} of {BUDGET} tokens in {} calls, then {}",
        calls.len(),
        if refused {
            "refused for the budget".to_string()
        } else {
            format!("ended {} ({})", task["state"], task["reason"])
        }
    );
    f.details.insert("tokens_spent".into(), spent as f64);
    f.details.insert("calls".into(), calls.len() as f64);
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_name_their_shape() {
        assert_eq!(
            model_shape("claude-bench-cost-5m-200-1000000"),
            Some((200, 1_000_000))
        );
        assert_eq!(
            model_shape("claude-bench-length-300-16000"),
            Some((300, 16_000))
        );
        assert_eq!(
            tool_turn("claude-bench-cost-5m-3-1", 3, 3).0,
            "task_complete"
        );
        // A budget task never completes: the budget ends it.
        assert_eq!(
            tool_turn("claude-bench-budget-3-1", 3, 3).0,
            "execute_shell"
        );
        let (name, args) = tool_turn("claude-bench-cost-5m-3-1", 1, 3);
        assert_eq!(name, "create_file");
        assert!(args["content"].as_str().unwrap().len() >= 4000);
    }
}
