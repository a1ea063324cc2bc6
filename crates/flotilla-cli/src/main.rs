//! `flotilla`: the command-line interface. Each subcommand lives in its own file under
//! `cmd/` and is a thin call into `flotilla-model` / `flotilla-plan`.
//!
//! Code map:
//! - `main.rs`: argument parsing (clap), dispatch, error printing, exit codes.
//! - `load.rs`: finding and reading the inventory and its templates.
//! - `local_fleet.rs`: `serve --local`, the authority and this machine's agent together.
//! - `logging.rs`: the tracing subscriber (`-v`, `FLOTILLA_LOG`, `--log-format`).
//! - `render.rs`: diagnostics and aligned tables.
//! - `cmd/*.rs`: one file per subcommand.
//! - `tui/`: the terminal UI (`flotilla tui`).

mod cmd;
mod load;
mod local_fleet;
mod logging;
mod render;
mod tui;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Exit status: success.
pub const EXIT_OK: u8 = 0;
/// Exit status: the operation was refused or failed, or something is not as desired or healthy.
pub const EXIT_REFUSED: u8 = 1;
/// Exit status: usage error, unreadable or invalid inventory.
pub const EXIT_USAGE: u8 = 2;
/// Exit status: a runtime failure: something could not be reached, read or written,
/// or the other side failed.
pub const EXIT_FAILURE: u8 = 3;

/// An error in what was asked, not in running it (exit [`EXIT_USAGE`]): a bad argument
/// value, a name that matches nothing, an inventory that cannot be read. Every other
/// error a command returns exits [`EXIT_FAILURE`].
#[derive(Debug)]
pub struct Usage {
    /// What was wrong with what was asked.
    pub message: String,
    /// Its cause, when there is one (a file that cannot be read).
    pub source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Usage {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// A [`Usage`] error.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage {
        message: message.into(),
        source: None,
    })
}

/// A [`Usage`] error caused by `source`.
pub fn usage_from(
    message: impl Into<String>,
    source: impl std::error::Error + Send + Sync + 'static,
) -> anyhow::Error {
    anyhow::Error::new(Usage {
        message: message.into(),
        source: Some(Box::new(source)),
    })
}

/// A [`Usage`] error from `format!` arguments.
#[macro_export]
macro_rules! usage {
    ($($arg:tt)*) => {
        $crate::usage(format!($($arg)*))
    };
}

const AFTER_HELP: &str = "\
Exit status:
  0  success
  1  refused (the plan cannot proceed, the lock is held, the plan is stale),
     failed (a step failed; what it started was stopped again), or
     `status` found something not as desired or unhealthy
  2  usage error, or an unreadable or invalid inventory
  3  runtime failure: something could not be reached, read or written, or the
     other side failed (the authority unreachable, an HTTP 500, a state
     directory that cannot be written). An error the authority answers counts
     by its status: 400, 404, 422 exit 2; 403, 409 exit 1
