//! `saheeli run FILE`: submit, then serve until that task (and its
//! retries) end, following it on the event bus.

use std::process::ExitCode;

use saheeli_protocol::TaskId;
use tokio_util::sync::CancellationToken;

use crate::cli::RunArgs;
use crate::config::Config;
use crate::output::TaskView;
use crate::reconciler::{self, ServeOptions};

use super::*;

pub(crate) async fn run(cfg: &Config, args: RunArgs) -> anyhow::Result<ExitCode> {
    if args.prompt_args.dry_run {
        return dry_run(cfg, &args.prompt, &args.prompt_args, args.json).await;
    }
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
pub(super) async fn follow(
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
