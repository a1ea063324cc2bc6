//! Adapters: how a managed component's lifecycle verbs map onto its native owner.
//!
//! One module per adapter: [`process`] (a detached process group Flotilla starts
//! itself), [`ssh_tunnel`] (an OpenSSH forward run like a process), [`external`]
//! (observed only), [`systemd`] (a unit driven through `systemctl`), [`container`] (a
//! container driven through a container engine's API) and [`launchd`]
//! (a job driven through `launchctl`). The executor and the observer reach them only
//! through the [`Adapter`] trait and [`Adapters::for_component`]: they know no
//! adapter by name.
//!
//! Every method is blocking (adapters run programs such as `systemctl` and read
//! `/proc`); async callers use `spawn_blocking`. An adapter never decides whether a
//! start *worked*: it reports the identity it measured, and the executor proves a
//! restart (a new process running the expected executable) and readiness itself.

pub mod container;
pub mod external;
pub mod launchd;
pub mod process;
pub mod ssh_tunnel;
pub mod systemd;

use crate::error::ExecError;
use crate::identity::RuntimeIdentity;
use crate::process::ChildWatch;
use flotilla_model::inventory::{AdapterKind, Owner};
use flotilla_model::status::Lifecycle;
use flotilla_model::topology::Component;
use flotilla_model::Topology;
use flotilla_store::InstanceRecord;
use std::path::PathBuf;
use std::sync::Arc;

/// Everything an adapter needs to start (or restart) one component, resolved by the
/// executor: argv, environment (secret values included: never log it), directories.
#[derive(Clone)]
pub struct Launch {
    /// The component.
    pub component: Component,
    /// argv: program, then arguments (see [`Adapter::argv`]).
    pub argv: Vec<String>,
    /// The declared environment, resolved, plus Flotilla's instance marker. Adapters
    /// that start a process themselves add it to the inherited environment; service
    /// managers give the job exactly this.
    pub env: Vec<(String, String)>,
    /// Working directory (absolute).
    pub cwd: PathBuf,
    /// Where stdout and stderr go.
    pub log_path: PathBuf,
    /// Rotate the log above this many bytes at start (0: never).
    pub log_max_bytes: u64,
    /// Rotated copies kept.
    pub log_keep: u32,
    /// The state directory's root (unit environment files live under `run/`).
    pub state_root: PathBuf,
    /// Appended to `started pid N` in the start marker, e.g. `, replacing pid 41
    /// (op-12)`.
    pub start_note: String,
    /// The project (what a container's `io.flotilla.project` label says).
    pub project: String,
    /// The operation starting it (`op-12`).
    pub operation: String,
    /// The values of the secrets the component receives as files (a container's
    /// `secrets`), by name, resolved on this host: never log them.
    pub secret_files: Vec<(String, String)>,
    /// Cancelled when the operation is interrupted: an adapter that waits (a
    /// cluster's rollout) stops waiting and fails.
    pub cancel: tokio_util::sync::CancellationToken,
}

impl std::fmt::Debug for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launch")
            .field("component", &self.component.name)
            .field("argv", &self.argv)
            .field(
                "env",
                &self.env.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            )
            .field("cwd", &self.cwd)
            .field("log_path", &self.log_path)
            .finish()
    }
}

/// A component just started by an adapter.
#[derive(Debug)]
pub struct Launched {
    /// The measured identity of its main process (record it: stop and observe compare
    /// against it).
    pub identity: RuntimeIdentity,
    /// Size of the log when it started, so `log` probes only read this run's lines.
    pub log_start_offset: u64,
    /// Watches the main process when this process is its parent (`None` when a service
    /// manager is: the executor then checks the identity instead).
    pub child: Option<ChildWatch>,
    /// What the adapter did and saw (e.g. `{"unit": "x.service", "n_restarts": 0}`).
    pub facts: serde_json::Value,
    /// Whether the start marker is already in the log (the process adapter's log
    /// writer puts it before the first line); when not, the executor writes it.
    pub start_marked: bool,
}

/// How a stop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// It was running and is not any more.
    Stopped {
        /// One line, e.g. `stopped pid 42 with SIGTERM in 12 ms`.
        summary: String,
        /// Details (signal, escalation, unit state…).
        facts: serde_json::Value,
    },
    /// Nothing was running.
    AlreadyGone {
        /// One line.
        summary: String,
    },
    /// The recorded pid belongs to another process now: nothing was signalled.
    NotOurs {
        /// What differs.
        why: String,
        /// Details.
        facts: serde_json::Value,
    },
}

