//! The log writer: a small process that owns a component's stdout and stderr pipes
//! and stamps every line with the time it was read, the way a container runtime's
//! shim (conmon, containerd-shim) owns a container's output.
//!
//! **Why a process of its own.** A component outlives the `flotilla` invocation that
//! started it, so something that outlives it too must read its pipes. The writer is
//! the component's parent: [`crate::process::start`] starts `flotilla log-writer`
//! (this program, [`enable`]d by the binary), hands it the component's command,
//! environment and log over its stdin, and reads back the component's pid. The
//! writer then:
//! 1. starts the component (its own session and process group, stdin `/dev/null`,
//!    stdout and stderr two pipes), and writes the start marker
//!    (`started pid N …`, see [`crate::logs::append_marker`]) before it reads the
//!    component's first byte;
//! 2. appends each line it reads to the log in the Kubernetes CRI container log
//!    format (`<RFC 3339 time> <stdout|stderr> <F|P> <text>`, the format kubelet,
//!    containerd and CRI-O write; see the CRI "container log" design,
//!    <https://github.com/kubernetes/design-proposals-archive/blob/main/node/kubelet-cri-logging.md>):
//!    `F` a whole line, `P` a piece of a line longer than [`MAX_LINE`] bytes (or
//!    one the component left unfinished when its output closed);
//! 3. when the component exits, writes a marker with how it ended
//!    (`pid N ended: exit status 3` / `…: killed by SIGTERM`) after the lines it
//!    wrote, and exits **the same way** (same exit code, or the same signal), so its
//!    own parent sees the component's exit status as if it were the component.
//!
//! It lives in its own session (Ctrl-C in the terminal that ran `flotilla up` does
//! not reach it), ignores `SIGINT`, `SIGTERM` and `SIGHUP` (its component decides
//! when it ends; a handler, unlike an ignored disposition, is not inherited across
//! `exec`), and carries no environment of the component's (so it is never taken for
//! the component by its instance marker). If it is killed anyway (`SIGKILL`), the
//! component's next write fails with `EPIPE`.
//!
//! Lines written by processes the component left behind after it exited are read
//! for at most [`DRAIN_AFTER_EXIT`] more.

use crate::detached::{in_new_session, spawn_when_not_busy};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// The subcommand of the `flotilla` binary that runs [`main`]: `flotilla log-writer`.
pub const SUBCOMMAND: &str = "log-writer";
/// Longest piece of a line written as one log line (bytes); longer lines are split
/// into `P` pieces followed by the `F` rest, as CRI runtimes do (16 KiB there too).
pub const MAX_LINE: usize = 16 * 1024;
/// How long the writer keeps reading after its component exited, for lines still in
/// the pipes or written by processes it left behind.
pub const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

static PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// Declares that `program` answers `program log-writer` with [`main`] (the `flotilla`
/// binary calls this with its own path at start): from then on
/// [`crate::process::start`] starts components through it. Until then (e.g. in a
/// library's own tests) components write to their log directly and their lines are
/// timed by the markers around them. The first call wins.
pub fn enable(program: PathBuf) {
    let _ = PROGRAM.set(program);
}

/// The program [`enable`]d, if any.
pub fn program() -> Option<&'static Path> {
    PROGRAM.get().map(PathBuf::as_path)
}

/// What the starter hands the writer on its stdin (one JSON document). Carries the
/// component's environment, secrets included: it travels through a pipe, never in
/// an argument list.
#[derive(Serialize, Deserialize)]
pub struct Request {
    /// The resolved program to execute.
    pub program: PathBuf,
    /// argv\[0\] as declared.
    pub arg0: String,
    /// Arguments after argv\[0\].
    pub args: Vec<String>,
    /// The component's whole environment.
    pub env: Vec<(String, String)>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// The log file (appended to; created with its directory).
    pub log: PathBuf,
    /// Appended to `started pid N` in the start marker, e.g. ` (op-12)`.
    pub start_note: String,
    /// Rotate the log (copy-truncate) whenever it grows past this many bytes (0:
    /// never).
    #[serde(default)]
    pub log_max_bytes: u64,
    /// Rotated copies kept.
    #[serde(default)]
    pub log_keep: u32,
}

/// What the writer answers on its stdout once the component started (one JSON line).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// The component runs as this pid.
    Started {
        /// Its pid.
        pid: u32,
    },
    /// It could not be started.
    SpawnFailed {
        /// The OS error number, when there was one.
        errno: Option<i32>,
        /// What failed.
        message: String,
    },
}

