//! What keeps the agent running, and how to restart it through that: systemd (a
//! system or user unit), launchd (a job in a domain), or nothing (run by hand).
//!
//! `flotilla agent run --supervisor auto|systemd[:user]:UNIT|launchd:DOMAIN/LABEL|none`
//! names it ([`Supervisor::parse`]); `auto` ([`Supervisor::detect`]) is systemd when
//! `INVOCATION_ID` is set (systemd.exec(5): set for every unit's processes), the unit
//! read from `/proc/self/cgroup` (the last `*.service` of the path; a user unit when the
//! path goes through `user@UID.service`); launchd when `XPC_SERVICE_NAME` is set to a
//! label (launchd sets it to the job's label; a Terminal on macOS sets it to `0`, which
//! does not count), in the domain `gui/<uid>` (`system` for root); else none.
//!
//! Restart verbs ([`Supervisor::restart`]):
//!
//! `launchctl` and `systemctl` are taken from `PATH`, or from `FLOTILLA_LAUNCHCTL` /
//! `FLOTILLA_SYSTEMCTL` (as the adapters do).
//!
//! | supervisor | restart | main process ([`Supervisor::observe`]) |
//! | --- | --- | --- |
//! | systemd | `systemctl [--user] restart --no-block UNIT` | `systemctl [--user] show --property=MainPID,NRestarts UNIT` |
//! | launchd | `launchctl kickstart -k DOMAIN/LABEL` | `launchctl print DOMAIN/LABEL` (`pid`, `runs`) |
//! | none | the watchdog stops the old process and starts the new one itself ([`flotilla_exec::detached::spawn_detached`]) | what the watchdog started |
//!
//! `--no-block` because the agent's own watchdog asks, and must go on watching while
//! systemd stops and starts the unit (the answer of a blocking restart says only that
//! systemd ran the start command, not that the new process is what we think; the
//! watchdog proves that by measurement). `kickstart -k` is the documented way to
//! restart a loaded launchd job; it restarts the definition launchd cached when the job
//! was bootstrapped, which is exactly the trap the watchdog's proof catches.
//!
//! The watchdog itself must outlive the restart it asks for
//! ([`Supervisor::watchdog_unit_argv`]): under systemd it runs in a transient unit of its
//! own (`systemd-run --collect`), since restarting the agent's unit kills every process
//! in its cgroup that `KillMode` covers; elsewhere it runs in a session of its own
//! (`setsid`), out of the job's process group that launchd signals.
//!
//! The commands are run by `flotilla-exec` ([`flotilla_exec::detached`]), which
//! starts and signals every process.

use flotilla_exec::detached::{run_verb, VerbError};
use std::ffi::OsString;
use std::path::Path;

/// What supervises the agent process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Supervisor {
    /// A systemd unit.
    Systemd {
        /// A unit of the user's service manager (`systemctl --user`).
        user: bool,
        /// The unit's name (`flotilla-agent.service`).
        unit: String,
    },
    /// A launchd job.
    Launchd {
        /// Its domain: `gui/501`, `user/501`, `system`.
        domain: String,
        /// Its label (`dev.flotilla.agent`).
        label: String,
    },
    /// Nothing: the agent was run by hand; the watchdog restarts it itself.
    None,
}

/// Why a supervisor could not be named or asked.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// `--supervisor` holds something else.
    #[error("`{0}` is not a supervisor: use auto, systemd:UNIT, systemd:user:UNIT, launchd:DOMAIN/LABEL or none")]
    Parse(String),
    /// A supervisor command could not be started, or failed.
    #[error(transparent)]
    Verb(#[from] VerbError),
    /// No supervisor: there is no command to run (the watchdog does it itself).
    #[error("the agent has no supervisor: nothing to ask")]
    NoSupervisor,
}

/// What the supervisor says of its main process now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MainProcess {
    /// Its pid, when it has one (systemd `MainPID` ≠ 0; launchd `pid`).
    pub pid: Option<u32>,
    /// How many times it started the service so far: launchd `runs`; systemd
    /// `NRestarts` (automatic restarts only). `None` when not said.
    pub starts: Option<u64>,
}

