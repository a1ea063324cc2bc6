//! `flotilla serve --local`: a fleet of one machine in one command. The authority
//! is initialised when it is not (`serve init`) and served on a loopback address;
//! once it listens, a fresh authority gets a revision declaring this machine as an
//! `agent` host, this machine's agent is joined (a join token made and redeemed
//! here, its enrollment saved where `agent join` saves it) unless its enrollment
//! already names this authority, and `flotilla agent run` is started
//! (`flotilla_exec::detached::spawn_detached`, its log in the agent directory).
//! The dashboard's one-time sign-in URL is minted as `flotilla serve ui-link`
//! mints one (`POST /v1/ui-links`, operator role) and printed. An agent that exits
//! is said so on stderr (its status, its log) and started again after a backoff
//! ([`restart_delay`]), like a service manager's `Restart=always`. SIGINT or
//! SIGTERM stops the authority and then the agent.

use flotilla_api::wire::{JoinRequest, PublishRequest, TokenRequest};
use flotilla_server::authority::{self, Backend, ServeOptions};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Writes a line to stdout; a closed stdout (its reader gone) loses it, never the
/// process (which still has its agent to stop).
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

/// [`say!`] for stderr.
macro_rules! say_err {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

/// How `serve --local` runs.
#[derive(Debug, Clone)]
pub struct Local {
    /// The base state directory (the agent's and the authority's live below it).
    pub base: PathBuf,
    /// The authority directory.
    pub dir: PathBuf,
    /// A loopback address to listen on.
    pub listen: SocketAddr,
    /// The report deadline.
    pub report_deadline: Duration,
    /// `--public-url`.
    pub public_url: Option<String>,
    /// Where the backup before a migration of the store goes.
    pub backups: flotilla_exec::backup::BackupPolicy,
}

/// The agent's log file in the agent directory.
pub const AGENT_LOG: &str = "local-agent.log";

/// This machine's host name as an inventory name: the system's host name up to its
/// first `.`, lowercased, characters other than letters, digits, `-` and `_` made
/// `-`; `this-machine` when that leaves nothing.
pub fn this_host() -> String {
    let raw = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    let short = raw.split('.').next().unwrap_or_default().to_lowercase();
    let name: String = short
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let name = name.trim_matches('-').to_string();
    if name.is_empty() || name == "local" {
        "this-machine".into()
    } else {
        name
    }
}

/// How often the agent `serve --local` starts reports: a third of the report
/// deadline (so that two reports may be lost before the host looks unreachable),
/// at most the agent's default of 15 s, at least 1 s.
fn report_every(deadline: Duration) -> Duration {
    (deadline / 3).clamp(Duration::from_secs(1), Duration::from_secs(15))
}

/// How long the printed sign-in link can be used (once).
pub const LOGIN_TTL: Duration = Duration::from_secs(15 * 60);

/// The agent started: how to start it again, and its process (waited on by a
/// blocking task, so that its exit is noticed when it happens).
struct Agent {
    exe: PathBuf,
    argv: Vec<OsString>,
    pid: u32,
    start_ticks: Option<u64>,
    started: std::time::Instant,
    log: PathBuf,
    /// Its exit, awaited once: `None` once seen.
    exited: Option<tokio::task::JoinHandle<std::io::Result<std::process::ExitStatus>>>,
}

impl Agent {
    fn spawn(exe: PathBuf, argv: Vec<OsString>, log: PathBuf) -> anyhow::Result<Agent> {
        let mut child = flotilla_exec::detached::spawn_detached(&exe, &argv, None, &log)?;
        let pid = child.id();
        Ok(Agent {
            start_ticks: flotilla_exec::process_start_ticks(pid),
            exited: Some(tokio::task::spawn_blocking(move || child.wait())),
            started: std::time::Instant::now(),
            exe,
            argv,
            pid,
            log,
        })
    }
}

/// How long to wait before starting the agent again after its `n`-th exit in a row
/// (1-based): 1 s, doubling, at most 60 s. An agent that ran a minute or more
/// starts the count again.
pub fn restart_delay(n: u32) -> Duration {
    Duration::from_secs(1u64 << (n.saturating_sub(1)).min(6)).min(Duration::from_secs(60))
}

/// Keeps the agent running: when it exits, says so and starts it again after
/// [`restart_delay`]. Returns only on an error starting it.
async fn supervise(agent: &mut Agent) -> anyhow::Error {
    let mut in_a_row = 0u32;
    loop {
        let Some(exited) = agent.exited.as_mut() else {
            return anyhow::anyhow!("the agent is not running");
        };
        let waited = exited.await;
        agent.exited = None;
        let status = match waited {
            Ok(Ok(s)) => s.to_string(),
            Ok(Err(e)) => format!("cannot be waited for: {e}"),
            Err(e) => format!("its waiter failed: {e}"),
        };
        in_a_row = if agent.started.elapsed() >= Duration::from_secs(60) {
            1
        } else {
            in_a_row + 1
        };
        let delay = restart_delay(in_a_row);
        say_err!(
            "the agent (pid {}) exited ({status}); its log: {}; starting it again in {}",
            agent.pid,
            agent.log.display(),
            humantime::format_duration(delay)
        );
        tokio::time::sleep(delay).await;
        match Agent::spawn(agent.exe.clone(), agent.argv.clone(), agent.log.clone()) {
            Ok(again) => {
                say_err!("the agent runs again (pid {})", again.pid);
                *agent = again;
            }
            Err(e) => return e,
        }
    }
}

/// Publishes a revision declaring `host` when nothing is selected yet, joins this
/// machine's agent unless its enrollment names this authority already, and starts
/// it.
async fn set_up(l: &Local, url: &str, host: &str) -> anyhow::Result<(Agent, bool, String)> {
    let op = authority::OperatorFile::read(&l.dir.join(authority::OPERATOR_FILE))?;
    let operator = flotilla_api::Client::new(url, &op.ca_pem, Some(op.credential.clone()))?;
    let mut published = false;
    if operator.history().await?.selections.is_empty() {
        let text = format!("[hosts.{host}]\ntransport = \"agent\"\n");
        let mut sources = flotilla_model::Sources::new();
        let id = sources.add(flotilla_model::SourceFile::new(
            "local.toml",
            flotilla_model::Format::Toml,
            &text,
        ));
        let topology = flotilla_model::validate(&sources, id, &[])
            .map_err(|d| anyhow::anyhow!("this machine's host `{host}` is not valid: {d:?}"))?
            .topology;
        operator
            .publish(&PublishRequest {
                topology: serde_json::from_str(&topology.revision_json())?,
                expect: None,
            })
            .await?;
        published = true;
    }
    let agent_dir = flotilla_agent::state::AgentDir::resolve(Some(&l.base))?;
    let enrolled = agent_dir
        .load_enrollment()
        .ok()
        .flatten()
        .is_some_and(|e| e.server == url && e.ca_pem == op.ca_pem && e.host == host);
    if !enrolled {
        let token = operator
            .create_token(&TokenRequest {
                host: host.into(),
                ttl_secs: Some(60),
                keep_credentials: false,
            })
            .await?;
        let joined = flotilla_api::Client::new(url, &op.ca_pem, None)?
            .join(&JoinRequest {
                token: token.token,
                agent_version: flotilla_exec::remote::VERSION.into(),
                platform: flotilla_exec::remote::this_platform(),
            })
            .await?;
        agent_dir.save_enrollment(&flotilla_agent::state::Enrollment {
            server: url.to_string(),
            host: joined.host,
            credential: joined.credential,
            ca_pem: op.ca_pem.clone(),
        })?;
    }
    // One agent per state directory: one left running (by an earlier run killed
    // before it could stop it) is named, not raced.
    drop(agent_dir.lock().map_err(|e| {
        anyhow::anyhow!("{e}; stop it first (its pid is in the message), then run `flotilla serve --local` again")
    })?);
    let log = agent_dir.enrollment_file().with_file_name(AGENT_LOG);
    let exe = std::env::current_exe()?;
    let argv: Vec<OsString> = vec![
        "flotilla".into(),
        "--state-dir".into(),
        l.base.clone().into(),
        "agent".into(),
        "run".into(),
        // Report well within the authority's deadline (the agent's default, 15 s,
        // would make a host look unreachable under a shorter `--report-deadline`).
        "--report-every".into(),
        humantime::format_duration(report_every(l.report_deadline))
            .to_string()
            .into(),
    ];
    let login: flotilla_api::ui_links::UiLinkCreated = operator
        .post(
            "/v1/ui-links",
            &flotilla_api::ui_links::UiLinkRequest {
                role: "operator".into(),
                ttl_secs: Some(LOGIN_TTL.as_secs()),
            },
        )
        .await?;
    Ok((Agent::spawn(exe, argv, log)?, published, login.url))
}

/// Stops the agent (SIGTERM, SIGKILL after 10 s) and reaps it.
async fn stop(agent: Agent) {
    let Some(exited) = agent.exited else {
        return;
    };
    let (pid, ticks) = (agent.pid, agent.start_ticks);
    if let Some(ticks) = ticks {
        let stopped = tokio::task::spawn_blocking(move || {
            flotilla_exec::process::stop_identified(pid, ticks, Duration::from_secs(10))
        })
        .await;
        if let Ok(Err(e)) = stopped {
            say_err!("stopping the agent (pid {pid}): {e}");
        }
    }
    let _ = exited.await;
}

/// Runs `serve --local` until SIGINT or SIGTERM; the exit status.
///
/// # Errors
/// The authority's errors; what setting up the agent met.
pub fn run(l: Local) -> anyhow::Result<u8> {
    if !l.listen.ip().is_loopback() {
        say_err!(
            "error: --local serves on a loopback address only, not {}",
            l.listen
        );
        return Ok(crate::EXIT_USAGE);
    }
    let rt = crate::cmd::runtime()?;
    rt.block_on(async {
        let backend = Backend::Sqlite(l.dir.join(authority::DATABASE_FILE));
        let migration =
            flotilla_server::backup::migration_hooks(&l.dir, &backend, &l.backups);
        let init = authority::init(&l.dir, &[], &backend, &migration).await?;
        let opts = ServeOptions {
            dir: l.dir.clone(),
            listen: l.listen,
            backend,
            tls_cert: None,
            report_deadline: l.report_deadline,
            public_url: l.public_url.clone(),
            migration,
            blobs: flotilla_server::blobs::BlobSettings::in_authority_dir(&l.dir),
            pod_runtime: None,
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let serve = authority::serve(opts, move |addr, _, _| {
            let _ = tx.send(addr);
        });
        tokio::pin!(serve);
        let addr = tokio::select! {
            r = &mut serve => { r?; return Ok(crate::EXIT_OK) }
            a = rx => a?,
        };
        let url = format!("https://{addr}");
        let public = l
            .public_url
            .clone()
            .unwrap_or_else(|| url.clone())
            .trim_end_matches('/')
            .to_string();
        let host = this_host();
        let (mut agent, published, login) = tokio::select! {
            r = &mut serve => { r?; return Ok(crate::EXIT_OK) }
            a = set_up(&l, &url, &host) => a?,
        };
        say!("authority: {url} (directory {})", l.dir.display());
        if published {
            say!("revision: this machine declared as host `{host}` (transport agent); publish your inventory with `flotilla config publish`, keeping that host");
        }
        say!(
            "agent: host `{host}`, pid {}, log {}",
            agent.pid,
            agent.log.display()
        );
        say!(
            "operator credential: {}{}",
            init.operator_file.display(),
            if init.operator_created { " (new)" } else { "" }
        );
        say!(
            "dashboard: {login} (one-time sign-in link, valid {}; or sign in at {} with the operator credential)",
            humantime::format_duration(LOGIN_TTL),
            flotilla_api::links::Link::Login.url(&public),
        );
        if url != format!("https://{}", flotilla_server::authority::DEFAULT_LISTEN) {
            say!("other commands reach it with: export FLOTILLA_SERVER={url}");
        }
        say!("stop with Ctrl-C");
        let served = tokio::select! {
            r = &mut serve => r.map_err(anyhow::Error::from),
            e = supervise(&mut agent) => Err(e.context("the agent cannot be started again")),
        };
        stop(agent).await;
        served?;
        Ok(crate::EXIT_OK)
    })
}

#[cfg(test)]
mod tests {
    use super::restart_delay;

    #[test]
    fn an_agent_that_keeps_exiting_waits_longer_each_time_up_to_a_minute() {
        let d: Vec<u64> = (1..=9).map(|n| restart_delay(n).as_secs()).collect();
        assert_eq!(d, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }

    use super::report_every;
    use std::time::Duration;

    #[test]
    fn reports_come_three_times_per_deadline_within_bounds() {
        assert_eq!(
            report_every(Duration::from_secs(45)),
            Duration::from_secs(15)
        );
        assert_eq!(report_every(Duration::from_secs(6)), Duration::from_secs(2));
        assert_eq!(report_every(Duration::from_secs(2)), Duration::from_secs(1));
        assert_eq!(
            report_every(Duration::from_secs(600)),
            Duration::from_secs(15)
        );
    }
}
