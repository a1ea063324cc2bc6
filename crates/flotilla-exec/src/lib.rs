//! Flotilla's execution side: the only crate that starts, signals or probes processes.
//!
//! Code map:
//! - [`identity`]: [`RuntimeIdentity`] (pid, start time, executable path and digest,
//!   argv digest), measured from the OS; comparing a recorded identity with the
//!   current one ([`identity::matches()`]); stale-runtime detection.
//! - [`adapter`]: the [`adapter::Adapter`] trait and one module per native owner
//!   (`process`, `ssh_tunnel`, `external`, `systemd`, `launchd`, `container`), looked up through
//!   [`adapter::Adapters`]; the executor and observer know no adapter by name.
//! - [`transport`]: the [`transport::Transport`] trait (how a call reaches a remote
//!   host's executor), implemented by the SSH pool and by
//!   [`transport::agent::AgentTransport`] (calls for `agent` hosts queued on the
//!   authority for their agents).
//! - [`process`]: process mechanics behind the process-family adapters: [`process::start`] a component detached in its
//!   own session and process group with output appended to its log;
//!   [`process::stop`] its whole group, identity first (invariant 5);
//!   [`process::listeners`] on a port (conflict detection);
//!   [`process::stop_identified`], one process known by pid and start time.
//! - [`backup`]: backups of a project's state directory as the CLI and the agent
//!   take them (default directory, retention policy, [`backup::backup_before`] a
//!   risky step), restore under the project's lifecycle lock (refused while its
//!   processes run), and [`backup::SystemPgTools`] (`pg_dump`, `pg_restore`).
//! - [`detached`]: programs that are not components: a service manager's verb run to
//!   its end ([`detached::run_verb`]), a detached start in a session of its own
//!   ([`detached::spawn_detached`]), this process replaced in place
//!   ([`detached::exec_in_place`]).
//! - [`browser`]: opening a URL in this machine's browser (`$BROWSER`, `open`,
//!   `xdg-open`), for `flotilla ui`.
//! - [`logs`]: copy-truncate rotation, `tail`, and the scan behind `log` probes.
//! - [`probe`]: one check of any probe kind ([`probe::check`], [`probe::observe`]) and
//!   the readiness wait ([`probe::wait_ready`], [`probe::wait_ready_with`]), each
//!   yielding evidence.
//! - [`environment`]: a component's start environment (a small base, `inherit_env`,
//!   `env_file`, declared `env`, `${env.NAME}`), never the invoking shell's.
//! - [`secrets`]: [`secrets::SecretResolver`]: secret names → values from the
//!   environment or an owner-only secrets file (invariant 9).
//! - [`executor`]: applies a plan wave by wave (steps in parallel), journaled, with
//!   readiness waits and cleanup of what it started when a step fails.
//! - [`progress`]: a plan's progress events as the lines every face shows.
//! - [`observe`]: the status that cannot lie: every signal measured now, with evidence.
//! - [`operate`]: one mutating invocation end to end (lock, reconcile, observe, plan,
//!   journal, apply).
//! - [`ssh`]: the SSH transport ([`ssh::Pool`]: one multiplexed OpenSSH master per
//!   host per invocation, strict host keys, typed [`ssh::TransportError`]s) and the
//!   `ssh-tunnel` command line.
//! - [`remote`]: the versioned JSON exchange with `flotilla host serve` on a host
//!   (hello, observe, step): the protocol and the controller side ([`remote::call`]).
//! - [`host_mode`]: the host side of that exchange ([`host_mode::serve`]).
//! - [`this_process`]: the wall clock and who runs this process, for the journal.
//! - [`step_report`]: how one step ended, shared by the executor and the wire.
//! - [`discover`]: `flotilla discover`: what runs on a host that the inventory does
//!   not cover (listening processes, systemd units, containers), each with a proposed
//!   inventory entry and a readiness probe guessed from what answers. Read-only.
//! - [`adopt`]: `flotilla adopt`: a component running under another owner (a
//!   process started by hand, a systemd unit) moved to its declared owner as a
//!   shown plan — baseline, stop the prior owner, start, acceptance, keep or roll
//!   back — each step written to a durable record first.
//! - [`hosts`]: `flotilla host install` (checksummed, versioned releases and a
//!   `current` link) and `flotilla host check`.
//! - [`launchctl`]: pure helpers for the launchd adapter: the job plist
//!   ([`launchctl::JobPlist`], XML out, XML or binary in), the parse of
//!   `launchctl print` ([`launchctl::parse_print`]) and domain/service targets.
//! - [`preflight`]: `flotilla check`: programs, files, `env_file`s, secrets and ports
//!   of components, checked on their host before anything starts.
//! - [`lock`]: the lifecycle lock (one mutating invocation per state directory) and
//!   [`lock::try_lock_file`], the workspace's one non-blocking `flock`.
//! - [`statedir`]: where local state lives, and what each file is.
//! - [`error`]: the error type, [`ExecError`].
//! - [`sys`]: the platform boundary, where every `/proc` read of the workspace lives.
//!   Linux reads `/proc`; elsewhere every `/proc`-based function fails with
//!   [`ExecError::Unsupported`] (or answers `None`).
//!
//! Threads vs async: [`identity`], [`process`], [`logs`] and [`secrets`] are blocking
//! and need no runtime (call them via `spawn_blocking` from async code; only
//! [`process::stop`] blocks long: up to its grace period + 5 s). [`probe`] is async
//! (tokio: time, net, process, blocking pool).
//!
//! External components (owner `external`) are only ever probed: nothing in this crate
//! mutates a process it was not given a [`RuntimeIdentity`] for.
//!
//! HTTP probes speak plain `http://` (they target loopback endpoints). `https://`
//! needs a TLS backend: reqwest's `rustls-no-provider` feature plus `rustls` with its
//! `ring` feature and `rustls::crypto::ring::default_provider().install_default()`
//! avoids aws-lc (and its cmake build); not enabled yet.

