//! Probes: one check of a component's promise ([`check`], [`observe`]), and waiting
//! for readiness ([`wait_ready`]).
//!
//! A probe never errors: every check yields a [`ProbeOutcome`] with `passed`, a short
//! human `evidence` line, the `latency` and machine-readable `detail`. Process state
//! is not service health: `process` proves existence, `tcp` a listener, `http` an
//! application answer, `request` the route, `log` that the component said something.
//!
//! Everything here is `async` and needs a tokio runtime with the time, net, process
//! (for `exec`) and blocking-pool facilities (the `process` and `log` checks read
//! files on the blocking pool). HTTP checks use a fresh client per check with no
//! connection pooling, no proxy and no redirects: each check opens a new connection,
//! which is what proves the listener. Plain `http://` only (see the crate docs).

use crate::identity::{self, IdentityMatch, RuntimeIdentity};
use crate::logs::scan_log;
use flotilla_model::topology::{Check, Probe};
use flotilla_model::values::{EnvValue, StatusRange};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Longest body excerpt kept in [`ProbeOutcome::detail`], in bytes.
pub const BODY_EXCERPT_BYTES: usize = 512;
/// Most of a response body read for `body_contains` / `json_pointer` (1 MiB).
pub const BODY_READ_LIMIT: usize = 1 << 20;

/// What a check needs to know about the component it checks.
pub struct ProbeContext<'a> {
    /// The component's name (for messages).
    pub component: String,
    /// The identity recorded when it was started: what `process` checks compare
    /// against. `None` for external components (a `process` check then fails as
    /// misconfigured).
    pub identity: Option<RuntimeIdentity>,
    /// Its log file, for `log` checks.
    pub log_path: Option<PathBuf>,
    /// Only log bytes at or after this offset count (use
    /// [`crate::process::StartedProcess::log_start_offset`]), so a "ready" line from
    /// a previous run is ignored.
    pub log_start_offset: u64,
    /// Resolves secret names used in `request` headers (`EnvValue::Secret`), e.g.
    /// `&|n| resolver.get(n)` with a [`crate::secrets::SecretResolver`]. Resolved
    /// values are redacted from every outcome.
    pub secrets: &'a (dyn Fn(&str) -> Option<String> + Send + Sync),
}

impl fmt::Debug for ProbeContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProbeContext")
            .field("component", &self.component)
            .field("identity", &self.identity)
            .field("log_path", &self.log_path)
            .field("log_start_offset", &self.log_start_offset)
            .finish_non_exhaustive()
    }
}

/// A secrets callback that knows no secret.
pub fn no_secrets(_: &str) -> Option<String> {
    None
}

impl ProbeContext<'static> {
    /// A context with no identity, no log and no secrets; set the fields you need.
    pub fn new(component: impl Into<String>) -> Self {
        ProbeContext {
            component: component.into(),
            identity: None,
            log_path: None,
            log_start_offset: 0,
            secrets: &no_secrets,
        }
    }
}

/// The result of one check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeOutcome {
    /// Whether the check passed.
    pub passed: bool,
    /// The check cannot pass as configured (bad regex, unknown secret, empty argv,
    /// missing command, no identity for a `process` check…): retrying is pointless.
    /// [`wait_ready`] gives up at once on such an outcome.
    pub misconfigured: bool,
    /// One short human line, e.g.
    /// `GET http://127.0.0.1:8080/health → 503 Service Unavailable (12 ms)`,
    /// `connect 127.0.0.1:8080: connection refused (0 ms)`,
    /// `pid 4242 alive (identity matches)`, `log line 17 matched /listening/`.
    pub evidence: String,
    /// How long the check took (serialised as fractional milliseconds, `latency_ms`).
    #[serde(rename = "latency_ms", with = "crate::serde_ms")]
    pub latency: Duration,
    /// When the check started, in milliseconds since the Unix epoch.
    pub checked_at_ms: u64,
    /// Machine-readable facts: `{"kind": "http", "status": 503, "body_excerpt": "…"}`
    /// and the like (body excerpts ≤ 512 bytes, secret values replaced by
    /// `[secret NAME]`).
    pub detail: Value,
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

