//! `flotilla agent join|run|unit|install|uninstall`: join an authority, run the agent
//! (desired state from the authority or from a local inventory; self-update from the
//! authority's release assignments), print the systemd unit / launchd plist that
//! starts it at boot, or install this binary into an install root (and remove it). The
//! hidden `agent update-watch` is the self-update watchdog the agent starts. The agent
//! itself is `flotilla_agent`; this file parses arguments and hands it the CLI's
//! inventory loader.

use crate::{load, render, Cli, EXIT_OK, EXIT_USAGE};
use flotilla_agent::authority::{AuthorityReporter, AuthoritySource};
use flotilla_agent::state::AgentDir;
use flotilla_agent::supervisor::Supervisor;
use flotilla_agent::update::{self, NoAuthority, ReleaseSource, Updater, UpdaterConfig};
use flotilla_agent::{
    Agent, AgentConfig, AgentError, InventoryLoader, LoadError, LoadedInventory, LocalInventory,
    LocalReporter,
};
use flotilla_release::InstallRoot;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Arguments of `flotilla agent`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: AgentCommand,
}

/// `flotilla agent` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum AgentCommand {
    /// Join an authority: check its CA against --ca-hash, exchange the one-time join
    /// TOKEN (from `flotilla serve token create`) for this agent's credential, and
    /// keep both in <state>/agent/agent.json (owner-only).
    Join(JoinArgs),
    /// Keep this host converged to its desired state: start what should run, stop
    /// what was removed, restart what changed (each a journaled operation), restart
    /// crashed `process` components by their `restart` policy, report status and
    /// drift (<state>/agent/status.json). Runs until SIGTERM or Ctrl-C; the components
    /// keep running after it. Never listens on a port.
    Run(RunArgs),
    /// Print the unit that runs `flotilla agent run` at boot with this binary
    /// (`<root>/current/flotilla` when it runs from an install root, so that
    /// self-updates take effect): a systemd system unit as root or with --user, else
    /// the invoking user's unit (Linux); a launchd plist (macOS, --launchd).
    Unit(UnitArgs),
    /// Copy this binary into an install root as its current version
    /// (<root>/versions/<version>-<sha12>/flotilla, <root>/current → it), the layout
    /// self-update works in; prints how to run the agent from it.
    Install(InstallArgs),
    /// Remove what `agent install` and self-updates put in an install root (versions,
    /// current, previous, downloads, skip list, update record) and nothing else; the
    /// agent's state and logs (<state>/agent/) are kept unless --purge.
    Uninstall(UninstallArgs),
    /// The self-update watchdog (started by the agent): flip, restart through the
    /// supervisor, prove the new process by measured identity, soak, roll back.
    #[command(hide = true)]
    UpdateWatch(UpdateWatchArgs),
}

/// Arguments of `flotilla agent install`.
#[derive(clap::Args, Debug)]
pub struct InstallArgs {
    /// The install root.
    #[arg(long, value_name = "DIR")]
    pub root: PathBuf,
}

/// Arguments of `flotilla agent uninstall`.
#[derive(clap::Args, Debug)]
pub struct UninstallArgs {
    /// The install root.
    #[arg(long, value_name = "DIR")]
    pub root: PathBuf,
    /// Also remove the agent's state and logs (<state>/agent/).
    #[arg(long)]
    pub purge: bool,
}

/// Arguments of `flotilla agent update-watch`.
#[derive(clap::Args, Debug)]
pub struct UpdateWatchArgs {
    /// The install root whose update.json to carry out.
    #[arg(long, value_name = "DIR")]
    pub root: PathBuf,
    /// What supervises the agent (as `agent run --supervisor`; `auto` detects it in
    /// this process's own environment).
    #[arg(long, default_value = "none", value_name = "SUPERVISOR")]
    pub supervisor: String,
}

