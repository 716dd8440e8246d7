//! `POST /saheeli/v1/snapshot` (issue 51): the servo is between steps
//! (the last step's tools have run, its session is saved) and waits while
//! the foreman keeps the workspace as it is, when the task's `snapshots:`
//! says so: at every step (`every`), or at the next one after `saheeli
//! task snapshot ID` (`on_request`). The copy is `collect::snapshot`'s,
//! under the foreman's state; the container never sees it.
//!
//! The step is the servo's word: in a separated container the socket is
//! its uid's alone. A snapshot of a step already kept is taken again
//! (the servo's own point comes last). Each snapshot copies at most the
//! workspace cap, and a task's snapshots at most `max_results_size`
//! together; past that, no more are taken and the answer says why.

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;
use saheeli_protocol::front_matter::Snapshots;
use saheeli_protocol::snapshot::{SnapshotPoint, SnapshotTaken, routes as r};
use tracing::{info, warn};

use super::ctx::{Ctx, On};
use crate::backend::TaskEngine;
use crate::collect::snapshot::{self, Taken};
use crate::llm::task::json_response;

/// What the route takes from the task.
pub(crate) struct Link {
    mode: Snapshots,
    engine: TaskEngine,
    state_dir: PathBuf,
    /// The most one snapshot copies.
    max_bytes: u64,
    /// The most all of the task's snapshots copy.
    max_total: u64,
    /// The workspace's host directory, found at the first point.
    dir: tokio::sync::OnceCell<Option<PathBuf>>,
    /// The last snapshot (what the next links from) and the bytes copied
    /// so far; one snapshot at a time.
    last: tokio::sync::Mutex<(Option<Taken>, u64)>,
}

impl Link {
    pub(crate) fn of(
        spec: &crate::spec::TaskSpec,
        cfg: &crate::config::Config,
        engine: TaskEngine,
    ) -> Link {
        Link {
            mode: spec.snapshots,
            engine,
            state_dir: cfg.state_dir(),
            max_bytes: spec
                .disk
                .unwrap_or(cfg.file.task.disk.0)
                .max(cfg.file.max_workspace_size.0),
            max_total: cfg.file.max_results_size.0,
            dir: tokio::sync::OnceCell::new(),
            last: tokio::sync::Mutex::new((None, 0)),
        }
    }
}

fn answer(gw: &On<Link>, taken: bool, why: Option<String>) -> Response {
    json_response(gw, StatusCode::OK, &SnapshotTaken { taken, why })
}

async fn point(State(gw): State<Arc<On<Link>>>, body: axum::body::Bytes) -> Response {
    let Ok(point) = serde_json::from_slice::<SnapshotPoint>(&body) else {
        return crate::llm::task::error_response(
            &gw,
            StatusCode::BAD_REQUEST,
            saheeli_protocol::chat::gateway_error::BAD_REQUEST,
            "not a snapshot point",
        );
    };
    let (id, link) = (gw.task_id, &gw.link);
    let due = match link.mode {
        Snapshots::Every => true,
        Snapshots::OnRequest => snapshot::take_request(&link.state_dir, id),
        Snapshots::Off => false,
    };
    if !due {
        return answer(&gw, false, None);
    }
    let dir = link
        .dir
        .get_or_init(|| link.engine.workspace_dir(id))
        .await
        .clone();
    let Some(dir) = dir else {
        return answer(
            &gw,
            false,
            Some("the task's workspace is not on this host".into()),
        );
    };
    let mut last = link.last.lock().await;
    if last.1 >= link.max_total {
        let why = format!(
            "the task's snapshots reached their cap ({} bytes, `max_results_size`)",
            link.max_total
        );
        return answer(&gw, false, Some(why));
    }
    let prev = last.0.take();
    let (state_dir, max) = (link.state_dir.clone(), link.max_bytes);
    let step = point.step;
    let made = tokio::task::spawn_blocking(move || {
        let t = snapshot::take(&dir, &state_dir, id, step, prev.as_ref(), max);
        (t, prev)
    })
    .await;
    match made {
        Ok((Ok(t), _)) => {
            info!(task_id = %id, step, files = t.files, linked = t.linked, copied = t.copied,
                  took_ms = t.took.as_millis() as u64, "snapshot kept");
            last.1 += t.copied;
            last.0 = Some(t);
            answer(&gw, true, None)
        }
        Ok((Err(e), prev)) => {
            warn!(task_id = %id, step, error = %format!("{e:#}"), "no snapshot at this step");
            last.0 = prev;
            answer(&gw, false, Some(format!("{e:#}")))
        }
        Err(_) => answer(&gw, false, Some("the snapshot thread panicked".into())),
    }
}

/// The snapshot route.
pub(crate) fn routes(ctx: &Arc<Ctx>, link: Link) -> Router {
    Router::new()
        .route(r::SNAPSHOT, post(point))
        .with_state(On::new(ctx, link))
}
