//! A task with `samples: K` (best-of-N, issue 51): it runs no servo of
//! its own. Claimed (or taken over), it becomes `running`, holds no slot
//! (its waiting flag is up, as a task waiting on a human's), queues its K
//! samples once (`Store::spawn_samples`, a no-op when a foreman before
//! this one did), then looks at them until `select::decide` says: the
//! winner's results are copied to `results/<task_id>/` and the task ends
//! as it did; or none qualified and it ends `incomplete`,
//! `no_sample_qualified`.
//!
//! Everything it decides from is in SQLite (the samples' states, end
//! times, checks), so a foreman that takes the task over after a crash
//! decides the same; the copy is redone whole and the ending is fenced
//! by the lease, so nothing is lost or done twice.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use saheeli_protocol::verify::CheckKind;
use saheeli_protocol::{Reason, TaskId};
use tracing::{info, warn};

use super::finish::finish;
use super::select::{Decision, Sampled, decide};
use super::{Command, Ctx, Inbox, Joined, abandon, lease_lost};
use crate::inputs;
use crate::state::TaskState;
use crate::store::{DbError, Outcome, Store, StoreError, TaskRow};
use crate::task::{SampleOf, Samples, TaskSpec};

/// How often the samples are looked at (one indexed read).
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// Runs task `task` (with `samples:`) from `starting` or `running` to its end.
pub(crate) async fn run(ctx: Arc<Ctx>, task: TaskRow, mut inbox: Inbox) -> Joined {
    let id = task.id;
    let Some(plan) = task.spec.samples else {
        unreachable!("only a task with samples comes here")
    };
    // It runs no servo: its samples need the slots.
    inbox.waiting().store(true, Ordering::Relaxed);
    if task.state == TaskState::Starting {
        let lease = ctx.lease.clone();
        let detail = format!("best-of-{}, select: {}", plan.count, plan.select);
        if let Err(e) = ctx.db(move |s| s.started(id, &lease, &detail)).await {
            return db_failed(&ctx, id, e).await;
        }
    }
    if let Err(e) = spawn(&ctx, &task, plan).await {
        if lease_lost(&e) {
            return abandon(id, None).await;
        }
        let why = format!("the samples could not be queued: {e:#}");
        return finish(
            &ctx,
            id,
            TaskState::Failed,
            Reason::Launch,
            Outcome::default(),
            &why,
        )
        .await;
    }
    let lost = inbox.lost();
    let mut forking = plan.fork_at > 0;
    loop {
        if forking {
            match fork_rest(&ctx, &task, plan).await {
                Ok(wait) => forking = wait,
                Err(e) if lease_lost(&e) => return abandon(id, None).await,
                Err(e) => {
                    let why = format!("the samples could not be forked: {e:#}");
                    let failed = TaskState::Failed;
                    return finish(&ctx, id, failed, Reason::Launch, Outcome::default(), &why)
                        .await;
                }
            }
        }
        let sampled = match ctx.db(move |s| sampled(s, id)).await {
            Ok(v) => v,
            Err(e) => return db_failed(&ctx, id, e).await,
        };
        match decide(plan.select, plan.count, &sampled) {
            Decision::Wait => {}
            Decision::Won { winner, cancel } => {
                return won(&ctx, &task, plan, &sampled, winner, cancel).await;
            }
            Decision::NoneQualified(why) => {
                info!(task_id = %id, %why, "no sample qualified");
                // `incomplete`, not `failed`: the samples ran; the work
                // fell short (`failed` is the platform's: evals class it
                // infra and run it again), unless no sample could be run.
                let platform = sampled.iter().all(|s| s.state == TaskState::Failed);
                return finish(
                    &ctx,
                    id,
                    if platform {
                        TaskState::Failed
                    } else {
                        TaskState::Incomplete
                    },
                    Reason::NoSampleQualified,
                    Outcome::default(),
                    &why,
                )
                .await;
            }
        }
        tokio::select! {
            Command::Stop(reason) = inbox.recv() => return stopped(&ctx, id, &sampled, reason).await,
            _ = lost.cancelled() => return abandon(id, None).await,
            _ = tokio::time::sleep(LOOK_EVERY) => {}
        }
    }
}

/// A store error: let go when another foreman holds the task now, else
/// leave it to the next take-over round (its lease runs out).
async fn db_failed(ctx: &Ctx, id: TaskId, e: DbError) -> Joined {
    if lease_lost(&e) {
        return abandon(id, None).await;
    }
    warn!(task_id = %id, error = %format!("{e:#}"), "best-of-N: the store failed; letting the task go for a later take-over");
    super::let_go(ctx, id, &e).await
}

