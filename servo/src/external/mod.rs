//! A third-party agent CLI supervised by the servo (issue 25): Claude
//! Code, Codex, mini-swe-agent, aider, or a custom command.
//!
//! The servo opens a loopback listener forwarding to the gateway socket
//! (`proxy`), writes the agent's config into a home in the task's /tmp,
//! and starts the CLI (`plan`) as the agent's user, in /workspace, in a
//! process group of its own, with a placeholder key: the real key never
//! enters the container. Then it waits:
//!
//! - the agent exits 0 with an answer: the servo writes complete.json
//!   (its message is the agent's final answer) and exits 0;
//! - it exits non-zero (or 0 without an answer): exit
//!   [`ServoExit::AgentFailed`], the code in the audit log's detail;
//! - a message a person injects reaches the agent's next LLM call, and
//!   a pause holds that call (`notes`);
//! - the time budget runs out, or SIGTERM (the foreman's timeout, a
//!   cancel): the group gets SIGTERM, then SIGKILL after part of
//!   `stop_grace`.
//!
//! Whatever ended it, the group's leftovers are killed and the home is
//! copied to `.saheeli/agent/` by a helper of the agent's uid
//! (`helpers`: links never followed, size capped).
//!
//! Claude Code's and Codex's own session is kept in the workspace before
//! each of their model calls, and a retry from the session restores it
//! and resumes the CLI's conversation (`session`, issue 51); the others
//! start over, told so.

mod answer;
pub(crate) mod helpers;
pub(crate) mod mcp;
mod notes;
mod own;
mod plan;
mod proxy;
pub(crate) mod session;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use saheeli_protocol::{Agent, AuditEvent, Completion, ServoExit, ServoTask, Usage, paths};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{info, warn};

use crate::audit::{Audit, now};
use crate::privsep::Mode;

/// The agent's home, in the task's /tmp (a tmpfs).
const HOME: &str = "/tmp/saheeli-agent";
/// The collected home, below the workspace.
const COLLECTED: &str = ".saheeli/agent";
/// The home is collected up to this many bytes.
const MAX_HOME_BYTES: u64 = 64 << 20;
/// What the servo keeps of the agent's stdout for its answer.
const STDOUT_TAIL: usize = 256 * 1024;
/// What the servo echoes of the agent's output to its own stderr.
const MAX_ECHO: usize = 1 << 20;

/// Runs `agent` for `task`; returns how the servo exits.
pub(crate) async fn run(
    task: ServoTask,
    agent: Agent,
    root: &Path,
    gateway: &str,
    prompt: String,
    mode: Mode,
) -> ServoExit {
    let audit_path = root.join(paths::audit_log(&task.task_id));
    let mut audit = match Audit::open(&audit_path, true) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("servo: opening `{}`: {e}", audit_path.display());
            return ServoExit::BadTask;
        }
    };
    audit.log(&AuditEvent::Start {
        ts: now(),
        task_id: task.task_id,
        model: task.model.clone(),
        max_steps: task.max_steps,
        timeout_s: task.timeout_s,
        agent: Some(agent.label()),
    });
    info!(task_id = %task.task_id, agent = %agent.label(), "servo supervising an agent");
    // The agent's text as the gateway sees it stream (issue 29).
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        crate::live::follow(gateway),
    )
    .await;
    let (exit, detail) = match supervise(&task, &agent, root, gateway, &prompt, mode).await {
        Ok(r) => r,
        Err(e) => (ServoExit::BadTask, Some(e)),
    };
    if let Some(kind) = saheeli_protocol::agent_session::Kind::of(&agent)
        && root.join(saheeli_protocol::agent_session::KEPT).is_dir()
    {
        let id = (kind == saheeli_protocol::agent_session::Kind::ClaudeCode)
            .then(|| session::last_session_id(root).unwrap_or_else(|| task.task_id.to_string()));
        if let Some(k) = session::Keeper::new(kind, Path::new(HOME), root, id, mode) {
            k.keep(false).await;
        }
    }
    collect_home(root, mode).await;
    audit.log(&AuditEvent::Finish {
        ts: now(),
        outcome: exit.reason().to_string(),
        steps: 0,
        usage: Usage::default(),
        detail: detail.clone(),
        timings: None,
    });
    info!(outcome = %exit.reason(), detail = detail.as_deref().unwrap_or(""), "servo finished");
    exit
}

