//! The `launchd` adapter (macOS): a component is a launchd job, driven with
//! `launchctl` (launchctl(1), launchd.plist(5)).
//!
//! - With a `command`, Flotilla writes the job's property list itself
//!   ([`crate::launchctl::JobPlist`]: `Label`, `ProgramArguments`,
//!   `EnvironmentVariables`, `WorkingDirectory`, output appended to the component's
//!   log, `RunAtLoad`) into `<state>/launchd/<label>.plist`; with `launchd.plist` it
//!   uses that file as it is. Without a `restart` policy the job has `KeepAlive =
//!   false` and no `ThrottleInterval`: nothing restarts it behind Flotilla's back.
//!   With one, launchd supervises ([`keep_alive`]): `KeepAlive` is
//!   `{ SuccessfulExit = false }` for `on-failure`, `true` for `always`, `false` for
//!   `never`, and `ThrottleInterval` is the policy's backoff in whole seconds (at least
//!   1). launchd has no exponential backoff and no restart limit: it respawns at that
//!   pace for as long as the job keeps exiting.
//! - start: `launchctl bootstrap <domain> <plist>` (the domain is `gui/<uid>`, or
//!   `system` for root); a job already loaded but not running is `kickstart`ed.
//! - stop: `launchctl bootout <domain>/<label>`, then waits until the job is gone.
//! - restart: `launchctl kickstart -k <domain>/<label>`, which restarts the job from
//!   the definition launchd loaded — so when the property list changed, the job is
//!   booted out and bootstrapped again instead.
//! - observe: `launchctl print <domain>/<label>` ([`crate::launchctl::parse_print`]):
//!   state, pid, runs, last exit code; the pid's identity is measured.
//!
//! The trap this field is known for — `launchctl load`/`bootstrap` of a job that is
//! already loaded changes nothing and leaves the old process running — is why the
//! executor proves every restart by measured identity; [`RestartMethod::Reload`]
//! reproduces what tools that fell into it do.

use super::{
    file_len, run_owner_command, write_if_changed, Adapter, Launch, Launched, Seen, Stopped,
};
use crate::error::ExecError;
use crate::identity::{self, RuntimeIdentity};
use crate::launchctl::{self, JobPlist, KeepAlive, ServiceInfo};
use flotilla_model::inventory::AdapterKind;
use flotilla_model::status::Lifecycle;
use flotilla_model::topology::Component;
use flotilla_store::InstanceRecord;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The environment variable naming the `launchctl` to run (default: `launchctl`
/// from `PATH`).
pub const LAUNCHCTL_ENV: &str = "FLOTILLA_LAUNCHCTL";

/// The environment variable choosing [`RestartMethod`]: `kickstart` (default) or
/// `reload`.
pub const RESTART_ENV: &str = "FLOTILLA_LAUNCHD_RESTART";

/// How long a job may take to show a pid after `bootstrap`/`kickstart`, or to go
/// away after `bootout`.
const SETTLE: Duration = Duration::from_secs(5);

/// How a restart is asked of launchd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RestartMethod {
    /// `launchctl kickstart -k` (and bootout + bootstrap when the plist changed).
    #[default]
    Kickstart,
    /// `launchctl load <plist>` over the loaded job: what tools that trusted a reload
    /// do. On a loaded job it changes nothing; the executor's proof reports that.
    Reload,
}

/// Why the launchd adapter cannot work on this machine, if it cannot: launchd runs
/// only on macOS, and no `launchctl` was given explicitly ([`LAUNCHCTL_ENV`]).
pub fn unavailable() -> Option<String> {
    let given = std::env::var_os(LAUNCHCTL_ENV).is_some_and(|v| !v.is_empty());
    (!given && !cfg!(target_os = "macos")).then(|| {
        format!(
            "launchd runs only on macOS (this host runs {}): the launchd adapter cannot manage it here",
            std::env::consts::OS
        )
    })
}

/// The `launchd` adapter.
#[derive(Debug, Clone)]
pub struct Launchd {
    /// The `launchctl` program.
    pub launchctl: PathBuf,
    /// How restarts are asked for.
    pub restart: RestartMethod,
}

impl Launchd {
    /// `launchctl` from [`LAUNCHCTL_ENV`], else from `PATH`; the restart method from
    /// [`RESTART_ENV`] (`reload` selects [`RestartMethod::Reload`]; anything else,
    /// kickstart).
    pub fn from_env() -> Launchd {
        Launchd {
            launchctl: super::program_from_env(LAUNCHCTL_ENV, "launchctl"),
            restart: match std::env::var(RESTART_ENV).as_deref() {
                Ok("reload") => RestartMethod::Reload,
                _ => RestartMethod::Kickstart,
            },
        }
    }

