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
//! - `external`: a third-party agent CLI (Claude Code, Codex,
//!   mini-swe-agent, aider) supervised instead of the loop, its LLM calls
//!   forwarded from a loopback listener to the gateway.
//! - `privsep`: the servo's own uid, apart from the agent's; `runner`: the
//!   workspace tools in a process of the agent's user; `seal`: the
//!   session's HMAC.
//!
//! # Contract
//!
//! No arguments (`servo runner …`, `servo pack DIR`, `servo unpack
//! DIR`, `servo unpack-setup DIR MAX`, `servo copy-seed DIR SRC`, `servo signal SIG PGID`, `servo
//! collect-home SRC DST MAX`, `servo keep-session KIND HOME DST [ID]` and
//! `servo restore-session KIND STAGED HOME` are the servo's own helpers,
//! started as the agent's user; `servo mcp --url
//! URL` is Saheeli's MCP server, started by a third-party agent; `servo
//! relay SOCKET HOST:PORT` is a swarm node's gateway relay, `relay`). The
//! environment (the defaults are the container's):
//!
//! - `SAHEELI_PRIVSEP=1`: the servo starts as root with only
//!   `CAP_SETUID`/`CAP_SETGID` and separates itself from the agent
//!   (`privsep`); it refuses to run when it cannot.
//!
//! - `SAHEELI_WORKSPACE`: the workspace (default `/workspace`); the task is
//!   `<ws>/.saheeli/task.json`, the prompt `<ws>/prompt.md`.
//! - `SAHEELI_GATEWAY`: `unix:/run/saheeli/gateway.sock` (the default) or
//!   `http://HOST:PORT`. No key and no auth header are ever sent.
//! - `SAHEELI_LAUNCH`: optionally a `protocol::Launch` as JSON, written to
//!   the two files above before anything else.
//! - `SAHEELI_LOG`: a tracing filter for stderr (default `servo=info`).
//! - `SAHEELI_WARM=1`: a warm servo (issue 28, `warm`): its launch, the
//!   task's env and the submitted workspace are asked of the gateway
//!   socket once a task is claimed for it (a warm job on a swarm node,
//!   issue 53: of its hub, as its slot, by the slot's token).
//! - `SAHEELI_SETUP_TAR`: a cached set-up's tar bound into the container
//!   (issue 50, `cached_setup`), unpacked into the workspace as the
//!   agent's user before the agent starts (a warm servo: before its claim).
//! - `SAHEELI_SEED`: what the task's own image held at `workdir:` (issue
//!   49, `seed`), copied into the fresh workspace as the agent's user
//!   before the agent starts (before a cached set-up is unpacked over it).
//! - `SAHEELI_GATEWAY_TOKEN_FILE`: set for a servo on another host (Swarm):
//!   the file holding its task's gateway token, sent on every request; the
//!   launch and submitted workspace are then fetched from the gateway, and
//!   the whole workspace is uploaded to it at the end (`remote`). Its
//!   gateway is `http://HOST:PORT` (an overlay) or `unix:` the relay's
//!   socket (`swarm.network: none`: the servo then refuses to run in a
//!   container that has any network interface but loopback).
//!
//! It writes `<ws>/servo-<id>-audit.log` (also echoed to stdout; its
//! `finish` line carries the run's `timings`),
//! `<ws>/servo-<id>-session.json` and, on success, `<ws>/complete.json`.
//! The exit code is a [`ServoExit`]: 0 complete, 2 bad task, 3 max steps,
//! 4 time limit, 5 LLM error, 6 replay exhausted, 7 budget spent, 143 SIGTERM.

mod agent;
mod audit;
mod cached_setup;
mod desk;
mod egress;
mod external;
mod live;
mod llm;
mod pipe;
mod privsep;
mod relay;
mod remote;
mod runner;
mod seal;
mod seed;
mod task_env;
mod tools;
mod unpack;
mod warm;
mod workspace;

use std::path::PathBuf;
use std::process::ExitCode;

