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
        tracing::error!("store: {e}");
        Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("the authority's store failed: {e}"),
        )
    }
}

pub(crate) type Answer<T> = Result<Json<T>, Failure>;
