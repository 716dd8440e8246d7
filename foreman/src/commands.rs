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
use saheeli_protocol::{TaskId, paths};
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
use crate::{collect, docker, inputs};

/// Opens the database named by the config, creating its directory.
pub(crate) fn open_store(cfg: &Config) -> anyhow::Result<Store> {
    let path = cfg.database();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating database directory `{}`", dir.display()))?;
    }
    Store::open(&path).with_context(|| format!("opening database `{}`", path.display()))
}

/// Opens an existing database for a command that only reads (status, logs,
/// results): never creates one, and says where it looked.
pub(crate) fn open_existing_store(cfg: &Config) -> anyhow::Result<Store> {
    let path = cfg.database();
    if !path.exists() {
        bail!(
            "no database at `{}` (from {}); run this in the project directory, or pass \
             `--config FILE`; `saheeli task submit` creates it",
            path.display(),
            cfg.describe_source()
        );
    }
    open_store(cfg)
}

fn exit_for(state: TaskState) -> ExitCode {
    match state {
        TaskState::Complete => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    }
}

/// Validates and queues a prompt; returns the new id.
async fn submit_prompt(cfg: &Config, prompt: &Path, args: &PromptArgs) -> anyhow::Result<TaskId> {
    let spec = TaskSpec::from_prompt(cfg, prompt, &args.params)?;
    let id = TaskId::new();
    // Copied before the row exists (and the database is opened): a failure
    // here queues nothing and leaves nothing behind.
    let packed = match &spec.workspace {
        Some(ws) => {
            inputs::check_workspace_path(prompt, ws, args.allow_workspace_outside)?;
            let (cfg, ws) = (cfg.clone(), ws.clone());
            let include_ignored = spec.workspace_include_ignored;
            let tar = tokio::task::spawn_blocking(move || pack(&cfg, &ws, id, include_ignored))
                .await
                .context("packing thread panicked")??;
            Some(tar)
        }
        None => None,
    };
    let queued = open_store(cfg).and_then(|mut store| {
        store
            .submit(id, &spec, args.priority, None, 1)
            .map_err(anyhow::Error::from)
    });
    if let (Err(_), Some(tar)) = (&queued, packed) {
        let _ = std::fs::remove_file(tar);
    }
    queued.map(|()| id)
}

/// Packs `ws` as task `id`'s submitted workspace; returns the tar. Blocking.
fn pack(cfg: &Config, ws: &Path, id: TaskId, include_ignored: bool) -> anyhow::Result<PathBuf> {
    let db = cfg.database();
    let mut exclude = vec![cfg.state_dir(), cfg.results_dir()];
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = db.clone().into_os_string();
        p.push(suffix);
        exclude.push(p.into());
    }
    let opts = inputs::PackOptions {
        include_ignored,
        exclude,
        max_bytes: cfg.file.max_workspace_size.0,
        secrets: known_secrets(cfg),
    };
    let tar = inputs::new_workspace_tar(&cfg.state_dir(), id).with_context(|| {
        format!(
            "creating the inputs directory in `{}`",
            cfg.state_dir().display()
        )
    })?;
    inputs::pack_workspace(ws, &tar, &opts)?;
    Ok(tar)
}

/// The value of every key variable Saheeli knows, from the environment and
/// from `.env` beside config.yaml (where the environment may hold another).
fn known_secrets(cfg: &Config) -> Vec<(String, String)> {
    let mut vars = vec![
        "OPENAI_API_KEY".to_string(),
        "ANTHROPIC_API_KEY".to_string(),
    ];
    vars.extend(
        cfg.file
            .providers
            .values()
            .filter_map(|p| p.api_key_env.clone()),
    );
    let mut out: Vec<(String, String)> = vars
        .iter()
        .filter_map(|v| Some((v.clone(), std::env::var(v).ok()?)))
        .collect();
    if let Ok(entries) = dotenvy::from_path_iter(cfg.base_dir.join(".env")) {
        out.extend(entries.flatten().filter(|(k, _)| vars.contains(k)));
    }
    // As collection's redaction does: a short value would match by chance.
    out.retain(|(_, v)| v.trim().len() >= 8);
    out.sort();
    out.dedup();
    out
}