/// What an adapter sees of a component now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Running, stopped, failed…
    pub lifecycle: Lifecycle,
    /// The main process, measured (when running).
    pub main: Option<RuntimeIdentity>,
    /// Whether the running main process is the one Flotilla recorded (`false`: its
    /// owner replaced it, e.g. systemd's `Restart=`; or nothing was recorded).
    pub recorded_main: bool,
    /// Restarts its owner made on its own (systemd's `NRestarts`, launchd's `runs`−1).
    pub owner_restarts: Option<u64>,
    /// Evidence: `(source, what was seen)`.
    pub evidence: Vec<(String, String)>,
    /// Whether what runs is still what its source names now, when the owner measured
    /// that itself (a container: the digest its image reference names now); `None`:
    /// the executable on disk is compared, as for any process.
    pub fresh: Option<Freshness>,
    /// What holds the component's place and is not its own (a container of its name
    /// another project or nobody labelled, a unit file or job another project
    /// wrote): never touched, and a start is refused up front ([`Seen::foreign`]).
    pub foreign: Option<String>,
}

impl Seen {
    /// The component's place is held by something not its own (`saw` says what): it
    /// does not run as this component, and a plan refuses to start it.
    pub fn foreign(source: impl Into<String>, saw: impl Into<String>) -> Seen {
        let saw = saw.into();
        Seen {
            foreign: Some(saw.clone()),
            ..Seen::stopped(source, saw)
        }
    }

    /// Nothing of it runs: stopped, with where that was seen and what was seen.
    pub fn stopped(source: impl Into<String>, saw: impl Into<String>) -> Seen {
        Seen {
            lifecycle: Lifecycle::Stopped,
            main: None,
            recorded_main: false,
            owner_restarts: None,
            evidence: vec![(source.into(), saw.into())],
            fresh: None,
            foreign: None,
        }
    }
}

/// What an owner measured of whether the running instance is still what its source
/// names (see [`Seen::fresh`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Freshness {
    /// The digest the source names now (e.g. the image a tag points at), when known.
    pub current: Option<String>,
    /// When it is not what runs: `(source, what was seen)` (`stale-runtime`).
    pub stale: Option<(String, String)>,
}

/// One native owner of components' lifecycles.
pub trait Adapter: Send + Sync {
    /// Which adapter this is (for ownership: `managed (systemd)`).
    fn kind(&self) -> Option<AdapterKind>;

    /// The argv a start runs: the component's `command` unless the adapter makes its
    /// own (an `ssh-tunnel`'s `ssh -N -L …`).
    ///
    /// # Errors
    /// A message naming what is missing.
    fn argv(&self, c: &Component, _topology: &Topology) -> Result<Vec<String>, String> {
        Ok(c.command.clone())
    }

    /// Starts `launch.component` and measures its main process.
    ///
    /// # Errors
    /// Anything that kept it from starting, naming the component.
    fn start(&self, launch: &Launch) -> Result<Launched, ExecError>;

    /// Stops `c` of `project`, whose recorded instance (if any) is `recorded`. Identity
    /// before signal (invariant 5): a process whose identity does not match is not
    /// touched, nor is what another project owns under the same name.
    ///
    /// # Errors
    /// When it could not be stopped.
    fn stop(
        &self,
        project: &str,
        c: &Component,
        recorded: Option<&InstanceRecord>,
    ) -> Result<Stopped, ExecError>;

    /// Replaces the running instance with a new one. The default stops, then starts;
    /// service managers use their own restart verb. The executor proves the result.
    ///
    /// # Errors
    /// As [`Adapter::stop`] and [`Adapter::start`].
    fn restart(
        &self,
        launch: &Launch,
        recorded: Option<&InstanceRecord>,
    ) -> Result<Launched, ExecError> {
        match self.stop(&launch.project, &launch.component, recorded)? {
            Stopped::NotOurs { why, .. } => Err(ExecError::Adapter {
                component: launch.component.name.clone(),
                message: format!("not restarted: the recorded pid is not ours ({why})"),
            }),
            _ => self.start(launch),
        }
    }

