//! Wrappers: programs that run another command after changing how it runs (`timeout`,
//! `nice`, `nohup`, `setsid`, `stdbuf`, `time`, `ionice`, the builtins `builtin`,
//! `exec` and `command`, `busybox APPLET`, `env`; scheduling, limits, privileges and
//! namespaces; tracing) or through a shell (`script`, `watch`, `sg`).

use super::options::{scan, scan_permuted, OptSpec};
use super::step::Step;
use super::walker::Walker;
use super::Arg;

/// The rest of the words as the command a wrapper runs (nothing left: the wrapper is
/// itself the command).
fn runs(rest: &[Arg]) -> Step {
    if rest.is_empty() {
        Step::Itself
    } else {
        Step::Runs {
            rest: rest.to_vec(),
            open_ended: false,
        }
    }
}

/// [`runs`], but a wrapper with nothing to run starts a shell reading standard input.
fn shell_if_empty(name: &str, rest: &[Arg]) -> Result<Step, String> {
    if rest.is_empty() {
        Err(format!(
            "`{name}` without a command starts a shell reading standard input"
        ))
    } else {
        Ok(runs(rest))
    }
}

/// `timeout [options] DURATION CMD…`.
pub(super) fn timeout(args: &[Arg]) -> Result<Step, String> {
    let name = "timeout";
    let o = scan(
        name,
        args,
        &OptSpec {
            short_value: "ks",
            short_flags: "v",
            long_value: &["kill-after", "signal"],
            long_flags: &["preserve-status", "foreground", "verbose"],
            ..OptSpec::default()
        },
    )?;
    if o.info {
        return Ok(Step::Itself);
    }
    // DURATION, then the command.
    match args.get(o.operands) {
        None => Ok(Step::Itself),
        Some(_) => Ok(runs(&args[o.operands + 1..])),
    }
}

/// `nice [-n N | -N] CMD…`.
pub(super) fn nice(args: &[Arg]) -> Result<Step, String> {
    let name = "nice";
    let o = scan(
        name,
        args,
        &OptSpec {
            short_value: "n",
            long_value: &["adjustment"],
            numeric_short: true,
            ..OptSpec::default()
        },
    )?;
    if o.info {
        return Ok(Step::Itself);
    }
    Ok(runs(&args[o.operands..]))
}

/// `nohup`, `setsid`, `stdbuf`, `time`, `ionice`, `builtin`, `exec`: options, then the
/// command (`ionice -p/-P/-u` acts on running processes: it is itself the command).
pub(super) fn plain(name: &str, args: &[Arg]) -> Result<Step, String> {
    let spec = match name {
        "nohup" | "builtin" => OptSpec::default(),
        "setsid" => OptSpec {
            short_flags: "cfw",
            long_flags: &["ctty", "fork", "wait"],
            ..OptSpec::default()
        },
        "stdbuf" => OptSpec {
            short_value: "ioe",
            long_value: &["input", "output", "error"],
            ..OptSpec::default()
        },
        "time" => OptSpec {
            short_value: "fo",
            short_flags: "apqv",
            long_value: &["format", "output"],
            long_flags: &["append", "verbose", "portability", "quiet"],
            ..OptSpec::default()
        },
        "ionice" => OptSpec {
            short_value: "cnpPu",
            short_flags: "t",
            long_value: &["class", "classdata", "pid", "pgid", "uid"],
            long_flags: &["ignore"],
            ..OptSpec::default()
        },
        _ => OptSpec {
            short_value: "a",
            short_flags: "cl",
            ..OptSpec::default()
        },
    };
    let o = scan(name, args, &spec)?;
    if o.info || (name == "ionice" && o.has_any("pPu", &["pid", "pgid", "uid"])) {
        return Ok(Step::Itself);
    }
    Ok(runs(&args[o.operands..]))
}

/// `command [-p] CMD…` (`-v`/`-V` only describe a command).
pub(super) fn command(args: &[Arg]) -> Result<Step, String> {
    let name = "command";
    let o = scan(
        name,
        args,
        &OptSpec {
            short_flags: "pvV",
            ..OptSpec::default()
        },
    )?;
    if o.has_any("vV", &[]) {
        return Ok(Step::Itself);
    }
    Ok(runs(&args[o.operands..]))
}