impl std::fmt::Display for Supervisor {
    /// The `--supervisor` form: parses back with [`Supervisor::parse`].
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Supervisor::Systemd { user: false, unit } => write!(f, "systemd:{unit}"),
            Supervisor::Systemd { user: true, unit } => write!(f, "systemd:user:{unit}"),
            Supervisor::Launchd { domain, label } => write!(f, "launchd:{domain}/{label}"),
            Supervisor::None => f.write_str("none"),
        }
    }
}

impl Supervisor {
    /// Parses `--supervisor`: `Ok(None)` for `auto`.
    ///
    /// # Errors
    /// [`SupervisorError::Parse`].
    pub fn parse(text: &str) -> Result<Option<Supervisor>, SupervisorError> {
        let bad = || SupervisorError::Parse(text.to_string());
        let t = text.trim();
        if t == "auto" {
            return Ok(None);
        }
        if t == "none" {
            return Ok(Some(Supervisor::None));
        }
        if let Some(rest) = t.strip_prefix("systemd:") {
            let (user, unit) = match rest.strip_prefix("user:") {
                Some(u) => (true, u),
                None => (false, rest),
            };
            if unit.is_empty() || unit.contains('/') || unit.chars().any(char::is_whitespace) {
                return Err(bad());
            }
            return Ok(Some(Supervisor::Systemd {
                user,
                unit: unit.to_string(),
            }));
        }
        if let Some(rest) = t.strip_prefix("launchd:") {
            let (domain, label) = rest.rsplit_once('/').ok_or_else(bad)?;
            let domain_ok = domain == "system"
                || ["gui/", "user/"].iter().any(|p| {
                    domain
                        .strip_prefix(p)
                        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
                });
            if !domain_ok || label.is_empty() || label.chars().any(char::is_whitespace) {
                return Err(bad());
            }
            return Ok(Some(Supervisor::Launchd {
                domain: domain.to_string(),
                label: label.to_string(),
            }));
        }
        Err(bad())
    }

    /// `auto`: what this process's environment says supervises it (see the module
    /// docs).
    pub fn detect() -> Supervisor {
        let cgroup = flotilla_exec::sys::self_cgroup().unwrap_or_default();
        Supervisor::detect_from(
            std::env::var("INVOCATION_ID").ok().as_deref(),
            &cgroup,
            std::env::var("XPC_SERVICE_NAME").ok().as_deref(),
            nix::unistd::getuid().as_raw(),
        )
    }

    /// [`Supervisor::detect`] from its inputs: `INVOCATION_ID`, the text of
    /// `/proc/self/cgroup`, `XPC_SERVICE_NAME` and the uid.
    pub fn detect_from(
        invocation_id: Option<&str>,
        cgroup: &str,
        xpc_service_name: Option<&str>,
        uid: u32,
    ) -> Supervisor {
        if invocation_id.is_some_and(|i| !i.trim().is_empty()) {
            if let Some((user, unit)) = unit_from_cgroup(cgroup) {
                return Supervisor::Systemd { user, unit };
            }
        }
        if let Some(label) = xpc_service_name.map(str::trim).filter(|l| {
            !l.is_empty() && *l != "0" && !l.starts_with("application.") // apps, not jobs
        }) {
            return Supervisor::Launchd {
                domain: flotilla_exec::launchctl::domain_target(uid),
                label: label.to_string(),
            };
        }
        Supervisor::None
    }

    /// The command that restarts the agent through the supervisor (none for
    /// [`Supervisor::None`]).
    pub fn restart_argv(&self) -> Option<Vec<String>> {
        match self {
            Supervisor::Systemd { user, unit } => Some(systemctl(
                *user,
                &["restart", "--no-block", "--", unit.as_str()],
            )),
            Supervisor::Launchd { domain, label } => Some(vec![
                program(LAUNCHCTL_ENV, "launchctl"),
                "kickstart".into(),
                "-k".into(),
                flotilla_exec::launchctl::service_target(domain, label),
            ]),
            Supervisor::None => None,
        }
    }

    /// Asks the supervisor to restart the agent (see the module docs); returns the
    /// command line run, as evidence. Returns once the supervisor took the request,
    /// not once the new process runs: prove that by measurement.
    ///
    /// # Errors
    /// [`SupervisorError::NoSupervisor`] for [`Supervisor::None`]; the command could
    /// not be run, or failed.
    pub fn restart(&self) -> Result<String, SupervisorError> {
        let argv = self.restart_argv().ok_or(SupervisorError::NoSupervisor)?;
        run_verb(&argv)?;
        Ok(argv.join(" "))
    }

