//! A session runtime's only way out: three Unix sockets in its `run/` directory,
//! served by the authority for as long as the runtime runs, and bridged to loopback
//! ports inside the sandbox ([`flotilla_sessions::bridge`]).
//!
//! - `model.sock`: the model API, reverse-proxied to `[egress.model] url` with the
//!   real credential injected (`x-api-key`, or `Authorization: Bearer`); the agent
//!   holds a placeholder. Any credential header the agent sends is dropped.
//!   Responses are streamed (server-sent events pass through as they come).
//! - `egress.sock`: an HTTP `CONNECT` proxy (RFC 9110 §9.3.6): a destination on
//!   `[egress] allow` is connected and relayed byte for byte (TLS passes through);
//!   anything else gets `403` and nothing is connected. Every request is an event.
//! - `api.sock`: the authority's own API (the gate's hook, the executor, pushes),
//!   relayed byte for byte to its TLS listener: the sandbox's client still checks
//!   the authority's certificate against its CA.
//!
//! Each socket is given to the session's uid (mode 0600) by the launcher, inside
//! a directory of the API's the session's uid may only traverse.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::task::JoinHandle;

/// Inside the sandbox, the loopback port of the model API.
pub const MODEL_PORT: u16 = 17480;
/// Inside the sandbox, the loopback port of the `CONNECT` proxy.
pub const PROXY_PORT: u16 = 17481;
/// Inside the sandbox, the loopback port of the authority's API.
pub const API_PORT: u16 = 17482;
/// The model credential the agent holds: not a secret, never accepted upstream.
pub const PLACEHOLDER_KEY: &str = "flotilla-placeholder-not-a-key";
/// The longest `CONNECT` request head read, in bytes.
const HEAD_LIMIT: usize = 8192;

/// The model API, as the authority reaches it.
#[derive(Debug, Clone)]
pub struct ModelUpstream {
    /// Its base URL (`https://api.anthropic.com`), no trailing `/`.
    pub url: String,
    /// The header carrying the credential, lower case (`x-api-key`, or
    /// `authorization`, sent as `Bearer KEY`).
    pub header: String,
    /// The credential.
    pub key: String,
}

/// What a runtime may reach: shared by every runtime.
#[derive(Debug, Clone)]
pub struct EgressSetup {
    /// `CONNECT` destinations: `host` (port 443), `host:port`, `*.domain` (its
    /// subdomains, port 443) or `*.domain:port`; hosts compared case-insensitively.
    pub allow: Vec<String>,
    /// The model API, if sessions reach one.
    pub model: Option<ModelUpstream>,
    /// The authority's own listener (`127.0.0.1:PORT`).
    pub api: SocketAddr,
}

/// Whether `host:port` is on `allow` (see [`EgressSetup::allow`]).
pub fn allowed(allow: &[String], host: &str, port: u16) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    allow.iter().any(|entry| {
        let (pattern, want) = match entry.rsplit_once(':') {
            Some((h, p)) if !h.contains(']') || h.ends_with(']') => match p.parse::<u16>() {
                Ok(p) => (h, p),
                Err(_) => (entry.as_str(), 443),
            },
            _ => (entry.as_str(), 443),
        };
        let pattern = pattern.to_ascii_lowercase();
        let host_ok = match pattern.strip_prefix("*.") {
            Some(domain) => host.ends_with(&format!(".{domain}")),
            None => host == pattern.trim_start_matches('[').trim_end_matches(']'),
        };
        host_ok && port == want
    })
}

/// One thing a runtime's network did: `kind` is `model`, `connect` or `api`;
/// `allowed` whether it went through.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EgressEvent {
    /// `model`, `connect`.
    pub kind: &'static str,
    /// The destination (`host:port`) or the model API path.
    pub target: String,
    /// Whether it was let through.
    pub allowed: bool,
    /// Why not, or the upstream's status.
    pub detail: String,
}

/// Where a runtime's events go (the session's event log).
pub type EventSink = Arc<dyn Fn(EgressEvent) + Send + Sync>;

/// The sockets of one runtime, served until dropped.
#[derive(Debug)]
pub struct Egress {
    tasks: Vec<JoinHandle<()>>,
    paths: Vec<PathBuf>,
}