/// Arguments of `flotilla agent join`.
#[derive(clap::Args, Debug)]
pub struct JoinArgs {
    /// The authority's URL (`https://host:port`), or several authorities' URLs
    /// separated by commas: the agent sticks to one and fails over to the next.
    pub url: String,
    /// The join token.
    pub token: String,
    /// The pin of the authority's CA (`sha256:<hex>`, printed by `flotilla serve
    /// init` and `serve token create`); the join is refused if the CA differs.
    #[arg(long, value_name = "sha256:…")]
    pub ca_hash: String,
}

/// Arguments of `flotilla agent run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Take the desired state from this inventory file (re-read when it changes; an
    /// invalid edit is reported and the last good state kept). Default: -f/--file.
    #[arg(long, value_name = "FILE")]
    pub inventory: Option<PathBuf>,
    /// The inventory host this agent runs for.
    #[arg(long, default_value = "local", value_name = "NAME")]
    pub host: String,
    /// Authority mode: how long each snapshot long poll may wait for a new revision.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub wait: Duration,
    /// How often to look at the inventory file.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub poll: Duration,
    /// How often to observe the components (supervision and drift look then).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub check_every: Duration,
    /// Report at least this often, even when nothing changed (keep it well under the
    /// authority's `serve --report-deadline`, 45 s by default).
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub report_every: Duration,
    /// How long each started component may take to become ready.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
    /// Self-update: the install root this agent runs from (default: the root of this
    /// binary when it is `<root>/versions/<v>/flotilla`; without one, releases are
    /// refused).
    #[arg(long, value_name = "DIR")]
    pub install_root: Option<PathBuf>,
    /// Self-update: a minisign public key releases must be signed with (once or twice:
    /// current and next). Default: <state>/agent/trusted-keys/*.pub.
    #[arg(long, value_name = "FILE")]
    pub trusted_key: Vec<PathBuf>,
    /// Self-update: what supervises this agent, to restart it through:
    /// `auto` (systemd when INVOCATION_ID is set, launchd when XPC_SERVICE_NAME is,
    /// else none), `systemd:UNIT`, `systemd:user:UNIT`, `launchd:DOMAIN/LABEL`, `none`
    /// (run by hand: the update watchdog starts the new agent itself).
    #[arg(long, default_value = "auto", value_name = "SUPERVISOR")]
    pub supervisor: String,
    /// Self-update: the backup of this host's projects taken before an update.
    #[command(flatten)]
    pub backups: super::backup::AutoArgs,
}

/// Arguments of `flotilla agent unit`.
#[derive(clap::Args, Debug)]
pub struct UnitArgs {
    /// The inventory the agent takes its desired state from (made absolute; default:
    /// -f/--file). Without one, the agent runs in authority mode (after `flotilla
    /// agent join`).
    #[arg(long, value_name = "FILE")]
    pub inventory: Option<PathBuf>,
    /// The inventory host the agent runs for.
    #[arg(long, default_value = "local", value_name = "NAME")]
    pub host: String,
    /// Print a launchd LaunchAgent plist (the default on macOS).
    #[arg(long, conflicts_with = "systemd")]
    pub launchd: bool,
    /// Print a systemd unit (the default elsewhere): a system unit when run as
    /// root or with --user, else the invoking user's unit.
    #[arg(long)]
    pub systemd: bool,
    /// A system unit that runs the agent as this user (`User=`).
    #[arg(long, value_name = "NAME", conflicts_with = "launchd")]
    pub user: Option<String>,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    match &args.command {
        AgentCommand::Join(a) => join(cli, a),
        AgentCommand::Run(a) => run_agent(cli, a),
        AgentCommand::Unit(a) => unit(cli, a),
        AgentCommand::Install(a) => install(a),
        AgentCommand::Uninstall(a) => uninstall(cli, a),
        AgentCommand::UpdateWatch(a) => update_watch(cli, a),
    }
}

