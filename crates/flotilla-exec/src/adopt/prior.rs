//! The prior owner, on the component's host: who holds the component's ports now
//! ([`find`]), stopping it its own way ([`stop`]), giving it back exactly as it was
//! ([`restore`]), and proving either ([`holders`], [`still_runs`]). Blocking: it
//! reads `/proc`, runs `systemctl` and signals processes.
//!
//! - A process started by hand: stopped by the component's stop signal, then
//!   `SIGKILL` after its grace period, only while its pid still has the start time
//!   measured at the baseline (identity before signal); its whole process group
//!   when it leads one. Restored by running its command line again, with its
//!   working directory and environment, in a session of its own, its output
//!   appended to `adopt/<component>.prior.log`.
//! - A systemd unit: `systemctl disable --now` when it was enabled (so it does not
//!   come back at boot), else `systemctl stop`; restored by `systemctl enable --now`
//!   (or `start`). Its state is read with `systemctl show`.
//! - A launchd job ([`super::launchd`]) and a container ([`super::container`]) are
//!   driven by their own modules ([`super::host`] picks).

use super::record::{Prior, PriorProcess, PriorUnit};
use crate::discover::{sockets, units, UnitFacts};
use crate::error::ExecError;
use crate::process::{Listener, StopOutcome};
use flotilla_model::topology::Component;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why something of the prior owner could not be done.
#[derive(Debug, thiserror::Error)]
pub enum PriorError {
    /// Reading `/proc`, signalling or spawning failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// `systemctl` could not be run or failed.
    #[error(transparent)]
    Verb(#[from] crate::detached::VerbError),
    /// The container engine could not be asked, or refused.
    #[error(transparent)]
    Engine(#[from] crate::adapter::container::engine::EngineError),
    /// The prior owner is of a kind this host cannot drive.
    #[error("{0}")]
    Unsupported(String),
    /// It did not stop, or did not come back, as it should have.
    #[error("{0}")]
    NotAsExpected(String),
}

/// Who holds a component's ports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "holder", rename_all = "kebab-case")]
pub enum Holder {
    /// Nobody listens on them, and nothing runs the declared program elsewhere.
    Nothing,
    /// Flotilla started what holds them.
    Flotilla {
        /// Which flotilla, component and operation (its instance marker).
        owner: String,
        /// Whether it is this project's instance of this component.
        ours: bool,
    },
    /// Something else: the prior owner.
    Prior {
        /// The restore recipe.
        prior: Box<Prior>,
        /// Every address it listens on.
        listening: Vec<SocketAddr>,
    },
    /// Sockets whose owner this user cannot see.
    Unseen {
        /// The addresses.
        addresses: Vec<SocketAddr>,
    },
}

/// The TCP ports `c` declares on its own host: its local endpoints' ports, sorted,
/// each once.
pub fn declared_ports(c: &Component) -> Vec<u16> {
    let mut ports: Vec<u16> = c
        .endpoints
        .values()
        .filter(|e| e.is_local_bind())
        .map(|e| e.port)
        .collect();
    ports.extend(
        c.container
            .iter()
            .flat_map(|k| &k.ports)
            .map(|p| p.published.0),
    );
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// Who listens on `ports` now.
///
/// # Errors
/// As [`crate::process::listeners_on`].
pub fn holders(ports: &[u16]) -> Result<Vec<Listener>, ExecError> {
    let mut all: Vec<Listener> = crate::process::listeners_on(ports)?
        .into_values()
        .flatten()
        .collect();
    all.sort_by_key(|l| (l.address, l.pid));
    Ok(all)
}

/// Of the pids holding the ports, the one that started first (a server's master
/// rather than its forked workers).
fn first_started(listeners: &[Listener]) -> Option<u32> {
    listeners
        .iter()
        .filter_map(|l| l.pid)
        .min_by_key(|&pid| (crate::process_start_ticks(pid).unwrap_or(u64::MAX), pid))
}

/// The resolved program `c` declares (its `command[0]`, found as a start finds it,
/// from `cwd`), canonical; `None` when it has no command or it cannot be found.
pub fn declared_program(c: &Component, cwd: &Path) -> Option<PathBuf> {
    let program = c.command.first()?;
    let path = crate::process::resolve_program(&c.name, program, cwd, &[]).ok()?;
    Some(std::fs::canonicalize(&path).unwrap_or(path))
}

/// `exe` (as `/proc` shows it), without ` (deleted)`, canonical when it can be.
fn canonical_exe(exe: &str) -> PathBuf {
    let p = crate::identity::strip_deleted(Path::new(exe)).to_path_buf();
    std::fs::canonicalize(&p).unwrap_or(p)
}

/// Who holds `c`'s declared ports on this host, and when nobody does, a process
/// that runs `c`'s declared program and listens elsewhere (so that a service on
/// another port is named, not missed). `state_root` is this project's state
/// directory (a process it started is "ours"); `cwd` the component's working
/// directory.
///
/// # Errors
/// [`PriorError`]: `/proc` unreadable.
pub fn find(c: &Component, state_root: &Path, cwd: &Path) -> Result<Holder, PriorError> {
    let ports = declared_ports(c);
    let held = holders(&ports)?;
    let pid = match first_started(&held) {
        Some(pid) => pid,
        None if !held.is_empty() => {
            return Ok(Holder::Unseen {
                addresses: held.iter().map(|l| l.address).collect(),
            })
        }
        None => match elsewhere(c, cwd)? {
            Some(pid) => pid,
            None => return Ok(Holder::Nothing),
        },
    };
    if let Some(owner) = crate::process::flotilla_owner(pid) {
        let marker = crate::sys::environ_var(pid, crate::process::INSTANCE_MARKER);
        let ours = marker.is_some_and(|m| {
            m.split_once('@').is_some_and(|(rest, dir)| {
                Path::new(dir) == state_root
                    && rest.split_once('/').is_some_and(|(_, comp)| comp == c.name)
            })
        });
        return Ok(Holder::Flotilla { owner, ours });
    }
    let listening = listening_of(pid)?;
    let Some(process) = measure_process(pid)? else {
        return Ok(Holder::Nothing);
    };
    // A process in a systemd service unit's control group belongs to that unit.
    if let Some(unit) = unit_of(pid) {
        return Ok(Holder::Prior {
            prior: Box::new(Prior::Unit(PriorUnit {
                unit: unit.unit,
                unit_file_state: unit.unit_file_state,
                fragment_path: unit.fragment_path,
                exec_start: unit.exec_start,
                user: unit.user,
                main: Some(process),
            })),
            listening,
        });
    }
    // A process launchd runs for a job it knows belongs to that job.
    if let Some(job) = super::launchd::job_of(&process) {
        return Ok(Holder::Prior {
            prior: Box::new(Prior::Job(job)),
            listening,
        });
    }
    Ok(Holder::Prior {
        prior: Box::new(Prior::Process(process)),
        listening,
    })
}

/// A listening process (not Flotilla's) whose executable is `c`'s declared
/// program.
fn elsewhere(c: &Component, cwd: &Path) -> Result<Option<u32>, PriorError> {
    let Some(program) = declared_program(c, cwd) else {
        return Ok(None);
    };
    let found = sockets::listening(&[]).map_err(|e| match e {
        crate::discover::DiscoverError::Sockets(e) => PriorError::Exec(e),
        other => PriorError::Unsupported(crate::error::chain(&other)),
    })?;
    Ok(found
        .processes
        .iter()
        .filter(|l| {
            l.process
                .exe
                .as_deref()
                .is_some_and(|e| canonical_exe(e) == program)
                && crate::process::flotilla_owner(l.process.pid).is_none()
        })
        // Several: the one whose arguments share most words with the declared
        // ones, then the first started.
        .map(|l| {
            let shared = l
                .process
                .argv
                .iter()
                .skip(1)
                .filter(|a| c.command.iter().skip(1).any(|d| d == *a))
                .count();
            (
                std::cmp::Reverse(shared),
                l.process.start_time_ticks,
                l.process.pid,
            )
        })
        .min()
        .map(|(_, _, pid)| pid))
}

/// Every address `pid` (or a process of its group) listens on, sorted.
fn listening_of(pid: u32) -> Result<Vec<SocketAddr>, ExecError> {
    let mut out: Vec<SocketAddr> = crate::process::all_listeners()?
        .into_iter()
        .filter(|l| l.pid == Some(pid))
        .map(|l| l.address)
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// The facts that identify `pid` and re-run it; `None` when it is gone.
fn measure_process(pid: u32) -> Result<Option<PriorProcess>, ExecError> {
    let Some(identity) = crate::identity::measure(pid)? else {
        return Ok(None);
    };
    let Some(facts) = sockets::process_facts(pid) else {
        return Ok(None);
    };
    Ok(Some(PriorProcess {
        pid,
        start_time_ticks: identity.start_time_ticks,
        pgid: identity.pgid,
        exe: identity.exe.display().to_string(),
        exe_sha256: identity.exe_sha256,
        argv: facts.argv,
        cwd: facts.cwd,
        env: crate::sys::read_environ(pid).unwrap_or_default(),
        uid: facts.uid.unwrap_or(u32::MAX),
        user: facts.user,
    }))
}

/// The running systemd service unit whose control group holds `pid`, when systemd
/// runs here.
fn unit_of(pid: u32) -> Option<UnitFacts> {
    let cgroup = crate::sys::read_cgroup(pid)?;
    if !cgroup.split('/').any(|seg| seg.ends_with(".service")) {
        return None;
    }
    if crate::adapter::systemd::unavailable().is_some() {
        return None;
    }
    let systemctl = crate::adapter::systemd::Systemd::from_env().systemctl;
    let running = units::running(&systemctl).ok()?;
    running.into_iter().find(|u| {
        u.control_group
            .as_deref()
            .is_some_and(|g| cgroup == g || cgroup.starts_with(&format!("{g}/")))
            && !crate::discover::noise_unit(&u.unit)
    })
}

/// Whether the prior owner (as recorded) still runs: a process with the recorded
/// pid and start time, or an active unit.
///
/// # Errors
/// `/proc` or `systemctl` failures.
pub fn still_runs(prior: &Prior) -> Result<bool, PriorError> {
    match prior {
        Prior::Process(p) => Ok(crate::process_start_ticks(p.pid) == Some(p.start_time_ticks)),
        Prior::Unit(u) => Ok(matches!(
            unit_show(&u.unit, "ActiveState")?.as_str(),
            "active" | "activating" | "reloading" | "deactivating"
        )),
        other => Err(PriorError::Unsupported(format!(
            "adopting from a {} is not supported on this host yet",
            other.kind()
        ))),
    }
}

/// Stops the prior owner its own way (module docs), with `c`'s stop signal and
/// grace period for a process; one line saying what it did.
///
/// # Errors
/// [`PriorError`]: it could not be signalled or asked, or the pid names another
/// process now (nothing is signalled then).
pub fn stop(prior: &Prior, c: &Component) -> Result<String, PriorError> {
    match prior {
        Prior::Process(p) => {
            let (signal, grace) = crate::adapter::stop_settings(c);
            stop_process(p, &signal, grace)
        }
        Prior::Unit(u) => {
            let enabled = u.unit_file_state.as_deref() == Some("enabled");
            let verb: &[&str] = if enabled {
                &["disable", "--now"]
            } else {
                &["stop"]
            };
            systemctl(verb, &u.unit)?;
            let state = unit_show(&u.unit, "ActiveState")?;
            if state != "inactive" && state != "failed" {
                return Err(PriorError::NotAsExpected(format!(
                    "unit {} is {state} after `systemctl {}`",
                    u.unit,
                    verb.join(" ")
                )));
            }
            Ok(format!(
                "`systemctl {} {}`: {state}{}",
                verb.join(" "),
                u.unit,
                if enabled {
                    ", disabled (it does not start at boot)"
                } else {
                    ""
                }
            ))
        }
        other => Err(PriorError::Unsupported(format!(
            "adopting from a {} is not supported on this host yet",
            other.kind()
        ))),
    }
}

fn stop_process(p: &PriorProcess, signal: &str, grace: Duration) -> Result<String, PriorError> {
    let expected = crate::identity::RuntimeIdentity {
        pid: p.pid,
        pgid: p.pgid,
        start_time_ticks: p.start_time_ticks,
        exe: PathBuf::from(&p.exe),
        exe_sha256: p.exe_sha256.clone(),
        argv_digest: String::new(),
    };
    match crate::process::stop(&expected, signal, grace)? {
        StopOutcome::AlreadyGone { .. } => Ok(format!("pid {} was already gone", p.pid)),
        StopOutcome::IdentityMismatch { why, .. } => Err(PriorError::NotAsExpected(format!(
            "pid {} is another process now ({why}): not signalled",
            p.pid
        ))),
        StopOutcome::Stopped {
            signal,
            escalated_to_kill,
            took,
        } => Ok(format!(
            "stopped pid {}{} with {signal}{} in {} ms (identity checked)",
            p.pid,
            if p.pgid == p.pid as i32 {
                " and its process group"
            } else {
                ""
            },
            if escalated_to_kill {
                ", then SIGKILL after the grace period"
            } else {
                ""
            },
            took.as_millis()
        )),
    }
}

/// Gives the prior owner back as it was (module docs). A process is run again and
/// the record's copy updated with its new pid; one line saying what it did.
///
/// # Errors
/// [`PriorError`]: it could not be started or asked.
pub fn restore(prior: &mut Prior, log: &Path) -> Result<String, PriorError> {
    match prior {
        Prior::Process(p) => {
            if crate::process_start_ticks(p.pid) == Some(p.start_time_ticks) {
                return Ok(format!("pid {} still runs: nothing to restore", p.pid));
            }
            let pid = rerun(p, log)?;
            let measured = measure_process(pid)?.ok_or_else(|| {
                PriorError::NotAsExpected(format!(
                    "its command line, run again as pid {pid}, exited at once (see {})",
                    log.display()
                ))
            })?;
            // What was recorded stays the recipe; the new process is what runs now.
            p.pid = measured.pid;
            p.start_time_ticks = measured.start_time_ticks;
            p.pgid = measured.pgid;
            Ok(format!(
                "ran its command line again: pid {pid} (output to {})",
                log.display()
            ))
        }
        Prior::Unit(u) => {
            let enabled = u.unit_file_state.as_deref() == Some("enabled");
            let verb: &[&str] = if enabled {
                &["enable", "--now"]
            } else {
                &["start"]
            };
            systemctl(verb, &u.unit)?;
            Ok(format!("`systemctl {} {}`", verb.join(" "), u.unit))
        }
        other => Err(PriorError::Unsupported(format!(
            "adopting from a {} is not supported on this host yet",
            other.kind()
        ))),
    }
}

/// Runs `p`'s command line again: its executable with its argv, working directory
/// and environment, in a new session, output appended to `log`. Its pid.
fn rerun(p: &PriorProcess, log: &Path) -> Result<u32, PriorError> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::process::CommandExt;
    let exe = crate::identity::strip_deleted(Path::new(&p.exe)).to_path_buf();
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ExecError::Io { path, source }
    };
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log)
        .map_err(io(log))?;
    let err = out.try_clone().map_err(io(log))?;
    let mut cmd = std::process::Command::new(&exe);
    if let Some(first) = p.argv.first() {
        cmd.arg0(first);
    }
    cmd.args(p.argv.iter().skip(1))
        .env_clear()
        .envs(p.env.iter().map(|(k, v)| (k, v)))
        .current_dir(
            p.cwd
                .as_deref()
                .map(Path::new)
                .filter(|d| d.is_dir())
                .unwrap_or(Path::new("/")),
        )
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err);
    let mut child = crate::detached::in_new_session(&mut cmd)
        .spawn()
        .map_err(|source| ExecError::Spawn {
            component: p.argv.first().cloned().unwrap_or_default(),
            program: exe.clone(),
            source,
        })?;
    let pid = child.id();
    // Reaped when it exits while this process lives (it is not this process's to
    // wait for otherwise: it outlives it).
    std::thread::spawn(move || child.wait());
    Ok(pid)
}

