//! A running authority on 127.0.0.1 (HTTPS with its own CA) and an operator
//! client of it, for the API's tests.

#![allow(dead_code)]

use flotilla_release::rollout::{HostUpdate, UpdateReport, UpdateState};
use flotilla_release::Reason;
use flotilla_server::server::{AppState, Settings};
use flotilla_server::Client;
use flotilla_store::authority::{AuthorityStore, PostgresAuthority, Principal, SqliteAuthority};
use std::time::Duration;

pub fn now_ms() -> i64 {
    flotilla_exec::this_process::now_ms()
}

/// A running authority on 127.0.0.1 and an operator client of it.
pub struct Running<S: AuthorityStore + Clone> {
    pub url: String,
    pub ca_pem: String,
    pub ca_hash: String,
    pub operator: Client,
    /// The operator credential itself (the dashboard's sign-in takes it).
    pub operator_credential: String,
    pub store: S,
    /// The service's state (its blob store, garbage collection).
    pub state: std::sync::Arc<AppState<S>>,
    /// The TLS files (and the blob directory, `blobs`).
    pub dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl<S: AuthorityStore + Clone> Drop for Running<S> {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Serves `store` with `report_deadline` and `public_url`; `configure` sees the
/// state before it serves.
pub async fn start_with<S: AuthorityStore + Clone>(
    store: S,
    report_deadline: Duration,
    public_url: &str,
    configure: impl FnOnce(&AppState<S>),
) -> Running<S> {
    start_with_blob_grace(store, report_deadline, public_url, None, configure).await
}

/// [`start_with`], unreferenced blobs kept for `blob_grace` (default: 24 h).
pub async fn start_with_blob_grace<S: AuthorityStore + Clone>(
    store: S,
    report_deadline: Duration,
    public_url: &str,
    blob_grace: Option<Duration>,
    configure: impl FnOnce(&AppState<S>),
) -> Running<S> {
    let dir = tempfile::tempdir().unwrap();
    let mut blobs = flotilla_server::blobs::BlobSettings::in_authority_dir(dir.path());
    if let Some(g) = blob_grace {
        blobs.grace = g;
    }
    let ca = flotilla_server::tls::init(dir.path(), &[]).unwrap();
    let tls = flotilla_server::tls::server_config(
        &dir.path().join(flotilla_server::tls::SERVER_CERT),
        &dir.path().join(flotilla_server::tls::SERVER_KEY),
    )
    .unwrap();
    let op = flotilla_server::auth::new_secret(flotilla_server::auth::OPERATOR_PREFIX);
    store
        .create_credential(
            flotilla_server::auth::hash_secret(&op),
            Principal::Operator {
                name: "tester".into(),
            },
            now_ms(),
        )
        .await
        .unwrap();
    let state = AppState::new(
        store.clone(),
        Settings {
            ca_pem: ca.ca_pem.clone(),
            ca_hash: ca.ca_hash.clone(),
            report_deadline,
            sessions: None,
            public_url: public_url.into(),
            controller_dir: None,
            blobs,
        },
    )
    .await
    .unwrap();
    configure(&state);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(flotilla_server::server::run(
        state.clone(),
        listener,
        tls,
        async {
            let _ = rx.await;
        },
    ));
    let operator = Client::new(&url, &ca.ca_pem, Some(op.clone())).unwrap();
    // The socket listens already (bound above): the first request waits in its
    // backlog until the service accepts it.
    operator
        .get_text("/healthz")
        .await
        .expect("authority never answered");
    Running {
        url,
        ca_pem: ca.ca_pem,
        ca_hash: ca.ca_hash,
        operator,
        operator_credential: op,
        store,
        state,
        dir,
        stop: Some(tx),
    }
}

/// `host`'s agent reporting release 2.0.0 of `flotilla-agent` in `state` (for
/// `reason`), running `sha`.
pub fn update(host: &str, sha: &str, state: UpdateState, reason: Option<Reason>) -> HostUpdate {
    HostUpdate {
        host: host.into(),
        platform: "linux-x86_64".into(),
        running_sha256: Some(format!("sha256:{sha}")),
        pid: Some(4242),
        update: Some(UpdateReport {
            name: "flotilla-agent".into(),
            version: "2.0.0".into(),
            sha256: sha.into(),
            state,
            reason,
            detail: String::new(),
            evidence: Vec::new(),
            since_ms: now_ms(),
        }),
        releases: std::collections::BTreeMap::new(),
        updates: Vec::new(),
        skipped: Vec::new(),
        unskipped: Vec::new(),
        received_ms: 0,
    }
}

/// The manifest of `flotilla-agent` `version` (serial 7) with one linux-x86_64
/// artifact, the blob `sha` of `size` bytes.
pub fn agent_manifest(version: &str, sha: &str, size: u64) -> String {
    let m = flotilla_release::Manifest {
        name: "flotilla-agent".into(),
        version: version.into(),
        serial: 7,
        expires: "2999-01-01T00:00:00Z".into(),
        artifacts: vec![flotilla_release::Artifact {
            os: "linux".into(),
            arch: "x86_64".into(),
            url: None,
            blob: Some(sha.into()),
            sha256: sha.into(),
            size,
        }],
    };
    String::from_utf8(m.to_bytes()).unwrap()
}

/// A fresh SQLite authority store in a temporary directory (kept while the
/// directory lives).
pub fn sqlite() -> (SqliteAuthority, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    (
        SqliteAuthority::open(&dir.path().join("authority.db")).unwrap(),
        dir,
    )
}

/// A PostgreSQL authority store on a fresh database of the test server.
///
/// # Panics
/// When `FLOTILLA_TEST_POSTGRES_URL` is unset, saying how to set it.
pub async fn postgres() -> PostgresAuthority {
    let url = std::env::var("FLOTILLA_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!("FLOTILLA_TEST_POSTGRES_URL is not set: start PostgreSQL with `scripts/postgres` and export the URL it prints")
    });
    flotilla_store::authority::testing::fresh_postgres(&url).await
}

/// `both!(case)`: the async test `case(store)` on each backend, as
/// `case::sqlite` and `case::postgres`.
#[allow(unused_macros)]
macro_rules! both {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let (s, _d) = crate::common::sqlite();
                super::$name(s).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(crate::common::postgres().await).await;
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use both;
