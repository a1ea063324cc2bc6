//! The process adapter: start a component as a detached child in its own session and
//! process group with its output appended to its log, stop it by signalling the whole
//! group (after checking its identity), and find who listens on a port.
//!
//! Everything here is **blocking** and runtime-agnostic (no tokio needed): [`start`]
//! returns within a few milliseconds; [`stop`] blocks up to `grace` + 5 s. From async
//! code, call them through `tokio::task::spawn_blocking`.
//!
//! Each started child is waited for by a small dedicated thread (so it never lingers
//! as a zombie while this process runs); [`ChildWatch`] reports its exit, both
//! synchronously and as a future. When this process exits, the children keep running
//! (they are in their own session) and are re-parented to init, which reaps them.

use crate::identity::{self, argv_digest, IdentityMatch, RuntimeIdentity};
use crate::logs::{file_len, open_append, rotate_if_needed};
pub use crate::spawn::ProcessSpec;
use crate::spawn::{spawn_direct, spawn_through_writer};
use crate::{sys, ExecError};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::str::FromStr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long [`start`] waits for the child's identity to become measurable.
const IDENTITY_DEADLINE: Duration = Duration::from_secs(2);
/// How often [`stop`] checks whether the group is empty.
const STOP_POLL: Duration = Duration::from_millis(10);
/// How long [`stop`] waits for the group to vanish after `SIGKILL`.
const KILL_DEADLINE: Duration = Duration::from_secs(5);

struct WatchState {
    status: Mutex<Option<ExitStatus>>,
    cond: Condvar,
    tx: tokio::sync::watch::Sender<Option<ExitStatus>>,
}

/// Observes the exit of a child started by [`start`]. Cheap to clone; every clone
/// sees the same child.
#[derive(Clone)]
pub struct ChildWatch {
    pid: u32,
    state: Arc<WatchState>,
}

impl fmt::Debug for ChildWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChildWatch")
            .field("pid", &self.pid)
            .field("exit_status", &self.exit_status())
            .finish()
    }
}

impl ChildWatch {
    /// Waits for `child`, reporting it as `pid` (the component's, when `child` is its
    /// log writer, which exits the way the component did).
    fn spawn(
        mut child: std::process::Child,
        pid: u32,
        component: &str,
    ) -> std::io::Result<ChildWatch> {
        let (tx, _) = tokio::sync::watch::channel(None);
        let state = Arc::new(WatchState {
            status: Mutex::new(None),
            cond: Condvar::new(),
            tx,
        });
        let shared = state.clone();
        let component = component.to_string();
        std::thread::Builder::new()
            .name(format!("wait-{pid}"))
            .spawn(move || {
                let status = child.wait().unwrap_or_else(|e| {
                    // Only possible if something else in this process reaps children
                    // (e.g. SIGCHLD set to SIG_IGN): the real status is lost.
                    tracing::warn!(component, pid, error = %e, "waiting for child failed; reporting exit code 255");
                    ExitStatus::from_raw(255 << 8)
                });
                tracing::debug!(component, pid, status = %describe_exit(&status), "child exited");
                remember_exit(pid, status);
                *shared.status.lock().unwrap_or_else(|e| e.into_inner()) = Some(status);
                shared.cond.notify_all();
                shared.tx.send_replace(Some(status));
            })?;
        Ok(ChildWatch { pid, state })
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its exit status once it has exited (and been reaped); `None` while it runs.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        *self.state.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`describe_exit`] of its exit status, `None` while it runs. Shaped to serve as
    /// the "exited?" callback of [`crate::probe::WaitOptions`].
    pub fn exit_description(&self) -> Option<String> {
        self.exit_status()
            .map(|s| format!("pid {} {}", self.pid, describe_exit(&s)))
    }

    /// Blocks until the child exits or `timeout` passes; its status if it exited.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<ExitStatus> {
        let guard = self.state.status.lock().unwrap_or_else(|e| e.into_inner());
        let (guard, _) = self
            .state
            .cond
            .wait_timeout_while(guard, timeout, |s| s.is_none())
            .unwrap_or_else(|e| e.into_inner());
        *guard
    }

    /// Resolves when the child exits (at once if it already has). Needs no particular
    /// runtime.
    pub async fn exited(&self) -> ExitStatus {
        let mut rx = self.state.tx.subscribe();
        let status = rx
            .wait_for(|s| s.is_some())
            .await
            .map(|s| *s)
            .ok()
            .flatten();
        // The sender lives in `state`, which we hold: `wait_for` cannot fail.
        status.unwrap_or_else(|| ExitStatus::from_raw(255 << 8))
    }
}