fn human(d: Duration) -> String {
    if d.as_millis() < 1000 {
        ms(d)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// Builds outcomes for one check, timing from its creation.
struct Recorder {
    t0: Instant,
    at: u64,
    /// (name, value) of secrets resolved for this check, to redact.
    secrets: Vec<(String, String)>,
}

impl Recorder {
    fn new() -> Self {
        Recorder {
            t0: Instant::now(),
            at: crate::this_process::now_ms().max(0) as u64,
            secrets: Vec::new(),
        }
    }
    fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (name, value) in &self.secrets {
            if !value.is_empty() {
                out = out.replace(value.as_str(), &format!("[secret {name}]"));
            }
        }
        out
    }
    fn redact_value(&self, v: Value) -> Value {
        if self.secrets.is_empty() {
            return v;
        }
        match v {
            Value::String(s) => Value::String(self.redact(&s)),
            Value::Array(a) => Value::Array(a.into_iter().map(|x| self.redact_value(x)).collect()),
            Value::Object(o) => Value::Object(
                o.into_iter()
                    .map(|(k, x)| (k, self.redact_value(x)))
                    .collect(),
            ),
            other => other,
        }
    }
    fn done(&self, passed: bool, evidence: String, detail: Value) -> ProbeOutcome {
        ProbeOutcome {
            passed,
            misconfigured: false,
            evidence: self.redact(&evidence),
            latency: self.t0.elapsed(),
            checked_at_ms: self.at,
            detail: self.redact_value(detail),
        }
    }
    fn misconfigured(&self, evidence: String, detail: Value) -> ProbeOutcome {
        ProbeOutcome {
            misconfigured: true,
            ..self.done(false, evidence, detail)
        }
    }
}

/// Runs one check with a time limit of `timeout` and reports what it saw.
///
/// - `process`: [`crate::identity::verify`] of `ctx.identity`: passes while the
///   same process runs.
/// - `tcp`: a TCP connect to `address` (host names resolved) is accepted.
/// - `http`: `GET url`; passes when the status is in range, the body contains
///   `body_contains`, and `json_pointer` exists in the JSON body (and equals
///   `json_equals` when set).
/// - `exec`: runs argv (stdin `/dev/null`, own process group, this process's
///   environment and cwd); exit 0 passes. On timeout the whole group is SIGKILLed.
/// - `request`: `method url` with headers (secrets resolved through `ctx.secrets`)
///   and `body`, or `json` (sent with `Content-Type: application/json`); the same
///   expectations as `http`.
/// - `log`: a line of `ctx.log_path` written after `ctx.log_start_offset` matches
///   the regex.
///
/// Never fails; see [`ProbeOutcome`].
pub async fn check(check: &Check, ctx: &ProbeContext<'_>, timeout: Duration) -> ProbeOutcome {
    match check {
        Check::Process => check_process(ctx).await,
        Check::Tcp {
            address,
            stays_open,
            ..
        } => check_tcp(address, stays_open.map(|d| d.0), timeout).await,
        Check::Http {
            url,
            status,
            body_contains,
            json_pointer,
            json_equals,
            ..
        } => {
            let req = HttpReq {
                kind: "http",
                method: "GET",
                url,
                headers: None,
                body: None,
                json: None,
            };
            let expect = Expect {
                status: *status,
                body_contains: body_contains.as_deref(),
                json_pointer: json_pointer.as_deref(),
                json_equals: json_equals.as_ref(),
            };
            check_http(req, expect, ctx, timeout).await
        }
        Check::Request {
            url,
            method,
            headers,
            body,
            json,
            status,
            body_contains,
            json_pointer,
            json_equals,
            ..
        } => {
            let req = HttpReq {
                kind: "request",
                method,
                url,
                headers: Some(headers),
                body: body.as_deref(),
                json: json.as_ref(),
            };
            let expect = Expect {
                status: *status,
                body_contains: body_contains.as_deref(),
                json_pointer: json_pointer.as_deref(),
                json_equals: json_equals.as_ref(),
            };
            check_http(req, expect, ctx, timeout).await
        }
        Check::Exec { command } => check_exec(command, timeout).await,
        Check::Log { pattern } => check_log(pattern, ctx).await,
    }
}

/// One check of `probe` with its own timeout: what status uses for liveness and
/// health. Thresholds (`success_threshold`, `failure_threshold`) span several
/// observations and are the caller's to count.
pub async fn observe(probe: &Probe, ctx: &ProbeContext<'_>) -> ProbeOutcome {
    check(&probe.check, ctx, probe.timeout.0).await
}

async fn check_process(ctx: &ProbeContext<'_>) -> ProbeOutcome {
    let rec = Recorder::new();
    let Some(expected) = ctx.identity.clone() else {
        return rec.misconfigured(
            format!(
                "no runtime identity recorded for `{}`: a process check needs a component started by flotilla",
                ctx.component
            ),
            json!({"kind": "process"}),
        );
    };
    let pid = expected.pid;
    let verdict = tokio::task::spawn_blocking(move || identity::verify(&expected)).await;
    match verdict {
        Ok(Ok((IdentityMatch::Same, _))) => rec.done(
            true,
            format!("pid {pid} alive (identity matches)"),
            json!({"kind": "process", "pid": pid, "identity": "same"}),
        ),
        Ok(Ok((IdentityMatch::Gone, _))) => rec.done(
            false,
            format!("pid {pid} is gone"),
            json!({"kind": "process", "pid": pid, "identity": "gone"}),
        ),
        Ok(Ok((IdentityMatch::Reused { why }, _))) => rec.done(
            false,
            format!("pid {pid} now belongs to another process ({why})"),
            json!({"kind": "process", "pid": pid, "identity": "reused", "why": why}),
        ),
        Ok(Err(e)) => rec.done(
            false,
            format!("pid {pid}: cannot measure: {e}"),
            json!({"kind": "process", "pid": pid, "error": e.to_string()}),
        ),
        Err(e) => rec.done(
            false,
            format!("pid {pid}: measuring task failed: {e}"),
            json!({"kind": "process", "pid": pid}),
        ),
    }
}

fn io_reason(e: &std::io::Error) -> String {
    use std::io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused => "connection refused".into(),
        ConnectionReset => "connection reset".into(),
        ConnectionAborted => "connection aborted".into(),
        TimedOut => "timed out".into(),
        AddrNotAvailable => "address not available".into(),
        _ => e.to_string(),
    }
}

