//! Reaching a cluster: a kubeconfig file and one of its contexts become a kube-rs
//! client (one per cluster per process, kept), on the adapter's own tokio runtime,
//! which the adapter's blocking methods wait on ([`block`]).

use crate::error::{chain, KubeError};
use flotilla_model::topology::Cluster;
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// A client of one cluster and where it came from.
#[derive(Clone)]
pub struct Connection {
    /// The client.
    pub client: kube::Client,
    /// The kubeconfig file read.
    pub kubeconfig: PathBuf,
    /// The context used.
    pub context: String,
    /// The API server's URL.
    pub server: String,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("kubeconfig", &self.kubeconfig)
            .field("context", &self.context)
            .field("server", &self.server)
            .finish()
    }
}

/// The runtime every call and watch of the adapter runs on (one worker thread); a
/// client made outside the adapter (a test's) must be made inside it (`enter`).
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("flotilla-kube")
            .enable_all()
            .build()
            .expect("the Kubernetes adapter's runtime starts")
    })
}

/// Runs `fut` on the adapter's runtime and waits for its answer (from any thread
/// that is not that runtime's own).
pub fn block<T: Send + 'static>(fut: impl std::future::Future<Output = T> + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime().spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().expect("the Kubernetes adapter's runtime answers")
}

/// How long one API call may take by default (`FLOTILLA_KUBERNETES_API_TIMEOUT`
/// overrides): an API server that accepts connections and never answers is an
/// error, never a hang.
pub const DEFAULT_API_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// The time limit of one API call (see [`DEFAULT_API_TIMEOUT`]).
pub fn api_timeout() -> std::time::Duration {
    std::env::var("FLOTILLA_KUBERNETES_API_TIMEOUT")
        .ok()
        .and_then(|v| humantime::parse_duration(&v).ok())
        .filter(|d| !d.is_zero())
        .unwrap_or(DEFAULT_API_TIMEOUT)
}

/// [`block`] for one API call (`what` names it in the error), within
/// [`api_timeout`].
///
/// # Errors
/// The call's own, or [`KubeError::Timeout`].
pub fn call<T: Send + 'static>(
    what: &str,
    fut: impl std::future::Future<Output = Result<T, KubeError>> + Send + 'static,
) -> Result<T, KubeError> {
    let limit = api_timeout();
    block(async move { tokio::time::timeout(limit, fut).await }).unwrap_or_else(|_| {
        Err(KubeError::Timeout {
            what: what.to_string(),
            waited: limit,
            state: "the API server did not answer".into(),
        })
    })
}

/// The kubeconfig file `cluster` names: declared (`~/` expanded), else
/// `$KUBECONFIG` (its first file; [`connect`] merges them all), else
/// `~/.kube/config`.
pub fn kubeconfig_path(cluster: &Cluster) -> PathBuf {
    let home = || {
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default()
    };
    if let Some(p) = &cluster.kubeconfig {
        return match p.strip_prefix("~/") {
            Some(rest) => home().join(rest),
            None => PathBuf::from(p),
        };
    }
    if let Some(v) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        if let Some(first) = std::env::split_paths(&v).next() {
            return first;
        }
    }
    home().join(".kube").join("config")
}

/// The kubeconfig of `cluster` read from `path` ([`kubeconfig_path`]); when the
/// host names none and `$KUBECONFIG` lists several files, those that exist merged
/// as kubectl merges them (the first file to set a value wins; a file that does not
/// exist is passed over), and the path shown is the list.
///
/// # Errors
/// [`KubeError::Kubeconfig`]: a file that cannot be read or parsed (the file
/// system's own words), or none of the list exists.
fn read_kubeconfig(cluster: &Cluster, path: PathBuf) -> Result<(PathBuf, Kubeconfig), KubeError> {
    let read = |p: &std::path::Path| {
        // The file system's own words for a file that cannot be read (kube's quote
        // the path again).
        std::fs::metadata(p).map_err(|e| KubeError::Kubeconfig {
            path: p.to_path_buf(),
            message: e.to_string(),
        })?;
        Kubeconfig::read_from(p).map_err(|e| KubeError::Kubeconfig {
            path: p.to_path_buf(),
            message: chain(&e),
        })
    };
    let list: Vec<PathBuf> = match (&cluster.kubeconfig, std::env::var_os("KUBECONFIG")) {
        (None, Some(v)) => std::env::split_paths(&v)
            .filter(|p| !p.as_os_str().is_empty())
            .collect(),
        _ => Vec::new(),
    };
    if list.len() < 2 {
        return read(&path).map(|kc| (path, kc));
    }
    let shown = std::env::join_paths(&list)
        .map(PathBuf::from)
        .unwrap_or(path.clone());
    let present: Vec<&PathBuf> = list.iter().filter(|p| p.exists()).collect();
    if present.is_empty() {
        return Err(KubeError::Kubeconfig {
            path: shown,
            message: "none of these files exists ($KUBECONFIG)".into(),
        });
    }
    let mut merged = Kubeconfig::default();
    for p in present {
        merged = merged.merge(read(p)?).map_err(|e| KubeError::Kubeconfig {
            path: p.clone(),
            message: chain(&e),
        })?;
    }
    Ok((shown, merged))
}

/// The client of `cluster`, made on first use and kept for the process.
///
/// # Errors
/// [`KubeError::Kubeconfig`], [`KubeError::NoContext`], [`KubeError::NoCurrentContext`]
/// or [`KubeError::Client`], naming the file and context.
pub fn connect(cluster: &Cluster) -> Result<Connection, KubeError> {
    type Clients = HashMap<(PathBuf, Option<String>), Connection>;
    static CLIENTS: OnceLock<Mutex<Clients>> = OnceLock::new();
    let path = kubeconfig_path(cluster);
    let key = (path.clone(), cluster.context.clone());
    let clients = CLIENTS.get_or_init(Default::default);
    if let Some(c) = clients.lock().expect("clients").get(&key) {
        return Ok(c.clone());
    }
    let (path, kc) = read_kubeconfig(cluster, path)?;
    let context = match &cluster.context {
        Some(c) => c.clone(),
        None => kc
            .current_context
            .clone()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| KubeError::NoCurrentContext { path: path.clone() })?,
    };
    if !kc.contexts.iter().any(|c| c.name == context) {
        let names: Vec<&str> = kc.contexts.iter().map(|c| c.name.as_str()).collect();
        return Err(KubeError::NoContext {
            path,
            context,
            available: if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            },
        });
    }
    let options = KubeConfigOptions {
        context: Some(context.clone()),
        cluster: None,
        user: None,
    };
    let (p, ctx) = (path.clone(), context.clone());
    let made = block(async move {
        let mut config = kube::Config::from_custom_kubeconfig(kc, &options)
            .await
            .map_err(|e| chain(&e))?;
        // A server that does not accept the connection is told at once; reads stay
        // long (a watch waits up to its own 290 s), each call has its own limit.
        config.connect_timeout = Some(std::time::Duration::from_secs(5));
        let server = config.cluster_url.to_string();
        let client = kube::Client::try_from(config).map_err(|e| chain(&e))?;
        Ok::<_, String>((client, server))
    });
    let (client, server) = made.map_err(|message| KubeError::Client {
        path: p,
        context: ctx,
        message,
    })?;
    let conn = Connection {
        client,
        kubeconfig: path,
        context,
        server: server.trim_end_matches('/').to_string(),
    };
    clients.lock().expect("clients").insert(key, conn.clone());
    Ok(conn)
}