/// The CLI's inventory loader: the inventory and its templates, validated,
/// diagnostics printed, the project resolved as every other verb does (`-p`, else the
/// inventory's `project`, else its directory's name).
fn loader(project: Option<String>) -> impl InventoryLoader {
    move |path: &Path| {
        let mut loaded = load::load(path).map_err(|e| LoadError::Unreadable(format!("{e:#}")))?;
        match std::mem::replace(&mut loaded.result, Err(Vec::new())) {
            Ok(mut v) => {
                render::diagnostics(&loaded.sources, &v.warnings);
                let project = match (&project, &v.topology.project) {
                    (Some(p), _) | (None, Some(p)) => p.clone(),
                    (None, None) => flotilla_model::topology::project_from_dir_name(
                        &loaded
                            .base_dir
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                    ),
                };
                v.topology.set_project(project);
                Ok(LoadedInventory {
                    topology: v.topology,
                    base_dir: loaded.base_dir,
                    files: loaded
                        .sources
                        .iter()
                        .map(|(_, f)| PathBuf::from(&f.name))
                        .collect(),
                })
            }
            Err(diags) => {
                render::diagnostics(&loaded.sources, &diags);
                let errors: Vec<&flotilla_model::Diagnostic> = diags
                    .iter()
                    .filter(|d| d.severity == flotilla_model::Severity::Error)
                    .collect();
                Err(LoadError::Invalid(format!(
                    "{} error{}, the first: {}",
                    errors.len(),
                    if errors.len() == 1 { "" } else { "s" },
                    errors.first().map(|d| d.message.as_str()).unwrap_or("")
                )))
            }
        }
    }
}

/// `-p` when it is a valid project name; prints the error otherwise.
fn project_arg(cli: &Cli) -> Result<Option<String>, u8> {
    match &cli.project {
        Some(p) if !flotilla_model::topology::valid_project_name(p) => {
            eprintln!("error: `{p}` is not a project name (-p/FLOTILLA_PROJECT): use lowercase letters, digits, `-` and `_` (at most 63, starting with a letter or digit)");
            Err(EXIT_USAGE)
        }
        p => Ok(p.clone()),
    }
}

fn join(cli: &Cli, a: &JoinArgs) -> anyhow::Result<u8> {
    let dir = AgentDir::resolve(cli.state_dir.as_deref())?;
    let rt = super::runtime()?;
    let (pem, joined) = rt.block_on(async {
        let pem = flotilla_api::Client::discover_ca(&a.url, &a.ca_hash).await?;
        let joined = flotilla_api::Client::new(&a.url, &pem, None)?
            .join(&flotilla_api::wire::JoinRequest {
                token: a.token.trim().to_string(),
                agent_version: flotilla_exec::remote::VERSION.into(),
                platform: flotilla_exec::remote::this_platform(),
            })
            .await?;
        Ok::<_, flotilla_api::ClientError>((pem, joined))
    })?;
    dir.save_enrollment(&flotilla_agent::state::Enrollment {
        server: flotilla_api::client::server_addresses(&a.url)?.join(","),
        host: joined.host.clone(),
        credential: joined.credential,
        ca_pem: pem,
    })?;
    println!(
        "joined {} as host `{}`; credential in {}",
        a.url,
        joined.host,
        dir.enrollment_file().display()
    );
    println!("next: flotilla agent run   (or install `flotilla agent unit` to start it at boot)");
    Ok(EXIT_OK)
}

