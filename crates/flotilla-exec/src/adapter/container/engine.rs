//! The container engine, reached through the Docker Engine API (bollard) on a unix
//! socket: which socket, a time limit on every call, and errors that say which engine
//! did what.
//!
//! Calls are made from blocking code (the [`crate::adapter::Adapter`] methods run on
//! the blocking pool, probes and the executor's exit watch call in from async tasks):
//! each future runs on one runtime thread of this module's own (`flotilla-engine`) and
//! the caller waits for its answer on a channel, so no caller ever nests runtimes.

use bollard::Docker;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The engine's socket when nothing names one (Docker's default).
pub const DEFAULT_SOCKET: &str = "unix:///var/run/docker.sock";

/// How long one engine call may take unless `FLOTILLA_CONTAINER_API_TIMEOUT` (a
/// duration such as `2s`) says otherwise: an engine that hangs is an error after it.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// How long pulling an image may take.
pub const PULL_TIMEOUT: Duration = Duration::from_secs(600);

/// What went wrong talking to the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// `container_api` (or `DOCKER_HOST`) is not `unix:///PATH`.
    #[error("the container engine's API `{0}` is not unix:///PATH (only unix sockets are spoken; reach a remote engine through its host's transport)")]
    NotUnix(String),
    /// No engine answers on the socket.
    #[error("the container engine at {socket} cannot be reached: {why}")]
    Unreachable {
        /// The socket.
        socket: String,
        /// What failed.
        why: String,
    },
    /// The engine did not answer within the time limit.
    #[error("the container engine at {socket} did not answer {what} within {}", humantime::format_duration(*after))]
    Timeout {
        /// The socket.
        socket: String,
        /// The call, e.g. `inspect container flotilla-web`.
        what: String,
        /// The limit.
        after: Duration,
    },
    /// The engine answered with an error status.
    #[error("{what}: the container engine answered {status}: {message}")]
    Api {
        /// The call.
        what: String,
        /// HTTP status.
        status: u16,
        /// The engine's message.
        message: String,
    },
    /// Any other failure of a call (a body that did not decode, a broken stream).
    #[error("{what}: {why}")]
    Other {
        /// The call.
        what: String,
        /// What failed.
        why: String,
    },
}

impl EngineError {
    /// Whether the engine answered 404 (no such container or image).
    pub fn is_not_found(&self) -> bool {
        matches!(self, EngineError::Api { status: 404, .. })
    }

    /// Whether the answer named a container state the Docker Engine API does not
    /// define: Podman 4.3 reports `stopped` for a moment while a container that
    /// exited is being cleaned up (its `State.Status` enum in the API has `exited`,
    /// not `stopped`), and the client refuses the whole answer.
    pub fn is_transient_state(&self) -> bool {
        matches!(self, EngineError::Other { why, .. } if why.contains("unknown variant `stopped`"))
    }
}

/// One engine: a client for its socket and the time limit of each call.
#[derive(Debug, Clone)]
pub struct Engine {
    docker: Docker,
    /// `unix:///PATH`, as given.
    pub socket: String,
    /// The time limit of one call.
    pub timeout: Duration,
}

/// The socket a component's engine is reached at: its host's `container_api`, else
/// `$DOCKER_HOST`, else [`DEFAULT_SOCKET`].
pub fn socket_for(container_api: Option<&str>) -> String {
    container_api
        .map(str::to_string)
        .or_else(|| std::env::var("DOCKER_HOST").ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| DEFAULT_SOCKET.to_string())
}

/// The time limit of one call: `FLOTILLA_CONTAINER_API_TIMEOUT` when it holds a
/// duration, else [`DEFAULT_CALL_TIMEOUT`].
pub fn call_timeout() -> Duration {
    std::env::var("FLOTILLA_CONTAINER_API_TIMEOUT")
        .ok()
        .and_then(|v| humantime::parse_duration(&v).ok())
        .filter(|d| !d.is_zero())
        .unwrap_or(DEFAULT_CALL_TIMEOUT)
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("flotilla-engine")
            .enable_all()
            .build()
            .expect("the engine's runtime starts")
    })
}

/// Runs `fut` on the engine's runtime and waits for its answer (from any thread that
/// is not that runtime's own).
pub fn block<T: Send + 'static>(fut: impl Future<Output = T> + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime().spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().expect("the engine's runtime answers")
}