/// Waits until something listens on every one of `ports` (`true`), or `deadline`.
///
/// # Errors
/// As [`holders`].
pub fn wait_listening(ports: &[u16], deadline: Instant) -> Result<bool, ExecError> {
    loop {
        let held = holders(ports)?;
        if ports
            .iter()
            .all(|p| held.iter().any(|l| l.address.port() == *p))
        {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until nothing listens on `ports` (`Ok(())`), or `deadline`: then who
/// still does.
///
/// # Errors
/// As [`holders`].
pub fn wait_free(ports: &[u16], deadline: Instant) -> Result<Result<(), String>, ExecError> {
    loop {
        let held = holders(ports)?;
        if held.is_empty() {
            return Ok(Ok(()));
        }
        if Instant::now() >= deadline {
            return Ok(Err(held
                .iter()
                .map(|l| format!("{} on {}", l.describe(), l.address))
                .collect::<Vec<_>>()
                .join(", ")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `systemctl VERB… -- UNIT`, run to its end.
fn systemctl(verb: &[&str], unit: &str) -> Result<String, PriorError> {
    let program = crate::adapter::systemd::Systemd::from_env().systemctl;
    let mut argv: Vec<std::ffi::OsString> = vec![program.into_os_string()];
    argv.extend(verb.iter().map(std::ffi::OsString::from));
    argv.push("--".into());
    argv.push(unit.into());
    Ok(crate::detached::run_verb(&argv)?)
}

/// One property of `unit` (`systemctl show -p NAME --value`).
fn unit_show(unit: &str, property: &str) -> Result<String, PriorError> {
    Ok(systemctl(&["show", "-p", property, "--value"], unit)?
        .trim()
        .to_string())
}