fn run_agent(cli: &Cli, a: &RunArgs) -> anyhow::Result<u8> {
    let project = match project_arg(cli) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    // The binary's log (`--log-format`, `FLOTILLA_LOG`); a write error to standard
    // error is dropped there, so the agent keeps running when its reader goes away.
    let log: flotilla_agent::Log = Arc::new(|line: &str| tracing::info!("{line}"));
    let dir = AgentDir::resolve(cli.state_dir.as_deref())?;
    let updates = match updater_config(cli, a, &dir, Arc::clone(&log)) {
        Ok(u) => u,
        Err(code) => return Ok(code),
    };
    // First of all: an update of this agent in progress may run another version.
    if let Some(root) = &updates.root {
        flotilla_agent::launch::before_start(
            root,
            &updates.state_dir,
            &dir,
            &updates.supervisor,
            &log,
        );
    }
    let _one_agent = match dir.lock() {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            eprintln!("error: {e}");
            return Ok(crate::EXIT_REFUSED);
        }
        Err(e) => return Err(e.into()),
    };
    let local = LocalReporter::new(dir.status_file(), Arc::clone(&log));
    let rt = super::runtime()?;
    let Some(inventory) = a.inventory.as_ref().or(cli.file.as_ref()) else {
        // Authority mode: the enrollment `agent join` wrote.
        let Some(e) = dir.load_enrollment()? else {
            eprintln!(
                "error: no desired-state source: pass --inventory FILE, or join an authority first (`flotilla agent join URL TOKEN --ca-hash sha256:…`, which writes {})",
                dir.enrollment_file().display()
            );
            return Ok(EXIT_USAGE);
        };
        if a.host != "local" && a.host != e.host {
            eprintln!(
                "error: this agent joined as host `{}` ({}): --host {} does not apply (join again for another host)",
                e.host,
                dir.enrollment_file().display(),
                a.host
            );
            return Ok(EXIT_USAGE);
        }
        let client = Arc::new(flotilla_api::Client::new(
            &e.server,
            &e.ca_pem,
            Some(e.credential.clone()),
        )?);
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/"));
        let source = AuthoritySource::new(Arc::clone(&client), &e.host, a.wait, home);
        let reporter = AuthorityReporter::new(Arc::clone(&client), &e.host, local);
        let cfg = config(cli, a, &e.host, Arc::clone(&log));
        let updater = start_updater(updates, &e.host, Arc::clone(&client), &log);
        // Beside converging: the calls controllers queue for this host (`--server`).
        let calls = flotilla_agent::authority::serve_calls(
            client,
            e.host.clone(),
            cli.state_dir.clone(),
            log,
            shutdown(),
        );
        return finish(rt.block_on(async {
            let (result, (), ()) = tokio::join!(
                Agent::new(cfg, source, reporter).run(shutdown()),
                calls,
                run_updater(updater)
            );
            result
        }));
    };
    let source = LocalInventory::new(inventory, &a.host, loader(project), a.poll)?;
    let cfg = config(cli, a, &a.host, Arc::clone(&log));
    // No authority: nothing is assigned; running.json and reported.json are written.
    let updater = start_updater(updates, &a.host, Arc::new(NoAuthority), &log);
    finish(rt.block_on(async {
        let (result, ()) = tokio::join!(
            Agent::new(cfg, source, local).run(shutdown()),
            run_updater(updater)
        );
        result
    }))
}

/// The self-update settings of `agent run` (the host is set later); the exit status
/// when an argument is unusable.
fn updater_config(
    cli: &Cli,
    a: &RunArgs,
    dir: &AgentDir,
    log: flotilla_agent::Log,
) -> Result<UpdaterConfig, u8> {
    let supervisor = match Supervisor::parse(&a.supervisor) {
        Ok(Some(s)) => s,
        Ok(None) => Supervisor::detect(),
        Err(e) => {
            eprintln!("error: --supervisor: {e}");
            return Err(EXIT_USAGE);
        }
    };
    let keys = match update::load_trusted_keys(&a.trusted_key, dir) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("error: trusted keys: {e}");
            return Err(EXIT_USAGE);
        }
    };
    let root = match &a.install_root {
        Some(r) => match std::path::absolute(r) {
            Ok(r) => Some(InstallRoot::new(r, update::BINARY)),
            Err(e) => {
                eprintln!("error: --install-root {}: {e}", r.display());
                return Err(EXIT_USAGE);
            }
        },
        None => {
            flotilla_exec::sys::self_exe().and_then(|exe| InstallRoot::of_exe(&exe, update::BINARY))
        }
    };
    let base = dir.path().parent().unwrap_or(dir.path());
    Ok(UpdaterConfig {
        host: String::new(),
        dir: dir.clone(),
        state_dir: std::path::absolute(base).unwrap_or_else(|_| base.to_path_buf()),
        root,
        keys,
        supervisor,
        wait: a.wait,
        report_every: a.report_every,
        log,
        watchdog_program: None,
        components: Some(flotilla_agent::component_release::ComponentSettings {
            state_dir: cli.state_dir.clone(),
            ready_timeout: a.timeout,
            host_timeout: cli.host_timeout,
        }),
        backups: Some(a.backups.policy()),
    })
}