    /// How the instance with `identity` (as this adapter's start measured it) ended:
    /// `Some(how)` once it no longer runs, `None` while it does or when that cannot
    /// be told. The default measures the process through `/proc`.
    fn ended(&self, _c: &Component, identity: &RuntimeIdentity) -> Option<String> {
        match crate::identity::verify(identity) {
            Ok((crate::identity::IdentityMatch::Same, _)) => None,
            Ok((crate::identity::IdentityMatch::Gone, _)) => {
                Some(format!("pid {} exited", identity.pid))
            }
            Ok((crate::identity::IdentityMatch::Reused { why }, _)) => Some(why),
            Err(_) => None,
        }
    }

    /// Whether `after` proves a restart of what ran as `before` (see
    /// [`crate::identity::prove_restart`], the default); `Err` says what did not happen.
    ///
    /// # Errors
    /// A sentence naming what is unchanged.
    fn prove_restart(
        &self,
        _c: &Component,
        before: Option<&RuntimeIdentity>,
        after: &RuntimeIdentity,
    ) -> Result<(), String> {
        crate::identity::prove_restart(before, after)
    }

    /// Copies what the owner keeps of `c`'s output (a container's engine, a
    /// cluster's pods) since the last copy into its log at `log`, so that `flotilla
    /// logs` and a failure's log tail show it: how many lines, or why not. `None`
    /// (the default): the process writes its log itself, there is nothing to copy.
    fn collect_log(
        &self,
        _project: &str,
        _c: &Component,
        _log: &std::path::Path,
    ) -> Option<Result<usize, String>> {
        None
    }

    /// What `process` and `container_health` checks of `c` (of `project`) ask of its
    /// owner instead of `/proc` (a container's engine); `None`: they measure the process.
    fn owner_checks(
        &self,
        _project: &str,
        _c: &Component,
    ) -> Option<Arc<dyn crate::probe::OwnerChecks>> {
        None
    }

    /// What `flotilla check` asks of the owner before a start, as `(what, ok, saw)`
    /// findings, when the owner is reached through an API of its own (a cluster) and
    /// nothing of `c` runs on this machine; `None` (the default): the component's
    /// program, directories and ports here are checked.
    fn preflight(&self, _project: &str, _c: &Component) -> Option<Vec<(String, bool, String)>> {
        None
    }

    /// What runs now of `c` of `project`. `None`: the adapter keeps no state of its
    /// own, and the journal's instance record is the truth (process-family adapters;
    /// the observer measures it).
    ///
    /// # Errors
    /// When the owner cannot be asked (e.g. `systemctl` missing).
    fn observe(
        &self,
        _project: &str,
        _c: &Component,
        _recorded: Option<&InstanceRecord>,
    ) -> Result<Option<Seen>, ExecError> {
        Ok(None)
    }
}

/// The `kubernetes` adapter given to [`Adapters::install_kubernetes`].
static KUBERNETES: std::sync::OnceLock<Arc<dyn Adapter>> = std::sync::OnceLock::new();

/// The adapters of this build, looked up by a component's owner and adapter kind.
#[derive(Clone)]
pub struct Adapters {
    process: Arc<dyn Adapter>,
    ssh_tunnel: Arc<dyn Adapter>,
    external: Arc<dyn Adapter>,
    systemd: Arc<dyn Adapter>,
    launchd: Arc<dyn Adapter>,
    container: Arc<dyn Adapter>,
    kubernetes: Arc<dyn Adapter>,
}

impl Default for Adapters {
    fn default() -> Self {
        Adapters::native()
    }
}

impl Adapters {
    /// The adapters that drive this machine's own owners (`launchctl` and `systemctl`
    /// from `PATH`, or from `FLOTILLA_LAUNCHCTL` / `FLOTILLA_SYSTEMCTL`).
    pub fn native() -> Adapters {
        Adapters {
            process: Arc::new(process::Process),
            ssh_tunnel: Arc::new(ssh_tunnel::SshTunnel),
            external: Arc::new(external::External),
            systemd: Arc::new(systemd::Systemd::from_env()),
            launchd: Arc::new(launchd::Launchd::from_env()),
            container: Arc::new(container::Container),
            kubernetes: KUBERNETES
                .get()
                .cloned()
                .unwrap_or_else(|| Arc::new(NotBuiltIn(AdapterKind::Kubernetes))),
        }
    }

    /// Makes `a` the `kubernetes` adapter of every [`Adapters::native`] made after it
    /// in this process (the binary installs `flotilla-kube`'s at start, before any
    /// executor runs); a second call is ignored.
    pub fn install_kubernetes(a: Arc<dyn Adapter>) {
        let _ = KUBERNETES.set(a);
    }

