//! The executor: the only privileged piece. A runtime holds no
//! credentials; it asks the authority to run an **argv list** (never a shell string)
//! on its behalf. Reads matching the [`Allowlist`] run at once; anything else runs
//! only once a question for that exact argv was answered allow (the caller's job:
//! [`run`] itself runs whatever it is given).
//!
//! The allowlist is pure (no IO, no clock); [`run`] starts a process.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Directories whose programs are named by their basename: `/usr/bin/kubectl` is
/// `kubectl`. A program anywhere else (`./kubectl`, `/tmp/x/kubectl`) matches no
/// entry, since running it would run whatever file sits there.
pub const TRUSTED_DIRS: [&str; 6] = [
    "/usr/bin",
    "/bin",
    "/usr/sbin",
    "/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
];

/// The executor's read allowlist: argv prefixes (`["kubectl", "get"]`), each a bare
/// program name followed by fixed words. An argv is allowed when it starts with an
/// entry (its program normalised: see [`TRUSTED_DIRS`]) and, for `kubectl`,
/// `systemctl` and `journalctl`, every option it carries is on that program's
/// list of read options ([`KUBECTL_OPTIONS`], [`SYSTEMCTL_STATUS_OPTIONS`],
/// [`JOURNALCTL_OPTIONS`]), spelled in full: an allowlist, because a denylist of
/// these programs' options cannot keep up (abbreviations, `_` for `-`, options that
/// read a local file as the authority's user, reach another host or cluster, or
/// write). `kubectl` words naming secrets are refused too: the runtime holds no
/// credentials and an allowlisted read must not hand it some.
///
/// Options placed before the entry's words (`kubectl -n x get pods`) match no
/// entry: the allowed form is `kubectl get pods -n x`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allowlist {
    entries: Vec<Vec<String>>,
}

/// An allowlist entry that is not a bare program name followed by words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowlistError {
    /// An empty entry or an empty word.
    #[error("allowlist entry {entry:?} is empty or has an empty word")]
    Empty {
        /// The entry.
        entry: Vec<String>,
    },
    /// The program has a `/`: entries name programs by basename.
    #[error("allowlist entry {entry:?}: the program must be a bare name, not a path")]
    Path {
        /// The entry.
        entry: Vec<String>,
    },
}

/// Why an argv is not an allowlisted read (said in the question it becomes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAllowed {
    /// The argv is empty.
    #[error("the argv is empty")]
    Empty,
    /// The program is a path outside [`TRUSTED_DIRS`].
    #[error("program {0:?} is a path outside the system directories")]
    UntrustedPath(String),
    /// No entry is a prefix of the argv.
    #[error("no allowlist entry matches")]
    NoEntry,
    /// An entry matches but an argument is refused.
    #[error("argument {arg:?} is not a read ({why})")]
    Refused {
        /// The argument.
        arg: String,
        /// Why.
        why: &'static str,
    },
}

impl Allowlist {
    /// The default reads: `kubectl get|describe|logs|top|events`, `systemctl status`,
    /// `journalctl` — each with the options that would read another file, reach
    /// another host or cluster, or write refused.
    ///
    /// Not `flotilla status`: with `-f` it runs the `exec` probes of whatever
    /// inventory it is given, as the authority's user.
    pub fn default_reads() -> Allowlist {
        let entries = [
            &["kubectl", "get"][..],
            &["kubectl", "describe"],
            &["kubectl", "logs"],
            &["kubectl", "top"],
            &["kubectl", "events"],
            &["systemctl", "status"],
            &["journalctl"],
        ];
        Allowlist {
            entries: entries
                .iter()
                .map(|e| e.iter().map(|w| w.to_string()).collect())
                .collect(),
        }
    }

    /// An allowlist of the given entries, each a bare program name and fixed words.
    pub fn new(entries: Vec<Vec<String>>) -> Result<Allowlist, AllowlistError> {
        for e in &entries {
            if e.is_empty() || e.iter().any(String::is_empty) {
                return Err(AllowlistError::Empty { entry: e.clone() });
            }
            if e[0].contains('/') {
                return Err(AllowlistError::Path { entry: e.clone() });
            }
        }
        Ok(Allowlist { entries })
    }

    /// The entries.
    pub fn entries(&self) -> &[Vec<String>] {
        &self.entries
    }

    /// Whether `argv` is an allowlisted read.
    pub fn allows(&self, argv: &[String]) -> bool {
        self.check(argv).is_ok()
    }

