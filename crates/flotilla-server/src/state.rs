//! The authority's shared state ([`AppState`]): the store, the selected revision in
//! memory, the releases' and sessions' state, credentials seen, the calls' and
//! replies' wake-ups, the metrics; and who the caller of a request is.

use crate::api;
use crate::auth;
use crate::error::AuthorityError;
use crate::failure::Failure;
use crate::metrics::Metrics;
use axum::http::{header, HeaderMap, StatusCode};
use flotilla_exec::this_process::now_ms;
use flotilla_model::topology::Topology;
use flotilla_store::authority::{AuthorityStore, Principal, Selection};
use flotilla_store::StoreError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long a credential looked up in the store is trusted without asking again
/// (500 ms): a credential revoked by any authority process sharing the database is
/// refused by every one of them within this plus one lookup, well under 1 s.
pub const PRINCIPAL_TTL: Duration = Duration::from_millis(500);

/// Above this many cached credentials, stale entries are dropped when one is added.
const PRINCIPALS_KEPT: usize = 4096;

/// Settings of the service.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The CA certificate clients pin, PEM (served at `/v1/ca.pem`).
    pub ca_pem: String,
    /// Its pin, `sha256:<hex>`.
    pub ca_hash: String,
    /// A host whose agent has not reported for this long is `unreachable`.
    pub report_deadline: Duration,
    /// Agent sessions (`sessions.toml`), or `None`: off.
    pub sessions: Option<crate::sessions::state::SessionsSetup>,
    /// The URL people reach this authority at (`https://host:port`, no trailing
    /// `/`): the base of the dashboard's links in notifications and login URLs
    /// (`flotilla serve --public-url`; default: the listening address).
    pub public_url: String,
    /// Where the authority's own lifecycle operations (the dashboard's) keep their
    /// journal and lifecycle lock (`<authority dir>/controller`); `None`: it runs
    /// none.
    pub controller_dir: Option<std::path::PathBuf>,
    /// Where blobs are kept and how long unreferenced ones stay.
    pub blobs: crate::blobs::BlobSettings,
}

/// The selected revision, parsed once.
#[derive(Clone)]
pub(crate) struct Current {
    pub(crate) selection: Selection,
    pub(crate) topology: Arc<Topology>,
}

/// Shared state of the service.
pub struct AppState<S> {
    pub(crate) store: S,
    pub(crate) settings: Settings,
    /// The blobs' bytes (the store keeps their references).
    pub blobs: crate::blobs::Blobs,
    pub(crate) releases: crate::releases::state::Releases,
    pub(crate) sessions: Option<crate::sessions::state::Sessions>,
    pub(crate) current: RwLock<Option<Current>>,
    pub(crate) index: watch::Sender<u64>,
    /// Credentials seen (by hash), with when they were looked up: trusted for
    /// [`PRINCIPAL_TTL`] only, so that a revocation made by any authority sharing
    /// the database is honoured within it.
    pub(crate) principals: Mutex<HashMap<String, (Principal, Instant)>>,
    /// Moves whenever credentials this process may have trusted are revoked (here,
    /// or by another authority: its announcement or the watermarks' re-check): a
    /// long poll that saw it unchanged across its wait needs no second lookup.
    pub(crate) revocations: std::sync::atomic::AtomicU64,
    pub(crate) last_reports: Mutex<HashMap<String, (i64, Option<String>)>>,
    /// Per host: the id of the last call queued for it (wakes its agent's poll).
    pub(crate) calls: Mutex<HashMap<String, watch::Sender<u64>>>,
    /// Per host: the operation of the last step its agent answered, and when (ms),
    /// so that a report measured before it is shown as such.
    pub(crate) last_steps: Mutex<HashMap<String, (String, i64)>>,
    /// Bumped at every reply (wakes whoever awaits an answer).
    pub(crate) replies: watch::Sender<u64>,
    /// The authority as a controller (plans shown, operations applied), when
    /// [`Settings::controller_dir`] is set.
    pub controller: Option<crate::controller::runs::Controller>,
    /// The web dashboard's sessions, live-update feed and sign-in limit.
    pub(crate) ui: crate::ui::state::UiState,
    /// The metrics.
    pub metrics: Metrics,
    /// This authority among the others sharing its database: leases held,
    /// versions read ([`crate::cluster`]).
    pub cluster: crate::cluster::node::Node,
    /// Notifications to webhooks (none until configured).
    pub notifier: crate::notify::queue::Notifier,
    /// The group commit of agents' reports, started by the first.
    pub(crate) report_writer: std::sync::OnceLock<crate::report_writer::ReportWriter>,
}

