//! `fake-launchctl`: a faithful stand-in for macOS's `launchctl` (and the part of
//! `launchd` behind it) so the launchd adapter's tests run on Linux. Tests install it as
//! a program named `launchctl` (a symlink in a directory put first on `PATH`) and point
//! it at a state directory with `FAKE_LAUNCHD_DIR`.
//!
//! It reproduces the behaviour the launchd adapter must survive, above all the trap this
//! field is known for: **loading a job that is already loaded changes nothing** (the old
//! process keeps running, and `launchctl load` even exits 0), and **`kickstart -k`
//! restarts the job from the definition cached at bootstrap time, not from the plist on
//! disk**, which launchd does not re-read.
//!
//! # Command line
//!
//! | command | behaviour |
//! | --- | --- |
//! | `bootstrap <domain> <plist>` | load the job; start it when `RunAtLoad` or `KeepAlive` is true or `KeepAlive` has a `SuccessfulExit`/`Crashed` condition (asynchronously: `print` says `spawn scheduled` until the process exists) |
//! | `bootout <domain>/<label>` or `bootout <domain> <plist>` | SIGTERM the job, SIGKILL after `ExitTimeOut`, wait for it to die, unload it |
//! | `kickstart [-k] [-p] <domain>/<label>` | start the job now (no-op if running); `-k` kills a running instance first and starts a new one from the cached definition; `-p` prints the pid |
//! | `print <domain>/<label>` | the service description (state, pid, runs, last exit, program, arguments, path…) |
//! | `load [-w] [-F] <plist>…` / `unload [-w] <plist>…` | the legacy subcommands, in the domain `launchctl` picks for the caller |
//! | `list` / `list <label>` | the legacy listing of that same domain |
//! | `enable <domain>/<label>` | accepted, no effect (the fake never disables a job) |
//! | anything else | a message on stderr, exit 64 |
//!
//! Domains: `system`, `gui/<uid>`, `user/<uid>`. The legacy domain (for `load`, `unload`,
//! `list`) is `$FAKE_LAUNCHCTL_LEGACY_DOMAIN`, else `system` for root and `gui/<euid>`
//! otherwise (as `launchctl load` from a user's Terminal lands in `gui/<uid>`).
//!
//! # Environment
//!
//! | variable | meaning |
//! | --- | --- |
//! | `FAKE_LAUNCHD_DIR` | required: the fake launchd's state directory (exit 78 with a message if unset) |
//! | `FAKE_LAUNCHD_THROTTLE_MS` | default `ThrottleInterval` in milliseconds (launchd's default is 10 s; a plist's own `ThrottleInterval` wins) |
//! | `FAKE_LAUNCHD_EXIT_TIMEOUT_MS` | default `ExitTimeOut` in milliseconds (launchd's default is 20 s; a plist's own `ExitTimeOut` wins; 0 means never SIGKILL) |
//! | `FAKE_LAUNCHCTL_ERRORS` | which launchctl's error texts: `user` (default: macOS 11+ run by a user), `root` (macOS 11+ run as root: the "richer errors"), `legacy` (macOS 10.15 and earlier) |
//! | `FAKE_LAUNCHCTL_LEGACY_DOMAIN` | the domain of `load`/`unload`/`list` (see above) |
//!
//! The throttle and exit timeout are read at bootstrap and cached with the definition,
//! as launchd caches the plist.
//!
//! # State
//!
//! `$FAKE_LAUNCHD_DIR/<domain, '/' → '_'>/<label>.json` holds one loaded service: its
//! cached definition, state, pid, runs and last exit. A file exists exactly while the
//! service is loaded. Every read-modify-write holds an exclusive `flock` on
//! `<label>.lock` beside it (the CLI calls and the supervisor race), and every write is a
//! temporary file renamed into place. `supervisor.log` collects the supervisors' stderr.
//!
//! While a job has a process (or a KeepAlive respawn pending), a **supervisor** watches
//! it: this binary re-executed as `fake-launchctl __supervise <domain> <label>`, detached
//! in its own session. It spawns the job, reaps it, records how it ended, respawns it
//! under KeepAlive, and carries out `kickstart` and `bootout` requests that CLI calls
//! leave in the state file. It exits as soon as nothing is left to watch, and also
//! (killing the job) when its state file or directory disappears, so a test's deleted
//! temporary directory takes every job with it.
//!
//! # Where each behaviour comes from
//!
//! - Messages and exit codes of the launchctl side: Procursus' clean-room launchctl
//!   (`ProcursusTeam/launchctl`: `launchctl.c` for "Could not find service \"%s\" in
//!   domain for " + the domain name (`system`, `uid: N`, `user gui: N`), exit 113 =
//!   ENOSERVICE, 64 for usage errors and the "Unrecognized target specifier" text;
//!   `bootstrap.c` for "Bootstrap failed: %d: %s" / "Boot-out failed: %d: %s";
//!   `kickstart.c` for `-k`/`-p` and the `-p` output: "service spawned with pid: N" on a
//!   terminal, the bare pid otherwise; `load.c` for legacy `load` printing
//!   "<path>: service already loaded" and still returning 0).
//! - `bootstrap` of a loaded job, macOS 11+ as a user: "Bootstrap failed: 5:
//!   Input/output error" + "Try re-running the command as root for richer errors.",
//!   exit 5 (<https://github.com/pirj/noclamshell/issues/25>,
//!   <https://github.com/Homebrew/homebrew-services/issues/528>); as root: "Bootstrap
//!   failed: 37: Operation already in progress", exit 37
//!   (<https://github.com/Homebrew/homebrew-core/issues/132781>; launchd's own reason
//!   behind the user-facing 5 is this 37:
//!   <https://github.com/Layr-Labs/d-inference/issues/1102>); macOS 10.15: "<path>:
//!   service already loaded", exit 37 (<https://github.com/Homebrew/brew/issues/7926>).
//! - Legacy `load` of a loaded job on macOS 11+: "Load failed: 5: Input/output error" +
//!   "Try running `launchctl bootstrap` as root for richer errors." and exit 0
//!   (<https://github.com/danielmiessler/LifeOS/pull/2069>: "still exits 0";
//!   <https://github.com/haimgel/display-switch/issues/85>: "happens if you already have
//!   it running"). Legacy `unload` of a job that is not loaded: "Unload failed: 5:
//!   Input/output error" + "Try running `launchctl bootout` as root for richer errors."
//!   (<https://github.com/m4rkw/macos-corner-fix/issues/3>, whose `|| echo` did not
//!   fire: exit 0), on macOS ≤ 10.15 "<path>: Could not find specified service"
//!   (<https://github.com/kyleneideck/BackgroundMusic/issues/169>).
//! - `bootout` of an unknown service target: "Boot-out failed: 3: No such process",
//!   exit 3; of a plist that is not loaded: "Boot-out failed: 5: Input/output error",
//!   exit 5 (<https://github.com/DeterminateSystems/nix-installer/issues/1148>; the
//!   user-mode hint line: <https://github.com/KiwiCanopy/KiwiDesk/issues/328>).
//! - `kickstart` of an unknown service: "Could not find service \"L\" in domain for
//!   system" / "… for user gui: 501", exit 113
//!   (<https://github.com/DeterminateSystems/nix-installer/issues/960>,
//!   <https://github.com/NousResearch/hermes-agent/pull/5536>). `print` of one: the same
//!   line preceded by "Bad request.", exit 113 (quoted verbatim from real output by the
//!   test fixtures of several public launchd wrappers; not pinned to one URL here).
//!   `list <label>` of one: "Could not find service \"L\" in domain for port", exit 113
//!   (<https://github.com/iamkroot/trakt-scrobbler/issues/83>).
//! - `kickstart -k` restarts from the cached definition: launchd reads the plist only at
//!   bootstrap (<https://github.com/jackielii/skhd.zig/issues/30>: "Editing the plist …
//!   does not take effect"; <https://github.com/openclaw/openclaw/pull/34829>: a full
//!   bootout + bootstrap is needed after plist edits). It stops the old process with
//!   SIGTERM (captured `print` output after `kickstart -k` shows `last terminating signal
//!   = Terminated: 15`).
//! - The `print` layout (header block, tab-indented `key = value`, `arguments = { … }`,
//!   `default environment`/`environment` blocks with `=>`, `runs`, `pid`, `last exit
//!   code = (never exited)`, `78: EX_CONFIG`, `spawn type = interactive (4)`):
//!   captures in `Alkenso/sLaunchctl` (`Tests/sLaunchctlTests/ServiceParsingTests.swift`)
//!   and <https://github.com/jackielii/skhd.zig/issues/30>.
//! - How launchd runs a job (Apple's launchd-842 as imported in `freebsd/openlaunchd`,
//!   `launchd/core.c` and `man/launchd.plist.5`): the job's environment is launchd's own
//!   (`PATH=/usr/bin:/bin:/usr/sbin:/sbin`, `launchd/launchd.c`), `HOME`, `USER`,
//!   `LOGNAME`, `SHELL` of the user, then the plist's `EnvironmentVariables` (never the
//!   caller's environment); `XPC_SERVICE_NAME=<label>` is added by modern launchd
//!   (`environment` block of every capture); stdout/stderr are opened `O_APPEND|O_CREAT`
//!   (else `/dev/null`); the job is made a session leader (`setsid`); a missing
//!   `WorkingDirectory` is logged and the job runs in `/`; stopping sends SIGTERM, then
//!   SIGKILL after `ExitTimeOut` (`LAUNCHD_DEFAULT_EXIT_TIMEOUT 20`); when the job dies,
//!   its process group gets SIGTERM unless `AbandonProcessGroup`; a KeepAlive respawn of a
//!   job that ran less than `ThrottleInterval` (`LAUNCHD_MIN_JOB_RUN_TIME 10`) waits out
//!   the rest ("Throttling respawn: Will start in N seconds", `job_start`: two spawns are
//!   at least `ThrottleInterval` apart; launchd.plist(5): "by default, jobs will not be
//!   spawned more than once every 10 seconds"); `KeepAlive` = true starts the job at load
//!   like `RunAtLoad` (the "job configured to run continuously" check).
//! - `KeepAlive` as a dictionary (launchd-842 `core.c`, `semaphoreitem_setup` and
//!   `job_keepalive`; launchd.plist(5)): its conditions are ORed; `SuccessfulExit = true`
//!   restarts the job after an exit with status 0 and `false` after anything else — a
//!   non-zero status or a death by signal, SIGKILL included (`good_exit` is `WIFEXITED &&
//!   WEXITSTATUS == 0`); `Crashed = true` restarts after a crash signal (SIGILL, SIGABRT,
//!   SIGFPE, SIGBUS, SIGSEGV, SIGSYS, SIGTRAP: `job_reap`) and `false` after anything
//!   else; either key sets `start_pending`, so the job starts at load ("This key implies
//!   that "RunAtLoad" is set to true"); keys are matched case-insensitively, unknown
//!   ones are ignored ("Unrecognized KeepAlive attribute"), an empty dictionary keeps
//!   nothing alive. Only `KeepAlive = true` makes the legacy `list` say `OnDemand = false`
//!   (a dictionary leaves `ondemand` set: `job_import_bool` is not called for it).
//!
//! Not emulated: the `KeepAlive` conditions `NetworkState`, `PathState`,
//! `OtherJobEnabled`, `OtherJobActive` and `AfterInitialDemand` (a plist with one is
//! refused at `bootstrap`: exit 78 and a message), `StartInterval`/`StartCalendarInterval`/`WatchPaths`/sockets/Mach services, `UserName`,
//! `disable`, domains other than `system`, `gui/N`, `user/N`, and the asynchronous
//! drain after `bootout` on some macOS versions (here `bootout` returns once the job has
//! died and the label is free). A program that cannot be spawned is recorded as `last
//! exit code = 78: EX_CONFIG` (what `print` shows for jobs that fail to start; the exact
//! code launchd records for a missing executable is not confirmed). Captures of recent
//! macOS print `exit timeout = 5` for jobs without `ExitTimeOut`; the fake keeps the 20 s
//! that launchd.plist(5) and launchd-842 document (tests shorten it anyway).

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, IsTerminal, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{kill, killpg, SigHandler, SigSet, SigmaskHow, Signal};
use nix::unistd::{geteuid, setsid, Pid, User};
use plist::Value;
use serde::{Deserialize, Serialize};