use saheeli_protocol::{ServoExit, ServoTask};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let mut argv = std::env::args().skip(1);
    match argv.next().as_deref() {
        None => {}
        Some("runner") => {
            return match runner::serve::Args::parse(argv) {
                Ok(args) => runner::serve::main(args),
                Err(e) => {
                    eprintln!("servo runner: {e}");
                    ExitCode::from(2)
                }
            };
        }
        Some("pack") => return remote::pack_main(argv.next()),
        Some("signal") => return external::helpers::signal_main(argv),
        Some("collect-home") => return external::helpers::collect_main(argv),
        Some("keep-session") => return external::session::keep_main(argv),
        Some("restore-session") => return external::session::restore_main(argv),
        Some("mcp") => return external::mcp::main(argv),
        Some("unpack") => return remote::unpack_main(argv),
        Some("unpack-setup") => return cached_setup::unpack_main(argv),
        Some("copy-seed") => return seed::copy_main(argv),
        Some("relay") => return relay::main(argv),
        Some("egress-bridge") => return egress::bridge_main(argv),
        Some(other) => {
            eprintln!("servo: unknown argument `{other}` (the servo takes none)");
            return ExitCode::from(ServoExit::BadTask.code() as u8);
        }
    }
    // First, on one thread: credentials and capabilities are per thread.
    let mode = match privsep::separate() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("servo: cannot separate from the agent: {e}");
            return ExitCode::from(ServoExit::BadTask.code() as u8);
        }
    };
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
    let code = runtime.block_on(run(mode));
    // Everything is flushed by now. Do not wait for a reader thread still
    // blocked on a pipe that some escaped background process holds open.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    ExitCode::from(code.code() as u8)
}

async fn run(mode: privsep::Mode) -> ServoExit {
    let root =
        PathBuf::from(std::env::var("SAHEELI_WORKSPACE").unwrap_or_else(|_| "/workspace".into()));
    let gateway = std::env::var("SAHEELI_GATEWAY")
        .unwrap_or_else(|_| format!("unix:{}", saheeli_protocol::paths::GATEWAY_SOCKET));
    // A parked task starts again on its kept workspace: an earlier start's
    // reason is not this one's.
    let _ = std::fs::remove_file(root.join(saheeli_protocol::paths::SERVO_ERROR));
    let remote = match remote::Remote::from_env(&gateway) {
        Ok(r) => r,
        Err(e) => return give_up(&root, &e),
    };
    let Some(remote) = remote else {
        let warm = std::env::var_os(saheeli_protocol::remote::warm::WARM_ENV).is_some();
        // A cached set-up (issue 50), begun now: a cold servo's runs beside
        // the rest of its start, a warm one's while it waits for a claim.
        let mut setup = match cached_setup::begin(&root, mode) {
            Ok(p) => p,
            Err(e) => return give_up(&root, &e),
        };
        if warm && let Err(e) = cached_setup::settled(setup.take()).await {
            return give_up(&root, &e);
        }
        let (launch, key) = if warm {
            // A warm servo: its task is claimed for it after it started.
            match warm::claimed(&root, &gateway, mode).await {
                Ok((launch, key)) => (Some(launch), key),
                Err(e) => return give_up(&root, &e),
            }
        } else {
            (std::env::var(saheeli_protocol::LAUNCH_ENV).ok(), None)
        };
        if let Err(e) = unpack_launch(&root, launch) {
            return give_up(&root, &e);
        }
        let code = run_task(&root, &gateway, mode, key, setup).await;
        // A warm servo's exit may wait a moment for those claimed beside
        // it (`GET end`); a stopped one never does.
        if warm && code != ServoExit::Terminated {
            warm::end(&gateway).await;
        }
        return code;
    };
    // A warm job on a swarm node (issue 53): its task is claimed for it
    // after it started; one never claimed has nothing to upload.
    let warm = std::env::var_os(saheeli_protocol::remote::warm::WARM_ENV).is_some();
    let fetched = if warm {
        match remote.claimed(&root, mode).await {
            Ok(launch) => Ok(launch),
            Err(e) => return give_up(&root, &e),
        }
    } else {
        remote.fetch(&root, mode).await
    };
    let code = match fetched {
        Ok(launch) => match unpack_launch(&root, Some(launch)) {
            Ok(()) => run_task(&root, &gateway, mode, None, None).await,
            Err(e) => give_up(&root, &e),
        },
        Err(e) => give_up(&root, &e),
    };
    // Whatever happened (SIGTERM included: the loop returns on it), the
    // workspace goes home; without it the foreman records `incomplete`.
    if let Err(e) = remote.upload(&root, code == ServoExit::Parked, mode).await {
        eprintln!("servo: {e}");
    }
    code
}

