//! An in-memory Kubernetes API server on 127.0.0.1 (HTTP/1.1, JSON only, no TLS) for
//! tests of Kubernetes clients (kube-rs) of Deployments, StatefulSets, ReplicaSets,
//! Services, Pods, Namespaces, Events, ConfigMaps, Secrets and
//! PersistentVolumeClaims, with a simulated kubelet and workload controllers, an
//! opt-in kubelet that runs bare pods as real local processes
//! ([`FakeKube::run_pods`]), injected faults and a request log.
//!
//! It copies the real API server's behaviour where a client can see it, each part
//! citing its source:
//! - [`store`]: objects, the global resourceVersion, `Status` bodies, garbage
//!   collection;
//! - [`http`]: routes, discovery, lists, content types;
//! - [`status`]: `Status` bodies of failure;
//! - [`paths`]: API paths and queries;
//! - [`apply`]: create, replace, merge patches, server-side apply and field
//!   ownership, on [`fields`] (field paths, managedFields entries, merges);
//! - [`selector`]: label and field selectors;
//! - [`watch`]: watch streams, bookmarks, 410 Expired;
//! - [`kubelet`]: the controllers and the kubelet;
//! - [`process_kubelet`]: the kubelet running bare pods as processes, on
//!   [`pod_sandbox`] (users, volumes, `bwrap`), with their logs served by
//!   [`pod_logs`] from files in the runtime's format ([`cri_log`]);
//! - [`faults`]: injected failures ([`Fault`], [`Misbehaviour`]) and the request log
//!   ([`RecordedRequest`]);
//! - [`control`]: the same controls over HTTP under `/_fake/`.
//!
//! Namespaces `default`, `kube-system`, `kube-public` and `kube-node-lease` exist at
//! start. `src/bin/fake-kube-apiserver.rs` serves it from its own process.

pub mod apply;
pub mod control;
pub mod cri_log;
pub mod faults;
pub mod fields;
pub mod http;
pub mod kubelet;
pub mod paths;
pub mod pod_logs;
pub mod pod_sandbox;
pub mod process_kubelet;
pub mod selector;
pub mod status;
pub mod store;
pub mod watch;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{oneshot, Notify};

pub use faults::Misbehaviour;
pub use faults::{Fault, RecordedRequest};

/// State shared by the server's tasks and [`FakeKube`]'s methods.
pub(crate) struct Shared {
    state: Mutex<store::State>,
    /// Wakes the controllers after a change.
    kick: Notify,
    addr: SocketAddr,
    /// The process kubelet, once [`FakeKube::run_pods`] turned it on.
    process: Mutex<Option<Arc<process_kubelet::ProcessKubelet>>>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, store::State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running fake API server; stopped (open watches cut) when dropped.
pub struct FakeKube {
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// How often the controllers run without a change (crash loops restart again).
pub const TICK: Duration = Duration::from_secs(1);

async fn controllers(shared: Arc<Shared>) {
    let mut ticker = tokio::time::interval(TICK);
    loop {
        let tick = tokio::select! {
            _ = shared.kick.notified() => false,
            _ = ticker.tick() => true,
        };
        // Passes until nothing changes (each pass is idempotent), at most a few.
        for i in 0..8 {
            let mut s = shared.lock();
            s.dirty = false;
            kubelet::reconcile(&mut s, tick && i == 0);
            if !s.dirty {
                break;
            }
        }
        process_kubelet::sync(&shared);
    }
}

impl FakeKube {
    /// Starts a fake on an ephemeral loopback port. Panics when it cannot bind.
    pub fn start() -> FakeKube {
        FakeKube::start_on(0).expect("the fake Kubernetes API binds 127.0.0.1")
    }