    /// Whether `argv` is an allowlisted read, and if not, why not.
    pub fn check(&self, argv: &[String]) -> Result<(), NotAllowed> {
        let (program, args) = argv.split_first().ok_or(NotAllowed::Empty)?;
        let program = program_name(program)?;
        let matched = self
            .entries
            .iter()
            .any(|e| e[0] == program && args.len() >= e.len() - 1 && e[1..] == args[..e.len() - 1]);
        if !matched {
            return Err(NotAllowed::NoEntry);
        }
        match program {
            "journalctl" => check_options(args, &[JOURNALCTL_OPTIONS], false, |_| Ok(())),
            "kubectl" => {
                let sub = args.first().map(String::as_str);
                let rest = args.get(1..).unwrap_or_default();
                if sub == Some("logs") {
                    check_options(
                        rest,
                        &[KUBECTL_OPTIONS, KUBECTL_LOGS_OPTIONS],
                        true,
                        kubectl_positional,
                    )
                } else {
                    check_options(rest, &[KUBECTL_OPTIONS], true, kubectl_positional)
                }
            }
            "systemctl" => check_options(
                args.get(1..).unwrap_or_default(),
                &[SYSTEMCTL_STATUS_OPTIONS],
                false,
                |_| Ok(()),
            ),
            _ => Ok(()),
        }
    }
}

/// The program's name: a bare name as is, a path in a [`TRUSTED_DIRS`] directory by
/// its basename.
fn program_name(program: &str) -> Result<&str, NotAllowed> {
    if !program.contains('/') {
        return Ok(program);
    }
    let untrusted = || NotAllowed::UntrustedPath(program.to_string());
    let path = Path::new(program);
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(untrusted());
    };
    let trusted = TRUSTED_DIRS
        .iter()
        .any(|d| dir.components().eq(Path::new(d).components()));
    match name.to_str() {
        Some(name) if trusted && !name.is_empty() && name != ".." => Ok(name),
        _ => Err(untrusted()),
    }
}

/// What an option of a read takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// Nothing (a flag).
    Nothing,
    /// A value, any.
    Value,
    /// An optional value, given only inline (`--lines=5`, `-n5`): the next
    /// argument is never taken as its value (the program would read it as an
    /// option of its own, e.g. `journalctl -n --vacuum-size=1`), and is checked as
    /// an argument of its own.
    Inline,
    /// An output format that reads no file (`kubectl -o`).
    OutputFormat,
}