async fn check_tcp(address: &str, stays_open: Option<Duration>, timeout: Duration) -> ProbeOutcome {
    let rec = Recorder::new();
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(address)).await {
        Ok(Ok(mut stream)) => {
            let peer = stream.peer_addr().map(|a| a.to_string()).ok();
            if let Some(hold) = stays_open {
                // Closed by the peer (EOF or reset) within `hold`: accepted, then dropped.
                use tokio::io::AsyncReadExt;
                let mut byte = [0u8; 1];
                if let Ok(r) = tokio::time::timeout(hold, stream.read(&mut byte)).await {
                    if matches!(r, Ok(0) | Err(_)) {
                        return rec.done(
                            false,
                            format!(
                                "connect {address}: accepted, then closed by the other end after {} (a forward whose far end is unreachable)",
                                ms(rec.t0.elapsed())
                            ),
                            json!({"kind": "tcp", "address": address, "peer": peer, "error": "closed"}),
                        );
                    }
                }
            }
            drop(stream);
            rec.done(
                true,
                format!("connect {address}: accepted ({})", ms(rec.t0.elapsed())),
                json!({"kind": "tcp", "address": address, "peer": peer}),
            )
        }
        Ok(Err(e)) => rec.done(
            false,
            format!(
                "connect {address}: {} ({})",
                io_reason(&e),
                ms(rec.t0.elapsed())
            ),
            json!({"kind": "tcp", "address": address, "error": io_reason(&e)}),
        ),
        Err(_) => rec.done(
            false,
            format!("connect {address}: no answer within {}", human(timeout)),
            json!({"kind": "tcp", "address": address, "error": "timeout"}),
        ),
    }
}

struct HttpReq<'c> {
    kind: &'static str,
    method: &'c str,
    url: &'c str,
    headers: Option<&'c BTreeMap<String, EnvValue>>,
    body: Option<&'c str>,
    json: Option<&'c Value>,
}

struct Expect<'c> {
    status: StatusRange,
    body_contains: Option<&'c str>,
    json_pointer: Option<&'c str>,
    json_equals: Option<&'c Value>,
}

/// A reqwest error as a short reason: "connection refused", "no answer within 1 s"…
fn reqwest_reason(e: &reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        return format!("no answer within {}", human(timeout));
    }
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io_reason(io);
        }
        src = s.source();
    }
    // No IO error: describe the innermost cause (e.g. "connection closed before
    // message completed").
    let mut last = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        last = s.to_string();
        src = s.source();
    }
    last
}

fn excerpt(body: &[u8]) -> String {
    let mut end = body.len().min(BODY_EXCERPT_BYTES);
    let text = loop {
        match std::str::from_utf8(&body[..end]) {
            Ok(t) => break t.to_string(),
            Err(e) if e.valid_up_to() > 0 && end - e.valid_up_to() < 4 => end = e.valid_up_to(),
            Err(_) => break String::from_utf8_lossy(&body[..end]).into_owned(),
        }
    };
    text
}

fn short_json(v: &Value) -> String {
    ellipsize(v.to_string())
}