/// How many exits of reaped children [`reaped_exit`] remembers (the newest).
const REAPED_KEEP: usize = 1024;

/// Exit statuses of the children this process started with [`start`] and reaped,
/// oldest first.
static REAPED: Mutex<std::collections::VecDeque<(u32, ExitStatus)>> =
    Mutex::new(std::collections::VecDeque::new());

fn remember_exit(pid: u32, status: ExitStatus) {
    let mut reaped = REAPED.lock().unwrap_or_else(|e| e.into_inner());
    if reaped.len() == REAPED_KEEP {
        reaped.pop_front();
    }
    reaped.push_back((pid, status));
}

/// The exit status of `pid`, when it was a child this process started with [`start`]
/// (its parent, the only process that can know it) and has exited: how a long-lived
/// caller such as `flotilla agent` tells a clean exit from a crash. `None` when this
/// process did not start it (a process started by another invocation is re-parented
/// to init when that invocation exits, and its status is lost), or it still runs.
/// Remembers the last 1024 exits; the newest one for a pid wins.
pub fn reaped_exit(pid: u32) -> Option<ExitStatus> {
    let reaped = REAPED.lock().unwrap_or_else(|e| e.into_inner());
    reaped
        .iter()
        .rev()
        .find(|(p, _)| *p == pid)
        .map(|(_, s)| *s)
}

pub use crate::exit_status::describe_exit;

/// A component process just started by [`start`].
#[derive(Debug)]
pub struct StartedProcess {
    /// Its identity, measured after `exec` (record it: [`stop`] needs it).
    pub identity: RuntimeIdentity,
    /// Observes its exit.
    pub child: ChildWatch,
    /// The resolved program path that was executed.
    pub program: PathBuf,
    /// Size of the log file when the child started: pass it as
    /// [`crate::probe::ProbeContext::log_start_offset`] so only lines from this run
    /// count.
    pub log_start_offset: u64,
    /// Whether the start marker is already in the log (written by the log writer
    /// before the process's first line); when not, the caller writes it.
    pub start_marked: bool,
}

/// Resolves `program` the way [`start`] does: with a `/`, relative to `cwd`;
/// otherwise searched in `PATH` (`env`'s `PATH` if it sets one, else this process's).
/// The result is an existing regular file with an execute bit.
///
/// # Errors
/// [`ExecError::ProgramNotFound`] (naming the `PATH` searched),
/// [`ExecError::ProgramMissing`] or [`ExecError::NotExecutable`] (naming the path).
pub fn resolve_program(
    component: &str,
    program: &str,
    cwd: &Path,
    env: &[(String, String)],
) -> Result<PathBuf, ExecError> {
    // Absolute, so the path means the same before and after the child's chdir.
    let cwd = &std::path::absolute(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    if program.contains('/') {
        let path = cwd.join(program);
        return check_executable(component, path);
    }
    let path_var = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default();
    let mut not_executable = None;
    for dir in path_var.split(':') {
        // An empty PATH entry means the current directory (of the component).
        let candidate = if dir.is_empty() {
            cwd.join(program)
        } else {
            cwd.join(dir).join(program)
        };
        if candidate.exists() {
            match check_executable(component, candidate) {
                Ok(p) => return Ok(p),
                Err(e) => {
                    not_executable.get_or_insert(e);
                }
            }
        }
    }
    Err(not_executable.unwrap_or(ExecError::ProgramNotFound {
        component: component.to_string(),
        program: program.to_string(),
        searched: path_var,
    }))
}

fn check_executable(component: &str, path: PathBuf) -> Result<PathBuf, ExecError> {
    use std::os::unix::fs::PermissionsExt;
    let md = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ExecError::ProgramMissing {
                component: component.to_string(),
                path,
            })
        }
        Err(e) => {
            return Err(ExecError::NotExecutable {
                component: component.to_string(),
                path,
                why: e.to_string(),
            })
        }
    };
    let why = if md.is_dir() {
        Some("it is a directory".to_string())
    } else if !md.is_file() {
        Some("it is not a regular file".to_string())
    } else if md.permissions().mode() & 0o111 == 0 {
        Some(format!(
            "mode {:o} has no execute bit: chmod +x it",
            md.permissions().mode() & 0o7777
        ))
    } else if let Err(e) = nix::unistd::access(&path, nix::unistd::AccessFlags::X_OK) {
        Some(format!("execute permission denied: {e}"))
    } else {
        None
    };
    match why {
        Some(why) => Err(ExecError::NotExecutable {
            component: component.to_string(),
            path,
            why,
        }),
        None => Ok(path),
    }
}