/// One read option: its long name (without `--`), its short letter, what it takes.
pub type Opt = (&'static str, Option<char>, Takes);

/// `kubectl get|describe|logs|top|events` options a read may carry (kubectl
/// 1.3x; `_` is read as `-`, as kubectl does). Not `-f`/`--filename`, `-k`,
/// `--kubeconfig`, `--server`, `--token`, `--context`, `--raw`, `--template`,
/// `--cache-dir`, `--as`…: they read local files as the authority's user, change
/// the cluster or credentials, or write.
pub const KUBECTL_OPTIONS: &[Opt] = &[
    ("namespace", Some('n'), Takes::Value),
    ("all-namespaces", Some('A'), Takes::Nothing),
    ("selector", Some('l'), Takes::Value),
    ("field-selector", None, Takes::Value),
    ("output", Some('o'), Takes::OutputFormat),
    ("show-labels", None, Takes::Nothing),
    ("show-kind", None, Takes::Nothing),
    ("label-columns", Some('L'), Takes::Value),
    ("sort-by", None, Takes::Value),
    ("watch", Some('w'), Takes::Nothing),
    ("watch-only", None, Takes::Nothing),
    ("no-headers", None, Takes::Nothing),
    ("chunk-size", None, Takes::Value),
    ("request-timeout", None, Takes::Value),
    ("show-events", None, Takes::Nothing),
    ("containers", None, Takes::Nothing),
    ("sum", None, Takes::Nothing),
    ("for", None, Takes::Value),
    ("types", None, Takes::Value),
    ("v", Some('v'), Takes::Value),
];

/// `kubectl logs` options, besides [`KUBECTL_OPTIONS`] (`-f` follows here).
pub const KUBECTL_LOGS_OPTIONS: &[Opt] = &[
    ("follow", Some('f'), Takes::Nothing),
    ("tail", None, Takes::Value),
    ("since", None, Takes::Value),
    ("since-time", None, Takes::Value),
    ("container", Some('c'), Takes::Value),
    ("previous", Some('p'), Takes::Nothing),
    ("timestamps", None, Takes::Nothing),
    ("all-containers", None, Takes::Nothing),
    ("prefix", None, Takes::Nothing),
    ("limit-bytes", None, Takes::Value),
    ("max-log-requests", None, Takes::Value),
    ("ignore-errors", None, Takes::Nothing),
];

/// `systemctl status` options a read may carry (not `-H`/`--host`,
/// `-M`/`--machine`, `--root`, `--image`: another host, container or tree).
pub const SYSTEMCTL_STATUS_OPTIONS: &[Opt] = &[
    ("no-pager", None, Takes::Nothing),
    ("full", Some('l'), Takes::Nothing),
    ("lines", Some('n'), Takes::Value),
    ("output", Some('o'), Takes::Value),
    ("all", Some('a'), Takes::Nothing),
    ("quiet", Some('q'), Takes::Nothing),
    ("no-legend", None, Takes::Nothing),
    ("plain", None, Takes::Nothing),
    ("user", None, Takes::Nothing),
    ("system", None, Takes::Nothing),
];

/// `journalctl` options a read may carry (not `--file`, `-D`/`--directory`,
/// `--root`, `--image`, `-M`/`--machine`: other journals; not `--vacuum-*`,
/// `--rotate`, `--flush`, `--sync`, `--setup-keys`, `--cursor-file`…: writes).
pub const JOURNALCTL_OPTIONS: &[Opt] = &[
    ("unit", Some('u'), Takes::Value),
    ("user-unit", None, Takes::Value),
    ("boot", Some('b'), Takes::Inline),
    ("lines", Some('n'), Takes::Inline),
    ("follow", Some('f'), Takes::Nothing),
    ("since", Some('S'), Takes::Value),
    ("until", Some('U'), Takes::Value),
    ("priority", Some('p'), Takes::Value),
    ("grep", Some('g'), Takes::Value),
    ("case-sensitive", None, Takes::Inline),
    ("output", Some('o'), Takes::Value),
    ("output-fields", None, Takes::Value),
    ("no-pager", None, Takes::Nothing),
    ("reverse", Some('r'), Takes::Nothing),
    ("dmesg", Some('k'), Takes::Nothing),
    ("pager-end", Some('e'), Takes::Nothing),
    ("catalog", Some('x'), Takes::Nothing),
    ("no-hostname", None, Takes::Nothing),
    ("identifier", Some('t'), Takes::Value),
    ("exclude-identifier", Some('T'), Takes::Value),
    ("system", None, Takes::Nothing),
    ("user", None, Takes::Nothing),
    ("all", Some('a'), Takes::Nothing),
    ("quiet", Some('q'), Takes::Nothing),
    ("utc", None, Takes::Nothing),
    ("cursor", Some('c'), Takes::Value),
    ("after-cursor", None, Takes::Value),
    ("show-cursor", None, Takes::Nothing),
    ("full", Some('l'), Takes::Nothing),
    ("no-full", None, Takes::Nothing),
    ("merge", Some('m'), Takes::Nothing),
    ("facility", None, Takes::Value),
    ("field", Some('F'), Takes::Value),
    ("list-boots", None, Takes::Nothing),
    ("disk-usage", None, Takes::Nothing),
];

/// Whether `value` is a kubectl output format that reads no file: `json`, `yaml`,
/// `wide`, `name`, `jsonpath=…`, `jsonpath-as-json=…`, `custom-columns=…` (not
/// `go-template*`, `template`, `*-file`).
fn output_format_reads_no_file(value: &str) -> bool {
    matches!(value, "json" | "yaml" | "wide" | "name")
        || ["jsonpath=", "jsonpath-as-json=", "custom-columns="]
            .iter()
            .any(|p| value.starts_with(p))
}

fn refused(arg: &str, why: &'static str) -> NotAllowed {
    NotAllowed::Refused {
        arg: arg.to_string(),
        why,
    }
}

/// Checks every option of `args` against `opts` (exact long names, short letters
/// and clusters of them; `--` ends the options); `positional` checks the rest.
fn check_options(
    args: &[String],
    opts: &[&[Opt]],
    underscores: bool,
    positional: impl Fn(&str) -> Result<(), NotAllowed>,
) -> Result<(), NotAllowed> {
    let find_long = |name: &str| opts.iter().flat_map(|o| o.iter()).find(|o| o.0 == name);
    let find_short = |c: char| opts.iter().flat_map(|o| o.iter()).find(|o| o.1 == Some(c));
    let check_value = |arg: &str, takes: Takes, value: &str| -> Result<(), NotAllowed> {
        if takes == Takes::OutputFormat && !output_format_reads_no_file(value) {
            return Err(refused(arg, "an output format that reads a file"));
        }
        Ok(())
    };
    let mut i = 0;
    let mut options_done = false;
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
        if options_done || arg == "-" || !arg.starts_with('-') {
            positional(arg)?;
            continue;
        }
        if arg == "--" {
            options_done = true;
            continue;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            let name = if underscores {
                name.replace('_', "-")
            } else {
                name.to_string()
            };
            let Some(&(_, _, takes)) = find_long(&name) else {
                return Err(refused(arg, "not one of this read's options"));
            };
            match (takes, inline) {
                (Takes::Nothing, Some(_)) => {
                    return Err(refused(arg, "this option takes no value"))
                }
                (Takes::Nothing | Takes::Inline, None) => {}
                (_, Some(v)) => check_value(arg, takes, v)?,
                (_, None) => {
                    let v = args
                        .get(i)
                        .ok_or_else(|| refused(arg, "its value is missing"))?;
                    i += 1;
                    check_value(arg, takes, v)?;
                }
            }
            continue;
        }
        // A cluster of short options: flags, then at most one that takes the rest
        // (or the next argument) as its value.
        let letters: Vec<char> = arg[1..].chars().collect();
        let mut k = 0;
        while k < letters.len() {
            let c = letters[k];
            let Some(&(_, _, takes)) = find_short(c) else {
                return Err(refused(arg, "not one of this read's options"));
            };
            k += 1;
            if takes == Takes::Nothing {
                continue;
            }
            let rest: String = letters[k..].iter().collect();
            let rest = rest.strip_prefix('=').unwrap_or(&rest).to_string();
            if rest.is_empty() && takes == Takes::Inline {
                break;
            }
            if rest.is_empty() {
                let v = args
                    .get(i)
                    .ok_or_else(|| refused(arg, "its value is missing"))?;
                i += 1;
                check_value(arg, takes, v)?;
            } else {
                check_value(arg, takes, &rest)?;
            }
            break;
        }
    }
    Ok(())
}