Under --json, a failure (exit 2 or 3) prints one JSON object on stdout:
  {\"error\": {\"code\": 3, \"kind\": \"failure\", \"message\": …, \"causes\": […]}}

Global options (-f, -p, --state-dir, --host-timeout, --ssh-persist, --server,
--operator-file) go before or after the subcommand.

Environment:
  FLOTILLA_FILE       inventory path (same as -f)
  FLOTILLA_PROJECT    project name (same as -p)
  FLOTILLA_STATE_DIR  state directory (same as --state-dir); default
                      $XDG_STATE_HOME/flotilla, else ~/.local/state/flotilla
  FLOTILLA_HOST_TIMEOUT  time per remote host (same as --host-timeout)
  FLOTILLA_SSH_PERSIST   keep SSH master connections this long (same as --ssh-persist)
  FLOTILLA_SERVER     the fleet's authority (same as --server)
  FLOTILLA_OPERATOR_FILE  the operator credential file (same as --operator-file)
  FLOTILLA_AUTHORITY_DIR  `serve`: the authority directory (same as --authority-dir)
  FLOTILLA_DATABASE_URL   `serve`: PostgreSQL instead of SQLite (same as --database-url)
  FLOTILLA_LOG        what the log shows, env-filter syntax (`debug`,
                      `flotilla_exec=trace,info`); default by -v
  FLOTILLA_LOG_FORMAT `text` or `json` (same as --log-format; passed on to
                      the processes a JSON-logging one starts)
  NO_COLOR            disable colour";

/// Flotilla: declare a fleet of self-hosted AI services once, plan every change
/// before touching anything, and see a status that cannot lie.
#[derive(Parser, Debug)]
#[command(name = "flotilla", version, after_help = AFTER_HELP, propagate_version = true)]
pub struct Cli {
    /// Inventory file (TOML, or JSON by its .json extension), before or after the
    /// subcommand (after `logs`, whose `-f` is --follow, write `--file`). Default:
    /// ./flotilla.toml, then ./flotilla.json.
    #[arg(
        short = 'f',
        long = "file",
        global = true,
        help_heading = "Global options",
        env = "FLOTILLA_FILE",
        value_name = "FILE"
    )]
    pub file: Option<PathBuf>,

    /// The project this inventory belongs to (default: the inventory's `project` key,
    /// else its directory's name).
    #[arg(
        short = 'p',
        long,
        global = true,
        help_heading = "Global options",
        env = "FLOTILLA_PROJECT",
        value_name = "NAME"
    )]
    pub project: Option<String>,

    /// State directory (journal, logs, lock). Default: $XDG_STATE_HOME/flotilla, else ~/.local/state/flotilla.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "FLOTILLA_STATE_DIR",
        value_name = "DIR"
    )]
    pub state_dir: Option<PathBuf>,

    /// Time allowed to each remote host to connect and answer an observation; a host
    /// that does not is shown `unreachable` with its last-known state.
    #[arg(long, global = true, help_heading = "Global options", env = "FLOTILLA_HOST_TIMEOUT", value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub host_timeout: std::time::Duration,

    /// Keep each host's SSH master connection for this long after use, for the next
    /// invocations to reuse (no new handshake); off by default (one connection per
    /// host per invocation). Control sockets live in the state directory's `run/ssh/`.
    #[arg(long, global = true, help_heading = "Global options", env = "FLOTILLA_SSH_PERSIST", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub ssh_persist: Option<std::time::Duration>,

    /// The authority (`--server`, `--operator-file`).
    #[command(flatten)]
    pub server: cmd::authority::ServerArgs,

    /// Show more of the log on standard error: `-v` info, `-vv` debug (with every
    /// span as it closes), `-vvv` trace. `FLOTILLA_LOG` (env-filter syntax, e.g.
    /// `debug` or `flotilla_exec=trace`) overrides it. For `status`, `-v` also prints
    /// each component's evidence.
    #[arg(short = 'v', long = "verbose", global = true, help_heading = "Global options", action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// How log lines are written: `text`, or `json` (one object per line, for `serve`
    /// and `agent run` under a log collector; what they start, the update watchdog
    /// included, writes the same).
    #[arg(long, global = true, help_heading = "Global options", env = logging::LOG_FORMAT_ENV, value_enum, default_value_t = logging::LogFormat::Text, value_name = "FORMAT")]
    pub log_format: logging::LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Check the inventory and report every problem with its file:line:column.
    Validate(cmd::validate::Args),
    /// Show what an operation would do, without doing it.
    Plan(cmd::plan::Args),
    /// Bring a stack up: members and their dependencies, each proven ready in order.
    Up(cmd::up::Args),
    /// Take a stack down, in the reverse of the order it was started in.
    Down(cmd::down::Args),
    /// Start a component or stack (and upstream dependencies not yet ready).
    Start(cmd::start::Args),
    /// Stop a component or stack (refused while dependents run, unless --force/--cascade).
    Stop(cmd::stop::Args),
    /// Restart a component (alone, or with --cascade its dependents too).
    Restart(cmd::restart::Args),
    /// Apply a plan saved with `plan --json` (refused if it is stale).
    Apply(cmd::apply::Args),
    /// What every component really is, measured now, with evidence.
    Status(cmd::status::Args),
    /// Pre-flight on every host involved: programs, files, secrets, ports; a cluster's API and dry runs
    Check(cmd::check::Args),
    /// Read-only: what runs on a host that the inventory does not cover, as proposals.
    Discover(cmd::discover::Args),
    /// Move a running component from another owner to its declared one, plan first.
    ///
    /// The other owner is a process started by hand, a systemd unit, a launchd job or
    /// a container Flotilla did not start; each step is journaled, accepted by the
    /// same checks as the baseline, or rolled back to the prior owner.
    Adopt(cmd::adopt::Args),
    /// Compact status: one line per component (state, health, pid, ports, uptime, restarts).
    Ps(cmd::ps::Args),
    /// A component's log (stdout and stderr).
    Logs(cmd::logs::Args),
    /// The journal of operations and their steps.
    Operations(cmd::operations::Args),
    /// Show the validated dependency graph (table, JSON or Graphviz dot).
    Topology(cmd::topology::Args),
    /// A terminal UI: components over their logs; start/stop/restart show the plan first.
    Tui(cmd::tui::Args),
    /// Remote hosts: list them, check them, install this flotilla on them.
    Host(cmd::host::Args),
    /// Run the fleet's desired-state authority over HTTPS (see `serve init`).
    Serve(cmd::serve::Args),
    /// Open the web dashboard's page of an object in the browser (or print its URL).
    Ui(cmd::ui::Args),
    /// The authority's revisions: publish the inventory, history, show, diff, select.
    Config(cmd::config::Args),
    /// Signed releases: keygen, manifest, sign, verify; publish, rollout, approve, status.
    Release(cmd::release::Args),
    /// Coding-agent sessions: create, list, show, send, stop, events (`--server`).
    Session(cmd::session::Args),
    /// The questions the permission gate asked of a human.
    Questions(cmd::questions::Args),
    /// Answer a question: `question answer ID allow|deny`.
    Question(cmd::question::Args),
    /// The permission gate as a Claude Code hook (`gate hook`, run by sessions).
    Gate(cmd::gate::Args),
    /// A whole tool or executor output that was shown capped.
    Output(cmd::output::Args),
    /// Inside a session's runtime: ask the authority's executor to run an argv list.
    Exec(cmd::exec::Args),
    /// Inside a session's runtime: ask the authority to push the session's commits.
    Push(cmd::push::Args),
    /// Inside a session's sandbox: relay loopback ports to the authority's sockets
    /// and run the agent.
    #[command(hide = true)]
    SandboxBridge(cmd::sandbox_bridge::Args),
    /// Inside a session's pod: its init container and its agent's wrapper.
    #[command(hide = true)]
    SessionPod(cmd::session_pod::Args),
    /// This host's agent: join an authority, converge, supervise, report (see `agent run`).
    Agent(cmd::agent::Args),
    /// Back the project's state up into a verified archive (the authority's: `serve backup`).
    ///
    /// The journal, instances, logs and the rest of the project's state directory;
    /// SQLite through its online backup API; verified by a restore into a scratch
    /// place before it is kept.
    Backup(cmd::backup::Args),
    /// Restore the project's state from an archive (the authority's: `serve restore`).
    ///
    /// Refused for an archive cut short, altered or from a newer flotilla, and while
    /// the project is in use; the state it replaces is kept beside it.
    Restore(cmd::restore::Args),
    /// Write an inventory from another tool's file: `import compose [FILE]` (docker compose).
    Import(cmd::import::Args),
    /// Print the JSON Schema (draft 2020-12) of the inventory or of a template.
    Schema(cmd::schema::Args),
    /// Print a shell completion script.
    Completions(cmd::completions::Args),
    /// Print the manual page (roff), of flotilla or of one subcommand.
    Man(cmd::man::Args),
}

