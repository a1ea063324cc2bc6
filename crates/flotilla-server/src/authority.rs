//! Running an authority: its directory, `serve init`, choosing the storage backend,
//! serving until a signal, and the operator's credential file.
//!
//! The authority directory (default `<state dir>/authority`) holds the TLS files
//! ([`crate::tls`]), `authority.db` (SQLite, the default backend),
//! `operator.json` ([`OperatorFile`], mode 0600), and optionally `sessions.toml`
//! and `notifications.toml` ([`crate::notify::config`]).

pub use crate::error::AuthorityError;
use crate::state::{AppState, Settings};
use crate::tls;
use flotilla_store::authority::{
    AuthorityStore, Cluster, PostgresAuthority, Principal, SqliteAuthority,
};
use flotilla_store::schema::{BeforePostgresMigration, HookError, PendingMigration};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The hook an SQLite store calls before migrating (see
/// [`flotilla_store::schema::BeforeMigration`]).
pub type SqliteHook = dyn Fn(&PendingMigration) -> Result<(), HookError> + Send + Sync;

/// What opening the store does before a schema migration of a database that holds
/// data: the backups `crate::backup::migration_hooks` makes (none by default).
#[derive(Clone, Default)]
pub struct MigrationHooks {
    /// Called before an SQLite `authority.db` is migrated.
    pub sqlite: Option<Arc<SqliteHook>>,
    /// Awaited before the PostgreSQL database is migrated.
    pub postgres: Option<Arc<BeforePostgresMigration>>,
}

impl std::fmt::Debug for MigrationHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MigrationHooks")
            .field("sqlite", &self.sqlite.is_some())
            .field("postgres", &self.postgres.is_some())
            .finish()
    }
}

impl MigrationHooks {
    fn open_sqlite(&self, path: &Path) -> Result<SqliteAuthority, AuthorityError> {
        let hook = self.sqlite.as_deref().map(|h| h as _);
        Ok(SqliteAuthority::open_with(path, hook)?)
    }

    async fn connect_postgres(&self, url: &str) -> Result<PostgresAuthority, AuthorityError> {
        Ok(PostgresAuthority::connect_with(url, self.postgres.as_deref()).await?)
    }
}

/// Where `flotilla serve` listens unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7443";
/// The SQLite database file in the authority directory.
pub const DATABASE_FILE: &str = "authority.db";
/// The operator credential file in the authority directory.
pub const OPERATOR_FILE: &str = "operator.json";

/// The operator's credential, as `serve init` writes it: what the CLI's `--server`
/// needs to trust and be trusted by the authority.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OperatorFile {
    /// The operator credential (`flt-op-…`).
    pub credential: String,
    /// The CA certificate to trust, PEM.
    pub ca_pem: String,
    /// Its pin.
    pub ca_hash: String,
}

impl OperatorFile {
    /// Reads one.
    ///
    /// # Errors
    /// [`AuthorityError::Io`] when unreadable or not an operator file.
    pub fn read(path: &Path) -> Result<OperatorFile, AuthorityError> {
        let io = |source| AuthorityError::Io {
            path: path.to_path_buf(),
            source,
        };
        let text = std::fs::read_to_string(path).map_err(io)?;
        serde_json::from_str(&text)
            .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
    }
}

/// Where the authority keeps its data.
#[derive(Debug, Clone)]
pub enum Backend {
    /// SQLite in the authority directory (the default).
    Sqlite(PathBuf),
    /// PostgreSQL at this URL (`postgres://user@host:port/db`).
    Postgres(String),
}

impl Backend {
    /// `--database-url` if given, else SQLite in `dir`.
    pub fn choose(dir: &Path, database_url: Option<&str>) -> Backend {
        match database_url {
            Some(u) => Backend::Postgres(u.to_string()),
            None => Backend::Sqlite(dir.join(DATABASE_FILE)),
        }
    }