/// Starts a component's process.
///
/// 1. Checks `cwd` and resolves the program ([`resolve_program`]).
/// 2. Creates the log directory, rotates the log if it exceeds `log_max_bytes`
///    ([`rotate_if_needed`]), opens it with `O_APPEND`.
/// 3. Spawns the program with argv\[0\] = `spec.program`, stdin `/dev/null`,
///    stdout and stderr both appended to the log, this process's environment plus
///    `spec.env`, in a new session and process group (`setsid()` before `exec`).
/// 4. Measures its [`RuntimeIdentity`] once `exec` has replaced the forked image
///    (argv digest matches, or the executable differs from this program), retrying
///    for up to 2 s.
///
/// Blocks for a few milliseconds (the spawn, one `/proc` measurement and, the
/// first time a given executable is seen, hashing it).
///
/// # Errors
/// [`ExecError::BadCwd`], [`ExecError::ProgramNotFound`], [`ExecError::ProgramMissing`],
/// [`ExecError::NotExecutable`], [`ExecError::Log`], [`ExecError::Spawn`];
/// [`ExecError::ExitedAtStart`] (with the exit status) when the child died before
/// its identity could be measured (what it left in its process group is killed); [`ExecError::IdentityUnmeasured`] or a `/proc`
/// error when it could not be measured, in which case the child's group has been
/// sent `SIGKILL` so nothing unaccounted for keeps running.
pub fn start(spec: &ProcessSpec) -> Result<StartedProcess, ExecError> {
    let component = spec.component.as_str();
    if !spec.cwd.is_dir() {
        return Err(ExecError::BadCwd {
            component: component.to_string(),
            cwd: spec.cwd.clone(),
        });
    }
    let program = resolve_program(component, &spec.program, &spec.cwd, &spec.env)?;
    let log_err = |path: &Path, source| ExecError::Log {
        component: component.to_string(),
        path: path.to_path_buf(),
        source,
    };
    rotate_if_needed(&spec.log_path, spec.log_max_bytes, spec.log_keep).map_err(|e| match e {
        ExecError::Io { path, source } => log_err(&path, source),
        other => other,
    })?;
    let log_start_offset = file_len(&spec.log_path);
    let (child, pid, start_marked) = match crate::log_writer::program() {
        Some(writer) => {
            // Opened here too, so an unusable log is named as such.
            drop(open_append(&spec.log_path).map_err(|e| log_err(&spec.log_path, e))?);
            let (child, pid) = spawn_through_writer(writer, spec, &program)?;
            (child, pid, true)
        }
        None => {
            let child = spawn_direct(spec, &program, &log_err)?;
            let pid = child.id();
            (child, pid, false)
        }
    };
    let watch = ChildWatch::spawn(child, pid, component).map_err(|source| ExecError::Spawn {
        component: component.to_string(),
        program: program.clone(),
        source,
    })?;
    tracing::info!(component, pid, program = %program.display(), "started");

    let mut expected_argv: Vec<&str> = vec![&spec.program];
    expected_argv.extend(spec.args.iter().map(String::as_str));
    let expected_argv = argv_digest(&expected_argv);
    let me = std::env::current_exe().ok();
    let deadline = Instant::now() + IDENTITY_DEADLINE;
    let mut last: String;
    loop {
        match identity::measure(pid) {
            Ok(Some(id)) => {
                let execed = id.argv_digest == expected_argv
                    || me.as_deref() != Some(id.exe.as_path())
                    || program == id.exe;
                if execed {
                    return Ok(StartedProcess {
                        identity: id,
                        child: watch,
                        program,
                        log_start_offset,
                        start_marked,
                    });
                }
                last = format!("still running the pre-exec image {}", id.exe.display());
            }
            Ok(None) => {
                let wait = if start_marked {
                    // Exited, and reaped by its log writer, which ends the same way
                    // once its pipes are drained: what the leader left in its group
                    // (a daemonising command's child, holding those pipes) is ours
                    // and unaccounted for, so it is stopped, and the writer waited for.
                    let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
                    crate::log_writer::DRAIN_AFTER_EXIT + Duration::from_secs(1)
                } else {
                    Duration::from_millis(1)
                };
                if let Some(status) = watch.wait_timeout(wait) {
                    // Whatever it left in the group it led (a daemonising command's
                    // background child) is ours and unaccounted for: stop it.
                    let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
                    return Err(ExecError::ExitedAtStart {
                        component: component.to_string(),
                        pid,
                        status: describe_exit(&status),
                    });
                }
                last = "gone from /proc".into();
            }
            Err(e) => {
                kill_unaccounted(&watch);
                return Err(e);
            }
        }
        if Instant::now() >= deadline {
            kill_unaccounted(&watch);
            return Err(ExecError::IdentityUnmeasured {
                component: component.to_string(),
                pid,
                why: last,
            });
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// SIGKILLs the group of a child we just spawned and could not measure. Safe: the
/// child is ours and not yet reaped (its pid cannot have been reused) unless the
/// watcher saw it exit.
fn kill_unaccounted(watch: &ChildWatch) {
    if watch.exit_status().is_none() {
        let _ = killpg(Pid::from_raw(watch.pid as i32), Signal::SIGKILL);
    }
}

/// Parses a signal name: `"SIGTERM"`, `"TERM"`, `"sigterm"`.
///
/// # Errors
/// [`ExecError::UnknownSignal`].
pub fn parse_signal(name: &str) -> Result<Signal, ExecError> {
    let upper = name.trim().to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    Signal::from_str(&full).map_err(|_| ExecError::UnknownSignal {
        name: name.to_string(),
    })
}

/// What [`stop`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "outcome")]
pub enum StopOutcome {
    /// The recorded process and its whole process group are gone; nothing was
    /// signalled.
    AlreadyGone {
        /// Always empty: leftover members of the group are stopped instead.
        survivors: Vec<u32>,
    },
    /// The pid now belongs to another process; nothing was signalled.
    IdentityMismatch {
        /// What runs under the pid now.
        measured: RuntimeIdentity,
        /// What differs.
        why: String,
    },
    /// The process (and its whole group) is gone.
    Stopped {
        /// The first signal sent, e.g. `"SIGTERM"`.
        signal: String,
        /// Whether `SIGKILL` had to follow after the grace period.
        escalated_to_kill: bool,
        /// From the first signal until the group was empty (serialised as
        /// fractional milliseconds, `took_ms`).
        #[serde(rename = "took_ms", with = "crate::serde_ms")]
        took: Duration,
    },
}

/// Stops a process started by [`start`], identity first (invariant 5).
///
/// 1. Measures `expected.pid` and compares ([`identity::matches()`]): pid reused →
///    [`StopOutcome::IdentityMismatch`], nothing signalled; gone with no member of
///    its process group left → [`StopOutcome::AlreadyGone`]; gone but members of the
///    group it led live on (a daemonising command) → those are stopped as below (a
///    process group id is not reused while the group has members).
/// 2. Sends `signal` (then `SIGCONT`, so a stopped process can act on it) to the
///    process group `expected.pgid` — or to the pid alone when the process does not
///    lead its own group (an identity not recorded by [`start`]).
/// 3. Polls every 10 ms until no live process is in the group, for up to `grace`.
/// 4. Then sends `SIGKILL` to the group and polls up to 5 s more.
///
/// Blocks for up to `grace` + 5 s. Processes that left the group (`setsid`/`setpgid`
/// in a grandchild) are not reached: a limitation of process groups.
///
/// # Errors
/// [`ExecError::UnknownSignal`]; `/proc` errors from measuring; [`ExecError::Signal`]
/// (e.g. EPERM); [`ExecError::GroupSurvived`] if processes outlive `SIGKILL` by 5 s.
pub fn stop(
    expected: &RuntimeIdentity,
    signal: &str,
    grace: Duration,
) -> Result<StopOutcome, ExecError> {
    let sig = parse_signal(signal)?;
    let leads_group = expected.pgid > 0 && expected.pgid == expected.pid as i32;
    let (verdict, measured) = identity::verify(expected)?;
    let mut leftovers = false;
    match verdict {
        IdentityMatch::Gone => {
            let survivors = if leads_group {
                sys::group_members(expected.pgid)?
            } else {
                Vec::new()
            };
            if survivors.is_empty() {
                return Ok(StopOutcome::AlreadyGone { survivors });
            }
            // The leader exited but members of its group live on (a command that
            // daemonised, a child that outlived a crash). A process group id is never
            // handed out again while the group has members, so these are provably the
            // group that was started: stop them like the group itself.
            leftovers = true;
        }
        IdentityMatch::Reused { why } => {
            tracing::warn!(pid = expected.pid, %why, "pid reused: not signalling");
            return Ok(StopOutcome::IdentityMismatch {
                measured: measured.expect("a reused pid was measured"),
                why,
            });
        }
        IdentityMatch::Same => {}
    }
    let group = leftovers
        || (leads_group
            && measured.as_ref().expect("a matching pid was measured").pgid == expected.pgid);
    let target = if group {
        format!("process group {}", expected.pgid)
    } else {
        format!("pid {}", expected.pid)
    };
    let gone = || -> Result<bool, ExecError> {
        if group {
            Ok(sys::group_members(expected.pgid)?.is_empty())
        } else {
            Ok(match sys::read_stat(expected.pid)? {
                None => true,
                Some(st) => st.is_dead() || st.start_time_ticks != expected.start_time_ticks,
            })
        }
    };
    let send = |s: Signal| -> Result<(), ExecError> {
        let r = if group {
            killpg(Pid::from_raw(expected.pgid), s)
        } else {
            kill(Pid::from_raw(expected.pid as i32), s)
        };
        match r {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
            Err(source) => Err(ExecError::Signal {
                target: target.clone(),
                signal: s.as_str().to_string(),
                source,
            }),
        }
    };
    let wait_until = |deadline: Instant| -> Result<bool, ExecError> {
        loop {
            if gone()? {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            std::thread::sleep(STOP_POLL.min(deadline - now));
        }
    };

    let t0 = Instant::now();
    tracing::info!(pid = expected.pid, %target, signal = sig.as_str(), "stopping");
    send(sig)?;
    if sig != Signal::SIGKILL && sig != Signal::SIGCONT {
        send(Signal::SIGCONT)?;
    }
    if wait_until(t0 + grace)? {
        return Ok(StopOutcome::Stopped {
            signal: sig.as_str().to_string(),
            escalated_to_kill: false,
            took: t0.elapsed(),
        });
    }
    tracing::warn!(pid = expected.pid, %target, ?grace, "grace period over: SIGKILL");
    send(Signal::SIGKILL)?;
    if wait_until(Instant::now() + KILL_DEADLINE)? {
        return Ok(StopOutcome::Stopped {
            signal: sig.as_str().to_string(),
            escalated_to_kill: sig != Signal::SIGKILL,
            took: t0.elapsed(),
        });
    }
    Err(ExecError::GroupSurvived {
        pgid: expected.pgid,
        survivors: if group {
            sys::group_members(expected.pgid)?
        } else {
            vec![expected.pid]
        },
    })
}

/// `SIGTERM` to the one process `pid` (not its group) if it still is the process
/// that started at `start_time_ticks` (identity before signal), `SIGKILL` after
/// `grace`: [`stop`] for a process known by pid and start time only (one this crate
/// did not start, such as the agent a self-update replaces).
///
/// Gone → [`StopOutcome::AlreadyGone`]; the pid now names another process →
/// [`StopOutcome::IdentityMismatch`]; in both cases nothing is signalled.
///
/// # Errors
/// As [`stop`].
pub fn stop_identified(
    pid: u32,
    start_time_ticks: u64,
    grace: Duration,
) -> Result<StopOutcome, ExecError> {
    let Some(mut measured) = identity::measure(pid)? else {
        return Ok(StopOutcome::AlreadyGone {
            survivors: Vec::new(),
        });
    };
    if measured.start_time_ticks != start_time_ticks {
        let why = format!(
            "pid {pid} start time {} ≠ recorded {start_time_ticks} (clock ticks since boot)",
            measured.start_time_ticks
        );
        return Ok(StopOutcome::IdentityMismatch { measured, why });
    }
    // No group: the pid alone is signalled.
    measured.pgid = 0;
    stop(&measured, "SIGTERM", grace)
}

/// Pids of the live (non-zombie) processes in process group `pgid`, sorted.
///
/// # Errors
/// [`ExecError::Io`] if `/proc` cannot be listed; [`ExecError::Unsupported`] off Linux.
pub fn group_members(pgid: i32) -> Result<Vec<u32>, ExecError> {
    sys::group_members(pgid)
}

/// The environment variable marking a process started by Flotilla: its value is
/// `<operation id>/<component>@<state directory>` (no secret), so a process launched
/// by an invocation that was killed before journaling it can still be recognised as
/// its own — by that state directory only.
pub const INSTANCE_MARKER: &str = "FLOTILLA_INSTANCE";

/// The marker value for `operation`/`component` in `state_dir`.
pub fn instance_marker(operation: &str, component: &str, state_dir: &Path) -> String {
    format!("{operation}/{component}@{}", state_dir.display())
}

/// Which Flotilla started `pid`, from its [`INSTANCE_MARKER`]: `component `llm` of
/// flotilla project `other` in /srv/state/projects/other (op-7)` (the directory
/// tells apart projects of the same name in different state directories), or of
/// the state directory it names when that is not a project's.
pub fn flotilla_owner(pid: u32) -> Option<String> {
    let marker = sys::environ_var(pid, INSTANCE_MARKER)?;
    let (rest, dir) = marker.split_once('@')?;
    let (op, component) = rest.split_once('/')?;
    let dir = Path::new(dir);
    Some(match crate::statedir::StateDir::project_of(dir) {
        Some(project) => format!(
            "component `{component}` of flotilla project `{project}` in {} ({op})",
            dir.display()
        ),
        None => format!(
            "component `{component}` of the flotilla state directory {} ({op})",
            dir.display()
        ),
    })
}

/// Live process-group leaders carrying an [`INSTANCE_MARKER`] for `state_dir`:
/// `(pid, operation id, component)` for each.
///
/// # Errors
/// [`ExecError::Io`] if `/proc` cannot be listed; [`ExecError::Unsupported`] off Linux.
pub fn marked_processes(state_dir: &Path) -> Result<Vec<(u32, String, String)>, ExecError> {
    let suffix = format!("@{}", state_dir.display());
    let mut out = Vec::new();
    for pid in sys::list_pids()? {
        let Some(marker) = sys::environ_var(pid, INSTANCE_MARKER) else {
            continue;
        };
        let Some(rest) = marker.strip_suffix(&suffix) else {
            continue;
        };
        let Some((op, component)) = rest.split_once('/') else {
            continue;
        };
        let leader = sys::read_stat(pid)
            .ok()
            .flatten()
            .is_some_and(|st| !st.is_dead() && st.pgrp == pid as i32);
        if leader {
            out.push((pid, op.to_string(), component.to_string()));
        }
    }
    Ok(out)
}

/// A process listening on a TCP port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listener {
    /// The owning pid; `None` when not visible (another user's process, without
    /// privileges to read its file descriptors).
    pub pid: Option<u32>,
    /// The owner's executable name (basename of `/proc/<pid>/exe`, else its `comm`);
    /// never its arguments, which may hold secrets.
    pub command: Option<String>,
    /// The local address listened on (e.g. `127.0.0.1:8080`, `[::]:8080`).
    pub address: SocketAddr,
}

impl Listener {
    /// Who it is, for messages: `pid 4242 (python3)`, or that it cannot be seen;
    /// for a process another Flotilla project started, which one
    /// (`pid 4242 (llama-server), component `llm` of flotilla project `other` in
    /// /srv/state/projects/other (op-7)`).
    pub fn describe(&self) -> String {
        let who = match (self.pid, &self.command) {
            (Some(p), Some(cmd)) => format!("pid {p} ({cmd})"),
            (Some(p), None) => format!("pid {p}"),
            _ => return "a process this user cannot see".into(),
        };
        match self.pid.and_then(flotilla_owner) {
            Some(owner) => format!("{who}, {owner}"),
            None => who,
        }
    }
}

/// Who listens on TCP `port` (IPv4 and IPv6), from `/proc/net/tcp{,6}` and the
/// `/proc/*/fd` socket links. One entry per (socket, owning pid); a socket whose
/// owner is not visible yields one entry with `pid: None`. Empty when nobody listens.
/// Sockets in other network namespaces are not seen.
///
/// Scans every process's file descriptors: milliseconds on a typical machine.
///
/// # Errors
/// [`ExecError::Io`] / [`ExecError::ProcFormat`] for unreadable or malformed
/// `/proc/net/tcp`; [`ExecError::Unsupported`] off Linux.
pub fn listeners(port: u16) -> Result<Vec<Listener>, ExecError> {
    Ok(listeners_on(&[port])?.remove(&port).unwrap_or_default())
}

/// [`listeners`] for several ports at once, reading `/proc/net/tcp{,6}` and the
/// `/proc/*/fd` links once: ports nobody listens on are absent from the map.
///
/// # Errors
/// As [`listeners`].
pub fn listeners_on(
    ports: &[u16],
) -> Result<std::collections::HashMap<u16, Vec<Listener>>, ExecError> {
    let mut out: std::collections::HashMap<u16, Vec<Listener>> = std::collections::HashMap::new();
    if ports.is_empty() {
        return Ok(out);
    }
    let wanted = ports.iter().copied().collect();
    for l in listening(Some(&wanted))? {
        out.entry(l.address.port()).or_default().push(l);
    }
    Ok(out)
}

/// Every TCP listener of this machine's network namespace (IPv4 and IPv6), as
/// [`listeners`] sees them, in the order of `/proc/net/tcp` then `tcp6`.
///
/// # Errors
/// As [`listeners`].
pub fn all_listeners() -> Result<Vec<Listener>, ExecError> {
    listening(None)
}

/// The listeners on `ports` (all when `None`): one entry per (socket, owning pid).
fn listening(ports: Option<&std::collections::HashSet<u16>>) -> Result<Vec<Listener>, ExecError> {
    let sockets = sys::tcp_listeners(ports)?;
    let inodes = sockets
        .iter()
        .map(|(_, i)| *i)
        .filter(|i| *i != 0)
        .collect();
    let owners = sys::socket_owners(&inodes)?;
    let mut out = Vec::new();
    for (address, inode) in sockets {
        match owners.get(&inode) {
            Some(pids) if !pids.is_empty() => {
                for &pid in pids {
                    out.push(Listener {
                        pid: Some(pid),
                        command: command_name(pid),
                        address,
                    });
                }
            }
            _ => out.push(Listener {
                pid: None,
                command: None,
                address,
            }),
        }
    }
    Ok(out)
}

fn command_name(pid: u32) -> Option<String> {
    if let Ok(Some(exe)) = sys::read_exe_link(pid) {
        if let Some(name) = identity::strip_deleted(&exe).file_name() {
            return Some(name.to_string_lossy().into_owned());
        }
    }
    sys::read_comm(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names() {
        assert_eq!(parse_signal("SIGTERM").unwrap(), Signal::SIGTERM);
        assert_eq!(parse_signal("term").unwrap(), Signal::SIGTERM);
        assert_eq!(parse_signal("SIGKILL").unwrap(), Signal::SIGKILL);
        assert!(matches!(
            parse_signal("SIGNOPE"),
            Err(ExecError::UnknownSignal { .. })
        ));
    }

    #[test]
    fn exit_descriptions() {
        assert_eq!(
            describe_exit(&ExitStatus::from_raw(1 << 8)),
            "exit status 1"
        );
        assert_eq!(describe_exit(&ExitStatus::from_raw(9)), "killed by SIGKILL");
    }

    #[test]
    fn spec_debug_hides_env_values() {
        let spec = ProcessSpec {
            component: "c".into(),
            program: "p".into(),
            args: vec![],
            env: vec![("TOKEN".into(), "hunter2".into())],
            inherit_env: false,
            cwd: "/".into(),
            log_path: "/tmp/x.log".into(),
            log_max_bytes: 0,
            log_keep: 0,
            start_note: String::new(),
        };
        let s = format!("{spec:?}");
        assert!(s.contains("TOKEN=<redacted>") && !s.contains("hunter2"));
    }
}