    /// What the supervisor says of its main process now.
    ///
    /// # Errors
    /// [`SupervisorError::NoSupervisor`] for [`Supervisor::None`]; the command could
    /// not be run, or failed (a launchd job that is not loaded, a unit systemd does not
    /// know).
    pub fn observe(&self) -> Result<MainProcess, SupervisorError> {
        match self {
            Supervisor::Systemd { user, unit } => {
                let out = run_verb(&systemctl(
                    *user,
                    &["show", "--property=MainPID,NRestarts", "--", unit.as_str()],
                ))?;
                Ok(parse_systemctl_show(&out))
            }
            Supervisor::Launchd { domain, label } => {
                let out = run_verb(&[
                    program(LAUNCHCTL_ENV, "launchctl"),
                    "print".to_string(),
                    flotilla_exec::launchctl::service_target(domain, label),
                ])?;
                let info = flotilla_exec::launchctl::parse_print(&out);
                Ok(MainProcess {
                    pid: info.pid.filter(|_| info.state == "running"),
                    starts: info.runs.map(u64::from),
                })
            }
            Supervisor::None => Err(SupervisorError::NoSupervisor),
        }
    }

    /// The command that starts the watchdog `program args…` so that it outlives a
    /// restart of the agent, under systemd: `systemd-run [--user] --unit
    /// flotilla-agent-update-<tag> --collect --quiet --property=KillMode=process
    /// program args…` (its own transient unit, removed when it ends; run it with
    /// [`run_verb`]). `None` elsewhere: start `program args…` detached, in a new
    /// session ([`flotilla_exec::detached::spawn_detached`]).
    pub fn watchdog_unit_argv(
        &self,
        program: &Path,
        args: &[OsString],
        tag: &str,
    ) -> Option<Vec<OsString>> {
        let Supervisor::Systemd { user, .. } = self else {
            return None;
        };
        let mut argv: Vec<OsString> = vec!["systemd-run".into()];
        if *user {
            argv.push("--user".into());
        }
        argv.push("--unit".into());
        argv.push(format!("flotilla-agent-update-{tag}").into());
        argv.extend(
            ["--collect", "--quiet", "--property=KillMode=process"]
                .into_iter()
                .map(OsString::from),
        );
        // A transient unit starts with systemd's environment: the log format is
        // passed on by name.
        if let Ok(f) = std::env::var("FLOTILLA_LOG_FORMAT") {
            argv.push(format!("--setenv=FLOTILLA_LOG_FORMAT={f}").into());
        }
        argv.push(program.as_os_str().to_owned());
        argv.extend(args.iter().cloned());
        Some(argv)
    }
}

/// The variable naming the `launchctl` to run (as the launchd adapter's), else
/// `launchctl` from `PATH`.
pub const LAUNCHCTL_ENV: &str = "FLOTILLA_LAUNCHCTL";

/// The variable naming the `systemctl` to run, else `systemctl` from `PATH`.
pub const SYSTEMCTL_ENV: &str = "FLOTILLA_SYSTEMCTL";

fn program(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| default.to_string())
}

fn systemctl(user: bool, rest: &[&str]) -> Vec<String> {
    let mut v = vec![program(SYSTEMCTL_ENV, "systemctl")];
    if user {
        v.push("--user".into());
    }
    v.extend(rest.iter().map(|s| s.to_string()));
    v
}

/// `MainPID=…` and `NRestarts=…` of `systemctl show`'s output.
fn parse_systemctl_show(text: &str) -> MainProcess {
    let mut m = MainProcess::default();
    for line in text.lines() {
        match line.trim().split_once('=') {
            Some(("MainPID", v)) => m.pid = v.trim().parse().ok().filter(|&p: &u32| p != 0),
            Some(("NRestarts", v)) => m.starts = v.trim().parse().ok(),
            _ => {}
        }
    }
    m
}