    /// The backend's name and place, for messages (a URL's password is not shown).
    pub fn describe(&self) -> String {
        match self {
            Backend::Sqlite(p) => format!("SQLite {}", p.display()),
            Backend::Postgres(u) => {
                let shown = match (u.find("://"), u.rfind('@')) {
                    (Some(s), Some(at)) if at > s => {
                        let cred = &u[s + 3..at];
                        match cred.split_once(':') {
                            Some((user, _)) => format!("{}{user}:***{}", &u[..s + 3], &u[at..]),
                            None => u.clone(),
                        }
                    }
                    _ => u.clone(),
                };
                format!("PostgreSQL {shown}")
            }
        }
    }
}

/// What `serve init` did.
#[derive(Debug, Clone)]
pub struct Initialised {
    /// The CA.
    pub ca: tls::CaInfo,
    /// The operator credential file.
    pub operator_file: PathBuf,
    /// Whether the operator credential was made now.
    pub operator_created: bool,
}

fn write_private(path: &Path, text: &str) -> Result<(), AuthorityError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let io = |source| AuthorityError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// The lock file that makes one `flotilla serve` of an SQLite store the only one
/// on its directory (several of a PostgreSQL store share it).
pub const SERVE_LOCK_FILE: &str = "serve.lock";

/// Takes `<dir>/serve.lock` (a `flock(2)`, released when this process ends, even
/// by `kill -9`) and writes this process into it, as `flotilla serve --listen
/// ADDR` only: its other arguments may hold a database password. Exclusive for
/// an SQLite store (one process owns the file); shared for PostgreSQL, where any
/// number of authorities serve one database and may share the directory (its CA,
/// its blobs) — a restore, which takes it exclusively, still waits for them all.
///
/// # Errors
/// [`AuthorityError::Busy`] naming the holder when another process has it;
/// [`AuthorityError::Io`].
fn lock_dir(
    dir: &Path,
    listen: SocketAddr,
    backend: &Backend,
) -> Result<nix::fcntl::Flock<std::fs::File>, AuthorityError> {
    use flotilla_exec::lock::{try_lock_described, LockHolder, LockMode};
    let path = dir.join(SERVE_LOCK_FILE);
    let me = LockHolder::this_process(format!("flotilla serve --listen {listen}"));
    let mode = match backend {
        Backend::Sqlite(_) => LockMode::Exclusive,
        Backend::Postgres(_) => LockMode::Shared,
    };
    match try_lock_described(&path, Some(&me), mode) {
        Ok(Ok(lock)) => Ok(lock),
        Ok(Err(holder)) => Err(AuthorityError::Busy {
            dir: dir.to_path_buf(),
            holder: holder.map_or_else(
                || "a process that has not described itself yet".to_owned(),
                |h| h.to_string(),
            ),
        }),
        Err(source) => Err(AuthorityError::Io { path, source }),
    }
}

