//! Reaching the authority from the CLI: `--server` and the operator credential file
//! (shared by `config`, `serve token` and the `--server` forms of other verbs); where
//! a local authority keeps its data (`--authority-dir`, `--database-url`: `serve`,
//! `serve init`, `serve backup`, `serve restore`).

use crate::Cli;
use std::path::PathBuf;

/// Where the authority is and how to be trusted by it.
#[derive(clap::Args, Debug, Clone)]
pub struct ServerArgs {
    /// The desired-state authority's URL (default https://127.0.0.1:7443 for `config`
    /// and `serve token`), or several authorities' URLs separated by commas (they
    /// share one database: requests stick to one and move to the next when it
    /// cannot be reached or answers 502/503/504). With it, `status` shows the fleet as its agents report it,
    /// and steps for components on `agent` hosts go through the authority to their
    /// agents.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "FLOTILLA_SERVER",
        value_name = "URL"
    )]
    pub server: Option<String>,
    /// The operator credential file `flotilla serve init` wrote (credential and CA).
    /// Default: `<state dir>/authority/operator.json`.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "FLOTILLA_OPERATOR_FILE",
        value_name = "FILE"
    )]
    pub operator_file: Option<PathBuf>,
}

/// The base state directory (`--state-dir`, `$FLOTILLA_STATE_DIR`, XDG, `~/.local/state/flotilla`).
pub fn base_state_dir(cli: &Cli) -> anyhow::Result<PathBuf> {
    Ok(
        flotilla_exec::statedir::StateDir::resolve(cli.state_dir.as_deref(), "default")?
            .base()
            .to_path_buf(),
    )
}

/// A client of the authority with the operator's credential.
pub fn client(cli: &Cli) -> anyhow::Result<flotilla_api::Client> {
    let args = &cli.server;
    let path = match &args.operator_file {
        Some(p) => p.clone(),
        None => base_state_dir(cli)?
            .join("authority")
            .join(flotilla_server::authority::OPERATOR_FILE),
    };
    let file = flotilla_server::authority::OperatorFile::read(&path).map_err(|e| {
        anyhow::anyhow!("{e}\n  (the operator credential: run `flotilla serve init` on the authority's machine, or pass --operator-file)")
    })?;
    let url = args
        .server
        .clone()
        .unwrap_or_else(|| format!("https://{}", flotilla_server::authority::DEFAULT_LISTEN));
    Ok(flotilla_api::Client::new(
        &url,
        &file.ca_pem,
        Some(file.credential),
    )?)
}

/// How calls reach `topology`'s remote hosts: SSH, and with `--server` the authority
/// for `agent` hosts (the `agent` transport).
pub fn transport(
    cli: &Cli,
    topology: &flotilla_model::Topology,
) -> anyhow::Result<std::sync::Arc<dyn flotilla_exec::transport::Transport>> {
    let ssh: std::sync::Arc<dyn flotilla_exec::transport::Transport> =
        std::sync::Arc::new(super::ssh_pool(cli, topology));
    let agent_hosts: std::collections::BTreeSet<String> = topology
        .hosts
        .iter()
        .filter(|(_, h)| h.transport == flotilla_model::inventory::TransportKind::Agent)
        .map(|(n, _)| n.clone())
        .collect();
    if cli.server.server.is_none() || agent_hosts.is_empty() {
        return Ok(ssh);
    }
    let queue: std::sync::Arc<dyn flotilla_exec::transport::agent::CallQueue> =
        std::sync::Arc::new(AuthorityCalls(client(cli)?));
    Ok(std::sync::Arc::new(
        flotilla_exec::transport::agent::AgentTransport::new(queue, agent_hosts, ssh),
    ))
}

/// With `--server` and `agent` hosts: warns when this inventory is not the revision
/// the authority has selected (its agents converge to that one, and report what this
/// invocation changes differently as drift).
pub fn warn_unless_selected(cli: &Cli, topology: &flotilla_model::Topology) {
    let agents = topology
        .hosts
        .values()
        .any(|h| h.transport == flotilla_model::inventory::TransportKind::Agent);
    if cli.server.server.is_none() || !agents {
        return;
    }
    let selected = client(cli).ok().and_then(|c| {
        let rt = super::runtime().ok()?;
        rt.block_on(c.history()).ok()
    });
    let Some(history) = selected else {
        return; // the operation itself says why the authority cannot be reached
    };
    let current = history.selections.first().map(|s| s.revision.as_str());
    if current != Some(topology.digest()) {
        eprintln!(
            "warning: this inventory ({}) is not the revision the authority selected ({}): the agents converge to the selected one and report what differs as drift; publish it first (`flotilla config publish`)",
            &topology.digest()[..19],
            current.map(|c| &c[..c.len().min(19)]).unwrap_or("none")
        );
    }
}

/// The authority's client as the queue of the `agent` transport.
struct AuthorityCalls(flotilla_api::Client);

/// The authority as the queue of the `agent` transport
/// (`flotilla_exec::transport::agent`): calls for an agent host are queued here and
/// their answers awaited.
impl flotilla_exec::transport::agent::CallQueue for AuthorityCalls {
    fn enqueue<'a>(
        &'a self,
        host: &'a str,
        request: serde_json::Value,
        deadline_ms: i64,
    ) -> flotilla_exec::transport::BoxFuture<'a, Result<u64, String>> {
        Box::pin(async move {
            self.0
                .enqueue_call(
                    host,
                    &flotilla_api::wire::EnqueueRequest {
                        request,
                        deadline_ms,
                    },
                )
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn answer<'a>(
        &'a self,
        id: u64,
        wait: std::time::Duration,
    ) -> flotilla_exec::transport::BoxFuture<'a, Result<Option<serde_json::Value>, String>> {
        Box::pin(async move {
            self.0
                .call_status(id, wait)
                .await
                .map(|c| c.response)
                .map_err(|e| e.to_string())
        })
    }
}

/// Where the authority keeps its data.
#[derive(clap::Args, Debug, Clone)]
pub struct StoreArgs {
    /// The authority directory (CA, certificates, SQLite database, operator.json).
    /// Default: `<state dir>/authority`.
    #[arg(long, env = "FLOTILLA_AUTHORITY_DIR", value_name = "DIR")]
    pub authority_dir: Option<PathBuf>,
    /// Keep revisions, tokens and reports in PostgreSQL instead of SQLite
    /// (`postgres://user:password@host:port/database`).
    #[arg(long, env = "FLOTILLA_DATABASE_URL", value_name = "URL")]
    pub database_url: Option<String>,
}

/// The authority directory: `--authority-dir`, else `<state dir>/authority`.
pub fn authority_dir(cli: &Cli, store: &StoreArgs) -> anyhow::Result<PathBuf> {
    match &store.authority_dir {
        Some(d) => Ok(d.clone()),
        None => Ok(base_state_dir(cli)?.join("authority")),
    }
}
