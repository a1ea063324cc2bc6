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
//! - `discover`: what runs there that the snapshot does not cover, with proposals
//!   (a host whose flotilla predates it refuses the call as malformed: the
//!   controller says to run `flotilla host install`);
//! - `step`: one plan step (start, stop, restart, await-ready) run by the host's own
//!   executor, journaled in the host's own state directory, with its readiness
//!   probes run on the host (the route its local clients use);
//! - `adopt`: one question of `flotilla adopt` about a component there (who holds
//!   its ports, its checks, stop or restore its prior owner), answered there
//!   ([`crate::adopt::host`]).
//!
//! Both sides put [`PROTOCOL`] and their version in every message; a mismatch is
//! [`TransportError::VersionSkew`](crate::ssh::TransportError::VersionSkew) on the
//! controller and a `protocol` error on the host, both saying to run
//! `flotilla host install HOST`.

use crate::observe::StatusReport;
use crate::ssh::{Pool, TransportError, REMOTE_ROOT};
use crate::step_report::StepReport;
use flotilla_model::topology::Snapshot;
use flotilla_plan::Step;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The project of a call that names none.
pub use flotilla_model::topology::DEFAULT_PROJECT;

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
        /// Instead of the last `lines`: the whole lines appended since this byte
        /// offset (the `end` of an earlier answer), for following the log.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<u64>,
    },
    /// Pre-flight checks of components on the host ([`crate::preflight::check`]).
    Check {
        /// The host's snapshot.
        snapshot: Snapshot,
        /// Components to check (all of the snapshot's when empty).
        names: Vec<String>,
    },
    /// What runs on the host that its snapshot does not cover, each with a proposed
    /// entry ([`crate::discover::discover`]). Read-only.
    Discover {
        /// The host's snapshot (what its inventory declares there).
        snapshot: Snapshot,
        /// What to look for.
        #[serde(default)]
        options: crate::discover::Options,
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
    /// One question of an adopt about a component of the host
    /// ([`crate::adopt::host::answer`], run there).
    Adopt {
        /// The host's snapshot.
        snapshot: Snapshot,
        /// The component adopted.
        component: String,
        /// The question: the JSON of a `crate::adopt::host::Ask` (carried as JSON
        /// so that this exchange's types do not depend on adopt's, which use it).
        question: serde_json::Value,
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
        /// Where the log ended after these lines: the `from` of the next call that
        /// follows it (absent from hosts that cannot follow).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        end: Option<u64>,
    },
    /// To [`Call::Check`].
    Checked {
        /// Every finding, in order.
        findings: Vec<crate::preflight::Finding>,
    },
    /// To [`Call::Discover`].
    Discovered {
        /// What the host found.
        report: crate::discover::Discovery,
    },
    /// To [`Call::Step`].
    Step {
        /// How the step ended.
        report: StepReport,
    },
    /// To [`Call::Adopt`].
    Adopt {
        /// The host's answer: the JSON of a `crate::adopt::host::Answer`.
        answer: serde_json::Value,
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

pub(crate) fn reply(r: Reply) -> Response {
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

/// `s` quoted as one word for a POSIX shell (`shlex`): unchanged when it needs no
/// quoting, else single-quoted. A string holding a NUL byte, which no shell word can,
/// becomes the empty word `''`.
pub fn shell_quote(s: &str) -> String {
    shlex::try_quote(s).map_or_else(|_| "''".to_string(), |q| q.into_owned())
}

/// `path` as one shell word, a leading `$HOME/` left for the shell to expand (the rest
/// quoted): the install root's paths start with it.
pub fn shell_path(path: &str) -> String {
    match path.strip_prefix("$HOME/") {
        Some(rest) => format!("\"$HOME\"/{}", shell_quote(rest)),
        None => shell_quote(path),
    }
}

/// The command line that runs `binary`'s (default: the installed flotilla's) host
/// mode on `host`.
fn serve_command(fleet: &Pool, host: &str, binary: Option<&str>) -> Result<String, TransportError> {
    let h = fleet.host(host)?;
    let binary = binary
        .map(str::to_string)
        .unwrap_or_else(|| format!("{REMOTE_ROOT}/current/flotilla"));
    let mut cmd = format!("exec {} host serve", shell_path(&binary));
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
    use crate::host_mode::serve;

    fn answer(input: &str) -> (serde_json::Value, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let r = rt.block_on(serve(
            input.as_bytes(),
            Some(&state),
            tokio_util::sync::CancellationToken::new(),
        ));
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

    #[test]
    fn an_adopt_question_about_a_foreign_component_or_of_no_known_kind_is_an_error() {
        let snapshot = serde_json::json!({"host":"h1","hosts":{},"components":[],"topology_digest":"sha256:x"});
        let req = serde_json::json!({"protocol":PROTOCOL,"version":"x","call":"adopt","snapshot":snapshot,"component":"ghost","question":{"ask":"look"}});
        let (v, _d) = answer(&req.to_string());
        assert_eq!(v["reply"], "error", "{v}");
        assert_eq!(v["kind"], "snapshot", "{v}");
        assert!(v["message"].as_str().unwrap().contains("ghost"), "{v}");
        let req = serde_json::json!({"protocol":PROTOCOL,"version":"x","call":"adopt","snapshot":snapshot,"component":"ghost"});
        let (v, _d) = answer(&req.to_string());
        assert_eq!(v["kind"], "request", "no question: {v}");
    }
}
