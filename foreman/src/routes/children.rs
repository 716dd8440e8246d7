//! `spawn_task` and `wait_tasks` on a task's gateway socket (issue 30).
//!
//! The agent's shell can reach these routes too, so they decide nothing
//! on the servo's word: a task not granted `delegate:` is refused (403,
//! and a `spawn_refused` event on the task), the fan-out, depth and tree
//! limits and the budget carved for a child are the store's one
//! transaction, and a wait returns only this task's children. A wait
//! holds no concurrency slot and does not count against the timeout (the
//! `waiting` flag a wait for a human sets), so children can run while
//! their parent waits even at `concurrency: 1`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use saheeli_protocol::TaskId;
use saheeli_protocol::delegate::{ChildOutcome, MAX_MESSAGE, MAX_PATCH, Spawn, Wait, Waited};
use tracing::{info, warn};

use super::ctx::{Ctx, On};
use crate::config::Config;
use crate::llm::task::error_response;
use crate::llm::task::json_response;
use crate::spec::TaskSpec;
use crate::store::{ChildRow, ParentBudget, SpawnAsk, Spawned, WaitState};
use axum::Router;
use axum::routing::post;

/// A spawned child's `workspace` names no directory: it is this, then
/// its parent's id (its files were packed at spawn).
pub(crate) const SPAWNED_BY: &str = "spawned-by-";

/// How often a wait looks at its children.
const POLL: Duration = Duration::from_millis(100);

/// What a task granted `delegate:` needs to spawn children.
pub(crate) struct DelegateLink {
    pub cfg: Config,
    /// The parent's own spec: where its templates are, its model.
    pub spec: TaskSpec,
    pub priority: i64,
}

fn refused(gw: &Ctx, status: StatusCode, kind: &str, why: &str) -> Response {
    error_response(gw, status, kind, why)
}

/// The request's body, or the refusal (a task without `delegate:` is
/// recorded as refused).
async fn body_of<T: serde::de::DeserializeOwned>(
    gw: &On<Option<Arc<DelegateLink>>>,
    body: &[u8],
    what: &str,
) -> Result<(T, Arc<DelegateLink>), Box<Response>> {
    let Some(link) = gw.link.clone() else {
        let why =
            "this task was not granted `delegate:`; it cannot spawn or wait for tasks".to_string();
        let id = gw.task_id;
        let note = why.clone();
        let _ = gw.db(move |s, _| s.spawn_refused(id, &note)).await;
        return Err(Box::new(refused(
            gw,
            StatusCode::FORBIDDEN,
            "spawn_refused",
            &why,
        )));
    };
    let req: T = serde_json::from_slice(body).map_err(|e| {
        Box::new(refused(
            gw,
            StatusCode::BAD_REQUEST,
            "bad_request",
            &format!("not a {what}: {e}"),
        ))
    })?;
    Ok((req, link))
}

fn call_id_ok(id: &str) -> bool {
    !id.is_empty() && id.len() <= 256
}