/// The command line as clap sees it: the derived [`Cli`], with `--file` (long only)
/// declared on `logs` too, because there `-f` is `--follow`. Parsing, completions and
/// the man page all use this.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().mut_subcommand("logs", |logs| {
        logs.arg(
            clap::Arg::new("file")
                .long("file")
                .env("FLOTILLA_FILE")
                .value_name("FILE")
                .value_parser(clap::value_parser!(PathBuf))
                .help("Inventory file (here `-f` is --follow)"),
        )
    })
}

/// Parses the command line (exits on a usage error, like `Cli::parse`).
fn parse() -> Cli {
    use clap::FromArgMatches;
    let matches = command().get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn main() -> ExitCode {
    // The log writer a component runs under (`flotilla log-writer`, started by this
    // binary for each component it starts; not a command for people): it reads its
    // orders from stdin, so it is dispatched before the command line is parsed.
    if std::env::args_os().nth(1).as_deref() == Some(flotilla_exec::log_writer::SUBCOMMAND.as_ref())
    {
        return flotilla_exec::log_writer::main();
    }
    // Components on a cluster (adapter `kubernetes`) are driven by flotilla-kube's
    // adapter, in every executor this process makes.
    flotilla_kube::install();
    // Components are started through this very binary's log writer: `/proc/self/exe`
    // names it even after an update replaced the file.
    let me = std::path::Path::new("/proc/self/exe");
    match (me.exists(), std::env::current_exe()) {
        (true, _) => flotilla_exec::log_writer::enable(me.to_path_buf()),
        (false, Ok(exe)) => flotilla_exec::log_writer::enable(exe),
        (false, Err(_)) => {}
    }
    let cli = parse();
    let mutating = matches!(
        cli.command,
        Command::Up(_)
            | Command::Down(_)
            | Command::Start(_)
            | Command::Stop(_)
            | Command::Restart(_)
            | Command::Apply(_)
            | Command::Adopt(_)
            | Command::Agent(cmd::agent::Args {
                command: cmd::agent::AgentCommand::Run(_)
            })
            // The authority: a client that resets its connection must not kill it
            // (hyper and rustls write with writev, which raises SIGPIPE).
            | Command::Serve(cmd::serve::Args { command: None, .. })
            // Its launcher and executor: an API connection that closes early
            // must not kill them.
            | Command::Serve(cmd::serve::Args {
                command: Some(
                    cmd::serve::ServeCommand::Launcher { .. }
                        | cmd::serve::ServeCommand::Executor { .. }
                ),
                ..
            })
            // The gate's command hook: a peer that closes early (the authority
            // refusing a large payload, Claude Code closing its stdout) is a
            // deny with exit 2, never a death by SIGPIPE with no decision.
            | Command::Gate(_)
            // The sandbox's bridge: a peer that goes away ends one relay, not it.
            | Command::SandboxBridge(_)
            | Command::SessionPod(_)
    );
    if !mutating {
        // Like other command-line tools, a reading command whose output pipe closed
        // (`flotilla schema | head`) just ends, instead of failing to print. Not by
        // SIGPIPE's default action: that would also kill it when a server closes a
        // connection it is writing to (hyper and rustls write with writev); the
        // failed print to stdout ends it instead.
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or_default();
            if message.contains("failed printing to stdout") && message.contains("Broken pipe") {
                std::process::exit(EXIT_OK.into());
            }
            default(info)
        }));
    }
    let daemon = matches!(
        cli.command,
        Command::Serve(cmd::serve::Args { command: None, .. })
            | Command::Agent(cmd::agent::Args {
                command: cmd::agent::AgentCommand::Run(_)
                    | cmd::agent::AgentCommand::UpdateWatch(_)
            })
    );
    logging::init(cli.verbose, cli.log_format, daemon);
    if cli.log_format == logging::LogFormat::Json {
        // Processes this one starts (the update watchdog, an agent it restarts) log
        // the same way. No thread runs yet.
        std::env::set_var(logging::LOG_FORMAT_ENV, "json");
    }
    let result = match &cli.command {
        Command::Validate(a) => cmd::validate::run(&cli, a),
        Command::Plan(a) => cmd::plan::run(&cli, a),
        Command::Up(a) => cmd::up::run(&cli, a),
        Command::Down(a) => cmd::down::run(&cli, a),
        Command::Start(a) => cmd::start::run(&cli, a),
        Command::Stop(a) => cmd::stop::run(&cli, a),
        Command::Restart(a) => cmd::restart::run(&cli, a),
        Command::Apply(a) => cmd::apply::run(&cli, a),
        Command::Status(a) => cmd::status::run(&cli, a),
        Command::Check(a) => cmd::check::run(&cli, a),
        Command::Discover(a) => cmd::discover::run(&cli, a),
        Command::Adopt(a) => cmd::adopt::run(&cli, a),
        Command::Ps(a) => cmd::ps::run(&cli, a),
        Command::Logs(a) => cmd::logs::run(&cli, a),
        Command::Operations(a) => cmd::operations::run(&cli, a),
        Command::Topology(a) => cmd::topology::run(&cli, a),
        Command::Tui(a) => cmd::tui::run(&cli, a),
        Command::Host(a) => cmd::host::run(&cli, a),
        Command::Serve(a) => cmd::serve::run(&cli, a),
        Command::Ui(a) => cmd::ui::run(&cli, a),
        Command::Config(a) => cmd::config::run(&cli, a),
        Command::Agent(a) => cmd::agent::run(&cli, a),
        Command::Release(a) => cmd::release::run(&cli, a),
        Command::Session(a) => cmd::session::run(&cli, a),
        Command::Questions(a) => cmd::questions::run(&cli, a),
        Command::Question(a) => cmd::question::run(&cli, a),
        Command::Gate(a) => cmd::gate::run(&cli, a),
        Command::Output(a) => cmd::output::run(&cli, a),
        Command::Exec(a) => cmd::exec::run(&cli, a),
        Command::Push(a) => cmd::push::run(&cli, a),
        Command::SandboxBridge(a) => cmd::sandbox_bridge::run(&cli, a),
        Command::SessionPod(a) => cmd::session_pod::run(&cli, a),
        Command::Import(a) => cmd::import::run(&cli, a),
        Command::Backup(a) => cmd::backup::run(&cli, a),
        Command::Restore(a) => cmd::restore::run(&cli, a),
        Command::Schema(a) => cmd::schema::run(a),
        Command::Completions(a) => cmd::completions::run(a),
        Command::Man(a) => cmd::man::run(a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        // A reading command whose output pipe closed (`flotilla logs | head`) just
        // ends, as when printing panicked on it above.
        Err(e)
            if !mutating
                && e.chain().any(|c| {
                    c.downcast_ref::<std::io::Error>()
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
                }) =>
        {
            ExitCode::from(EXIT_OK)
        }
        Err(e) => {
            let code = exit_code(&e);
            print_error(e.as_ref());
            if wants_json() {
                println!("{}", error_json(&e, code));
            }
            ExitCode::from(code)
        }
    }
}