/// The log the relays share.
struct Log {
    file: File,
    /// Closed to relays: the end marker is written.
    closed: bool,
    path: PathBuf,
    /// Rotate (copy-truncate) when larger than this many bytes (0: never).
    max_bytes: u64,
    /// Rotated copies kept.
    keep: u32,
    /// Its length as far as the writes tell (another process's rotation makes it
    /// an overestimate, corrected when it is checked).
    len: u64,
}

type SharedLog = Arc<Mutex<Log>>;

/// Copies one pipe into the log until it closes: each whole line as an `F` line,
/// a line longer than [`MAX_LINE`] as `P` pieces then the `F` rest, and what a read
/// ends with before its newline at once as a `P` piece (so a prompt or a progress
/// line is in the log when it is written, not when its line ends; readers join the
/// pieces).
fn relay(mut pipe: impl Read, stream: &'static str, log: SharedLog) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        // (text, whole) pieces of this read.
        let mut pieces: Vec<(&[u8], bool)> = Vec::new();
        let mut rest = &buf[..n];
        loop {
            let (line, whole, next) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (&rest[..i], true, &rest[i + 1..]),
                None => (rest, false, &rest[rest.len()..]),
            };
            if line.is_empty() && !whole {
                break;
            }
            let line = match (whole, line.strip_suffix(b"\r")) {
                (true, Some(l)) => l,
                _ => line,
            };
            let mut chunks = line.chunks(MAX_LINE).peekable();
            if chunks.peek().is_none() {
                pieces.push((line, whole));
            }
            while let Some(c) = chunks.next() {
                pieces.push((c, whole && chunks.peek().is_none()));
            }
            rest = next;
            if rest.is_empty() {
                break;
            }
        }
        let mut held = log.lock().unwrap_or_else(|e| e.into_inner());
        if held.closed {
            return;
        }
        // Stamped under the lock, so times never decrease down the file; one write
        // per read, so with O_APPEND it lands whole, after Flotilla's markers.
        let stamp = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let mut out = Vec::with_capacity(n + pieces.len() * 40);
        for (text, whole) in pieces {
            crate::logs::push_stamped(&mut out, &stamp, stream, whole, text);
        }
        if held.file.write_all(&out).is_ok() {
            held.len += out.len() as u64;
        }
        // Kept to its size while it runs, not only when something starts: the
        // file is appended to, so after the copy-truncate the next line lands at 0.
        if held.max_bytes > 0 && held.len > held.max_bytes {
            let _ = crate::logs::rotate_if_needed(&held.path, held.max_bytes, held.keep);
            held.len = crate::logs::file_len(&held.path);
        }
    }
}

/// Relays `pipe` (when there is one) into `log` on a thread of its own, which says
/// on `done` when the pipe closed. Whether a relay runs.
fn start_relay(
    pipe: Option<impl Read + Send + 'static>,
    stream: &'static str,
    log: &SharedLog,
    done: &std::sync::mpsc::Sender<()>,
) -> bool {
    let Some(pipe) = pipe else { return false };
    let (log, done) = (Arc::clone(log), done.clone());
    std::thread::Builder::new()
        .spawn(move || {
            relay(pipe, stream, log);
            let _ = done.send(());
        })
        .is_ok()
}

extern "C" fn ignore(_: nix::libc::c_int) {}

/// Handles (and so ignores) the signals a terminal or a service manager sends, in a
/// way that `exec` resets for the component.
fn shield_from_signals() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let act = SigAction::new(
        SigHandler::Handler(ignore),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler does nothing, so it is async-signal-safe.
        let _ = unsafe { sigaction(sig, &act) };
    }
}

/// Ends the way `status` says a process ended: by its signal (the default action
/// restored, no core dump of this process), which does not return for a signal
/// that terminates; else the exit code to return from `main` (`128 + signal` for a
/// signal that does not terminate).
fn end_like(status: ExitStatus) -> ExitCode {
    if let Some(sig) = status.signal() {
        use nix::sys::signal::{raise, signal, SigHandler, SigSet, SigmaskHow, Signal};
        if let Ok(sig) = Signal::try_from(sig) {
            let _ = nix::sys::prctl::set_dumpable(false);
            // SAFETY: restoring the default action installs no handler.
            let _ = unsafe { signal(sig, SigHandler::SigDfl) };
            let mut set = SigSet::empty();
            set.add(sig);
            let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&set), None);
            let _ = raise(sig);
        }
        return ExitCode::from((128 + sig).clamp(0, 255) as u8);
    }
    ExitCode::from(status.code().unwrap_or(255).clamp(0, 255) as u8)
}

