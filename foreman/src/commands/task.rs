//! `saheeli task …`: submit, status, logs, results, cancel, retry.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use futures_util::StreamExt;
use saheeli_protocol::paths;

use crate::cli::{IdArgs, LogsArgs, ResultsArgs, RetryArgs, StatusArgs, SubmitArgs};
use crate::collect;
use crate::config::Config;
use crate::output::{self, TaskView};
use crate::state::TaskState;

use super::dry_run;
use super::exit_for;
use super::spec_for;
use super::submit_prompt;
use crate::ops::EventPage;
use crate::ops::open_existing_store;
use crate::ops::open_store;
use crate::ops::retry_task;
use crate::ops::submit_child;
use crate::ops::task_view;

pub(crate) async fn submit(cfg: &Config, args: SubmitArgs) -> anyhow::Result<ExitCode> {
    // The definitions in use (issue 52), when a set is applied: their
    // agent types and pools, and their templates by name.
    let defs = if cfg.database().exists() {
        Some(open_existing_store(cfg)?)
    } else {
        None
    };
    let cfg = &match &defs {
        Some(store) => crate::ops::with_definitions(cfg, store)?,
        None => cfg.clone(),
    };
    let id = match (&args.template, &args.prompt) {
        (Some(name), _) => {
            if args.prompt_args.dry_run {
                bail!("`--dry-run` takes a prompt file (`--prompt FILE`), not `--template`");
            }
            let Some(store) = &defs else {
                bail!(
                    "template `{name}`: the database `{}` does not exist yet, so no definitions \
                     are applied; run `saheeli serve --definitions REPO` first",
                    cfg.database().display()
                );
            };
            let submit = args.prompt_args.submit();
            let (cfg, path, spec) = crate::ops::template_spec(cfg, store, name, &submit)?;
            match &args.parent {
                Some(parent) => submit_child(&cfg, &path, spec, &submit, parent).await?,
                None => crate::ops::submit_spec(&cfg, &path, spec, &submit).await?,
            }
        }
        (None, Some(prompt)) => {
            if args.prompt_args.dry_run {
                return dry_run(cfg, prompt, &args.prompt_args, args.json).await;
            }
            match &args.parent {
                Some(parent) => {
                    let spec = spec_for(cfg, prompt, &args.prompt_args)?;
                    submit_child(cfg, prompt, spec, &args.prompt_args.submit(), parent).await?
                }
                None => submit_prompt(cfg, prompt, &args.prompt_args).await?,
            }
        }
        (None, None) => bail!("give `--prompt FILE` or `--template NAME`"),
    };
    if args.json {
        outln!("{}", serde_json::json!({ "id": id.to_string() }));
    } else {
        outln!("{id}");
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
            _ if args.tree && !args.json => tree_of(&store, args.id.as_deref(), args.limit)?,
            Some(id) => {
                let page = EventPage {
                    before: args.events_before,
                    limit: args.events,
                };
                if args.json {
                    let mut view = task_view(&store, id, page)?;
                    let tid = store.require(id)?.id;
                    view.snapshots = Some(crate::ops::kept_snapshots(cfg, tid));
                    serde_json::to_string_pretty(&view)?
                } else {
                    let t = store.require(id)?;
                    let (mut events, total) = store.events_page(t.id, page.before, page.limit)?;
                    events.reverse();
                    let shown = events.len() as i64;
                    let attempts = store.attempts(t.id)?;
                    let steps = crate::store::step_status_with(
                        &t.spec.steps,
                        &store.steps_done(t.id)?,
                        &store.step_overrides(t.id)?,
                    );
                    let mut text = output::detail(&t, &events, &attempts, &steps);
                    if shown < total {
                        text.push_str(&format!(
                            "events:    {shown} of {total} shown (`--events N`, `--events-before SEQ`)\n"
                        ));
                    }
                    text.push_str(&output::family_lines(&store, &t)?);
                    text.push_str(&output::samples_line(&store, &t)?);
                    let kept = crate::ops::kept_snapshots(cfg, t.id);
                    text.push_str(&output::snapshots_line(&t.id.short(), &kept));
                    if let Some(c) =
                        Some(store.webhook_counts(t.id)?).filter(|c| *c != Default::default())
                    {
                        text.push_str(&format!(
                            "webhooks:  {} delivered, {} pending, {} dead (given up)\n",
                            c.delivered, c.pending, c.dead
                        ));
                    }
                    text
                }
            }
            None => {
                let tasks = store.list(args.limit)?;
                if args.json {
                    let views: Vec<_> = tasks.iter().map(|t| TaskView::new(t, None)).collect();
                    serde_json::to_string_pretty(&views)?
                } else {
                    let mut text = output::table(&tasks);
                    let fresh = crate::store::now_ms() - crate::metrics::ADMISSION_FRESH_MS;
                    if let Some(row) = store.admission_since(fresh)? {
                        text.push('\n');
                        text.push_str(&output::admission_line(&row));
                    }
                    // The definitions' pools once a set applies (issue 52).
                    let caps = &crate::ops::with_definitions(cfg, &store)?.file.pools;
                    if !caps.is_empty() {
                        let usage = crate::admission::pools::usage(caps, &store.pool_groups()?);
                        text.push('\n');
                        text.push_str(&crate::admission::pools::line(&usage).unwrap_or_default());
                    }
                    text
                }
            }
        };
        if args.watch {
            // Clear the screen and home the cursor before each redraw.
            out!("\x1b[2J\x1b[H");
        }
        outln!("{}", text.trim_end());
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

/// `task status [ID] --tree`: the tree ID is in, from its root (without
/// ID: the trees of the newest `limit` tasks that are roots).
fn tree_of(store: &crate::store::Store, id: Option<&str>, limit: usize) -> anyhow::Result<String> {
    let roots = match id {
        Some(id) => {
            let mut t = store.require(id)?;
            // Up through parents and the tasks forks were made of.
            while let Some(p) =
                store
                    .parent_of(t.id)?
                    .or(t.spec.forked_from.as_ref().map(|f| f.task))
            {
                t = store.require(&p.to_string())?;
            }
            vec![t]
        }
        None => {
            let mut roots = Vec::new();
            for t in store.list(limit)? {
                if store.parent_of(t.id)?.is_none() && t.spec.forked_from.is_none() {
                    roots.push(t);
                }
            }
            roots
        }
    };
    output::tree_text(store, &roots)
}

pub(crate) async fn logs(cfg: &Config, args: LogsArgs) -> anyhow::Result<ExitCode> {
    let store = open_existing_store(cfg)?;
    let t = store.require(&args.id)?;
    let mut live_printed = 0usize;
    // Of those, the audit lines: the collected log goes on after them.
    let mut audit_printed = 0usize;
    if matches!(
        t.state,
        TaskState::Queued
            | TaskState::Starting
            | TaskState::Running
            | TaskState::WaitingHuman
            | TaskState::Paused
            | TaskState::Blocked
    ) {
        if t.state == TaskState::Queued && !args.follow {
            eprintln!("task {} is queued; nothing logged yet", t.id);
            return Ok(ExitCode::SUCCESS);
        }
        // Live: the servo mirrors its audit lines to stdout, i.e. the
        // container log, on this host or the swarm node that runs it now.
        let live = super::live::LiveLog::connect(cfg).await?;
        let mut current: Option<String> = None;
        loop {
            let t = store.require(&args.id)?;
            if t.state.is_terminal() {
                break;
            }
            if let Some((d, cid)) = live.containers(&t).await?.first() {
                // Another container (a launch on another node): its log
                // starts afresh, and so does the collected one.
                if current.as_ref() != Some(cid) {
                    current = Some(cid.clone());
                    live_printed = 0;
                    audit_printed = 0;
                }
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
                            outln!("{}", output::audit_line(line));
                            live_printed = n;
                            // The model's text as it streams in (issue
                            // 29) is in the container log only.
                            if saheeli_protocol::live::LiveLine::parse(line).is_none() {
                                audit_printed += 1;
                            }
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
        for line in lines.skip(audit_printed) {
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
    let mut copied = None;
    if let Some(dest) = &args.dest {
        let target = dest.join(t.id.to_string());
        let (from, to) = (PathBuf::from(&dir), target.clone());
        let links = args.links;
        let c = tokio::task::spawn_blocking(move || super::copy::copy_results(&from, &to, links))
            .await
            .context("the copying thread panicked")?
            .with_context(|| format!("copying the results of task `{}`", t.id))?;
        shown = target;
        copied = Some(c);
    }
    if args.json {
        let mut v = serde_json::json!({"id": t.id.to_string(), "state": t.state.as_str(), "results": shown});
        if let Some(c) = &copied {
            v["files_copied"] = c.files.into();
            v["links_copied"] = c.links.into();
            v["links_skipped"] = c.links_skipped.len().into();
        }
        outln!("{v}");
    } else {
        outln!("{}", shown.display());
    }
    if let Some(c) = copied.filter(|c| !c.links_skipped.is_empty()) {
        // On stderr: stdout stays the path alone, for scripts.
        let first: Vec<String> = c
            .links_skipped
            .iter()
            .take(5)
            .map(|p| output::printable(&p.display().to_string()).into_owned())
            .collect();
        let more = c.links_skipped.len().saturating_sub(first.len());
        eprintln!(
            "note: {} symbolic link{} in the results not copied ({}{}): links name what the \
             agent chose, host paths included; `--links` copies them as links",
            c.links_skipped.len(),
            if c.links_skipped.len() == 1 { "" } else { "s" },
            first.join(", "),
            if more > 0 {
                format!(", and {more} more")
            } else {
                String::new()
            },
        );
    }
    Ok(exit_for(t.state))
}

pub(crate) async fn cancel(cfg: &Config, args: IdArgs) -> anyhow::Result<ExitCode> {
    super::human::cancel_cli(cfg, args).await
}

pub(crate) async fn fork(cfg: &Config, args: crate::cli::ForkArgs) -> anyhow::Result<ExitCode> {
    let fork = crate::ops::Fork {
        at_step: args.at_step,
        count: args.count,
        model: args.model,
        note: args.note,
        samples_of: None,
    };
    let ids = crate::ops::fork_task(cfg, &args.id, fork).await?;
    if args.json {
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        outln!("{}", serde_json::json!({"ids": ids}));
    } else {
        for id in ids {
            outln!("{id}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `task snapshot ID` (issue 51): a snapshot at the task's next step.
pub(crate) fn snapshot(cfg: &Config, args: crate::cli::SnapshotArgs) -> anyhow::Result<ExitCode> {
    let asked = crate::ops::request_snapshot(cfg, &args.id)?;
    let (id, every) = match asked {
        crate::ops::Asked::Next(id) => (id, false),
        crate::ops::Asked::Every(id) => (id, true),
    };
    let kept = crate::collect::snapshot::steps(&cfg.state_dir(), id);
    if args.json {
        outln!(
            "{}",
            serde_json::json!({"id": id.to_string(), "every_step": every, "kept": kept})
        );
    } else if every {
        outln!("task {id} keeps a snapshot at every step already (`snapshots: every`)");
    } else {
        outln!("task {id} keeps a snapshot at its next step");
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn retry(cfg: &Config, args: RetryArgs) -> anyhow::Result<ExitCode> {
    let retried = retry_task(cfg, &args.id).await?;
    if let Some(note) = &retried.note {
        eprintln!("note: {note}");
    }
    if args.json {
        outln!(
            "{}",
            serde_json::json!({"id": retried.id.to_string(), "retry_of": retried.retry_of.to_string()})
        );
    } else {
        outln!("{}", retried.id);
    }
    Ok(ExitCode::SUCCESS)
}

/// `task follow-up ID --prompt FILE_OR_TEXT` (issue 52).
pub(crate) async fn follow_up(
    cfg: &Config,
    args: crate::cli::FollowUpArgs,
) -> anyhow::Result<ExitCode> {
    let path = std::path::Path::new(&args.prompt);
    let feedback = if path.is_file() {
        use std::io::Read;
        let mut text = String::new();
        std::fs::File::open(path)
            .with_context(|| format!("reading `{}`", path.display()))?
            .take(crate::ops::MAX_FEEDBACK as u64 + 1)
            .read_to_string(&mut text)
            .with_context(|| format!("reading `{}` (UTF-8 text)", path.display()))?;
        text
    } else {
        args.prompt.clone()
    };
    let id = crate::ops::follow_up(cfg, &args.id, &feedback).await?;
    if args.json {
        outln!("{}", serde_json::json!({"id": id.to_string()}));
    } else {
        outln!("{id}");
    }
    Ok(ExitCode::SUCCESS)
}
