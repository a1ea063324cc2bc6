//! `flotilla serve [init | token | credentials | ui-link | openapi | backup |
//! restore]`: run the desired-state authority (backing it up before a migration of
//! its store), make its CA and operator credential, make, list and revoke join
//! tokens (`cmd/token.rs`), list and revoke credentials (`cmd/credentials.rs`), make
//! dashboard sign-in links, print the API document, back it up and restore it
//! (`cmd/backup.rs`, `cmd/restore.rs`); `serve --local`: the authority and this
//! machine's agent in one command ([`crate::local_fleet`]).

pub use super::authority::{authority_dir, StoreArgs};
use crate::{Cli, EXIT_OK};
use flotilla_server::authority::{self, Backend, ServeOptions};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `flotilla serve`.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<ServeCommand>,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Options of the server itself.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Address and port to listen on (HTTPS).
    #[arg(long, default_value = authority::DEFAULT_LISTEN, value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// Serve this certificate chain (PEM) instead of the private CA's (with --tls-key).
    #[arg(long, requires = "tls_key", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, requires = "tls_cert", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// A host whose agent has not reported for this long is shown `unreachable`.
    #[arg(long, default_value = "45s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub report_deadline: Duration,
    /// The URL people reach this authority at, for the dashboard's links in
    /// notifications and login URLs (default: `https://<listening address>`).
    #[arg(long, env = "FLOTILLA_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,
    /// Where release artifacts and sessions' outputs are kept (default:
    /// `<authority dir>/blobs`). Several authorities on one database must share
    /// it: any POSIX file system they all mount, with atomic rename and fsync.
    #[arg(long, env = "FLOTILLA_BLOB_DIR", value_name = "DIR")]
    pub blob_dir: Option<PathBuf>,
    /// A blob no release or session references is removed once its last upload
    /// is this old (as are uploads' leftovers).
    #[arg(long, default_value = "24h", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub blob_grace: Duration,
    /// One machine in one command: initialise the authority if needed, serve it on
    /// 127.0.0.1 (--listen, loopback only), join and run this machine's agent, and
    /// print the dashboard's sign-in URL; Ctrl-C or SIGTERM stops both.
    #[arg(long, conflicts_with_all = ["database_url", "tls_cert"])]
    pub local: bool,
    /// The backup taken before a schema migration of the store.
    #[command(flatten)]
    pub backups: super::backup::AutoArgs,
}