pub(crate) async fn spawn(
    State(gw): State<Arc<On<Option<Arc<DelegateLink>>>>>,
    body: axum::body::Bytes,
) -> Response {
    let (req, link): (Spawn, _) = match body_of(&gw, &body, "spawn").await {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    if !call_id_ok(&req.call_id) {
        return refused(
            &gw,
            StatusCode::BAD_REQUEST,
            "bad_request",
            "call_id must be 1 to 256 bytes",
        );
    }
    let parent = gw.task_id;
    let child = TaskId::new();
    // The spec and the workspace first (nothing queued yet): a template
    // that does not parse is the model's error to hear.
    let made = {
        let (link, req) = (link.clone(), req.clone());
        tokio::task::spawn_blocking(move || {
            let spec = super::child_spec::child_spec(&link.cfg, &link.spec, &req)?;
            let tar = super::child_spec::child_workspace(&link.cfg, child, &req.workspace)?;
            anyhow::Ok((spec, tar))
        })
        .await
    };
    let (mut spec, tar) = match made {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => {
            let why = format!("{e:#}");
            let note = why.clone();
            let _ = gw.db(move |s, _| s.spawn_refused(parent, &note)).await;
            return refused(&gw, StatusCode::BAD_REQUEST, "spawn_refused", &why);
        }
        Err(e) => {
            return refused(
                &gw,
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                &e.to_string(),
            );
        }
    };
    // The child's workspace is the files sent, never a host directory (a
    // template's `workspace:`, say): a retry would copy that in (N19).
    spec.workspace = tar
        .is_some()
        .then(|| format!("{SPAWNED_BY}{parent}").into());
    let ask = SpawnAsk {
        parent,
        call_id: Some(req.call_id.clone()),
        enforce: true,
        budget: ParentBudget {
            max_tokens: gw.budget.max_tokens,
            max_cost: gw.budget.max_cost,
            used_tokens: gw.meter.tokens(),
            used_cost: gw.meter.cost(),
        },
        want_tokens: req.max_tokens,
        want_cost: req.max_cost,
    };
    let priority = link.priority;
    let on_subtask = link.spec.break_on_subtask;
    let r = gw
        .db(move |s, lease| {
            let spawned = s.spawn_child(child, spec, priority, &ask)?;
            // `breakpoint: on_subtask`: the parent pauses before its next
            // call, the child queued.
            if let Spawned::New { id, .. } = &spawned
                && s.subtask_breakpoint(parent, on_subtask)?
            {
                s.breakpoint(
                    parent,
                    lease,
                    &format!("breakpoint on_subtask: spawned child {id}"),
                )?;
            }
            Ok((spawned, s.carved(parent)?))
        })
        .await;
    let keep_tar = matches!(r, Ok((Spawned::New { .. }, _)));
    if let (false, Some(tar)) = (keep_tar, &tar) {
        let _ = std::fs::remove_file(tar);
    }
    match r {
        Ok((spawned, carved)) => {
            gw.meter.set_carved(carved.tokens, carved.cost);
            match spawned {
                Spawned::New {
                    id,
                    max_tokens,
                    max_cost,
                } => {
                    info!(task_id = %parent, child = %id, "child spawned");
                    json_response(
                        &gw,
                        StatusCode::OK,
                        &saheeli_protocol::delegate::Spawned {
                            id,
                            max_tokens,
                            max_cost,
                        },
                    )
                }
                Spawned::Again(id) => json_response(
                    &gw,
                    StatusCode::OK,
                    &saheeli_protocol::delegate::Spawned {
                        id,
                        max_tokens: None,
                        max_cost: None,
                    },
                ),
                Spawned::Refused(why) => refused(&gw, StatusCode::FORBIDDEN, "spawn_refused", &why),
            }
        }
        Err(resp) => resp,
    }
}

pub(crate) async fn wait(
    State(gw): State<Arc<On<Option<Arc<DelegateLink>>>>>,
    body: axum::body::Bytes,
) -> Response {
    let (req, link): (Wait, _) = match body_of(&gw, &body, "wait").await {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    if !call_id_ok(&req.call_id) {
        return refused(
            &gw,
            StatusCode::BAD_REQUEST,
            "bad_request",
            "call_id must be 1 to 256 bytes",
        );
    }
    let patience = Duration::from_millis(req.wait_ms.min(saheeli_protocol::human::MAX_WAIT_MS));
    let until = tokio::time::Instant::now() + patience;
    let parent = gw.task_id;
    // Waiting for children is not holding a slot, nor working time.
    gw.waiting.children(true);
    let answer = loop {
        let (call, ids) = (req.call_id.clone(), req.ids.clone());
        let r = gw
            .db(move |s, _| s.wait_children(parent, &call, ids.as_deref()))
            .await;
        match r {
            Ok(WaitState::Done(rows)) => {
                let results = link.cfg.results_dir();
                let children = rows
                    .iter()
                    .map(|c| outcome(&results, c, &req.call_id))
                    .collect();
                if let Ok(c) = gw.db(move |s, _| s.carved(parent)).await {
                    gw.meter.set_carved(c.tokens, c.cost);
                }
                break json_response(
                    &gw,
                    StatusCode::OK,
                    &Waited {
                        done: true,
                        children,
                        running: Vec::new(),
                    },
                );
            }
            Ok(WaitState::Running(running)) if tokio::time::Instant::now() >= until => {
                break json_response(
                    &gw,
                    StatusCode::OK,
                    &Waited {
                        done: false,
                        children: Vec::new(),
                        running,
                    },
                );
            }
            Ok(WaitState::Running(_)) => tokio::time::sleep(POLL).await,
            Ok(WaitState::NotChildren(ids)) => {
                let ids: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
                break refused(
                    &gw,
                    StatusCode::BAD_REQUEST,
                    "not_children",
                    &format!("{} are not this task's children", ids.join(", ")),
                );
            }
            Err(resp) => break resp,
        }
    };
    gw.waiting.children(false);
    answer
}

/// One child's outcome for its parent's model: its message and patch read
/// from its collected results (capped, links not followed), unless an
/// earlier wait received it.
fn outcome(results: &std::path::Path, c: &ChildRow, call_id: &str) -> ChildOutcome {
    let last = &c.last;
    let already = c.delivered_call.as_deref() != Some(call_id);
    let dir = last
        .results_path
        .as_ref()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| results.join(last.id.to_string()));
    let (message, patch) = if already {
        (None, None)
    } else {
        let message = match crate::collect::read_completion(&dir, last.id) {
            Ok(c) => c.map(|c| cut(&c.message, MAX_MESSAGE)),
            Err(e) => {
                warn!(task_id = %last.id, error = %e, "child's complete.json not read");
                None
            }
        };
        (message, read_patch(&dir))
    };
    ChildOutcome {
        id: c.id,
        title: last.title.clone(),
        state: last.state.as_str().to_string(),
        reason: last.reason.clone(),
        message,
        patch,
        already_received: already,
    }
}

fn read_patch(dir: &std::path::Path) -> Option<String> {
    use std::io::Read;
    let path = dir.join(".saheeli").join("changes.patch");
    let file = crate::collect::open_regular(&path).ok()??;
    let mut bytes = Vec::new();
    file.take(MAX_PATCH as u64 + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Some(cut(&text, MAX_PATCH))
}

fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[… cut at {} KiB]", &text[..end], max / 1024)
}

/// `spawn_task` and `wait_tasks`; a task not granted `delegate:` is
/// refused at each.
pub(crate) fn routes(ctx: &Arc<Ctx>, delegate: Option<Arc<DelegateLink>>) -> Router {
    use saheeli_protocol::delegate::routes as r;
    Router::new()
        .route(r::SPAWN, post(spawn))
        .route(r::WAIT, post(wait))
        .with_state(On::new(ctx, delegate))
}