/// `busybox APPLET…` runs the applet (`busybox --list`… is itself the command).
pub(super) fn busybox(args: &[Arg]) -> Result<Step, String> {
    match args.first() {
        Some(Arg::Literal(a)) if a.starts_with('-') => Ok(Step::Itself),
        // An applet named at run time is unparsed when resolved.
        _ => Ok(runs(args)),
    }
}

impl Walker {
    /// `env [options] [VAR=value…] [CMD…]`: assignments are checked; bare `env` prints
    /// the environment; `-S` splits a string into a command.
    pub(super) fn env(&mut self, args: &[Arg], depth: usize) -> Result<Step, String> {
        if matches!(args.first(), Some(Arg::Literal(a)) if a == "-") {
            return self.env(&args[1..], depth);
        }
        let o = scan(
            "env",
            args,
            &OptSpec {
                short_value: "uCS",
                short_flags: "i0v",
                long_value: &["unset", "chdir", "split-string"],
                long_flags: &[
                    "ignore-environment",
                    "null",
                    "debug",
                    "list-signal-handling",
                ],
                long_optional: &["block-signal", "default-signal", "ignore-signal"],
                ..OptSpec::default()
            },
        )?;
        if o.has_any("S", &["split-string"]) {
            return Err("`env -S` splits a string into a command".to_string());
        }
        if o.info {
            return Ok(Step::Itself);
        }
        let mut rest = &args[o.operands..];
        loop {
            match rest.first() {
                Some(Arg::Literal(a)) => match a.split_once('=') {
                    Some((var, value)) => {
                        let value = Arg::Literal(value.to_string());
                        self.assigned(var, Some(&value), depth)
                            .map_err(|reason| format!("`env`: {reason}"))?;
                        rest = &rest[1..];
                    }
                    None => break,
                },
                Some(Arg::Dynamic(a)) => {
                    return Err(format!("`env` operand `{a}` is not static"));
                }
                None => break,
            }
        }
        if rest.is_empty() {
            // Bare `env` (with or without assignments) prints the environment: it is
            // itself the command.
            return Ok(Step::Itself);
        }
        Ok(Step::Runs {
            rest: rest.to_vec(),
            open_ended: false,
        })
    }

