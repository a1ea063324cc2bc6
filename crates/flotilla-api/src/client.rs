//! The client of the authority's API, used by agents and by the CLI's `--server`:
//! HTTPS with the authority's CA pinned (no system roots), a bearer credential, and
//! typed answers.

use crate::wire::{
    AgentReport, ApiError, DiffResponse, FleetStatus, HistoryResponse, JoinRequest, JoinResponse,
    PublishRequest, RevisionDto, SelectRequest, SelectResponse, SnapshotResponse, TokenRequest,
    TokenResponse,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What a call to the authority can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// TLS set-up.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The authority could not be reached or the exchange broke off.
    #[error("{url}: {source}")]
    Http {
        /// The request's URL.
        url: String,
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
    /// The authority answered with an error.
    #[error("{url}: {status}: {}", .error.message)]
    Api {
        /// The request's URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The authority's error body.
        error: ApiError,
    },
    /// The CA the server showed does not have the pinned hash.
    #[error("the authority's CA is {found}, not the pinned {expected}: refusing to trust it")]
    CaMismatch {
        /// The pin given.
        expected: String,
        /// The hash of what was served.
        found: String,
    },
    /// A downloaded blob could not be written locally.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An address that is not `https://host[:port]`: what is wrong with it (its
    /// password, if it held one, masked).
    #[error("{0}")]
    Url(String),
}

impl ClientError {
    /// The HTTP status, when the authority answered with an error.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Why [`Client::resolve_revision`] found no single revision.
#[derive(Debug, thiserror::Error)]
pub enum RevisionPrefixError {
    /// The authority could not be asked.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// No revision starts with the prefix.
    #[error("no revision starts with `{0}`")]
    NotFound(String),
    /// Several revisions start with it.
    #[error("`{prefix}` names {count} revisions: give more digits")]
    Ambiguous {
        /// The prefix as given.
        prefix: String,
        /// How many revisions it names.
        count: usize,
    },
}

/// Why [`Client::unskip_and_wait`] did not end with the request done.
#[derive(Debug, thiserror::Error)]
pub enum UnskipError {
    /// The authority refused the request (an unknown host, one that is not an agent
    /// host…) or could not be reached.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The host's agent could not change one of its skip lists (`error` says why);
    /// the request stays pending and the agent tries again at its next release
    /// answer.
    #[error("the agent of `{}` could not clear {} {}: {} (unskip {} stays pending: the agent tries again at its next release poll)",
        .0.host, .0.name, .0.version, .0.error.as_deref().unwrap_or("?"), .0.id)]
    Failed(Box<crate::wire::UnskipDto>),
    /// The host's agent did not confirm it within the deadline; the request stays
    /// pending (the agent clears the entries when it next hears from the authority).
    #[error("the agent of `{}` did not confirm clearing {} {} within {}: unskip {} stays pending (is the agent running, and does it know unskip requests?)",
        .unskip.host, .unskip.name, .unskip.version, humantime::format_duration(*.waited), .unskip.id)]
    NotConfirmed {
        /// The request as it stands.
        unskip: Box<crate::wire::UnskipDto>,
        /// How long it was waited for.
        waited: Duration,
    },
}

/// A connection to the authority: to one of its addresses at a time.
///
/// Several authorities sharing one database answer alike, so a client given
/// several addresses (`https://a:7300,https://b:7300`) sticks to one and moves to
/// the next (sticking to it from then on) when a request cannot connect, or is
/// answered 502, 503 or 504 (any 5xx for a `GET`): each address is tried at most
/// once per request, with a jittered pause of 50 to 150 ms times the number of
/// addresses tried so far between two. A name that resolves to several addresses
/// is tried address by address by the connector itself. The pinned CA covers
/// every address. Clones share the address in use.
#[derive(Clone)]
pub struct Client {
    bases: Arc<[String]>,
    current: Arc<AtomicUsize>,
    http: reqwest::Client,
    credential: Option<String>,
}

fn base_of(url: &str) -> Result<String, ClientError> {
    let base = url.trim().trim_end_matches('/');
    if !base.starts_with("https://") || base.len() <= "https://".len() {
        return Err(not_https(url));
    }
    Ok(base.to_string())
}

fn not_https(url: &str) -> ClientError {
    ClientError::Url(format!(
        "`{}` is not an https:// URL of the authority",
        url.trim()
    ))
}

