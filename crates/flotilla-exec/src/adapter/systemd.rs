//! The `systemd` adapter: a component is a systemd service unit, driven with
//! `systemctl` (system manager, or `--user`).
//!
//! Two ways to own a unit (see [`flotilla_model::inventory::SystemdSpec`]):
//! - **Flotilla's own unit** (the component has a `command`): a unit file generated
//!   from the component is written to the manager's *runtime* unit directory
//!   (`/run/systemd/system`, or `$XDG_RUNTIME_DIR/systemd/user` for `--user`) and
//!   never enabled — Flotilla decides when it runs, so nothing is left in `/etc` to
//!   start behind its back after a reboot. `ExecStart` is the resolved command,
//!   `WorkingDirectory` the component's, the environment comes from an owner-only
//!   `EnvironmentFile` in the state directory (secret values never enter the unit
//!   file), output is appended to the component's log, `KillMode=control-group`, the
//!   stop signal and grace period become `KillSignal=`/`TimeoutStopSec=`. Without a
//!   `restart` policy there is no `Restart=`: nothing restarts it behind Flotilla's
//!   back. With one ([`restart_settings`]), systemd supervises: `Restart=`
//!   (`on-failure`, `always`, `no`), `RestartSec=` the policy's backoff, and in
//!   `[Unit]` a start limit (`StartLimitBurst=` = 1 + `max_restarts`,
//!   `StartLimitIntervalSec=` the time the policy's backoff schedule takes, at least
//!   10 s) after which systemd gives up on a crash loop and leaves the unit `failed`.
//!   systemd 252 (Debian 12) has no exponential `RestartSteps=`/`RestartMaxDelaySec=`
//!   (systemd ≥ 254), so the delay stays at the backoff. A deliberate start or restart
//!   first runs `systemctl reset-failed` on such a unit, so a crash loop's start limit
//!   never refuses an operator's command.
//! - **An existing unit** (`systemd = { unit = "…" }`, no `command`): started,
//!   stopped and restarted by name; its own `Restart=` is respected and reported.
//!
//! Lifecycle comes from `systemctl show` (`ActiveState`, `SubState`, `MainPID`,
//! `ExecMainStartTimestampMonotonic`, `NRestarts`, `Result`; systemd.exec(5),
//! org.freedesktop.systemd1(5)); runtime identity is measured from `/proc/<MainPID>`
//! exactly as for processes. Unit syntax and quoting follow systemd.syntax(7) and
//! systemd.service(5) ("Command lines"); `append:` outputs need systemd ≥ 240,
//! `Type=exec` ≥ 240.