/// Writes `reply` as one JSON line to this process's stdout, then points stdout at
/// `/dev/null` so the starter's closed end can never fail a later write.
fn answer(reply: &Reply) {
    let mut out = io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, reply);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
    drop(out);
    if let Ok(null) = File::options().write(true).open("/dev/null") {
        let _ = nix::unistd::dup2_stdout(&null);
    }
}

/// `flotilla log-writer`: reads a [`Request`] from stdin, starts the component, and
/// relays its output into its log until it exits (see the module docs). Ends like
/// the component did (returning its exit code for `main` to return, or dying of its
/// signal); 127 when it could not be started (after answering
/// [`Reply::SpawnFailed`]); 125 when the request was unreadable.
pub fn main() -> ExitCode {
    shield_from_signals();
    // Its command name (`comm`, what top and pgrep show) instead of `exe` when it
    // was started as /proc/self/exe.
    let _ = nix::sys::prctl::set_name(c"flotilla-logs");
    let mut raw = Vec::new();
    let request: Request = match io::stdin()
        .read_to_end(&mut raw)
        .map_err(|e| e.to_string())
        .and_then(|_| serde_json::from_slice(&raw).map_err(|e| e.to_string()))
    {
        Ok(r) => r,
        Err(e) => {
            answer(&Reply::SpawnFailed {
                errno: None,
                message: format!("log writer: unreadable request: {e}"),
            });
            return ExitCode::from(125);
        }
    };
    drop(raw);
    let log = match crate::logs::open_append(&request.log) {
        Ok(file) => Arc::new(Mutex::new(Log {
            len: file.metadata().map_or(0, |m| m.len()),
            file,
            closed: false,
            path: request.log.clone(),
            max_bytes: request.log_max_bytes,
            keep: request.log_keep,
        })),
        Err(e) => {
            answer(&Reply::SpawnFailed {
                errno: e.raw_os_error(),
                message: format!("cannot open {}: {e}", request.log.display()),
            });
            return ExitCode::from(127);
        }
    };
    let mut cmd = Command::new(&request.program);
    cmd.arg0(&request.arg0)
        .args(&request.args)
        .env_clear()
        .envs(request.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&request.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match spawn_when_not_busy(in_new_session(&mut cmd)) {
        Ok(c) => c,
        Err(e) => {
            answer(&Reply::SpawnFailed {
                errno: e.raw_os_error(),
                message: e.to_string(),
            });
            return ExitCode::from(127);
        }
    };
    let pid = child.id();
    crate::logs::append_marker(
        &request.log,
        &format!("started pid {pid}{}", request.start_note),
    );
    answer(&Reply::Started { pid });
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let relays = usize::from(start_relay(child.stdout.take(), "stdout", &log, &done_tx))
        + usize::from(start_relay(child.stderr.take(), "stderr", &log, &done_tx));
    drop(done_tx);
    let status = loop {
        match child.wait() {
            Ok(s) => break s,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break ExitStatus::from_raw(255 << 8),
        }
    };
    // When it ended, not when what it left behind stopped writing.
    let ended_at = SystemTime::now();
    let deadline = Instant::now() + DRAIN_AFTER_EXIT;
    for _ in 0..relays {
        let left = deadline.saturating_duration_since(Instant::now());
        if done_rx.recv_timeout(left).is_err() {
            break;
        }
    }
    // Closed under the lock, so no relay writes after the marker.
    let mut held = log.lock().unwrap_or_else(|e| e.into_inner());
    crate::logs::append_marker_at(
        &request.log,
        ended_at,
        &format!(
            "pid {pid} ended: {}",
            crate::exit_status::describe_exit(&status)
        ),
    );
    held.closed = true;
    drop(held);
    end_like(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relay_splits_long_lines_and_keeps_an_unfinished_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        let log = Arc::new(Mutex::new(Log {
            file: crate::logs::open_append(&path).unwrap(),
            closed: false,
            path: path.clone(),
            max_bytes: 0,
            keep: 0,
            len: 0,
        }));
        let mut input = b"one\r\n".to_vec();
        input.extend(std::iter::repeat_n(b'a', MAX_LINE + 3));
        input.extend_from_slice(b"\nend");
        relay(&input[..], "stdout", log);
        let text = std::fs::read_to_string(&path).unwrap();
        let kinds: Vec<(&str, usize)> = text
            .lines()
            .map(|l| {
                let mut parts = l.splitn(4, ' ');
                let (_, _, tag, body) = (
                    parts.next(),
                    parts.next(),
                    parts.next().unwrap(),
                    parts.next().unwrap_or(""),
                );
                (tag, body.len())
            })
            .collect();
        assert_eq!(
            kinds,
            vec![("F", 3), ("P", MAX_LINE), ("F", 3), ("P", 3)],
            "{text}"
        );
    }
}