/// Usage errors (launchctl returns 64 after printing its usage).
const EX_USAGE: i32 = 64;
/// Misconfiguration of the fake itself (no `FAKE_LAUNCHD_DIR`).
const EX_CONFIG: i32 = 78;
/// launchctl's ENOSERVICE: "Could not find specified service".
const ENOSERVICE: i32 = 113;
/// errno values launchctl reports as exit codes.
const ESRCH: i32 = 3;
const EIO: i32 = 5;
const EALREADY: i32 = 37;

/// launchd's `PATH` for jobs (`_PATH_STDPATH`).
const LAUNCHD_PATH: &str = "/usr/bin:/bin:/usr/sbin:/sbin";
/// launchd's default `ThrottleInterval` (`LAUNCHD_MIN_JOB_RUN_TIME`), in ms.
const DEFAULT_THROTTLE_MS: u64 = 10_000;
/// launchd's default `ExitTimeOut` (`LAUNCHD_DEFAULT_EXIT_TIMEOUT`), in ms.
const DEFAULT_EXIT_TIMEOUT_MS: u64 = 20_000;
/// How often the supervisor looks at its job and its requests.
const TICK: Duration = Duration::from_millis(10);
/// The fake audit session id printed for `gui/<uid>` domains.
const FAKE_ASID: u32 = 100_008;

const USAGE: &str = "Usage: launchctl <subcommand> ... | help [subcommand]";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(run(&args));
}

fn run(args: &[String]) -> i32 {
    let Some(dir) = std::env::var_os("FAKE_LAUNCHD_DIR").filter(|d| !d.is_empty()) else {
        eprintln!(
            "fake-launchctl: FAKE_LAUNCHD_DIR is not set: point it at a directory for the \
             fake launchd's state"
        );
        return EX_CONFIG;
    };
    let root = std::path::absolute(PathBuf::from(dir)).unwrap_or_else(|e| {
        eprintln!("fake-launchctl: FAKE_LAUNCHD_DIR: {e}");
        std::process::exit(EX_CONFIG)
    });
    let store = Store { root };
    let Some(sub) = args.first() else {
        println!("{USAGE}");
        return 0;
    };
    let rest = &args[1..];
    let result = match sub.as_str() {
        "__supervise" => return supervise(&store, rest),
        "bootstrap" => bootstrap(&store, rest),
        "bootout" => bootout(&store, rest),
        "kickstart" => kickstart(&store, rest),
        "print" => print(&store, rest),
        "load" => load(&store, rest),
        "unload" => unload(&store, rest),
        "list" => list(&store, rest),
        "enable" => match rest {
            [target] if parse_service_target(target).is_some() => Ok(0),
            _ => Err(bad_target("enable")),
        },
        "help" => {
            println!("{USAGE}");
            Ok(0)
        }
        "disable" | "start" | "stop" | "remove" | "kill" | "blame" | "print-disabled"
        | "print-cache" | "setenv" | "unsetenv" | "getenv" | "submit" | "attach" | "debug"
        | "reboot" | "bootshell" | "limit" | "procinfo" | "hostinfo" | "resolveport"
        | "examine" | "config" | "dumpstate" | "dumpjpcategory" | "managerpid" | "manageruid"
        | "managername" | "error" | "variant" | "version" | "asuser" | "bsexec" | "uncache" => Err(
            Failure::usage(format!("fake-launchctl: `{sub}` is not emulated")),
        ),
        other => Err(Failure::usage(format!(
            "Unrecognized subcommand: {other}\n{USAGE}"
        ))),
    };
    match result {
        Ok(code) => code,
        Err(f) => {
            if !f.message.is_empty() {
                eprintln!("{}", f.message);
            }
            f.code
        }
    }
}

/// A failed command: what to print on stderr, and the exit code.
struct Failure {
    message: String,
    code: i32,
}

impl Failure {
    fn new(code: i32, message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            code,
        }
    }
    fn usage(message: impl Into<String>) -> Failure {
        Failure::new(EX_USAGE, message)
    }
    fn io(what: &str, e: io::Error) -> Failure {
        Failure::new(1, format!("fake-launchctl: {what}: {e}"))
    }
}

