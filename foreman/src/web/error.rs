//! API errors as JSON: `{"error": {"message", "kind"}}` with the status
//! that says what went wrong (400 bad input, 401 no token, 403 cross-site,
//! 404 unknown task, 409 wrong state, 500 Saheeli's own failure).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::commands::WrongState;
use crate::store::{DeskError, StoreError};

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
            .unwrap_or((StatusCode::BAD_REQUEST, "bad_input"));
        ApiError::new(status, kind, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(error = %self.message, "an API request failed");
        }
        let body = serde_json::json!({
            "error": {"message": self.message, "kind": self.kind}
        });
        (self.status, Json(body)).into_response()
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
}
