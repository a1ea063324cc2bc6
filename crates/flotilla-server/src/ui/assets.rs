//! The dashboard's static files, compiled into the binary (no CDN, no Node at build
//! or run time): htmx and its SSE extension as published on npm (see
//! `assets/README.md`), and the dashboard's own stylesheet and script. Each is
//! served at `/ui/assets/<name>.<first 16 hex of its SHA-256>.<ext>`, so its URL
//! changes with its content and it can be cached for a year (`immutable`); its
//! ETag is its digest.

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::LazyLock;

/// One static file.
pub struct Asset {
    /// Its URL path (`/ui/assets/…`, digest in the name).
    pub path: String,
    /// `"<sha256 hex>"`, quoted as an ETag.
    etag: String,
    body: &'static str,
    mime: &'static str,
}

/// The files the dashboard serves.
pub struct Assets {
    /// htmx 2.0.11 (`htmx.min.js`).
    pub htmx: Asset,
    /// htmx-ext-sse 2.2.4 (`sse.min.js`).
    pub sse: Asset,
    /// The dashboard's stylesheet.
    pub css: Asset,
    /// The dashboard's script (theme before first paint, keys, copy, filters, log
    /// follow).
    pub js: Asset,
}

fn asset(stem: &str, ext: &str, mime: &'static str, body: &'static str) -> Asset {
    let hex = flotilla_model::digest::sha256_hex(body.as_bytes());
    let hex = hex.trim_start_matches("sha256:");
    Asset {
        path: format!("/ui/assets/{stem}.{}.{ext}", &hex[..16]),
        etag: format!("\"{hex}\""),
        body,
        mime,
    }
}

/// The assets, digested once.
pub static ASSETS: LazyLock<Assets> = LazyLock::new(|| Assets {
    htmx: asset(
        "htmx-2.0.11.min",
        "js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/htmx-2.0.11.min.js"),
    ),
    sse: asset(
        "htmx-ext-sse-2.2.4.min",
        "js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/htmx-ext-sse-2.2.4.min.js"),
    ),
    css: asset(
        "flotilla",
        "css",
        "text/css; charset=utf-8",
        include_str!("../../assets/flotilla.css"),
    ),
    js: asset(
        "flotilla",
        "js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/flotilla.js"),
    ),
});

/// `GET /ui/assets/{file}`: the file, with a year's `immutable` caching and its
/// digest as ETag (`If-None-Match` answered 304); 404 for any other name.
pub async fn serve(Path(file): Path<String>, headers: HeaderMap) -> Response {
    let a = &*ASSETS;
    let Some(asset) = [&a.htmx, &a.sse, &a.css, &a.js]
        .into_iter()
        .find(|x| x.path.rsplit('/').next() == Some(file.as_str()))
    else {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    };
    let etag = HeaderValue::from_str(&asset.etag).expect("hex is a header value");
    let cache = HeaderValue::from_static("public, max-age=31536000, immutable");
    if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == asset.etag.as_bytes())
    {
        return (
            StatusCode::NOT_MODIFIED,
            [(header::ETAG, etag), (header::CACHE_CONTROL, cache)],
        )
            .into_response();
    }
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(asset.mime)),
            (header::ETAG, etag),
            (header::CACHE_CONTROL, cache),
        ],
        asset.body,
    )
        .into_response()
}
