//! API errors as JSON: `{"error": {"message", "kind"}}` with the status
//! that says what went wrong (400 bad input, 401 no token, 403 cross-site,
//! 404 unknown task, 409 wrong state, 500 Saheeli's own failure). A 500
//! carries a `request_id`, logged with the failure, so a user's report can
//! be matched to the foreman's log; a failure of Docker, SQLite, a thread
//! or the disk is Saheeli's, never blamed on the request.
//!
//! Every cause arrives typed (`StoreError`, `DbError`, `DeskError`,
//! `ops::Error`, sorted where it arose); nothing here reads an
//! error's type back from a chain.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::ops::Error as CommandError;
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

/// A cause and its causes, as the CLI prints them (`a: b: c`).
fn told(e: &(dyn std::error::Error + 'static)) -> String {
    let mut message = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        message.push_str(": ");
        message.push_str(&c.to_string());
        cause = c.source();
    }
    message
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        let (status, kind) = store_status(&e);
        ApiError::new(status, kind, told(&e))
    }
}

/// `Web::db`'s: the store's own status, or a dead thread (ours).
impl From<DbError> for ApiError {
    fn from(e: DbError) -> ApiError {
        match e {
            DbError::Store(s) => s.into(),
            panicked @ DbError::Panicked(_) => ApiError::internal(told(&panicked)),
        }
    }
}

/// A person's act the task cannot take now is a conflict with its state.
impl From<DeskError> for ApiError {
    fn from(e: DeskError) -> ApiError {
        match e {
            DeskError::Store(s) => s.into(),
            other => ApiError::wrong_state(told(&other)),
        }
    }
}

/// What the CLI would print as `error: …`, with the status its cause
/// means (sorted where it arose: see `ops::Error`).
impl From<CommandError> for ApiError {
    fn from(e: CommandError) -> ApiError {
        match e {
            CommandError::Store(s) => s.into(),
            CommandError::Desk(d) => d.into(),
            CommandError::WrongState(m) => ApiError::wrong_state(m),
            CommandError::Refused(e) => ApiError::bad_input(format!("{e:#}")),
            CommandError::Internal(e) => ApiError::internal(format!("{e:#}")),
        }
    }
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
    use std::sync::{Arc, Mutex};

    use saheeli_protocol::TaskId;

    use super::*;
    use crate::backend::EngineError;
    use crate::state::TaskState;
    use crate::store::Store;

    const INTERNAL: (StatusCode, &str) = (StatusCode::INTERNAL_SERVER_ERROR, "internal");

    fn of(e: impl Into<ApiError>) -> (StatusCode, &'static str) {
        let e = e.into();
        (e.status, e.kind)
    }

    #[test]
    fn causes_map_to_statuses() {
        let id = TaskId::new();
        let cases: Vec<(StoreError, u16)> = vec![
            (StoreError::TaskNotFound("x".into()), 404),
            (
                StoreError::BadOverride {
                    id,
                    to: TaskState::Failed,
                },
                400,
            ),
            (StoreError::LeaseLost(id), 409),
            (
                StoreError::NotEnded {
                    id,
                    state: TaskState::Running,
                },
                409,
            ),
            (StoreError::GatewayCap(id), 429),
            (StoreError::Sqlite(rusqlite::Error::InvalidQuery), 500),
        ];
        for (e, status) in cases {
            let told = e.to_string();
            let e = ApiError::from(CommandError::Store(e));
            assert_eq!(e.status.as_u16(), status, "{told}");
            assert!(e.message.starts_with(&told), "{}", e.message);
        }
        let e = ApiError::from(CommandError::WrongState("task `x` already ended".into()));
        assert_eq!((e.status, e.kind), (StatusCode::CONFLICT, "wrong_state"));
        assert_eq!(e.message, "task `x` already ended");
        let ended = DeskError::Ended {
            id,
            state: TaskState::Complete,
        };
        assert_eq!(of(ended), (StatusCode::CONFLICT, "wrong_state"));
        let desk = DeskError::Store(StoreError::TaskNotFound("x".into()));
        assert_eq!(
            of(CommandError::Desk(desk)),
            (StatusCode::NOT_FOUND, "not_found")
        );
        let e = CommandError::Refused(anyhow::anyhow!("prompt.md:2: unknown field `modle`"));
        assert_eq!(of(e), (StatusCode::BAD_REQUEST, "bad_input"));
    }