type CmdResult = Result<i32, Failure>;

// ---------------------------------------------------------------------------------
// Domains and targets

/// A launchd domain the fake models.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Domain {
    System,
    Gui(u32),
    User(u32),
}

impl Domain {
    fn parse(text: &str) -> Option<Domain> {
        let text = text.trim_end_matches('/');
        if text == "system" {
            return Some(Domain::System);
        }
        let (kind, uid) = text.split_once('/')?;
        let uid: u32 = uid.parse().ok()?;
        match kind {
            "gui" => Some(Domain::Gui(uid)),
            "user" => Some(Domain::User(uid)),
            _ => None,
        }
    }

    /// `system`, `gui/501`, `user/501`.
    fn target(&self) -> String {
        match self {
            Domain::System => "system".into(),
            Domain::Gui(u) => format!("gui/{u}"),
            Domain::User(u) => format!("user/{u}"),
        }
    }

    /// The state directory's name for it.
    fn dir_name(&self) -> String {
        self.target().replace('/', "_")
    }

    /// How launchctl names it in "Could not find service … in domain for …".
    fn message_name(&self) -> String {
        match self {
            Domain::System => "system".into(),
            Domain::Gui(u) => format!("user gui: {u}"),
            Domain::User(u) => format!("uid: {u}"),
        }
    }

    /// The `type` line of `print`.
    fn job_type(&self) -> &'static str {
        match self {
            Domain::System => "LaunchDaemon",
            _ => "LaunchAgent",
        }
    }
}

/// `<domain>/<label>`.
fn parse_service_target(text: &str) -> Option<(Domain, String)> {
    let (domain, label) = if let Some(label) = text.strip_prefix("system/") {
        ("system", label)
    } else {
        let mut parts = text.splitn(3, '/');
        let kind = parts.next()?;
        let uid = parts.next()?;
        let label = parts.next()?;
        (&text[..kind.len() + 1 + uid.len()], label)
    };
    if label.is_empty() {
        return None;
    }
    Some((Domain::parse(domain)?, label.to_string()))
}

fn bad_target(sub: &str) -> Failure {
    Failure::usage(format!(
        "Unrecognized target specifier. <service-target> takes a form of \
         <domain-target>/<service-id>.\nPlease refer to `man launchctl` for explanation of \
         the <domain-target> specifiers.\nUsage: launchctl {sub} <service-target>"
    ))
}

fn not_found(domain: &Domain, label: &str) -> String {
    format!(
        "Could not find service \"{label}\" in domain for {}",
        domain.message_name()
    )
}

/// The domain `load`, `unload` and `list` act on.
fn legacy_domain() -> Result<Domain, Failure> {
    if let Some(d) = std::env::var_os("FAKE_LAUNCHCTL_LEGACY_DOMAIN") {
        let d = d.to_string_lossy();
        return Domain::parse(&d).ok_or_else(|| {
            Failure::new(
                EX_CONFIG,
                format!("fake-launchctl: FAKE_LAUNCHCTL_LEGACY_DOMAIN `{d}` is not a domain"),
            )
        });
    }
    let euid = geteuid().as_raw();
    Ok(if euid == 0 {
        Domain::System
    } else {
        Domain::Gui(euid)
    })
}

/// Which launchctl's error texts to print (`FAKE_LAUNCHCTL_ERRORS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    /// macOS 11+ run by a user: errors flattened to 5, with a hint to retry as root.
    User,
    /// macOS 11+ run as root: the "richer errors".
    Root,
    /// macOS 10.15 and earlier.
    Legacy,
}

fn style() -> Result<Style, Failure> {
    match std::env::var("FAKE_LAUNCHCTL_ERRORS").as_deref() {
        Err(_) | Ok("") | Ok("user") => Ok(Style::User),
        Ok("root") => Ok(Style::Root),
        Ok("legacy") => Ok(Style::Legacy),
        Ok(other) => Err(Failure::new(
            EX_CONFIG,
            format!(
                "fake-launchctl: FAKE_LAUNCHCTL_ERRORS must be user, root or legacy, not `{other}`"
            ),
        )),
    }
}

// ---------------------------------------------------------------------------------
// The cached job definition

/// What launchd cached from the plist at bootstrap.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Definition {
    /// `Program`, if the plist has it.
    program: Option<String>,
    /// `ProgramArguments` (or `[Program]`).
    arguments: Vec<String>,
    environment: BTreeMap<String, String>,
    working_directory: Option<String>,
    stdout_path: Option<String>,
    stderr_path: Option<String>,
    run_at_load: bool,
    keep_alive: KeepAlive,
    abandon_process_group: bool,
    process_type: Option<String>,
    throttle_ms: u64,
    /// 0: never SIGKILL.
    exit_timeout_ms: u64,
}

impl Definition {
    /// The executable launchd runs (`Program`, else argv[0]).
    fn executable(&self) -> &str {
        self.program
            .as_deref()
            .unwrap_or_else(|| self.arguments[0].as_str())
    }
}

/// `KeepAlive` as launchd imports it (launchd-842 `core.c`): a boolean sets the job's
/// `ondemand` to its negation (`job_import_bool`); a dictionary is walked key by key
/// (`semaphoreitem_setup`), each condition a reason to keep the job alive, ORed
/// (`job_keepalive`; launchd.plist(5): "If multiple keys are provided, launchd ORs
/// them").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
enum KeepAlive {
    /// `false` or absent: only demand (`RunAtLoad`, `kickstart`) starts the job.
    #[default]
    Never,
    /// `true`: "job configured to run continuously", restarted after every exit.
    Always,
    /// A dictionary of the conditions the fake models (an empty one keeps nothing
    /// alive: launchd "falls back on demand based invocation").
    Conditions {
        /// `SuccessfulExit`: `true` restarts after an exit with status 0, `false`
        /// after anything else (a non-zero status or a death by signal).
        successful_exit: Option<bool>,
        /// `Crashed`: `true` restarts after a crash (see [`LastExit::crashed`]),
        /// `false` after anything else.
        crashed: Option<bool>,
    },
}

/// `KeepAlive` condition keys launchd knows but the fake does not model: a plist that
/// uses one is refused rather than run with a behaviour launchd would not have.
const UNMODELLED_CONDITIONS: [&str; 5] = [
    "NetworkState",
    "PathState",
    "OtherJobEnabled",
    "OtherJobActive",
    "AfterInitialDemand",
];

impl KeepAlive {
    /// Reads a plist's `KeepAlive` value. Condition keys are matched case-insensitively
    /// and a key launchd does not recognise (or a value of the wrong type) is ignored,
    /// as `semaphoreitem_setup` does ("Unrecognized KeepAlive attribute", logged);
    /// `Err(key)` for a key in [`UNMODELLED_CONDITIONS`].
    fn from_plist(value: Option<&Value>) -> Result<KeepAlive, String> {
        let conditions = match value {
            Some(Value::Boolean(true)) => return Ok(KeepAlive::Always),
            Some(Value::Dictionary(d)) => d,
            _ => return Ok(KeepAlive::Never),
        };
        let (mut successful_exit, mut crashed) = (None, None);
        for (key, value) in conditions {
            if let Some(k) = UNMODELLED_CONDITIONS
                .iter()
                .find(|k| k.eq_ignore_ascii_case(key))
            {
                return Err((*k).to_string());
            }
            let Some(b) = value.as_boolean() else {
                continue;
            };
            if key.eq_ignore_ascii_case("SuccessfulExit") {
                successful_exit = Some(b);
            } else if key.eq_ignore_ascii_case("Crashed") {
                crashed = Some(b);
            }
        }
        Ok(KeepAlive::Conditions {
            successful_exit,
            crashed,
        })
    }

    /// Whether loading the job starts it: `KeepAlive = true` (the "job configured to
    /// run continuously" check), and a `SuccessfulExit` or `Crashed` condition, which
    /// sets `start_pending` at import ("This key implies that "RunAtLoad" is set to
    /// true, since the job needs to run at least once before we can get an exit
    /// status", launchd.plist(5)).
    fn starts_at_load(self) -> bool {
        match self {
            KeepAlive::Never => false,
            KeepAlive::Always => true,
            KeepAlive::Conditions {
                successful_exit,
                crashed,
            } => successful_exit.is_some() || crashed.is_some(),
        }
    }