pub use flotilla_exec::placement::unit_from_cgroup;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_every_form() {
        for text in [
            "systemd:flotilla-agent.service",
            "systemd:user:flotilla-agent.service",
            "launchd:gui/501/dev.flotilla.agent",
            "launchd:system/dev.flotilla.agent",
            "none",
        ] {
            let s = Supervisor::parse(text).unwrap().unwrap();
            assert_eq!(s.to_string(), text);
        }
        assert_eq!(Supervisor::parse("auto").unwrap(), None);
        for bad in [
            "",
            "systemd:",
            "systemd:user:",
            "launchd:dev.flotilla.agent",
            "launchd:gui/x/l",
            "launchd:gui/501/",
            "upstart:x",
        ] {
            assert!(Supervisor::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn detects_systemd_units_from_the_cgroup() {
        let system = "0::/system.slice/flotilla-agent.service\n";
        assert_eq!(
            Supervisor::detect_from(Some("abc"), system, None, 0),
            Supervisor::Systemd {
                user: false,
                unit: "flotilla-agent.service".into()
            }
        );
        let user =
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/flotilla-agent.service\n";
        assert_eq!(
            Supervisor::detect_from(Some("abc"), user, None, 1000),
            Supervisor::Systemd {
                user: true,
                unit: "flotilla-agent.service".into()
            }
        );
        let v1 = "12:pids:/x\n1:name=systemd:/system.slice/a.service\n";
        assert_eq!(unit_from_cgroup(v1), Some((false, "a.service".into())));
        // Without INVOCATION_ID the cgroup alone does not say it is a unit's process
        // (a login shell sits in a session scope, a terminal's in a service).
        assert_eq!(
            Supervisor::detect_from(None, system, None, 0),
            Supervisor::None
        );
        // The user manager itself is no unit of ours.
        assert_eq!(
            unit_from_cgroup("0::/user.slice/user-1000.slice/user@1000.service/init.scope\n"),
            None
        );
    }

    #[test]
    fn detects_launchd_jobs_not_terminals() {
        assert_eq!(
            Supervisor::detect_from(None, "", Some("dev.flotilla.agent"), 501),
            Supervisor::Launchd {
                domain: "gui/501".into(),
                label: "dev.flotilla.agent".into()
            }
        );
        assert_eq!(
            Supervisor::detect_from(None, "", Some("dev.flotilla.agent"), 0),
            Supervisor::Launchd {
                domain: "system".into(),
                label: "dev.flotilla.agent".into()
            }
        );
        assert_eq!(
            Supervisor::detect_from(None, "", Some("0"), 501),
            Supervisor::None
        );
        assert_eq!(
            Supervisor::detect_from(None, "", None, 501),
            Supervisor::None
        );
    }

    #[test]
    fn restart_verbs() {
        let s = Supervisor::parse("systemd:user:a.service")
            .unwrap()
            .unwrap();
        assert_eq!(
            s.restart_argv().unwrap().join(" "),
            "systemctl --user restart --no-block -- a.service"
        );
        let l = Supervisor::parse("launchd:gui/501/dev.x").unwrap().unwrap();
        assert_eq!(
            l.restart_argv().unwrap().join(" "),
            "launchctl kickstart -k gui/501/dev.x"
        );
        assert_eq!(Supervisor::None.restart_argv(), None);
        assert!(matches!(
            Supervisor::None.restart(),
            Err(SupervisorError::NoSupervisor)
        ));
    }

    #[test]
    fn systemctl_show_main_pid_and_restarts() {
        assert_eq!(
            parse_systemctl_show("MainPID=4242\nNRestarts=3\n"),
            MainProcess {
                pid: Some(4242),
                starts: Some(3)
            }
        );
        assert_eq!(
            parse_systemctl_show("NRestarts=0\nMainPID=0\n"),
            MainProcess {
                pid: None,
                starts: Some(0)
            }
        );
    }

    #[test]
    fn systemd_watchdog_runs_in_a_transient_unit() {
        let s = Supervisor::parse("systemd:user:a.service")
            .unwrap()
            .unwrap();
        let argv = s
            .watchdog_unit_argv(
                Path::new("/opt/f/versions/1-abc/flotilla"),
                &["agent".into(), "update-watch".into()],
                "7",
            )
            .unwrap();
        let args: Vec<String> = argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args.join(" "),
            "systemd-run --user --unit flotilla-agent-update-7 --collect --quiet --property=KillMode=process /opt/f/versions/1-abc/flotilla agent update-watch"
        );
        // Elsewhere the watchdog starts detached, not through a command of its own.
        assert_eq!(
            Supervisor::None.watchdog_unit_argv(Path::new("/x"), &[], "7"),
            None
        );
    }
}