/// A kubectl word that names secrets, or is percent-encoded (which could hide it).
fn kubectl_positional(arg: &str) -> Result<(), NotAllowed> {
    if arg.to_ascii_lowercase().contains("secret") || arg.contains('%') {
        return Err(refused(arg, "it may read secrets"));
    }
    Ok(())
}

/// How the process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ended", rename_all = "lowercase")]
pub enum ExecStatus {
    /// It exited with this code.
    Exited {
        /// The exit code.
        code: i32,
    },
    /// A signal ended it (SIGKILL = 9 after a timeout).
    Signaled {
        /// The signal number.
        signal: i32,
    },
}

impl ExecStatus {
    fn from_exit(s: ExitStatus) -> ExecStatus {
        match (s.code(), s.signal()) {
            (Some(code), _) => ExecStatus::Exited { code },
            (None, Some(signal)) => ExecStatus::Signaled { signal },
            // Neither code nor signal: not produced by wait(2) on Unix.
            (None, None) => ExecStatus::Signaled { signal: 0 },
        }
    }
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// How the program ended.
    pub status: ExecStatus,
    /// Whether the timeout ended the run: its process group was killed (SIGKILL).
    /// Set too when the program exited in time but a process it left behind kept its
    /// output open past the timeout.
    pub timed_out: bool,
    /// Everything it wrote to stdout (up to the kill, if any).
    pub stdout: Vec<u8>,
    /// Everything it wrote to stderr (up to the kill, if any).
    pub stderr: Vec<u8>,
    /// Wall time from start to the end of its output, in milliseconds.
    pub duration_ms: u64,
}

impl ExecOutput {
    /// Exited with code 0, in time.
    pub fn success(&self) -> bool {
        self.status == ExecStatus::Exited { code: 0 } && !self.timed_out
    }
}

/// A run that could not happen.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The argv is empty.
    #[error("the argv is empty")]
    EmptyArgv,
    /// The program could not be started (not found, not executable, bad `cwd`…).
    #[error("could not start `{program}`: {source}")]
    Spawn {
        /// argv\[0\].
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// Waiting for the program failed.
    #[error("waiting for `{program}` failed: {source}")]
    Wait {
        /// argv\[0\].
        program: String,
        /// Why.
        source: std::io::Error,
    },
}