    /// Whether launchd starts the job again after a run that ended with `last`
    /// (`job_keepalive`: `good_exit` is `WIFEXITED && WEXITSTATUS == 0`).
    fn respawns_after(self, last: LastExit) -> bool {
        match self {
            KeepAlive::Never => false,
            KeepAlive::Always => true,
            KeepAlive::Conditions {
                successful_exit,
                crashed,
            } => {
                let good_exit = last == LastExit::Code(0);
                successful_exit == Some(good_exit) || crashed == Some(last.crashed())
            }
        }
    }

    /// Whether the job is kept alive unconditionally (`ondemand` false: the legacy
    /// `list`'s `OnDemand = false`).
    fn always(self) -> bool {
        self == KeepAlive::Always
    }
}

/// Why a plist could not be loaded (each maps to a launchctl error).
enum PlistProblem {
    Missing,
    Invalid,
}

fn env_ms(name: &str, default: u64) -> Result<u64, Failure> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => v.trim().parse().map_err(|_| {
            Failure::new(
                EX_CONFIG,
                format!("fake-launchctl: {name} must be whole milliseconds, not `{v}`"),
            )
        }),
    }
}

/// Reads a job plist (XML or binary) into its label and definition.
fn read_plist(path: &Path) -> Result<Result<(String, Definition), PlistProblem>, Failure> {
    let throttle_default = env_ms("FAKE_LAUNCHD_THROTTLE_MS", DEFAULT_THROTTLE_MS)?;
    let exit_default = env_ms("FAKE_LAUNCHD_EXIT_TIMEOUT_MS", DEFAULT_EXIT_TIMEOUT_MS)?;
    if !path.exists() {
        return Ok(Err(PlistProblem::Missing));
    }
    let value = match Value::from_file(path) {
        Ok(v) => v,
        Err(_) => return Ok(Err(PlistProblem::Invalid)),
    };
    let Some(dict) = value.as_dictionary() else {
        return Ok(Err(PlistProblem::Invalid));
    };
    let string = |key: &str| dict.get(key).and_then(Value::as_string).map(String::from);
    let boolean = |key: &str| dict.get(key).and_then(Value::as_boolean).unwrap_or(false);
    let seconds_ms = |key: &str, default: u64| {
        dict.get(key)
            .and_then(|v| v.as_unsigned_integer())
            .map(|s| s.saturating_mul(1000))
            .unwrap_or(default)
    };
    let Some(label) = string("Label") else {
        return Ok(Err(PlistProblem::Invalid));
    };
    let program = string("Program");
    let mut arguments: Vec<String> = dict
        .get("ProgramArguments")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_string)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    if arguments.is_empty() {
        match &program {
            Some(p) => arguments.push(p.clone()),
            None => return Ok(Err(PlistProblem::Invalid)),
        }
    }
    let environment = dict
        .get("EnvironmentVariables")
        .and_then(Value::as_dictionary)
        .map(|env| {
            env.iter()
                .filter_map(|(k, v)| v.as_string().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let keep_alive = KeepAlive::from_plist(dict.get("KeepAlive")).map_err(|key| {
        Failure::new(
            EX_CONFIG,
            format!("fake-launchctl: the KeepAlive condition `{key}` is not emulated"),
        )
    })?;
    Ok(Ok((
        label,
        Definition {
            program,
            arguments,
            environment,
            working_directory: string("WorkingDirectory"),
            stdout_path: string("StandardOutPath"),
            stderr_path: string("StandardErrorPath"),
            run_at_load: boolean("RunAtLoad"),
            keep_alive,
            abandon_process_group: boolean("AbandonProcessGroup"),
            process_type: string("ProcessType"),
            throttle_ms: seconds_ms("ThrottleInterval", throttle_default),
            exit_timeout_ms: seconds_ms("ExitTimeOut", exit_default),
        },
    )))
}

// ---------------------------------------------------------------------------------
// Persistent state

/// How the last run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum LastExit {
    Code(i32),
    Signal(i32),
}

impl LastExit {
    /// Whether launchd calls this end a crash: death by SIGILL, SIGABRT, SIGFPE,
    /// SIGBUS, SIGSEGV, SIGSYS or SIGTRAP ("Signals which indicate a crash",
    /// `job_reap` in launchd-842 `core.c`; a job stopped on request never gets here,
    /// the supervisor respawns or removes it by its request instead).
    fn crashed(self) -> bool {
        match self {
            LastExit::Code(_) => false,
            LastExit::Signal(s) => matches!(
                Signal::try_from(s),
                Ok(Signal::SIGILL
                    | Signal::SIGABRT
                    | Signal::SIGFPE
                    | Signal::SIGBUS
                    | Signal::SIGSEGV
                    | Signal::SIGSYS
                    | Signal::SIGTRAP)
            ),
        }
    }

    fn from_status(status: std::process::ExitStatus) -> LastExit {
        match (status.code(), status.signal()) {
            (Some(c), _) => LastExit::Code(c),
            (None, Some(s)) => LastExit::Signal(s),
            (None, None) => LastExit::Code(-1),
        }
    }
}

/// What a CLI call asks of the supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Request {
    /// `kickstart`: start the job now unless it runs.
    Start,
    /// `kickstart -k`: stop the running instance, start a new one.
    Restart,
    /// `bootout`/`unload`: stop the job and unload it.
    Remove,
}

/// One loaded service.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Service {
    domain: String,
    label: String,
    plist_path: String,
    def: Definition,
    /// `running`, `not running`, `spawn scheduled`.
    state: String,
    pid: Option<u32>,
    runs: u32,
    last_exit: Option<LastExit>,
    /// The supervisor process watching this service, if any.
    supervisor: Option<u32>,
    /// The latest request and its sequence number; `done_seq` is the last one the
    /// supervisor completed.
    request: Option<Request>,
    request_seq: u64,
    done_seq: u64,
}

impl Service {
    fn domain(&self) -> Domain {
        Domain::parse(&self.domain).expect("a stored domain parses")
    }

    fn ask(&mut self, request: Request) -> u64 {
        self.request = Some(request);
        self.request_seq += 1;
        self.request_seq
    }

    /// The longest a CLI call waits for the supervisor to stop and restart the job.
    fn patience(&self) -> Duration {
        let exit = if self.def.exit_timeout_ms == 0 {
            120_000
        } else {
            self.def.exit_timeout_ms
        };
        Duration::from_millis(exit) + Duration::from_secs(10)
    }
}

/// The state directory.
struct Store {
    root: PathBuf,
}

/// An exclusive lock on one service's state.
struct Locked {
    _lock: Flock<File>,
}

impl Store {
    fn dir(&self, domain: &Domain) -> PathBuf {
        self.root.join(domain.dir_name())
    }

    fn json(&self, domain: &Domain, label: &str) -> PathBuf {
        self.dir(domain).join(format!("{label}.json"))
    }

    /// Locks `label`'s state. `create`: make the directories if missing (CLI calls);
    /// the supervisor passes `false`, so a deleted state directory stays deleted.
    fn lock(&self, domain: &Domain, label: &str, create: bool) -> io::Result<Locked> {
        let dir = self.dir(domain);
        if create {
            fs::create_dir_all(&dir)?;
        }
        let file = OpenOptions::new()
            .create(create)
            .truncate(false)
            .write(true)
            .open(dir.join(format!("{label}.lock")))?;
        let lock =
            Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| io::Error::from(e))?;
        Ok(Locked { _lock: lock })
    }

    fn read(&self, domain: &Domain, label: &str) -> io::Result<Option<Service>> {
        match fs::read(self.json(domain, label)) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes `svc` atomically (temporary file, then rename).
    fn write(&self, svc: &Service) -> io::Result<()> {
        let domain = svc.domain();
        let path = self.json(&domain, &svc.label);
        let tmp = self
            .dir(&domain)
            .join(format!(".{}.json.{}.tmp", svc.label, std::process::id()));
        let bytes = serde_json::to_vec_pretty(svc).map_err(io::Error::other)?;
        {
            let mut f = File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, &path)
    }

    fn remove(&self, domain: &Domain, label: &str) -> io::Result<()> {
        match fs::remove_file(self.json(domain, label)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Every loaded service of `domain`, by label.
    fn services(&self, domain: &Domain) -> io::Result<Vec<Service>> {
        let mut out = Vec::new();
        let entries = match fs::read_dir(self.dir(domain)) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if let Some(label) = name.strip_suffix(".json").filter(|l| !l.starts_with('.')) {
                if let Some(svc) = self.read(domain, label)? {
                    out.push(svc);
                }
            }
        }
        out.sort_by(|a, b| a.label.cmp(&b.label));
        Ok(out)
    }
}

use flotilla_testkit::alive;

/// Whether `pid` is a live supervisor of `label`.
fn supervisor_alive(pid: u32, label: &str) -> bool {
    alive(pid)
        && fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
            let args: Vec<&[u8]> = c.split(|b| *b == 0).collect();
            args.contains(&b"__supervise".as_slice()) && args.contains(&label.as_bytes())
        })
}

