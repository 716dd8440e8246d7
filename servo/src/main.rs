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
//! - `tools`: one file per tool; `mod.rs` holds the schemas and dispatch;
//!   `shell`: the persistent bash that `execute_shell` runs commands in.
//! - `workspace`: path confinement; `audit`: the JSON-lines audit log.
//!
//! # Contract
//!
//! No arguments. The environment (the defaults are the container's):
//!
//! - `SAHEELI_WORKSPACE`: the workspace (default `/workspace`); the task is
//!   `<ws>/.saheeli/task.json`, the prompt `<ws>/prompt.md`.
//! - `SAHEELI_GATEWAY`: `unix:/run/saheeli/gateway.sock` (the default) or
//!   `http://HOST:PORT`. No key and no auth header are ever sent.
//! - `SAHEELI_LAUNCH`: optionally a `protocol::Launch` as JSON, written to
//!   the two files above before anything else.
//! - `SAHEELI_LOG`: a tracing filter for stderr (default `servo=info`).
//! - `SAHEELI_GATEWAY_TOKEN_FILE`: set for a servo on another host (Swarm):
//!   the file holding its task's gateway token, sent on every request; the
//!   launch and submitted workspace are then fetched from the gateway, and
//!   the whole workspace is uploaded to it at the end (`remote`).
//!
//! It writes `<ws>/servo-<id>-audit.log` (also echoed to stdout; its
//! `finish` line carries the run's `timings`),
//! `<ws>/servo-<id>-session.json` and, on success, `<ws>/complete.json`.
//! The exit code is a [`ServoExit`]: 0 complete, 2 bad task, 3 max steps,
//! 4 time limit, 5 LLM error, 6 replay exhausted, 7 budget spent, 143 SIGTERM.

mod agent;
mod audit;
mod desk;
mod llm;
mod pipe;
mod remote;
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
    // Everything is flushed by now. Do not wait for a reader thread still
    // blocked on a pipe that some escaped background process holds open.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    ExitCode::from(code.code() as u8)
}

async fn run() -> ServoExit {
    let root =
        PathBuf::from(std::env::var("SAHEELI_WORKSPACE").unwrap_or_else(|_| "/workspace".into()));
    let gateway = std::env::var("SAHEELI_GATEWAY")
        .unwrap_or_else(|_| format!("unix:{}", saheeli_protocol::paths::GATEWAY_SOCKET));
    let remote = match remote::Remote::from_env(&gateway) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("servo: {e}");
            return ServoExit::BadTask;
        }
    };
    let Some(remote) = remote else {
        if let Err(e) = unpack_launch(&root, std::env::var(saheeli_protocol::LAUNCH_ENV).ok()) {
            eprintln!("servo: {e}");
            return ServoExit::BadTask;
        }
        return run_task(&root, &gateway).await;
    };
    let code = match remote.fetch(&root).await {
        Ok(launch) => match unpack_launch(&root, Some(launch)) {
            Ok(()) => run_task(&root, &gateway).await,
            Err(e) => {
                eprintln!("servo: {e}");
                ServoExit::BadTask
            }
        },
        Err(e) => {
            eprintln!("servo: {e}");
            ServoExit::BadTask
        }
    };
    // Whatever happened (SIGTERM included: the loop returns on it), the
    // workspace goes home; without it the foreman records `incomplete`.
    if let Err(e) = remote.upload(&root, code == ServoExit::Parked).await {
        eprintln!("servo: {e}");
    }
    code
}

/// Runs the task whose launch is in `root`.
async fn run_task(root: &std::path::Path, gateway: &str) -> ServoExit {
    let root = root.to_path_buf();
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
    match agent::Agent::new(task, &root, gateway, prompt) {
        Ok(agent) => agent.run().await,
        Err(e) => {
            eprintln!("servo: {e}");
            ServoExit::BadTask
        }
    }
}

/// Writes a launch passed in the environment (or fetched from a remote
/// gateway) into the workspace, as the foreman would otherwise have
/// uploaded it.
fn unpack_launch(root: &std::path::Path, json: Option<String>) -> Result<(), String> {
    let Some(json) = json else {
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