/// `s`, or its first 77 bytes (on a character boundary) and `…` when longer than 80.
fn ellipsize(s: String) -> String {
    if s.len() <= 80 {
        return s;
    }
    let mut end = 77;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

async fn check_http(
    req: HttpReq<'_>,
    expect: Expect<'_>,
    ctx: &ProbeContext<'_>,
    timeout: Duration,
) -> ProbeOutcome {
    let mut rec = Recorder::new();
    let method_name = req.method.to_ascii_uppercase();
    let what = format!("{method_name} {}", req.url);
    let base = json!({"kind": req.kind, "method": method_name, "url": req.url});
    let method = match reqwest::Method::from_bytes(method_name.as_bytes()) {
        Ok(m) => m,
        Err(_) => {
            return rec.misconfigured(
                format!("{what}: `{}` is not an HTTP method", req.method),
                base,
            )
        }
    };
    ensure_tls_provider();
    let client = match reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .pool_max_idle_per_host(0)
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            return rec.misconfigured(format!("{what}: cannot build an HTTP client: {e}"), base)
        }
    };
    let mut builder = client.request(method, req.url);
    if let Some(headers) = req.headers {
        for (name, value) in headers {
            let value = match value {
                // `${secret.NAME}` inside a literal (e.g. "Bearer ${secret.KEY}").
                EnvValue::Literal(v) if v.contains("${secret.") => {
                    let mut missing = None;
                    let text = flotilla_model::interp::substitute(v, |r| {
                        let name = r.strip_prefix("secret.")?;
                        match (ctx.secrets)(name) {
                            Some(val) => {
                                rec.secrets.push((name.to_string(), val.clone()));
                                Some(val)
                            }
                            None => {
                                missing = Some(name.to_string());
                                Some(String::new())
                            }
                        }
                    });
                    match (text, missing) {
                        (Ok(t), None) => t,
                        (_, Some(secret)) => {
                            return rec.misconfigured(
                                format!("{what}: secret `{secret}` for header `{name}` is not set"),
                                base,
                            )
                        }
                        (Err(e), None) => {
                            return rec.misconfigured(format!("{what}: header `{name}`: {e}"), base)
                        }
                    }
                }
                EnvValue::Literal(v) => v.clone(),
                EnvValue::Secret(secret) => match (ctx.secrets)(secret) {
                    Some(v) => {
                        rec.secrets.push((secret.clone(), v.clone()));
                        v
                    }
                    None => {
                        return rec.misconfigured(
                            format!("{what}: secret `{secret}` for header `{name}` is not set"),
                            base,
                        )
                    }
                },
            };
            builder = builder.header(name.as_str(), value);
        }
    }
    if let Some(j) = req.json {
        builder = builder.json(j);
    } else if let Some(b) = req.body {
        builder = builder.body(b.to_string());
    }
    let request = match builder.build() {
        Ok(r) => r,
        Err(e) => {
            return rec.misconfigured(
                format!("{what}: invalid request: {}", reqwest_reason(&e, timeout)),
                base,
            )
        }
    };
    let mut resp = match client.execute(request).await {
        Ok(r) => r,
        Err(e) => {
            let reason = reqwest_reason(&e, timeout);
            let mut detail = base;
            detail["error"] = json!(reason);
            return rec.done(
                false,
                format!("{what}: {reason} ({})", ms(rec.t0.elapsed())),
                detail,
            );
        }
    };
    let status = resp.status();
    let mut body = Vec::new();
    let mut truncated = false;
    let read_err = loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                let room = BODY_READ_LIMIT - body.len();
                if chunk.len() > room {
                    body.extend_from_slice(&chunk[..room]);
                    truncated = true;
                    break None;
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break None,
            Err(e) => break Some(reqwest_reason(&e, timeout)),
        }
    };
    let elapsed = rec.t0.elapsed();
    let status_text = match status.canonical_reason() {
        Some(r) => format!("{} {r}", status.as_u16()),
        None => status.as_u16().to_string(),
    };
    let head = format!("{what} → {status_text} ({})", ms(elapsed));
    let mut detail = base;
    detail["status"] = json!(status.as_u16());
    detail["body_excerpt"] = json!(excerpt(&body));
    if truncated {
        detail["body_truncated_at"] = json!(BODY_READ_LIMIT);
    }
    if let Some(err) = read_err {
        detail["error"] = json!(err);
        return rec.done(false, format!("{head}; reading the body: {err}"), detail);
    }
    if !expect.status.contains(status.as_u16()) {
        return rec.done(false, format!("{head}; expected {}", expect.status), detail);
    }
    if let Some(needle) = expect.body_contains {
        if !String::from_utf8_lossy(&body).contains(needle) {
            return rec.done(false, format!("{head}; body lacks {needle:?}"), detail);
        }
    }
    if let Some(pointer) = expect.json_pointer {
        let parsed: Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return rec.done(false, format!("{head}; body is not JSON ({e})"), detail);
            }
        };
        let Some(found) = parsed.pointer(pointer) else {
            return rec.done(false, format!("{head}; json {pointer} missing"), detail);
        };
        detail["json_value"] = found.clone();
        if let Some(want) = expect.json_equals {
            if found != want {
                return rec.done(
                    false,
                    format!(
                        "{head}; json {pointer} = {}, expected {}",
                        short_json(found),
                        short_json(want)
                    ),
                    detail,
                );
            }
        }
        return rec.done(
            true,
            format!("{head}; json {pointer} = {}", short_json(found)),
            detail,
        );
    }
    rec.done(true, head, detail)
}

/// Makes *ring* the process's rustls crypto provider (once). The HTTP client's
/// TLS (for `https://` probes, verified against the system's roots) takes the
/// process default; the authority's client configures its own.
fn ensure_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err means another provider was installed first: that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn first_line(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let mut end = line.len().min(160);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    Some(line[..end].to_string())
}

async fn check_exec(command: &[String], timeout: Duration) -> ProbeOutcome {
    let rec = Recorder::new();
    let Some((program, args)) = command.split_first() else {
        return rec.misconfigured("exec: empty command".into(), json!({"kind": "exec"}));
    };
    let shown = ellipsize(command.join(" "));
    let what = format!("exec `{shown}`");
    let detail = json!({"kind": "exec", "command": command});
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let fatal = matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
            );
            let out = rec.done(false, format!("{what}: cannot run: {e}"), detail);
            return ProbeOutcome {
                misconfigured: fatal,
                ..out
            };
        }
    };
    let pid = child.id();
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => {
            let took = ms(rec.t0.elapsed());
            let status = crate::process::describe_exit(&out.status);
            let line = if out.status.success() {
                first_line(&out.stdout).or_else(|| first_line(&out.stderr))
            } else {
                first_line(&out.stderr).or_else(|| first_line(&out.stdout))
            };
            let mut detail = detail;
            detail["exit_code"] = json!(out.status.code());
            detail["stdout_excerpt"] = json!(excerpt(&out.stdout));
            detail["stderr_excerpt"] = json!(excerpt(&out.stderr));
            let tail = line.map(|l| format!(": {l}")).unwrap_or_default();
            rec.done(
                out.status.success(),
                format!("{what} → {status} ({took}){tail}"),
                detail,
            )
        }
        Ok(Err(e)) => rec.done(false, format!("{what}: waiting failed: {e}"), detail),
        Err(_) => {
            if let Some(pid) = pid {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            rec.done(
                false,
                format!("{what}: no exit within {}: killed", human(timeout)),
                detail,
            )
        }
    }
}

