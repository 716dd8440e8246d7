//! API errors as JSON: `{"error": {"message", "kind"}}` with the status
//! that says what went wrong (400 bad input, 401 no token, 403 cross-site,
//! 404 unknown task, 409 wrong state, 500 Saheeli's own failure). A 500
//! carries a `request_id`, logged with the failure, so a user's report can
//! be matched to the foreman's log; a failure of Docker, SQLite, a thread
//! or the disk is Saheeli's, never blamed on the request.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::commands::WrongState;
use crate::store::{DbError, DeskError, StoreError};

/// One refused or failed request.
#[derive(Debug)]
pub(super) struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            message: message.into(),
        }
    }

    pub fn bad_input(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_input", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn wrong_state(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "wrong_state", message)
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this server needs its token: send `Authorization: Bearer <token>` or log in at /login",
        )
    }

    pub fn cross_site(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "cross_site", message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

/// The status of a store error.
fn store_status(e: &StoreError) -> (StatusCode, &'static str) {
    match e {
        StoreError::TaskNotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
        StoreError::Ambiguous { .. } | StoreError::BadOverride { .. } => {
            (StatusCode::BAD_REQUEST, "bad_input")
        }
        StoreError::BadTransition { .. }
        | StoreError::LeaseLost(_)
        | StoreError::NotEnded { .. }
        | StoreError::NotOverridable { .. }
        | StoreError::SameOutcome { .. }
        | StoreError::AskOpen { .. } => (StatusCode::CONFLICT, "wrong_state"),
        StoreError::GatewayCap(_) => (StatusCode::TOO_MANY_REQUESTS, "gateway_cap"),
        StoreError::Sqlite(_) | StoreError::Migration(_) => {
            (StatusCode::INTERNAL_SERVER_ERROR, "internal")
        }
    }
}

/// What the CLI would print as `error: …`, with the status its cause
/// means. A plain message (a prompt that does not validate) is bad input.
impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> ApiError {
        let message = format!("{e:#}");
        let (status, kind) = e
            .chain()
            .find_map(|cause| {
                if let Some(s) = cause.downcast_ref::<StoreError>() {
                    return Some(store_status(s));
                }
                if let Some(d) = cause.downcast_ref::<DbError>() {
                    return Some(match d {
                        DbError::Store(s) => store_status(s),
                        DbError::Panicked(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
                    });
                }
                if let Some(d) = cause.downcast_ref::<DeskError>() {
                    return Some(match d {
                        DeskError::Store(s) => store_status(s),
                        _ => (StatusCode::CONFLICT, "wrong_state"),
                    });
                }
                cause
                    .is::<WrongState>()
                    .then_some((StatusCode::CONFLICT, "wrong_state"))
            })
            .or_else(|| {
                e.chain()
                    .any(ours)
                    .then_some((StatusCode::INTERNAL_SERVER_ERROR, "internal"))
            })
            .unwrap_or((StatusCode::BAD_REQUEST, "bad_input"));
        ApiError::new(status, kind, message)
    }
}

/// A cause that is Saheeli's (or its host's) failure, not the request's:
/// the engine, the database, a thread, or the disk. A missing or invalid
/// file the request named stays the request's.
fn ours(cause: &(dyn std::error::Error + 'static)) -> bool {
    if let Some(io) = cause.downcast_ref::<std::io::Error>() {
        use std::io::ErrorKind::*;
        return !matches!(io.kind(), NotFound | InvalidInput | InvalidData);
    }
    cause.is::<bollard::errors::Error>()
        || cause.is::<rusqlite::Error>()
        || cause.is::<tokio::task::JoinError>()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = serde_json::json!({"message": self.message, "kind": self.kind});
        if self.status.is_server_error() {
            let request_id = uuid::Uuid::new_v4().simple().to_string();
            tracing::warn!(error = %self.message, %request_id, "an API request failed");
            error["request_id"] = request_id.into();
        }
        (self.status, Json(serde_json::json!({ "error": error }))).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_map_to_statuses() {
        let e: ApiError = anyhow::Error::from(StoreError::TaskNotFound("x".into())).into();
        assert_eq!((e.status, e.kind), (StatusCode::NOT_FOUND, "not_found"));
        let e: ApiError = anyhow::Error::from(WrongState("ended".into()))
            .context("cancelling")
            .into();
        assert_eq!(e.status, StatusCode::CONFLICT);
        assert!(e.message.contains("cancelling: ended"), "{}", e.message);
        let e: ApiError = anyhow::anyhow!("prompt.md:2: unknown field `modle`").into();
        assert_eq!((e.status, e.kind), (StatusCode::BAD_REQUEST, "bad_input"));
    }

    #[test]
    fn failures_of_the_host_are_ours_not_the_callers() {
        let disk = std::io::Error::new(std::io::ErrorKind::StorageFull, "no space left");
        let e: ApiError = anyhow::Error::from(disk)
            .context("saving the workspace")
            .into();
        assert_eq!(
            (e.status, e.kind),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal")
        );
        let db = rusqlite::Error::InvalidQuery;
        let e: ApiError = anyhow::Error::from(db).context("listing").into();
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
        let missing = std::io::Error::new(std::io::ErrorKind::NotFound, "no prompt.md");
        let e: ApiError = anyhow::Error::from(missing).into();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn docker_a_dead_thread_and_the_database_thread_are_ours() {
        let internal = (StatusCode::INTERNAL_SERVER_ERROR, "internal");
        let docker = bollard::errors::Error::DockerResponseServerError {
            status_code: 500,
            message: "the daemon failed".into(),
        };
        let e: ApiError = anyhow::Error::from(docker)
            .context("inspecting the container")
            .into();
        assert_eq!((e.status, e.kind), internal);
        assert!(e.message.contains("the daemon failed"), "{}", e.message);
        let joined = tokio::spawn(async { panic!("boom") }).await.unwrap_err();
        let e: ApiError = anyhow::Error::from(joined).into();
        assert_eq!((e.status, e.kind), internal);
        let joined = tokio::spawn(async { panic!("boom") }).await.unwrap_err();
        let e: ApiError = anyhow::Error::from(DbError::from(joined)).into();
        assert_eq!((e.status, e.kind), internal);
        // A store error carried by `Ctx::db`'s error keeps its own status.
        let e: ApiError =
            anyhow::Error::from(DbError::from(StoreError::TaskNotFound("x".into()))).into();
        assert_eq!((e.status, e.kind), (StatusCode::NOT_FOUND, "not_found"));
    }

    #[tokio::test]
    async fn a_500_carries_a_request_id_and_a_400_does_not() {
        async fn body(e: ApiError) -> serde_json::Value {
            let bytes = axum::body::to_bytes(e.into_response().into_body(), 1 << 16)
                .await
                .unwrap();
            serde_json::from_slice(&bytes).unwrap()
        }
        let b = body(ApiError::internal("the engine did not answer")).await;
        let id = b["error"]["request_id"].as_str().unwrap();
        assert_eq!(id.len(), 32, "{b}");
        assert_ne!(
            id,
            body(ApiError::internal("again")).await["error"]["request_id"]
        );
        let b = body(ApiError::bad_input("no")).await;
        assert!(b["error"].get("request_id").is_none(), "{b}");
    }
}