/// Starts a supervisor for `svc` (detached, its own session) and records its pid.
/// Call with `svc`'s lock held and write `svc` afterwards.
fn start_supervisor(store: &Store, svc: &mut Service) -> Result<(), Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure::io("cannot find my own binary", e))?;
    fs::create_dir_all(&store.root).map_err(|e| Failure::io("state directory", e))?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(store.root.join("supervisor.log"))
        .map_err(|e| Failure::io("supervisor.log", e))?;
    let mut cmd = Command::new(exe);
    cmd.arg("__supervise")
        .arg(&svc.domain)
        .arg(&svc.label)
        .env("FAKE_LAUNCHD_DIR", &store.root)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log));
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| setsid().map(|_| ()).map_err(io::Error::from));
    }
    let child = cmd
        .spawn()
        .map_err(|e| Failure::io("cannot start the supervisor", e))?;
    svc.supervisor = Some(child.id());
    // Not waited for: it outlives this call (and is reaped by whoever inherits it).
    drop(child);
    Ok(())
}

// ---------------------------------------------------------------------------------
// Subcommands

fn bootstrap(store: &Store, args: &[String]) -> CmdResult {
    let style = style()?;
    let [domain, path] = args else {
        return Err(match args {
            [] => Failure::usage(format!(
                "Usage: launchctl bootstrap <domain-target> [service-path, service-path2, ...]\n{USAGE}"
            )),
            [_] => Failure::usage("fake-launchctl: bootstrapping a whole domain is not emulated"),
            _ => Failure::usage("fake-launchctl: bootstrap of more than one path is not emulated"),
        });
    };
    let Some(domain) = Domain::parse(domain) else {
        return Err(bad_target("bootstrap"));
    };
    let hint = |code: i32, text: &str| {
        let mut msg = format!("Bootstrap failed: {code}: {text}");
        if style == Style::User {
            msg.push_str("\nTry re-running the command as root for richer errors.");
        }
        Failure::new(code, msg)
    };
    let (label, def) = match read_plist(Path::new(path))? {
        Ok(v) => v,
        Err(PlistProblem::Missing) => {
            return Err(Failure::new(
                2,
                "Bootstrap failed: 2: No such file or directory",
            ))
        }
        Err(PlistProblem::Invalid) => return Err(hint(EIO, "Input/output error")),
    };
    match load_service(store, &domain, &label, path, def)? {
        Loaded::New => Ok(0),
        Loaded::Already => Err(match style {
            Style::User => hint(EIO, "Input/output error"),
            Style::Root => Failure::new(
                EALREADY,
                "Bootstrap failed: 37: Operation already in progress",
            ),
            Style::Legacy => Failure::new(EALREADY, format!("{path}: service already loaded")),
        }),
    }
}

enum Loaded {
    New,
    Already,
}

/// Loads a job unless its label is loaded in `domain` (then nothing changes).
fn load_service(
    store: &Store,
    domain: &Domain,
    label: &str,
    path: &str,
    def: Definition,
) -> Result<Loaded, Failure> {
    let _lock = store
        .lock(domain, label, true)
        .map_err(|e| Failure::io("cannot lock the state", e))?;
    if store
        .read(domain, label)
        .map_err(|e| Failure::io("cannot read the state", e))?
        .is_some()
    {
        return Ok(Loaded::Already);
    }
    let starts = def.run_at_load || def.keep_alive.starts_at_load();
    let plist_path = std::path::absolute(path)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.to_string());
    let mut svc = Service {
        domain: domain.target(),
        label: label.to_string(),
        plist_path,
        def,
        state: if starts {
            "spawn scheduled"
        } else {
            "not running"
        }
        .into(),
        pid: None,
        runs: 0,
        last_exit: None,
        supervisor: None,
        request: None,
        request_seq: 0,
        done_seq: 0,
    };
    if starts {
        svc.ask(Request::Start);
        start_supervisor(store, &mut svc)?;
    }
    store
        .write(&svc)
        .map_err(|e| Failure::io("cannot write the state", e))?;
    Ok(Loaded::New)
}

fn bootout(store: &Store, args: &[String]) -> CmdResult {
    let style = style()?;
    let (domain, label, by_path) = match args {
        [target] => match parse_service_target(target) {
            Some((d, l)) => (d, l, false),
            None if Domain::parse(target).is_some() => {
                return Err(Failure::usage("fake-launchctl: booting out a whole domain is not emulated"))
            }
            None => return Err(bad_target("bootout")),
        },
        [domain, path] => {
            let Some(domain) = Domain::parse(domain) else {
                return Err(bad_target("bootout"));
            };
            match read_plist(Path::new(path))? {
                Ok((label, _)) => (domain, label, true),
                Err(PlistProblem::Missing) => {
                    return Err(Failure::new(2, "Boot-out failed: 2: No such file or directory"))
                }
                Err(PlistProblem::Invalid) => return Err(bootout_eio(style)),
            }
        }
        _ => {
            return Err(Failure::usage(format!(
                "Usage: launchctl bootout <domain-target> [service-path1, service-path2, ...] | <service-target>\n{USAGE}"
            )))
        }
    };
    if unload_service(store, &domain, &label)? {
        Ok(0)
    } else if by_path {
        Err(bootout_eio(style))
    } else {
        Err(Failure::new(ESRCH, "Boot-out failed: 3: No such process"))
    }
}

fn bootout_eio(style: Style) -> Failure {
    let mut msg = "Boot-out failed: 5: Input/output error".to_string();
    if style == Style::User {
        msg.push_str("\nTry re-running the command as root for richer errors.");
    }
    Failure::new(EIO, msg)
}

/// Stops and unloads a service; `false` if it was not loaded.
fn unload_service(store: &Store, domain: &Domain, label: &str) -> Result<bool, Failure> {
    let deadline;
    {
        let _lock = store
            .lock(domain, label, true)
            .map_err(|e| Failure::io("cannot lock the state", e))?;
        let Some(mut svc) = store
            .read(domain, label)
            .map_err(|e| Failure::io("cannot read the state", e))?
        else {
            return Ok(false);
        };
        if !svc.supervisor.is_some_and(|p| supervisor_alive(p, label)) {
            // Nothing watches it: no process, or one whose supervisor died.
            if let Some(pid) = svc.pid.filter(|p| alive(*p)) {
                stop_orphan(pid, &svc.def);
            }
            store
                .remove(domain, label)
                .map_err(|e| Failure::io("cannot remove the state", e))?;
            return Ok(true);
        }
        svc.ask(Request::Remove);
        deadline = Instant::now() + svc.patience();
        store
            .write(&svc)
            .map_err(|e| Failure::io("cannot write the state", e))?;
    }
    // Wait for the supervisor to stop the job and unload it.
    loop {
        let svc = store
            .read(domain, label)
            .map_err(|e| Failure::io("cannot read the state", e))?;
        let Some(svc) = svc else { return Ok(true) };
        if !svc.supervisor.is_some_and(|p| supervisor_alive(p, label)) {
            // It died (or left) before finishing: finish its work.
            let _lock = store
                .lock(domain, label, true)
                .map_err(|e| Failure::io("cannot lock the state", e))?;
            if let Some(svc) = store
                .read(domain, label)
                .map_err(|e| Failure::io("cannot read the state", e))?
            {
                if let Some(pid) = svc.pid.filter(|p| alive(*p)) {
                    stop_orphan(pid, &svc.def);
                }
                store
                    .remove(domain, label)
                    .map_err(|e| Failure::io("cannot remove the state", e))?;
            }
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Err(Failure::new(
                1,
                format!("fake-launchctl: {label} did not stop in time"),
            ));
        }
        sleep(TICK);
    }
}