/// The addresses of `urls`: one `https://host[:port]` or several separated by
/// commas, each once, in the order given.
///
/// # Errors
/// [`ClientError::Url`] for an address that is not `https://…`, or none at all.
pub fn server_addresses(urls: &str) -> Result<Vec<String>, ClientError> {
    let mut bases: Vec<String> = Vec::new();
    for part in urls.split(',').filter(|p| !p.trim().is_empty()) {
        // As requests will show it (a lower-case host, no default port).
        let mut parsed = url::Url::parse(&base_of(part)?).map_err(|e| {
            ClientError::Url(format!(
                "`{}` is not an https:// URL of the authority: {e}",
                part.trim()
            ))
        })?;
        let extra = if !parsed.username().is_empty() || parsed.password().is_some() {
            Some("a user or password (the credential is the operator file's or the agent's)")
        } else if parsed.query().is_some() || parsed.fragment().is_some() {
            Some("a query or fragment")
        } else if parsed.path() != "/" {
            Some("a path")
        } else {
            None
        };
        if let Some(what) = extra {
            let _ = parsed.set_password(parsed.password().map(|_| "***"));
            return Err(ClientError::Url(format!(
                "`{}` holds {what}: an authority's address is https://host[:port] alone",
                parsed.as_str().trim_end_matches('/')
            )));
        }
        let base = parsed.as_str().trim_end_matches('/').to_string();
        if !bases.contains(&base) {
            bases.push(base);
        }
    }
    if bases.is_empty() {
        return Err(not_https(urls));
    }
    Ok(bases)
}

/// Whether an answer with `status` to a request with `method` is worth asking
/// another address: the address's gateway or the authority itself says it cannot
/// serve now (502, 503, 504), or any server error to a request that changes
/// nothing.
fn answer_fails_over(method: &reqwest::Method, status: reqwest::StatusCode) -> bool {
    matches!(status.as_u16(), 502..=504)
        || (status.is_server_error()
            && (method == reqwest::Method::GET || method == reqwest::Method::HEAD))
}

impl ClientError {
    /// Whether the authority could not be reached at all (connection refused or
    /// timed out, no route, a name that does not resolve): nothing was asked.
    pub fn is_unreachable(&self) -> bool {
        match self {
            ClientError::Http { source, .. } => {
                (source.is_connect() || source.is_timeout()) && !self.is_not_this_authority()
            }
            _ => false,
        }
    }

    /// Whether something answered at the URL but not as this authority: the TLS
    /// handshake failed (a certificate the pinned CA did not sign, or no TLS at all).
    pub fn is_not_this_authority(&self) -> bool {
        let ClientError::Http { source, .. } = self else {
            return false;
        };
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(source);
        while let Some(c) = cause {
            if is_tls(c) {
                return true;
            }
            cause = c.source();
        }
        false
    }

    /// This error and its causes on one line, each said once (a cause whose text the
    /// line already holds is left out); an authority that cannot be reached is said
    /// so first (`cannot reach the authority: https://…: … Connection refused`).
    pub fn one_line(&self) -> String {
        let mut s = if self.is_unreachable() {
            format!("cannot reach the authority: {self}")
        } else if self.is_not_this_authority() {
            format!("not this authority (the TLS handshake failed): {self}")
        } else {
            self.to_string()
        };
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            let text = c.to_string();
            if !s.contains(&text) {
                s.push_str(": ");
                s.push_str(&text);
            }
            cause = c.source();
        }
        s
    }
}