/// The every-start duties (running.json, an orphaned update resumed); `None` when this
/// process cannot measure itself (no `/proc`): the agent runs without self-update.
fn start_updater<S: ReleaseSource>(
    mut cfg: UpdaterConfig,
    host: &str,
    source: Arc<S>,
    log: &flotilla_agent::Log,
) -> Option<Updater<S>> {
    cfg.host = host.to_string();
    let what = format!(
        "self-update: {}; supervisor {}; {}",
        match &cfg.root {
            Some(r) => format!("install root {}", r.root().display()),
            None => "no install root (releases are refused)".into(),
        },
        cfg.supervisor,
        match &cfg.keys {
            Some(k) => format!("trusted keys {}", k.key_ids().join(", ")),
            None => "no trusted key (releases are refused)".into(),
        }
    );
    match Updater::start(cfg, source) {
        Ok(u) => {
            log(&what);
            Some(u)
        }
        Err(e) => {
            log(&format!(
                "warning: self-update is off: {}",
                update::chain(&e)
            ));
            None
        }
    }
}

async fn run_updater<S: ReleaseSource>(u: Option<Updater<S>>) {
    match u {
        Some(u) => u.run(shutdown()).await,
        None => shutdown().await,
    }
}

fn config(cli: &Cli, a: &RunArgs, host: &str, log: flotilla_agent::Log) -> AgentConfig {
    AgentConfig {
        host: host.to_string(),
        state_dir: cli.state_dir.clone(),
        ready_timeout: a.timeout,
        check_every: a.check_every,
        report_every: a.report_every,
        host_timeout: cli.host_timeout,
        log,
    }
}

fn finish(result: Result<(), AgentError>) -> anyhow::Result<u8> {
    match result {
        Ok(()) => Ok(EXIT_OK),
        Err(AgentError::NoDesiredState(e)) => {
            eprintln!("error: {e}");
            Ok(EXIT_USAGE)
        }
        Err(e) => Err(e.into()),
    }
}