    /// Sets the `kubernetes` adapter (it lives in its own crate, `flotilla-kube`,
    /// which the binary links; without it such components fail to start, saying so).
    pub fn with_kubernetes(mut self, a: Arc<dyn Adapter>) -> Adapters {
        self.kubernetes = a;
        self
    }

    /// Replaces the launchd adapter (tests drive a fake `launchctl` this way).
    pub fn with_launchd(mut self, a: Arc<dyn Adapter>) -> Adapters {
        self.launchd = a;
        self
    }

    /// The adapter that owns `c`'s lifecycle.
    pub fn for_component(&self, c: &Component) -> &Arc<dyn Adapter> {
        if c.owner == Owner::External {
            return &self.external;
        }
        match c.adapter.unwrap_or_default() {
            AdapterKind::Process => &self.process,
            AdapterKind::SshTunnel => &self.ssh_tunnel,
            AdapterKind::Systemd => &self.systemd,
            AdapterKind::Launchd => &self.launchd,
            AdapterKind::Container => &self.container,
            AdapterKind::Kubernetes => &self.kubernetes,
        }
    }
}

/// The stand-in for an adapter this executor was not given (see
/// [`Adapters::with_kubernetes`]): every verb fails, naming it.
struct NotBuiltIn(AdapterKind);

impl NotBuiltIn {
    fn err(&self, c: &Component) -> ExecError {
        ExecError::Adapter {
            component: c.name.clone(),
            message: format!(
                "the `{}` adapter is not part of this executor",
                self.0.as_str()
            ),
        }
    }
}

impl Adapter for NotBuiltIn {
    fn kind(&self) -> Option<AdapterKind> {
        Some(self.0)
    }

    fn start(&self, launch: &Launch) -> Result<Launched, ExecError> {
        Err(self.err(&launch.component))
    }

    fn stop(
        &self,
        _project: &str,
        c: &Component,
        _recorded: Option<&InstanceRecord>,
    ) -> Result<Stopped, ExecError> {
        Err(self.err(c))
    }

    fn observe(
        &self,
        _project: &str,
        c: &Component,
        _recorded: Option<&InstanceRecord>,
    ) -> Result<Option<Seen>, ExecError> {
        Err(self.err(c))
    }
}

/// The program named by the environment variable `var`, else `default` (looked up in
/// `PATH` when run).
pub(crate) fn program_from_env(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default))
}

/// Writes `bytes` to `path` (mode `mode`, its directory created) through a temporary
/// file renamed into place, unless it already holds exactly them; `Ok(true)` when it
/// wrote.
pub(crate) fn write_if_changed(
    path: &std::path::Path,
    bytes: &[u8],
    mode: u32,
) -> Result<bool, ExecError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |source| ExecError::Io {
        path: path.to_path_buf(),
        source,
    };
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let tmp = path.with_extension("flotilla-tmp");
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    Ok(true)
}

/// The size of the file at `p` in bytes (0 when it does not exist).
pub(crate) fn file_len(p: &std::path::Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// `c`'s stop signal and grace period (managed components always have them; the
/// fallback is SIGTERM and 10 s).
pub fn stop_settings(c: &Component) -> (String, std::time::Duration) {
    c.stop
        .as_ref()
        .map(|s| (s.signal.as_str().to_string(), s.grace_period.0))
        .unwrap_or_else(|| ("SIGTERM".into(), std::time::Duration::from_secs(10)))
}

/// Runs `program args…`, returning stdout; a non-zero exit is an
/// [`ExecError::OwnerCommand`] carrying the command line, status and stderr.
pub(crate) fn run_owner_command(
    component: &str,
    program: &std::path::Path,
    args: &[String],
) -> Result<String, ExecError> {
    run_owner_command_with(component, program, args, &[])
}

/// [`run_owner_command`] with `env` added to the command's environment.
pub(crate) fn run_owner_command_with(
    component: &str,
    program: &std::path::Path,
    args: &[String],
    env: &[(&str, std::ffi::OsString)],
) -> Result<String, ExecError> {
    let out = std::process::Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| ExecError::Spawn {
            component: component.to_string(),
            program: program.to_path_buf(),
            source,
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(ExecError::OwnerCommand {
            component: component.to_string(),
            command: std::iter::once(program.display().to_string())
                .chain(args.iter().cloned())
                .collect::<Vec<_>>()
                .join(" "),
            status: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}