/// The servo's own deadline, a little before the foreman's hard one.
fn budget(task: &ServoTask) -> Duration {
    let total = Duration::from_secs(task.timeout_s.max(1));
    total - (total / 20).min(Duration::from_secs(10))
}

/// How long the agent gets between SIGTERM and SIGKILL: part of the
/// foreman's `stop_grace`, leaving the rest to collect its home.
fn agent_grace(task: &ServoTask) -> Duration {
    let grace = Duration::from_millis(task.stop_grace_ms.unwrap_or(10_000));
    (grace * 3 / 5).max(Duration::from_millis(200))
}

/// The agent's home made, its own session restored (a retry of Claude
/// Code or Codex from the session), the loopback listener opened (keeping
/// the session before each call), its config written: how it starts, and
/// the listener's port.
async fn start_plan(
    task: &ServoTask,
    agent: &Agent,
    root: &Path,
    gateway: &str,
    prompt: &str,
    mode: Mode,
    own: std::sync::Arc<own::Own>,
) -> Result<(plan::Plan, u16), String> {
    let to = proxy::Gateway::of(gateway)
        .map_err(|e| format!("agent `{}` cannot reach its gateway: {e}", agent.label()))?;
    let audit_path = root.join(paths::audit_log(&task.task_id));
    let notes = std::sync::Arc::new(notes::Notes::new(gateway, &audit_path, own.clone()));
    let home = Path::new(HOME);
    make_home(home)?;
    let prompt_file = root.join("prompt.md");
    let servo = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/usr/local/bin/servo"));
    let task_id = task.task_id.to_string();
    let mut inputs = plan::Inputs {
        agent,
        model: &task.model,
        port: 0,
        home,
        prompt_file: &prompt_file,
        prompt,
        servo: &servo,
        session: plan::Session::New(&task_id),
    };
    // The directories of its config first (the servo's, open to the
    // agent), then its session restored beside them; the config itself
    // once the listener's port is known.
    let files = plan::plan(&inputs)
        .ok_or("the built-in loop is not a third-party agent")?
        .files;
    for dir in files.iter().filter_map(|(path, _)| path.parent()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating `{}`: {e}", dir.display()))?;
        open_up(dir);
    }
    let kind = saheeli_protocol::agent_session::Kind::of(agent);
    let (restored, prompt) =
        session::resumed(task, agent, root, Path::new(HOME), mode, prompt, &own).await;
    if let Some(id) = &restored {
        inputs.session = plan::Session::Resume(id);
    }
    inputs.prompt = &prompt;
    let keeper = kind.and_then(|k| {
        let id = (k == saheeli_protocol::agent_session::Kind::ClaudeCode)
            .then(|| restored.clone().unwrap_or_else(|| task_id.clone()));
        session::Keeper::new(k, home, root, id, mode).map(std::sync::Arc::new)
    });
    inputs.port = proxy::start(to, own, notes, keeper)
        .await
        .map_err(|e| format!("opening the agent's loopback listener: {e}"))?;
    let plan = plan::plan(&inputs).ok_or("the built-in loop is not a third-party agent")?;
    for (path, text) in &plan.files {
        std::fs::write(path, text).map_err(|e| format!("writing `{}`: {e}", path.display()))?;
    }
    Ok((plan, inputs.port))
}