impl Engine {
    /// A client for `socket` (`unix:///PATH`). Nothing is dialled yet.
    ///
    /// # Errors
    /// [`EngineError::NotUnix`] for another scheme; [`EngineError::Unreachable`] when
    /// the socket file does not exist.
    pub fn connect(socket: &str) -> Result<Engine, EngineError> {
        let Some(path) = socket
            .strip_prefix("unix://")
            .filter(|p| p.starts_with('/'))
        else {
            return Err(EngineError::NotUnix(socket.to_string()));
        };
        if !std::path::Path::new(path).exists() {
            return Err(EngineError::Unreachable {
                socket: socket.to_string(),
                why: format!("{path} does not exist (is the engine's API service running?)"),
            });
        }
        let timeout = call_timeout();
        // The client's own limit only backs ours up (it counts whole seconds).
        let docker =
            Docker::connect_with_unix(socket, timeout.as_secs() + 5, bollard::API_DEFAULT_VERSION)
                .map_err(|e| EngineError::Unreachable {
                    socket: socket.to_string(),
                    why: e.to_string(),
                })?;
        Ok(Engine {
            docker,
            socket: socket.to_string(),
            timeout,
        })
    }

    /// Runs one call (`what` names it in errors) within the engine's time limit.
    ///
    /// # Errors
    /// [`EngineError`]: the engine's own error, unreachable, or the time limit.
    pub fn call<T, F, Fut>(&self, what: &str, f: F) -> Result<T, EngineError>
    where
        T: Send + 'static,
        F: FnOnce(Docker) -> Fut,
        Fut: Future<Output = Result<T, bollard::errors::Error>> + Send + 'static,
    {
        self.call_within(what, self.timeout, f)
    }

    /// [`Engine::call`] with a time limit of its own (a stop's grace period, a pull).
    ///
    /// # Errors
    /// As [`Engine::call`].
    pub fn call_within<T, F, Fut>(
        &self,
        what: &str,
        limit: Duration,
        f: F,
    ) -> Result<T, EngineError>
    where
        T: Send + 'static,
        F: FnOnce(Docker) -> Fut,
        Fut: Future<Output = Result<T, bollard::errors::Error>> + Send + 'static,
    {
        let fut = f(self.docker.clone());
        let answer = block(async move { tokio::time::timeout(limit, fut).await });
        match answer {
            Err(_) => Err(EngineError::Timeout {
                socket: self.socket.clone(),
                what: what.to_string(),
                after: limit,
            }),
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.error(what, e)),
        }
    }

    fn error(&self, what: &str, e: bollard::errors::Error) -> EngineError {
        use bollard::errors::Error as B;
        match e {
            B::DockerResponseServerError {
                status_code,
                message,
            } => EngineError::Api {
                what: what.to_string(),
                status: status_code,
                message: message.trim().to_string(),
            },
            B::SocketNotFoundError(_)
            | B::HyperLegacyError { .. }
            | B::IOError { .. }
            | B::HyperResponseError { .. } => EngineError::Unreachable {
                socket: self.socket.clone(),
                why: unreachable_why(&e),
            },
            B::RequestTimeoutError => EngineError::Timeout {
                socket: self.socket.clone(),
                what: what.to_string(),
                after: self.timeout,
            },
            other => EngineError::Other {
                what: what.to_string(),
                why: other.to_string(),
            },
        }
    }
}

/// An answer of [`Engine::raw_get`]: the HTTP status and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawAnswer {
    /// The HTTP status code.
    pub status: u16,
    /// The body (de-chunked), as text.
    pub body: String,
}

impl Engine {
    /// Whether the engine is Podman: its `/version` names a component `Podman
    /// Engine` (Docker Engine's names `Engine`). Asked once per socket in a process.
    ///
    /// # Errors
    /// [`EngineError`] of the `/version` call.
    pub fn is_podman(&self) -> Result<bool, EngineError> {
        static SEEN: OnceLock<Mutex<HashMap<String, bool>>> = OnceLock::new();
        let seen = SEEN.get_or_init(Default::default);
        if let Some(&p) = seen.lock().expect("engine kinds").get(&self.socket) {
            return Ok(p);
        }
        let v = self.call(
            "ask the engine's version",
            |d| async move { d.version().await },
        )?;
        let podman = v
            .components
            .unwrap_or_default()
            .iter()
            .any(|c| c.name == "Podman Engine");
        seen.lock()
            .expect("engine kinds")
            .insert(self.socket.clone(), podman);
        Ok(podman)
    }

