//! `flotilla agent join|run|unit`: join an authority, run the agent (desired state
//! from the authority or from a local inventory), or print the systemd unit / launchd
//! plist that starts it at boot. The agent itself
//! is `flotilla_agent`; this file parses arguments and hands it the CLI's inventory
//! loader.

use crate::{load, render, Cli, EXIT_OK, EXIT_USAGE};
use flotilla_agent::authority::{AuthorityReporter, AuthoritySource};
use flotilla_agent::state::AgentDir;
use flotilla_agent::{
    Agent, AgentConfig, AgentError, InventoryLoader, LoadError, LoadedInventory, LocalInventory,
    LocalReporter,
};
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
    /// Print the systemd user unit (Linux) or launchd plist (macOS, --launchd) that
    /// runs `flotilla agent run` at boot with this binary.
    Unit(UnitArgs),
}

/// Arguments of `flotilla agent join`.
#[derive(clap::Args, Debug)]
pub struct JoinArgs {
    /// The authority's URL (`https://host:port`).
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
    /// Print a systemd user unit (the default elsewhere).
    #[arg(long)]
    pub systemd: bool,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    match &args.command {
        AgentCommand::Join(a) => join(cli, a),
        AgentCommand::Run(a) => run_agent(cli, a),
        AgentCommand::Unit(a) => unit(cli, a),
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
        let pem = flotilla_server::Client::discover_ca(&a.url, &a.ca_hash).await?;
        let joined = flotilla_server::Client::new(&a.url, &pem, None)?
            .join(&flotilla_server::api::JoinRequest {
                token: a.token.trim().to_string(),
                agent_version: flotilla_exec::remote::VERSION.into(),
                platform: flotilla_exec::remote::this_platform(),
            })
            .await?;
        Ok::<_, flotilla_server::ClientError>((pem, joined))
    })?;
    dir.save_enrollment(&flotilla_agent::state::Enrollment {
        server: a.url.trim_end_matches('/').to_string(),
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
    let log: flotilla_agent::Log = Arc::new(|line: &str| {
        use std::io::Write;
        // The agent keeps running when whoever reads its log goes away.
        let _ = writeln!(std::io::stderr(), "{line}");
    });
    let dir = AgentDir::resolve(cli.state_dir.as_deref())?;
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
        let client = Arc::new(flotilla_server::Client::new(
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
        // Beside converging: the calls controllers queue for this host (`--server`).
        let calls = flotilla_agent::authority::serve_calls(
            client,
            e.host.clone(),
            cli.state_dir.clone(),
            log,
            shutdown(),
        );
        return finish(rt.block_on(async {
            let (result, ()) =
                tokio::join!(Agent::new(cfg, source, reporter).run(shutdown()), calls);
            result
        }));
    };
    let source = LocalInventory::new(inventory, &a.host, loader(project), a.poll)?;
    let cfg = config(cli, a, &a.host, log);
    finish(rt.block_on(Agent::new(cfg, source, local).run(shutdown())))
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
    let inventory = match a.inventory.as_ref().or(cli.file.as_ref()) {
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
                        l.topology
                            .hosts
                            .keys()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
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
    let state_dir = cli
        .state_dir
        .as_deref()
        .map(std::path::absolute)
        .transpose()?;
    let executable = std::env::current_exe()?;
    let spec = flotilla_agent::unit::UnitSpec {
        executable: executable.canonicalize().unwrap_or(executable),
        args: flotilla_agent::unit::run_args(
            inventory.as_deref(),
            &a.host,
            state_dir.as_deref(),
            project.as_deref(),
        ),
        path_env: std::env::var("PATH").ok(),
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