    fn ctl(&self, c: &Component, args: &[String]) -> Result<String, ExecError> {
        if let Some(why) = unavailable() {
            return Err(ExecError::Adapter {
                component: c.name.clone(),
                message: why,
            });
        }
        run_owner_command(&c.name, &self.launchctl, args)
    }

    /// `launchctl print` of `c`'s job; `None` when launchd does not know it.
    fn print(&self, c: &Component) -> Result<Option<ServiceInfo>, ExecError> {
        match self.ctl(c, &["print".into(), target(c)]) {
            Ok(text) => Ok(Some(launchctl::parse_print(&text))),
            // "Could not find service" exits 113 (launchctl's "not found").
            Err(ExecError::OwnerCommand {
                status: Some(113), ..
            }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Polls `print` until `done` holds or [`SETTLE`] passes; the last answer.
    fn settle(
        &self,
        c: &Component,
        done: impl Fn(&Option<ServiceInfo>) -> bool,
    ) -> Result<Option<ServiceInfo>, ExecError> {
        let deadline = Instant::now() + SETTLE;
        loop {
            let info = self.print(c)?;
            if done(&info) || Instant::now() >= deadline {
                return Ok(info);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Writes the job's plist (when Flotilla generates it); its path.
    fn write_plist(&self, launch: &Launch) -> Result<PathBuf, ExecError> {
        let c = &launch.component;
        if let Some(p) = c.launchd.as_ref().and_then(|l| l.plist.as_ref()) {
            return Ok(launch.cwd.join(p));
        }
        let path = launch
            .state_root
            .join("launchd")
            .join(format!("{}.plist", label(c)));
        let plist = JobPlist {
            label: label(c),
            program_arguments: launch.argv.clone(),
            environment: launch.env.iter().cloned().collect(),
            working_directory: Some(launch.cwd.clone()),
            standard_out_path: Some(launch.log_path.clone()),
            standard_error_path: Some(launch.log_path.clone()),
            run_at_load: true,
            keep_alive: keep_alive(c).0,
            throttle_interval: keep_alive(c).1,
        };
        write_if_changed(&path, &plist.to_xml(), 0o600)?;
        Ok(path)
    }

    fn bootstrap(&self, c: &Component, plist: &Path) -> Result<(), ExecError> {
        self.ctl(
            c,
            &["bootstrap".into(), domain(), plist.display().to_string()],
        )
        .map(|_| ())
    }

    /// Measures the job's process once launchd shows one that is not `previous`.
    fn launched(
        &self,
        launch: &Launch,
        offset: u64,
        previous: Option<u32>,
    ) -> Result<Launched, ExecError> {
        let c = &launch.component;
        let info = self.settle(c, |i| {
            i.as_ref()
                .and_then(|i| i.pid)
                .is_some_and(|p| Some(p) != previous)
        })?;
        let Some(info) = info else {
            return Err(ExecError::Adapter {
                component: c.name.clone(),
                message: format!("launchd does not know job {} after loading it", target(c)),
            });
        };
        // A reload that changed nothing leaves the old pid: report what runs, and let
        // the executor's proof say it is not new.
        let Some(pid) = info.pid else {
            return Err(ExecError::Adapter {
                component: c.name.clone(),
                message: format!(
                    "job {} has no process ({}; last exit code {})",
                    target(c),
                    info.state,
                    info.last_exit_code.as_deref().unwrap_or("none")
                ),
            });
        };
        let identity = identity::measure(pid)?.ok_or_else(|| ExecError::Adapter {
            component: c.name.clone(),
            message: format!("job {}'s process {pid} exited at once", target(c)),
        })?;
        Ok(Launched {
            identity,
            log_start_offset: offset,
            child: None,
            facts: facts(c, &info),
            start_marked: false,
        })
    }
}

/// The `KeepAlive` and `ThrottleInterval` (seconds) of the job Flotilla writes for
/// `c`, from its restart policy: [`KeepAlive::Never`] and none without one (the job
/// is exactly what it was before policies existed); else `on-failure` →
/// [`KeepAlive::OnFailure`] (`{ SuccessfulExit = false }`), `always` →
/// [`KeepAlive::Always`], `never` (or `max_restarts = 0`) → [`KeepAlive::Never`],
/// with the backoff rounded up
/// to whole seconds (launchd.plist(5): `ThrottleInterval` is an integer).
pub fn keep_alive(c: &Component) -> (KeepAlive, Option<u32>) {
    use flotilla_model::inventory::RestartPolicy;
    let Some(r) = &c.restart else {
        return (KeepAlive::Never, None);
    };
    let keep_alive = match r.policy {
        _ if r.max_restarts == 0 => KeepAlive::Never,
        RestartPolicy::OnFailure => KeepAlive::OnFailure,
        RestartPolicy::Always => KeepAlive::Always,
        RestartPolicy::Never => KeepAlive::Never,
    };
    let seconds = u32::try_from(r.backoff_ms.div_ceil(1000).max(1)).unwrap_or(u32::MAX);
    (keep_alive, Some(seconds))
}

fn label(c: &Component) -> String {
    c.launchd
        .as_ref()
        .map(|l| l.label.clone())
        .unwrap_or_else(|| format!("dev.flotilla.{}", c.name))
}

/// The other Flotilla project whose job `c`'s label names now, when Flotilla writes
/// `c`'s plist (none declared) and launchd loaded the job from the plist of a project
/// that is not `project` (`<state>/projects/<other>/launchd/<label>.plist`, its
/// `path = …`): two projects' components of one name share the default label.
fn other_project(project: &str, c: &Component, info: &ServiceInfo) -> Option<String> {
    if c.launchd.as_ref().is_some_and(|l| l.plist.is_some()) {
        return None;
    }
    let path = Path::new(info.path.as_deref()?);
    let root = path.parent().filter(|d| d.ends_with("launchd"))?.parent()?;
    crate::statedir::StateDir::project_of(root).filter(|p| p != project)
}

/// The sentence saying `c`'s job was loaded for project `other`.
fn not_ours(c: &Component, other: &str) -> String {
    format!(
        "job {} was loaded for flotilla project `{other}`: not touched (give this component its own `launchd.label`)",
        target(c)
    )
}

/// A start or restart of a job another project loaded: refused, nothing touched.
fn refuse_other_project(launch: &Launch, loaded: Option<&ServiceInfo>) -> Result<(), ExecError> {
    let c = &launch.component;
    match loaded.and_then(|info| other_project(&launch.project, c, info)) {
        Some(other) => Err(ExecError::Adapter {
            component: c.name.clone(),
            message: not_ours(c, &other),
        }),
        None => Ok(()),
    }
}

/// The domain of this user's jobs: `gui/<uid>`, or `system` for root.
fn domain() -> String {
    launchctl::domain_target(nix::unistd::getuid().as_raw())
}

/// `<domain>/<label>`.
fn target(c: &Component) -> String {
    launchctl::service_target(&domain(), &label(c))
}

fn facts(c: &Component, info: &ServiceInfo) -> serde_json::Value {
    serde_json::json!({
        "service": target(c),
        "state": info.state,
        "pid": info.pid,
        "runs": info.runs,
        "last_exit_code": info.last_exit_code,
    })
}

impl Adapter for Launchd {
    fn kind(&self) -> Option<AdapterKind> {
        Some(AdapterKind::Launchd)
    }

    fn start(&self, launch: &Launch) -> Result<Launched, ExecError> {
        let c = &launch.component;
        let before = self.print(c)?;
        refuse_other_project(launch, before.as_ref())?;
        let plist = self.write_plist(launch)?;
        let offset = file_len(&launch.log_path);
        match before {
            Some(info) if info.pid.is_some() => {}
            Some(_) => {
                self.ctl(c, &["kickstart".into(), target(c)])?;
            }
            None => self.bootstrap(c, &plist)?,
        }
        self.launched(launch, offset, None)
    }

    fn restart(
        &self,
        launch: &Launch,
        _recorded: Option<&InstanceRecord>,
    ) -> Result<Launched, ExecError> {
        let c = &launch.component;
        let before = self.print(c)?;
        refuse_other_project(launch, before.as_ref())?;
        let previous = before.as_ref().and_then(|i| i.pid);
        let plist = self.write_plist(launch)?;
        let offset = file_len(&launch.log_path);
        match (self.restart, &before) {
            (RestartMethod::Reload, _) => {
                self.ctl(c, &["load".into(), plist.display().to_string()])?;
                // A reload gives launchd no reason to change anything: look once.
                return self.launched(launch, offset, None);
            }
            (RestartMethod::Kickstart, None) => self.bootstrap(c, &plist)?,
            (RestartMethod::Kickstart, Some(info)) if info.arguments != launch.argv => {
                // kickstart would run the definition launchd loaded, not the new one.
                self.ctl(c, &["bootout".into(), target(c)])?;
                self.settle(c, |i| i.is_none())?;
                self.bootstrap(c, &plist)?;
            }
            (RestartMethod::Kickstart, Some(_)) => {
                self.ctl(c, &["kickstart".into(), "-k".into(), target(c)])?;
            }
        }
        self.launched(launch, offset, previous)
    }

    fn stop(
        &self,
        project: &str,
        c: &Component,
        _recorded: Option<&InstanceRecord>,
    ) -> Result<Stopped, ExecError> {
        let Some(before) = self.print(c)? else {
            return Ok(Stopped::AlreadyGone {
                summary: format!("job {} is not loaded", target(c)),
            });
        };
        if let Some(other) = other_project(project, c, &before) {
            return Ok(Stopped::NotOurs {
                why: not_ours(c, &other),
                facts: serde_json::json!({ "label": label(c), "project": other }),
            });
        }
        let t0 = Instant::now();
        self.ctl(c, &["bootout".into(), target(c)])?;
        if let Some(still) = self.settle(c, |i| i.is_none())? {
            return Err(ExecError::Adapter {
                component: c.name.clone(),
                message: format!(
                    "`launchctl bootout {}` returned but the job is still loaded ({}, pid {:?})",
                    target(c),
                    still.state,
                    still.pid
                ),
            });
        }
        Ok(match before.pid {
            Some(pid) => Stopped::Stopped {
                summary: format!(
                    "booted out job {} (pid {pid}) in {} ms",
                    target(c),
                    t0.elapsed().as_millis()
                ),
                facts: facts(c, &before),
            },
            None => Stopped::AlreadyGone {
                summary: format!("job {} was loaded but not running; booted out", target(c)),
            },
        })
    }

    fn observe(
        &self,
        project: &str,
        c: &Component,
        recorded: Option<&InstanceRecord>,
    ) -> Result<Option<Seen>, ExecError> {
        let Some(info) = self.print(c)? else {
            return Ok(Some(Seen::stopped(
                format!("launchctl print {}", target(c)),
                "not loaded",
            )));
        };
        if let Some(other) = other_project(project, c, &info) {
            return Ok(Some(Seen::foreign(
                format!("launchctl print {}", target(c)),
                not_ours(c, &other),
            )));
        }
        let mut evidence = vec![(
            format!("launchctl print {}", target(c)),
            format!(
                "state = {}, pid = {}, runs = {}, last exit code = {}{}",
                info.state,
                info.pid
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "none".into()),
                info.runs
                    .map(|r| r.to_string())
                    .unwrap_or_else(|| "?".into()),
                info.last_exit_code.as_deref().unwrap_or("(never exited)"),
                info.last_terminating_signal
                    .as_deref()
                    .map(|s| format!(", last terminating signal = {s}"))
                    .unwrap_or_default()
            ),
        )];
        let mut main = None;
        let mut recorded_main = false;
        let lifecycle = match info.pid.map(identity::measure).transpose()?.flatten() {
            Some(m) => {
                if let Some(rec) = recorded {
                    recorded_main = identity::matches(&RuntimeIdentity::from(rec), Some(&m))
                        == identity::IdentityMatch::Same;
                    if !recorded_main {
                        evidence.push((
                            format!("/proc/{}", m.pid),
                            format!(
                                "the job's process is pid {}, not pid {} that Flotilla started: launchd started it again on its own",
                                m.pid, rec.pid
                            ),
                        ));
                    }
                }
                main = Some(m);
                Lifecycle::Running
            }
            None if info.pid.is_some() => Lifecycle::Unknown,
            // A non-zero exit, or a death by signal (launchd prints no exit code then).
            None if info.last_exit_code.as_deref().is_some_and(|c| c != "0")
                || info.last_terminating_signal.is_some() =>
            {
                Lifecycle::Failed
            }
            None => Lifecycle::Stopped,
        };
        Ok(Some(Seen {
            lifecycle,
            main,
            recorded_main,
            owner_restarts: info.runs.map(|r| u64::from(r.saturating_sub(1))),
            evidence,
            fresh: None,
            foreign: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component(restart: &str) -> Component {
        use flotilla_model::{validate, Format, SourceFile, Sources};
        let toml = format!(
            "[components.llm]\nadapter = \"launchd\"\nlaunchd = {{ label = \"dev.llm\" }}\ncommand = [\"llm\"]\n{restart}\n"
        );
        let mut sources = Sources::new();
        let id = sources.add(SourceFile::new("flotilla.toml", Format::Toml, toml));
        validate(&sources, id, &[])
            .expect("valid")
            .topology
            .components[0]
            .clone()
    }

    #[test]
    fn restart_policies_become_keep_alive_and_throttle_interval() {
        assert_eq!(keep_alive(&component("")), (KeepAlive::Never, None));
        assert_eq!(
            keep_alive(&component("restart = {}")),
            (KeepAlive::OnFailure, Some(1))
        );
        assert_eq!(
            keep_alive(&component(
                "restart = { policy = \"always\", backoff = \"2500ms\" }"
            )),
            (KeepAlive::Always, Some(3))
        );
        assert_eq!(
            keep_alive(&component(
                "restart = { policy = \"always\", backoff = \"10ms\" }"
            )),
            (KeepAlive::Always, Some(1))
        );
        assert_eq!(
            keep_alive(&component("restart = { policy = \"never\" }")).0,
            KeepAlive::Never
        );
        assert_eq!(
            keep_alive(&component("restart = { max_restarts = 0 }")).0,
            KeepAlive::Never
        );
    }
}
