//! Remote execution with the same binary: the exchange between this machine and
//! `flotilla host serve` on a host, over the [`ssh`](crate::ssh) transport.
//!
//! One call = one SSH session channel running
//! `$HOME/.local/lib/flotilla/current/flotilla host serve [--state-dir DIR]`: the
//! controller writes one JSON [`Request`] on one line to its standard input and reads
//! one JSON [`Response`] from its standard output. For a step the controller keeps
//! standard input open until the answer comes; closing it early (Ctrl-C, or the
//! controller dying) tells the host to give up: stop waiting, stop what the step
//! launched, answer. A request carries the host's role-filtered
//! [`Snapshot`] (its components only, no secret values: secrets are resolved on the
//! host, from its environment or its own `secrets.env`) and one [`Call`]:
//!
//! - `hello`: what the host is (platform, version, state directory, the digest of
//!   the binary that answered, measured there);
//! - `observe`: the status of the snapshot's components, measured on the host;
//! - `logs`: the last lines of a component's log there;
//! - `step`: one plan step (start, stop, restart, await-ready) run by the host's own
//!   executor, journaled in the host's own state directory, with its readiness
//!   probes run on the host (the route its local clients use).
//!
//! Both sides put [`PROTOCOL`] and their version in every message; a mismatch is
//! [`TransportError::VersionSkew`](crate::ssh::TransportError::VersionSkew) on the
//! controller and a `protocol` error on the host, both saying to run
//! `flotilla host install HOST`.

use crate::executor::{now_ms, Executor, StepReport};
use crate::observe::StatusReport;
use crate::ssh::{Pool, TransportError, REMOTE_ROOT};
use crate::statedir::StateDir;
use flotilla_model::topology::Snapshot;
use flotilla_model::Topology;
use flotilla_plan::Step;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The project of a call that names none.
pub const DEFAULT_PROJECT: &str = "default";

/// Version of the exchange. Bump on any incompatible change to [`Request`] or
/// [`Response`] (or to the types they carry).
pub const PROTOCOL: u32 = 2;

/// This binary's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What the controller sends.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    /// The sender's [`PROTOCOL`].
    pub protocol: u32,
    /// The sender's version.
    pub version: String,
    /// What it asks.
    #[serde(flatten)]
    pub call: Call,
}

/// What can be asked of a host.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "kebab-case")]
pub enum Call {
    /// Who are you?
    Hello,
    /// Observe these components (all of the snapshot's when `names` is empty).
    Observe {
        /// The host's snapshot.
        snapshot: Snapshot,
        /// Components to observe.
        names: Vec<String>,
        /// Answer within this many ms: probes still running then are cut short
        /// (their component's health is `unknown`), so a slow probe never makes the
        /// whole host look unreachable.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget_ms: Option<u64>,
    },
    /// The last lines of a component's log on the host.
    Logs {
        /// The component.
        component: String,
        /// How many lines.
        lines: usize,
        /// Its project (`default` when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        project: Option<String>,
    },
    /// Pre-flight checks of components on the host ([`crate::preflight::check`]).
    Check {
        /// The host's snapshot.
        snapshot: Snapshot,
        /// Components to check (all of the snapshot's when empty).
        names: Vec<String>,
    },
    /// Run one plan step.
    Step {
        /// The host's snapshot.
        snapshot: Snapshot,
        /// The step.
        step: Step,
        /// Wave number, for the host's journal.
        wave: usize,
        /// The controller's operation id and command line, for the host's journal.
        operation: String,
        /// Readiness deadline, ms.
        ready_timeout_ms: u64,
    },
}

/// What the host answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Response {
    /// The host's [`PROTOCOL`].
    pub protocol: u32,
    /// The host's version.
    pub version: String,
    /// The answer.
    #[serde(flatten)]
    pub reply: Reply,
}