#![warn(missing_docs)]

pub mod adapter;
pub mod adopt;
pub mod backup;
pub mod browser;
pub mod detached;
pub mod discover;
pub mod environment;
pub mod error;
pub mod executor;
pub mod exit_status;
pub mod host_mode;
pub mod hosts;
pub mod identity;
pub mod launchctl;
pub mod lock;
pub mod log_writer;
pub mod logs;
pub mod observe;
pub mod operate;
pub mod placement;
pub mod preflight;
pub mod probe;
pub mod process;
pub mod progress;
pub mod remote;
pub mod secrets;
mod spawn;
pub mod ssh;
pub mod statedir;
pub mod step_report;
pub mod supervision;
pub mod sys;
pub mod this_process;
pub mod transport;
pub mod world;

/// Serialises a `Duration` as fractional milliseconds (microsecond precision).
pub(crate) mod serde_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64((d.as_secs_f64() * 1e6).round() / 1e3)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let ms = f64::deserialize(d)?;
        Ok(Duration::from_secs_f64(ms.max(0.0) / 1e3))
    }
}

pub use error::ExecError;
pub use identity::{IdentityMatch, RuntimeIdentity};
pub use logs::{rotate_if_needed, tail_log};
pub use probe::{ProbeContext, ProbeOutcome, WaitError, WaitFailure, WaitOptions};
pub use process::{ProcessSpec, StartedProcess, StopOutcome};
pub use secrets::{SecretError, SecretResolver};
/// Cancellation passed down to an invocation, an executor or a host-mode step.
pub use tokio_util::sync::CancellationToken;

/// The start time of process `pid` (clock ticks since boot, field 22 of
/// `/proc/<pid>/stat`, proc(5)) while it exists and has not exited; `None` when it
/// is gone, a zombie, or cannot be read (no `/proc`: not Linux). With the pid, it
/// names one process for good: a reused pid has another start time.
pub fn process_start_ticks(pid: u32) -> Option<u64> {
    sys::read_stat(pid)
        .ok()
        .flatten()
        .filter(|s| !s.is_dead())
        .map(|s| s.start_time_ticks)
}