/// Whether `e` is the TLS stack's error, possibly inside I/O errors (which carry
/// it as their inner error, not as their source).
fn is_tls(e: &(dyn std::error::Error + 'static)) -> bool {
    if e.downcast_ref::<rustls::Error>().is_some() {
        return true;
    }
    match e.downcast_ref::<std::io::Error>() {
        Some(io) => {
            io.kind() == std::io::ErrorKind::InvalidData
                || io.get_ref().is_some_and(|inner| is_tls(inner))
        }
        None => false,
    }
}

impl Client {
    /// A client for the authority at `url` (`https://host:port`, or several such
    /// addresses separated by commas: see [`Client`]) trusting `ca_pem` alone,
    /// sending `credential` (if any) as a bearer token.
    ///
    /// # Errors
    /// [`ClientError::Url`], [`ClientError::Tls`].
    pub fn new(url: &str, ca_pem: &str, credential: Option<String>) -> Result<Client, ClientError> {
        let bases = server_addresses(url)?;
        let base = bases[0].clone();
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(crate::tls::client_config(ca_pem)?)
            .connect_timeout(Duration::from_secs(10))
            .http1_only()
            .build()
            .map_err(|source| ClientError::Http {
                url: base.clone(),
                source: source.without_url(),
            })?;
        Ok(Client {
            bases: bases.into(),
            current: Arc::new(AtomicUsize::new(0)),
            http,
            credential,
        })
    }

    /// Fetches the authority's CA over a connection not yet trusted and checks it
    /// against `ca_hash` (`sha256:<hex>` of its DER), kubeadm-discovery style.
    /// Returns the CA's PEM.
    ///
    /// # Errors
    /// [`ClientError::CaMismatch`] when the hash differs; transport errors.
    pub async fn discover_ca(url: &str, ca_hash: &str) -> Result<String, ClientError> {
        let bases = server_addresses(url)?;
        let mut unreachable = None;
        for base in &bases {
            match Self::discover_ca_at(base, ca_hash).await {
                Err(e) if e.is_unreachable() => unreachable = Some(e),
                other => return other,
            }
        }
        Err(unreachable.expect("at least one address"))
    }

    async fn discover_ca_at(base: &str, ca_hash: &str) -> Result<String, ClientError> {
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(crate::tls::discovery_config()?)
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(30))
            .http1_only()
            .build()
            .map_err(|source| ClientError::Http {
                url: base.to_string(),
                source: source.without_url(),
            })?;
        let url = format!("{base}/v1/ca.pem");
        let pem = http
            .get(&url)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|source| ClientError::Http {
                url: url.clone(),
                source: source.without_url(),
            })?
            .text()
            .await
            .map_err(|source| ClientError::Http {
                url: url.clone(),
                source: source.without_url(),
            })?;
        let found = crate::tls::ca_hash(&pem)?;
        if !found.eq_ignore_ascii_case(ca_hash.trim()) {
            return Err(ClientError::CaMismatch {
                expected: ca_hash.trim().to_string(),
                found,
            });
        }
        Ok(pem)
    }

    /// The base URL of the authority's address in use (`https://host:port`).
    pub fn url(&self) -> &str {
        self.base()
    }

    /// Every address the client knows, in the order given.
    pub fn urls(&self) -> &[String] {
        &self.bases
    }

    fn base(&self) -> &str {
        &self.bases[self.current.load(Ordering::Relaxed) % self.bases.len()]
    }

    /// Sends `req` (built on [`Client::base`]) with the credential, failing over
    /// to the next address as [`Client`] says when there are several.
    async fn execute(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, reqwest::Error> {
        let req = match &self.credential {
            Some(c) => req.bearer_auth(c),
            None => req,
        };
        let mut request = req.build()?;
        let n = self.bases.len();
        if n == 1 {
            return self.http.execute(request).await;
        }
        let mut tried = 1;
        loop {
            let spare = request.try_clone();
            let method = request.method().clone();
            let at = self.index_of(request.url().as_str());
            let result = self.http.execute(request).await;
            let fails_over = match &result {
                Err(e) => e.is_connect(),
                Ok(r) => answer_fails_over(&method, r.status()),
            };
            let (Some(mut next), Some(at), true, true) = (spare, at, fails_over, tried < n) else {
                return result;
            };
            let to = (at + 1) % n;
            let rest = next.url().as_str()[self.bases[at].len()..].to_string();
            match reqwest::Url::parse(&format!("{}{rest}", self.bases[to])) {
                Ok(u) => *next.url_mut() = u,
                Err(_) => return result,
            }
            // Others may have moved on already: only the first to fail moves it.
            let _ = self
                .current
                .compare_exchange(at, to, Ordering::Relaxed, Ordering::Relaxed);
            let pause = 50.0 * tried as f64 * (0.5 + fastrand::f64());
            tokio::time::sleep(Duration::from_millis(pause as u64)).await;
            tried += 1;
            request = next;
        }
    }

    /// Which address `url` was made from.
    fn index_of(&self, url: &str) -> Option<usize> {
        self.bases.iter().position(|b| {
            url.strip_prefix(b.as_str()).is_some_and(|rest| {
                rest.is_empty() || rest.starts_with('/') || rest.starts_with('?')
            })
        })
    }

    async fn send<T: serde::de::DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
        url: &str,
    ) -> Result<T, ClientError> {
        let http = |source: reqwest::Error| ClientError::Http {
            url: url.to_string(),
            source: source.without_url(),
        };
        let resp = self.execute(req).await.map_err(http)?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.map_err(http)?;
            let error = serde_json::from_str(&text).unwrap_or(ApiError {
                code: "http".into(),
                message: text.trim().chars().take(500).collect(),
                current: None,
            });
            return Err(ClientError::Api {
                url: url.to_string(),
                status: status.as_u16(),
                error,
            });
        }
        if status == reqwest::StatusCode::NO_CONTENT {
            return serde_json::from_str("null").map_err(|_| ClientError::Api {
                url: url.to_string(),
                status: 204,
                error: ApiError {
                    code: "invalid".into(),
                    message: "unexpected empty answer".into(),
                    current: None,
                },
            });
        }
        resp.json().await.map_err(http)
    }

    /// `GET {path}` (60 s), its JSON answer.
    ///
    /// # Errors
    /// [`ClientError::Http`] (transport), [`ClientError::Api`] (an error status, with
    /// the authority's error).
    pub async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let url = format!("{}{path}", self.base());
        self.send(self.http.get(&url).timeout(Duration::from_secs(60)), &url)
            .await
    }

    /// `POST {path}` with a JSON body (60 s), its JSON answer.
    ///
    /// # Errors
    /// As [`Client::get`].
    pub async fn post<B: serde::Serialize, T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let url = format!("{}{path}", self.base());
        self.send(
            self.http
                .post(&url)
                .json(body)
                .timeout(Duration::from_secs(60)),
            &url,
        )
        .await
    }

    /// `DELETE {path}` (60 s), its JSON answer.
    ///
    /// # Errors
    /// As [`Client::get`].
    pub async fn delete<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<T, ClientError> {
        let url = format!("{}{path}", self.base());
        self.send(
            self.http.delete(&url).timeout(Duration::from_secs(60)),
            &url,
        )
        .await
    }

    /// `POST {path}` with raw bytes as a JSON body, within `timeout`; the answer's
    /// bytes (a success status only).
    ///
    /// # Errors
    /// As [`Client::get`].
    pub async fn post_bytes(
        &self,
        path: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, ClientError> {
        let url = format!("{}{path}", self.base());
        let req = self
            .http
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .timeout(timeout);
        let bytes: serde_json::Value = self.send(req, &url).await?;
        Ok(serde_json::to_vec(&bytes).expect("serialises"))
    }

    /// An agent's POST of what it measured: short (10 s), since an agent whose
    /// authority is away must get back to its checks; the answer is ignored.
    async fn post_short<B: serde::Serialize + ?Sized>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<(), ClientError> {
        let url = format!("{}{path}", self.base());
        let _: serde_json::Value = self
            .send(
                self.http
                    .post(&url)
                    .json(body)
                    .timeout(Duration::from_secs(10)),
                &url,
            )
            .await?;
        Ok(())
    }

    /// `POST /v1/join`.
    ///
    /// # Errors
    /// [`ClientError`]; an unknown, used or expired token is [`ClientError::Api`]
    /// with status 401 and code `unauthorized`, `token-used` or `token-expired`.
    pub async fn join(&self, req: &JoinRequest) -> Result<JoinResponse, ClientError> {
        self.post("/v1/join", req).await
    }

    /// `GET /v1/hosts/{host}/snapshot?index=N&wait=…`: a long poll that returns when
    /// the selection moves past `index`, else after about `wait`.
    ///
    /// # Errors
    /// [`ClientError`]; another host's snapshot is 403.
    pub async fn snapshot(
        &self,
        host: &str,
        index: u64,
        wait: Duration,
    ) -> Result<SnapshotResponse, ClientError> {
        self.long_poll(
            &format!(
                "/v1/hosts/{host}/snapshot?index={index}&wait={}ms",
                wait.as_millis()
            ),
            wait,
        )
        .await
    }

    /// `POST /v1/hosts/{host}/report`.
    ///
    /// # Errors
    /// [`ClientError`]; another host's report is 403.
    pub async fn report(&self, host: &str, report: &AgentReport) -> Result<(), ClientError> {
        self.post_short(&format!("/v1/hosts/{host}/report"), report)
            .await
    }

    /// `POST /v1/tokens` (operator).
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn create_token(&self, req: &TokenRequest) -> Result<TokenResponse, ClientError> {
        self.post("/v1/tokens", req).await
    }

    /// `POST /v1/revisions` (operator): publish and select.
    ///
    /// # Errors
    /// [`ClientError`]; a stale `expect` is 409 (`conflict`, naming the current one).
    pub async fn publish(&self, req: &PublishRequest) -> Result<SelectResponse, ClientError> {
        self.post("/v1/revisions", req).await
    }

    /// `PUT /v1/selection` (operator).
    ///
    /// # Errors
    /// [`ClientError`]; a stale `expect` is 409, an unknown revision 404.
    pub async fn select(&self, req: &SelectRequest) -> Result<SelectResponse, ClientError> {
        let url = format!("{}/v1/selection", self.base());
        self.send(
            self.http
                .put(&url)
                .json(req)
                .timeout(Duration::from_secs(60)),
            &url,
        )
        .await
    }

    /// `GET /v1/revisions` (operator).
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn history(&self) -> Result<HistoryResponse, ClientError> {
        self.get("/v1/revisions").await
    }

    /// The revision (`sha256:<64 hex>`) that `rev` names: a whole name (with or
    /// without `sha256:`) as it is, or a unique hex prefix of one the authority holds
    /// (looked up in [`Client::history`]).
    ///
    /// # Errors
    /// [`RevisionPrefixError`]: none or several match, or the authority's.
    pub async fn resolve_revision(&self, rev: &str) -> Result<String, RevisionPrefixError> {
        let hex = rev.strip_prefix("sha256:").unwrap_or(rev);
        if hex.len() == 64 {
            return Ok(format!("sha256:{hex}"));
        }
        let all = self.history().await?;
        let matching: Vec<&str> = all
            .revisions
            .iter()
            .map(|r| r.revision.as_str())
            .filter(|r| r.strip_prefix("sha256:").unwrap_or(r).starts_with(hex))
            .collect();
        match matching.as_slice() {
            [one] => Ok(one.to_string()),
            [] => Err(RevisionPrefixError::NotFound(rev.to_string())),
            _ => Err(RevisionPrefixError::Ambiguous {
                prefix: rev.to_string(),
                count: matching.len(),
            }),
        }
    }

    /// `GET /v1/revisions/{rev}` (operator).
    ///
    /// # Errors
    /// [`ClientError`]; unknown is 404.
    pub async fn revision(&self, rev: &str) -> Result<RevisionDto, ClientError> {
        self.get(&format!("/v1/revisions/{rev}")).await
    }

    /// `GET /v1/revisions/{a}/diff/{b}` (operator).
    ///
    /// # Errors
    /// [`ClientError`]; unknown is 404.
    pub async fn diff(&self, a: &str, b: &str) -> Result<DiffResponse, ClientError> {
        self.get(&format!("/v1/revisions/{a}/diff/{b}")).await
    }

    /// `GET /v1/status` (operator).
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn status(&self) -> Result<FleetStatus, ClientError> {
        self.get("/v1/status").await
    }

    /// `POST /v1/hosts/{host}/calls` (operator): queue a host-mode request for the
    /// host's agent.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn enqueue_call(
        &self,
        host: &str,
        req: &crate::wire::EnqueueRequest,
    ) -> Result<u64, ClientError> {
        let r: crate::wire::Enqueued = self.post(&format!("/v1/hosts/{host}/calls"), req).await?;
        Ok(r.id)
    }

    /// `GET /v1/hosts/{host}/calls?after=N&wait=…` (the host's agent): a long poll.
    ///
    /// # Errors
    /// [`ClientError`]; another host's calls are 403.
    pub async fn pending_calls(
        &self,
        host: &str,
        after: u64,
        wait: Duration,
    ) -> Result<crate::wire::CallsResponse, ClientError> {
        let url = format!(
            "{}/v1/hosts/{host}/calls?after={after}&wait={}ms",
            self.base(),
            wait.as_millis()
        );
        let timeout = wait + Duration::from_secs(15);
        self.send(self.http.get(&url).timeout(timeout), &url).await
    }

    /// `POST /v1/calls/{id}/reply` (the call's agent).
    ///
    /// # Errors
    /// [`ClientError`]; an answered, unknown or other host's call is 409.
    pub async fn reply_call(
        &self,
        id: u64,
        response: serde_json::Value,
    ) -> Result<(), ClientError> {
        let _: serde_json::Value = self
            .post(
                &format!("/v1/calls/{id}/reply"),
                &crate::wire::ReplyRequest { response },
            )
            .await?;
        Ok(())
    }

    /// `GET /v1/calls/{id}?wait=…` (operator): the call's answer, long-polled.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn call_status(
        &self,
        id: u64,
        wait: Duration,
    ) -> Result<crate::wire::CallStatus, ClientError> {
        let url = format!("{}/v1/calls/{id}?wait={}ms", self.base(), wait.as_millis());
        let timeout = wait + Duration::from_secs(15);
        self.send(self.http.get(&url).timeout(timeout), &url).await
    }

    /// `PUT /v1/blobs/{sha256}` (operator): uploads an artifact to the authority's
    /// blob store; the authority checks the bytes hash to `sha256` (64 hex digits).
    /// Returns whether the blob was new.
    ///
    /// # Errors
    /// [`ClientError`]; bytes that do not hash to `sha256` are 400 `invalid`.
    pub async fn put_blob(&self, sha256: &str, bytes: Vec<u8>) -> Result<bool, ClientError> {
        self.put_blob_body(sha256, reqwest::Body::from(bytes)).await
    }

    /// [`Client::put_blob`] of the file at `path`, streamed (the file is never
    /// whole in memory, whatever its size).
    ///
    /// # Errors
    /// As [`Client::put_blob`]; an unreadable file is [`ClientError::Io`].
    pub async fn put_blob_file(
        &self,
        sha256: &str,
        path: &std::path::Path,
    ) -> Result<bool, ClientError> {
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|source| ClientError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        self.put_blob_body(sha256, reqwest::Body::from(file)).await
    }

    async fn put_blob_body(&self, sha256: &str, body: reqwest::Body) -> Result<bool, ClientError> {
        let url = format!("{}/v1/blobs/{sha256}", self.base());
        let answer: serde_json::Value = self
            .send(
                self.http
                    .put(&url)
                    .header("content-type", "application/octet-stream")
                    .body(body)
                    .timeout(Duration::from_secs(3600)),
                &url,
            )
            .await?;
        Ok(answer
            .get("created")
            .and_then(|v| v.as_bool())
            .unwrap_or(false))
    }

    /// `GET /v1/session/tree` (a session's runtime, with its credential): streams
    /// the git bundle of the session's base (`git bundle create`, one ref
    /// `refs/flotilla/sessions/<id>`) into `dest` (created or truncated), within an
    /// hour. The bytes written.
    ///
    /// # Errors
    /// [`ClientError`]; a credential that is not the session's running runtime's
    /// is 403; a local write failure is [`ClientError::Io`].
    pub async fn download_session_tree(&self, dest: &std::path::Path) -> Result<u64, ClientError> {
        use std::io::Write;
        let url = format!("{}/v1/session/tree", self.base());
        let io = |source| ClientError::Io {
            path: dest.to_path_buf(),
            source,
        };
        let mut resp = self
            .raw_get_with(&url, Duration::from_secs(3600), None)
            .await?;
        let mut file = std::fs::File::create(dest).map_err(io)?;
        let mut written = 0u64;
        while let Some(chunk) = resp.chunk().await.map_err(|source| ClientError::Http {
            url: url.clone(),
            source: source.without_url(),
        })? {
            file.write_all(&chunk).map_err(io)?;
            written += chunk.len() as u64;
        }
        file.sync_all().map_err(io)?;
        Ok(written)
    }

    /// `GET /v1/blobs/{sha256}` (operator or any agent): streams the blob into `dest`
    /// (created or truncated), unverified: the caller checks size and digest.
    /// Reading stops as soon as more than `limit` bytes arrived (the manifest's
    /// size): what is past the limit is neither read on nor written, so `dest` never
    /// holds more than `limit` bytes. Returns the bytes received, which exceed
    /// `limit` exactly when the blob was too long.
    ///
    /// # Errors
    /// [`ClientError`]; an unknown blob is 404; a local write failure is
    /// [`ClientError::Io`].
    pub async fn download_blob(
        &self,
        sha256: &str,
        dest: &std::path::Path,
        limit: u64,
    ) -> Result<u64, ClientError> {
        self.fetch_blob(sha256, dest, limit, false).await
    }

    /// As [`Client::download_blob`], continuing from the bytes `dest` already
    /// holds (an interrupted download's): asks only for the rest (`Range:
    /// bytes=N-`, RFC 9110 §14) and appends it; starts over when the authority
    /// sends the whole blob instead (200). `dest` holding the whole blob already
    /// (416: nothing past it) returns its length. The bytes received so far stay
    /// in `dest` when the transfer fails, for the next call to continue from.
    ///
    /// # Errors
    /// As [`Client::download_blob`].
    pub async fn resume_blob(
        &self,
        sha256: &str,
        dest: &std::path::Path,
        limit: u64,
    ) -> Result<u64, ClientError> {
        self.fetch_blob(sha256, dest, limit, true).await
    }

    async fn fetch_blob(
        &self,
        sha256: &str,
        dest: &std::path::Path,
        limit: u64,
        resume: bool,
    ) -> Result<u64, ClientError> {
        use std::io::Write;
        let url = format!("{}/v1/blobs/{sha256}", self.base());
        let io = |source| ClientError::Io {
            path: dest.to_path_buf(),
            source,
        };
        let have = if resume {
            match std::fs::metadata(dest) {
                Ok(m) if m.len() <= limit => m.len(),
                Ok(_) => 0,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
                Err(e) => return Err(io(e)),
            }
        } else {
            0
        };
        let range = (have > 0).then(|| format!("bytes={have}-"));
        let mut resp = match self
            .raw_get_with(&url, Duration::from_secs(3600), range.as_deref())
            .await
        {
            Ok(r) => r,
            Err(ClientError::Api { status: 416, .. }) if have > 0 => return Ok(have),
            Err(e) => return Err(e),
        };
        let continues = have > 0
            && resp.status().as_u16() == 206
            && resp
                .headers()
                .get(reqwest::header::CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with(&format!("bytes {have}-")));
        let (mut file, mut written) = if continues {
            let f = std::fs::OpenOptions::new()
                .append(true)
                .open(dest)
                .map_err(io)?;
            (f, have)
        } else {
            (std::fs::File::create(dest).map_err(io)?, 0)
        };
        while let Some(chunk) = resp.chunk().await.map_err(|source| ClientError::Http {
            url: url.clone(),
            source: source.without_url(),
        })? {
            let received = written + chunk.len() as u64;
            if received > limit {
                // Read no further, and write nothing past the limit: a blob longer
                // than its manifest never fills the disk.
                file.sync_all().map_err(io)?;
                return Ok(received);
            }
            file.write_all(&chunk).map_err(io)?;
            written = received;
        }
        file.sync_all().map_err(io)?;
        Ok(written)
    }

    /// `POST /v1/releases` (operator): relays a signed manifest.
    ///
    /// # Errors
    /// [`ClientError`]; an unparsable manifest or signature, or a blob the manifest
    /// names that was not uploaded, is 400; the same name and version with other
    /// bytes is 409.
    pub async fn publish_release(
        &self,
        req: &crate::wire::PublishReleaseRequest,
    ) -> Result<crate::wire::ReleaseDto, ClientError> {
        self.post("/v1/releases", req).await
    }

    /// `GET /v1/releases` (operator): every release, newest first.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn releases(&self) -> Result<Vec<crate::wire::ReleaseDto>, ClientError> {
        self.get("/v1/releases").await
    }

    /// `POST /v1/rollouts` (operator).
    ///
    /// # Errors
    /// [`ClientError`]; an unknown release is 404, another active rollout of the
    /// same name 409, no matching host 400.
    pub async fn create_rollout(
        &self,
        req: &crate::wire::CreateRolloutRequest,
    ) -> Result<crate::wire::RolloutDto, ClientError> {
        self.post("/v1/rollouts", req).await
    }

    /// `POST /v1/rollbacks` (operator): a rollback of a halted or finished rollout,
    /// created awaiting approval.
    ///
    /// # Errors
    /// [`ClientError`]; an unknown rollout is 404, one still running or another
    /// active rollout of the same release 409, no host changed or a previous release
    /// no longer published 400.
    pub async fn create_rollback(
        &self,
        req: &crate::wire::CreateRollbackRequest,
    ) -> Result<crate::wire::RolloutDto, ClientError> {
        self.post("/v1/rollbacks", req).await
    }

    /// `GET /v1/rollouts` (operator).
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn rollouts(&self) -> Result<crate::wire::RolloutsResponse, ClientError> {
        self.get("/v1/rollouts").await
    }

    /// `GET /v1/rollouts/{id}` (operator).
    ///
    /// # Errors
    /// [`ClientError`]; an unknown id is 404.
    pub async fn rollout(&self, id: u64) -> Result<crate::wire::RolloutDto, ClientError> {
        self.get(&format!("/v1/rollouts/{id}")).await
    }

    /// `POST /v1/rollouts/{id}/{action}` (operator): `approve`, `pause`, `resume` or
    /// `abort`.
    ///
    /// # Errors
    /// [`ClientError`]; an action the rollout's phase does not allow is 409.
    pub async fn rollout_action(
        &self,
        id: u64,
        action: &str,
    ) -> Result<crate::wire::RolloutDto, ClientError> {
        self.post(
            &format!("/v1/rollouts/{id}/{action}"),
            &serde_json::json!({}),
        )
        .await
    }

    /// `GET /v1/hosts/{host}/release?index=N&wait=…` (the host's agent): its release
    /// assignment, long-polled like [`Client::snapshot`].
    ///
    /// # Errors
    /// [`ClientError`]; another host's assignment is 403.
    pub async fn release_assignment(
        &self,
        host: &str,
        index: u64,
        wait: Duration,
    ) -> Result<crate::wire::ReleaseAssignment, ClientError> {
        self.long_poll(
            &format!(
                "/v1/hosts/{host}/release?index={index}&wait={}ms",
                wait.as_millis()
            ),
            wait,
        )
        .await
    }

    /// `POST /v1/hosts/{host}/release` (the host's agent): what it measured and where
    /// its update stands (`flotilla_release::rollout::HostUpdate` as JSON).
    ///
    /// # Errors
    /// [`ClientError`]; another host's is 403.
    pub async fn report_update<T: serde::Serialize + ?Sized>(
        &self,
        host: &str,
        update: &T,
    ) -> Result<(), ClientError> {
        self.post_short(&format!("/v1/hosts/{host}/release"), update)
            .await
    }

    /// `POST /v1/hosts/{host}/unskip` (operator): asks that release `req.name` at
    /// `req.version` be allowed on `host` again (removed from its skip lists by its
    /// agent). The request as stored, pending; or the one already pending for that
    /// release version on `host`.
    ///
    /// # Errors
    /// [`ClientError`]; [`ClientError::Api`] with 404 for a host neither in the
    /// selected revision nor reported by an agent, 400 for a host that is not an
    /// agent host, a name or version that is not a release word, or a component
    /// release no component of the host declares.
    pub async fn request_unskip(
        &self,
        host: &str,
        req: &crate::wire::CreateUnskipRequest,
    ) -> Result<crate::wire::UnskipDto, ClientError> {
        self.post(&format!("/v1/hosts/{host}/unskip"), req).await
    }

    /// `GET /v1/unskips/{id}?wait=…` (operator): unskip request `id`, answered as soon
    /// as it is done or carries the agent's error, else after about `wait` (the
    /// authority caps it at 5 min) as it stands.
    ///
    /// # Errors
    /// [`ClientError`]; an unknown id is [`ClientError::Api`] with 404.
    pub async fn unskip(
        &self,
        id: u64,
        wait: Duration,
    ) -> Result<crate::wire::UnskipDto, ClientError> {
        let url = format!(
            "{}/v1/unskips/{id}?wait={}ms",
            self.base(),
            wait.as_millis()
        );
        let timeout = wait + Duration::from_secs(15);
        self.send(self.http.get(&url).timeout(timeout), &url).await
    }

    /// `flotilla release unskip`: asks the authority to allow release `name` at
    /// `version` on `host` again ([`Client::request_unskip`]), then, with `deadline`,
    /// waits up to that long for the host's agent to confirm it: the request `done`,
    /// with the skip entries it cleared (none when the host's skip lists held none).
    /// With `deadline` `None` it returns the request at once (pending, unless it was
    /// done already).
    ///
    /// # Errors
    /// [`UnskipError::Client`]: the authority refused (unknown host, not an agent
    /// host…) or could not be reached; [`UnskipError::Failed`]: the agent could not
    /// change a skip list; [`UnskipError::NotConfirmed`]: not done within `deadline`.
    /// The request stays pending in the last two.
    pub async fn unskip_and_wait(
        &self,
        host: &str,
        name: &str,
        version: &str,
        deadline: Option<Duration>,
    ) -> Result<crate::wire::UnskipDto, UnskipError> {
        let started = std::time::Instant::now();
        let mut u = self
            .request_unskip(
                host,
                &crate::wire::CreateUnskipRequest {
                    name: name.to_string(),
                    version: version.to_string(),
                },
            )
            .await?;
        let Some(deadline) = deadline else {
            return Ok(u);
        };
        loop {
            if u.state == crate::wire::UnskipState::Done {
                return Ok(u);
            }
            if u.error.is_some() {
                return Err(UnskipError::Failed(Box::new(u)));
            }
            let left = deadline.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(UnskipError::NotConfirmed {
                    unskip: Box::new(u),
                    waited: deadline,
                });
            }
            u = self.unskip(u.id, left).await?;
        }
    }

    /// `GET` of any path, as text (for `/metrics`, `/healthz`).
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn get_text(&self, path: &str) -> Result<String, ClientError> {
        let url = format!("{}{path}", self.base());
        self.raw_get(&url, Duration::from_secs(30))
            .await?
            .text()
            .await
            .map_err(|source| ClientError::Http {
                url,
                source: source.without_url(),
            })
    }

    /// `GET url` with the credential: the response when it is a success, else its
    /// error body as [`ClientError::Api`] (the body's text when it is not an
    /// [`ApiError`]).
    async fn raw_get(
        &self,
        url: &str,
        timeout: Duration,
    ) -> Result<reqwest::Response, ClientError> {
        self.raw_get_with(url, timeout, None).await
    }

    /// [`Client::raw_get`] with a `Range` header when given.
    async fn raw_get_with(
        &self,
        url: &str,
        timeout: Duration,
        range: Option<&str>,
    ) -> Result<reqwest::Response, ClientError> {
        let http = |source: reqwest::Error| ClientError::Http {
            url: url.to_string(),
            source: source.without_url(),
        };
        let mut req = self.http.get(url).timeout(timeout);
        if let Some(r) = range {
            req = req.header(reqwest::header::RANGE, r);
        }
        let resp = self.execute(req).await.map_err(http)?;
        let status = resp.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(resp);
        }
        let text = resp.text().await.map_err(http)?;
        Err(ClientError::Api {
            url: url.to_string(),
            status,
            error: serde_json::from_str(&text).unwrap_or(ApiError {
                code: "http".into(),
                message: text,
                current: None,
            }),
        })
    }

    /// A long poll of `path_and_query` (which names `wait`): the server answers within
    /// `wait` + `wait`/16; allowed for, with the network.
    async fn long_poll<T: serde::de::DeserializeOwned>(
        &self,
        path_and_query: &str,
        wait: Duration,
    ) -> Result<T, ClientError> {
        let url = format!("{}{path_and_query}", self.base());
        let timeout = wait + wait / 8 + Duration::from_secs(15);
        self.send(self.http.get(&url).timeout(timeout), &url).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses_are_each_https_once_in_order_as_requests_show_them() {
        assert_eq!(
            server_addresses(" https://B.example:7443/ ,https://a:443,https://b.example:7443")
                .unwrap(),
            ["https://b.example:7443", "https://a"]
        );
        assert!(matches!(
            server_addresses("https://a,http://b"),
            Err(ClientError::Url(u)) if u == "`http://b` is not an https:// URL of the authority"
        ));
        assert!(server_addresses(" , ").is_err());
        for (bad, says) in [
            (
                "https://u:secret@a:7443",
                "`https://u:***@a:7443` holds a user or password",
            ),
            ("https://a:7443?x=1", "holds a query or fragment"),
            ("https://a:7443/prefix", "holds a path"),
            ("https://a:99999", "invalid port number"),
        ] {
            let e = server_addresses(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }

    #[test]
    fn only_an_unavailable_answer_moves_a_change_to_another_address() {
        use reqwest::{Method, StatusCode};
        for (method, status, moves) in [
            (Method::POST, StatusCode::SERVICE_UNAVAILABLE, true),
            (Method::POST, StatusCode::BAD_GATEWAY, true),
            (Method::POST, StatusCode::INTERNAL_SERVER_ERROR, false),
            (Method::GET, StatusCode::INTERNAL_SERVER_ERROR, true),
            (Method::GET, StatusCode::CONFLICT, false),
            (Method::PUT, StatusCode::OK, false),
        ] {
            assert_eq!(
                answer_fails_over(&method, status),
                moves,
                "{method} {status}"
            );
        }
    }

    #[test]
    fn a_client_with_several_addresses_starts_on_the_first_and_clones_share_it() {
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(crate::tls::native_roots_config().unwrap())
            .build()
            .unwrap();
        let c = Client {
            bases: server_addresses("https://127.0.0.1:1,https://127.0.0.1:2")
                .unwrap()
                .into(),
            current: Arc::new(AtomicUsize::new(0)),
            http,
            credential: None,
        };
        assert_eq!(c.url(), "https://127.0.0.1:1");
        assert_eq!(c.urls().len(), 2);
        let d = c.clone();
        c.current.store(1, Ordering::Relaxed);
        assert_eq!(d.url(), "https://127.0.0.1:2");
        assert_eq!(c.index_of("https://127.0.0.1:2/v1/status?x=1"), Some(1));
        assert_eq!(c.index_of("https://127.0.0.1:20/v1/status"), None);
    }
}