async fn check_log(pattern: &str, ctx: &ProbeContext<'_>) -> ProbeOutcome {
    let rec = Recorder::new();
    let base = json!({"kind": "log", "pattern": pattern});
    let re = match regex::Regex::new(pattern) {
        Ok(r) => r,
        Err(e) => return rec.misconfigured(format!("log: invalid pattern /{pattern}/: {e}"), base),
    };
    let Some(path) = ctx.log_path.clone() else {
        return rec.misconfigured(
            format!("log: no log file known for `{}`", ctx.component),
            base,
        );
    };
    let offset = ctx.log_start_offset;
    let scan_path = path.clone();
    let scanned = tokio::task::spawn_blocking(move || scan_log(&scan_path, offset, &re)).await;
    let mut detail = base;
    detail["file"] = json!(path);
    detail["start_offset"] = json!(offset);
    match scanned {
        Ok(Ok(scan)) => match scan.hit {
            Some(hit) => {
                let mut line = hit.line.clone();
                if line.len() > 200 {
                    let mut end = 200;
                    while !line.is_char_boundary(end) {
                        end -= 1;
                    }
                    line.truncate(end);
                }
                detail["line_no"] = json!(hit.line_no);
                detail["line"] = json!(line);
                let of = if hit.file != path {
                    format!(" of {}", hit.file.display())
                } else {
                    String::new()
                };
                rec.done(
                    true,
                    format!("log line {}{of} matched /{pattern}/", hit.line_no),
                    detail,
                )
            }
            None => {
                detail["lines_scanned"] = json!(scan.scanned);
                rec.done(
                    false,
                    format!(
                        "no line of {} after byte {offset} matches /{pattern}/ ({} lines)",
                        path.display(),
                        scan.scanned
                    ),
                    detail,
                )
            }
        },
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => rec.done(
            false,
            format!("log {} does not exist yet", path.display()),
            detail,
        ),
        Ok(Err(e)) => rec.done(false, format!("log {}: {e}", path.display()), detail),
        Err(e) => rec.done(false, format!("log: scanning task failed: {e}"), detail),
    }
}

/// The pace of readiness checks that reach the component itself (`http`, `request`,
/// `exec`, `log`): the delay after the n-th attempt is `steps[n]` (the last step
/// repeating), capped by the probe's `period`, and at least `floor` once `settle` has
/// passed since the pace (re)started. With the defaults (5, 10, 20, 50, 100 ms; 1 s;
/// 100 ms) that is about 14 checks in the first second and at most 10 per second
/// after it, whatever the period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    /// Delays after the first, second… attempt; the last one repeats.
    pub steps: Vec<Duration>,
    /// From this long after the pace (re)started, delays are at least `floor`.
    pub settle: Duration,
    /// The least delay after `settle`.
    pub floor: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            steps: [5, 10, 20, 50, 100]
                .into_iter()
                .map(Duration::from_millis)
                .collect(),
            settle: Duration::from_secs(1),
            floor: Duration::from_millis(100),
        }
    }
}

impl Backoff {
    /// The delay after attempt `n` (from 0), `since` the pace (re)started, for a
    /// probe whose period is `period`.
    pub fn delay(&self, n: usize, since: Duration, period: Duration) -> Duration {
        let step = self
            .steps
            .get(n)
            .or(self.steps.last())
            .copied()
            .unwrap_or(self.floor);
        let d = step.min(period);
        if since >= self.settle {
            d.max(self.floor)
        } else {
            d
        }
    }
}

/// How [`wait_ready_with`] waits.
pub struct WaitOptions<'a> {
    /// Give up at this instant.
    pub deadline: Instant,
    /// "Has it died?": `Some(description)` once the component's process has exited,
    /// e.g. `&|| started.child.exit_description()` (see
    /// [`crate::process::ChildWatch::exit_description`]). Checked before every
    /// attempt and every 10 ms while waiting, so a crash ends the wait within ~10 ms.
    pub exited: Option<ExitedFn<'a>>,
    /// The first delay between polls of a silent signal (default 5 ms): a `tcp` or
    /// `process` check, or whether the port of an `http`/`request` probe listens.
    pub first_poll: Duration,
    /// The delay between later polls of a silent signal (default 10 ms).
    pub poll: Duration,
    /// How long `tcp` and `process` checks are polled every `poll` (default 10 s);
    /// after that their delay doubles up to the probe's `period`. (The listening
    /// port of an `http`/`request` probe is polled every `poll` throughout.)
    pub fast_phase: Duration,
    /// The pace of checks that reach the component (`http`, `request`, `exec`, `log`).
    pub backoff: Backoff,
}

