//! `saheeli run FILE`: submit, then serve until that task (and its
//! retries) end, following it on the event bus.

use std::process::ExitCode;

use saheeli_protocol::TaskId;
use tokio_util::sync::CancellationToken;

use crate::cli::RunArgs;
use crate::config::Config;
use crate::output::TaskView;
use crate::reconciler::{self, ServeOptions};

use super::context;
use super::dry_run;
use super::exit_for;
use super::signals;
use super::submit_prompt;
use crate::ops::open_existing_store;
use crate::ops::open_store;
use crate::ops::steer;
use crate::ops::who;

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
    let asker = Asker {
        cfg: cfg.clone(),
        interactive: std::io::IsTerminal::is_terminal(&std::io::stdin()),
    };
    let progress = tokio::spawn(follow(
        ctx.bus.subscribe(),
        id,
        progress_done.clone(),
        Some(asker),
    ));
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
        let tid = t.id;
        let (checks, egress) = ctx
            .db(move |s| Ok((s.verify_checks(tid)?, s.egress_of(tid)?)))
            .await?;
        let view = TaskView::new(&t, None)
            .with_grade(&checks)
            .with_egress(t.spec.egress.any(), egress);
        outln!("{}", serde_json::to_string_pretty(&view)?);
    } else {
        // How it ended was printed from the event bus (`follow`).
        match &t.results_path {
            Some(p) => outln!("{p}"),
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
    asker: Option<Asker>,
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
        if let Some(kind) = &e.kind {
            if let Some(a) = &asker {
                a.on_event(&e, kind);
            }
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

/// Brings a task's questions to the person who ran `saheeli run`: asked
/// inline on a terminal (a `>` prompt), else printed with the exact
/// command that answers them.
pub(super) struct Asker {
    pub cfg: Config,
    pub interactive: bool,
}

impl Asker {
    fn on_event(&self, e: &crate::events::TaskEvent, kind: &str) {
        let short = e.task_id.short();
        let detail = crate::output::clean(e.detail.as_deref().unwrap_or(""));
        match kind {
            "asked" => {}
            "parked" => return,
            _ => {
                let by = e
                    .actor
                    .as_deref()
                    .map(|a| format!(" by {a}"))
                    .unwrap_or_default();
                eprintln!(
                    "task {short} {kind}{by}{}",
                    if detail.is_empty() {
                        String::new()
                    } else {
                        format!(": {detail}")
                    }
                );
                return;
            }
        }
        let Some(waiting) = self.open_ask(e.task_id) else {
            return;
        };
        eprintln!(
            "task {short} waits for a human: {}",
            crate::output::clean(&crate::output::waiting_line(&waiting))
        );
        if !self.interactive {
            eprintln!("  {}", crate::output::how_to_reply(e.task_id, &waiting));
            return;
        }
        let cfg = self.cfg.clone();
        let id = e.task_id;
        std::thread::spawn(move || prompt(&cfg, id, &waiting));
    }

    fn open_ask(&self, id: TaskId) -> Option<saheeli_protocol::human::Waiting> {
        let store = open_existing_store(&self.cfg).ok()?;
        store.open_ask(id).ok().flatten().map(|a| a.waiting)
    }
}

/// JobSherpa's `>` prompt: reads the reply from the terminal and records it.
fn prompt(cfg: &Config, id: TaskId, waiting: &saheeli_protocol::human::Waiting) {
    use saheeli_protocol::human::Waiting;
    use std::io::Write;
    let read = |label: &str| -> Option<String> {
        eprint!("{label}");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        match std::io::stdin().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim().to_string()),
        }
    };
    let act = match waiting {
        Waiting::Answer { .. } | Waiting::Blocked { .. } => loop {
            match read("> ") {
                None => return,
                Some(l) if l.is_empty() => continue,
                Some(l) => break crate::store::HumanAct::Answer(l),
            }
        },
        _ => loop {
            let Some(l) = read("approve? [y]es / [n]o REASON > ") else {
                return;
            };
            let (word, rest) = l.split_once(char::is_whitespace).unwrap_or((&l, ""));
            match word {
                "y" | "yes" | "approve" => {
                    break crate::store::HumanAct::Approve(
                        (!rest.trim().is_empty()).then(|| rest.trim().to_string()),
                    );
                }
                "n" | "no" | "deny" if !rest.trim().is_empty() => {
                    break crate::store::HumanAct::Deny(rest.trim().to_string());
                }
                "n" | "no" | "deny" => {
                    let Some(r) = read("reason > ") else { return };
                    if !r.is_empty() {
                        break crate::store::HumanAct::Deny(r);
                    }
                }
                _ => eprintln!("type y, or n followed by a reason"),
            }
        },
    };
    let done = open_existing_store(cfg).and_then(|mut s| {
        let by = who();
        let reply = crate::ops::Steer::Reply(act);
        Ok(steer(cfg, &mut s, &id.to_string(), reply, &by)?)
    });
    match done {
        Ok(msg) => eprintln!("{msg}"),
        Err(e) => eprintln!("error: {e:#}"),
    }
}