pub(crate) fn selection_dto(s: &Selection) -> api::SelectionDto {
    api::SelectionDto {
        index: s.index,
        revision: s.digest.clone(),
        selected_ms: s.selected_ms,
        selected_by: s.selected_by.clone(),
    }
}

impl<S: AuthorityStore> AppState<S> {
    /// Loads the current selection from `store`.
    ///
    /// # Errors
    /// [`AuthorityError::Store`] when the store cannot be read,
    /// [`AuthorityError::CorruptRevision`] when its selected revision does not parse.
    pub async fn new(store: S, settings: Settings) -> Result<Arc<AppState<S>>, AuthorityError> {
        let current = load_current(&store).await?;
        let index = current.as_ref().map_or(0, |c| c.selection.index);
        let metrics = Metrics::default();
        metrics.selection_index.set(index);
        let releases = crate::releases::state::Releases::load(&store).await?;
        let blobs = crate::blobs::Blobs::new(settings.blobs.clone());
        crate::blobs::legacy::adopt(&store, &blobs).await?;
        let sessions = match settings.sessions.clone() {
            None => None,
            Some(setup) => Some(
                crate::sessions::state::Sessions::new(setup).map_err(AuthorityError::Sessions)?,
            ),
        };
        let controller = settings
            .controller_dir
            .clone()
            .map(crate::controller::runs::Controller::new);
        let cluster = crate::cluster::node::Node::new(store.shared(), &settings.public_url);
        Ok(Arc::new(AppState {
            cluster,
            controller,
            blobs,
            store,
            releases,
            sessions,
            settings,
            current: RwLock::new(current),
            index: watch::Sender::new(index),
            principals: Mutex::new(HashMap::new()),
            revocations: Default::default(),
            last_reports: Mutex::new(HashMap::new()),
            calls: Mutex::new(HashMap::new()),
            last_steps: Mutex::new(HashMap::new()),
            replies: watch::Sender::new(0),
            ui: Default::default(),
            metrics,
            notifier: Default::default(),
            report_writer: std::sync::OnceLock::new(),
        }))
    }

    /// The group commit of agents' reports, started by the first report.
    pub(crate) fn report_writer(self: &Arc<Self>) -> &crate::report_writer::ReportWriter {
        self.report_writer.get_or_init(|| {
            let state = Arc::downgrade(self);
            crate::report_writer::ReportWriter::spawn(
                Box::new(move |batch| {
                    let state = state.clone();
                    Box::pin(async move {
                        match state.upgrade() {
                            Some(s) => s.store.put_reports(batch).await.map_err(|e| e.to_string()),
                            None => Err("the authority stopped".into()),
                        }
                    })
                }),
                self.metrics.reports.clone(),
            )
        })
    }

    pub(crate) fn host_calls(&self, host: &str) -> watch::Receiver<u64> {
        self.calls
            .lock()
            .expect("not poisoned")
            .entry(host.to_string())
            .or_insert_with(|| watch::Sender::new(0))
            .subscribe()
    }

    /// The report deadline, in ms.
    pub(crate) fn settings_report_deadline_ms(&self) -> i64 {
        self.settings.report_deadline.as_millis() as i64
    }

    /// The selected revision's topology, if any.
    pub(crate) fn current_topology(&self) -> Option<Arc<Topology>> {
        self.current().map(|c| c.topology)
    }

    pub(crate) fn current(&self) -> Option<Current> {
        self.current.read().expect("not poisoned").clone()
    }

