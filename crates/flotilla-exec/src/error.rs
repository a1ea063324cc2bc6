//! The crate's error type, [`ExecError`]. Every variant names what it is about: the
//! component, the pid or process group, or the path involved.

use std::path::PathBuf;

/// Why starting, measuring, signalling or reading a process (or its log) failed.
///
/// Probe failures are not errors: they are [`crate::probe::ProbeOutcome`]s with
/// `passed: false`. Secret lookups fail with [`crate::secrets::SecretError`].
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The program has no `/` and was not found in any `PATH` directory.
    #[error("component `{component}`: program `{program}` not found in PATH ({searched})")]
    ProgramNotFound {
        /// The component being started.
        component: String,
        /// The program as written.
        program: String,
        /// The `PATH` value searched (the component's own `PATH` when it sets one).
        searched: String,
    },

    /// The program path does not exist.
    #[error("component `{component}`: program {path} does not exist")]
    ProgramMissing {
        /// The component being started.
        component: String,
        /// The resolved path (relative paths are resolved against the component's cwd).
        path: PathBuf,
    },

    /// The program exists but cannot be executed.
    #[error("component `{component}`: program {path} is not executable ({why})")]
    NotExecutable {
        /// The component being started.
        component: String,
        /// The resolved path.
        path: PathBuf,
        /// E.g. "it is a directory", "no execute permission: chmod +x it".
        why: String,
    },

    /// The working directory does not exist or is not a directory.
    #[error(
        "component `{component}`: working directory {cwd} does not exist or is not a directory"
    )]
    BadCwd {
        /// The component being started.
        component: String,
        /// The directory.
        cwd: PathBuf,
    },

    /// Creating, rotating or opening a log file failed.
    #[error("component `{component}`: log file {path}: {source}")]
    Log {
        /// The component (empty when called outside a start, e.g. from `rotate_if_needed`).
        component: String,
        /// The file or directory involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// `fork`/`exec` failed.
    #[error("component `{component}`: could not start {program}: {source}")]
    Spawn {
        /// The component being started.
        component: String,
        /// The resolved program path.
        program: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// The child exited before its runtime identity could be measured.
    #[error("component `{component}`: pid {pid} exited at once ({status})")]
    ExitedAtStart {
        /// The component being started.
        component: String,
        /// Its pid.
        pid: u32,
        /// Its exit, described ("exit status 127", "killed by SIGSEGV").
        status: String,
    },

    /// The child was spawned but its identity could not be measured before the deadline.
    #[error(
        "component `{component}`: pid {pid} started but its identity could not be measured: {why}"
    )]
    IdentityUnmeasured {
        /// The component being started.
        component: String,
        /// Its pid.
        pid: u32,
        /// What was last seen.
        why: String,
    },

    /// Reading `/proc` (or hashing an executable) failed for a reason other than the
    /// process being gone, e.g. permission denied for another user's process.
    #[error("pid {pid}: reading {path}: {source}")]
    Proc {
        /// The process.
        pid: u32,
        /// The `/proc` file read.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// Reading a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// A `/proc` file did not have the expected format.
    #[error("pid {pid}: {path} is malformed: {why}")]
    ProcFormat {
        /// The process (0 for system-wide files such as `/proc/net/tcp`).
        pid: u32,
        /// The file.
        path: PathBuf,
        /// What was wrong.
        why: String,
    },

    /// The signal name is not a known POSIX signal.
    #[error("unknown signal `{name}` (expected e.g. SIGTERM, SIGINT, SIGHUP, SIGKILL)")]
    UnknownSignal {
        /// The name given.
        name: String,
    },

    /// `kill`/`killpg` failed (other than "no such process").
    #[error("sending {signal} to {target}: {source}")]
    Signal {
        /// `"process group 4242"` or `"pid 4242"`.
        target: String,
        /// The signal name.
        signal: String,
        /// The OS error (e.g. EPERM).
        #[source]
        source: nix::errno::Errno,
    },

    /// Processes were still in the group 5 s after `SIGKILL` (e.g. stuck in
    /// uninterruptible sleep).
    #[error("process group {pgid} still has {} process(es) 5 s after SIGKILL: {survivors:?}", survivors.len())]
    GroupSurvived {
        /// The process group.
        pgid: i32,
        /// Pids still in it.
        survivors: Vec<u32>,
    },

    /// A service manager's command (`systemctl`, `launchctl`) failed.
    #[error("component `{component}`: `{command}` failed ({}){}", status.map(|c| format!("exit status {c}")).unwrap_or_else(|| "killed by a signal".into()), if stderr.is_empty() { String::new() } else { format!(": {stderr}") })]
    OwnerCommand {
        /// The component.
        component: String,
        /// The command line run.
        command: String,
        /// Its exit code (`None`: killed by a signal).
        status: Option<i32>,
        /// What it printed on stderr (trimmed).
        stderr: String,
    },

    /// An adapter could not do what was asked, for the reason given.
    #[error("component `{component}`: {message}")]
    Adapter {
        /// The component.
        component: String,
        /// Why.
        message: String,
    },

    /// This operation needs an OS facility that only the Linux implementation has.
    #[error("{what} is only implemented on Linux (this is {os})")]
    Unsupported {
        /// What was asked.
        what: &'static str,
        /// `std::env::consts::OS`.
        os: &'static str,
    },
}

/// `e` and its sources, joined by `: ` (what a one-line report of an error shows).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}
