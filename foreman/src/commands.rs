//! One function per subcommand. Each returns the process exit code as a
//! value (an incomplete task is `Ok(1)`); `Err` means bad input or a
//! failure of Saheeli itself, which `main` prints and maps to 2.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use futures_util::StreamExt;
use saheeli_protocol::{AuditEvent, TaskId, paths};
use tokio_util::sync::CancellationToken;

use crate::cli::{
    GcArgs, IdArgs, LogsArgs, PromptArgs, ResultsArgs, RetryArgs, RunArgs, ServeArgs, StatusArgs,
    SubmitArgs,
};
use crate::config::Config;
use crate::gateway::Upstream;
use crate::output::{self, TaskView};
use crate::reconciler::{self, Ctx, ServeOptions};
use crate::spec::TaskSpec;
use crate::state::TaskState;
use crate::store::{Store, TaskRow};
use crate::{docker, inputs};

/// Opens the database named by the config, creating its directory.
pub(crate) fn open_store(cfg: &Config) -> anyhow::Result<Store> {
    let path = cfg.database();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating database directory `{}`", dir.display()))?;
    }
    Store::open(&path).with_context(|| format!("opening database `{}`", path.display()))
}

fn exit_for(state: TaskState) -> ExitCode {
    match state {
        TaskState::Complete => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    }
}

/// Validates and queues a prompt; returns the new id.
fn submit_prompt(cfg: &Config, prompt: &Path, args: &PromptArgs) -> anyhow::Result<TaskId> {
    let spec = TaskSpec::from_prompt(cfg, prompt, &args.params)?;
    let mut store = open_store(cfg)?;
    let id = TaskId::new();
    if let Some(ws) = &spec.workspace {
        // Copied before the row exists: a failure here queues nothing.
        inputs::pack_workspace(ws, &inputs::workspace_tar(&cfg.state_dir(), id))?;
    }
    store.submit(id, &spec, args.priority, None, 1)?;
    Ok(id)
}