    /// Wrappers that change the process's scheduling, limits, privileges or namespaces
    /// before running a command (`flock`, `taskset`, `chrt`, `setpriv`, `unshare`,
    /// `nsenter`, `chroot`, `prlimit`, `systemd-run`).
    pub(super) fn namespaces(
        &mut self,
        name: &str,
        argv: &[Arg],
        depth: usize,
    ) -> Result<Step, String> {
        let args = &argv[1..];
        let shell_if_empty = |rest: &[Arg]| shell_if_empty(name, rest);
        match name {
            "flock" => {
                let o = scan(
                    name,
                    args,
                    &OptSpec {
                        short_value: "Ewc",
                        short_flags: "Fnosxeuv",
                        long_value: &["command", "conflict-exit-code", "timeout", "wait"],
                        long_flags: &[
                            "no-fork",
                            "nonblock",
                            "nb",
                            "close",
                            "shared",
                            "exclusive",
                            "unlock",
                            "verbose",
                            "fcntl",
                        ],
                        ..OptSpec::default()
                    },
                )?;
                if o.info {
                    return Ok(Step::Itself);
                }
                let mut command = o
                    .seen
                    .iter()
                    .find(|(k, _)| k == "c" || k == "command")
                    .and_then(|(_, v)| v.clone());
                let rest = &args[o.operands..];
                let after = rest.get(1..).unwrap_or(&[]);
                match after.first() {
                    Some(Arg::Literal(a)) if a == "-c" || a == "--command" => {
                        command =
                            Some(after.get(1).cloned().ok_or_else(|| {
                                "`flock -c` without a command string".to_string()
                            })?);
                    }
                    Some(Arg::Literal(a)) if a.starts_with("--command=") => {
                        command = Some(Arg::Literal(a["--command=".len()..].to_string()));
                    }
                    // The command after the lock file (a run-time program name is
                    // unparsed when resolved).
                    Some(_) if command.is_none() => return Ok(runs(after)),
                    _ => {}
                }
                match command {
                    Some(Arg::Literal(c)) => {
                        self.code(&c, depth);
                        Ok(Step::Consumed)
                    }
                    Some(Arg::Dynamic(d)) => Err(format!("`flock` command `{d}` is not static")),
                    None => Ok(Step::Itself),
                }
            }
            "taskset" => {
                let o = scan(
                    name,
                    args,
                    &OptSpec {
                        short_flags: "apc",
                        long_flags: &["all-tasks", "pid", "cpu-list"],
                        ..OptSpec::default()
                    },
                )?;
                if o.info || o.has_any("p", &["pid"]) {
                    return Ok(Step::Itself);
                }
                Ok(runs(args.get(o.operands + 1..).unwrap_or(&[])))
            }
            "chrt" => {
                let o = scan(
                    name,
                    args,
                    &OptSpec {
                        short_value: "TPD",
                        short_flags: "abdfiormpRv",
                        long_value: &["sched-runtime", "sched-period", "sched-deadline"],
                        long_flags: &[
                            "all-tasks",
                            "batch",
                            "deadline",
                            "fifo",
                            "idle",
                            "other",
                            "rr",
                            "reset-on-fork",
                            "max",
                            "pid",
                            "verbose",
                        ],
                        ..OptSpec::default()
                    },
                )?;
                if o.info || o.has_any("mp", &["max", "pid"]) {
                    return Ok(Step::Itself);
                }
                Ok(runs(args.get(o.operands + 1..).unwrap_or(&[])))
            }
            "setpriv" => {
                let o = scan(
                    name,
                    args,
                    &OptSpec {
                        short_flags: "d",
                        long_value: &[
                            "reuid",
                            "regid",
                            "ruid",
                            "euid",
                            "rgid",
                            "egid",
                            "groups",
                            "inh-caps",
                            "ambient-caps",
                            "bounding-set",
                            "securebits",
                            "pdeathsig",
                            "selinux-label",
                            "apparmor-profile",
                            "landlock-access",
                            "landlock-rule",
                        ],
                        long_flags: &[
                            "clear-groups",
                            "keep-groups",
                            "init-groups",
                            "no-new-privs",
                            "reset-env",
                            "dump",
                        ],
                        ..OptSpec::default()
                    },
                )?;
                if o.info || o.has_any("d", &["dump"]) {
                    return Ok(Step::Itself);
                }
                Ok(runs(&args[o.operands..]))
            }
            "unshare" => {
                let o = scan(
                    name,
                    args,
                    &OptSpec {
                        short_value: "RwSG",
                        short_flags: "muinpUCTfrcl",
                        long_value: &[
                            "propagation",
                            "setgroups",
                            "root",
                            "wd",
                            "setuid",
                            "setgid",
                            "monotonic",
                            "boottime",
                            "map-user",
                            "map-group",
                            "map-users",
                            "map-groups",
                            "load-interp",
                        ],
                        long_optional: &[
                            "mount",
                            "uts",
                            "ipc",
                            "net",
                            "pid",
                            "user",
                            "cgroup",
                            "time",
                            "mount-proc",
                            "kill-child",
                            "mount-binfmt",
                        ],
                        long_flags: &[
                            "fork",
                            "map-root-user",
                            "map-current-user",
                            "map-auto",
                            "keep-caps",
                        ],
                        ..OptSpec::default()
                    },
                )?;
                if o.info {
                    return Ok(Step::Itself);
                }
                if o.has_any("R", &["root"]) {
                    return Err("`unshare --root` runs programs from another root".to_string());
                }
                shell_if_empty(&args[o.operands..])
            }
            "nsenter" => {
                let o = scan(
                    name,
                    args,
                    &OptSpec {
                        short_value: "tSG",
                        short_optional: "muinpUCTrwW",
                        short_flags: "aeFZc",
                        long_value: &["target", "setuid", "setgid"],
                        long_optional: &[
                            "mount", "uts", "ipc", "net", "pid", "user", "cgroup", "time", "root",
                            "wd", "wdns",
                        ],
                        long_flags: &[
                            "all",
                            "preserve-credentials",
                            "no-fork",
                            "follow-context",
                            "env",
                            "join-cgroup",
                        ],
                        ..OptSpec::default()
                    },
                )?;
                if o.info {
                    return Ok(Step::Itself);
                }
                if o.has_any("amrwW", &["all", "mount", "root", "wd", "wdns"]) {
                    return Err(
                        "`nsenter` into another mount namespace or root runs programs the gate \
                         cannot name"
                            .to_string(),
                    );
                }
                shell_if_empty(&args[o.operands..])
            }
            "chroot" => {
                let o = scan(
                    name,
                    args,
                    &OptSpec {
                        long_value: &["userspec", "groups"],
                        long_flags: &["skip-chdir"],
                        ..OptSpec::default()
                    },
                )?;
                if o.info {
                    return Ok(Step::Itself);
                }
                let rest = &args[o.operands..];
                match rest.first() {
                    None => Ok(Step::Itself),
                    Some(Arg::Literal(root)) if root.trim_end_matches('/').is_empty() => {
                        shell_if_empty(&rest[1..])
                    }
                    Some(root) => Err(format!(
                        "`chroot {}` runs programs from another root",
                        root.as_text()
                    )),
                }
            }
            "prlimit" => {
                const RESOURCES: &[&str] = &[
                    "core",
                    "data",
                    "nice",
                    "fsize",
                    "sigpending",
                    "memlock",
                    "rss",
                    "nofile",
                    "msgqueue",
                    "rtprio",
                    "stack",
                    "cpu",
                    "nproc",
                    "as",
                    "locks",
                    "rttime",
                ];
                let o = scan(
                    name,
                    args,
                    &OptSpec {
                        short_value: "po",
                        short_optional: "cdefilmnqrstuvxy",
                        long_value: &["pid", "output"],
                        long_optional: RESOURCES,
                        long_flags: &["noheadings", "raw", "verbose"],
                        ..OptSpec::default()
                    },
                )?;
                if o.info || o.has_any("p", &["pid"]) {
                    return Ok(Step::Itself);
                }
                Ok(runs(&args[o.operands..]))
            }
            "systemd-run" => {
                let o = scan(
                    name,
                    args,
                    &OptSpec {
                        short_value: "upEHM",
                        short_flags: "tPqGdrS",
                        long_value: &[
                            "unit",
                            "property",
                            "description",
                            "slice",
                            "service-type",
                            "uid",
                            "gid",
                            "nice",
                            "working-directory",
                            "setenv",
                            "host",
                            "machine",
                            "on-active",
                            "on-boot",
                            "on-startup",
                            "on-unit-active",
                            "on-unit-inactive",
                            "on-calendar",
                            "timer-property",
                            "path-property",
                            "socket-property",
                        ],
                        long_flags: &[
                            "user",
                            "system",
                            "scope",
                            "wait",
                            "no-block",
                            "no-ask-password",
                            "pty",
                            "pipe",
                            "quiet",
                            "collect",
                            "same-dir",
                            "remain-after-exit",
                            "shell",
                            "slice-inherit",
                            "send-sighup",
                            "on-clock-change",
                            "on-timezone-change",
                        ],
                        ..OptSpec::default()
                    },
                )?;
                if o.info {
                    return Ok(Step::Itself);
                }
                if o.has_any("S", &["shell"]) {
                    return Err("`systemd-run --shell` starts a shell".to_string());
                }
                self.env_options(name, &o, &["E", "setenv"], depth)?;
                Ok(runs(&args[o.operands..]))
            }
            _ => Ok(Step::Itself),
        }
    }

