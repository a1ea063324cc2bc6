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
//!
//! One file per kind of check (`process.rs`, `tcp.rs`, `http.rs` for `http` and
//! `request`, `exec.rs`, `log.rs`); `outcome.rs` the [`ProbeOutcome`] every check
//! answers with (timing, secret redaction, evidence text); `wait.rs` waiting for
//! readiness.

mod exec;
mod http;
mod log;
mod outcome;
mod process;
mod tcp;
mod wait;

pub use http::BODY_READ_LIMIT;
pub use outcome::{ProbeOutcome, BODY_EXCERPT_BYTES};
pub use wait::{
    wait_ready, wait_ready_with, Backoff, ExitedFn, WaitError, WaitFailure, WaitOptions,
    INTERRUPTED,
};

use crate::identity::RuntimeIdentity;
use exec::check_exec;
use flotilla_model::topology::{Check, Probe};
use http::{check_http, Expect, HttpReq};
use log::check_log;
use process::check_process;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;
use tcp::check_tcp;

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
    /// What `process` and `container_health` checks ask instead of `/proc`, for a
    /// component whose owner knows (a container's engine); see
    /// [`crate::adapter::Adapter::owner_checks`].
    pub owner: Option<std::sync::Arc<dyn OwnerChecks>>,
}

/// Checks only a component's owner can answer (a container's engine). Blocking:
/// the probes call them on the blocking pool.
pub trait OwnerChecks: Send + Sync {
    /// `process`: whether the instance with `identity` still runs. `Ok` says what
    /// was seen of it running, `Err` how it does not.
    ///
    /// # Errors
    /// How it does not run (or why that cannot be told).
    fn alive(&self, identity: Option<&RuntimeIdentity>) -> Result<String, String>;

    /// `container_health`: whether the owner reports the instance `healthy`. `Ok`
    /// says what it reported, `Err` what it reported instead.
    ///
    /// # Errors
    /// The health status it reported, or why it could not be asked.
    fn healthy(&self, identity: Option<&RuntimeIdentity>) -> Result<String, String>;
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
            owner: None,
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
        Check::Process if ctx.owner.is_some() => owner_check(ctx, "process").await,
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
        Check::ContainerHealth => owner_check(ctx, "container-health").await,
    }
}

/// A `process` or `container-health` check answered by the component's owner.
async fn owner_check(ctx: &ProbeContext<'_>, kind: &'static str) -> ProbeOutcome {
    let rec = outcome::Recorder::new();
    let Some(owner) = ctx.owner.clone() else {
        return rec.misconfigured(
            format!(
                "`{}`: a container_health check needs a container component's engine",
                ctx.component
            ),
            serde_json::json!({ "kind": kind }),
        );
    };
    let identity = ctx.identity.clone();
    let answer = tokio::task::spawn_blocking(move || {
        if kind == "process" {
            owner.alive(identity.as_ref())
        } else {
            owner.healthy(identity.as_ref())
        }
    })
    .await
    .unwrap_or_else(|e| Err(format!("the check's task failed: {e}")));
    match answer {
        Ok(saw) => rec.done(true, saw, serde_json::json!({ "kind": kind })),
        Err(saw) => rec.done(false, saw, serde_json::json!({ "kind": kind })),
    }
}

/// One check of `probe` with its own timeout: what status uses for liveness and
/// health. Thresholds (`success_threshold`, `failure_threshold`) span several
/// observations and are the caller's to count.
pub async fn observe(probe: &Probe, ctx: &ProbeContext<'_>) -> ProbeOutcome {
    check(&probe.check, ctx, probe.timeout.0).await
}