impl<'a> WaitOptions<'a> {
    /// Wait until `deadline`, no exit callback, the default pace (see the fields).
    pub fn until(deadline: Instant) -> Self {
        WaitOptions {
            deadline,
            exited: None,
            first_poll: Duration::from_millis(5),
            poll: Duration::from_millis(10),
            fast_phase: Duration::from_secs(10),
            backoff: Backoff::default(),
        }
    }

    /// The same, with an exit callback.
    pub fn exited(mut self, f: ExitedFn<'a>) -> Self {
        self.exited = Some(f);
        self
    }
}

impl fmt::Debug for WaitOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitOptions")
            .field("deadline", &self.deadline)
            .field("exited", &self.exited.is_some())
            .field("first_poll", &self.first_poll)
            .field("poll", &self.poll)
            .field("fast_phase", &self.fast_phase)
            .field("backoff", &self.backoff)
            .finish()
    }
}

/// Why [`wait_ready`] gave up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "reason")]
pub enum WaitFailure {
    /// The deadline passed without `success_threshold` consecutive passes.
    Deadline,
    /// The component's process exited.
    Exited {
        /// As reported by the exit callback, e.g. "pid 4242 exit status 1".
        status: String,
    },
    /// The probe cannot pass as configured (see [`ProbeOutcome::misconfigured`]).
    Misconfigured,
}

impl fmt::Display for WaitFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitFailure::Deadline => f.write_str("deadline passed"),
            WaitFailure::Exited { status } => write!(f, "process exited ({status})"),
            WaitFailure::Misconfigured => f.write_str("probe cannot pass as configured"),
        }
    }
}

/// A readiness wait that did not succeed.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[error("component `{component}` not ready: {reason} after {attempts} attempt(s) in {}{}", human(*waited), last.as_ref().map(|o| format!("; last: {}", o.evidence)).unwrap_or_default())]
pub struct WaitError {
    /// The component waited for.
    pub component: String,
    /// The last outcome seen, if any attempt ran.
    pub last: Option<ProbeOutcome>,
    /// Checks run.
    pub attempts: u32,
    /// From the call to giving up.
    #[serde(rename = "waited_ms", with = "crate::serde_ms")]
    pub waited: Duration,
    /// Why it gave up.
    pub reason: WaitFailure,
}

/// Sleeps until `until`, waking every 10 ms to ask `exited`; the death notice if any.
async fn nap(
    until: Instant,
    exited: Option<&(dyn Fn() -> Option<String> + Send + Sync)>,
) -> Option<String> {
    const SLICE: Duration = Duration::from_millis(10);
    loop {
        if let Some(dead) = exited.and_then(|f| f()) {
            return Some(dead);
        }
        let now = Instant::now();
        if now >= until {
            return None;
        }
        let step = match exited {
            Some(_) => SLICE.min(until - now),
            None => until - now,
        };
        tokio::time::sleep(step).await;
    }
}

/// The "has it died?" callback of a readiness wait: `Some(description)` once the
/// component's process has exited (e.g. `|| started.child.exit_description()`).
pub type ExitedFn<'a> = &'a (dyn Fn() -> Option<String> + Send + Sync);

/// Waits until `probe` passes `success_threshold` times in a row, or `deadline`.
///
/// [`wait_ready_with`] with [`WaitOptions::until`]`(deadline)` (the default pace)
/// and `exited`. See [`wait_ready_with`].
///
/// # Errors
/// As [`wait_ready_with`].
pub async fn wait_ready(
    probe: &Probe,
    ctx: &ProbeContext<'_>,
    deadline: Instant,
    exited: Option<ExitedFn<'_>>,
    on_attempt: impl FnMut(&ProbeOutcome),
) -> Result<ProbeOutcome, WaitError> {
    let mut opts = WaitOptions::until(deadline);
    opts.exited = exited;
    wait_ready_with(probe, ctx, &opts, on_attempt).await
}

/// How a readiness wait paces a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pace {
    /// `tcp`, `process`: the check itself is the cheap, silent signal; polled fast.
    Silent,
    /// `http`, `request`: a request the component answers (and may log), paced by
    /// [`Backoff`], plus a fast silent poll of whether its port listens.
    Endpoint,
    /// `exec`, `log`: paced by [`Backoff`] alone.
    Paced,
}

fn pace_of(check: &Check) -> Pace {
    match check {
        Check::Process | Check::Tcp { .. } => Pace::Silent,
        Check::Http { .. } | Check::Request { .. } => Pace::Endpoint,
        Check::Exec { .. } | Check::Log { .. } => Pace::Paced,
    }
}

