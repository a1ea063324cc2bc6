//! `flotilla serve --local`: a fleet of one machine in one command. The authority
//! is initialised when it is not (`serve init`) and served on a loopback address;
//! once it listens, a fresh authority gets a revision declaring this machine as an
//! `agent` host, this machine's agent is joined (a join token made and redeemed
//! here, its enrollment saved where `agent join` saves it) unless its enrollment
//! already names this authority, and `flotilla agent run` is started
//! (`flotilla_exec::detached::spawn_detached`, its log in the agent directory).
//! The dashboard's one-time sign-in URL is minted as `flotilla serve ui-link`
//! mints one (`POST /v1/ui-links`, operator role) and printed. SIGINT or SIGTERM
//! stops the authority and then the agent.

use flotilla_api::wire::{JoinRequest, PublishRequest, TokenRequest};
use flotilla_server::authority::{self, Backend, ServeOptions};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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

/// The agent started, for stopping it.
struct Agent {
    child: std::process::Child,
    start_ticks: Option<u64>,
    log: PathBuf,
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
    let child = flotilla_exec::detached::spawn_detached(&exe, &argv, None, &log)?;
    let start_ticks = flotilla_exec::process_start_ticks(child.id());
    Ok((
        Agent {
            child,
            start_ticks,
            log,
        },
        published,
        login.url,
    ))
}

/// Stops the agent (SIGTERM, SIGKILL after 10 s) and reaps it.
fn stop(mut agent: Agent) {
    if let Some(ticks) = agent.start_ticks {
        if let Err(e) = flotilla_exec::process::stop_identified(
            agent.child.id(),
            ticks,
            Duration::from_secs(10),
        ) {
            eprintln!("stopping the agent (pid {}): {e}", agent.child.id());
        }
    }
    let _ = agent.child.wait();
}

/// Runs `serve --local` until SIGINT or SIGTERM; the exit status.
///
/// # Errors
/// The authority's errors; what setting up the agent met.
pub fn run(l: Local) -> anyhow::Result<u8> {
    if !l.listen.ip().is_loopback() {
        eprintln!(
            "error: --local serves on a loopback address only, not {}",
            l.listen
        );
        return Ok(crate::EXIT_USAGE);
    }
    let rt = crate::cmd::runtime()?;
    rt.block_on(async {
        let backend = Backend::Sqlite(l.dir.join(authority::DATABASE_FILE));
        let init = authority::init(&l.dir, &[], &backend).await?;
        let opts = ServeOptions {
            dir: l.dir.clone(),
            listen: l.listen,
            backend,
            tls_cert: None,
            report_deadline: l.report_deadline,
            public_url: l.public_url.clone(),
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
        let (agent, published, login) = tokio::select! {
            r = &mut serve => { r?; return Ok(crate::EXIT_OK) }
            a = set_up(&l, &url, &host) => a?,
        };
        println!("authority: {url} (directory {})", l.dir.display());
        if published {
            println!("revision: this machine declared as host `{host}` (transport agent); publish your inventory with `flotilla config publish`, keeping that host");
        }
        println!(
            "agent: host `{host}`, pid {}, log {}",
            agent.child.id(),
            agent.log.display()
        );
        println!(
            "operator credential: {}{}",
            init.operator_file.display(),
            if init.operator_created { " (new)" } else { "" }
        );
        println!(
            "dashboard: {login} (one-time sign-in link, valid {}; or sign in at {} with the operator credential)",
            humantime::format_duration(LOGIN_TTL),
            flotilla_api::links::Link::Login.url(&public),
        );
        if url != format!("https://{}", flotilla_server::authority::DEFAULT_LISTEN) {
            println!("other commands reach it with: export FLOTILLA_SERVER={url}");
        }
        println!("stop with Ctrl-C");
        let served = serve.await;
        tokio::task::spawn_blocking(move || stop(agent)).await?;
        served?;
        Ok(crate::EXIT_OK)
    })
}

#[cfg(test)]
mod tests {
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