use super::{file_len, write_if_changed, Adapter, Launch, Launched, Seen, Stopped};
use crate::error::ExecError;
use crate::identity::{self, RuntimeIdentity};
use flotilla_model::inventory::AdapterKind;
use flotilla_model::status::Lifecycle;
use flotilla_model::topology::Component;
use flotilla_store::InstanceRecord;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The environment variable naming the `systemctl` to run (default: `systemctl`
/// from `PATH`).
pub const SYSTEMCTL_ENV: &str = "FLOTILLA_SYSTEMCTL";

/// The properties read with `systemctl show`.
const PROPERTIES: &str =
    "Id,LoadState,ActiveState,SubState,Result,MainPID,NRestarts,ExecMainStartTimestampMonotonic,ExecMainStatus,FragmentPath";

/// Why the systemd adapter cannot work on this machine, if it cannot: systemd is not
/// the init system (sd_booted(3): `/run/systemd/system` is missing) and no
/// `systemctl` was given explicitly ([`SYSTEMCTL_ENV`]).
pub fn unavailable() -> Option<String> {
    let given = std::env::var_os(SYSTEMCTL_ENV).is_some_and(|v| !v.is_empty());
    (!given && !std::path::Path::new("/run/systemd/system").is_dir()).then(|| {
        "systemd is not the init system here (/run/systemd/system is missing): the systemd adapter cannot manage it on this host".to_string()
    })
}

/// The `systemd` adapter.
#[derive(Debug, Clone)]
pub struct Systemd {
    /// The `systemctl` program.
    pub systemctl: PathBuf,
}

impl Systemd {
    /// `systemctl` from [`SYSTEMCTL_ENV`], else from `PATH`.
    pub fn from_env() -> Systemd {
        Systemd {
            systemctl: super::program_from_env(SYSTEMCTL_ENV, "systemctl"),
        }
    }

    fn ctl(&self, c: &Component, args: &[&str]) -> Result<String, ExecError> {
        if let Some(why) = unavailable() {
            return Err(ExecError::Adapter {
                component: c.name.clone(),
                message: why,
            });
        }
        let mut all: Vec<String> = Vec::new();
        if is_user(c) {
            all.push("--user".into());
        }
        all.extend(args.iter().map(|s| s.to_string()));
        // `systemctl --user` finds the user manager through XDG_RUNTIME_DIR, which a
        // non-login session (SSH without PAM, cron) may lack: give it the standard one.
        let env: Vec<(&str, std::ffi::OsString)> = if is_user(c) {
            vec![("XDG_RUNTIME_DIR", user_runtime_dir(c)?.into_os_string())]
        } else {
            Vec::new()
        };
        super::run_owner_command_with(&c.name, &self.systemctl, &all, &env)
    }

    /// `systemctl show` of `c`'s unit.
    fn show(&self, c: &Component) -> Result<UnitState, ExecError> {
        let unit = unit_name(c);
        let out = self.ctl(c, &["show", "-p", PROPERTIES, "--", &unit])?;
        Ok(UnitState::parse(&out))
    }

    /// Writes `launch`'s environment file and unit file when they differ from what is
    /// there, and reloads the manager when the unit changed.
    fn install(&self, launch: &Launch) -> Result<(), ExecError> {
        let c = &launch.component;
        let program = crate::process::resolve_program(
            &c.name,
            launch.argv.first().map(String::as_str).unwrap_or_default(),
            &launch.cwd,
            &launch.env,
        )?;
        let env_file = launch
            .state_root
            .join("run")
            .join(format!("{}.env", c.name));
        write_if_changed(&env_file, render_env_file(&launch.env).as_bytes(), 0o600)?;
        // systemd opens `append:` outputs itself and creates no directories.
        if let Some(logs) = launch.log_path.parent() {
            std::fs::create_dir_all(logs).map_err(|source| ExecError::Log {
                component: c.name.clone(),
                path: logs.to_path_buf(),
                source,
            })?;
        }
        let dir = unit_dir(c)?;
        let unit_path = dir.join(unit_name(c));
        let text = render_unit(launch, &program, &env_file);
        if write_if_changed(&unit_path, text.as_bytes(), 0o644)? {
            self.ctl(c, &["daemon-reload"])?;
        }
        Ok(())
    }

    /// Before a deliberate start or restart of Flotilla's own unit with a restart
    /// policy: `systemctl reset-failed`, which flushes the start-rate counter a crash
    /// loop used up (systemd.unit(5), `StartLimitIntervalSec=`). Best effort: when it
    /// fails, the start that follows reports what is wrong.
    fn reset_start_limit(&self, c: &Component) {
        if c.restart.is_some() && owns_unit(c) {
            if let Err(e) = self.ctl(c, &["reset-failed", "--", &unit_name(c)]) {
                tracing::debug!("component `{}`: reset-failed: {e}", c.name);
            }
        }
    }

    /// Measures the main process of `c`'s unit after a start or restart.
    fn launched(&self, launch: &Launch, log_start_offset: u64) -> Result<Launched, ExecError> {
        let c = &launch.component;
        let st = self.show(c)?;
        if st.main_pid == 0 {
            return Err(ExecError::Adapter {
                component: c.name.clone(),
                message: format!(
                    "unit {} has no main process after it was started ({})",
                    st.id,
                    st.describe()
                ),
            });
        }
        let identity = identity::measure(st.main_pid)?.ok_or_else(|| ExecError::Adapter {
            component: c.name.clone(),
            message: format!(
                "unit {}'s main process {} exited at once ({})",
                st.id,
                st.main_pid,
                st.describe()
            ),
        })?;
        Ok(Launched {
            identity,
            log_start_offset,
            child: None,
            facts: st.facts(),
            start_marked: false,
        })
    }
}

/// `c`'s unit name: declared, or `flotilla-<name>.service` for Flotilla's own unit.
pub fn unit_name(c: &Component) -> String {
    c.systemd
        .as_ref()
        .and_then(|s| s.unit.clone())
        .unwrap_or_else(|| format!("flotilla-{}.service", c.name))
}

fn is_user(c: &Component) -> bool {
    c.systemd.as_ref().is_some_and(|s| s.user)
}

/// The unit file key naming the project whose unit it is. systemd ignores keys
/// starting `X-` (systemd.unit(5), "Unit files may include … keys prefixed with X-").
pub const PROJECT_KEY: &str = "X-Flotilla-Project";

/// The other project whose unit `c`'s unit file is, when Flotilla writes `c`'s unit
/// and the file there names a project that is not `project` (two projects' components
/// of one name share the default unit name). A file without the key is taken as
/// `project`'s (units written before the key existed).
pub fn other_project(project: &str, c: &Component) -> Option<String> {
    if !owns_unit(c) {
        return None;
    }
    let text = std::fs::read_to_string(unit_dir(c).ok()?.join(unit_name(c))).ok()?;
    let prefix = format!("{PROJECT_KEY}=");
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&prefix))
        .map(str::trim)
        .filter(|p| *p != project)
        .map(str::to_string)
}

