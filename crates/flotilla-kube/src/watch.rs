//! What the adapter knows of a cluster comes from watches, never from polling the API
//! server: one kube-runtime reflector (a LIST, then a WATCH from its
//! `resourceVersion`, re-listed by the watcher after `410 Gone`) per cluster,
//! namespace and resource kind, started on first use and kept for the process. Every
//! component of that namespace reads the same store; `status` of 50 components makes
//! one LIST per kind, not one per component. Pods are watched only when they carry
//! `app.kubernetes.io/managed-by=flotilla`; workloads all, so that one of a
//! component's name that is not Flotilla's is seen (and never touched).
//!
//! Waiters (a rollout, a scale to zero) wait for the next event of the kinds they
//! read, with a deadline: [`Watched::changed`].

use crate::cluster::{runtime, Connection};
use crate::error::KubeError;
use crate::manifest::LABEL_MANAGED_BY;
use futures_util::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Resource;
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// A namespaced kind a watch can keep, or the session runtime makes, lists and
/// deletes (Pod, Deployment, StatefulSet, Secret, PersistentVolumeClaim…).
pub trait Watchable:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Watchable for K where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// One kind's store in one namespace of one cluster, kept current by its watch.
pub struct Watched<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    /// Bumped on every event; waiters watch it.
    generation: tokio::sync::watch::Receiver<u64>,
    /// The last error of the watch (a LIST or WATCH refused, the server gone), cleared
    /// by the next event.
    error: Arc<Mutex<Option<String>>>,
    /// The API server's last refusal of the watch's LIST or WATCH (`code`, `reason`,
    /// `message`), cleared with `error`.
    refusal: Arc<Mutex<Option<(u16, String, String)>>>,
    /// `<kind> in namespace <ns>`, for errors.
    what: String,
}

/// How many watches (reflectors) this process started, by kind (`Pod`,
/// `Deployment`…): one per namespace and kind.
pub fn watches_started() -> HashMap<String, u64> {
    started().lock().expect("watch counters").clone()
}

fn started() -> &'static Mutex<HashMap<String, u64>> {
    static STARTED: OnceLock<Mutex<HashMap<String, u64>>> = OnceLock::new();
    STARTED.get_or_init(Default::default)
}

/// The label selector of each kind's watch.
fn selector_for(kind: &str) -> Option<String> {
    (kind == "Pod").then(|| format!("{LABEL_MANAGED_BY}=flotilla"))
}

/// The store of kind `K` in `namespace` of `conn`'s cluster, its watch started on
/// first use; waits (up to `wait`) for its first LIST.
///
/// # Errors
/// The LIST's refusal (403, a namespace that does not exist…) or
/// [`KubeError::Timeout`].
pub fn watched<K>(
    conn: &Connection,
    namespace: &str,
    wait: Duration,
) -> Result<Arc<Watched<K>>, KubeError>
where
    K: Watchable,
{
    type Registry = HashMap<(String, String, String, String), Arc<dyn Any + Send + Sync>>;
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    let kind = K::kind(&()).to_string();
    let key = (
        conn.server.clone(),
        conn.context.clone(),
        namespace.to_string(),
        kind.clone(),
    );
    let w: Arc<Watched<K>> = {
        let mut reg = REGISTRY
            .get_or_init(Default::default)
            .lock()
            .expect("watches");
        match reg
            .get(&key)
            .and_then(|a| Arc::clone(a).downcast::<Watched<K>>().ok())
        {
            Some(w) => w,
            None => {
                let w = Arc::new(start::<K>(conn, namespace, &kind));
                reg.insert(key, Arc::clone(&w) as Arc<dyn Any + Send + Sync>);
                w
            }
        }
    };
    w.ready(conn, wait)?;
    Ok(w)
}