impl Drop for Egress {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The socket paths of a runtime whose `run/` directory is `run`: (model, proxy,
/// api).
pub fn socket_paths(run: &Path) -> (PathBuf, PathBuf, PathBuf) {
    (
        run.join("model.sock"),
        run.join("egress.sock"),
        run.join("api.sock"),
    )
}

/// Binds the three sockets in `run` (mode 0600; the launcher then gives them to
/// the session's uid) and serves them.
///
/// # Errors
/// A socket that cannot be bound.
pub fn start(run: &Path, setup: Arc<EgressSetup>, sink: EventSink) -> std::io::Result<Egress> {
    let (model, proxy, api) = socket_paths(run);
    let mut egress = Egress {
        tasks: Vec::new(),
        paths: Vec::new(),
    };
    let bind = |path: &Path, egress: &mut Egress| -> std::io::Result<UnixListener> {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::remove_file(path);
        let l = UnixListener::bind(path)?;
        egress.paths.push(path.to_path_buf());
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        Ok(l)
    };
    let l = bind(&model, &mut egress)?;
    let router = axum::Router::new().fallback(model_proxy).with_state((
        setup.clone(),
        sink.clone(),
        http_client()?,
    ));
    egress.tasks.push(tokio::spawn(async move {
        let _ = axum::serve(l, router).await;
    }));
    let l = bind(&proxy, &mut egress)?;
    let (s2, k2) = (setup.clone(), sink.clone());
    egress.tasks.push(tokio::spawn(async move {
        while let Ok((conn, _)) = l.accept().await {
            let (s, k) = (s2.clone(), k2.clone());
            tokio::spawn(async move { connect_proxy(conn, &s, &k).await });
        }
    }));
    let l = bind(&api, &mut egress)?;
    let target = setup.api;
    egress.tasks.push(tokio::spawn(async move {
        while let Ok((mut conn, _)) = l.accept().await {
            tokio::spawn(async move {
                if let Ok(mut up) = TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut conn, &mut up).await;
                }
            });
        }
    }));
    Ok(egress)
}

/// The client the model proxy speaks to its upstream with (the host's roots).
fn http_client() -> std::io::Result<reqwest::Client> {
    let tls = crate::tls::native_roots_config().map_err(std::io::Error::other)?;
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .connect_timeout(std::time::Duration::from_secs(10))
        .no_proxy()
        .build()
        .map_err(std::io::Error::other)
}

/// Headers never passed on: hop-by-hop ones (RFC 9110 §7.6.1), the agent's
/// credentials, and what the client recomputes.
const DROPPED: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "x-api-key",
    "authorization",
];

type ModelState = (Arc<EgressSetup>, EventSink, reqwest::Client);

/// Forwards one model API request to the upstream with the real credential.
async fn model_proxy(State((setup, sink, http)): State<ModelState>, req: Request) -> Response {
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let refuse = |status: StatusCode, why: String| {
        sink(EgressEvent {
            kind: "model",
            target: path.clone(),
            allowed: false,
            detail: why.clone(),
        });
        (status, why).into_response()
    };
    let Some(model) = &setup.model else {
        return refuse(
            StatusCode::FORBIDDEN,
            "no model API is configured ([egress.model] in sessions.toml)".into(),
        );
    };
    let method = req.method().clone();
    let mut headers = req.headers().clone();
    for h in DROPPED {
        headers.remove(*h);
    }
    let value = if model.header == "authorization" {
        format!("Bearer {}", model.key)
    } else {
        model.key.clone()
    };
    let (Ok(name), Ok(value)) = (
        HeaderName::from_bytes(model.header.as_bytes()),
        HeaderValue::from_str(&value),
    ) else {
        return refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the model credential is not a valid header".into(),
        );
    };
    headers.insert(name, value);
    let body = match axum::body::to_bytes(req.into_body(), 64 << 20).await {
        Ok(b) => b,
        Err(e) => return refuse(StatusCode::PAYLOAD_TOO_LARGE, e.to_string()),
    };
    let sent = http
        .request(method, format!("{}{path}", model.url))
        .headers(headers)
        .body(body)
        .send()
        .await;
    let resp = match sent {
        Ok(r) => r,
        Err(e) => return refuse(StatusCode::BAD_GATEWAY, format!("the model API: {e}")),
    };
    sink(EgressEvent {
        kind: "model",
        target: path,
        allowed: true,
        detail: resp.status().as_u16().to_string(),
    });
    let mut out = Response::builder().status(resp.status().as_u16());
    for (k, v) in resp.headers() {
        if !DROPPED.contains(&k.as_str()) {
            out = out.header(k.as_str(), v.as_bytes());
        }
    }
    let stream = futures_util::stream::unfold(resp, |mut r| async move {
        match r.chunk().await {
            Ok(Some(c)) => Some((Ok::<_, std::io::Error>(c), r)),
            Ok(None) => None,
            Err(e) => Some((Err(std::io::Error::other(e)), r)),
        }
    });
    out.body(Body::from_stream(stream))
        .unwrap_or_else(|e| (StatusCode::BAD_GATEWAY, e.to_string()).into_response())
}