/// The sentence saying `c`'s unit is project `other`'s.
fn not_ours(c: &Component, other: &str) -> String {
    let unit = unit_name(c);
    let path = unit_dir(c).map_or_else(|_| unit.clone(), |d| d.join(&unit).display().to_string());
    format!(
        "unit {unit} was written for flotilla project `{other}`: not touched (give this component its own `systemd.unit` name; if project `{other}` is gone: `systemctl stop {unit}` and remove {path})"
    )
}

/// Whether Flotilla writes `c`'s unit (it has a command) rather than driving an
/// existing one.
pub fn owns_unit(c: &Component) -> bool {
    !c.command.is_empty()
}

/// The runtime unit directory of `c`'s manager.
fn unit_dir(c: &Component) -> Result<PathBuf, ExecError> {
    if !is_user(c) {
        return Ok(PathBuf::from("/run/systemd/system"));
    }
    Ok(user_runtime_dir(c)?.join("systemd").join("user"))
}

/// The user manager's runtime directory: `$XDG_RUNTIME_DIR`, else `/run/user/<uid>`
/// when it exists (where logind and `loginctl enable-linger` put it).
fn user_runtime_dir(c: &Component) -> Result<PathBuf, ExecError> {
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    let standard = PathBuf::from(format!("/run/user/{}", nix::unistd::getuid()));
    if standard.is_dir() {
        return Ok(standard);
    }
    Err(ExecError::Adapter {
        component: c.name.clone(),
        message: format!(
            "a --user unit needs the user manager's runtime directory: XDG_RUNTIME_DIR is not set and {} does not exist (log in, or `loginctl enable-linger`)",
            standard.display()
        ),
    })
}