    /// Tracers, debuggers' runners and environment shims that run a command (`strace`,
    /// `ltrace`, `valgrind`, `eatmydata`, `fakeroot`, `pkexec`).
    pub(super) fn tracers(
        &mut self,
        name: &str,
        argv: &[Arg],
        depth: usize,
    ) -> Result<Step, String> {
        let args = &argv[1..];
        let shell_if_empty = |rest: &[Arg]| shell_if_empty(name, rest);
        match name {
            "strace" => {
                let o = scan(
                    name,
                    args,
                    &OptSpec {
                        short_value: "abeEIoOpPsSuUX",
                        short_flags: "cCdDfFhiknNqrtTvVwxyYzZ",
                        long_value: &[
                            "output",
                            "attach",
                            "env",
                            "trace",
                            "trace-path",
                            "signal",
                            "status",
                            "user",
                            "string-limit",
                            "summary-sort-by",
                            "summary-columns",
                            "columns",
                            "abbrev",
                            "verbose",
                            "raw",
                            "read",
                            "write",
                            "inject",
                            "fault",
                            "const-print-style",
                            "trace-fds",
                        ],
                        long_optional: &[
                            "decode-fds",
                            "decode-pids",
                            "absolute-timestamps",
                            "timestamps",
                            "relative-timestamps",
                            "syscall-times",
                            "quiet",
                            "silent",
                            "stack-trace",
                            "secontext",
                        ],
                        long_flags: &[
                            "follow-forks",
                            "output-separately",
                            "summary-only",
                            "summary",
                            "summary-wall-clock",
                            "no-abbrev",
                            "debug",
                            "daemonize",
                            "instruction-pointer",
                            "seccomp-bpf",
                            "successful-only",
                            "failed-only",
                            "kill-on-exit",
                        ],
                        ..OptSpec::default()
                    },
                )?;
                if o.info {
                    return Ok(Step::Itself);
                }
                // `-o '|cmd'` pipes the trace into a command.
                for (k, v) in &o.seen {
                    if k == "o" || k == "output" {
                        match v {
                            Some(Arg::Literal(f)) => {
                                if let Some(cmd) = f.strip_prefix('|').or(f.strip_prefix('!')) {
                                    self.code(cmd, depth);
                                }
                            }
                            Some(Arg::Dynamic(d)) => {
                                return Err(format!("`strace -o {d}` is not static"))
                            }
                            None => {}
                        }
                    }
                }
                self.env_options(name, &o, &["E", "env"], depth)?;
                Ok(runs(&args[o.operands..]))
            }
            "ltrace" => {
                let o = scan(
                    name,
                    args,
                    &OptSpec {
                        short_value: "aADeFlnopsuwx",
                        short_flags: "bcCfhiLrStTV",
                        long_value: &["align", "config", "indent", "library", "output"],
                        long_flags: &["demangle"],
                        ..OptSpec::default()
                    },
                )?;
                if o.info {
                    return Ok(Step::Itself);
                }
                Ok(runs(&args[o.operands..]))
            }
            "valgrind" => {
                let o = scan(
                    name,
                    args,
                    &OptSpec {
                        short_flags: "qv",
                        long_value: &[
                            "tool",
                            "log-file",
                            "log-fd",
                            "leak-check",
                            "show-leak-kinds",
                            "errors-for-leak-kinds",
                            "track-origins",
                            "error-exitcode",
                            "trace-children",
                            "trace-children-skip",
                            "suppressions",
                            "gen-suppressions",
                            "num-callers",
                            "xml",
                            "xml-file",
                            "track-fds",
                            "max-stackframe",
                            "main-stacksize",
                            "show-reachable",
                            "undef-value-errors",
                            "keep-debuginfo",
                            "child-silent-after-fork",
                            "time-stamp",
                            "read-var-info",
                            "smc-check",
                            "fair-sched",
                        ],
                        long_flags: &["quiet", "verbose"],
                        ..OptSpec::default()
                    },
                )?;
                if o.info {
                    return Ok(Step::Itself);
                }
                Ok(runs(&args[o.operands..]))
            }
            "eatmydata" => {
                let rest = match args.first().and_then(Arg::literal) {
                    Some("--") => &args[1..],
                    _ => args,
                };
                Ok(runs(rest))
            }
            "fakeroot" | "pkexec" => {
                let o = scan(
                    name,
                    args,
                    &OptSpec {
                        short_value: if name == "fakeroot" { "lsib" } else { "" },
                        short_flags: if name == "fakeroot" { "u" } else { "" },
                        long_value: &["lib", "faked", "user"],
                        long_flags: &["unknown-is-real", "keep-cwd", "disable-internal-agent"],
                        ..OptSpec::default()
                    },
                )?;
                if o.info {
                    return Ok(Step::Itself);
                }
                shell_if_empty(&args[o.operands..])
            }
            _ => Ok(Step::Itself),
        }
    }