/// The answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "kebab-case")]
#[allow(clippy::large_enum_variant)]
pub enum Reply {
    /// To [`Call::Hello`].
    Hello {
        /// What the host is.
        facts: HostFacts,
    },
    /// To [`Call::Observe`].
    Observed {
        /// The host's status report.
        report: StatusReport,
    },
    /// To [`Call::Logs`].
    Logs {
        /// The log file on the host.
        path: String,
        /// Whether it exists.
        exists: bool,
        /// Its last lines.
        lines: Vec<String>,
        /// When it was last modified (ms since the Unix epoch): every line was
        /// written by then (what `flotilla logs` orders lines by).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        modified_ms: Option<u64>,
    },
    /// To [`Call::Check`].
    Checked {
        /// Every finding, in order.
        findings: Vec<crate::hosts::Finding>,
    },
    /// To [`Call::Step`].
    Step {
        /// How the step ended.
        report: StepReport,
    },
    /// The request could not be served.
    Error {
        /// `protocol` (skew), `request` (malformed), `state` (journal or state
        /// directory unusable), `snapshot` (inconsistent).
        kind: String,
        /// What went wrong.
        message: String,
    },
}

/// What a host says about itself, measured there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostFacts {
    /// `<os>-<arch>` of the host.
    pub platform: String,
    /// Version of the flotilla that answered.
    pub version: String,
    /// Path of the binary that answered.
    pub executable: String,
    /// `sha256:` of that binary, read from disk there.
    pub executable_sha256: String,
    /// The host's state directory.
    pub state_dir: String,
}

/// `<os>-<arch>` of this machine, in the inventory's spelling.
pub fn this_platform() -> String {
    let os = match std::env::consts::OS {
        "macos" => "darwin",
        other => other,
    };
    format!("{os}-{}", std::env::consts::ARCH)
}

fn reply(r: Reply) -> Response {
    Response {
        protocol: PROTOCOL,
        version: VERSION.to_string(),
        reply: r,
    }
}

/// A refusal, as a host answers one: [`Reply::Error`] with a kind
/// (`request`, `protocol`, `state`, `snapshot`, `expired`…) and a message.
pub fn error(kind: &str, message: impl Into<String>) -> Response {
    reply(Reply::Error {
        kind: kind.into(),
        message: message.into(),
    })
}