    /// Starts a fake on 127.0.0.1:`port` (0: ephemeral), serving from its own thread
    /// and tokio runtime. Errors: binding the port, starting the runtime.
    pub fn start_on(port: u16) -> std::io::Result<FakeKube> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(store::State::new()),
            kick: Notify::new(),
            addr,
            process: Mutex::new(None),
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("fake-kube")
            .build()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("fake-kube".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(_) => return,
                    };
                    tokio::spawn(controllers(s.clone()));
                    let app = axum::Router::new().fallback(http::entry).with_state(s);
                    tokio::select! {
                        _ = axum::serve(listener, app) => {}
                        _ = stopped => {}
                    }
                });
                runtime.shutdown_background();
            })?;
        Ok(FakeKube {
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`, the API server's URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// Writes a kubeconfig (YAML) at `path` whose only context, `context`, is the
    /// current one: cluster `context` with `server` = [`FakeKube::url`], user
    /// `context` with the bearer token `fake-token` (the fake does not check tokens;
    /// [`RecordedRequest::authorization`] says whether one came), and `namespace` when
    /// given. Errors: writing the file.
    pub fn write_kubeconfig(
        &self,
        path: &Path,
        context: &str,
        namespace: Option<&str>,
    ) -> std::io::Result<()> {
        let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
        let ns = namespace
            .map(|n| format!("\n    namespace: {}", q(n)))
            .unwrap_or_default();
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {c}\n  cluster:\n    server: {url}\ncontexts:\n- name: {c}\n  context:\n    cluster: {c}\n    user: {c}{ns}\ncurrent-context: {c}\nusers:\n- name: {c}\n  user:\n    token: fake-token\npreferences: {{}}\n",
            c = q(context),
            url = q(&self.url()),
        );
        std::fs::write(path, text)
    }

    /// Creates namespace `name` (phase Active) unless it exists.
    pub fn create_namespace(&self, name: &str) {
        self.shared.kicked(|s| s.ensure_namespace(name));
    }

    /// Makes the fake registry answer `digest` (`sha256:<64 hex>`) for the image
    /// `reference` (as written in the pod spec): pods started after this report
    /// `imageID` `<repository>@<digest>`. Default digest: sha256 of the reference.
    pub fn set_image_digest(&self, reference: &str, digest: &str) {
        self.shared
            .kicked(|s| s.digests.insert(reference.to_string(), digest.to_string()));
    }

    /// Turns the simulated controllers and kubelet on (the default) or off: when off,
    /// workloads get no pods and pods no status.
    pub fn set_kubelet(&self, on: bool) {
        self.shared.kicked(|s| s.kubelet = on);
    }

    /// Runs every bare Pod (no `ownerReferences`) created from now on as real local
    /// processes, through `bwrap`, with this host's root file system, read-only, as
    /// the image; its files (logs, volumes, claims' data) go under `data_dir` (made
    /// when missing, and made traversable by any user: mode 0711). Pods of the
    /// fake's Deployments and StatefulSets keep the simulated kubelet. What is run
    /// and how, and which Kubernetes behaviour is copied: [`process_kubelet`].
    /// Dropping the fake kills every process it started.
    ///
    /// Errors: `NotFound` when `bwrap` is not on `PATH`; making the directories;
    /// `AlreadyExists` when already on with another directory (the same one is
    /// `Ok`).
    pub fn run_pods(&self, data_dir: &Path) -> std::io::Result<()> {
        self.shared.run_pods(data_dir)
    }

    /// Makes the pods of `workload` (a Deployment's or StatefulSet's name, or a bare
    /// pod's) in `namespace` behave as `how`, from the next pass (now) on;
    /// [`Misbehaviour::Healthy`] puts them back.
    pub fn pods_misbehave(&self, namespace: &str, workload: &str, how: Misbehaviour) {
        self.shared.kicked(|s| {
            s.misbehaviour
                .insert((namespace.to_string(), workload.to_string()), how)
        });
    }

    /// The pods in `namespace` whose labels include every `key=value` of `labels`
    /// (comma-separated; empty: all), as stored, by name.
    pub fn pods(&self, namespace: &str, labels: &str) -> Vec<Value> {
        let want: Vec<(&str, &str)> = labels
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .collect();
        let s = self.shared.lock();
        s.list(store::PODS, Some(namespace))
            .into_iter()
            .map(|(_, v)| v.clone())
            .filter(|p| want.iter().all(|(k, v)| p["metadata"]["labels"][*k] == *v))
            .collect()
    }

    /// Writes `text` (one line) to the log of `container` (`None`: the pod's first)
    /// of pod `name` in `namespace`, stamped now, as if that container had written
    /// it: `pods/log` serves it ([`pod_logs`]). For the simulated kubelet's pods,
    /// whose containers run nothing; a process kubelet's pods write their own.
    ///
    /// Errors: no such pod, or it has no such container.
    pub fn write_pod_log(
        &self,
        namespace: &str,
        name: &str,
        container: Option<&str>,
        text: &str,
    ) -> Result<(), String> {
        self.shared.write_pod_log(namespace, name, container, text)
    }

    /// Adds a fault: matching requests are answered with its Status, before they
    /// touch the store. The first matching fault answers.
    pub fn fault(&self, fault: Fault) {
        self.shared.lock().faults.push(fault);
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        self.shared.lock().faults.clear();
    }

    /// The API requests served so far (not the `/_fake/` ones), in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Forgets the request log.
    pub fn clear_requests(&self) {
        self.shared.lock().requests.clear();
    }

    /// Forgets the watch history: a watch from any resourceVersion given out so far
    /// gets `410 Expired`.
    pub fn compact(&self) {
        self.shared.lock().compact();
    }

    /// Ends every open watch and makes every resourceVersion given out so far too old
    /// to watch from (an API server restart after a compaction): clients get `410
    /// Expired` and list again.
    pub fn expire_watches(&self) {
        self.shared.lock().expire_watches();
    }

    /// The last resourceVersion given out.
    pub fn resource_version(&self) -> u64 {
        self.shared.lock().rv
    }

    /// The object at an API path (`/apis/apps/v1/namespaces/default/deployments/web`,
    /// `/api/v1/namespaces/x`), with `kind` and `apiVersion`; `None` when there is none.
    pub fn object(&self, path: &str) -> Option<Value> {
        http::object_at(&self.shared.lock(), path)
    }

    /// Server-side apply of `object` by `manager` at an object's API path (add
    /// `/status` for the status), without force: the stored object, or the API's
    /// Status body of failure (409 Conflict…).
    pub fn apply_as(&self, manager: &str, path: &str, object: &Value) -> Result<Value, Value> {
        let r = self.shared.apply_as(manager, path, object, false);
        if r.code < 300 {
            Ok(r.body)
        } else {
            Err(r.body)
        }
    }

    /// [`FakeKube::apply_as`] with `force=true`: the fields `object` sets are taken
    /// from whichever manager owned them (`kubectl apply --server-side
    /// --force-conflicts`).
    pub fn force_apply_as(
        &self,
        manager: &str,
        path: &str,
        object: &Value,
    ) -> Result<Value, Value> {
        let r = self.shared.apply_as(manager, path, object, true);
        if r.code < 300 {
            Ok(r.body)
        } else {
            Err(r.body)
        }
    }

    /// Watch connections opened so far per resource (`deployments.apps`, `pods`).
    pub fn watches_opened(&self) -> BTreeMap<String, u64> {
        self.shared.lock().watches_opened.clone()
    }

    /// Watch connections open now per resource (one that ended is counted until
    /// its stream notices, at the latest at its next event or bookmark).
    pub fn watches_open(&self) -> BTreeMap<String, u64> {
        self.shared.lock().watches_open.clone()
    }

    /// Creates `n` namespaces `seed-<i>`, each with a one-replica Deployment `app`.
    pub fn seed(&self, n: usize) {
        self.shared.seed(n);
    }
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        let process = self
            .shared
            .process
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(pk) = process {
            pk.shutdown();
        }
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