/// `flotilla serve init`: makes (or keeps) the CA and server certificate for
/// `names`, and an operator credential (kept if `operator.json` exists); a store
/// of an older schema is migrated after `hooks` ran (a backup).
///
/// # Errors
/// [`AuthorityError`].
pub async fn init(
    dir: &Path,
    names: &[String],
    backend: &Backend,
    hooks: &MigrationHooks,
) -> Result<Initialised, AuthorityError> {
    std::fs::create_dir_all(dir).map_err(|source| AuthorityError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    use std::os::unix::fs::PermissionsExt as _;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    let ca = tls::init(dir, names)?;
    let operator_file = dir.join(OPERATOR_FILE);
    let existing = OperatorFile::read(&operator_file).ok();
    // The operator file's credential when it belongs to this CA (kept), else a new
    // one; recorded in the store either way (a database new to this directory —
    // PostgreSQL after SQLite — learns it), after the store accepted this CA.
    let kept = existing.filter(|f| f.ca_hash == ca.ca_hash);
    let credential = match &kept {
        Some(f) => f.credential.clone(),
        None => crate::auth::new_secret(crate::auth::OPERATOR_PREFIX),
    };
    let hash = crate::auth::hash_secret(&credential);
    match backend {
        Backend::Sqlite(p) => record_operator(&hooks.open_sqlite(p)?, &ca.ca_hash, hash).await?,
        Backend::Postgres(u) => {
            record_operator(&hooks.connect_postgres(u).await?, &ca.ca_hash, hash).await?
        }
    }
    let operator_created = kept.is_none();
    if operator_created {
        let file = OperatorFile {
            credential,
            ca_pem: ca.ca_pem.clone(),
            ca_hash: ca.ca_hash.clone(),
        };
        write_private(
            &operator_file,
            &(serde_json::to_string_pretty(&file).expect("serialises") + "\n"),
        )?;
    }
    Ok(Initialised {
        ca,
        operator_file,
        operator_created,
    })
}

/// Claims `store` for the CA `ca_pin` (refused when another CA's authorities
/// serve it), then records the operator credential `hash` unless the store holds
/// it already (revoked or not: a revoked one stays revoked).
async fn record_operator<S: AuthorityStore>(
    store: &S,
    ca_pin: &str,
    hash: String,
) -> Result<(), AuthorityError> {
    store.claim_ca(ca_pin.to_string()).await?;
    if store.credential(hash.clone()).await?.is_none() {
        let principal = Principal::Operator {
            name: "operator".into(),
        };
        store
            .create_credential(hash, principal, flotilla_exec::this_process::now_ms())
            .await?;
    }
    Ok(())
}

/// How to run `flotilla serve`.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The authority directory.
    pub dir: PathBuf,
    /// Where to listen.
    pub listen: SocketAddr,
    /// Storage.
    pub backend: Backend,
    /// A user's own certificate chain and key (PEM) instead of the private CA's.
    pub tls_cert: Option<(PathBuf, PathBuf)>,
    /// A host whose agent has not reported for this long is `unreachable`.
    pub report_deadline: Duration,
    /// The URL people reach the authority at (dashboard links); `None`:
    /// `https://<bound address>`.
    pub public_url: Option<String>,
    /// What opening a store of an older schema does first (a backup).
    pub migration: MigrationHooks,
    /// Where blobs are kept and how long unreferenced ones stay
    /// ([`crate::blobs::BlobSettings::in_authority_dir`] by default).
    pub blobs: crate::blobs::BlobSettings,
    /// Makes the sessions' runtime when `sessions.toml` says `[runtime] kind =
    /// "kubernetes"` (the binary's, which links the Kubernetes client); called
    /// before privileges are dropped, so a kubeconfig readable by root only is read.
    pub pod_runtime: Option<PodRuntimeMaker>,
}

/// Makes a Kubernetes session runtime from `[runtime.kubernetes]` and the
/// sessions' directory; its error, a sentence.
#[derive(Clone)]
pub struct PodRuntimeMaker(pub std::sync::Arc<MakePodRuntime>);

/// What a [`PodRuntimeMaker`] calls.
pub type MakePodRuntime = dyn Fn(
        &flotilla_sessions::config::KubernetesRuntimeConfig,
        &std::path::Path,
    ) -> Result<std::sync::Arc<dyn flotilla_sessions::runtime::Runtime>, String>
    + Send
    + Sync;

impl std::fmt::Debug for PodRuntimeMaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PodRuntimeMaker")
    }
}

/// A listening socket with a backlog of 4096 (the standard library's is 128): a
/// fleet's agents reconnect all at once after the authority restarts.
fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(4096)?.into_std()
}

