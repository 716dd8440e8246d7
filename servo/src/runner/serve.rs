//! `servo runner`: the agent's side of the toolbox, as the agent's user.
//!
//! It runs the workspace tools (`execute_shell` in its persistent shell,
//! the file tools) for the servo, one request per line on stdin, one reply
//! per line on stdout. Stdin closing (the servo ended, however) stops
//! every process the agent has and then the runner itself.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::wire::{Reply, Request};
use crate::tools::{ToolOutput, Toolbox};
use crate::workspace::Workspace;

/// The runner's settings, from its command line.
pub(crate) struct Args {
    pub root: PathBuf,
    pub max_output: usize,
    pub shell_timeout: Duration,
    /// Started as the agent's own user in a container: `kill(-1)` then
    /// reaches exactly the agent's processes.
    pub agent: bool,
}

impl Args {
    pub fn to_argv(&self) -> Vec<String> {
        let mut v = vec![
            "runner".to_string(),
            "--workspace".into(),
            self.root.display().to_string(),
            "--max-output".into(),
            self.max_output.to_string(),
            "--shell-timeout-ms".into(),
            self.shell_timeout.as_millis().to_string(),
        ];
        if self.agent {
            v.push("--agent".into());
        }
        v
    }

    /// Parses what [`Args::to_argv`] wrote (after `runner`).
    pub fn parse(mut argv: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut a = Args {
            root: PathBuf::from(saheeli_protocol::paths::WORKSPACE),
            max_output: 16 * 1024,
            shell_timeout: Duration::from_secs(120),
            agent: false,
        };
        while let Some(flag) = argv.next() {
            let mut value = || argv.next().ok_or(format!("`{flag}` needs a value"));
            match flag.as_str() {
                "--workspace" => a.root = PathBuf::from(value()?),
                "--max-output" => {
                    a.max_output = value()?.parse().map_err(|e| format!("--max-output: {e}"))?
                }
                "--shell-timeout-ms" => {
                    let ms: u64 = value()?
                        .parse()
                        .map_err(|e| format!("--shell-timeout-ms: {e}"))?;
                    a.shell_timeout = Duration::from_millis(ms);
                }
                "--agent" => a.agent = true,
                other => return Err(format!("unknown runner flag `{other}`")),
            }
        }
        Ok(a)
    }
}

/// Stops every process of the agent's user but this one (and PID 1).
/// Only when started as the agent in a container: anywhere else `kill(-1)`
/// would reach the caller's other processes.
fn stop_all(agent: bool) {
    if agent {
        // SAFETY: kill only sends a signal; Linux spares the caller and PID 1.
        unsafe {
            libc::kill(-1, libc::SIGKILL);
        }
    }
}

pub(crate) fn main(args: Args) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("servo runner: building the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let agent = args.agent;
    let code = runtime.block_on(serve(args));
    stop_all(agent);
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}

async fn serve(args: Args) -> ExitCode {
    let ws = match Workspace::new(&args.root) {
        Ok(ws) => ws,
        Err(e) => {
            eprintln!("servo runner: workspace `{}`: {e}", args.root.display());
            return ExitCode::from(2);
        }
    };
    let tb = Toolbox {
        ws,
        max_output: args.max_output,
        shell_timeout: args.shell_timeout,
        steps: Vec::new(),
        desk: None,
        shell: Arc::default(),
        shell_reset: Arc::default(),
        steps_started: Arc::default(),
        runner: None,
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<Reply>();
    let writer = tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        while let Some(reply) = rx.recv().await {
            let mut line = serde_json::to_vec(&reply).expect("replies serialize");
            line.push(b'\n');
            if out.write_all(&line).await.is_err() || out.flush().await.is_err() {
                break;
            }
        }
    });
    let mut running: HashMap<u64, tokio::task::JoinHandle<()>> = HashMap::new();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        running.retain(|_, h| !h.is_finished());
        let request: Request = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("servo runner: a request it cannot read: {e}");
                continue;
            }
        };
        match request {
            Request::Tool {
                id,
                name,
                arguments,
            } => {
                let tb = tb.clone();
                let tx = tx.clone();
                let h = tokio::spawn(async move {
                    let out = tb.dispatch(&name, &arguments).await;
                    let _ = tx.send(Reply::new(id, out));
                });
                running.insert(id, h);
            }
            Request::Cancel { id } => {
                if let Some(h) = running.remove(&id) {
                    h.abort();
                }
            }
            Request::Reset { id, stop, note } => {
                for (_, h) in running.drain() {
                    h.abort();
                }
                let had_shell = tb.shell.lock().await.take().is_some();
                if stop {
                    stop_all(args.agent);
                }
                if had_shell || note {
                    tb.shell_reset.store(true, Ordering::Relaxed);
                }
                let _ = tx.send(Reply::new(id, ToolOutput::ok("reset")));
            }
        }
    }
    for (_, h) in running.drain() {
        h.abort();
    }
    drop(tx);
    let _ = tokio::time::timeout(Duration::from_millis(200), writer).await;
    ExitCode::SUCCESS
}
