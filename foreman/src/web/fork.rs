//! `POST /api/tasks/{id}/fork` (issue 51): `task fork` over HTTP. Body:
//! `{"count": K, "at_step": N, "model": M, "note": TEXT}`, every field
//! optional (one fork at the task's last step, with its model).

use axum::Json;
use axum::body::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::ApiError;
use super::server::Shared;
use crate::ops;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ForkBody {
    count: Option<u32>,
    at_step: Option<u64>,
    model: Option<String>,
    note: Option<String>,
}

/// `POST /api/tasks/{id}/snapshot`: `task snapshot` over HTTP; answers
/// `{"id", "every_step", "kept": [steps]}`.
pub(super) async fn snapshot(web: Shared, id: String) -> Result<Json<Value>, ApiError> {
    let cfg = web.cfg.clone();
    let asked = tokio::task::spawn_blocking(move || ops::request_snapshot(&cfg, &id))
        .await
        .map_err(|e| ApiError::from(ops::Error::panicked("snapshot", e)))??;
    let (id, every) = match asked {
        ops::Asked::Next(id) => (id, false),
        ops::Asked::Every(id) => (id, true),
    };
    let kept = crate::collect::snapshot::steps(&web.cfg.state_dir(), id);
    Ok(Json(
        json!({"id": id.to_string(), "every_step": every, "kept": kept}),
    ))
}

/// Answers `{"ids": [...], "forked_from": ID, "tasks": [views]}`.
pub(super) async fn fork(web: Shared, id: String, body: Bytes) -> Result<Json<Value>, ApiError> {
    let b: ForkBody = if body.iter().all(u8::is_ascii_whitespace) {
        ForkBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_input(format!(
                "the body must be JSON like {{\"count\": 2, \"model\": \"…\", \"note\": \"…\"}}: {e}"
            ))
        })?
    };
    let fork = ops::Fork {
        at_step: b.at_step,
        count: b.count.unwrap_or(1),
        model: b.model,
        note: b.note,
        samples_of: None,
    };
    let ids = ops::fork_task(&web.cfg, &id, fork).await?;
    let wanted: Vec<String> = ids.iter().map(ToString::to_string).collect();
    let views = {
        let wanted = wanted.clone();
        web.db(move |s| {
            wanted
                .iter()
                .map(|i| ops::task_view(s, i, ops::EventPage::newest()))
                .collect::<Result<Vec<_>, _>>()
        })
        .await?
    };
    let parent = views
        .first()
        .and_then(|v| v.forked_from.as_ref())
        .and_then(|f| f.get("task").cloned())
        .unwrap_or(Value::Null);
    Ok(Json(json!({
        "ids": wanted,
        "forked_from": parent,
        "message": format!("{} fork(s) queued", ids.len()),
        "tasks": views,
    })))
}