/// `flotilla host serve` on standard input and output: reads the request (the first
/// line), watches the rest of standard input in a thread (its end means the
/// controller gave up), serves it on a new runtime and writes the response as one
/// line of JSON.
///
/// # Errors
/// Reading standard input, starting the runtime, or writing standard output.
pub fn serve_stdio(state_dir: Option<&Path>) -> std::io::Result<()> {
    use std::io::{BufRead, Read, Write};
    let mut stdin = std::io::BufReader::new(std::io::stdin());
    let mut input = Vec::new();
    stdin.read_until(b'\n', &mut input)?;
    let cancelled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = Arc::clone(&cancelled);
    std::thread::spawn(move || {
        let mut rest = Vec::new();
        let _ = stdin.read_to_end(&mut rest);
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let response = rt.block_on(serve(&input, state_dir, cancelled));
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, &response)?;
    writeln!(out)?;
    out.flush()
}

/// Serves one request on the host (what `flotilla host serve` runs): `input` is
/// the request's JSON, `state_dir` the `--state-dir` given (else the default).
/// `cancelled` is set when the controller gives up (its end of standard input
/// closes): a step then stops waiting and stops what it launched. Never fails:
/// problems are [`Reply::Error`] answers.
pub async fn serve(
    input: &[u8],
    state_dir: Option<&Path>,
    cancelled: Arc<std::sync::atomic::AtomicBool>,
) -> Response {
    let value: serde_json::Value = match serde_json::from_slice(input) {
        Ok(v) => v,
        Err(e) => return error("request", format!("not a JSON request: {e}")),
    };
    let theirs = value.get("protocol").and_then(|p| p.as_u64());
    if theirs != Some(u64::from(PROTOCOL)) {
        let version = value
            .get("version")
            .and_then(|v| v.as_str())
            .unwrap_or("unknown");
        return error(
            "protocol",
            format!(
                "this host runs flotilla {VERSION} (protocol {PROTOCOL}); the controller runs flotilla {version} (protocol {}): run `flotilla host install` for this host from the controller",
                theirs.map(|p| p.to_string()).unwrap_or_else(|| "unknown".into())
            ),
        );
    }
    let request: Request = match serde_json::from_value(value) {
        Ok(r) => r,
        Err(e) => return error("request", format!("malformed request: {e}")),
    };
    // Each call's project has its own state below the host's state directory; a step
    // (which changes something) first moves a state directory from before projects.
    let state_of = |project: &Option<String>, prepare: bool| {
        let project = project.as_deref().unwrap_or(DEFAULT_PROJECT);
        let r = if prepare {
            StateDir::prepare(state_dir, project)
        } else {
            StateDir::resolve(state_dir, project)
        };
        r.map_err(|e| format!("state directory: {e}"))
    };
    match request.call {
        Call::Hello => {
            let state = match state_of(&None, false) {
                Ok(s) => s,
                Err(e) => return error("state", e),
            };
            let exe = std::env::current_exe().unwrap_or_default();
            let sha =
                crate::identity::file_sha256(&exe).unwrap_or_else(|e| format!("unreadable: {e}"));
            reply(Reply::Hello {
                facts: HostFacts {
                    platform: this_platform(),
                    version: VERSION.to_string(),
                    executable: exe.display().to_string(),
                    executable_sha256: sha,
                    state_dir: state.base().display().to_string(),
                },
            })
        }
        Call::Observe {
            snapshot,
            names,
            budget_ms,
        } => {
            let (here, state, topology, secrets) = match host_side(state_dir, snapshot) {
                Ok(x) => x,
                Err(e) => return *e,
            };
            let store = match crate::operate::open_store(&state) {
                Ok(s) => s,
                Err(e) => return error("state", crate::error::chain(&e)),
            };
            let observer = crate::observe::Observer {
                adapters: crate::adapter::Adapters::native(),
                topology: &topology,
                store: &store,
                state: &state,
                secrets: &secrets,
                here: Some(&here),
                probe_deadline: budget_ms
                    .map(|ms| std::time::Instant::now() + Duration::from_millis(ms)),
            };
            match observer.observe(&names).await {
                Ok(report) => reply(Reply::Observed { report }),
                Err(e) => error("state", crate::error::chain(&e)),
            }
        }
        Call::Logs {
            component,
            lines,
            project,
        } => {
            if component.is_empty() || component.contains('/') || component.starts_with('.') {
                return error("request", format!("`{component}` is not a component name"));
            }
            let state = match state_of(&project, false) {
                Ok(s) => s,
                Err(e) => return error("state", e),
            };
            let path = state.log(&component);
            match crate::logs::tail_log(&path, lines) {
                Ok(lines) => reply(Reply::Logs {
                    path: path.display().to_string(),
                    exists: path.exists(),
                    modified_ms: std::fs::metadata(&path)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map(|d| d.as_millis() as u64),
                    lines,
                }),
                Err(e) => error("state", crate::error::chain(&e)),
            }
        }
        Call::Check { snapshot, names } => {
            let (here, state, topology, secrets) = match host_side(state_dir, snapshot) {
                Ok(x) => x,
                Err(e) => return *e,
            };
            let findings =
                crate::preflight::check(&topology, &here, &names, &home_dir(), &state, &secrets);
            reply(Reply::Checked { findings })
        }
        Call::Step {
            snapshot,
            step,
            wave,
            operation,
            ready_timeout_ms,
        } => {
            let digest = snapshot.topology_digest.clone();
            let state = match state_of(&snapshot.project, true) {
                Ok(s) => s,
                Err(e) => return error("state", e),
            };
            let topology = match Topology::from_snapshot(snapshot) {
                Ok(t) => Arc::new(t),
                Err(e) => return error("snapshot", e.to_string()),
            };
            if topology.id(&step.component).is_none() {
                return error(
                    "snapshot",
                    format!("`{}` is not a component of this host", step.component),
                );
            }
            match run_step(
                &state,
                StepArgs {
                    topology,
                    step,
                    wave,
                    operation,
                    topology_digest: digest,
                    ready_timeout_ms,
                },
                cancelled,
            )
            .await
            {
                Ok(report) => reply(Reply::Step { report }),
                Err(e) => error("state", e),
            }
        }
    }
}

/// A step to run on this host, as the controller sent it.
struct StepArgs {
    topology: Arc<Topology>,
    step: Step,
    wave: usize,
    operation: String,
    topology_digest: String,
    ready_timeout_ms: u64,
}

async fn run_step(
    state: &StateDir,
    args: StepArgs,
    cancelled: Arc<std::sync::atomic::AtomicBool>,
) -> Result<StepReport, String> {
    let StepArgs {
        topology,
        step,
        wave,
        operation,
        topology_digest,
        ready_timeout_ms,
    } = args;
    let holder = crate::lock::LockHolder {
        pid: std::process::id(),
        command: format!(
            "flotilla host serve: {} {} for {operation}",
            step.action.as_str(),
            step.component
        ),
        since_ms: now_ms(),
    };
    // The store first: it creates the state directory owner-only.
    let mut store = crate::operate::open_store(state).map_err(|e| crate::error::chain(&e))?;
    let _locks =
        crate::lock::LifecycleLock::acquire_for_step(state.root(), &step.component, &holder)
            .map_err(|e| crate::error::chain(&e))?;
    for note in crate::operate::reconcile(&topology, state, &mut store)
        .map_err(|e| crate::error::chain(&e))?
    {
        tracing::info!("{note}");
    }
    let secrets = Arc::new(crate::operate::secrets(state).map_err(|e| crate::error::chain(&e))?);
    let step_json = serde_json::to_string(&step).map_err(|e| e.to_string())?;
    let op = flotilla_store::NewOperation {
        verb: step.action.as_str().to_string(),
        target: step.component.clone(),
        flags: Vec::new(),
        plan_digest: flotilla_model::digest::digest_of(&step),
        topology_digest: topology_digest.to_string(),
        plan_json: step_json,
        who: crate::operate::who(),
        pid: std::process::id(),
        command_line: format!("step of {operation}"),
        started_at_ms: now_ms(),
    };
    let op_id = store
        .begin_operation(&op)
        .map_err(|e| crate::error::chain(&e))?;
    let store = Arc::new(Mutex::new(store));
    let base_dir = home_dir();
    let exec = Arc::new(Executor {
        cancelled,
        topology,
        state: state.clone(),
        store: Arc::clone(&store),
        secrets,
        base_dir,
        ready_timeout: Duration::from_millis(ready_timeout_ms),
        log_max_bytes: crate::operate::LOG_MAX_BYTES,
        log_keep: crate::operate::LOG_KEEP,
        operation: op_id,
        events: Arc::new(|_| {}),
        transport: None,
        adapters: crate::adapter::Adapters::native(),
    });
    let mut report = exec.run_step(wave, step.clone()).await;
    // A start that failed here (not ready, or the controller gave up) leaves nothing
    // running: the controller may be gone and unable to clean up.
    if report.outcome != flotilla_store::Outcome::Succeeded && report.launched {
        exec.cancelled
            .store(false, std::sync::atomic::Ordering::SeqCst);
        let stop = Step {
            action: flotilla_plan::Action::Stop,
            reason: "stopped again on the host after a failed start".into(),
            ..step
        };
        let stopped = exec.run_step(wave, stop).await;
        report.summary = format!(
            "{}; stopped again on the host: {}",
            report.summary, stopped.summary
        );
        if let serde_json::Value::Object(map) = &mut report.evidence {
            map.insert(
                "host_cleanup".into(),
                serde_json::to_value(&stopped).unwrap_or_default(),
            );
        }
    }
    let mut store = store.lock().unwrap_or_else(|p| p.into_inner());
    let error =
        (report.outcome != flotilla_store::Outcome::Succeeded).then(|| report.summary.clone());
    store
        .finish_operation(op_id, report.outcome, now_ms(), error.as_deref())
        .map_err(|e| crate::error::chain(&e))?;
    Ok(report)
}

/// What a read-only call about `snapshot` needs on this host: its name, its project's
/// state directory (read where it is), the topology rebuilt from the snapshot, and
/// the secrets; or the error answer.
fn host_side(
    state_dir: Option<&Path>,
    snapshot: Snapshot,
) -> Result<(String, StateDir, Topology, crate::secrets::SecretResolver), Box<Response>> {
    let here = snapshot.host.clone();
    let project = snapshot.project.as_deref().unwrap_or(DEFAULT_PROJECT);
    let state = StateDir::resolve(state_dir, project)
        .map_err(|e| Box::new(error("state", format!("state directory: {e}"))))?;
    let topology = Topology::from_snapshot(snapshot)
        .map_err(|e| Box::new(error("snapshot", e.to_string())))?;
    let secrets = crate::operate::secrets(&state)
        .map_err(|e| Box::new(error("state", crate::error::chain(&e))))?;
    Ok((here, state, topology, secrets))
}

/// This host's home directory: where relative paths of its components start.
fn home_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// Reads a host's answer (the JSON of a [`Response`]): its reply, or the error it
/// stands for (version skew, unreadable, the host's own refusal), naming `host`.
///
/// # Errors
/// [`TransportError::VersionSkew`], [`TransportError::Failed`].
pub fn interpret(host: &str, value: serde_json::Value) -> Result<Reply, TransportError> {
    let remote_protocol = value.get("protocol").and_then(|p| p.as_u64());
    if remote_protocol != Some(u64::from(PROTOCOL)) {
        return Err(TransportError::VersionSkew {
            host: host.to_string(),
            local_version: VERSION.to_string(),
            local_protocol: PROTOCOL,
            remote_version: value
                .get("version")
                .and_then(|v| v.as_str())
                .unwrap_or("unknown")
                .to_string(),
            remote_protocol: remote_protocol.unwrap_or(0) as u32,
        });
    }
    let response: Response = serde_json::from_value(value).map_err(|e| TransportError::Failed {
        host: host.to_string(),
        detail: format!("unreadable answer from the remote flotilla: {e}"),
    })?;
    match response.reply {
        Reply::Error { kind, message } => Err(TransportError::Failed {
            host: host.to_string(),
            detail: format!("the remote flotilla refused ({kind}): {message}"),
        }),
        other => Ok(other),
    }
}

/// The request that carries `call`, as this flotilla sends it.
pub fn request(call: Call) -> Request {
    Request {
        protocol: PROTOCOL,
        version: VERSION.to_string(),
        call,
    }
}

/// Single-quotes `s` for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The command line that runs `binary`'s (default: the installed flotilla's) host
/// mode on `host`.
fn serve_command(fleet: &Pool, host: &str, binary: Option<&str>) -> Result<String, TransportError> {
    let h = fleet.host(host)?;
    let binary = binary
        .map(str::to_string)
        .unwrap_or_else(|| format!("{REMOTE_ROOT}/current/flotilla"));
    let mut cmd = format!("exec \"{binary}\" host serve");
    if let Some(d) = &h.state_dir {
        cmd.push_str(" --state-dir ");
        cmd.push_str(&shell_quote(d));
    }
    Ok(cmd)
}

/// Sends `call` to `host` and returns its reply (never [`Reply::Error`]: that is
/// turned into a [`TransportError`]); the whole exchange, connecting included, is
/// bounded by `timeout`.
///
/// # Errors
/// [`TransportError`]: unreachable, host key, authentication, not installed,
/// version skew, or the host's own error.
pub async fn call(
    fleet: &Pool,
    host: &str,
    call: Call,
    timeout: Duration,
) -> Result<Reply, TransportError> {
    call_until(fleet, host, call, timeout, None).await
}

/// Like [`call`], but when `give_up` completes before the answer, the host is told
/// to give up (its standard input closes): a step stops waiting, stops what it
/// launched, and still answers.
///
/// # Errors
/// As [`call`].
pub async fn call_until(
    fleet: &Pool,
    host: &str,
    call: Call,
    timeout: Duration,
    give_up: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>>,
) -> Result<Reply, TransportError> {
    exchange(fleet, host, None, call, timeout, give_up).await
}

/// Like [`call`], asking the flotilla at `binary` on the host (a path for its
/// login shell, `$HOME` allowed) instead of the installed `current` one: how a new
/// release is tried before it is switched to.
///
/// # Errors
/// As [`call`].
pub async fn call_binary(
    fleet: &Pool,
    host: &str,
    binary: &str,
    call: Call,
    timeout: Duration,
) -> Result<Reply, TransportError> {
    exchange(fleet, host, Some(binary), call, timeout, None).await
}

async fn exchange(
    fleet: &Pool,
    host: &str,
    binary: Option<&str>,
    call: Call,
    timeout: Duration,
    give_up: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>>,
) -> Result<Reply, TransportError> {
    let request = Request {
        protocol: PROTOCOL,
        version: VERSION.to_string(),
        call,
    };
    let mut input = serde_json::to_vec(&request).map_err(|e| TransportError::Failed {
        host: host.to_string(),
        detail: e.to_string(),
    })?;
    input.push(b'\n');
    let command = serve_command(fleet, host, binary)?;
    let out = fleet
        .run_until(host, &command, &input, timeout, give_up)
        .await?;
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if out.code == Some(127) {
        return Err(TransportError::NotInstalled {
            host: host.to_string(),
            path: binary
                .map(str::to_string)
                .unwrap_or_else(|| format!("{REMOTE_ROOT}/current/flotilla")),
        });
    }
    let value: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|_| TransportError::Failed {
            host: host.to_string(),
            detail: format!(
                "the remote flotilla did not answer (exit {}): {}",
                out.code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "by signal".into()),
                if stderr.is_empty() {
                    "no output"
                } else {
                    stderr.as_str()
                }
            ),
        })?;
    interpret(host, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(input: &str) -> (serde_json::Value, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let r = rt.block_on(serve(input.as_bytes(), Some(&state), Arc::default()));
        (serde_json::to_value(&r).unwrap(), dir)
    }

    #[test]
    fn hello_reports_what_the_host_measured() {
        let (v, dir) = answer(&format!(
            r#"{{"protocol":{PROTOCOL},"version":"x","call":"hello"}}"#
        ));
        assert_eq!(v["reply"], "hello", "{v}");
        assert_eq!(v["protocol"], PROTOCOL);
        assert_eq!(v["facts"]["platform"], this_platform());
        assert!(v["facts"]["executable_sha256"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"));
        assert_eq!(
            v["facts"]["state_dir"],
            dir.path().join("state").display().to_string()
        );
    }

    #[test]
    fn another_protocol_is_refused_naming_both_versions() {
        let (v, _d) = answer(r#"{"protocol":999,"version":"9.9.9","call":"hello"}"#);
        assert_eq!(v["reply"], "error");
        assert_eq!(v["kind"], "protocol");
        let m = v["message"].as_str().unwrap();
        assert!(m.contains("9.9.9") && m.contains("protocol 999"), "{m}");
        assert!(m.contains(&format!("protocol {PROTOCOL}")), "{m}");
        assert!(m.contains("flotilla host install"), "{m}");
    }

    #[test]
    fn malformed_requests_and_foreign_components_are_errors_not_crashes() {
        let (v, _d) = answer("not json");
        assert_eq!(v["kind"], "request");
        let (v, _d) = answer(&format!(r#"{{"protocol":{PROTOCOL},"call":"dance"}}"#));
        assert_eq!(v["kind"], "request");
        let snapshot = serde_json::json!({"host":"h1","hosts":{},"components":[],"topology_digest":"sha256:x"});
        let step = serde_json::json!({"component":"ghost","host":"h1","action":"start","adapter":"process","owner":"managed","reason":"r"});
        let req = serde_json::json!({"protocol":PROTOCOL,"version":"x","call":"step","snapshot":snapshot,"step":step,"wave":1,"operation":"op-1","ready_timeout_ms":1000});
        let (v, _d) = answer(&req.to_string());
        assert_eq!(v["kind"], "snapshot", "{v}");
        assert!(v["message"].as_str().unwrap().contains("ghost"));
    }
}
