//! `servo`: runs one Saheeli task inside its container.
//!
//! Reads `/workspace/.saheeli/task.json` and `/workspace/prompt.md`, runs
//! the tool loop until `task_complete`, the step limit or the time budget,
//! and exits with a [`ServoExit`] code the foreman understands.
//!
//! # Layout
//!
//! - `agent`: the loop, readable in one sitting.
//! - `llm`: providers (`openai` through the gateway, `replay`) and `retry`.
//! - `tools`: one file per tool; `mod.rs` holds the schemas and dispatch.
//! - `workspace`: path confinement; `audit`: the JSON-lines audit log.
//!
//! Environment (for running outside a container, e.g. in tests):
//! `SAHEELI_WORKSPACE` (default `/workspace`), `SAHEELI_GATEWAY`
//! (default `unix:/run/saheeli/gateway.sock`, or `http://HOST:PORT`).

mod agent;
mod audit;
mod llm;
mod tools;
mod workspace;

use std::path::PathBuf;
use std::process::ExitCode;

use saheeli_protocol::{ServoExit, ServoTask};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let filter =
        EnvFilter::try_from_env("SAHEELI_LOG").unwrap_or_else(|_| EnvFilter::new("servo=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("building the tokio runtime");
    let code = runtime.block_on(run());
    ExitCode::from(code.code() as u8)
}

async fn run() -> ServoExit {
    let root =
        PathBuf::from(std::env::var("SAHEELI_WORKSPACE").unwrap_or_else(|_| "/workspace".into()));
    let gateway = std::env::var("SAHEELI_GATEWAY")
        .unwrap_or_else(|_| format!("unix:{}", saheeli_protocol::paths::GATEWAY_SOCKET));
    if let Err(e) = unpack_launch(&root) {
        eprintln!("servo: {e}");
        return ServoExit::BadTask;
    }
    let task_path = root.join(".saheeli/task.json");
    let task: ServoTask = match std::fs::read(&task_path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!("servo: cannot read task `{}`: {e}", task_path.display());
            return ServoExit::BadTask;
        }
    };
    let prompt = match std::fs::read_to_string(root.join("prompt.md")) {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "servo: cannot read `{}`: {e}",
                root.join("prompt.md").display()
            );
            return ServoExit::BadTask;
        }
    };
    match agent::Agent::new(task, &root, &gateway, prompt) {
        Ok(agent) => agent.run().await,
        Err(e) => {
            eprintln!("servo: {e}");
            ServoExit::BadTask
        }
    }
}

/// Writes a launch passed in the environment into the workspace, as the
/// foreman would otherwise have uploaded it.
fn unpack_launch(root: &std::path::Path) -> Result<(), String> {
    let Ok(json) = std::env::var(saheeli_protocol::LAUNCH_ENV) else {
        return Ok(());
    };
    let launch: saheeli_protocol::Launch = serde_json::from_str(&json)
        .map_err(|e| format!("invalid {}: {e}", saheeli_protocol::LAUNCH_ENV))?;
    let dir = root.join(".saheeli");
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating `{}`: {e}", dir.display()))?;
    let task = serde_json::to_vec_pretty(&launch.task).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("task.json"), task).map_err(|e| format!("writing task.json: {e}"))?;
    std::fs::write(root.join("prompt.md"), launch.prompt)
        .map_err(|e| format!("writing prompt.md: {e}"))?;
    Ok(())
}