/// One word of a command line in systemd's syntax: double-quoted, with `\` and `"`
/// escaped, `%` doubled (specifiers) and `$` doubled (no variable expansion).
pub fn quote_word(w: &str) -> String {
    let mut out = String::with_capacity(w.len() + 2);
    out.push('"');
    for ch in w.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '%' => out.push_str("%%"),
            '$' => out.push_str("$$"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The environment file: `NAME="value"` lines, with `"`, `\`, `` ` `` and `$`
/// escaped as systemd's environment-file parser expects (systemd.exec(5),
/// `EnvironmentFile=`).
pub fn render_env_file(env: &[(String, String)]) -> String {
    let mut out = String::from("# Written by flotilla for this component's unit.\n");
    for (k, v) in env {
        out.push_str(k);
        out.push_str("=\"");
        for ch in v.chars() {
            if matches!(ch, '"' | '\\' | '`' | '$') {
                out.push('\\');
            }
            out.push(ch);
        }
        out.push_str("\"\n");
    }
    out
}

/// The unit file Flotilla writes for `launch` (program already resolved to a path).
pub fn render_unit(launch: &Launch, program: &Path, env_file: &Path) -> String {
    let c = &launch.component;
    let (signal, grace) = super::stop_settings(c);
    let mut exec = vec![quote_word(&program.display().to_string())];
    exec.extend(launch.argv.iter().skip(1).map(|a| quote_word(a)));
    // Paths are taken whole, spaces included; only `%` (specifiers) is escaped.
    let path = |p: &Path| p.display().to_string().replace('%', "%%");
    let description = match &c.description {
        Some(d) => format!("{} (flotilla component `{}`)", d.replace('\n', " "), c.name),
        None => format!("flotilla component `{}`", c.name),
    };
    let (unit_restart, service_restart) = restart_settings(c);
    format!(
        "# Written by flotilla for component `{name}`; it is rewritten at each start.\n\
         [Unit]\n\
         Description={description}\n\
         X-Flotilla-Project={project}\n\
         {unit_restart}\
         \n\
         [Service]\n\
         Type=exec\n\
         ExecStart={exec}\n\
         WorkingDirectory={cwd}\n\
         EnvironmentFile={env}\n\
         StandardInput=null\n\
         StandardOutput=append:{log}\n\
         StandardError=append:{log}\n\
         KillMode=control-group\n\
         KillSignal={signal}\n\
         TimeoutStopSec={grace_ms}ms\n\
         SendSIGKILL=yes\n\
         {service_restart}",
        name = c.name,
        project = launch.project,
        exec = exec.join(" "),
        cwd = path(&launch.cwd),
        env = path(env_file),
        log = path(&launch.log_path),
        grace_ms = grace.as_millis().max(1),
    )
}

/// The lines a component's restart policy adds to its unit: `([Unit] lines, [Service]
/// lines)`, each line ending in a newline; both empty without a policy, so such a
/// unit is exactly what it was before policies existed.
///
/// - `Restart=`: `on-failure`, `always`, or `no` for policy `never` and for
///   `max_restarts = 0` (systemd.service(5));
/// - `RestartSec=` the policy's `backoff` (systemd 252 keeps the delay fixed);
/// - `StartLimitBurst=` 1 + `max_restarts` (the first start counts) within
///   `StartLimitIntervalSec=` the time the policy's whole backoff schedule takes
///   ([`flotilla_model::topology::Restart::window_ms`]), at least 10 s, systemd's
///   default (systemd.unit(5)): a crash loop that outruns the schedule hits the limit
///   and systemd stops restarting it.
pub fn restart_settings(c: &Component) -> (String, String) {
    use flotilla_model::inventory::RestartPolicy;
    let Some(r) = &c.restart else {
        return (String::new(), String::new());
    };
    let restart = match r.policy {
        _ if r.max_restarts == 0 => "no",
        RestartPolicy::OnFailure => "on-failure",
        RestartPolicy::Always => "always",
        RestartPolicy::Never => "no",
    };
    let service = format!("Restart={restart}\nRestartSec={}ms\n", r.backoff_ms);
    if restart == "no" {
        return (String::new(), service);
    }
    let unit = format!(
        "StartLimitIntervalSec={}ms\nStartLimitBurst={}\n",
        r.window_ms().max(10_000),
        u64::from(r.max_restarts) + 1
    );
    (unit, service)
}

/// What `systemctl show` said of a unit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitState {
    /// `Id`: the unit's name.
    pub id: String,
    /// `LoadState`: `loaded`, `not-found`, `masked`…
    pub load_state: String,
    /// `ActiveState`: `active`, `inactive`, `failed`, `activating`, `deactivating`…
    pub active_state: String,
    /// `SubState`: `running`, `dead`, `exited`, `auto-restart`…
    pub sub_state: String,
    /// `Result`: `success`, `exit-code`, `signal`, `core-dump`…
    pub result: String,
    /// `MainPID` (0: none).
    pub main_pid: u32,
    /// `NRestarts`: restarts systemd made on its own (`Restart=`).
    pub n_restarts: u64,
    /// `ExecMainStartTimestampMonotonic`, µs since boot.
    pub main_started_monotonic_us: u64,
    /// `ExecMainStatus`: the last exit status or signal number of the main process.
    pub main_status: String,
}

impl UnitState {
    /// Parses `systemctl show` output (`Key=Value` lines; unknown keys ignored).
    pub fn parse(text: &str) -> UnitState {
        let kv: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
        let s = |k: &str| kv.get(k).copied().unwrap_or_default().to_string();
        let n = |k: &str| kv.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        UnitState {
            id: s("Id"),
            load_state: s("LoadState"),
            active_state: s("ActiveState"),
            sub_state: s("SubState"),
            result: s("Result"),
            main_pid: n("MainPID") as u32,
            n_restarts: n("NRestarts"),
            main_started_monotonic_us: n("ExecMainStartTimestampMonotonic"),
            main_status: s("ExecMainStatus"),
        }
    }

    /// The lifecycle these states mean (systemd's unit active states,
    /// org.freedesktop.systemd1(5)).
    pub fn lifecycle(&self) -> Lifecycle {
        match self.active_state.as_str() {
            "active" | "reloading" if self.main_pid != 0 => Lifecycle::Running,
            "active" | "reloading" => Lifecycle::Unknown,
            "activating" => Lifecycle::Starting,
            "deactivating" => Lifecycle::Stopping,
            "failed" => Lifecycle::Failed,
            "inactive" => Lifecycle::Stopped,
            _ => Lifecycle::Unknown,
        }
    }

    /// `active (running), MainPID 42, NRestarts 0, result success`.
    pub fn describe(&self) -> String {
        format!(
            "{} ({}), MainPID {}, NRestarts {}, result {}{}",
            self.active_state,
            self.sub_state,
            self.main_pid,
            self.n_restarts,
            self.result,
            if self.load_state == "loaded" {
                String::new()
            } else {
                format!(", LoadState {}", self.load_state)
            }
        )
    }

    fn facts(&self) -> serde_json::Value {
        serde_json::json!({
            "unit": self.id,
            "active_state": self.active_state,
            "sub_state": self.sub_state,
            "main_pid": self.main_pid,
            "n_restarts": self.n_restarts,
            "result": self.result,
        })
    }
}

impl Adapter for Systemd {
    fn kind(&self) -> Option<AdapterKind> {
        Some(AdapterKind::Systemd)
    }

    fn start(&self, launch: &Launch) -> Result<Launched, ExecError> {
        let c = &launch.component;
        refuse_other_project(launch)?;
        if owns_unit(c) {
            crate::logs::rotate_if_needed(&launch.log_path, launch.log_max_bytes, launch.log_keep)?;
            self.install(launch)?;
        }
        let offset = file_len(&launch.log_path);
        self.reset_start_limit(c);
        self.ctl(c, &["start", "--", &unit_name(c)])?;
        self.launched(launch, offset)
    }

    fn restart(
        &self,
        launch: &Launch,
        _recorded: Option<&InstanceRecord>,
    ) -> Result<Launched, ExecError> {
        let c = &launch.component;
        refuse_other_project(launch)?;
        if owns_unit(c) {
            self.install(launch)?;
        }
        let offset = file_len(&launch.log_path);
        self.reset_start_limit(c);
        self.ctl(c, &["restart", "--", &unit_name(c)])?;
        self.launched(launch, offset)
    }

    fn stop(
        &self,
        project: &str,
        c: &Component,
        recorded: Option<&InstanceRecord>,
    ) -> Result<Stopped, ExecError> {
        if let Some(other) = other_project(project, c) {
            return Ok(Stopped::NotOurs {
                why: not_ours(c, &other),
                facts: serde_json::json!({ "unit": unit_name(c), "project": other }),
            });
        }
        // With an instance recorded, the unit is asked to stop at once (systemctl only
        // signals inside the unit's cgroup, whatever its main process is now);
        // without one, it is looked at first so that stopping what is not running
        // says so.
        let main = match recorded {
            Some(rec) => rec.pid,
            None => {
                let before = self.show(c)?;
                if matches!(before.lifecycle(), Lifecycle::Stopped | Lifecycle::Failed) {
                    return Ok(Stopped::AlreadyGone {
                        summary: format!(
                            "unit {} was not running ({})",
                            before.id,
                            before.describe()
                        ),
                    });
                }
                before.main_pid
            }
        };
        let t0 = std::time::Instant::now();
        self.ctl(c, &["stop", "--", &unit_name(c)])?;
        let after = self.show(c)?;
        if !matches!(after.lifecycle(), Lifecycle::Stopped | Lifecycle::Failed) {
            return Err(ExecError::Adapter {
                component: c.name.clone(),
                message: format!(
                    "`systemctl stop {}` returned but the unit is {}",
                    after.id,
                    after.describe()
                ),
            });
        }
        Ok(Stopped::Stopped {
            summary: format!(
                "stopped unit {} (main pid {main}) in {} ms",
                after.id,
                t0.elapsed().as_millis()
            ),
            facts: after.facts(),
        })
    }

    fn observe(
        &self,
        project: &str,
        c: &Component,
        recorded: Option<&InstanceRecord>,
    ) -> Result<Option<Seen>, ExecError> {
        if let Some(other) = other_project(project, c) {
            return Ok(Some(Seen::foreign(
                format!("unit file {}", unit_name(c)),
                not_ours(c, &other),
            )));
        }
        let st = self.show(c)?;
        let mut evidence = vec![(format!("systemctl show {}", st.id), st.describe())];
        let mut lifecycle = st.lifecycle();
        let mut main = None;
        let mut recorded_main = false;
        if st.main_pid != 0 {
            match identity::measure(st.main_pid)? {
                Some(m) => {
                    if let Some(rec) = recorded {
                        recorded_main = identity::matches(&RuntimeIdentity::from(rec), Some(&m))
                            == identity::IdentityMatch::Same;
                        if !recorded_main {
                            evidence.push((
                                format!("/proc/{}", m.pid),
                                format!(
                                    "the unit's main process is pid {}, not pid {} that Flotilla started ({} by {}); systemd restarted it on its own {} time(s) (NRestarts)",
                                    m.pid, rec.pid, rec.started_at_ms, rec.operation, st.n_restarts
                                ),
                            ));
                        }
                    }
                    main = Some(m);
                }
                None => lifecycle = Lifecycle::Unknown,
            }
        }
        if st.load_state == "not-found" && !owns_unit(c) {
            lifecycle = Lifecycle::Unknown;
            evidence.push((
                "systemctl".into(),
                format!("unit {} does not exist on this host", st.id),
            ));
        }
        Ok(Some(Seen {
            lifecycle,
            main,
            recorded_main,
            owner_restarts: Some(st.n_restarts),
            evidence,
            fresh: None,
            foreign: None,
        }))
    }
}

/// A start or restart of a unit another project wrote: refused, nothing touched.
fn refuse_other_project(launch: &Launch) -> Result<(), ExecError> {
    let c = &launch.component;
    match other_project(&launch.project, c) {
        Some(other) => Err(ExecError::Adapter {
            component: c.name.clone(),
            message: not_ours(c, &other),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_output_is_parsed() {
        let st = UnitState::parse(
            "Id=llm.service\nLoadState=loaded\nActiveState=active\nSubState=running\nResult=success\nMainPID=4242\nNRestarts=2\nExecMainStartTimestampMonotonic=123456\nExecMainStatus=0\n",
        );
        assert_eq!(st.id, "llm.service");
        assert_eq!(st.main_pid, 4242);
        assert_eq!(st.n_restarts, 2);
        assert_eq!(st.lifecycle(), Lifecycle::Running);
        let failed = UnitState::parse("ActiveState=failed\nSubState=failed\nMainPID=0\n");
        assert_eq!(failed.lifecycle(), Lifecycle::Failed);
        let starting = UnitState::parse("ActiveState=activating\nSubState=auto-restart\n");
        assert_eq!(starting.lifecycle(), Lifecycle::Starting);
    }

    fn launch(restart: &str) -> Launch {
        use flotilla_model::{validate, Format, SourceFile, Sources};
        let toml = format!(
            "[components.llm]\nadapter = \"systemd\"\ncommand = [\"llm\", \"--port\", \"8080\"]\n{restart}\n"
        );
        let mut sources = Sources::new();
        let id = sources.add(SourceFile::new("flotilla.toml", Format::Toml, toml));
        let t = validate(&sources, id, &[]).expect("valid").topology;
        Launch {
            component: t.components[0].clone(),
            argv: vec!["llm".into(), "--port".into(), "8080".into()],
            env: Vec::new(),
            cwd: "/srv".into(),
            log_path: "/state/logs/llm.log".into(),
            log_max_bytes: 0,
            log_keep: 0,
            state_root: "/state".into(),
            start_note: String::new(),
            project: "test".into(),
            operation: "op-1".into(),
            secret_files: Vec::new(),
            cancel: Default::default(),
        }
    }

    /// Without a restart policy the unit is what Flotilla always wrote (no
    /// `Restart=`, no start limit); with one, systemd supervises.
    #[test]
    fn units_carry_the_restart_policy_only_when_there_is_one() {
        let render = |restart: &str| {
            render_unit(
                &launch(restart),
                Path::new("/usr/bin/llm"),
                Path::new("/state/run/llm.env"),
            )
        };
        assert_eq!(
            render(""),
            "# Written by flotilla for component `llm`; it is rewritten at each start.\n\
             [Unit]\n\
             Description=flotilla component `llm`\n\
             X-Flotilla-Project=test\n\
             \n\
             [Service]\n\
             Type=exec\n\
             ExecStart=\"/usr/bin/llm\" \"--port\" \"8080\"\n\
             WorkingDirectory=/srv\n\
             EnvironmentFile=/state/run/llm.env\n\
             StandardInput=null\n\
             StandardOutput=append:/state/logs/llm.log\n\
             StandardError=append:/state/logs/llm.log\n\
             KillMode=control-group\n\
             KillSignal=SIGTERM\n\
             TimeoutStopSec=10000ms\n\
             SendSIGKILL=yes\n"
        );
        let on_failure = render("restart = { backoff = \"2s\", max_restarts = 3 }");
        assert!(
            on_failure.contains(
                "Description=flotilla component `llm`\nX-Flotilla-Project=test\nStartLimitIntervalSec=14000ms\nStartLimitBurst=4\n\n[Service]\n"
            ),
            "{on_failure}"
        );
        assert!(
            on_failure.ends_with("SendSIGKILL=yes\nRestart=on-failure\nRestartSec=2000ms\n"),
            "{on_failure}"
        );
        let always = render("restart = { policy = \"always\" }");
        assert!(
            always.contains("Restart=always\nRestartSec=1000ms\n"),
            "{always}"
        );
        // 1+2+4+…+256 s, then 300 s (the default max_backoff) for the tenth.
        assert!(always.contains("StartLimitIntervalSec=811000ms\nStartLimitBurst=11\n"));
        for never in [
            "restart = { policy = \"never\" }",
            "restart = { policy = \"always\", max_restarts = 0 }",
        ] {
            let unit = render(never);
            assert!(unit.contains("Restart=no\n"), "{unit}");
            assert!(!unit.contains("StartLimit"), "{unit}");
        }
        // A short schedule still gets systemd's default 10 s window.
        let quick = render("restart = { backoff = \"100ms\", max_restarts = 2 }");
        assert!(quick.contains("StartLimitIntervalSec=10000ms\nStartLimitBurst=3\n"));
    }

    #[test]
    fn words_are_quoted_for_systemd() {
        assert_eq!(quote_word("a b"), "\"a b\"");
        assert_eq!(quote_word("50%"), "\"50%%\"");
        assert_eq!(quote_word("$HOME"), "\"$$HOME\"");
        assert_eq!(quote_word("say \"hi\"\\"), "\"say \\\"hi\\\"\\\\\"");
        assert_eq!(
            render_env_file(&[("A".into(), "x\"$y`\\".into())])
                .lines()
                .nth(1),
            Some("A=\"x\\\"\\$y\\`\\\\\"")
        );
    }
}