/// SIGTERM, then SIGKILL after the exit timeout, for a job no supervisor watches.
fn stop_orphan(pid: u32, def: &Definition) {
    let p = Pid::from_raw(pid as i32);
    let _ = kill(p, Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_millis(def.exit_timeout_ms.max(1));
    while alive(pid) && (def.exit_timeout_ms == 0 || Instant::now() < deadline) {
        sleep(TICK);
    }
    if alive(pid) {
        let _ = kill(p, Signal::SIGKILL);
    }
}

fn kickstart(store: &Store, args: &[String]) -> CmdResult {
    let (mut kill_first, mut print_pid) = (false, false);
    let mut target = None;
    for arg in args {
        match arg.as_str() {
            a if a.starts_with('-') && a.len() > 1 => {
                for flag in a[1..].chars() {
                    match flag {
                        'k' => kill_first = true,
                        'p' => print_pid = true,
                        's' => {
                            return Err(Failure::usage(
                                "fake-launchctl: kickstart -s (start suspended) is not emulated",
                            ))
                        }
                        _ => {
                            return Err(Failure::usage(format!(
                                "Usage: launchctl kickstart [-kp] <service-target>\n{USAGE}"
                            )))
                        }
                    }
                }
            }
            t if target.is_none() => target = Some(t),
            _ => return Err(bad_target("kickstart")),
        }
    }
    let Some((domain, label)) = target.and_then(parse_service_target) else {
        return Err(bad_target("kickstart"));
    };
    let (seq, deadline) = {
        let _lock = store
            .lock(&domain, &label, true)
            .map_err(|e| Failure::io("cannot lock the state", e))?;
        let Some(mut svc) = store
            .read(&domain, &label)
            .map_err(|e| Failure::io("cannot read the state", e))?
        else {
            return Err(Failure::new(ENOSERVICE, not_found(&domain, &label)));
        };
        let running = svc.pid.is_some_and(alive);
        if running && !kill_first {
            if print_pid {
                say_pid(svc.pid.expect("running"));
            }
            return Ok(0);
        }
        let seq = svc.ask(if kill_first && running {
            Request::Restart
        } else {
            Request::Start
        });
        if !svc.supervisor.is_some_and(|p| supervisor_alive(p, &label)) {
            start_supervisor(store, &mut svc)?;
        }
        store
            .write(&svc)
            .map_err(|e| Failure::io("cannot write the state", e))?;
        (seq, Instant::now() + svc.patience())
    };
    loop {
        let svc = store
            .read(&domain, &label)
            .map_err(|e| Failure::io("cannot read the state", e))?;
        let Some(svc) = svc else {
            return Err(Failure::new(ENOSERVICE, not_found(&domain, &label)));
        };
        if svc.done_seq >= seq {
            if print_pid {
                if let Some(pid) = svc.pid {
                    say_pid(pid);
                }
            }
            return Ok(0);
        }
        if Instant::now() >= deadline
            || !svc.supervisor.is_some_and(|p| supervisor_alive(p, &label))
        {
            return Err(Failure::new(
                1,
                format!("fake-launchctl: the supervisor of {label} did not restart it"),
            ));
        }
        sleep(TICK);
    }
}

/// `kickstart -p`'s output (Procursus `kickstart.c`).
fn say_pid(pid: u32) {
    if io::stdout().is_terminal() {
        println!("service spawned with pid: {pid}");
    } else {
        println!("{pid}");
    }
}

fn print(store: &Store, args: &[String]) -> CmdResult {
    let [target] = args else {
        return Err(Failure::usage(format!(
            "Usage: launchctl print <domain-target> | <service-target>\n{USAGE}"
        )));
    };
    let Some((domain, label)) = parse_service_target(target) else {
        if Domain::parse(target).is_some() {
            return Err(Failure::usage(
                "fake-launchctl: printing a whole domain is not emulated",
            ));
        }
        return Err(bad_target("print"));
    };
    let svc = store
        .read(&domain, &label)
        .map_err(|e| Failure::io("cannot read the state", e))?;
    let Some(svc) = svc else {
        return Err(Failure::new(
            ENOSERVICE,
            format!("Bad request.\n{}", not_found(&domain, &label)),
        ));
    };
    print!("{}", describe(&svc));
    Ok(0)
}

/// The `print` text of a service (layout: see the module docs).
fn describe(svc: &Service) -> String {
    let domain = svc.domain();
    let def = &svc.def;
    let running = svc.state == "running" && svc.pid.is_some();
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!("{}/{} = {{", domain.target(), svc.label));
    line(format!("\tactive count = {}", u8::from(running)));
    line(format!("\tpath = {}", svc.plist_path));
    line(format!("\ttype = {}", domain.job_type()));
    line(format!("\tstate = {}", svc.state));
    line(String::new());
    line(format!("\tprogram = {}", def.executable()));
    line("\targuments = {".into());
    for a in &def.arguments {
        line(format!("\t\t{a}"));
    }
    line("\t}".into());
    line(String::new());
    if let Some(wd) = &def.working_directory {
        line(format!("\tworking directory = {wd}"));
        line(String::new());
    }
    if let Some(p) = &def.stdout_path {
        line(format!("\tstdout path = {p}"));
    }
    if let Some(p) = &def.stderr_path {
        line(format!("\tstderr path = {p}"));
    }
    line("\tdefault environment = {".into());
    line(format!("\t\tPATH => {LAUNCHD_PATH}"));
    line("\t}".into());
    line(String::new());
    line("\tenvironment = {".into());
    for (k, v) in &def.environment {
        line(format!("\t\t{k} => {v}"));
    }
    line(format!("\t\tXPC_SERVICE_NAME => {}", svc.label));
    line("\t}".into());
    line(String::new());
    match domain {
        Domain::Gui(_) => {
            line(format!("\tdomain = {} [{FAKE_ASID}]", domain.target()));
            line(format!("\tasid = {FAKE_ASID}"));
        }
        _ => line(format!("\tdomain = {}", domain.target())),
    }
    line(format!("\tminimum runtime = {}", def.throttle_ms / 1000));
    line(format!("\texit timeout = {}", def.exit_timeout_ms / 1000));
    line(format!("\truns = {}", svc.runs));
    if running {
        line(format!("\tpid = {}", svc.pid.expect("running")));
        line("\timmediate reason = speculative".into());
    }
    match svc.last_exit {
        None => line("\tlast exit code = (never exited)".into()),
        Some(LastExit::Code(c)) => line(format!("\tlast exit code = {}", exit_code_text(c))),
        Some(LastExit::Signal(s)) => {
            line(format!("\tlast terminating signal = {}", signal_text(s)))
        }
    }
    line(String::new());
    line(match def.process_type.as_deref() {
        Some("Interactive") => "\tspawn type = interactive (4)".into(),
        Some("Adaptive") => "\tspawn type = adaptive (6)".into(),
        Some("Background") => "\tspawn type = background (1)".into(),
        _ => "\tspawn type = daemon (3)".into(),
    });
    line(format!(
        "\tjob state = {}",
        if running { "running" } else { "exited" }
    ));
    line(String::new());
    let mut props = Vec::new();
    if def.keep_alive != KeepAlive::Never {
        props.push("keepalive");
    }
    if def.run_at_load {
        props.push("runatload");
    }
    if def.program.is_none() {
        props.push("inferred program");
    }
    if !props.is_empty() {
        line(format!("\tproperties = {}", props.join(" | ")));
    }
    line("}".into());
    out
}

/// `78: EX_CONFIG` for sysexits(3) codes, the bare number otherwise.
fn exit_code_text(code: i32) -> String {
    const SYSEXITS: [&str; 15] = [
        "EX_USAGE",
        "EX_DATAERR",
        "EX_NOINPUT",
        "EX_NOUSER",
        "EX_NOHOST",
        "EX_UNAVAILABLE",
        "EX_SOFTWARE",
        "EX_OSERR",
        "EX_OSFILE",
        "EX_CANTCREAT",
        "EX_IOERR",
        "EX_TEMPFAIL",
        "EX_PROTOCOL",
        "EX_NOPERM",
        "EX_CONFIG",
    ];
    match usize::try_from(code - 64)
        .ok()
        .and_then(|i| SYSEXITS.get(i))
    {
        Some(name) => format!("{code}: {name}"),
        None => code.to_string(),
    }
}