async fn supervise(
    task: &ServoTask,
    agent: &Agent,
    root: &Path,
    gateway: &str,
    prompt: &str,
    mode: Mode,
) -> Result<(ServoExit, Option<String>), String> {
    let own = std::sync::Arc::new(own::Own::new(task, gateway));
    let (plan, port) = start_plan(task, agent, root, gateway, prompt, mode, own.clone()).await?;
    let mut cmd = tokio::process::Command::new(&plan.program);
    cmd.args(&plan.args)
        .env_clear()
        .envs(std::env::vars().filter(|(k, _)| !k.starts_with("SAHEELI_")))
        .envs(crate::task_env::vars())
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .current_dir(root)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    let mut child = crate::privsep::spawn(mode, &mut cmd)
        .map_err(|e| format!("starting `{}`: {e}", plan.program))?;
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    info!(program = %plan.program, pgid, port, "agent started");
    let err_tail = ErrTail::default();
    let tail = echo(child.stdout.take(), child.stderr.take(), err_tail.clone());

    let mut term = signal(SignalKind::terminate()).ok();
    let terminated = async move {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    let deadline = async {
        // A wait for a person (ask_user) is not working time.
        let start = tokio::time::Instant::now();
        loop {
            let at = start + budget(task) + *own.waited.lock().unwrap();
            tokio::time::sleep_until(at).await;
            if tokio::time::Instant::now() >= start + budget(task) + *own.waited.lock().unwrap() {
                return;
            }
        }
    };
    let ended = tokio::select! {
        status = child.wait() => Ok(status),
        _ = deadline => Err((ServoExit::TimeLimit, "time budget used up".to_string())),
        _ = terminated => Err((ServoExit::Terminated, "stopped by SIGTERM".to_string())),
        _ = own.ended.notified() => Err(own.said.lock().unwrap().end.clone()
            .unwrap_or((ServoExit::VerificationFailed, "verification failed".to_string()))),
    };
    let status = match ended {
        Ok(status) => status.map_err(|e| format!("waiting for the agent: {e}"))?,
        Err((exit, why)) => {
            signal_group(mode, pgid, "TERM").await;
            if tokio::time::timeout(agent_grace(task), child.wait())
                .await
                .is_err()
            {
                signal_group(mode, pgid, "KILL").await;
                let _ = child.wait().await;
            }
            signal_group(mode, pgid, "KILL").await;
            return Ok((exit, Some(why)));
        }
    };
    // Whatever it left running in the background ends with it.
    signal_group(mode, pgid, "KILL").await;
    let stdout = tail.await.unwrap_or_default();
    if status.code() != Some(0) {
        let said = failed(agent, status, &err_tail, &stdout);
        return Ok((ServoExit::AgentFailed, Some(said)));
    }
    let said = std::mem::take(&mut *own.said.lock().unwrap());
    if let Some((exit, why)) = said.end {
        return Ok((exit, Some(why)));
    }
    // Its task_complete's message, else its final answer.
    let message = match (said.message, answer::read(&plan.answer, &stdout)) {
        (Some(m), _) | (None, Ok(m)) => m,
        (None, Err(why)) => {
            return Ok((
                ServoExit::AgentFailed,
                Some(format!("agent `{}` exited 0 but {why}", agent.label())),
            ));
        }
    };
    // verify/assess: decided by the foreman, as after the built-in loop.
    let verification = match said.checks {
        Some(checks) => checks,
        None if own.verify() => match own.verify_at_exit(&message).await {
            Ok(checks) => checks,
            Err(why) => return Ok((ServoExit::VerificationFailed, Some(why))),
        },
        None => Vec::new(),
    };
    let c = Completion {
        task_id: task.task_id,
        message,
        steps: 0,
        usage: Usage::default(),
        finished_at: now(),
        verification,
    };
    let bytes = serde_json::to_vec_pretty(&c).map_err(|e| e.to_string())?;
    crate::agent::write_atomic(&root.join("complete.json"), &bytes)
        .map_err(|e| format!("writing complete.json: {e}"))?;
    Ok((ServoExit::Complete, None))
}

/// How an agent that exited non-zero (or was killed) failed, with its
/// last words: its last lines of stderr and of stdout. The foreman shows
/// this as the task's detail (status, report, dashboard).
fn failed(
    agent: &Agent,
    status: std::process::ExitStatus,
    err_tail: &ErrTail,
    stdout: &str,
) -> String {
    let how = match status.code() {
        Some(c) => format!("exited with code {c}"),
        None => format!("was killed ({status})"),
    };
    let mut said: Vec<String> = err_tail.lock().unwrap().iter().cloned().collect();
    let out: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    said.extend(
        out[out.len().saturating_sub(3)..]
            .iter()
            .map(|l| l.chars().take(300).collect::<String>()),
    );
    let last = if said.is_empty() {
        String::new()
    } else {
        format!("; its last words: {}", said.join(" | "))
    };
    format!("agent `{}` {how}{last}", agent.label())
}

/// The home, made by the servo in /tmp (sticky: the agent cannot swap
/// it), open to the agent's user.
fn make_home(home: &Path) -> Result<(), String> {
    match std::fs::create_dir(home) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let meta = home.symlink_metadata().map_err(|e| e.to_string())?;
            if !meta.is_dir() {
                return Err(format!(
                    "`{}` exists and is not a directory",
                    home.display()
                ));
            }
        }
        Err(e) => return Err(format!("creating `{}`: {e}", home.display())),
    }
    open_up(home);
    Ok(())
}