pub(crate) async fn submit(cfg: &Config, args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let id = submit_prompt(cfg, &args.prompt, &args.prompt_args)?;
    if args.json {
        println!("{}", serde_json::json!({ "id": id.to_string() }));
    } else {
        println!("{id}");
    }
    if !args.wait {
        return Ok(ExitCode::SUCCESS);
    }
    let store = open_store(cfg)?;
    loop {
        let t = store.require(&id.to_string())?;
        if t.state.is_terminal() {
            eprintln!("task {id} {}", t.state);
            return Ok(exit_for(t.state));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub(crate) async fn status(cfg: &Config, args: StatusArgs) -> anyhow::Result<ExitCode> {
    let store = open_store(cfg)?;
    loop {
        let text = match &args.id {
            Some(id) => {
                let t = store.require(id)?;
                let events = store.events(t.id)?;
                let attempts = store.attempts(t.id)?;
                if args.json {
                    let mut view = TaskView::new(&t, Some(&events));
                    view.attempts = Some(attempts.iter().map(output::AttemptView::new).collect());
                    serde_json::to_string_pretty(&view)?
                } else {
                    output::detail(&t, &events, &attempts)
                }
            }
            None => {
                let tasks = store.list(args.limit)?;
                if args.json {
                    let views: Vec<_> = tasks.iter().map(|t| TaskView::new(t, None)).collect();
                    serde_json::to_string_pretty(&views)?
                } else {
                    output::table(&tasks)
                }
            }
        };
        if args.watch {
            // Clear the screen and home the cursor before each redraw.
            print!("\x1b[2J\x1b[H");
        }
        println!("{}", text.trim_end());
        if !args.watch {
            return Ok(ExitCode::SUCCESS);
        }
        if let Some(id) = &args.id
            && store.require(id)?.state.is_terminal()
        {
            return Ok(ExitCode::SUCCESS);
        }
        std::io::stdout().flush()?;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        }
    }
}

/// One audit event as a line for people.
fn describe(ev: &AuditEvent) -> String {
    match ev {
        AuditEvent::Start {
            ts,
            model,
            max_steps,
            ..
        } => {
            format!("{ts}  start     model {model}, up to {max_steps} steps")
        }
        AuditEvent::LlmCall {
            ts,
            step,
            latency_ms,
            usage,
            error,
            ..
        } => match error {
            Some(e) => format!("{ts}  step {step:<4} llm error after {latency_ms} ms: {e}"),
            None => format!(
                "{ts}  step {step:<4} llm {latency_ms} ms, {} in / {} out tokens",
                usage.input_tokens, usage.output_tokens
            ),
        },
        AuditEvent::GatewayWait { ts, step, error } => {
            format!("{ts}  step {step:<4} gateway unreachable, waiting: {error}")
        }
        AuditEvent::GatewayBack {
            ts,
            step,
            waited_ms,
        } => format!("{ts}  step {step:<4} gateway back after {waited_ms} ms"),
        AuditEvent::ToolCall {
            ts,
            step,
            tool,
            arguments,
            ok,
            exit_code,
            duration_ms,
            result_bytes,
            ..
        } => {
            let mut args: String = arguments.chars().take(100).collect();
            if args.len() < arguments.len() {
                args.push('…');
            }
            let status = match (ok, exit_code) {
                (_, Some(c)) => format!("exit {c}"),
                (true, None) => "ok".into(),
                (false, None) => "error".into(),
            };
            format!(
                "{ts}  step {step:<4} {tool} {args} → {status}, {result_bytes} bytes, {duration_ms} ms"
            )
        }
        AuditEvent::Finish {
            ts,
            outcome,
            steps,
            usage,
            detail,
        } => format!(
            "{ts}  finish    {outcome} after {steps} steps, {} tokens{}",
            usage.total(),
            detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        ),
    }
}

fn print_audit_line(line: &str) {
    match serde_json::from_str::<AuditEvent>(line) {
        Ok(ev) => println!("{}", describe(&ev)),
        Err(_) => println!("{line}"),
    }
}

pub(crate) async fn logs(cfg: &Config, args: LogsArgs) -> anyhow::Result<ExitCode> {
    let store = open_store(cfg)?;
    let t = store.require(&args.id)?;
    let mut live_printed = 0usize;
    if matches!(
        t.state,
        TaskState::Queued | TaskState::Starting | TaskState::Running
    ) {
        if t.state == TaskState::Queued && !args.follow {
            eprintln!("task {} is queued; nothing logged yet", t.id);
            return Ok(ExitCode::SUCCESS);
        }
        // Live: the servo mirrors its audit lines to stdout, i.e. the container log.
        let d = docker::connect().await?;
        loop {
            let t = store.require(&args.id)?;
            if t.state.is_terminal() {
                break;
            }
            if let Some(cid) = docker::task_containers(&d, t.id).await?.first() {
                let opts = bollard::query_parameters::LogsOptionsBuilder::default()
                    .stdout(true)
                    .follow(args.follow)
                    .build();
                let mut stream = d.logs(cid, Some(opts));
                let mut n = 0;
                while let Some(item) = stream.next().await {
                    let Ok(chunk) = item else { break };
                    for line in chunk.to_string().lines() {
                        n += 1;
                        if n > live_printed {
                            print_audit_line(line);
                            live_printed = n;
                        }
                    }
                }
                if !args.follow {
                    return Ok(ExitCode::SUCCESS);
                }
            } else if !args.follow {
                return Ok(ExitCode::SUCCESS);
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    // Finished: the audit log in the collected results.
    let t = store.require(&args.id)?;
    let Some(dir) = &t.results_path else {
        bail!(
            "task `{}` has no collected results ({}); nothing to show",
            t.id,
            t.state
        );
    };
    let path = Path::new(dir).join(paths::audit_log(&t.id));
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading audit log `{}`", path.display()))?;
    for line in text.lines().skip(live_printed) {
        print_audit_line(line);
    }
    Ok(ExitCode::SUCCESS)
}

/// Copies a directory tree, keeping symlinks as links.
fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating `{}`", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading `{}`", from.display()))? {
        let entry = entry?;
        let ft = entry.file_type()?;
        let dest = to.join(entry.file_name());
        if ft.is_dir() {
            copy_tree(&entry.path(), &dest)?;
        } else if ft.is_symlink() {
            let target = std::fs::read_link(entry.path())?;
            let _ = std::fs::remove_file(&dest);
            std::os::unix::fs::symlink(target, &dest)?;
        } else if ft.is_file() {
            std::fs::copy(entry.path(), &dest)
                .with_context(|| format!("copying to `{}`", dest.display()))?;
        }
    }
    Ok(())
}

pub(crate) async fn results(cfg: &Config, args: ResultsArgs) -> anyhow::Result<ExitCode> {
    let store = open_store(cfg)?;
    let t = store.require(&args.id)?;
    let Some(dir) = t.results_path.clone() else {
        bail!(
            "task `{}` is {}: results are collected when it ends",
            t.id,
            t.state
        );
    };
    let mut shown = PathBuf::from(&dir);
    if let Some(dest) = &args.dest {
        let target = dest.join(t.id.to_string());
        copy_tree(Path::new(&dir), &target)?;
        shown = target;
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({"id": t.id.to_string(), "state": t.state.as_str(), "results": shown})
        );
    } else {
        println!("{}", shown.display());
    }
    Ok(exit_for(t.state))
}

pub(crate) async fn cancel(cfg: &Config, args: IdArgs) -> anyhow::Result<ExitCode> {
    let mut store = open_store(cfg)?;
    let t = store.require(&args.id)?;
    match store.request_cancel(t.id)? {
        TaskState::Queued => println!("cancelled {} (it had not started)", t.id),
        TaskState::Starting | TaskState::Running => println!(
            "cancel requested for {}; the serving foreman stops it and collects its workspace",
            t.id
        ),
        done => bail!("task `{}` already ended ({done}); nothing to cancel", t.id),
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn retry(cfg: &Config, args: RetryArgs) -> anyhow::Result<ExitCode> {
    let mut store = open_store(cfg)?;
    let old: TaskRow = store.require(&args.id)?;
    let id = TaskId::new();
    inputs::copy_workspace(&cfg.state_dir(), old.id, id)?;
    store.submit(id, &old.spec, old.priority, Some(old.id), old.attempt + 1)?;
    if args.json {
        println!(
            "{}",
            serde_json::json!({"id": id.to_string(), "retry_of": old.id.to_string()})
        );
    } else {
        println!("{id}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Ctrl-C or SIGTERM once: drain; twice: stop running containers too.
fn signals() -> (CancellationToken, CancellationToken) {
    let drain = CancellationToken::new();
    let stop = CancellationToken::new();
    let (d, s) = (drain.clone(), stop.clone());
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler");
        for n in 0.. {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            if n == 0 {
                tracing::warn!(
                    "draining: no new tasks start; interrupt again to stop running ones"
                );
                d.cancel();
            } else {
                s.cancel();
                break;
            }
        }
    });
    (drain, stop)
}

async fn context(cfg: &Config) -> anyhow::Result<Arc<Ctx>> {
    let store = open_store(cfg)?;
    let docker = docker::connect().await?;
    let upstream = Arc::new(Upstream::from_config(cfg)?);
    Ok(Arc::new(Ctx {
        cfg: cfg.clone(),
        lease: crate::store::Lease::new(cfg.file.lease),
        docker,
        store: Arc::new(Mutex::new(store)),
        upstream,
    }))
}

pub(crate) async fn serve(cfg: &Config, args: ServeArgs) -> anyhow::Result<ExitCode> {
    let mut cfg = cfg.clone();
    if let Some(n) = args.concurrency {
        if n == 0 {
            bail!("`--concurrency` must be at least 1");
        }
        cfg.file.concurrency = n;
    }
    let ctx = context(&cfg).await?;
    docker::require_image(&ctx.docker, &cfg.file.image).await?;
    let (drain, stop) = signals();
    tracing::info!(
        config = %cfg.source.as_deref().map(|p| p.display().to_string()).unwrap_or_else(|| "built-in defaults".into()),
        concurrency = cfg.file.concurrency,
        providers = %ctx.upstream.providers.summary(),
        drain = args.drain,
        "serving"
    );
    let summary = reconciler::run(
        ctx,
        ServeOptions {
            drain: args.drain,
            only: None,
        },
        drain,
        stop,
    )
    .await?;
    let complete = summary
        .finished
        .iter()
        .filter(|(_, s)| *s == TaskState::Complete)
        .count();
    eprintln!(
        "served {} tasks, {} complete",
        summary.finished.len(),
        complete
    );
    Ok(if summary.all_complete() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

pub(crate) async fn run(cfg: &Config, args: RunArgs) -> anyhow::Result<ExitCode> {
    let id = submit_prompt(cfg, &args.prompt, &args.prompt_args)?;
    eprintln!("submitted {id}");
    let ctx = match context(cfg).await {
        Ok(c) => c,
        Err(e) => {
            let mut store = open_store(cfg)?;
            let reason = format!("{e:#}");
            store.transition(
                id,
                TaskState::Failed,
                Some(&reason),
                Some(&crate::store::Outcome {
                    reason: Some("docker".into()),
                    ..Default::default()
                }),
            )?;
            return Err(e);
        }
    };
    let (drain, stop) = signals();
    reconciler::run(
        ctx.clone(),
        ServeOptions {
            drain: false,
            only: Some(id),
        },
        drain,
        stop,
    )
    .await?;
    // The last attempt is the outcome (retries by policy are new tasks).
    let t = ctx
        .db(move |s| s.attempts(id))
        .await?
        .pop()
        .expect("a task has at least one attempt");
    let id = t.id;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&TaskView::new(&t, None))?
        );
    } else {
        let reason = t
            .reason
            .as_deref()
            .filter(|r| *r != t.state.as_str())
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        eprintln!("task {id} {}{reason}", t.state);
        match &t.results_path {
            Some(p) => println!("{p}"),
            None => eprintln!("no results were collected"),
        }
    }
    Ok(exit_for(t.state))
}

pub(crate) async fn gc(cfg: &Config, args: GcArgs) -> anyhow::Result<ExitCode> {
    let store = open_store(cfg)?;
    let d = docker::connect().await?;
    let (containers, volumes) = docker::labelled(&d).await?;
    // Only tasks this database knows to be over: other databases on the
    // same daemon (other projects, tests) keep theirs.
    let ended = |id: &str| {
        store
            .get(id)
            .ok()
            .flatten()
            .is_some_and(|t| t.state.is_terminal())
    };
    let mut removed = 0;
    for (cid, task) in containers.iter().filter(|(_, t)| ended(t)) {
        println!("container {} (task {task})", &cid[..12.min(cid.len())]);
        if !args.dry_run {
            docker::remove_container(&d, cid).await?;
        }
        removed += 1;
    }
    for (name, task) in volumes.iter().filter(|(_, t)| ended(t)) {
        println!("volume {name} (task {task})");
        if !args.dry_run {
            docker::remove_volume(&d, name).await?;
        }
        removed += 1;
    }
    eprintln!(
        "{} {removed} leftover containers and volumes",
        if args.dry_run {
            "would remove"
        } else {
            "removed"
        }
    );
    Ok(ExitCode::SUCCESS)
}