    /// `GET path` on the engine's socket, outside the Docker API bollard speaks
    /// (Podman's own `/v4.0.0/libpod/…` endpoints), as one HTTP/1.1 request with
    /// `Connection: close`, within the engine's time limit.
    ///
    /// # Errors
    /// [`EngineError::Unreachable`] when the socket refuses or the answer is not
    /// HTTP; [`EngineError::Timeout`] after the time limit.
    pub fn raw_get(&self, what: &str, path: &str) -> Result<RawAnswer, EngineError> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let sock = self.socket.trim_start_matches("unix://").to_string();
        let request = format!("GET {path} HTTP/1.1\r\nHost: engine\r\nConnection: close\r\n\r\n");
        let limit = self.timeout;
        let answer = block(async move {
            tokio::time::timeout(limit, async move {
                let mut s = tokio::net::UnixStream::connect(&sock).await?;
                s.write_all(request.as_bytes()).await?;
                let mut buf = Vec::new();
                s.read_to_end(&mut buf).await?;
                Ok::<_, std::io::Error>(buf)
            })
            .await
        });
        let unreachable = |why: String| EngineError::Unreachable {
            socket: self.socket.clone(),
            why,
        };
        match answer {
            Err(_) => Err(EngineError::Timeout {
                socket: self.socket.clone(),
                what: what.to_string(),
                after: limit,
            }),
            Ok(Err(e)) => Err(unreachable(e.to_string())),
            Ok(Ok(bytes)) => parse_http(&bytes)
                .ok_or_else(|| unreachable(format!("{what}: the answer is not HTTP/1.1"))),
        }
    }
}

/// The status and body of an HTTP/1.1 answer read to its end (`Content-Length`,
/// `Transfer-Encoding: chunked`, or the connection's close), `None` when it is not one.
fn parse_http(bytes: &[u8]) -> Option<RawAnswer> {
    let text = String::from_utf8_lossy(bytes);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()?
        .strip_prefix("HTTP/1.")?
        .get(2..)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let chunked = lines.any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("transfer-encoding")
                && v.trim().eq_ignore_ascii_case("chunked")
        })
    });
    let body = if chunked {
        let mut out = String::new();
        let mut rest = body;
        loop {
            let (size, after) = rest.split_once("\r\n")?;
            let n = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
            if n == 0 {
                break;
            }
            out.push_str(after.get(..n)?);
            rest = after.get(n..)?.strip_prefix("\r\n")?;
        }
        out
    } else {
        body.to_string()
    };
    Some(RawAnswer { status, body })
}

/// What made the engine unreachable, in the words of the deepest cause (the client's
/// own words, "client error (Connect)", say nothing), with what to look at when no
/// one listens on the socket.
fn unreachable_why(e: &bollard::errors::Error) -> String {
    let mut deepest: &dyn std::error::Error = e;
    while let Some(next) = deepest.source() {
        deepest = next;
    }
    let refused = std::iter::successors(Some(e as &dyn std::error::Error), |e| e.source())
        .filter_map(|e| e.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
    if refused {
        format!("{deepest}: the socket is there but nothing listens on it (is the engine's API service running? `systemctl start podman.socket`, or `docker.socket`)")
    } else {
        deepest.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_answers_are_read_with_a_length_or_in_chunks() {
        let plain = b"HTTP/1.1 409 Conflict\r\nContent-Length: 7\r\n\r\n{\"a\":1}";
        assert_eq!(
            parse_http(plain),
            Some(RawAnswer {
                status: 409,
                body: "{\"a\":1}".into()
            })
        );
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"St\r\n3\r\nx\"}\r\n0\r\n\r\n";
        assert_eq!(parse_http(chunked).unwrap().body, "{\"Stx\"}");
        assert_eq!(parse_http(b"SSH-2.0-OpenSSH\r\n\r\n"), None);
        assert_eq!(parse_http(b"HTTP/1.1 200 OK\r\n"), None);
    }
}