fn open_up(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777));
}

/// The last lines of the agent's stderr, kept for a failure's detail.
type ErrTail = std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>;
/// How many of them, each cut at 300 characters.
const ERR_LINES: usize = 6;

/// Echoes the agent's stdout and stderr to the servo's stderr (capped);
/// the task returned yields the last [`STDOUT_TAIL`] bytes of stdout.
fn echo(
    stdout: Option<tokio::process::ChildStdout>,
    stderr: Option<tokio::process::ChildStderr>,
    err_tail: ErrTail,
) -> tokio::task::JoinHandle<String> {
    let echoed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let say = move |line: &str, echoed: &std::sync::atomic::AtomicUsize| {
        use std::sync::atomic::Ordering;
        if echoed.fetch_add(line.len() + 1, Ordering::Relaxed) < MAX_ECHO {
            eprintln!("agent: {}", line.chars().take(4096).collect::<String>());
        }
    };
    if let Some(err) = stderr {
        let echoed = echoed.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(err).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                say(&line, &echoed);
                if !line.trim().is_empty() {
                    let mut t = err_tail.lock().unwrap();
                    if t.len() == ERR_LINES {
                        t.pop_front();
                    }
                    t.push_back(line.chars().take(300).collect());
                }
            }
        });
    }
    tokio::spawn(async move {
        let mut tail = String::new();
        let Some(out) = stdout else { return tail };
        let mut lines = BufReader::new(out).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            say(&line, &echoed);
            tail.push_str(&line);
            tail.push('\n');
            if tail.len() > 2 * STDOUT_TAIL {
                let cut = tail.len() - STDOUT_TAIL;
                let cut = (cut..tail.len())
                    .find(|i| tail.is_char_boundary(*i))
                    .unwrap_or(cut);
                tail.drain(..cut);
            }
        }
        tail
    })
}

/// Signals the agent's process group: from a helper of the agent's uid
/// when separated (the servo's own uid may not signal it).
async fn signal_group(mode: Mode, pgid: i32, sig: &str) {
    if pgid <= 1 {
        return;
    }
    if mode == Mode::Same {
        let s = if sig == "KILL" {
            libc::SIGKILL
        } else {
            libc::SIGTERM
        };
        // SAFETY: kill only sends a signal.
        unsafe { libc::kill(-pgid, s) };
        return;
    }
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/usr/local/bin/servo"));
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(["signal", sig, &pgid.to_string()])
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    match crate::privsep::spawn(mode, &mut cmd) {
        Ok(mut c) => {
            let _ = tokio::time::timeout(Duration::from_secs(5), c.wait()).await;
        }
        Err(e) => warn!(error = %e, "could not signal the agent's process group"),
    }
}

/// Copies the agent's home to `.saheeli/agent/` through a helper of the
/// agent's uid.
async fn collect_home(root: &Path, mode: Mode) {
    let dst = root.join(COLLECTED);
    if let Err(e) = std::fs::create_dir(&dst) {
        warn!(error = %e, dir = %dst.display(), "the agent's home is not collected");
        return;
    }
    open_up(&dst);
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/usr/local/bin/servo"));
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("collect-home")
        .arg(HOME)
        .arg(&dst)
        .arg(MAX_HOME_BYTES.to_string())
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    match crate::privsep::spawn(mode, &mut cmd) {
        Ok(c) => match tokio::time::timeout(Duration::from_secs(30), c.wait_with_output()).await {
            Ok(Ok(out)) => {
                info!(copied = %String::from_utf8_lossy(&out.stdout).trim(), "agent home collected")
            }
            _ => warn!("collecting the agent's home failed or took over 30 s"),
        },
        Err(e) => warn!(error = %e, "could not collect the agent's home"),
    }
}