/// How long, after the kill, to wait for the output pipes to close: a process that
/// left the process group may hold them open forever.
const AFTER_KILL: Duration = Duration::from_secs(2);

enum Event {
    /// A stream reached its end.
    Drained,
    /// The program exited (on Linux: not yet reaped).
    Exited,
}

/// Runs `argv` (no shell: `argv[0]` found on `PATH` or by its path, the rest passed
/// as they are) in `cwd` (default: the current directory), stdin empty, and reads
/// stdout and stderr whole.
///
/// The program runs in a process group of its own. When `timeout` passes before it
/// exited and its output ended, the whole group is killed (SIGKILL) and the output up
/// to then is returned with `timed_out` set: `kubectl get --watch` and
/// `journalctl -f` end that way. Nothing polls: threads read the pipes and wait for
/// the exit, and this waits on them with the deadline.
///
/// Errors: [`ExecError::EmptyArgv`]; [`ExecError::Spawn`] when the program cannot be
/// started; [`ExecError::Wait`] when waiting for it fails.
pub fn run(
    argv: &[String],
    cwd: Option<&Path>,
    timeout: Duration,
) -> Result<ExecOutput, ExecError> {
    let (program, args) = argv.split_first().ok_or(ExecError::EmptyArgv)?;
    let started = Instant::now();
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn().map_err(|source| ExecError::Spawn {
        program: program.clone(),
        source,
    })?;
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (tx, rx) = mpsc::channel::<Event>();
    let stdout = Arc::new(Mutex::new(Vec::new()));
    let stderr = Arc::new(Mutex::new(Vec::new()));
    drain(child.stdout.take(), stdout.clone(), tx.clone());
    drain(child.stderr.take(), stderr.clone(), tx.clone());
    let waiter = Waiter::start(child, tx);

    let deadline = started + timeout;
    let mut after_kill: Option<Instant> = None;
    let mut pending = 3;
    while pending > 0 {
        let until = after_kill.unwrap_or(deadline);
        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(Event::Drained | Event::Exited) => pending -= 1,
            Err(RecvTimeoutError::Timeout) if after_kill.is_none() => {
                waiter.kill_group(pgid);
                after_kill = Some(Instant::now() + AFTER_KILL);
            }
            // The pipes stay open past the kill: keep what was read.
            Err(_) => break,
        }
    }
    let status = waiter.reap().map_err(|source| ExecError::Wait {
        program: program.clone(),
        source,
    })?;
    let take =
        |b: &Arc<Mutex<Vec<u8>>>| std::mem::take(&mut *b.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(ExecOutput {
        status: ExecStatus::from_exit(status),
        timed_out: after_kill.is_some(),
        stdout: take(&stdout),
        stderr: take(&stderr),
        duration_ms: started.elapsed().as_millis() as u64,
    })
}

/// Reads `pipe` to its end into `into`, then says so.
fn drain(
    pipe: Option<impl Read + Send + 'static>,
    into: Arc<Mutex<Vec<u8>>>,
    tx: mpsc::Sender<Event>,
) {
    std::thread::spawn(move || {
        if let Some(mut pipe) = pipe {
            let mut buf = [0u8; 64 * 1024];
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => into
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        }
        let _ = tx.send(Event::Drained);
    });
}

/// Waits for the program's exit on a thread.
///
/// On Linux (and Android, FreeBSD) the thread waits with `waitid(WNOWAIT)`, which
/// leaves the exited program unreaped: its pid, and so its process group id, cannot
/// be reused until [`Waiter::reap`], so killing the group at the deadline can never
/// hit another process. Elsewhere the thread reaps, and the kill is skipped once it
/// has (a window of a few instructions remains between the two).
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
struct Waiter {
    child: Child,
}