/// Completes on SIGTERM (a service manager stopping the agent) or SIGINT.
async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn unit(cli: &Cli, a: &UnitArgs) -> anyhow::Result<u8> {
    let project = match project_arg(cli) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let dir = AgentDir::resolve(cli.state_dir.as_deref())?;
    // --inventory, -f, else the inventory of the current directory (as every verb).
    let found = crate::load::inventory_path(None).ok();
    let inventory = match a
        .inventory
        .as_ref()
        .or(cli.file.as_ref())
        .or(found.as_ref())
    {
        Some(i) => {
            let abs = std::path::absolute(i)?;
            // The unit must run: check the inventory and the host now.
            match loader(project.clone()).load(&abs) {
                Ok(l) if l.topology.hosts.contains_key(&a.host) => {}
                Ok(l) => {
                    eprintln!(
                        "error: {} declares no host `{}` (hosts: {})",
                        abs.display(),
                        a.host,
                        super::host_names(&l.topology)
                    );
                    return Ok(EXIT_USAGE);
                }
                Err(e) => {
                    eprintln!("error: {} cannot be used: {e}", abs.display());
                    return Ok(EXIT_USAGE);
                }
            }
            Some(abs)
        }
        None => {
            if dir.load_enrollment()?.is_none() {
                eprintln!(
                    "error: pass --inventory FILE, or join an authority first (`flotilla agent join`, which writes {})",
                    dir.enrollment_file().display()
                );
                return Ok(EXIT_USAGE);
            }
            None
        }
    };
    // Always explicit: the agent must use the journal this CLI uses, whatever the
    // service manager's environment (XDG_STATE_HOME, HOME) says; for another user
    // (--user), that user's own state directory unless one is given.
    let run_as = match &a.user {
        Some(name) => Some(
            nix::unistd::User::from_name(name)
                .ok()
                .flatten()
                .ok_or_else(|| {
                    crate::usage(format!("--user {name}: no such user on this machine"))
                })?,
        ),
        None => None,
    };
    let state_dir = match (&run_as, &cli.state_dir) {
        (Some(user), None) => {
            let name = &user.name;
            if !user.dir.is_dir() {
                eprintln!(
                    "warning: the home of `{name}` ({}) does not exist: pass --state-dir with a directory `{name}` can write",
                    user.dir.display()
                );
            }
            Some(user.dir.join(".local/state/flotilla"))
        }
        _ => Some(super::authority::base_state_dir(cli)?),
    };
    let executable = std::env::current_exe()?;
    let executable = executable.canonicalize().unwrap_or(executable);
    // From an install root, the unit runs `<root>/current/flotilla`: a self-update
    // flips `current`, and the supervisor's restart starts the new version.
    let executable = match InstallRoot::of_exe(&executable, update::BINARY) {
        Some(root) => root.root().join("current").join(update::BINARY),
        None => executable,
    };
    let bin_dir = executable.parent().map(std::path::Path::to_path_buf);
    let spec = flotilla_agent::unit::UnitSpec {
        executable,
        args: flotilla_agent::unit::run_args(
            inventory.as_deref(),
            &a.host,
            state_dir.as_deref(),
            project.as_deref(),
        ),
        path_env: Some(match bin_dir {
            Some(bin) => format!("{}:{}", bin.display(), flotilla_agent::unit::SERVICE_PATH),
            None => flotilla_agent::unit::SERVICE_PATH.to_string(),
        }),
        scope: if a.user.is_some() || nix::unistd::Uid::effective().is_root() {
            flotilla_agent::unit::UnitScope::System {
                user: a.user.clone(),
            }
        } else {
            flotilla_agent::unit::UnitScope::User
        },
        printed_by: shlex::try_join(
            std::env::args()
                .collect::<Vec<_>>()
                .iter()
                .map(String::as_str),
        )
        .unwrap_or_else(|_| "flotilla agent unit".into()),
        log_file: dir.path().join("agent.log"),
        what: match &inventory {
            Some(i) => format!("desired state from {}", i.display()),
            None => "desired state from its authority".into(),
        },
    };
    let launchd = a.launchd || (!a.systemd && cfg!(target_os = "macos"));
    let text = if launchd {
        flotilla_agent::unit::launchd_plist(&spec)
    } else {
        flotilla_agent::unit::systemd_unit(&spec)
    };
    print!("{text}");
    Ok(EXIT_OK)
}

fn install(a: &InstallArgs) -> anyhow::Result<u8> {
    let root = InstallRoot::new(std::path::absolute(&a.root)?, update::BINARY);
    // Never under an update in progress: it owns `current` until it ends.
    match update::UpdateRecord::load(&root) {
        Ok(Some(rec)) if !rec.finished() => {
            eprintln!(
                "error: refused: an update of {} to {} is in progress in {} ({:?}); install again once it ends (`flotilla release status`, or {})",
                rec.name,
                rec.version,
                root.root().display(),
                rec.step,
                root.update_path().display()
            );
            return Ok(crate::EXIT_REFUSED);
        }
        _ => {}
    }
    let before = root.current().map(|v| v.name());
    let exe = std::env::current_exe()?;
    let exe = exe.canonicalize().unwrap_or(exe);
    let v = root.install_binary(&exe, flotilla_exec::remote::VERSION)?;
    if let Some(b) = before.filter(|b| *b != v.name()) {
        println!("current was {b}: now {} (previous: {b})", v.name());
    }
    let current = root.root().join("current").join(update::BINARY);
    println!(
        "installed flotilla {} in {} (current)",
        flotilla_exec::remote::VERSION,
        v.dir.display()
    );
    println!(
        "run the agent as {} so that self-updates take effect; its service definition:",
        current.display()
    );
    println!("  {} agent unit", current.display());
    Ok(EXIT_OK)
}

