//! The executor (issue 12, §7): the only privileged piece. A runtime holds no
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

/// `journalctl` long options that change the journal or write files. `journalctl`
/// parses options with `getopt_long`, which takes any unambiguous abbreviation
/// (`--rot` is `--rotate`), so every prefix of these is refused too, except the
/// names in [`JOURNALCTL_EXACT_READS`].
const JOURNALCTL_WRITES: [&str; 11] = [
    "vacuum-size",
    "vacuum-time",
    "vacuum-files",
    "rotate",
    "flush",
    "sync",
    "relinquish-var",
    "smart-relinquish-var",
    "setup-keys",
    "update-catalog",
    "cursor-file",
];

/// Read options that are prefixes of a refused option but match exactly
/// (`--cursor`, not `--cursor-file`).
const JOURNALCTL_EXACT_READS: [&str; 1] = ["cursor"];

/// The executor's read allowlist: argv prefixes (`["kubectl", "get"]`), each a bare
/// program name followed by fixed words. An argv is allowed when it starts with an
/// entry (its program normalised: see [`TRUSTED_DIRS`]) and carries none of the
/// options that make a read a write or a credential leak:
///
/// - `journalctl`: `--vacuum-*`, `--rotate`, `--flush`, `--sync`,
///   `--relinquish-var`, `--smart-relinquish-var`, `--setup-keys`,
///   `--update-catalog`, `--cursor-file` and their abbreviations;
/// - `kubectl`: impersonation (`--as`, `--as-group`, `--as-uid`) and any word
///   naming secrets (`secret`, `secrets/x`, `--raw /api/v1/…/secrets`): the runtime
///   holds no credentials and an allowlisted read must not hand it some.
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
            "journalctl" => args.iter().try_for_each(|a| journalctl_arg(a)),
            "kubectl" => {
                let logs = args.first().is_some_and(|a| a == "logs");
                args.iter().try_for_each(|a| kubectl_arg(a, logs))
            }
            "systemctl" => args.iter().try_for_each(|a| systemctl_arg(a)),
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

/// Whether `arg` is a cluster of short options (`-xD`) naming one of `letters`.
fn short_option_among(arg: &str, letters: &[char]) -> bool {
    arg.strip_prefix('-')
        .filter(|rest| !rest.starts_with('-'))
        .is_some_and(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphabetic())
                .any(|c| letters.contains(&c))
        })
}

/// journalctl options that read journals other than the system's (any file, a
/// directory, an image) or another machine's.
const JOURNALCTL_ELSEWHERE: &[&str] = &["file", "directory", "root", "image", "machine"];

fn journalctl_arg(arg: &str) -> Result<(), NotAllowed> {
    if short_option_among(arg, &['D', 'M']) {
        return Err(NotAllowed::Refused {
            arg: arg.to_string(),
            why: "it reads journals of another directory or machine",
        });
    }
    let Some(long) = arg.strip_prefix("--") else {
        return Ok(());
    };
    let name = long.split_once('=').map_or(long, |(n, _)| n);
    // journalctl takes unambiguous abbreviations of long options.
    if !name.is_empty()
        && JOURNALCTL_ELSEWHERE
            .iter()
            .any(|w| w.starts_with(name) && name.len() >= 3)
    {
        return Err(NotAllowed::Refused {
            arg: arg.to_string(),
            why: "it reads journals of another file, directory, image or machine",
        });
    }
    let name = long.split_once('=').map_or(long, |(n, _)| n);
    if name.is_empty() || JOURNALCTL_EXACT_READS.contains(&name) {
        return Ok(());
    }
    if JOURNALCTL_WRITES.iter().any(|w| w.starts_with(name)) {
        return Err(NotAllowed::Refused {
            arg: arg.to_string(),
            why: "it changes the journal or writes a file",
        });
    }
    Ok(())
}

/// kubectl options that change whose credentials or which cluster is used (a
/// kubeconfig can name a credential plugin: a program kubectl runs), read local
/// files, or write them.
const KUBECTL_REFUSED: &[&str] = &[
    "--kubeconfig",
    "--server",
    "--token",
    "--user",
    "--username",
    "--password",
    "--cluster",
    "--context",
    "--certificate-authority",
    "--client-certificate",
    "--client-key",
    "--insecure-skip-tls-verify",
    "--tls-server-name",
    "--cache-dir",
    "--filename",
    "--kustomize",
    "--recursive",
    "--log-file",
    "--log-dir",
    "--profile",
    "--profile-output",
];

fn kubectl_arg(arg: &str, logs: bool) -> Result<(), NotAllowed> {
    let name = arg.split_once('=').map_or(arg, |(n, _)| n);
    // -s (server), -k (kustomize), -R (recursive); -f is a file except for `logs`
    // (where it follows).
    let shorts: &[char] = if logs {
        &['s', 'k', 'R']
    } else {
        &['s', 'k', 'R', 'f']
    };
    if KUBECTL_REFUSED.contains(&name) || short_option_among(arg, shorts) {
        return Err(NotAllowed::Refused {
            arg: arg.to_string(),
            why: "it changes the credentials or cluster, or reads or writes local files",
        });
    }
    if arg.contains("-file=") || name.ends_with("-file") || arg.contains("=@") {
        return Err(NotAllowed::Refused {
            arg: arg.to_string(),
            why: "it reads a local file",
        });
    }
    if matches!(name, "--as" | "--as-group" | "--as-uid") {
        return Err(NotAllowed::Refused {
            arg: arg.to_string(),
            why: "impersonation",
        });
    }
    if arg.to_ascii_lowercase().contains("secret") {
        return Err(NotAllowed::Refused {
            arg: arg.to_string(),
            why: "it may read secrets",
        });
    }
    Ok(())
}

/// systemctl options that reach another host, machine, root or image.
fn systemctl_arg(arg: &str) -> Result<(), NotAllowed> {
    let name = arg.split_once('=').map_or(arg, |(n, _)| n);
    if matches!(name, "--host" | "--machine" | "--root" | "--image")
        || short_option_among(arg, &['H', 'M'])
    {
        return Err(NotAllowed::Refused {
            arg: arg.to_string(),
            why: "it reaches another host, machine, root or image",
        });
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
        ] {
            assert!(!allowed(no), "{no:?}");
        }
        assert_eq!(
            Allowlist::default_reads().check(&argv(&["journalctl", "--rot"])),
            Err(NotAllowed::Refused {
                arg: "--rot".into(),
                why: "it changes the journal or writes a file"
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