/// Says why the servo cannot run its task, on stderr and in
/// [`SERVO_ERROR`](saheeli_protocol::paths::SERVO_ERROR) for the foreman's
/// record (best effort: a workspace that cannot take it loses only the
/// explanation), and ends with [`ServoExit::BadTask`].
fn give_up(root: &std::path::Path, why: &str) -> ServoExit {
    use saheeli_protocol::paths::{MAX_SERVO_ERROR, SERVO_ERROR};
    eprintln!("servo: {why}");
    let mut end = why.len().min(MAX_SERVO_ERROR);
    while !why.is_char_boundary(end) {
        end -= 1;
    }
    let path = root.join(SERVO_ERROR);
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| agent::write_atomic(&path, &why.as_bytes()[..end]));
    if let Err(e) = written {
        eprintln!("servo: writing `{}`: {e}", path.display());
    }
    ServoExit::BadTask
}

/// Runs the task whose launch is in `root`; `key`: its session key, when
/// its gateway gave it already (a warm servo's claim); `setup`: a cached
/// set-up being unpacked, waited for just before the agent starts.
async fn run_task(
    root: &std::path::Path,
    gateway: &str,
    mode: privsep::Mode,
    key: Option<saheeli_protocol::human::SessionKey>,
    setup: Option<cached_setup::Pending>,
) -> ServoExit {
    let root = root.to_path_buf();
    let task_path = root.join(".saheeli/task.json");
    let task: ServoTask = match std::fs::read(&task_path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(t) => t,
        Err(e) => {
            return give_up(
                &root,
                &format!("cannot read task `{}`: {e}", task_path.display()),
            );
        }
    };
    let prompt = match std::fs::read_to_string(root.join("prompt.md")) {
        Ok(p) => p,
        Err(e) => {
            let why = format!("cannot read `{}`: {e}", root.join("prompt.md").display());
            return give_up(&root, &why);
        }
    };
    // Egress (issue 50): the proxy's port on the loopback, relayed to the
    // agent phase's socket beside the gateway's; the agent's processes
    // are given `HTTP_PROXY` and its kin.
    if task.egress {
        let socket = std::path::Path::new(saheeli_protocol::paths::GATEWAY_DIR)
            .join(saheeli_protocol::egress::AGENT_SOCKET);
        if let Err(e) = egress::start(socket).await {
            let why = format!(
                "cannot serve the egress proxy on 127.0.0.1:{}: {e}",
                saheeli_protocol::egress::PROXY_PORT
            );
            return give_up(&root, &why);
        }
        task_env::set_proxy();
    }
    // A third-party agent CLI: the servo supervises it instead of looping.
    if let Some(agent) = task.agent.clone().filter(|a| !a.is_builtin()) {
        if let Err(e) = cached_setup::settled(setup).await {
            return give_up(&root, &e);
        }
        return external::run(task, agent, &root, gateway, prompt, mode).await;
    }
    // The session's key, from the gateway only the servo can reach. A
    // servo not separated from its agent (run by hand, the servo's own
    // tests) neither seals nor checks: its agent could ask for the key.
    let seal = if mode == privsep::Mode::Separated {
        let key = match (key, desk::Desk::new(gateway)) {
            (Some(k), _) => desk::key_pair(&k),
            (None, Ok(d)) => d.session_key().await,
            (None, Err(e)) => Err(desk::Refused(e)),
        };
        match key {
            Ok((key, resume)) => seal::Seal::new(Some(key)).with_resume(resume),
            Err(e) => {
                return give_up(&root, &format!("the gateway gave no session key: {}", e.0));
            }
        }
    } else {
        seal::Seal::default()
    };
    if let Err(e) = cached_setup::settled(setup).await {
        return give_up(&root, &e);
    }
    match agent::Agent::new(task, &root, gateway, prompt, mode, seal) {
        Ok(agent) => agent.run().await,
        Err(e) => give_up(&root, &e),
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
    replace_file(&dir.join("task.json"), &task).map_err(|e| format!("writing task.json: {e}"))?;
    replace_file(&root.join("prompt.md"), launch.prompt.as_bytes())
        .map_err(|e| format!("writing prompt.md: {e}"))?;
    Ok(())
}

/// Writes `path` afresh: whatever is there is unlinked first (a workspace
/// fetched for a resumed task brings the agent's copy of `prompt.md`,
/// which a separated servo may not write but, owning the sticky
/// workspace, may remove), and the new file is never opened through a link.
fn replace_file(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?
        .write_all(bytes)
}