fn uninstall(cli: &Cli, a: &UninstallArgs) -> anyhow::Result<u8> {
    let root = InstallRoot::new(std::path::absolute(&a.root)?, update::BINARY);
    let dir = AgentDir::resolve(cli.state_dir.as_deref())?;
    // Nothing is removed from under a running agent or watchdog.
    let _agent = match dir.lock() {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            eprintln!("error: {e}: stop the agent first");
            return Ok(crate::EXIT_REFUSED);
        }
        Err(e) => return Err(e.into()),
    };
    let r = root.root();
    // Only what `agent install` makes: `current` pointing into `versions/`, each
    // version a directory holding the binary, nothing else in `versions/`.
    if r.is_dir() {
        if let Err(why) = looks_installed(&root) {
            eprintln!(
                "error: {} is not an install root made by `flotilla agent install` ({why}): nothing removed",
                r.display()
            );
            return Ok(crate::EXIT_REFUSED);
        }
    }
    // Nor from under any process running one of its versions, whichever state
    // directory that agent uses.
    let running = processes_running_from(r);
    if !running.is_empty() {
        eprintln!(
            "error: {} runs from {} (pid {}): stop it first; nothing removed",
            running[0].1.display(),
            r.display(),
            running
                .iter()
                .map(|(p, _)| p.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        return Ok(crate::EXIT_REFUSED);
    }
    if r.is_dir() && update::try_lock(&root)?.is_none() {
        eprintln!(
            "error: an update watchdog works in {} ({}): wait for it to finish",
            r.display(),
            update::lock_path(&root).display()
        );
        return Ok(crate::EXIT_REFUSED);
    }
    let mut removed = Vec::new();
    for name in [
        "current",
        "previous",
        "update.json",
        "update.lock",
        "skip.json",
    ] {
        let p = r.join(name);
        if p.symlink_metadata().is_ok() {
            std::fs::remove_file(&p)?;
            removed.push(p);
        }
    }
    for name in ["versions", "downloads"] {
        let p = r.join(name);
        if p.is_dir() {
            std::fs::remove_dir_all(&p)?;
            removed.push(p);
        }
    }
    // The root itself only when nothing else is in it.
    if r.is_dir() && std::fs::read_dir(r)?.next().is_none() {
        std::fs::remove_dir(r)?;
        removed.push(r.to_path_buf());
    }
    if a.purge && dir.path().is_dir() {
        drop(_agent);
        std::fs::remove_dir_all(dir.path())?;
        removed.push(dir.path().to_path_buf());
    }
    if removed.is_empty() {
        println!("nothing installed in {}", r.display());
    }
    for p in &removed {
        println!("removed {}", p.display());
    }
    if !a.purge {
        println!(
            "kept the agent's state and logs in {} (--purge removes them)",
            dir.path().display()
        );
    }
    Ok(EXIT_OK)
}

/// Whether `root` has only what `agent install` and self-update make: `Err` says what
/// is not.
fn looks_installed(root: &InstallRoot) -> Result<(), String> {
    let r = root.root();
    let versions = r.join("versions");
    let Ok(entries) = std::fs::read_dir(&versions) else {
        return Err(format!("no {} directory", versions.display()));
    };
    for e in entries.flatten() {
        let p = e.path();
        if !p.join(root.binary_name()).is_file() {
            return Err(format!(
                "{} is not a version directory holding `{}`",
                p.display(),
                root.binary_name()
            ));
        }
        let extra = std::fs::read_dir(&p)
            .map(|d| d.flatten().count())
            .unwrap_or(0);
        if extra != 1 {
            return Err(format!(
                "{} holds other files besides `{}`",
                p.display(),
                root.binary_name()
            ));
        }
    }
    match std::fs::read_link(r.join("current")) {
        Ok(t) if t.starts_with("versions") || t.starts_with(&versions) => Ok(()),
        Ok(t) => Err(format!(
            "current points at {}, not into versions/",
            t.display()
        )),
        Err(_) => Err("no `current` link".into()),
    }
}

/// Live processes whose executable lies under `root` (pid, executable), as `/proc`
/// shows them (a deleted file still counts: it is running).
fn processes_running_from(root: &std::path::Path) -> Vec<(u32, PathBuf)> {
    let Ok(root) = std::fs::canonicalize(root) else {
        return Vec::new();
    };
    flotilla_exec::sys::list_pids()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|pid| {
            let exe = flotilla_exec::sys::read_exe_link(pid).ok().flatten()?;
            let path = flotilla_exec::identity::strip_deleted(&exe).to_path_buf();
            (pid != std::process::id() && path.starts_with(&root)).then_some((pid, path))
        })
        .collect()
}