/// `flotilla serve` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ServeCommand {
    /// Make the authority's private CA, its server certificate and an operator
    /// credential (kept if they exist; the certificate is reissued for new names).
    Init {
        #[command(flatten)]
        store: StoreArgs,
        /// More names or addresses the server certificate is valid for (besides
        /// localhost, 127.0.0.1 and ::1); repeatable.
        #[arg(long = "san", value_name = "NAME")]
        sans: Vec<String>,
    },
    /// Join tokens for agents: create (joining revokes the host's older agent
    /// credentials unless --keep-credentials), list, revoke.
    Token(super::token::Args),
    /// The authority's credentials: list (kind, whose, created, last used, from
    /// which address), revoke by id or --host, create a metrics scraper's.
    Credentials(super::credentials::Args),
    /// The notifications posted to webhooks (`notifications.toml`) and how each
    /// delivery went, newest first.
    Notifications(super::notifications::Args),
    /// Make a credential that may only post alerts (Alertmanager's webhook,
    /// `POST /v1/alerts/alertmanager`); printed once, stored hashed.
    AlertsCredential {
        /// The sender's name.
        #[arg(long, default_value = "alertmanager")]
        name: String,
    },
    /// A one-time sign-in URL for the web dashboard (`--viewer`: read-only), the
    /// links made so far (`--list`), or revoking one (`--revoke ID`).
    UiLink(super::ui_link::Args),
    /// Print the API's OpenAPI document (JSON).
    Openapi,
    /// Back the authority up into a verified archive.
    ///
    /// Its directory (CA, certificates, SQLite database through SQLite's online
    /// backup API) and, with --database-url, its PostgreSQL database (`pg_dump`);
    /// verified by a restore into a scratch place before it is kept.
    Backup(super::backup::ServeArgs),
    /// Restore the authority from an archive of `serve backup`.
    ///
    /// Refused while a `flotilla serve` runs on the directory; the state it replaces
    /// is kept beside it.
    Restore(super::restore::ServeArgs),
    /// The authority's root launcher (started by `flotilla serve` itself, with
    /// its socket as descriptor 3; not for people).
    #[command(hide = true)]
    Launcher {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// The authority's executor (started by `flotilla serve` itself; not for
    /// people).
    #[command(hide = true)]
    Executor {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// `git upload-pack` in a session's tree, run by the launcher as the tree's
    /// owner on this process's standard input and output (git's `--upload-pack`
    /// for a session's push; not for people).
    #[command(hide = true)]
    UploadPackRelay {
        #[command(flatten)]
        store: StoreArgs,
        /// The session.
        #[arg(long)]
        session: u64,
        /// Its uid.
        #[arg(long)]
        uid: u32,
        /// The repository path git appends (unused: the launcher knows the tree).
        path: Option<String>,
    },
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let rt = super::runtime()?;
    match &args.command {
        Some(ServeCommand::Launcher { store }) => {
            let dir = authority_dir(cli, store)?;
            let listener = flotilla_server::privsep::inherited_listener()?;
            // The role ends with the API process that started it.
            flotilla_server::privsep::when_api_gone(|| std::process::exit(0));
            flotilla_server::privsep::launcher::serve(&dir, listener)?;
            Ok(EXIT_OK)
        }
        Some(ServeCommand::Executor { .. }) => {
            let listener = flotilla_server::privsep::inherited_listener()?;
            // The role ends with the API process that started it.
            flotilla_server::privsep::when_api_gone(|| std::process::exit(0));
            flotilla_server::privsep::executor::serve(listener)?;
            Ok(EXIT_OK)
        }
        Some(ServeCommand::UploadPackRelay {
            store,
            session,
            uid,
            path: _,
        }) => {
            use std::os::fd::AsRawFd;
            let dir = authority_dir(cli, store)?;
            let socket = dir
                .join("run")
                .join(flotilla_server::privsep::LAUNCHER_SOCKET);
            let reply = flotilla_server::privsep::launcher::call(
                &socket,
                &flotilla_server::privsep::launcher::Request::UploadPack {
                    id: *session,
                    uid: *uid,
                },
                &[std::io::stdin().as_raw_fd(), std::io::stdout().as_raw_fd()],
            )?;
            Ok(match reply {
                flotilla_server::privsep::launcher::Reply::Exited { code: Some(0) } => EXIT_OK,
                _ => crate::EXIT_REFUSED,
            })
        }
        Some(ServeCommand::UiLink(a)) => super::ui_link::run(cli, a),
        Some(ServeCommand::Openapi) => {
            print!("{}", flotilla_server::openapi::document());
            Ok(EXIT_OK)
        }
        Some(ServeCommand::Backup(a)) => super::backup::run_serve(cli, a),
        Some(ServeCommand::Restore(a)) => super::restore::run_serve(cli, a),
        Some(ServeCommand::Init { store, sans }) => {
            let dir = authority_dir(cli, store)?;
            let backend = Backend::choose(&dir, store.database_url.as_deref());
            let migration = flotilla_server::backup::migration_hooks(
                &dir,
                &backend,
                &flotilla_exec::backup::BackupPolicy::default(),
            );
            let done = rt.block_on(authority::init(&dir, sans, &backend, &migration))?;
            println!(
                "authority directory: {}{}",
                dir.display(),
                if done.ca.created {
                    " (new CA)"
                } else {
                    " (CA kept)"
                }
            );
            println!("storage: {}", backend.describe());
            println!("certificate names: {}", done.ca.names.join(", "));
            println!("CA pin: {}", done.ca.ca_hash);
            println!(
                "operator credential: {}{}",
                done.operator_file.display(),
                if done.operator_created {
                    " (new)"
                } else {
                    " (kept)"
                }
            );
            match backend {
                Backend::Sqlite(_) => {
                    println!("next: flotilla serve --authority-dir {}", dir.display())
                }
                // The URL is not repeated: it may hold a password.
                Backend::Postgres(_) => println!(
                    "next: flotilla serve --authority-dir {} --database-url URL (the same URL, or FLOTILLA_DATABASE_URL)",
                    dir.display()
                ),
            }
            Ok(EXIT_OK)
        }
        Some(ServeCommand::Notifications(a)) => super::notifications::run(cli, a),
        Some(ServeCommand::AlertsCredential { name }) => {
            let client = super::authority::client(cli)?;
            let r: flotilla_api::sessions::AlertsCredentialResponse = rt.block_on(client.post(
                "/v1/credentials/alerts",
                &flotilla_api::sessions::AlertsCredentialRequest { name: name.clone() },
            ))?;
            println!("credential for alert sender `{}` (shown once):", r.name);
            println!("  {}", r.credential);
            println!("Alertmanager's receiver (alertmanager.yml):");
            println!("  webhook_configs:");
            println!("    - url: {}/v1/alerts/alertmanager", client.url());
            println!("      http_config:");
            println!("        authorization: {{ credentials: <the credential above> }}");
            println!("        tls_config: {{ ca_file: <the authority's CA: GET /v1/ca.pem> }}");
            Ok(EXIT_OK)
        }
        Some(ServeCommand::Token(a)) => super::token::run(cli, a),
        Some(ServeCommand::Credentials(a)) => super::credentials::run(cli, a),
        None if args.run.local => {
            let r = &args.run;
            crate::local_fleet::run(crate::local_fleet::Local {
                base: super::authority::base_state_dir(cli)?,
                dir: authority_dir(cli, &r.store)?,
                listen: r.listen,
                report_deadline: r.report_deadline,
                public_url: r.public_url.clone(),
                backups: r.backups.policy(),
            })
        }
        None => {
            let r = &args.run;
            let dir = authority_dir(cli, &r.store)?;
            let backend = Backend::choose(&dir, r.store.database_url.as_deref());
            let blobs = flotilla_server::blobs::BlobSettings {
                dir: r
                    .blob_dir
                    .clone()
                    .unwrap_or_else(|| dir.join(flotilla_server::blobs::BLOB_DIR)),
                grace: r.blob_grace,
            };
            let opts = ServeOptions {
                migration: flotilla_server::backup::migration_hooks(
                    &dir,
                    &backend,
                    &r.backups.policy(),
                ),
                backend,
                dir,
                listen: r.listen,
                tls_cert: r.tls_cert.clone().zip(r.tls_key.clone()),
                report_deadline: r.report_deadline,
                public_url: r.public_url.clone(),
                blobs,
                pod_runtime: Some(flotilla_server::authority::PodRuntimeMaker(
                    std::sync::Arc::new(|k, dir| {
                        flotilla_kube::session::PodRuntime::connect(k, dir)
                            .map(|r| std::sync::Arc::new(r) as _)
                            .map_err(|e| flotilla_exec::error::chain(&e))
                    }),
                )),
            };
            let served = rt.block_on(authority::serve(opts, |addr, pin, backend| {
                tracing::info!(
                    "flotilla serve: listening on https://{addr} (CA pin {pin}; {})",
                    backend.describe()
                );
            }));
            // Blocking waits still running (a session's pod followed to its end,
            // which outlives this process) are not waited for.
            rt.shutdown_background();
            served?;
            Ok(EXIT_OK)
        }
    }
}
