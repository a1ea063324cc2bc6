//! `flotilla serve credentials list | revoke ID | revoke --host H | create --kind
//! metrics NAME`: the authority's credentials (kind, whose, created, last used and
//! from which address, revoked; never a secret), revoking one by a unique prefix of
//! its id or every agent credential of a host, and making a metrics scraper's
//! credential (`/metrics` only). Through the API with the operator credential
//! (`--server`), like `serve token` and `serve ui-link`, so that a revocation goes
//! through the authority that forgets it at once.

use crate::render::when;
use crate::EXIT_OK;
use flotilla_api::credentials::{
    CredentialCreated, CredentialDto, CredentialList, CredentialsRevoked, MetricsCredentialRequest,
    RevokeCredentials,
};

/// Arguments of `flotilla serve credentials`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

/// `flotilla serve credentials` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Every credential, oldest first: id, kind, whose, created, last used (to
    /// within a minute) and from which address, revoked.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a credential by (a unique prefix of, at least 4 digits) its id, or
    /// every agent credential of a host. Refused by every authority on the same
    /// database within a second.
    Revoke {
        /// The credential's id (the ID column of `list`), or a unique prefix.
        #[arg(required_unless_present = "host", conflicts_with = "host")]
        id: Option<String>,
        /// Every agent credential of this host.
        #[arg(long, value_name = "HOST")]
        host: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make a credential (printed once, stored hashed).
    Create {
        /// What it may do: `metrics` (read `/metrics` only, e.g. for Prometheus).
        #[arg(long, value_parser = ["metrics"])]
        kind: String,
        /// Whose it is (e.g. `prometheus`).
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn print_table(credentials: &[CredentialDto]) {
    let head = [
        "ID",
        "KIND",
        "NAME",
        "CREATED",
        "LAST USED",
        "ADDRESS",
        "REVOKED",
    ];
    let mut rows = vec![head.map(String::from).to_vec()];
    rows.extend(credentials.iter().map(|c| {
        vec![
            c.id.clone(),
            c.kind.clone(),
            c.name.clone(),
            when(c.created_ms),
            c.last_used_ms.map_or("-".into(), when),
            c.last_address.clone().unwrap_or_else(|| "-".into()),
            c.revoked_ms.map_or("-".into(), when),
        ]
    }));
    print!("{}", crate::render::table(&rows));
}

/// Runs it against the authority (`--server`, the operator credential).
pub fn run(cli: &crate::Cli, args: &Args) -> anyhow::Result<u8> {
    let rt = super::runtime()?;
    let client = super::authority::client(cli)?;
    match &args.command {
        Command::List { json } => {
            let r: CredentialList = rt.block_on(client.get("/v1/credentials"))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else if r.credentials.is_empty() {
                println!("no credentials");
            } else {
                print_table(&r.credentials);
            }
        }
        Command::Revoke { id, host, json } => {
            let req = RevokeCredentials {
                id: id.clone(),
                host: host.clone(),
            };
            let r: CredentialsRevoked = rt.block_on(client.post("/v1/credentials/revoke", &req))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!("revoked {} credential(s):", r.credentials.len());
                print_table(&r.credentials);
            }
        }
        // `kind` is `metrics` (clap allows nothing else).
        Command::Create { name, json, .. } => {
            let r: CredentialCreated = rt.block_on(client.post(
                "/v1/credentials/metrics",
                &MetricsCredentialRequest { name: name.clone() },
            ))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "{} credential {} for `{}` (shown once; it may only read /metrics):",
                    r.kind, r.id, r.name
                );
                println!("  {}", r.credential);
                println!("Prometheus (prometheus.yml):");
                println!("  - job_name: flotilla");
                println!("    scheme: https");
                println!("    authorization: {{ credentials: <the credential above> }}");
                println!("    tls_config: {{ ca_file: <the authority's CA: GET /v1/ca.pem> }}");
                println!("    static_configs: [{{ targets: [<host:port of the authority>] }}]");
            }
        }
    }
    Ok(EXIT_OK)
}