    /// Programs that run a command string through a shell (`script -c`, `watch`, `sg`).
    pub(super) fn terminals(
        &mut self,
        name: &str,
        argv: &[Arg],
        depth: usize,
    ) -> Result<Step, String> {
        let args = &argv[1..];
        match name {
            "script" => {
                let (o, operands) = scan_permuted(
                    name,
                    args,
                    &OptSpec {
                        short_value: "cEBIOTmo",
                        short_optional: "t",
                        short_flags: "aefq",
                        long_value: &[
                            "command",
                            "echo",
                            "log-io",
                            "log-in",
                            "log-out",
                            "log-timing",
                            "logging-format",
                            "output-limit",
                        ],
                        long_optional: &["timing"],
                        long_flags: &["append", "return", "flush", "force", "quiet"],
                        ..OptSpec::default()
                    },
                )?;
                if o.info {
                    return Ok(Step::Itself);
                }
                let command = o
                    .seen
                    .iter()
                    .rev()
                    .find(|(k, _)| k == "c" || k == "command")
                    .and_then(|(_, v)| v.clone());
                // The typescript file is written: `script` stays visible.
                let mut visible = vec![argv[0].clone()];
                visible.extend(operands);
                self.emit_visible(&visible);
                match command {
                    Some(Arg::Literal(c)) => {
                        self.code(&c, depth);
                        Ok(Step::Consumed)
                    }
                    Some(Arg::Dynamic(d)) => Err(format!("`script -c {d}` is not static")),
                    None => Err(
                        "`script` without `-c` runs an interactive shell reading standard input"
                            .to_string(),
                    ),
                }
            }
            "watch" => {
                let o = scan(
                    name,
                    args,
                    &OptSpec {
                        short_value: "nq",
                        short_optional: "d",
                        short_flags: "bcCegprtwx",
                        long_value: &["interval", "equexit"],
                        long_optional: &["differences"],
                        long_flags: &[
                            "beep",
                            "color",
                            "no-color",
                            "errexit",
                            "chgexit",
                            "precise",
                            "no-rerun",
                            "no-title",
                            "no-wrap",
                            "no-linewrap",
                            "exec",
                        ],
                        ..OptSpec::default()
                    },
                )?;
                let rest = &args[o.operands..];
                if o.info || rest.is_empty() {
                    return Ok(Step::Itself);
                }
                if o.has_any("x", &["exec"]) {
                    return Ok(runs(rest));
                }
                // Without `-x`, watch runs its words joined with spaces through `sh -c`.
                self.code_joined(name, rest, depth)?;
                Ok(Step::Consumed)
            }
            "sg" => {
                // `sg [-] GROUP [-c] COMMAND`: the command goes through `sh -c`.
                let mut rest = args;
                if rest.first().and_then(Arg::literal) == Some("-") {
                    rest = &rest[1..];
                }
                let mut rest = rest.get(1..).unwrap_or(&[]);
                if rest.first().and_then(Arg::literal) == Some("-c") {
                    rest = &rest[1..];
                }
                if rest.is_empty() {
                    return Err("`sg` without a command starts a shell".to_string());
                }
                self.code_joined(name, rest, depth)?;
                Ok(Step::Consumed)
            }
            _ => Ok(Step::Itself),
        }
    }
}