/// Serves one `CONNECT` request on `conn`.
async fn connect_proxy(mut conn: UnixStream, setup: &EgressSetup, sink: &EventSink) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.len() > HEAD_LIMIT {
            let _ = conn
                .write_all(b"HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n")
                .await;
            return;
        }
    }
    let end = head.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(0) + 4;
    let early = head.split_off(end);
    let line = String::from_utf8_lossy(&head)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    let mut words = line.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let refuse = |target: String, why: String| {
        sink(EgressEvent {
            kind: "connect",
            target,
            allowed: false,
            detail: why,
        });
    };
    if method != "CONNECT" {
        refuse(
            target.to_string(),
            format!("only CONNECT is proxied, not {method}"),
        );
        let _ = conn
            .write_all(
                b"HTTP/1.1 405 Method Not Allowed\r\nAllow: CONNECT\r\nContent-Length: 0\r\n\r\n",
            )
            .await;
        return;
    }
    let Some((host, port)) = target.rsplit_once(':').and_then(|(h, p)| {
        Some((
            h.trim_start_matches('[').trim_end_matches(']'),
            p.parse::<u16>().ok()?,
        ))
    }) else {
        refuse(target.to_string(), "not host:port".into());
        let _ = conn
            .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            .await;
        return;
    };
    if !allowed(&setup.allow, host, port) {
        refuse(target.to_string(), "not in [egress] allow".into());
        let body = format!("flotilla: {target} is not in [egress] allow\n");
        let _ = conn
            .write_all(
                format!(
                    "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )
            .await;
        return;
    }
    let mut up = match TcpStream::connect((host, port)).await {
        Ok(u) => u,
        Err(e) => {
            refuse(target.to_string(), format!("cannot connect: {e}"));
            let _ = conn
                .write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                .await;
            return;
        }
    };
    sink(EgressEvent {
        kind: "connect",
        target: target.to_string(),
        allowed: true,
        detail: "connected".into(),
    });
    if conn
        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    if !early.is_empty() && up.write_all(&early).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut conn, &mut up).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allowlist_matches_hosts_ports_and_subdomains() {
        let allow: Vec<String> = [
            "api.anthropic.com",
            "*.pypi.org",
            "127.0.0.1:8080",
            "[::1]:9",
        ]
        .map(String::from)
        .to_vec();
        assert!(allowed(&allow, "api.anthropic.com", 443));
        assert!(allowed(&allow, "API.Anthropic.com.", 443));
        assert!(!allowed(&allow, "api.anthropic.com", 80));
        assert!(!allowed(&allow, "evil.api.anthropic.com", 443));
        assert!(allowed(&allow, "files.pypi.org", 443));
        assert!(!allowed(&allow, "pypi.org", 443));
        assert!(!allowed(&allow, "notpypi.org", 443));
        assert!(allowed(&allow, "127.0.0.1", 8080));
        assert!(!allowed(&allow, "127.0.0.2", 8080));
        assert!(allowed(&allow, "::1", 9));
        for bad in ["", "*", "*.com", "a b", "x:port", "http://x"] {
            assert!(
                flotilla_sessions::config::check_allow_entry(bad).is_err(),
                "{bad}"
            );
        }
        for good in ["api.anthropic.com", "*.pypi.org", "127.0.0.1:8080"] {
            assert!(
                flotilla_sessions::config::check_allow_entry(good).is_ok(),
                "{good}"
            );
        }
    }
}
