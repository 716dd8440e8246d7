//! Taking over a swarm task whose foreman stopped, and sweeping the
//! swarm of what ended tasks left. Taking over: its job service is
//! found by label, its gateway served again on this foreman's listener
//! (the token is derived from the launch label, so the running servo's
//! secret still matches), and it is watched to the end as if launched
//! here. A servo whose work ended while no foreman ran is still running:
//! it keeps trying its upload (`protocol::remote::UPLOAD_PATIENCE_S`), so
//! it is adopted like any other and its retry lands here. A task whose
//! service is gone or already ended (the servo gave up) lost its upload:
//! it is requeued as an infrastructure failure.

use std::sync::Arc;

use saheeli_protocol::Reason;
use tracing::{info, warn};

use crate::backend::swarm::{self, LAUNCH_LABEL, Object, Phase};
use crate::gateway::Gateway;
use crate::store::{TaskRow, now_ms};

use super::*;

pub(super) async fn resume_swarm(ctx: Arc<Ctx>, task: TaskRow, inbox: Inbox) -> Joined {
    let id = task.id;
    let sw = handles(&ctx).expect("swarm");
    let lease = ctx.lease.clone();
    if let Err(e) = ctx.db(move |s| s.hold(id, &lease)).await {
        return let_go(&ctx, id, &e).await;
    }
    let services: Vec<String> = match swarm::swarm_objects(sw.manager, Some(id)).await {
        Ok(objects) => objects
            .into_iter()
            .filter_map(|(_, o)| match o {
                Object::Service(s) => Some(s),
                _ => None,
            })
            .collect(),
        Err(e) => return let_go(&ctx, id, &e).await,
    };
    let adoptable = match services.as_slice() {
        [one] => adoptable(sw.manager, one).await,
        _ => None,
    };
    let Some((service, suffix)) = adoptable else {
        remove_all(&ctx, id).await;
        let detail = "infrastructure: the foreman stopped and its job service is gone or ended";
        return requeue_or_fail(&ctx, &task, detail, Reason::Lost, false).await;
    };
    info!(task_id = %id, %service, "adopting a running job service");
    let token = swarm::token(sw.key, id, &suffix);
    let gateway = match remote_task(&ctx, &task, &token) {
        Ok(remote) => {
            Gateway::adopt_remote(
                sw.hub,
                id,
                ctx.upstream.clone(),
                &task.spec.model,
                task.spec.budget(),
                (
                    task.input_tokens as u64,
                    task.output_tokens as u64,
                    task.cost_usd,
                ),
                ctx.desk_link(
                    id,
                    &task.spec,
                    inbox.waiting(),
                    ctx.task_engine(id, Some(&suffix)),
                ),
                remote,
            )
            .await
        }
        Err(e) => Err(e),
    };
    let gateway = match gateway {
        Ok(g) => g,
        Err(e) => {
            warn!(task_id = %id, error = %format!("{e:#}"), "gateway not restarted");
            return let_go(&ctx, id, &e).await;
        }
    };
    let started = if task.active_ms > 0 {
        now_ms() - task.active_ms
    } else {
        task.started_at.unwrap_or_else(now_ms)
    };
    // A verify attempt its foreman left midway: the servo is paused.
    let engine = ctx.task_engine(id, Some(&suffix));
    if let Err(e) = engine.recover_verify(id).await {
        warn!(task_id = %id, error = %format!("{e:#}"), "a verify attempt left midway was not undone");
    }
    let launch = swarm::LaunchObjects::of(id, &service, &suffix);
    watch_and_end(ctx, task, launch, gateway, started, inbox).await
}

/// The service's id and launch suffix, when its task has not ended.
async fn adoptable(manager: &bollard::Docker, service: &str) -> Option<(String, String)> {
    let inspected = manager.inspect_service(service, None).await.ok()?;
    let suffix = inspected
        .spec
        .and_then(|s| s.labels)
        .and_then(|l| l.get(LAUNCH_LABEL).cloned())?;
    match swarm::observe(manager, service).await.ok()?.phase {
        Phase::Waiting | Phase::Running => Some((service.to_string(), suffix)),
        Phase::Exited(_) | Phase::Lost(_) => None,
    }
}

/// Removes swarm objects of tasks that have ended (and that this loop is
/// not running): services, secrets, and containers and volumes on every
/// reachable node (a node that was Down keeps its own until it is back).
pub(super) async fn sweep_swarm(ctx: Arc<Ctx>, active: Handles) {
    let Some(sw) = handles(&ctx) else { return };
    sweep_parked(&ctx, &active).await;
    let Ok((engines, objects)) = swarm::leftovers(sw.manager, sw.manager_addr).await else {
        return;
    };
    let mut ended = Vec::new();
    for (task, o) in objects {
        if active.lock().unwrap().contains_key(&task) {
            continue;
        }
        let is_ended = ctx
            .db(move |s| s.get(&task.to_string()))
            .await
            .ok()
            .flatten()
            .is_some_and(|t| t.state.is_terminal());
        if is_ended {
            info!(task_id = %task, object = ?o, "removing a swarm leftover");
            ended.push((task, o));
        }
    }
    if !ended.is_empty() {
        swarm::remove_objects(sw.manager, &engines, &ended).await;
    }
}

/// Removes parked workspaces of tasks that have ended (a task normally
/// removes its own in `finish`; this covers one ended otherwise, or by a
/// foreman that stopped first).
async fn sweep_parked(ctx: &Ctx, active: &Handles) {
    for id in crate::inputs::parked_tasks(&ctx.cfg.state_dir()) {
        if active.lock().unwrap().contains_key(&id) {
            continue;
        }
        let ended = ctx
            .db(move |s| s.get(&id.to_string()))
            .await
            .ok()
            .flatten()
            .is_none_or(|t| t.state.is_terminal());
        if ended {
            info!(task_id = %id, "removing the parked workspace of an ended task");
            crate::inputs::remove_parked(&ctx.cfg.state_dir(), id).await;
        }
    }
}
