//! An error answer of the API ([`Failure`]: an HTTP status and an [`ApiError`] body)
//! and the handlers' result type `Answer`.

use crate::api::ApiError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use flotilla_store::StoreError;

/// An error answer.
#[derive(Debug)]
pub struct Failure(pub(crate) StatusCode, pub(crate) ApiError);

impl Failure {
    pub(crate) fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Failure {
        Failure(
            status,
            ApiError {
                code: code.into(),
                message: message.into(),
                current: None,
            },
        )
    }

    /// The error's message.
    pub(crate) fn message(&self) -> &str {
        &self.1.message
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (self.0, Json(self.1)).into_response()
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Failure {
        if let StoreError::StaleVersion { .. } = e {
            // Another writer (perhaps another authority) came first: the caller
            // reads again and decides.
            return conflict(e.to_string());
        }
        tracing::error!("store: {e}");
        Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("the authority's store failed: {e}"),
        )
    }
}

pub(crate) type Answer<T> = Result<Json<T>, Failure>;

/// 400 `invalid`: a request the authority will not take, saying why.
pub(crate) fn invalid(message: impl Into<String>) -> Failure {
    Failure::new(StatusCode::BAD_REQUEST, "invalid", message)
}

/// 404 `not-found`.
pub(crate) fn not_found(message: impl Into<String>) -> Failure {
    Failure::new(StatusCode::NOT_FOUND, "not-found", message)
}

/// 409 `conflict`: the request conflicts with what the authority holds.
pub(crate) fn conflict(message: impl Into<String>) -> Failure {
    Failure::new(StatusCode::CONFLICT, "conflict", message)
}

/// 500 `internal`.
pub(crate) fn internal(e: impl std::fmt::Display) -> Failure {
    Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
}