/// macOS's strsignal(3) text and the number, e.g. `Terminated: 15`.
fn signal_text(sig: i32) -> String {
    let name = match Signal::try_from(sig) {
        Ok(Signal::SIGHUP) => "Hangup",
        Ok(Signal::SIGINT) => "Interrupt",
        Ok(Signal::SIGQUIT) => "Quit",
        Ok(Signal::SIGILL) => "Illegal instruction",
        Ok(Signal::SIGTRAP) => "Trace/BPT trap",
        Ok(Signal::SIGABRT) => "Abort trap",
        Ok(Signal::SIGFPE) => "Floating point exception",
        Ok(Signal::SIGKILL) => "Killed",
        Ok(Signal::SIGBUS) => "Bus error",
        Ok(Signal::SIGSEGV) => "Segmentation fault",
        Ok(Signal::SIGSYS) => "Bad system call",
        Ok(Signal::SIGPIPE) => "Broken pipe",
        Ok(Signal::SIGALRM) => "Alarm clock",
        Ok(Signal::SIGTERM) => "Terminated",
        Ok(Signal::SIGUSR1) => "User defined signal 1",
        Ok(Signal::SIGUSR2) => "User defined signal 2",
        _ => "Unknown signal",
    };
    format!("{name}: {sig}")
}

fn load(store: &Store, args: &[String]) -> CmdResult {
    let style = style()?;
    let paths = legacy_paths("load", args, &['w', 'F'])?;
    let domain = legacy_domain()?;
    for path in paths {
        let (label, def) = match read_plist(Path::new(path))? {
            Ok(v) => v,
            Err(problem) => {
                match (style, problem) {
                    (Style::Legacy, PlistProblem::Missing) => {
                        eprintln!("{path}: No such file or directory")
                    }
                    (Style::Legacy, PlistProblem::Invalid) => {
                        eprintln!("{path}: Invalid property list")
                    }
                    _ => eprintln!(
                        "Load failed: 5: Input/output error\nTry running `launchctl bootstrap` \
                         as root for richer errors."
                    ),
                }
                continue;
            }
        };
        if let Loaded::Already = load_service(store, &domain, &label, path, def)? {
            // The trap: nothing is reloaded or restarted, and the exit status is 0.
            if style == Style::Legacy {
                eprintln!("{path}: service already loaded");
            } else {
                eprintln!(
                    "Load failed: 5: Input/output error\nTry running `launchctl bootstrap` as \
                     root for richer errors."
                );
            }
        }
    }
    Ok(0)
}

fn unload(store: &Store, args: &[String]) -> CmdResult {
    let style = style()?;
    let paths = legacy_paths("unload", args, &['w'])?;
    let domain = legacy_domain()?;
    for path in paths {
        let label = match read_plist(Path::new(path))? {
            Ok((label, _)) => Some(label),
            Err(_) => None,
        };
        let unloaded = match &label {
            Some(label) => unload_service(store, &domain, label)?,
            None => false,
        };
        if !unloaded {
            if style == Style::Legacy {
                eprintln!("{path}: Could not find specified service");
            } else {
                eprintln!(
                    "Unload failed: 5: Input/output error\nTry running `launchctl bootout` as \
                     root for richer errors."
                );
            }
        }
    }
    Ok(0)
}

/// The plist paths of `load`/`unload`, after the flags in `accepted` (ignored: `-w`
/// writes the enabled/disabled override, which the fake does not model).
fn legacy_paths<'a>(
    sub: &str,
    args: &'a [String],
    accepted: &[char],
) -> Result<Vec<&'a str>, Failure> {
    let mut paths = Vec::new();
    for arg in args {
        if let Some(flags) = arg.strip_prefix('-') {
            if flags.is_empty() || !flags.chars().all(|c| accepted.contains(&c)) {
                return Err(Failure::usage(format!(
                    "fake-launchctl: {sub} {arg} is not emulated\nUsage: launchctl {sub} <service-path, service-path2, ...>"
                )));
            }
        } else {
            paths.push(arg.as_str());
        }
    }
    if paths.is_empty() {
        return Err(Failure::usage(format!(
            "Usage: launchctl {sub} <service-path, service-path2, ...>"
        )));
    }
    Ok(paths)
}

fn list(store: &Store, args: &[String]) -> CmdResult {
    let domain = legacy_domain()?;
    match args {
        [] => {
            println!("PID\tStatus\tLabel");
            let services = store
                .services(&domain)
                .map_err(|e| Failure::io("cannot read the state", e))?;
            for svc in services {
                let pid = svc
                    .pid
                    .filter(|_| svc.state == "running")
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "-".into());
                let status = match svc.last_exit {
                    None => "0".to_string(),
                    Some(LastExit::Code(c)) => c.to_string(),
                    Some(LastExit::Signal(s)) => format!("-{s}"),
                };
                println!("{pid}\t{status}\t{}", svc.label);
            }
            Ok(0)
        }
        [label] if !label.starts_with('-') => {
            let Some(svc) = store
                .read(&domain, label)
                .map_err(|e| Failure::io("cannot read the state", e))?
            else {
                return Err(Failure::new(
                    ENOSERVICE,
                    format!("Could not find service \"{label}\" in domain for port"),
                ));
            };
            print!("{}", list_entry(&svc));
            Ok(0)
        }
        _ => Err(Failure::usage(
            "fake-launchctl: only `list` and `list <label>` are emulated",
        )),
    }
}

/// `launchctl list <label>`'s dictionary (layout as quoted in
/// <https://github.com/Homebrew/homebrew-services/issues/601>). `LastExitStatus` is the
/// raw wait status: the exit code shifted left by 8, or the signal number.
fn list_entry(svc: &Service) -> String {
    let q = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    let mut out = String::from("{\n");
    if let Some(p) = &svc.def.stdout_path {
        out.push_str(&format!("\t\"StandardOutPath\" = {};\n", q(p)));
    }
    if let Some(p) = &svc.def.stderr_path {
        out.push_str(&format!("\t\"StandardErrorPath\" = {};\n", q(p)));
    }
    out.push_str(&format!("\t\"Label\" = {};\n", q(&svc.label)));
    out.push_str(&format!(
        "\t\"OnDemand\" = {};\n",
        if svc.def.keep_alive.always() {
            "false"
        } else {
            "true"
        }
    ));
    let raw = match svc.last_exit {
        None => 0,
        Some(LastExit::Code(c)) => c << 8,
        Some(LastExit::Signal(s)) => s,
    };
    out.push_str(&format!("\t\"LastExitStatus\" = {raw};\n"));
    if let Some(pid) = svc.pid.filter(|_| svc.state == "running") {
        out.push_str(&format!("\t\"PID\" = {pid};\n"));
    }
    out.push_str(&format!("\t\"Program\" = {};\n", q(svc.def.executable())));
    out.push_str("\t\"ProgramArguments\" = (\n");
    for a in &svc.def.arguments {
        out.push_str(&format!("\t\t{};\n", q(a)));
    }
    out.push_str("\t);\n};\n");
    out
}

// ---------------------------------------------------------------------------------
// The supervisor

/// A job process the supervisor watches.
struct Running {
    child: Child,
    pid: u32,
    started: Instant,
    /// When SIGTERM was sent to stop it, and what happens once it is gone.
    stopping: Option<(Instant, After)>,
    sigkilled: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    /// `kickstart -k`: start a new instance (completing request `seq`).
    Respawn { seq: u64 },
    /// `bootout`: unload.
    Remove,
}