#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
impl Waiter {
    fn start(child: Child, tx: mpsc::Sender<Event>) -> Waiter {
        use nix::sys::wait::{waitid, Id, WaitPidFlag};
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        std::thread::spawn(move || {
            while let Err(nix::errno::Errno::EINTR) =
                waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT)
            {}
            let _ = tx.send(Event::Exited);
        });
        Waiter { child }
    }

    fn kill_group(&self, pgid: nix::unistd::Pid) {
        // ESRCH (the group is gone) is fine.
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    }

    fn reap(mut self) -> std::io::Result<ExitStatus> {
        self.child.wait()
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
struct Waiter {
    reaped: Arc<Mutex<bool>>,
    done: mpsc::Receiver<std::io::Result<ExitStatus>>,
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
impl Waiter {
    fn start(mut child: Child, tx: mpsc::Sender<Event>) -> Waiter {
        let reaped = Arc::new(Mutex::new(false));
        let (done_tx, done) = mpsc::channel();
        let flag = reaped.clone();
        std::thread::spawn(move || {
            let status = child.wait();
            *flag.lock().unwrap_or_else(|e| e.into_inner()) = true;
            let _ = done_tx.send(status);
            let _ = tx.send(Event::Exited);
        });
        Waiter { reaped, done }
    }

    fn kill_group(&self, pgid: nix::unistd::Pid) {
        let reaped = self.reaped.lock().unwrap_or_else(|e| e.into_inner());
        if !*reaped {
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        }
    }

    fn reap(self) -> std::io::Result<ExitStatus> {
        self.done
            .recv()
            .unwrap_or_else(|_| Err(std::io::Error::other("the waiting thread ended")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    fn allowed(words: &[&str]) -> bool {
        Allowlist::default_reads().allows(&argv(words))
    }

    #[test]
    fn default_reads_allow_the_listed_reads() {
        for ok in [
            &["kubectl", "get", "pods", "-n", "web", "-o", "wide"][..],
            &["kubectl", "get", "deploy", "--watch"],
            &["kubectl", "describe", "node", "nas"],
            &["kubectl", "logs", "-f", "deploy/api", "--since=1h"],
            &["kubectl", "top", "pods"],
            &["systemctl", "status", "nginx.service", "--no-pager", "-l"],
            &["journalctl", "-u", "nginx", "--since", "-1h", "--no-pager"],
            &["journalctl", "--cursor=s=abc", "--follow"],
            &["journalctl"],
            &["/usr/bin/kubectl", "get", "pods"],
            &["/bin/journalctl", "-b"],
        ] {
            assert!(allowed(ok), "{ok:?}");
        }
    }

    #[test]
    fn everything_else_is_refused() {
        for no in [
            &[][..],
            &["kubectl"],
            &["kubectl", "delete", "pod", "x"],
            &["kubectl", "apply", "-f", "x.yaml"],
            &["kubectl", "-n", "web", "get", "pods"],
            &["kubectl", "exec", "x", "--", "get"],
            &["systemctl", "restart", "nginx"],
            &["systemctl", "--now", "status"],
            &["systemctl"],
            &["flotilla", "up"],
            // flotilla status -f runs the exec probes of any inventory.
            &["flotilla", "status", "-f", "/tmp/evil.toml"],
            &["flotilla", "status"],
            &["git", "status"],
            &["sh", "-c", "kubectl get pods"],
            &["sudo", "journalctl"],
            &["./kubectl", "get", "pods"],
            &["/tmp/x/kubectl", "get", "pods"],
            &["/usr/bin/../../tmp/kubectl", "get", "pods"],
            &["bin/kubectl", "get", "pods"],
        ] {
            assert!(!allowed(no), "{no:?}");
        }
    }

    #[test]
    fn options_that_reach_elsewhere_are_refused() {
        for no in [
            &["kubectl", "get", "pods", "--kubeconfig=/tmp/evil"][..],
            &["kubectl", "get", "pods", "--kubeconfig", "/tmp/evil"],
            &["kubectl", "get", "pods", "-s", "https://elsewhere"],
            &["kubectl", "get", "pods", "--server=https://elsewhere"],
            &["kubectl", "get", "pods", "--token=x"],
            &["kubectl", "get", "pods", "--context", "other"],
            &["kubectl", "get", "-f", "/etc/shadow"],
            &["kubectl", "get", "--filename=/etc/shadow"],
            &[
                "kubectl",
                "get",
                "pods",
                "-o",
                "go-template-file=/etc/shadow",
            ],
            &["kubectl", "get", "pods", "--profile-output=/etc/x"],
            &["kubectl", "describe", "-k", "dir"],
            &["journalctl", "--file=/var/log/x.journal"],
            &["journalctl", "-D", "/home/x"],
            &["journalctl", "-aD/home/x"],
            &["journalctl", "--directory=/x"],
            &["journalctl", "--dir=/x"],
            &["journalctl", "--root=/"],
            &["journalctl", "-M", "other"],
            &["systemctl", "status", "-H", "root@elsewhere"],
            &["systemctl", "status", "--host=elsewhere"],
            &["systemctl", "status", "--root=/mnt"],
        ] {
            assert!(!allowed(no), "{no:?}");
        }
        // `kubectl logs -f` follows (it reads no file).
        assert!(allowed(&["kubectl", "logs", "-f", "deploy/api"]));
    }

    #[test]
    fn options_that_write_or_leak_are_refused() {
        for no in [
            &["journalctl", "--vacuum-size=1G"][..],
            &["journalctl", "--vacuum-time", "2d"],
            &["journalctl", "--vacuum-files=3"],
            &["journalctl", "--rotate"],
            &["journalctl", "--rot"],
            &["journalctl", "--flush"],
            &["journalctl", "--fl"],
            &["journalctl", "--sync"],
            &["journalctl", "--relinquish-var"],
            &["journalctl", "--smart-relinquish-var"],
            &["journalctl", "--setup-keys"],
            &["journalctl", "--update-catalog"],
            &["journalctl", "--cursor-file=/etc/passwd"],
            &["journalctl", "--vac"],
            &["kubectl", "get", "secrets"],
            &["kubectl", "get", "secret/db-password", "-o", "yaml"],
            &["kubectl", "get", "pods,Secrets"],
            &["kubectl", "get", "--raw", "/api/v1/namespaces/x/secrets"],
            &["kubectl", "describe", "secret", "x"],
            &["kubectl", "get", "pods", "--as=system:admin"],
            &["kubectl", "get", "pods", "--as", "admin"],
            &["kubectl", "get", "pods", "--as-group=system:masters"],
            // Found by a second review: output formats that read files, `_` for
            // `-`, percent-encoding, abbreviations.
            &[
                "kubectl",
                "get",
                "ns",
                "--output=go-template-file",
                "--template=/etc/shadow",
            ],
            &[
                "kubectl",
                "get",
                "ns",
                "-o=jsonpath-file",
                "--template=/etc/shadow",
            ],
            &["kubectl", "get", "ns", "-ogo-template-file"],
            &["kubectl", "events", "-o", "template"],
            &["kubectl", "get", "ns", "--cache_dir=/etc/x"],
            &["kubectl", "get", "ns", "--client_key=/k"],
            &["kubectl", "get", "ns", "--insecure_skip_tls_verify"],
            &[
                "kubectl",
                "get",
                "--raw",
                "/api/v1/namespaces/default/s%65crets",
            ],
            &["kubectl", "get", "pods/s%65cret"],
            &["systemctl", "status", "--ho=root@127.0.0.1", "x"],
            &["systemctl", "status", "--ro=/x"],
            &["systemctl", "status", "--mac=x"],
            &["journalctl", "--ma=foo"],
            &["journalctl", "--fi=/x"],
            // Found by a third review: an option whose value is optional and
            // inline-only must not swallow the next word unchecked.
            &["journalctl", "-n", "--vacuum-files=1"],
            &[
                "journalctl",
                "-n",
                "--directory=/x",
                "-n",
                "--vacuum-files=1",
            ],
            &["journalctl", "-xen", "--flush"],
            &["journalctl", "--lines", "--setup-keys"],
            &["journalctl", "--case-sensitive", "--rotate"],
            &["journalctl", "-bn", "--machine=foo"],
            &["journalctl", "-b", "--cursor-file=/etc/nologin"],
        ] {
            assert!(!allowed(no), "{no:?}");
        }
        for ok in [
            &[
                "kubectl",
                "get",
                "pods",
                "-o",
                "jsonpath={.items[*].metadata.name}",
            ][..],
            &["kubectl", "get", "pods", "-ojson", "-A", "-l", "app=web"],
            &["kubectl", "get", "pods", "--all_namespaces"],
            &[
                "kubectl",
                "logs",
                "deploy/api",
                "-c",
                "app",
                "--tail=50",
                "-p",
            ],
            &["journalctl", "-xeu", "nginx"],
            &["journalctl", "-b", "-n", "100", "--no-pager", "_PID=1"],
            &[
                "journalctl",
                "--lines=20",
                "-n5",
                "--boot=-1",
                "--case-sensitive=false",
            ],
            &["systemctl", "status", "--no-pager", "-n", "20", "nginx"],
        ] {
            assert!(allowed(ok), "{ok:?}");
        }
        assert_eq!(
            Allowlist::default_reads().check(&argv(&["journalctl", "--rot"])),
            Err(NotAllowed::Refused {
                arg: "--rot".into(),
                why: "not one of this read's options"
            })
        );
        assert_eq!(
            Allowlist::default_reads().check(&argv(&["/opt/kubectl", "get"])),
            Err(NotAllowed::UntrustedPath("/opt/kubectl".into()))
        );
    }

    #[test]
    fn custom_entries() {
        let a = Allowlist::new(vec![argv(&["ls"]), argv(&["systemctl", "is-active"])]).unwrap();
        assert!(a.allows(&argv(&["ls", "-la"])));
        assert!(a.allows(&argv(&["/usr/bin/systemctl", "is-active", "x"])));
        assert!(!a.allows(&argv(&["systemctl", "status"])));
        // The journal's write options stay refused whatever the entries.
        let j = Allowlist::new(vec![argv(&["journalctl"])]).unwrap();
        assert!(!j.allows(&argv(&["journalctl", "--flush"])));
        assert!(matches!(
            Allowlist::new(vec![vec![]]),
            Err(AllowlistError::Empty { .. })
        ));
        assert!(matches!(
            Allowlist::new(vec![argv(&["kubectl", ""])]),
            Err(AllowlistError::Empty { .. })
        ));
        assert!(matches!(
            Allowlist::new(vec![argv(&["/usr/bin/ls"])]),
            Err(AllowlistError::Path { .. })
        ));
    }

    const LONG: Duration = Duration::from_secs(30);

    #[test]
    fn runs_argv_without_a_shell_and_captures_everything() {
        let out = run(&argv(&["echo", "$HOME; rm -rf /", "`id`"]), None, LONG).unwrap();
        assert!(out.success());
        assert_eq!(out.stdout, b"$HOME; rm -rf / `id`\n");
        assert!(out.stderr.is_empty());

        let out = run(
            &argv(&["sh", "-c", "echo to-out; echo to-err >&2; exit 3"]),
            None,
            LONG,
        )
        .unwrap();
        assert_eq!(out.status, ExecStatus::Exited { code: 3 });
        assert!(!out.timed_out && !out.success());
        assert_eq!(out.stdout, b"to-out\n");
        assert_eq!(out.stderr, b"to-err\n");
    }

    #[test]
    fn reads_large_output_whole_from_both_pipes() {
        // 4 MiB on each pipe: far beyond a pipe's buffer, so both must be read at once.
        let script = "head -c 4194304 /dev/zero; head -c 4194304 /dev/zero >&2";
        let out = run(&argv(&["sh", "-c", script]), None, LONG).unwrap();
        assert!(out.success());
        assert_eq!(out.stdout.len(), 4 << 20);
        assert_eq!(out.stderr.len(), 4 << 20);
    }

    #[test]
    fn runs_in_cwd() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(&argv(&["pwd", "-P"]), Some(dir.path()), LONG).unwrap();
        let want = dir.path().canonicalize().unwrap();
        assert_eq!(
            String::from_utf8(out.stdout).unwrap().trim_end(),
            want.to_str().unwrap()
        );
    }

    #[test]
    fn a_timeout_kills_the_process_group_and_keeps_the_output() {
        let out = run(
            &argv(&["sh", "-c", "echo before; exec sleep 60"]),
            None,
            Duration::from_millis(300),
        )
        .unwrap();
        assert!(out.timed_out);
        assert_eq!(out.status, ExecStatus::Signaled { signal: 9 });
        assert_eq!(out.stdout, b"before\n");
        assert!(
            out.duration_ms >= 300 && out.duration_ms < 20_000,
            "{}",
            out.duration_ms
        );
    }

    #[test]
    fn a_child_left_behind_holding_the_output_is_killed_at_the_timeout() {
        // The program exits at once; its background child keeps stdout open.
        let out = run(
            &argv(&["sh", "-c", "sleep 60 & echo started"]),
            None,
            Duration::from_millis(300),
        )
        .unwrap();
        assert_eq!(out.status, ExecStatus::Exited { code: 0 });
        assert!(out.timed_out);
        assert_eq!(out.stdout, b"started\n");
        assert!(out.duration_ms < 20_000, "{}", out.duration_ms);
    }

    #[test]
    fn errors() {
        assert!(matches!(run(&[], None, LONG), Err(ExecError::EmptyArgv)));
        let e = run(&argv(&["flotilla-no-such-program-x"]), None, LONG).unwrap_err();
        assert!(
            matches!(&e, ExecError::Spawn { program, .. } if program == "flotilla-no-such-program-x")
        );
        assert!(e.to_string().contains("flotilla-no-such-program-x"), "{e}");
        let e = run(
            &argv(&["true"]),
            Some(Path::new("/nonexistent-flotilla-dir")),
            LONG,
        )
        .unwrap_err();
        assert!(matches!(e, ExecError::Spawn { .. }));
    }
}