pub(crate) async fn submit(cfg: &Config, args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let id = submit_prompt(cfg, &args.prompt, &args.prompt_args).await?;
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
    let store = open_existing_store(cfg)?;
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

pub(crate) async fn logs(cfg: &Config, args: LogsArgs) -> anyhow::Result<ExitCode> {
    let store = open_existing_store(cfg)?;
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
                            println!("{}", output::audit_line(line));
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
    // The collected log is the agent's file: never followed, never read whole.
    let dir = PathBuf::from(dir);
    let lines = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let Some(lines) = collect::audit_lines(&dir, t.id)
            .with_context(|| format!("reading the audit log of task `{}`", t.id))?
        else {
            bail!(
                "task `{}` left no audit log `{}` in its results",
                t.id,
                paths::audit_log(&t.id)
            );
        };
        let mut out = std::io::stdout().lock();
        for line in lines.skip(live_printed) {
            let shown = match line.context("reading the audit log")? {
                collect::Line::Text(l) => output::audit_line(&l),
                collect::Line::TooLong(n) => format!("[an audit line of {n} bytes, not shown]"),
                collect::Line::Truncated => format!(
                    "[the audit log goes on past {} MiB; the rest is not shown]",
                    collect::MAX_AUDIT_LOG >> 20
                ),
            };
            writeln!(out, "{shown}")?;
        }
        Ok(())
    });
    lines.await.context("audit log reader panicked")??;
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
    let store = open_existing_store(cfg)?;
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
    let mut store = open_existing_store(cfg)?;
    let t = store.require(&args.id)?;
    match store.request_cancel(t.id)? {
        TaskState::Queued => {
            // It never starts: its submitted workspace is not needed.
            inputs::remove_workspace(&cfg.state_dir(), t.id).await;
            println!("cancelled {} (it had not started)", t.id)
        }
        TaskState::Starting | TaskState::Running => println!(
            "cancel requested for {}; the serving foreman stops it and collects its workspace",
            t.id
        ),
        done => bail!("task `{}` already ended ({done}); nothing to cancel", t.id),
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn retry(cfg: &Config, args: RetryArgs) -> anyhow::Result<ExitCode> {
    let mut store = open_existing_store(cfg)?;
    let old: TaskRow = store.require(&args.id)?;
    if !old.state.is_terminal() {
        bail!(
            "task `{}` is {}; only an ended task can be retried (wait for it, or `saheeli task cancel {}` first)",
            old.id,
            old.state,
            old.id.short()
        );
    }
    let id = TaskId::new();
    let state_dir = cfg.state_dir();
    let had_copy = inputs::workspace_tar(&state_dir, old.id).is_file();
    if had_copy {
        let (from, state_dir) = (old.id, state_dir.clone());
        tokio::task::spawn_blocking(move || inputs::copy_workspace(&state_dir, from, id))
            .await
            .context("copying thread panicked")??;
    } else if let Some(ws) = &old.spec.workspace {
        // The submitted copy is deleted once a task's workspace is
        // collected: copy the directory again, under the same rules.
        let (cfg2, ws2, include) = (cfg.clone(), ws.clone(), old.spec.workspace_include_ignored);
        tokio::task::spawn_blocking(move || pack(&cfg2, &ws2, id, include))
            .await
            .context("packing thread panicked")??;
        eprintln!(
            "note: task `{}` has run, so its submitted workspace is gone; copied `{}` again as it is now",
            old.id,
            ws.display()
        );
    }
    if let Err(e) = store.retry(old.id, id) {
        inputs::remove_workspace(&state_dir, id).await;
        return Err(e.into());
    }
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
    match cfg.file.limits.disk_enforcement {
        crate::config::DiskEnforcement::Loop => crate::disk::preflight()?,
        crate::config::DiskEnforcement::Off => tracing::warn!(
            "`limits.disk_enforcement: off`: workspaces have no size limit; an agent can fill this host's disk"
        ),
    }
    let store = open_store(cfg)?;
    let docker = docker::connect().await?;
    let upstream = Arc::new(Upstream::from_config(cfg)?);
    Ok(Arc::new(Ctx {
        cfg: cfg.clone(),
        lease: crate::store::Lease::new(cfg.file.lease),
        docker,
        store: Arc::new(Mutex::new(store)),
        bus: crate::events::Bus::new(1024),
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
    let id = submit_prompt(cfg, &args.prompt, &args.prompt_args).await?;
    eprintln!("submitted {id}");
    let ctx = match context(cfg).await {
        Ok(c) => c,
        Err(e) => {
            let mut store = open_store(cfg)?;
            let reason = format!("{e:#}");
            store.fail_queued(id, "docker", &reason)?;
            return Err(e);
        }
    };
    let (drain, stop) = signals();
    // Progress on stderr, from the event bus: this task and its retries.
    let progress_done = CancellationToken::new();
    let progress = tokio::spawn(follow(ctx.bus.subscribe(), id, progress_done.clone()));
    let served = reconciler::run(
        ctx.clone(),
        ServeOptions {
            drain: false,
            only: Some(id),
        },
        drain,
        stop,
    )
    .await;
    progress_done.cancel();
    let _ = progress.await;
    served?;
    // The last attempt is the outcome (retries by policy are new tasks).
    let t = ctx
        .db(move |s| s.attempts(id))
        .await?
        .pop()
        .expect("a task has at least one attempt");
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&TaskView::new(&t, None))?
        );
    } else {
        // How it ended was printed from the event bus (`follow`).
        match &t.results_path {
            Some(p) => println!("{p}"),
            None => eprintln!("no results were collected"),
        }
    }
    Ok(exit_for(t.state))
}

/// Prints the transitions of task `id` and of the attempts that retry it,
/// until `done` (then what is already published).
async fn follow(
    mut events: tokio::sync::broadcast::Receiver<crate::events::TaskEvent>,
    id: TaskId,
    done: CancellationToken,
) {
    use tokio::sync::broadcast::error::{RecvError, TryRecvError};
    let mut chain = vec![id.to_string()];
    let mut draining = false;
    loop {
        let next = if draining {
            match events.try_recv() {
                Err(TryRecvError::Lagged(_)) => continue,
                Err(_) => return,
                Ok(e) => Ok(e),
            }
        } else {
            tokio::select! {
                r = events.recv() => r,
                _ = done.cancelled() => {
                    draining = true;
                    continue;
                }
            }
        };
        let e = match next {
            Ok(e) => e,
            Err(RecvError::Lagged(_)) => continue,
            Err(_) => return,
        };
        let task = e.task_id.to_string();
        let retries_ours = e
            .detail
            .as_deref()
            .is_some_and(|d| chain.iter().any(|c| d.contains(&format!("retry of {c}"))));
        if retries_ours {
            chain.push(task.clone());
        } else if !chain.contains(&task) {
            continue;
        }
        match e.reason {
            Some(r) if r.code() != e.to.as_str() => {
                eprintln!("task {} {} ({r})", e.task_id.short(), e.to)
            }
            _ => eprintln!("task {} {}", e.task_id.short(), e.to),
        }
    }
}

pub(crate) async fn gc(cfg: &Config, args: GcArgs) -> anyhow::Result<ExitCode> {
    let store = open_existing_store(cfg)?;
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
    // Workspace images whose volume is already gone.
    for (id, mnt) in crate::disk::present(&cfg.state_dir()) {
        let task = id.to_string();
        if volumes.iter().any(|(_, t)| *t == task) || !ended(&task) {
            continue;
        }
        println!("workspace image {} (task {task})", mnt.display());
        if !args.dry_run {
            crate::disk::destroy(&mnt)?;
        }
        removed += 1;
    }
    eprintln!(
        "{} {removed} leftover containers, volumes and workspace images",
        if args.dry_run {
            "would remove"
        } else {
            "removed"
        }
    );
    Ok(ExitCode::SUCCESS)
}