/// Runs the authority until SIGINT or SIGTERM. `ready` is called with the bound
/// address once it accepts connections.
///
/// # Errors
/// [`AuthorityError`].
pub async fn serve(
    opts: ServeOptions,
    ready: impl FnOnce(SocketAddr, &str, &Backend),
) -> Result<(), AuthorityError> {
    let (cert, key) = opts.tls_cert.clone().unwrap_or_else(|| {
        (
            opts.dir.join(tls::SERVER_CERT),
            opts.dir.join(tls::SERVER_KEY),
        )
    });
    if opts.tls_cert.is_none() && !cert.exists() {
        return Err(AuthorityError::NotInitialised(opts.dir.clone()));
    }
    let _dir_lock = lock_dir(&opts.dir, opts.listen, &opts.backend)?;
    let config = tls::server_config(&cert, &key)?;
    let (ca_hash, ca_pem) = tls::chain_pin(&cert)?;
    let sessions_file = opts.dir.join(crate::sessions::SESSIONS_CONFIG_FILE);
    let sessions_config = if sessions_file.exists() {
        Some(crate::sessions::SessionsConfig::load(&sessions_file)?)
    } else {
        None
    };
    // Read before privileges are dropped: token files may be root's.
    let notify_file = opts.dir.join(crate::notify::NOTIFICATIONS_FILE);
    let notify_config = if notify_file.exists() {
        Some(crate::notify::NotifyConfig::load(&notify_file)?)
    } else {
        None
    };
    // With sessions, split before serving: the launcher stays root, the executor
    // runs as its user, this process drops to the API user once it has bound its
    // listener (`crate::privsep`).
    let privileged = match &sessions_config {
        Some(c) => Some(crate::privsep::setup(&opts.dir, c).map_err(AuthorityError::Sessions)?),
        None => None,
    };
    let pod_runtime = match sessions_config
        .as_ref()
        .and_then(|c| c.runtime.kubernetes.as_ref().map(|k| (c, k)))
    {
        None => None,
        Some((c, k)) => {
            let make = opts.pod_runtime.as_ref().ok_or_else(|| {
                AuthorityError::Sessions(
                    "[runtime] kind = \"kubernetes\" needs a flotilla built with Kubernetes".into(),
                )
            })?;
            let dir = c
                .dir
                .clone()
                .unwrap_or_else(|| PathBuf::from(flotilla_sessions::config::DEFAULT_SESSIONS_DIR));
            Some((make.0)(k, &dir).map_err(AuthorityError::Sessions)?)
        }
    };
    let listener = bind(opts.listen).map_err(|source| AuthorityError::Listen {
        addr: opts.listen,
        source,
    })?;
    if let Some(p) = &privileged {
        crate::privsep::drop_to(p.api.0, p.api.1)
            .map_err(|e| AuthorityError::Sessions(format!("dropping to the API user: {e}")))?;
    }
    let bound = listener
        .local_addr()
        .map_err(|source| AuthorityError::Listen {
            addr: opts.listen,
            source,
        })?;
    let sessions = sessions_config.zip(privileged).map(|(config, privileged)| {
        crate::sessions::SessionsSetup {
            config,
            authority_dir: opts.dir.clone(),
            url: format!("https://127.0.0.1:{}", bound.port()),
            ca_pem: ca_pem.clone(),
            privileged,
            runtime: pod_runtime,
        }
    });
    let settings = Settings {
        ca_pem,
        ca_hash: ca_hash.clone(),
        report_deadline: opts.report_deadline,
        sessions,
        public_url: opts
            .public_url
            .clone()
            .unwrap_or_else(|| format!("https://{bound}"))
            .trim_end_matches('/')
            .to_string(),
        controller_dir: Some(opts.dir.join("controller")),
        blobs: opts.blobs.clone(),
    };
    let shutdown = async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("signal handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    let io = |source| AuthorityError::Listen {
        addr: bound,
        source,
    };
    match &opts.backend {
        Backend::Sqlite(p) => {
            let store = opts.migration.open_sqlite(p)?;
            store.claim_ca(ca_hash.clone()).await?;
            let state = AppState::new(store, settings).await?;
            if let Some(c) = notify_config {
                state.notifier.configure(c);
            }
            ready(bound, &ca_hash, &opts.backend);
            crate::server::run(state, listener, config, shutdown)
                .await
                .map_err(io)
        }
        Backend::Postgres(u) => {
            let store = opts.migration.connect_postgres(u).await?;
            // Every authority sharing the database serves one CA: the first
            // records its pin, one with another is refused.
            store.claim_ca(ca_hash.clone()).await?;
            let state = AppState::new(store, settings).await?;
            if let Some(c) = notify_config {
                state.notifier.configure(c);
            }
            ready(bound, &ca_hash, &opts.backend);
            crate::server::run(state, listener, config, shutdown)
                .await
                .map_err(io)
        }
    }
}