/// `fake-launchctl __supervise <domain> <label>`: watches one job until there is
/// nothing left to watch (see the module docs).
fn supervise(store: &Store, args: &[String]) -> i32 {
    let [domain, label] = args else {
        eprintln!("fake-launchctl: __supervise <domain> <label>");
        return EX_USAGE;
    };
    let Some(domain) = Domain::parse(domain) else {
        eprintln!("fake-launchctl: __supervise: bad domain {domain}");
        return EX_USAGE;
    };
    let me = std::process::id();
    let mut job: Option<Running> = None;
    let mut respawn_at: Option<Instant> = None;
    // Spawns the job; one that cannot be spawned (recorded as exited with EX_CONFIG) is
    // retried after the throttle interval when its KeepAlive says so.
    let start = |svc: &mut Service, respawn_at: &mut Option<Instant>| {
        let job = spawn_job(svc);
        if job.is_none()
            && svc
                .def
                .keep_alive
                .respawns_after(svc.last_exit.unwrap_or(LastExit::Code(EX_CONFIG)))
        {
            *respawn_at = Some(Instant::now() + Duration::from_millis(svc.def.throttle_ms));
            svc.state = "spawn scheduled".into();
        }
        job
    };
    loop {
        // A vanished state directory or file means the service is gone (a test's
        // temporary directory was deleted): take the job down and leave.
        let gone = |job: &mut Option<Running>| {
            if let Some(mut r) = job.take() {
                let _ = killpg(Pid::from_raw(r.pid as i32), Signal::SIGKILL);
                let _ = r.child.wait();
            }
            0
        };
        let lock = match store.lock(&domain, label, false) {
            Ok(l) => l,
            Err(_) => return gone(&mut job),
        };
        let mut svc = match store.read(&domain, label) {
            Ok(Some(s)) => s,
            Ok(None) | Err(_) => return gone(&mut job),
        };
        if svc.supervisor != Some(me) {
            // Another supervisor owns the service (this one lost a race before starting
            // anything, or the state was overwritten): a job of ours is nobody's now.
            return gone(&mut job);
        }
        let before = serde_json::to_value(&svc).ok();
        let now = Instant::now();

        // 1. Reap the job if it ended.
        let ended = match job.as_mut().map(|r| r.child.try_wait()) {
            Some(Ok(Some(status))) => Some(status),
            Some(Err(e)) => {
                eprintln!("fake-launchctl: {label}: wait: {e}");
                None
            }
            _ => None,
        };
        if let Some(status) = ended {
            let r = job.take().expect("a job ended");
            if !svc.def.abandon_process_group {
                let _ = killpg(Pid::from_raw(r.pid as i32), Signal::SIGTERM);
            }
            svc.pid = None;
            svc.last_exit = Some(LastExit::from_status(status));
            svc.state = "not running".into();
            match r.stopping.map(|(_, after)| after) {
                Some(After::Remove) => {
                    let _ = store.remove(&domain, label);
                    return 0;
                }
                Some(After::Respawn { seq }) => {
                    job = start(&mut svc, &mut respawn_at);
                    svc.done_seq = svc.done_seq.max(seq);
                }
                None if svc
                    .def
                    .keep_alive
                    .respawns_after(LastExit::from_status(status)) =>
                {
                    // ThrottleInterval: two spawns at least that far apart.
                    let due = r.started + Duration::from_millis(svc.def.throttle_ms);
                    if Instant::now() < due {
                        respawn_at = Some(due);
                        svc.state = "spawn scheduled".into();
                    } else {
                        job = start(&mut svc, &mut respawn_at);
                    }
                }
                None => {}
            }
        }

        // 2. Carry out the latest request, unless a stop is already under way.
        let stopping = job.as_ref().and_then(|r| r.stopping.map(|(_, a)| a));
        if svc.request_seq > svc.done_seq {
            let seq = svc.request_seq;
            match (svc.request, stopping) {
                (Some(Request::Remove), Some(After::Remove)) => {}
                (Some(Request::Remove), _) => {
                    respawn_at = None;
                    match job.as_mut() {
                        Some(r) => terminate(r, now, After::Remove),
                        None => {
                            let _ = store.remove(&domain, label);
                            return 0;
                        }
                    }
                }
                (_, Some(_)) => {}
                (Some(Request::Restart), None) => match job.as_mut() {
                    Some(r) => terminate(r, now, After::Respawn { seq }),
                    None => {
                        respawn_at = None;
                        job = start(&mut svc, &mut respawn_at);
                        svc.done_seq = seq;
                    }
                },
                (Some(Request::Start), None) => {
                    if job.is_none() {
                        respawn_at = None;
                        job = start(&mut svc, &mut respawn_at);
                    }
                    svc.done_seq = seq;
                }
                (None, _) => svc.done_seq = seq,
            }
        }

        // 3. SIGKILL a job that outlived its exit timeout.
        if let Some(r) = job.as_mut() {
            if let Some((since, _)) = r.stopping {
                let timeout = svc.def.exit_timeout_ms;
                if !r.sigkilled && timeout != 0 && since.elapsed() >= Duration::from_millis(timeout)
                {
                    let _ = kill(Pid::from_raw(r.pid as i32), Signal::SIGKILL);
                    r.sigkilled = true;
                }
            }
        }

        // 4. A throttled KeepAlive respawn that is due.
        if respawn_at.is_some_and(|at| now >= at) && job.is_none() {
            respawn_at = None;
            job = start(&mut svc, &mut respawn_at);
        }

        // 5. Nothing left to watch: leave.
        let leave = job.is_none() && respawn_at.is_none();
        if leave {
            svc.supervisor = None;
        }
        if serde_json::to_value(&svc).ok() != before {
            if let Err(e) = store.write(&svc) {
                eprintln!("fake-launchctl: {label}: cannot write the state: {e}");
            }
        }
        drop(lock);
        if leave {
            return 0;
        }
        sleep(TICK);
    }
}

/// Sends SIGTERM to a job being stopped (launchd's `job_stop`).
fn terminate(r: &mut Running, now: Instant, after: After) {
    if r.stopping.is_none() {
        let _ = kill(Pid::from_raw(r.pid as i32), Signal::SIGTERM);
    }
    r.stopping = Some((r.stopping.map_or(now, |(t, _)| t), after));
}

/// Starts the job from its cached definition and records the run. A job that cannot be
/// spawned is recorded as exited with EX_CONFIG (`None`).
fn spawn_job(svc: &mut Service) -> Option<Running> {
    let def = svc.def.clone();
    let mut cmd = Command::new(def.executable());
    cmd.arg0(&def.arguments[0]).args(&def.arguments[1..]);
    cmd.env_clear().env("PATH", LAUNCHD_PATH);
    if let Ok(Some(user)) = User::from_uid(geteuid()) {
        cmd.env("HOME", &user.dir)
            .env("USER", &user.name)
            .env("LOGNAME", &user.name)
            .env("SHELL", &user.shell);
    }
    cmd.env("XPC_SERVICE_NAME", &svc.label);
    cmd.envs(&def.environment);
    let cwd = def
        .working_directory
        .as_deref()
        .filter(|d| Path::new(d).is_dir())
        .unwrap_or("/");
    cmd.current_dir(cwd);
    cmd.stdin(Stdio::null());
    cmd.stdout(output(def.stdout_path.as_deref()));
    cmd.stderr(output(def.stderr_path.as_deref()));
    // SAFETY: only async-signal-safe calls (setsid, sigprocmask, sigaction).
    unsafe {
        cmd.pre_exec(|| {
            setsid().map_err(io::Error::from)?;
            nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
                .map_err(io::Error::from)?;
            for sig in Signal::iterator() {
                if !matches!(sig, Signal::SIGKILL | Signal::SIGSTOP) {
                    let _ = nix::sys::signal::signal(sig, SigHandler::SigDfl);
                }
            }
            Ok(())
        });
    }
    svc.runs += 1;
    match cmd.spawn() {
        Ok(child) => {
            let pid = child.id();
            svc.pid = Some(pid);
            svc.state = "running".into();
            Some(Running {
                child,
                pid,
                started: Instant::now(),
                stopping: None,
                sigkilled: false,
            })
        }
        Err(e) => {
            eprintln!(
                "fake-launchctl: {}: cannot spawn {}: {e}",
                svc.label,
                def.executable()
            );
            svc.pid = None;
            svc.state = "not running".into();
            svc.last_exit = Some(LastExit::Code(EX_CONFIG));
            None
        }
    }
}

/// stdout/stderr of a job: appended to `path`, else `/dev/null`.
fn output(path: Option<&str>) -> Stdio {
    path.and_then(|p| OpenOptions::new().create(true).append(true).open(p).ok())
        .map(Stdio::from)
        .unwrap_or_else(Stdio::null)
}