/// The addresses behind an `http`/`request` probe's URL, resolved once; `None` when
/// they cannot be known (the wait then paces the probe alone).
async fn listen_gate(check: &Check) -> Option<Vec<std::net::SocketAddr>> {
    let url = match check {
        Check::Http { url, .. } | Check::Request { url, .. } => url,
        _ => return None,
    };
    let url = reqwest::Url::parse(url).ok()?;
    let host = url.host_str()?.to_string();
    let port = url.port_or_known_default()?;
    let addrs: Vec<_> = tokio::net::lookup_host((host.trim_matches(['[', ']']), port))
        .await
        .ok()?
        .collect();
    (!addrs.is_empty()).then_some(addrs)
}

/// Whether something accepts connections at one of `addrs` (connected, then closed
/// at once: nothing is sent, so the component has no request to log).
async fn listening(addrs: &[std::net::SocketAddr], timeout: Duration) -> bool {
    for a in addrs {
        if let Ok(Ok(_)) = tokio::time::timeout(timeout, tokio::net::TcpStream::connect(a)).await {
            return true;
        }
    }
    false
}

/// Whether an `http`/`request` outcome says nothing listens (its connection was
/// refused), rather than that the component answered or is slow.
fn refused(o: &ProbeOutcome) -> bool {
    o.detail.get("status").is_none()
        && o.detail.get("error").and_then(Value::as_str) == Some("connection refused")
}