    #[test]
    fn failures_of_the_host_are_ours_not_the_callers() {
        let disk = std::io::Error::new(std::io::ErrorKind::StorageFull, "no space left");
        let packing = crate::inputs::PackError::Io {
            dir: "ws".into(),
            source: disk,
        };
        let e = ApiError::from(CommandError::from(packing));
        assert_eq!((e.status, e.kind), INTERNAL);
        assert!(e.message.contains("no space left"), "{}", e.message);
        let db = StoreError::Sqlite(rusqlite::Error::InvalidQuery);
        assert_eq!(of(DbError::from(db)), INTERNAL);
        // A file the prompt names that is not there is the request's.
        let dir = tempfile::tempdir().unwrap();
        let cfg = crate::config::Config {
            source: None,
            base_dir: dir.path().to_path_buf(),
            file: Default::default(),
            set_keys: Default::default(),
        };
        let text = "---\nmodel: replay:missing.json\n---\nDo X.\n";
        let prompt = dir.path().join("prompt.md");
        let args = crate::ops::Submit::default();
        let e = ApiError::from(crate::ops::spec_for_text(&cfg, &prompt, text, &args).unwrap_err());
        assert_eq!((e.status, e.kind), (StatusCode::BAD_REQUEST, "bad_input"));
        assert!(e.message.contains("missing.json"), "{}", e.message);
    }

    #[tokio::test]
    async fn docker_a_dead_thread_and_the_database_thread_are_ours() {
        let docker = bollard::errors::Error::DockerResponseServerError {
            status_code: 500,
            message: "the daemon failed".into(),
        };
        let docker = anyhow::Error::from(docker).context("inspecting the image");
        let e = ApiError::from(CommandError::from(EngineError::of(docker)));
        assert_eq!((e.status, e.kind), INTERNAL);
        assert!(e.message.contains("the daemon failed"), "{}", e.message);
        let joined = tokio::spawn(async { panic!("boom") }).await.unwrap_err();
        assert_eq!(of(CommandError::panicked("packing", joined)), INTERNAL);
        let joined = tokio::spawn(async { panic!("boom") }).await.unwrap_err();
        assert_eq!(of(DbError::from(joined)), INTERNAL);
        // A store error carried by `Ctx::db`'s error keeps its own status.
        let e = DbError::from(StoreError::TaskNotFound("x".into()));
        assert_eq!(of(e), (StatusCode::NOT_FOUND, "not_found"));
        // A missing image an `agent:` names is the prompt's.
        let missing = anyhow::Error::from(crate::backend::docker::ImageMissing("x".into()));
        let e = CommandError::from(EngineError::of(missing));
        assert_eq!(of(e), (StatusCode::BAD_REQUEST, "bad_input"));
    }

    #[tokio::test]
    async fn a_panicked_database_thread_is_a_500() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Mutex::new(Store::open(&dir.path().join("db")).unwrap()));
        let e = super::super::server::on_db_thread(store.clone(), |_| -> Result<(), StoreError> {
            panic!("the closure failed")
        })
        .await
        .unwrap_err();
        assert_eq!((e.status, e.kind), INTERNAL);
        assert!(
            e.message.contains("database thread panicked"),
            "{}",
            e.message
        );
        // The poisoned lock is taken over: the next operation runs.
        let found = super::super::server::on_db_thread(store, |s| s.require("nope"))
            .await
            .unwrap_err();
        assert_eq!(
            (found.status, found.kind),
            (StatusCode::NOT_FOUND, "not_found")
        );
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
