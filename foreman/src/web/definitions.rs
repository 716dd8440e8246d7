//! The definitions read from Git (issue 52): `GET /api/definitions` (what
//! `saheeli definitions status --json` prints) and `POST
//! /api/definitions/refresh` (look at the repository now, behind the
//! same token and cross-site checks as every other change).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::error::ApiError;
use super::server::Shared;

/// `GET /api/definitions`: the commit in use, what it changed, the last
/// rejected commit and why; `serving` says whether this foreman follows
/// a repository.
pub(super) async fn status(State(web): State<Shared>) -> Result<Json<Value>, ApiError> {
    let st = web
        .db(|s| crate::definitions::status(s).map_err(|e| ApiError::internal(format!("{e:#}"))))
        .await?;
    let mut v = serde_json::to_value(st).expect("status serializes");
    v["serving"] = json!(web.definitions.as_ref().map(|d| {
        let src = d.source();
        json!({"repo": src.repo, "ref": src.reference, "poll_s": src.poll.as_secs()})
    }));
    Ok(Json(v))
}

/// `POST /api/definitions/refresh`: one sync now; answers what it found
/// (`applied`, `rejected` with the reason, or `unchanged`) and the status.
pub(super) async fn refresh(State(web): State<Shared>) -> Result<Json<Value>, ApiError> {
    let Some(syncer) = web.definitions.clone() else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "wrong_state",
            "this foreman follows no definitions repository: start it with `saheeli serve \
             --definitions REPO` (or set `definitions:` in config.yaml)",
        ));
    };
    let synced = syncer.sync().await;
    crate::definitions::log(&synced);
    let synced = synced.map_err(|e| {
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            "definitions_unreadable",
            format!("{e:#}; the set in use keeps serving"),
        )
    })?;
    let Json(status) = status(State(web)).await?;
    Ok(Json(json!({ "synced": synced, "status": status })))
}