/// Waits until `probe` passes `success_threshold` times in a row.
///
/// Sleeps `initial_delay` (bounded by the deadline), checks at once, then paces the
/// retries by the kind of check, so that waiting never floods a component with
/// requests (a model server loading for minutes answers 503 to each one, and logs
/// it) yet a component that is ready when it starts listening is noticed within
/// milliseconds:
///
/// - `tcp`, `process` (silent, cheap): retried after `first_poll` (5 ms), then every
///   `poll` (10 ms) for `fast_phase` (10 s), then at doubling delays up to the
///   probe's `period`.
/// - `http`, `request`: retried on the [`Backoff`] pace (5, 10, 20, 50, 100 ms, then
///   every 100 ms: ≤ 10 requests per second after the first second). While the last
///   attempt's connection was refused, whether the URL's port listens is polled
///   every `poll` (a TCP connect, closed at once: no request), and the moment it
///   listens the probe runs and its pace starts over. So a component that answers
///   as soon as it listens is seen ≈ `poll`/2 + one request after it listens, and
///   one that answers 503 for 5 s after listening gets ≈ 55 requests.
/// - `exec`, `log`: the [`Backoff`] pace from the first attempt.
///
/// The probe's `period` caps every delay (where it is shorter than the pace's).
/// Each check's timeout is the probe's `timeout`, cut short by the deadline.
/// `on_attempt` sees every check's outcome (not the port polls), for progress
/// display. `failure_threshold` does not apply here: the deadline decides.
///
/// # Errors
/// [`WaitError`] with the last outcome and attempt count when the deadline passes
/// ([`WaitFailure::Deadline`]), the exit callback reports a death
/// ([`WaitFailure::Exited`], within ~10 ms of the exit), or an outcome is
/// misconfigured ([`WaitFailure::Misconfigured`], at once).
pub async fn wait_ready_with(
    probe: &Probe,
    ctx: &ProbeContext<'_>,
    opts: &WaitOptions<'_>,
    mut on_attempt: impl FnMut(&ProbeOutcome),
) -> Result<ProbeOutcome, WaitError> {
    let t0 = Instant::now();
    let mut attempts = 0u32;
    let mut last: Option<ProbeOutcome> = None;
    let mut passes = 0u32;
    let need = probe.success_threshold.max(1);
    let period = probe.period.0.max(Duration::from_millis(1));
    let fail = |reason, last: Option<ProbeOutcome>, attempts| WaitError {
        component: ctx.component.clone(),
        last,
        attempts,
        waited: t0.elapsed(),
        reason,
    };

    if !probe.initial_delay.0.is_zero() {
        let until = (t0 + probe.initial_delay.0).min(opts.deadline);
        if let Some(status) = nap(until, opts.exited).await {
            return Err(fail(WaitFailure::Exited { status }, last, attempts));
        }
    }
    let pace = pace_of(&probe.check);
    let gate = match pace {
        Pace::Endpoint => listen_gate(&probe.check).await,
        _ => None,
    };
    // Whether the component's port was seen listening since the last refused attempt
    // (then the port is not polled).
    let mut is_listening = false;
    // The pace: attempts since it (re)started, and when.
    let (mut n, mut paced_from) = (0usize, Instant::now());
    // The silent pace's delay once past the fast phase (doubles up to the period).
    let mut slow = opts.poll;
    let mut next_check = Instant::now();
    let mut next_poll = Instant::now();
    loop {
        if let Some(status) = opts.exited.and_then(|f| f()) {
            return Err(fail(WaitFailure::Exited { status }, last, attempts));
        }
        let now = Instant::now();
        if now >= opts.deadline {
            return Err(fail(WaitFailure::Deadline, last, attempts));
        }
        if now >= next_check {
            let timeout = probe.timeout.0.min(opts.deadline - now);
            let outcome = check(&probe.check, ctx, timeout).await;
            attempts += 1;
            on_attempt(&outcome);
            if outcome.passed {
                passes += 1;
                if passes >= need {
                    return Ok(outcome);
                }
            } else {
                passes = 0;
                if outcome.misconfigured {
                    return Err(fail(WaitFailure::Misconfigured, Some(outcome), attempts));
                }
            }
            if gate.is_some() {
                is_listening = !refused(&outcome);
            }
            last = Some(outcome);
            let delay = match pace {
                Pace::Silent if t0.elapsed() < opts.fast_phase => {
                    if attempts == 1 {
                        opts.first_poll
                    } else {
                        opts.poll
                    }
                }
                Pace::Silent => {
                    let d = slow;
                    slow = (slow * 2).min(period);
                    d
                }
                Pace::Endpoint | Pace::Paced => opts.backoff.delay(n, paced_from.elapsed(), period),
            }
            .min(period);
            n += 1;
            next_check = Instant::now() + delay;
            continue;
        }
        let mut wake = next_check.min(opts.deadline);
        if let (Some(addrs), false) = (&gate, is_listening) {
            if now >= next_poll {
                let limit = Duration::from_millis(100).min(opts.deadline - now);
                if listening(addrs, limit).await {
                    // It listens now: check at once, and start the pace over.
                    is_listening = true;
                    (n, paced_from) = (0, Instant::now());
                    next_check = Instant::now();
                    continue;
                }
                next_poll = Instant::now()
                    + if attempts <= 1 {
                        opts.first_poll
                    } else {
                        opts.poll
                    };
            }
            wake = wake.min(next_poll);
        }
        if let Some(status) = nap(wake, opts.exited).await {
            return Err(fail(WaitFailure::Exited { status }, last, attempts));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpt_respects_utf8_and_limit() {
        let body = "é".repeat(400);
        let e = excerpt(body.as_bytes());
        assert!(e.len() <= BODY_EXCERPT_BYTES && e.chars().all(|c| c == 'é'));
        assert_eq!(first_line(b"\n\n  hello \nworld"), Some("hello".into()));
    }

    #[test]
    fn futures_are_send() {
        fn assert_send<T: Send>(_: &T) {}
        let p = Probe {
            check: Check::Process,
            failure_threshold: 1,
            initial_delay: flotilla_model::values::HumanDuration(Duration::ZERO),
            period: flotilla_model::values::HumanDuration(Duration::from_secs(1)),
            success_threshold: 1,
            timeout: flotilla_model::values::HumanDuration(Duration::from_secs(1)),
        };
        let ctx = ProbeContext::new("x");
        let opts = WaitOptions::until(Instant::now());
        let mut n = 0;
        let fut = wait_ready_with(&p, &ctx, &opts, |_| n += 1);
        assert_send(&fut);
        let exited = || None;
        let fut = wait_ready(&p, &ctx, Instant::now(), Some(&exited), |_| {});
        assert_send(&fut);
        assert_send(&observe(&p, &ctx));
    }

    #[test]
    fn backoff_paces_requests() {
        let b = Backoff::default();
        let ms = Duration::from_millis;
        let s = Duration::from_secs(1);
        let early: Vec<u128> = (0..7).map(|n| b.delay(n, ms(0), s).as_millis()).collect();
        assert_eq!(early, [5, 10, 20, 50, 100, 100, 100]);
        // A shorter period caps the delays; after the first second, 100 ms at least.
        assert_eq!(b.delay(4, ms(500), ms(30)), ms(30));
        assert_eq!(b.delay(9, ms(1000), ms(30)), ms(100));
        assert_eq!(b.delay(0, ms(1000), s), ms(100));
        // At most 10 per second after the first second, ≈ 14 in it.
        let (mut t, mut n, mut first_second) = (ms(0), 0, 0);
        while t < s {
            first_second += 1;
            t += b.delay(n, t, s);
            n += 1;
        }
        assert!((12..=16).contains(&first_second), "{first_second}");
    }

    #[test]
    fn refused_means_not_listening() {
        let rec = Recorder::new();
        let o = rec.done(
            false,
            "x".into(),
            json!({"kind": "http", "error": "connection refused"}),
        );
        assert!(refused(&o));
        let o = rec.done(false, "x".into(), json!({"kind": "http", "status": 503}));
        assert!(!refused(&o));
        let o = rec.done(
            false,
            "x".into(),
            json!({"kind": "http", "error": "no answer within 1 s"}),
        );
        assert!(!refused(&o));
    }

    #[test]
    fn redaction() {
        let mut rec = Recorder::new();
        rec.secrets.push(("KEY".into(), "s3cret".into()));
        let out = rec.done(
            true,
            "saw s3cret".into(),
            json!({"body_excerpt": "{\"auth\":\"Bearer s3cret\"}", "n": 1}),
        );
        assert_eq!(out.evidence, "saw [secret KEY]");
        assert!(!out.detail.to_string().contains("s3cret"));
        let json = serde_json::to_value(&out).unwrap();
        assert!(json["latency_ms"].is_number());
        let back: ProbeOutcome = serde_json::from_value(json).unwrap();
        assert_eq!(back.evidence, out.evidence);
    }
}