fn start<K>(conn: &Connection, namespace: &str, kind: &str) -> Watched<K>
where
    K: Watchable,
{
    let api: kube::Api<K> = kube::Api::namespaced(conn.client.clone(), namespace);
    let mut config = watcher::Config::default();
    if let Some(s) = selector_for(kind) {
        config = config.labels(&s);
    }
    let (store, writer) = reflector::store::<K>();
    let (tx, rx) = tokio::sync::watch::channel(0u64);
    let error = Arc::new(Mutex::new(None));
    let err = Arc::clone(&error);
    let refusal = Arc::new(Mutex::new(None));
    let refused = Arc::clone(&refusal);
    *started()
        .lock()
        .expect("watch counters")
        .entry(kind.to_string())
        .or_default() += 1;
    let _guard = runtime().enter();
    tokio::spawn(async move {
        let mut events = reflector::reflector(writer, watcher(api, config))
            .default_backoff()
            .boxed();
        while let Some(ev) = events.next().await {
            match ev {
                Ok(_) => {
                    *err.lock().expect("watch error") = None;
                    *refused.lock().expect("watch refusal") = None;
                }
                Err(e) => {
                    *err.lock().expect("watch error") = Some(describe(&e));
                    *refused.lock().expect("watch refusal") = refusal_of(&e);
                }
            }
            tx.send_modify(|n| *n += 1);
        }
    });
    Watched {
        store,
        generation: rx,
        error,
        refusal,
        what: format!("{kind} in namespace {namespace}"),
    }
}

/// The API server's refusal in a watcher error, when it answered one.
fn refusal_of(e: &watcher::Error) -> Option<(u16, String, String)> {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => {
            Some((s.code, s.reason.clone(), s.message.clone()))
        }
        watcher::Error::WatchError(s) if s.code != 410 => {
            Some((s.code, s.reason.clone(), s.message.clone()))
        }
        _ => None,
    }
}

/// A watcher error in words: the API server's own message when it answered.
fn describe(e: &watcher::Error) -> String {
    let api = match e {
        watcher::Error::InitialListFailed(k)
        | watcher::Error::WatchStartFailed(k)
        | watcher::Error::WatchFailed(k) => match k {
            kube::Error::Api(s) => Some((s.code, s.reason.clone(), s.message.clone())),
            _ => None,
        },
        watcher::Error::WatchError(s) => Some((s.code, s.reason.clone(), s.message.clone())),
        watcher::Error::NoResourceVersion => None,
    };
    match api {
        Some((code, reason, message)) => format!("{code} {reason}: {message}"),
        None => crate::error::chain(e),
    }
}

impl<K> Watched<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    /// The API server's refusal of this watch's LIST or WATCH, when its latest
    /// attempt was refused.
    fn refused(&self) -> Option<KubeError> {
        let refusal = self.refusal.lock().expect("watch refusal").clone()?;
        let (code, reason, message) = refusal;
        Some(KubeError::refused(
            "list and watch",
            &self.what,
            code,
            &reason,
            &message,
        ))
    }

    /// Waits up to `wait` for the first LIST; a refusal of it is returned at once.
    fn ready(&self, conn: &Connection, wait: Duration) -> Result<(), KubeError> {
        if let Some(e) = self.refused() {
            return Err(e);
        }
        let store = self.store.clone();
        let error = Arc::clone(&self.error);
        let mut gen = self.generation.clone();
        let outcome = crate::cluster::block(async move {
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                if store.wait_until_ready().now_or_never_ready() {
                    return Ok(());
                }
                if let Some(e) = error.lock().expect("watch error").clone() {
                    return Err(Some(e));
                }
                match tokio::time::timeout_at(deadline, gen.changed()).await {
                    Ok(Ok(())) => continue,
                    _ => return Err(None),
                }
            }
        });
        if let Some(e) = self.refused() {
            return Err(e);
        }
        match outcome {
            Ok(()) => Ok(()),
            Err(Some(e)) => Err(KubeError::Unreachable {
                verb: "watch".into(),
                what: self.what.clone(),
                server: conn.server.clone(),
                message: e,
            }),
            Err(None) => Err(KubeError::Timeout {
                what: format!("the first list of {}", self.what),
                waited: wait,
                state: "no answer from the API server".into(),
            }),
        }
    }

    /// The object named `name` in the store now.
    pub fn named(&self, name: &str) -> Option<Arc<K>> {
        self.store
            .state()
            .into_iter()
            .find(|o| o.meta().name.as_deref() == Some(name))
    }

    /// Every object in the store now.
    pub fn objects(&self) -> Vec<Arc<K>> {
        self.store.state()
    }

    /// The last error of the watch, when its latest attempt failed.
    pub fn error(&self) -> Option<String> {
        self.error.lock().expect("watch error").clone()
    }

    /// A receiver that changes on each event (for [`crate::wait`]).
    pub fn changed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.generation.clone()
    }
}

/// Whether a store's readiness future has completed, without waiting.
trait NowOrNever {
    fn now_or_never_ready(self) -> bool;
}

impl<F: std::future::Future> NowOrNever for F {
    fn now_or_never_ready(self) -> bool {
        futures_util::FutureExt::now_or_never(self).is_some()
    }
}
