//! `PUT` and `GET /v1/blobs/{sha256}`, and the streaming both share with
//! `GET /v1/outputs/{id}`.

use super::range::{wanted, Wanted};
use crate::api::ApiError;
use crate::failure::{invalid, not_found, Answer, Failure};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use flotilla_exec::this_process::now_ms;
use flotilla_store::authority::{AuthorityStore, Principal};
use flotilla_store::blobs::{is_sha256_hex, BlobError, BlobReader};
use futures_util::StreamExt;
use std::sync::Arc;

/// The largest blob `PUT /v1/blobs/{sha256}` takes (64 GiB); streamed, so the
/// limit is the disk's, not memory's.
pub const BLOB_LIMIT: u64 = 64 << 30;

fn blob_failure(e: BlobError) -> Failure {
    match e {
        BlobError::NotSha256(_) | BlobError::DigestMismatch { .. } => invalid(e.to_string()),
        other => {
            tracing::error!("blob store: {other}");
            Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "blob-store",
                other.to_string(),
            )
        }
    }
}

/// Stores `bytes` (already in memory, e.g. a session's output) as the blob
/// `sha256` and records it.
pub(crate) async fn put_bytes<S: AuthorityStore>(
    state: &AppState<S>,
    sha256: String,
    bytes: &[u8],
) -> Result<bool, Failure> {
    let mut w = state
        .blobs
        .store
        .writer(&sha256)
        .await
        .map_err(blob_failure)?;
    w.write(bytes).await.map_err(blob_failure)?;
    let size = w.commit().await.map_err(blob_failure)?;
    Ok(state.store.put_blob(sha256, size, now_ms()).await?)
}

/// `PUT /v1/blobs/{sha256}` (operator): store an artifact; its bytes must hash to
/// the path's SHA-256 (64 lowercase hex digits). Streamed to a temporary file and
/// published only when the digest matched; a blob already stored is replaced (how
/// a corrupt one is repaired).
#[utoipa::path(put, path = "/v1/blobs/{sha256}", params(("sha256" = String, Path, description = "the artifact's SHA-256, 64 hex digits")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 200, body = Object, description = "`{\"created\": bool}`"), (status = 400, body = ApiError), (status = 403, body = ApiError), (status = 413, body = ApiError)))]
pub async fn put_blob<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(sha256): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Answer<serde_json::Value> {
    state.operator(&headers).await?;
    if !is_sha256_hex(&sha256) {
        return Err(invalid(format!(
            "`{sha256}` is not a SHA-256 (64 lowercase hex digits)"
        )));
    }
    let mut w = state
        .blobs
        .store
        .writer(&sha256)
        .await
        .map_err(blob_failure)?;
    let mut frames = body.into_data_stream();
    while let Some(frame) = frames.next().await {
        let bytes = frame.map_err(|e| invalid(format!("reading the upload: {e}")))?;
        if w.written() + bytes.len() as u64 > BLOB_LIMIT {
            return Err(Failure::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too-large",
                format!("a blob is at most {BLOB_LIMIT} bytes"),
            ));
        }
        w.write(&bytes).await.map_err(blob_failure)?;
    }
    let size = w.commit().await.map_err(blob_failure)?;
    let created = state.store.put_blob(sha256, size, now_ms()).await?;
    Ok(Json(serde_json::json!({ "created": created })))
}

/// `GET /v1/blobs/{sha256}` (an operator or any agent): an artifact's bytes, whole
/// or one range (`Range: bytes=N-`, `N-M`, `-S`: 206 with `Content-Range`; 416
/// when nothing of it exists). A blob whose bytes no longer match its digest is
/// never served whole: the transfer is cut before its last bytes and the corrupt
/// copy set aside (500 on later requests until a `PUT` of the right bytes).
#[utoipa::path(get, path = "/v1/blobs/{sha256}", params(("sha256" = String, Path, description = "the artifact's SHA-256")),
    responses((status = 200, body = Vec<u8>, content_type = "application/octet-stream"), (status = 206, body = Vec<u8>, content_type = "application/octet-stream"), (status = 404, body = ApiError), (status = 416, body = ApiError), (status = 500, body = ApiError)))]
pub async fn get_blob<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(sha256): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    // Operators and agents (release artifacts); never a session's runtime or an
    // alert sender: the blob store also keeps sessions' whole outputs.
    match state.caller(&headers).await? {
        Principal::Operator { .. } | Principal::Agent { .. } => {}
        _ => {
            return Err(Failure::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "blobs are read by operators and agents",
            ))
        }
    }
    serve(&state, &sha256, &headers, "blob").await
}

/// The blob `sha256` as a streamed answer to a `GET` with `headers` (its
/// `Range`); `what` names it in a 404 (`blob`, `output`).
pub(crate) async fn serve<S: AuthorityStore>(
    state: &AppState<S>,
    sha256: &str,
    headers: &HeaderMap,
    what: &str,
) -> Result<Response, Failure> {
    if !is_sha256_hex(sha256) || !state.store.has_blob(sha256.to_string()).await? {
        return Err(not_found(format!("no {what} {sha256}")));
    }
    let Some(mut reader) = state.blobs.store.open(sha256).await.map_err(blob_failure)? else {
        tracing::error!(
            "blob {sha256} is recorded but its file is missing from {} (or was set aside as corrupt)",
            state.blobs.settings.dir.display()
        );
        return Err(Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "blob-missing",
            format!("{what} {sha256} is recorded but its bytes are missing or were found corrupt: upload them again (PUT /v1/blobs/{sha256})"),
        ));
    };
    let size = reader.size();
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let (status, length, content_range) = match wanted(range, size) {
        Wanted::Whole => (StatusCode::OK, size, None),
        Wanted::Part { start, end } => {
            reader.restrict(start, end);
            (
                StatusCode::PARTIAL_CONTENT,
                end - start,
                Some(format!("bytes {start}-{}/{size}", end - 1)),
            )
        }
        Wanted::Unsatisfiable => {
            let mut r = Failure::new(
                StatusCode::RANGE_NOT_SATISFIABLE,
                "range-not-satisfiable",
                format!(
                    "{what} {sha256} has {size} bytes; the range `{}` asks for none of them",
                    range.unwrap_or_default()
                ),
            )
            .into_response();
            r.headers_mut().insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes */{size}")).expect("ascii"),
            );
            return Ok(r);
        }
    };
    let mut r = Response::new(Body::from_stream(pieces(reader, sha256.to_string())));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(
        header::ETAG,
        HeaderValue::from_str(&format!("\"{sha256}\"")).expect("hex"),
    );
    if let Some(cr) = content_range {
        h.insert(
            header::CONTENT_RANGE,
            HeaderValue::from_str(&cr).expect("ascii"),
        );
    }
    Ok(r)
}

/// The reader's pieces as a body stream; a corrupt blob ends it with an error
/// (the connection is cut short of its `Content-Length`), logged.
fn pieces(
    reader: Box<dyn BlobReader>,
    sha256: String,
) -> impl futures_util::Stream<Item = Result<Vec<u8>, BlobError>> + Send {
    futures_util::stream::unfold(Some(reader), move |reader| {
        let sha256 = sha256.clone();
        async move {
            let mut reader = reader?;
            match reader.next().await {
                Ok(Some(piece)) => Some((Ok(piece), Some(reader))),
                Ok(None) => None,
                Err(e) => {
                    tracing::error!("serving blob {sha256}: {e}");
                    Some((Err(e), None))
                }
            }
        }
    })
}