/// How long the watchdog waits for the authority's `/healthz` before it counts the
/// authority as not answering.
const AUTHORITY_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Whether the authority this agent joined answers (`GET /healthz` over its pinned
/// TLS, within [`AUTHORITY_PROBE_TIMEOUT`]); `None` when the agent joined none.
fn authority_probe(
    dir: &AgentDir,
    log: &flotilla_agent::Log,
) -> Option<flotilla_agent::watch::AuthorityProbe> {
    let e = match dir.load_enrollment() {
        Ok(Some(e)) => e,
        Ok(None) => return None,
        Err(e) => {
            log(&format!("enrollment: {e}: the authority is not asked"));
            return None;
        }
    };
    let client = match flotilla_api::Client::new(&e.server, &e.ca_pem, None) {
        Ok(c) => c,
        Err(err) => {
            log(&format!("authority {}: {err}: it is not asked", e.server));
            return None;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Arc::new(rt),
        Err(err) => {
            log(&format!("runtime: {err}: the authority is not asked"));
            return None;
        }
    };
    Some(Arc::new(move || {
        // The timer is made inside the runtime.
        let asked = rt.block_on(async {
            tokio::time::timeout(AUTHORITY_PROBE_TIMEOUT, client.get_text("/healthz")).await
        });
        match asked {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(update::chain(&e)),
            Err(_) => Err(format!(
                "{} did not answer /healthz within {} s",
                e.server,
                AUTHORITY_PROBE_TIMEOUT.as_secs()
            )),
        }
    }))
}

fn update_watch(cli: &Cli, a: &UpdateWatchArgs) -> anyhow::Result<u8> {
    let supervisor = match Supervisor::parse(&a.supervisor) {
        Ok(Some(s)) => s,
        Ok(None) => Supervisor::detect(),
        Err(e) => {
            eprintln!("error: --supervisor: {e}");
            return Ok(EXIT_USAGE);
        }
    };
    let dir = AgentDir::resolve(cli.state_dir.as_deref())?;
    let log: flotilla_agent::Log = Arc::new(|line: &str| tracing::info!("{line}"));
    let authority = authority_probe(&dir, &log);
    let cfg = flotilla_agent::watch::WatchConfig {
        root: InstallRoot::new(std::path::absolute(&a.root)?, update::BINARY),
        dir,
        supervisor,
        poll: flotilla_agent::watch::POLL,
        stable_polls: flotilla_agent::watch::STABLE_POLLS,
        log: Arc::clone(&log),
        authority,
    };
    match flotilla_agent::watch::run(cfg) {
        Ok(rec) => {
            log(&format!(
                "update {} {}: {:?}{}",
                rec.name,
                rec.version,
                rec.state,
                rec.reason
                    .map(|r| format!(" ({r}: {})", rec.detail))
                    .unwrap_or_default()
            ));
            Ok(EXIT_OK)
        }
        Err(flotilla_agent::watch::WatchError::Locked(l)) => {
            log(&format!("another watchdog holds {l}: nothing to do"));
            Ok(EXIT_OK)
        }
        Err(e) => {
            log(&format!("error: {}", update::chain(&e)));
            Ok(crate::EXIT_REFUSED)
        }
    }
}