    pub(crate) async fn caller(&self, headers: &HeaderMap) -> Result<Principal, Failure> {
        self.authenticate(headers, None).await
    }

    /// Who holds the request's bearer credential: from the cache while it is
    /// fresh ([`PRINCIPAL_TTL`]), else from the store. A store lookup from a known
    /// `peer` records the credential's use (the store writes it at most once per
    /// [`flotilla_store::authority::LAST_USED_GRANULARITY_MS`]). 401 when there is
    /// none, it is unknown or revoked (code `credential-revoked`, saying when and
    /// what to do), or it is a dashboard sign-in link.
    pub(crate) async fn authenticate(
        &self,
        headers: &HeaderMap,
        peer: Option<std::net::SocketAddr>,
    ) -> Result<Principal, Failure> {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(auth::bearer)
            .ok_or_else(|| {
                Failure::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "no bearer credential (Authorization: Bearer …)",
                )
            })?;
        let hash = auth::hash_secret(token);
        if let Some((p, at)) = self.principals.lock().expect("not poisoned").get(&hash) {
            if at.elapsed() < PRINCIPAL_TTL {
                return Ok(p.clone());
            }
        }
        let looked_up = Instant::now();
        let p = match self.store.credential(hash.clone()).await? {
            Some(c) => {
                if let Some(revoked_ms) = c.revoked_ms {
                    self.principals.lock().expect("not poisoned").remove(&hash);
                    return Err(revoked(&c.principal, revoked_ms));
                }
                let now = now_ms();
                let stale = c.last_used_ms.is_none_or(|at| {
                    now - at >= flotilla_store::authority::LAST_USED_GRANULARITY_MS
                });
                if let (true, Some(peer)) = (stale, peer) {
                    // A failure to record the use does not refuse the request.
                    if let Err(e) = self
                        .store
                        .touch_credential(hash.clone(), now, Some(peer.to_string()))
                        .await
                    {
                        tracing::warn!(error = %e, "could not record a credential's use");
                    }
                }
                c.principal
            }
            None => self.store.principal(hash.clone()).await?.ok_or_else(|| {
                Failure::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "unknown credential",
                )
            })?,
        };
        if let Principal::UiLink { .. } = p {
            // Not cached: a revoked link must stop working at once.
            return Err(Failure::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "a dashboard sign-in link is not an API credential: open it in a browser",
            ));
        }
        let mut cache = self.principals.lock().expect("not poisoned");
        if cache.len() >= PRINCIPALS_KEPT {
            cache.retain(|_, (_, at)| at.elapsed() < PRINCIPAL_TTL);
        }
        cache.insert(hash, (p.clone(), looked_up));
        Ok(p)
    }

    /// Forgets the cached credentials with these hashes (revoked here: refused at
    /// once by this process; others see it within [`PRINCIPAL_TTL`]).
    pub(crate) fn forget_credentials<'a>(&self, hashes: impl IntoIterator<Item = &'a str>) {
        let mut cache = self.principals.lock().expect("not poisoned");
        for h in hashes {
            cache.remove(h);
        }
        self.revoked();
    }

    /// Forgets every cached credential (another authority revoked some).
    pub(crate) fn forget_all_credentials(&self) {
        self.principals.lock().expect("not poisoned").clear();
        self.revoked();
    }

    fn revoked(&self) {
        self.revocations
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// See [`AppState::revocations`].
    pub(crate) fn revocation_epoch(&self) -> u64 {
        self.revocations.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Forgets the cached agent credentials of `host` (revoked by its joining
    /// again).
    pub(crate) fn forget_agents_of(&self, host: &str) {
        self.principals
            .lock()
            .expect("not poisoned")
            .retain(|_, (p, _)| !matches!(p, Principal::Agent { host: h } if h == host));
        self.revoked();
    }

    /// The caller, when it may read `/metrics`: an operator or a metrics scraper.
    pub(crate) async fn metrics_reader(&self, headers: &HeaderMap) -> Result<(), Failure> {
        match self.caller(headers).await? {
            Principal::Metrics { .. } => Ok(()),
            _ => self.operator(headers).await.map(|_| ()),
        }
    }

    pub(crate) async fn operator(&self, headers: &HeaderMap) -> Result<String, Failure> {
        match self.caller(headers).await? {
            Principal::Operator { name } => Ok(name),
            Principal::Agent { host } => Err(Failure::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("the agent of `{host}` may not do this: operators only"),
            )),
            Principal::Session { id } => Err(Failure::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("the runtime of session {id} may not do this: operators only"),
            )),
            Principal::Alerts { name } => Err(Failure::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("the alert sender `{name}` may not do this: operators only"),
            )),
            Principal::UiLink { id, .. } => Err(Failure::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("dashboard sign-in link {id} may not do this: operators only"),
            )),
            Principal::Metrics { name } => Err(Failure::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("the metrics scraper `{name}` may only read /metrics"),
            )),
        }
    }

    /// The caller, when it may act for `host`: that host's agent, or (when
    /// `operator_too`) an operator. Otherwise 403, saying the agent may only `what`.
    pub(crate) async fn for_host(
        &self,
        headers: &HeaderMap,
        host: &str,
        operator_too: bool,
        what: &str,
    ) -> Result<Principal, Failure> {
        match self.caller(headers).await? {
            Principal::Agent { host: own } if own == host => Ok(Principal::Agent { host: own }),
            Principal::Agent { host: own } => Err(Failure::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("the agent of `{own}` may {what}"),
            )),
            p @ Principal::Operator { .. } if operator_too => Ok(p),
            Principal::Operator { .. } => Err(Failure::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("only the host's agent may do this (an agent may {what})"),
            )),
            Principal::Session { .. }
            | Principal::Alerts { .. }
            | Principal::UiLink { .. }
            | Principal::Metrics { .. } => Err(Failure::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "only the host's agent or an operator may do this",
            )),
        }
    }

    /// Replaces the in-memory selection after a committed change and wakes polls;
    /// an older one than held (another authority's newer selection was installed
    /// meanwhile) changes nothing.
    pub(crate) fn install(&self, selection: Selection, topology: Arc<Topology>) {
        let index = selection.index;
        {
            let mut current = self.current.write().expect("not poisoned");
            if current.as_ref().is_some_and(|c| c.selection.index >= index) {
                return;
            }
            *current = Some(Current {
                selection,
                topology,
            });
        }
        self.metrics.selection_index.set(index);
        self.index.send_replace(index);
    }
}