/// One sample's task: the task's spec, its share of the budget, which
/// sample it is (in its spec and its commands' environment).
pub(crate) fn sample_spec(task: &TaskRow, plan: Samples, index: u32) -> TaskSpec {
    let mut spec = task.spec.clone();
    spec.samples = None;
    spec.sample_of = Some(SampleOf {
        task: task.id,
        index,
        count: plan.count,
    });
    spec.number_sample(&task.spec.title, index, plan.count);
    let (tokens, cost) = crate::spec::sample_share(&plan, task.spec.max_tokens, task.spec.max_cost);
    spec.max_tokens = tokens;
    spec.max_cost = cost;
    // A sample's retries share its carve, as a child's do.
    spec.budget_per_attempt = false;
    spec.chain = None;
    // `fork_at`: the first run must keep its step N for the forks.
    if plan.fork_at > 0 && index == 1 {
        spec.snapshots = saheeli_protocol::front_matter::Snapshots::Every;
    }
    spec
}

/// Queues the samples not queued yet (a foreman before this one may have
/// queued them): all K from step 0, or with `fork_at`, the first run
/// alone (sample 1). Each gets a copy (a hard link) of the task's
/// submitted workspace; copies made for samples found queued are removed.
async fn spawn(ctx: &Ctx, task: &TaskRow, plan: Samples) -> anyhow::Result<()> {
    let first_only = plan.fork_at > 0;
    let count = if first_only { 1 } else { plan.count };
    queue(ctx, task, plan, 1..=count).await
}

async fn queue(
    ctx: &Ctx,
    task: &TaskRow,
    plan: Samples,
    indexes: std::ops::RangeInclusive<u32>,
) -> anyhow::Result<()> {
    let id = task.id;
    let samples: Vec<(TaskId, TaskSpec)> = indexes
        .map(|i| (TaskId::new(), sample_spec(task, plan, i)))
        .collect();
    let state_dir = ctx.cfg.state_dir();
    let ids: Vec<TaskId> = samples.iter().map(|(i, _)| *i).collect();
    let (dir, made) = (state_dir.clone(), ids.clone());
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        for sample in made {
            inputs::copy_workspace(&dir, id, sample)?;
        }
        Ok(())
    })
    .await??;
    let (lease, priority) = (ctx.lease.clone(), task.priority);
    let queued = ctx
        .db(move |s| s.spawn_samples(id, &lease, &samples, priority))
        .await;
    let keep = queued.as_ref().ok().cloned().unwrap_or_default();
    for sample in ids.iter().filter(|i| !keep.contains(i)) {
        inputs::remove_workspace(&state_dir, *sample).await;
    }
    queued?;
    Ok(())
}

/// `fork_at: N`: once the first run (sample 1) has passed step N, the
/// other K-1 samples are forked from its step N (`ops::fork_task`, which
/// keeps them by `forked_from`) and filed under the task; forks a foreman
/// before this one made are filed, never made again. A first run that
/// ended before step N leaves nothing to fork from: the others start
/// from step 0. Whether there is anything to wait for still.
async fn fork_rest(ctx: &Ctx, task: &TaskRow, plan: Samples) -> anyhow::Result<bool> {
    let id = task.id;
    let first = ctx
        .db(move |s| {
            let rows = s.children(id)?;
            Ok(rows
                .into_iter()
                .find(|c| c.last.spec.sample_index(id) == Some(1)))
        })
        .await?;
    let Some(first) = first.map(|c| c.last) else {
        anyhow::bail!("the first run of task {id} is not among its samples");
    };
    let at = plan.fork_at;
    if (first.steps.max(0) as u64) < at {
        if !first.state.is_terminal() {
            return Ok(true);
        }
        info!(task_id = %id, first = %first.id, steps = first.steps, at, "the first run ended before step fork_at; the other samples start from step 0");
        queue(ctx, task, plan, 2..=plan.count).await?;
        return Ok(false);
    }
    let from = first.id;
    let mut forks = ctx.db(move |s| s.forks_of(from)).await?;
    if forks.is_empty() {
        let fork = crate::ops::Fork {
            at_step: Some(at),
            count: plan.count - 1,
            samples_of: Some(task.spec.title.clone()),
            ..crate::ops::Fork::default()
        };
        forks = crate::ops::fork_task(&ctx.cfg, &from.to_string(), fork)
            .await
            .map_err(|e| anyhow::anyhow!("forking the first run {from} at step {at}: {e}"))?;
    }
    let lease = ctx.lease.clone();
    ctx.db(move |s| s.link_samples(id, &lease, &forks)).await?;
    Ok(false)
}

/// The task's samples as the decision sees them (children that are not
/// its samples, filed under it by hand, are left out).
fn sampled(s: &mut Store, task: TaskId) -> Result<Vec<Sampled>, StoreError> {
    let mut out = Vec::new();
    for c in s.children(task)? {
        let Some(index) = c.last.spec.sample_index(task) else {
            continue;
        };
        let checks = s.verify_checks(c.last.id)?;
        let score = checks
            .iter()
            .rev()
            .find(|k| k.kind == CheckKind::Assess && k.passed)
            .and_then(|k| k.graded.as_ref().map(|g| g.reward));
        out.push(Sampled {
            id: c.id,
            index,
            state: c.last.state,
            finished_at: c.last.finished_at,
            score,
        });
    }
    Ok(out)
}