/// The exit status of an error a command returned: [`EXIT_USAGE`] for a [`Usage`]
/// error (anywhere in its chain), else [`EXIT_FAILURE`].
///
/// An error the authority answered counts by its status: 400, 404 and 422 (what was
/// asked names nothing, or is malformed) are [`EXIT_USAGE`]; 403 and 409 (not allowed,
/// or not now) are [`EXIT_REFUSED`]; the rest (401, 5xx) [`EXIT_FAILURE`].
fn exit_code(e: &anyhow::Error) -> u8 {
    let bad_url = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<flotilla_api::ClientError>(),
            Some(flotilla_api::ClientError::Url(_))
        )
    });
    if bad_url || e.chain().any(|c| c.is::<Usage>()) {
        return EXIT_USAGE;
    }
    let answered = e.chain().find_map(|c| match c.downcast_ref() {
        Some(flotilla_api::ClientError::Api { status, .. }) => Some(*status),
        _ => None,
    });
    match answered {
        Some(400 | 404 | 422) => EXIT_USAGE,
        Some(403 | 409) => EXIT_REFUSED,
        _ => EXIT_FAILURE,
    }
}

/// Whether `--json` was given (before any `--`, after which arguments are another
/// program's).
pub(crate) fn wants_json() -> bool {
    std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// `{"error": {"code": N, "kind": "usage"|"refused"|"failure", "message": "…", "causes": […]}}`.
pub fn error_json(e: &anyhow::Error, code: u8) -> serde_json::Value {
    let causes = causes_once(&e.to_string(), e.chain().skip(1));
    serde_json::json!({
        "error": {
            "code": code,
            "kind": match code {
                EXIT_USAGE => "usage",
                EXIT_REFUSED => "refused",
                _ => "failure",
            },
            "message": e.to_string(),
            "causes": causes,
        }
    })
}

/// Prints `e` and its cause chain on stderr (`error: …`, then `  caused by: …`), and
/// what to do when the authority could not be reached.
pub fn print_error(e: &(dyn std::error::Error + 'static)) {
    let message = e.to_string();
    eprintln!("error: {message}");
    let chain = std::iter::successors(e.source(), |c| c.source());
    for text in causes_once(&message, chain.clone()) {
        eprintln!("  caused by: {text}");
    }
    let unreachable = std::iter::once(e).chain(chain).any(unreachable_authority);
    if unreachable {
        eprintln!(
            "  (the authority cannot be reached: start it with `flotilla serve` on its machine (`flotilla serve init` first), or point --server / FLOTILLA_SERVER at the one that runs)"
        );
    } else if not_this_authority(e) {
        eprintln!(
            "  (something answers there, but not as the authority whose CA is pinned: check --server / FLOTILLA_SERVER, and that the operator file (--operator-file) is the one `flotilla serve init` wrote for it)"
        );
    }
}

fn not_this_authority(e: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(e), |c| c.source()).any(|c| {
        c.downcast_ref::<flotilla_api::ClientError>()
            .is_some_and(flotilla_api::ClientError::is_not_this_authority)
    })
}

/// The causes of an error whose message is `message`, each said once: a cause whose
/// text was already said (an error that shows its source in its own message) is
/// left out.
fn causes_once<'e>(
    message: &str,
    causes: impl Iterator<Item = &'e (dyn std::error::Error + 'static)>,
) -> Vec<String> {
    let mut said = message.to_string();
    causes
        .map(|c| c.to_string())
        .filter(|text| {
            let new = !said.contains(text.as_str());
            said.push_str(text);
            new
        })
        .collect()
}

fn unreachable_authority(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<flotilla_api::ClientError>()
        .is_some_and(flotilla_api::ClientError::is_unreachable)
}