/// The store's current selection with its topology parsed; `None` when nothing
/// was ever selected.
///
/// # Errors
/// [`AuthorityError::Store`] when the store cannot be read,
/// [`AuthorityError::CorruptRevision`] when the selected revision does not parse.
pub(crate) async fn load_current<S: AuthorityStore>(
    store: &S,
) -> Result<Option<Current>, AuthorityError> {
    let Some(selection) = store.selection().await? else {
        return Ok(None);
    };
    let rev = store
        .revision(selection.digest.clone())
        .await?
        .ok_or_else(|| StoreError::UnknownRevision(selection.digest.clone()))?;
    let topology =
        Topology::from_revision(&rev.content).map_err(|e| AuthorityError::CorruptRevision {
            revision: selection.digest.clone(),
            reason: e.to_string(),
        })?;
    Ok(Some(Current {
        selection,
        topology: Arc::new(topology),
    }))
}

/// The 401 for a revoked credential: when, and what its holder does next.
fn revoked(p: &Principal, revoked_ms: i64) -> Failure {
    let when = flotilla_exec::logs::rfc3339_ms(revoked_ms.max(0) as u64);
    let next = match p {
        Principal::Agent { host } => format!(
            ": join `{host}` again with a new token (`flotilla serve token create --host {host}`, then `flotilla agent join` on it)"
        ),
        _ => ": ask an operator for a new one".to_string(),
    };
    Failure::new(
        StatusCode::UNAUTHORIZED,
        "credential-revoked",
        format!("this credential was revoked at {when}{next}"),
    )
}