/// The task was cancelled (or the foreman stopped): every sample still
/// to end is cancelled too, and the task ends.
async fn stopped(ctx: &Ctx, id: TaskId, sampled: &[Sampled], reason: Reason) -> Joined {
    cancel(
        ctx,
        id,
        sampled
            .iter()
            .filter(|s| !s.state.is_terminal())
            .map(|s| s.id)
            .collect(),
    )
    .await;
    let (to, why) = match reason {
        Reason::Cancelled => (
            TaskState::Cancelled,
            "cancelled; its samples are cancelled with it",
        ),
        _ => (
            TaskState::Incomplete,
            "the foreman stopped; the samples still running are cancelled",
        ),
    };
    finish(ctx, id, to, reason, Outcome::default(), why).await
}

async fn cancel(ctx: &Ctx, id: TaskId, samples: Vec<TaskId>) {
    if samples.is_empty() {
        return;
    }
    let r = ctx
        .db(move |s| {
            for sample in samples {
                s.request_cancel(sample)?;
            }
            Ok(())
        })
        .await;
    if let Err(e) = r {
        warn!(task_id = %id, error = %format!("{e:#}"), "best-of-N: cancelling the other samples failed");
    }
}

/// `winner` won: the others still running are cancelled (first_complete),
/// its results become the task's, and the task ends as it did.
async fn won(
    ctx: &Ctx,
    task: &TaskRow,
    plan: Samples,
    sampled: &[Sampled],
    winner: TaskId,
    others: Vec<TaskId>,
) -> Joined {
    let id = task.id;
    cancel(ctx, id, others).await;
    let w = match ctx.db(move |s| Ok(s.attempts(winner)?.pop())).await {
        Ok(Some(w)) => w,
        Ok(None) => unreachable!("a task is its own first attempt"),
        Err(e) => return db_failed(ctx, id, e).await,
    };
    let index = w.spec.sample_index(id).unwrap_or(0);
    let detail = format!("sample {index} of {}: {winner}", plan.count);
    let lease = ctx.lease.clone();
    let noted = detail.clone();
    if let Err(e) = ctx.db(move |s| s.note_sample_won(id, &lease, &noted)).await {
        return db_failed(ctx, id, e).await;
    }
    let dest = ctx.cfg.results_dir().join(id.to_string());
    let record = record(task, plan, sampled, &w, index);
    let copied = match w.results_path.clone() {
        Some(src) => copy_results(ctx, PathBuf::from(src), dest.clone(), record).await,
        None => Err(anyhow::anyhow!("sample {winner} has no collected results")),
    };
    if let Err(e) = copied {
        let why = format!("{detail} won, but its results could not be copied: {e:#}");
        return finish(
            ctx,
            id,
            TaskState::Failed,
            Reason::Collect,
            Outcome::default(),
            &why,
        )
        .await;
    }
    info!(task_id = %id, %winner, select = %plan.select, "sample won");
    let outcome = Outcome {
        steps: w.steps,
        results_path: Some(dest.display().to_string()),
        ..Outcome::default()
    };
    let why = format!("{detail} won (select: {})", plan.select);
    finish(ctx, id, w.state, Reason::Complete, outcome, &why).await
}

/// `.saheeli/samples.json`: which sample won, by which rule, and each
/// sample's outcome.
fn record(
    task: &TaskRow,
    plan: Samples,
    sampled: &[Sampled],
    w: &TaskRow,
    index: u32,
) -> serde_json::Value {
    let each: Vec<serde_json::Value> = sampled
        .iter()
        .map(|s| {
            serde_json::json!({"index": s.index, "task": s.id.to_string(),
                "state": s.state.to_string(), "score": s.score})
        })
        .collect();
    serde_json::json!({
        "task": task.id.to_string(),
        "count": plan.count,
        "select": plan.select.as_str(),
        "fork_at": plan.fork_at,
        "winner": {"index": index, "task": w.id.to_string(), "state": w.state.to_string()},
        "samples": each,
    })
}

/// Copies the winner's collected results to the task's (links copied as
/// links, never followed; the results cap holds), replacing what a
/// foreman before this one may have left half-copied, and writes the
/// record beside them.
async fn copy_results(
    ctx: &Ctx,
    src: PathBuf,
    dest: PathBuf,
    record: serde_json::Value,
) -> anyhow::Result<()> {
    let secrets = crate::config::Providers::from_config(&ctx.cfg).secrets();
    let max = ctx.cfg.file.max_results_size.0;
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        if std::fs::symlink_metadata(&dest).is_ok() {
            std::fs::remove_dir_all(&dest)?;
        }
        crate::collect::copy_volume(&src, &dest, &secrets, max)?;
        write_record(&dest, &record)
    })
    .await?
}

fn write_record(dest: &Path, record: &serde_json::Value) -> anyhow::Result<()> {
    let dir = dest.join(".saheeli");
    // Never through a link a sample's agent left in its workspace.
    if std::fs::symlink_metadata(&dir).is_ok_and(|m| !m.is_dir()) {
        std::fs::remove_file(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("samples.json");
    if std::fs::symlink_metadata(&path).is_ok() {
        std::fs::remove_file(&path)?;
    }
    std::fs::write(&path, serde_json::to_vec_pretty(record)?)?;
    Ok(())
}
