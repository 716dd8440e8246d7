//! `vetting` (issue 47): what the gateway's vetting of a third-party
//! agent's request costs per call. The gateway reads every request an
//! agent sends and checks its fields, its content parts by allow list
//! and its output caps before anything goes on (`native::vet`); it times
//! that and writes it into the call's trajectory line (`vet_us`).
//!
//! A custom agent (`agent: {command: [python3, …], api:
//! openai-responses}`, behind the servo's forwarder as any third-party
//! CLI) sends Responses requests of about 10, 100 and 400 KB, each
//! [`REPEATS`] times: conversations of user turns with text and an inline
//! image, the agent's tool calls and their outputs, as an agent's context
//! grows. The floor, measured in the same run on the same bodies: parsing
//! the body as JSON alone (`serde_json`, as the gateway's first step),
//! the least any proxy that reads a request pays.

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::env::{Env, progress};
use crate::fake_llm::FakeLlm;
use crate::project::Project;
use crate::stats::{Figure, median};

/// Sends of each body.
const REPEATS: usize = 20;

/// The request sizes, about (KB): one turn of the conversation is ~1 KB.
const SIZES: [usize; 3] = [10, 100, 400];

/// The agent: posts each body file in order, `REPEATS` times each.
const AGENT_PY: &str = r#"
import json, os, sys, urllib.request as u
base = os.environ["OPENAI_BASE_URL"]
key = os.environ["OPENAI_API_KEY"]
repeats = int(sys.argv[1])
for name in sys.argv[2:]:
    body = open("/workspace/" + name, "rb").read()
    for _ in range(repeats):
        r = u.Request(base + "/responses", data=body, method="POST",
                      headers={"content-type": "application/json",
                               "authorization": "Bearer " + key})
        with u.urlopen(r, timeout=60) as f:
            f.read()
print("sent")
"#;

/// A Responses request of `turns` turns (~1 KB each).
fn body(turns: usize) -> Value {
    let png = format!("data:image/png;base64,{}", "iVBORw0KGgo".repeat(20));
    let said = "The build passes on the second stage and fails on the third. ".repeat(5);
    let out = "src/main.rs  src/lib.rs  tests/it.rs  Cargo.toml  README.md\n".repeat(3);
    let mut input = Vec::new();
    for i in 0..turns {
        input.push(json!({"role": "user", "content": [
            {"type": "input_text", "text": format!("{i}: {said}")},
            {"type": "input_image", "image_url": png},
        ]}));
        input.push(
            json!({"type": "function_call", "call_id": format!("call_{i}"),
            "name": "shell", "arguments": "{\"command\":\"ls -R\"}"}),
        );
        input.push(
            json!({"type": "function_call_output", "call_id": format!("call_{i}"),
            "output": out}),
        );
    }
    json!({
        "max_output_tokens": 64,
        "instructions": "You are a coding agent.",
        "tools": [{"type": "function", "name": "shell", "description": "Runs a command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}],
        "input": input,
    })
}

/// Median microseconds of parsing `bytes` as JSON, over `REPEATS` tries.
fn parse_us(bytes: &[u8]) -> f64 {
    let times: Vec<f64> = (0..REPEATS)
        .map(|_| {
            let t = std::time::Instant::now();
            let v: Value = serde_json::from_slice(bytes).expect("the bench's own JSON");
            std::hint::black_box(v);
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    median(&times)
}

pub async fn vetting(env: &Env) -> anyhow::Result<Vec<Figure>> {
    progress("vetting: a third-party agent's requests of 10, 100 and 400 KB");
    let llm = FakeLlm::start().await?;
    let mut p = Project::with_config(env, 1, "state_dir: state\n")?;
    p.env.push(("OPENAI_BASE_URL".into(), llm.base_url()));
    p.env
        .push(("OPENAI_API_KEY".into(), "sk-bench-0123456789abcdef".into()));
    let result = measure(&p).await;
    p.cleanup(env).await;
    result
}

async fn measure(p: &Project) -> anyhow::Result<Vec<Figure>> {
    let w = p.path().join("w");
    std::fs::create_dir_all(&w)?;
    std::fs::write(w.join("agent.py"), AGENT_PY)?;
    let mut bodies = Vec::new();
    for kb in SIZES {
        let bytes = serde_json::to_vec(&body(kb))?;
        let name = format!("body-{kb}.json");
        std::fs::write(w.join(&name), &bytes)?;
        bodies.push((kb, name, bytes));
    }
    let names: Vec<&str> = bodies.iter().map(|b| b.1.as_str()).collect();
    std::fs::write(
        p.path().join("vet.md"),
        format!(
            "---\nmodel: bench-vet\nagent: {{ command: [python3, /workspace/agent.py, \"{REPEATS}\", {}], \
             api: openai-responses }}\nworkspace: w\nmax_steps: 1000\ntimeout: 10m\n---\nSend.\n",
            names.join(", ")
        ),
    )?;
    let out = p.run(&["run", "vet.md", "--json"])?;
    let task: Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "the vetting task printed no JSON: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })?;
    if task["state"] != "complete" {
        bail!("the vetting task ended {}: {task}", task["state"]);
    }
    let id = task["id"].as_str().context("no task id")?;
    let record = p.path().join(format!("state/trajectories/{id}.jsonl"));
    let text = std::fs::read_to_string(&record)
        .with_context(|| format!("reading `{}`", record.display()))?;
    let vet: Vec<f64> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).map(|v| v["vet_us"].as_f64().unwrap_or(-1.0)))
        .collect::<Result<_, _>>()?;
    if vet.len() != REPEATS * SIZES.len() || vet.iter().any(|v| *v < 0.0) {
        bail!(
            "the trajectory has {} calls with `vet_us` (want {})",
            vet.len(),
            REPEATS * SIZES.len()
        );
    }
    let mut figures = Vec::new();
    for (i, (kb, _, bytes)) in bodies.iter().enumerate() {
        let ours = median(&vet[i * REPEATS..(i + 1) * REPEATS]);
        let floor = parse_us(bytes);
        let f = Figure::new(
            &format!("vetting: a {kb} KB request"),
            "µs",
            &vet[i * REPEATS..(i + 1) * REPEATS],
        )
        .against("JSON parse alone", floor, 3.0)
        .note(format!(
            "{} bytes: median {ours:.0} µs to read and vet, {floor:.0} µs to parse",
            bytes.len()
        ))
        .detail("bytes", bytes.len() as f64);
        figures.push(f);
    }
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_grows_a_kilobyte_a_turn() {
        for turns in [10, 100] {
            let n = serde_json::to_vec(&body(turns)).unwrap().len();
            assert!(
                n > turns * 900 && n < turns * 1200,
                "{turns} turns: {n} bytes"
            );
        }
    }
}
