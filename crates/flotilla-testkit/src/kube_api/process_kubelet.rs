//! The process kubelet: once [`super::FakeKube::run_pods`] turned it on, every bare
//! Pod (one without `ownerReferences`, as a client makes it; the pods of the fake's
//! Deployments and StatefulSets keep the simulated kubelet of [`super::kubelet`])
//! runs for real, as local processes.
//!
//! **The image is ignored: every container's "image" is this host's root file
//! system, read-only.** Each container runs through bubblewrap (`bwrap`, found on
//! `PATH`): the host's tree bound read-only, fresh `/dev`, `/proc` and `/tmp` (a
//! tmpfs), its own pid namespace and session, dying with the fake; then one bind per
//! `volumeMounts` entry (`readOnly` → read-only) and the termination message file;
//! `workingDir` (default `/`); `command` + `args` with no shell added (a container
//! with neither cannot start: there is no image entrypoint). Its environment is
//! exactly its `env` entries with a `value` or a `valueFrom.secretKeyRef` (other
//! `valueFrom` sources are not read), plus
//! `PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin` when it sets
//! no `PATH` (a real container gets its image's environment; that `PATH` is the
//! usual one). The process runs as the user of [`super::pod_sandbox::User`]
//! (`runAsUser`/`runAsGroup`, groups `fsGroup` and `supplementalGroups`; root when
//! no `runAsUser`). No network namespace: the pod shares the host's, so `podIP`
//! and `hostIP` are 127.0.0.1.
//!
//! Copied kubelet behaviour (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/):
//! - volumes are set up first: while a Secret, ConfigMap or PersistentVolumeClaim a
//!   volume names does not exist, the pod stays `Pending` with its containers
//!   waiting `ContainerCreating` (the real kubelet's `FailedMount` event is not
//!   written) and is looked at again every half second;
//! - `initContainers` run one after the other, each to its end; while they run the
//!   pod is `Pending` and `Initialized` is False (`ContainersNotInitialized`), the
//!   containers wait `PodInitializing`; one that exits non-zero fails the pod
//!   (`Failed`) and the containers never start;
//! - then every container starts: `Running`, `ready`, `started`, `startedAt`; an
//!   ended one is `terminated` with `exitCode`, `reason` `Completed` (0) or `Error`
//!   (anything else, 137 after a SIGKILL too), `message`, `startedAt`,
//!   `finishedAt`, `containerID`; when all ended the pod is `Succeeded` (all 0) or
//!   `Failed`. Every `restartPolicy` is run as `Never` (nothing restarts);
//! - `runAsNonRoot: true` with `runAsUser` 0 or absent: the container does not start
//!   and waits `CreateContainerConfigError` with the kubelet's message
//!   (https://kubernetes.io/docs/tasks/configure-pod-container/security-context/);
//! - the termination message
//!   (https://kubernetes.io/docs/tasks/debug/debug-application/determine-reason-pod-failure/#customizing-the-termination-message):
//!   an empty file bound writable at `terminationMessagePath` (default
//!   `/dev/termination-log`), owned by the container's user; when the container
//!   ends its first 4096 bytes are `state.terminated.message`; with
//!   `terminationMessagePolicy: FallbackToLogsOnError`, an empty file and a
//!   non-zero exit, the log's last 80 lines, at most 2048 bytes, instead;
//! - logs: stdout and stderr go, merged, to one file per container in the CRI
//!   logging format, each line stamped as it is read ([`super::cri_log`]), served
//!   by [`super::pod_logs`];
//! - graceful deletion
//!   (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination):
//!   DELETE of a pod whose processes run sets `metadata.deletionTimestamp` (now +
//!   the grace period) and `deletionGracePeriodSeconds` (a watch sees MODIFIED);
//!   the grace period is the request's `gracePeriodSeconds` (query or
//!   DeleteOptions body), else the pod's `terminationGracePeriodSeconds`, else 30;
//!   SIGTERM goes to each container's process, SIGKILL to everything in its
//!   sandbox when the grace period is over; once no process is left the pod's final
//!   status is written and the object removed (DELETED). Grace 0 kills at once. (The
//!   real API server removes a grace-0 pod at once, before its kubelet has killed
//!   anything; the fake waits for the SIGKILLed processes, milliseconds, so a
//!   DELETED pod has no process left.) A pod whose processes all ended is removed at
//!   once;
//! - a pod removed another way (its namespace deleted, a collection DELETE) is
//!   killed at once; dropping the [`super::FakeKube`] kills every process it started.
//!
//! Files, under the data directory given to `run_pods` (made traversable by any
//! user, mode 0711, so that an unprivileged container's `bwrap` reaches them):
//! `pods/<pod uid>/` (logs, termination message files, `emptyDir`, `secret` and
//! `configMap` volumes; removed once the pod object and its processes are gone) and
//! `pvc/<namespace>/<claim>/` (a PersistentVolumeClaim's volume: made when first
//! mounted, owned by `runAsUser`:`fsGroup`, kept across pods, removed once the claim
//! is deleted and no running pod mounts it; the real API keeps a claim in use,
//! `Terminating`, until its pods are gone).
//!
//! Not copied: restarts, probes, resources and OOM kills, `valueFrom` but
//! `secretKeyRef`, `envFrom`,
//! `lifecycle` hooks, `previous` logs, Events.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{chown, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{json, Value};

use super::apply::Writer;
use super::cri_log;
use super::kubelet::{digest_of, is_bare, repository};
use super::paths::Query;
use super::pod_sandbox::{
    base64_decode, kill_all, main_processes, make_dir, signal, traversable, write_key_files, Bind,
    Launch, User,
};
use super::status::Reply;
use super::store::{
    now_rfc3339, rfc3339_in, Key, State, CONFIGMAPS, PERSISTENT_VOLUME_CLAIMS, PODS, SECRETS,
};
use super::Shared;

/// `PATH` of a container that sets none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The most of a termination message file read (the kubelet's
/// `maxContainerTerminationMessageLength`).
pub const MESSAGE_BYTES: usize = 4096;

/// `FallbackToLogsOnError`: the log's last lines and bytes taken
/// (`maxContainerTerminationMessageLogLines`, `…LogLength`).
pub const FALLBACK_LINES: usize = 80;
pub const FALLBACK_BYTES: usize = 2048;

/// How often a pod waiting for its volumes looks again.
const VOLUME_RETRY: Duration = Duration::from_millis(500);

/// How long after a SIGKILL the processes may take to be gone.
const KILL_WAIT: Duration = Duration::from_secs(10);

enum Msg {
    /// A container's `bwrap` ended with this exit code (128 + signal when killed).
    Exited(usize, i32),
    /// The pod is being deleted with this grace period (seconds).
    Delete(u64),
    /// The pod object is gone.
    Gone,
    /// The fake is stopping.
    Shutdown,
}

struct Handle {
    claims: Vec<String>,
    namespace: String,
    tx: Sender<Msg>,
    /// Its processes are gone and will not start again.
    done: Arc<AtomicBool>,
    told_gone: bool,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Registry {
    closed: bool,
    /// By pod uid.
    pods: HashMap<String, Handle>,
}

/// The process kubelet's state: where its files go, and one supervising thread per
/// pod it runs.
pub(crate) struct ProcessKubelet {
    data_dir: PathBuf,
    bwrap: PathBuf,
    registry: Mutex<Registry>,
}

fn find_bwrap() -> io::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("bwrap"))
        .find(|p| p.is_file())
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "bwrap is not on PATH"))
}

impl ProcessKubelet {
    fn new(data_dir: &Path) -> io::Result<ProcessKubelet> {
        let bwrap = find_bwrap()?;
        traversable(data_dir)?;
        traversable(&data_dir.join("pods"))?;
        traversable(&data_dir.join("pvc"))?;
        Ok(ProcessKubelet {
            data_dir: data_dir.to_path_buf(),
            bwrap,
            registry: Mutex::new(Registry::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn pod_dir(&self, uid: &str) -> PathBuf {
        self.data_dir.join("pods").join(uid)
    }

    /// The log file of a container of the pod with this uid.
    pub fn log_path(&self, uid: &str, container: &str) -> PathBuf {
        self.pod_dir(uid)
            .join("logs")
            .join(format!("{container}.log"))
    }

    fn claim_dir(&self, namespace: &str, claim: &str) -> PathBuf {
        self.data_dir.join("pvc").join(namespace).join(claim)
    }

    /// Kills every process it started and waits for its threads.
    pub fn shutdown(&self) {
        let handles: Vec<Handle> = {
            let mut r = self.lock();
            r.closed = true;
            r.pods.drain().map(|(_, h)| h).collect()
        };
        for h in &handles {
            let _ = h.tx.send(Msg::Shutdown);
        }
        for mut h in handles {
            if let Some(t) = h.thread.take() {
                let _ = t.join();
            }
        }
    }
}

impl Shared {
    /// The process kubelet, when on.
    pub(crate) fn process_kubelet(&self) -> Option<Arc<ProcessKubelet>> {
        self.process
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Turns the process kubelet on with its files under `data_dir` (made when
    /// missing). Errors: no `bwrap` on `PATH`, making the directories; on already
    /// with another directory (`AlreadyExists`).
    pub(crate) fn run_pods(&self, data_dir: &Path) -> io::Result<()> {
        let mut p = self.process.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pk) = p.as_ref() {
            if pk.data_dir == data_dir {
                return Ok(());
            }
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("pods already run under {}", pk.data_dir.display()),
            ));
        }
        *p = Some(Arc::new(ProcessKubelet::new(data_dir)?));
        drop(p);
        self.kicked(|s| s.run_pods = true);
        Ok(())
    }
}

fn claims_of(pod: &Value) -> Vec<String> {
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
        .map(str::to_string)
        .collect()
}

/// One pass: starts a supervisor for each new bare pod, tells those whose pod is gone,
/// forgets finished ones whose pod is gone (removing their files), and removes the
/// volumes of deleted claims no running pod mounts.
pub(crate) fn sync(shared: &Arc<Shared>) {
    let Some(pk) = shared.process_kubelet() else {
        return;
    };
    let (pods, claims) = {
        let s = shared.lock();
        let pods: Vec<(Key, String, Value)> = s
            .list(PODS, None)
            .into_iter()
            .filter(|(_, p)| is_bare(p))
            .map(|(k, p)| {
                let uid = p["metadata"]["uid"].as_str().unwrap_or_default();
                (k.clone(), uid.to_string(), p.clone())
            })
            .collect();
        let claims: HashSet<(String, String)> = s
            .list(PERSISTENT_VOLUME_CLAIMS, None)
            .into_iter()
            .map(|(k, _)| (k.namespace.clone(), k.name.clone()))
            .collect();
        (pods, claims)
    };
    let mut in_use = HashSet::new();
    {
        let mut r = pk.lock();
        if r.closed {
            return;
        }
        let live: HashSet<&str> = pods.iter().map(|(_, u, _)| u.as_str()).collect();
        for (key, uid, pod) in &pods {
            if r.pods.contains_key(uid) || !pod["metadata"]["deletionTimestamp"].is_null() {
                continue;
            }
            let (tx, rx) = channel();
            let done = Arc::new(AtomicBool::new(false));
            let worker = Worker::new(shared.clone(), pk.clone(), key, uid, pod, tx.clone(), rx);
            let d = done.clone();
            let thread = std::thread::Builder::new()
                .name(format!("fake-kubelet-{}", key.name))
                .spawn(move || {
                    let mut w = worker;
                    w.run();
                    d.store(true, Ordering::SeqCst);
                    w.after_done();
                })
                .ok();
            r.pods.insert(
                uid.clone(),
                Handle {
                    claims: claims_of(pod),
                    namespace: key.namespace.clone(),
                    tx,
                    done,
                    told_gone: false,
                    thread,
                },
            );
        }
        let gone: Vec<String> = r
            .pods
            .keys()
            .filter(|u| !live.contains(u.as_str()))
            .cloned()
            .collect();
        for uid in gone {
            let Some(h) = r.pods.get_mut(&uid) else {
                continue;
            };
            if h.done.load(Ordering::SeqCst) {
                if let Some(t) = h.thread.take() {
                    let _ = t.join();
                }
                r.pods.remove(&uid);
                let _ = fs::remove_dir_all(pk.pod_dir(&uid));
            } else if !h.told_gone {
                h.told_gone = true;
                let _ = h.tx.send(Msg::Gone);
            }
        }
        for h in r.pods.values() {
            if !h.done.load(Ordering::SeqCst) {
                for c in &h.claims {
                    in_use.insert((h.namespace.clone(), c.clone()));
                }
            }
        }
    }
    for ns in fs::read_dir(pk.data_dir.join("pvc"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let namespace = ns.file_name().to_string_lossy().into_owned();
        for c in fs::read_dir(ns.path()).into_iter().flatten().flatten() {
            let claim = (
                namespace.clone(),
                c.file_name().to_string_lossy().into_owned(),
            );
            if !claims.contains(&claim) && !in_use.contains(&claim) {
                let _ = fs::remove_dir_all(c.path());
            }
        }
    }
}

/// DELETE of a pod whose processes run: graceful deletion (see the module doc).
/// `None` when the process kubelet has nothing running for it (the API's usual
/// deletion then).
pub(crate) fn delete(
    shared: &Shared,
    s: &mut State,
    namespace: &str,
    name: &str,
    query: &Query,
    body: &[u8],
) -> Option<Reply> {
    let pk = shared.process_kubelet()?;
    let key = Key {
        res: PODS,
        namespace: namespace.to_string(),
        name: name.to_string(),
    };
    let mut pod = s.objects.get(&key)?.clone();
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let r = pk.lock();
    let h = r.pods.get(&uid)?;
    if h.done.load(Ordering::SeqCst) {
        return None;
    }
    let options: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let grace = query
        .get("gracePeriodSeconds")
        .and_then(|g| g.parse::<i64>().ok())
        .or_else(|| options["gracePeriodSeconds"].as_i64())
        .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(30);
    // The API turns a negative grace period into 1.
    let grace = if grace < 0 { 1 } else { grace as u64 };
    let current = pod["metadata"]["deletionGracePeriodSeconds"].as_u64();
    if current.is_none_or(|c| grace < c) {
        pod["metadata"]["deletionTimestamp"] = json!(rfc3339_in(grace));
        pod["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        pod = s.put(key, pod);
    }
    let _ = h.tx.send(Msg::Delete(grace));
    Some(Reply::ok(pod))
}

/// A container's state, as its status shows it.
#[derive(Clone, Debug)]
enum CState {
    Waiting(String, Option<String>),
    Running(String),
    Terminated {
        code: i32,
        message: String,
        started: String,
        finished: String,
    },
}

struct Ctr {
    name: String,
    spec: Value,
    init: bool,
    state: CState,
    /// The `bwrap` pid while it runs.
    outer: Option<i32>,
    container_id: String,
    image_id: String,
}

impl Ctr {
    fn running(&self) -> bool {
        self.outer.is_some()
    }
    fn exit_code(&self) -> Option<i32> {
        match self.state {
            CState::Terminated { code, .. } => Some(code),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Stop {
    None,
    Delete,
    Gone,
    Shutdown,
}

/// A volume made ready: its host directory and whether it is always read-only.
struct Volume {
    dir: PathBuf,
    read_only: bool,
}

/// Supervises one pod: sets up its volumes, runs its containers, writes its status.
struct Worker {
    shared: Arc<Shared>,
    pk: Arc<ProcessKubelet>,
    key: Key,
    uid: String,
    spec: Value,
    ctrs: Vec<Ctr>,
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
    start_time: String,
    sandbox_ready: bool,
    volumes: HashMap<String, Volume>,
    stop: Stop,
    deadline: Option<Instant>,
    signalled: HashSet<i32>,
    doomed: Vec<i32>,
}

fn strip_rv(mut v: Value) -> Value {
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    v
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The last `lines` lines of `text`, at most `bytes` bytes of them.
fn tail(text: &[u8], lines: usize, bytes: usize) -> Vec<u8> {
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    let mut start = 0;
    let mut seen = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == lines {
                start = i + 1;
                break;
            }
        }
    }
    let t = &text[start..];
    t[t.len().saturating_sub(bytes)..].to_vec()
}

impl Worker {
    fn new(
        shared: Arc<Shared>,
        pk: Arc<ProcessKubelet>,
        key: &Key,
        uid: &str,
        pod: &Value,
        tx: Sender<Msg>,
        rx: Receiver<Msg>,
    ) -> Worker {
        let spec = pod["spec"].clone();
        let inits = spec["initContainers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mains = spec["containers"].as_array().cloned().unwrap_or_default();
        let first = if inits.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        };
        let mut ctrs = Vec::new();
        for (init, list) in [(true, inits), (false, mains)] {
            for c in list {
                let name = c["name"].as_str().unwrap_or_default().to_string();
                let reason = if init { "PodInitializing" } else { first };
                ctrs.push(Ctr {
                    container_id: format!(
                        "containerd://{}",
                        hex(&<sha2::Sha256 as sha2::Digest>::digest(
                            format!("{uid}/{name}").as_bytes()
                        ))
                    ),
                    name,
                    spec: c,
                    init,
                    state: CState::Waiting(reason.into(), None),
                    outer: None,
                    image_id: String::new(),
                });
            }
        }
        Worker {
            shared,
            pk,
            key: key.clone(),
            uid: uid.to_string(),
            spec,
            ctrs,
            tx,
            rx,
            start_time: now_rfc3339(),
            sandbox_ready: false,
            volumes: HashMap::new(),
            stop: Stop::None,
            deadline: None,
            signalled: HashSet::new(),
            doomed: Vec::new(),
        }
    }

    fn pod_name(&self) -> String {
        format!("{}_{}({})", self.key.name, self.key.namespace, self.uid)
    }

    fn run(&mut self) {
        self.schedule();
        loop {
            match self.prepare_volumes() {
                Ok(()) => break,
                Err(_) => {
                    self.write_status();
                    match self.rx.recv_timeout(VOLUME_RETRY) {
                        Ok(m) => self.handle(m),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => self.stop = Stop::Shutdown,
                    }
                    if self.stop != Stop::None {
                        return self.end();
                    }
                }
            }
        }
        self.sandbox_ready = true;
        let n_init = self.ctrs.iter().filter(|c| c.init).count();
        for i in 0..n_init {
            if !self.start(i) {
                self.write_status();
                return self.end();
            }
            self.write_status();
            self.wait_while(|w| w.ctrs[i].running());
            if self.stop != Stop::None || self.ctrs[i].exit_code() != Some(0) {
                return self.end();
            }
        }
        for i in n_init..self.ctrs.len() {
            self.ctrs[i].state = CState::Waiting("ContainerCreating".into(), None);
        }
        for i in n_init..self.ctrs.len() {
            self.start(i);
        }
        self.write_status();
        self.wait_while(|w| w.ctrs.iter().any(Ctr::running));
        self.end()
    }

    /// The scheduler's part: `spec.nodeName`; and the images' ids.
    fn schedule(&mut self) {
        let mut s = self.shared.lock();
        for c in &mut self.ctrs {
            let image = c.spec["image"].as_str().unwrap_or_default();
            c.image_id = format!("{}@{}", repository(image), digest_of(&s, image));
        }
        let Some(pod) = s.objects.get(&self.key).cloned() else {
            return;
        };
        if pod["metadata"]["uid"] != self.uid.as_str() || !pod["spec"]["nodeName"].is_null() {
            return;
        }
        let mut new = pod;
        new["spec"]["nodeName"] = json!("flotilla-fake-node");
        let w = Writer {
            manager: "kube-scheduler",
            force: true,
            status: false,
        };
        let _ = s.replace(PODS, &self.key.namespace, &self.key.name, strip_rv(new), &w);
    }

    /// Makes every volume's directory; `Err` (why) while something it needs is
    /// missing.
    fn prepare_volumes(&mut self) -> Result<(), String> {
        enum Src {
            Empty,
            Files(Vec<(String, Vec<u8>)>),
            Claim(String),
            Host(PathBuf),
        }
        let volumes = self.spec["volumes"].as_array().cloned().unwrap_or_default();
        let ns = self.key.namespace.clone();
        let mut sources = Vec::new();
        {
            let s = self.shared.lock();
            let get = |res, name: &str| {
                s.objects
                    .get(&Key {
                        res,
                        namespace: ns.clone(),
                        name: name.to_string(),
                    })
                    .cloned()
            };
            for v in &volumes {
                let name = v["name"].as_str().unwrap_or_default().to_string();
                let src = if v["emptyDir"].is_object() {
                    Src::Empty
                } else if let Some(sec) = v["secret"].as_object() {
                    let sname = sec
                        .get("secretName")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    let optional = sec.get("optional").and_then(Value::as_bool) == Some(true);
                    let mut files = Vec::new();
                    match get(SECRETS, sname) {
                        Some(o) => {
                            for (k, val) in o["data"].as_object().into_iter().flatten() {
                                let bytes = base64_decode(val.as_str().unwrap_or_default())
                                    .unwrap_or_default();
                                files.push((k.clone(), bytes));
                            }
                            for (k, val) in o["stringData"].as_object().into_iter().flatten() {
                                files.push((k.clone(), val.as_str().unwrap_or("").into()));
                            }
                        }
                        None if optional => {}
                        None => {
                            return Err(format!(
                                "MountVolume.SetUp failed for volume \"{name}\" : secret \"{sname}\" not found"
                            ))
                        }
                    }
                    Src::Files(files)
                } else if let Some(cm) = v["configMap"].as_object() {
                    let cname = cm.get("name").and_then(Value::as_str).unwrap_or_default();
                    let optional = cm.get("optional").and_then(Value::as_bool) == Some(true);
                    let mut files = Vec::new();
                    match get(CONFIGMAPS, cname) {
                        Some(o) => {
                            for (k, val) in o["data"].as_object().into_iter().flatten() {
                                files.push((k.clone(), val.as_str().unwrap_or("").into()));
                            }
                            for (k, val) in o["binaryData"].as_object().into_iter().flatten() {
                                let bytes = base64_decode(val.as_str().unwrap_or_default())
                                    .unwrap_or_default();
                                files.push((k.clone(), bytes));
                            }
                        }
                        None if optional => {}
                        None => {
                            return Err(format!(
                                "MountVolume.SetUp failed for volume \"{name}\" : configmap \"{cname}\" not found"
                            ))
                        }
                    }
                    Src::Files(files)
                } else if let Some(claim) = v["persistentVolumeClaim"]["claimName"].as_str() {
                    if get(PERSISTENT_VOLUME_CLAIMS, claim).is_none() {
                        return Err(format!("persistentvolumeclaim \"{claim}\" not found"));
                    }
                    Src::Claim(claim.to_string())
                } else if let Some(p) = v["hostPath"]["path"].as_str() {
                    Src::Host(PathBuf::from(p))
                } else {
                    return Err(format!(
                        "volume \"{name}\": the fake kubelet runs emptyDir, secret, configMap, persistentVolumeClaim and hostPath volumes only"
                    ));
                };
                sources.push((name, v.clone(), src));
            }
        }
        let first = self
            .ctrs
            .iter()
            .find(|c| !c.init)
            .map(|c| c.spec.clone())
            .unwrap_or(Value::Null);
        let user = User::of(&self.spec, &first);
        let owner = user.owner();
        let setgid = if user.fs_group.is_some() { 0o2000 } else { 0 };
        let pod_dir = self.pk.pod_dir(&self.uid);
        let vol_dir = pod_dir.join("volumes");
        traversable(&pod_dir).map_err(|e| e.to_string())?;
        traversable(&vol_dir).map_err(|e| e.to_string())?;
        for (name, v, src) in sources {
            let dir = vol_dir.join(&name);
            let volume = match src {
                Src::Empty => {
                    make_dir(&dir, owner, 0o777 | setgid).map_err(|e| e.to_string())?;
                    Volume {
                        dir,
                        read_only: false,
                    }
                }
                Src::Files(files) => {
                    let source = if v["secret"].is_object() {
                        &v["secret"]
                    } else {
                        &v["configMap"]
                    };
                    write_key_files(&dir, &files, source, user.fs_group)
                        .map_err(|e| e.to_string())?;
                    Volume {
                        dir,
                        read_only: true,
                    }
                }
                Src::Claim(claim) => {
                    let d = self.pk.claim_dir(&self.key.namespace, &claim);
                    if let Some(parent) = d.parent() {
                        traversable(parent).map_err(|e| e.to_string())?;
                    }
                    make_dir(&d, owner, 0o755 | if setgid != 0 { 0o2070 } else { 0 })
                        .map_err(|e| e.to_string())?;
                    Volume {
                        dir: d,
                        read_only: v["persistentVolumeClaim"]["readOnly"] == true,
                    }
                }
                Src::Host(p) => Volume {
                    dir: p,
                    read_only: false,
                },
            };
            self.volumes.insert(name, volume);
        }
        Ok(())
    }

    /// Starts container `i`; `false` when it cannot start (it then waits with the
    /// reason).
    fn start(&mut self, i: usize) -> bool {
        match self.launch(i) {
            Ok(()) => true,
            Err(message) => {
                self.ctrs[i].state =
                    CState::Waiting("CreateContainerConfigError".into(), Some(message));
                false
            }
        }
    }

    /// The value an `env[].valueFrom.secretKeyRef` (`name`, `key`, `optional`)
    /// names, decoded: `None` for an optional one that is missing; the kubelet's
    /// words for a missing Secret or key, which keep the container from starting
    /// (<https://kubernetes.io/docs/concepts/configuration/secret/#using-secrets-as-environment-variables>).
    fn secret_key(&self, r: &serde_json::Map<String, Value>) -> Result<Option<String>, String> {
        let name = r.get("name").and_then(Value::as_str).unwrap_or_default();
        let key = r.get("key").and_then(Value::as_str).unwrap_or_default();
        let optional = r.get("optional").and_then(Value::as_bool) == Some(true);
        let secret = self
            .shared
            .lock()
            .objects
            .get(&Key {
                res: SECRETS,
                namespace: self.key.namespace.clone(),
                name: name.to_string(),
            })
            .cloned();
        let Some(secret) = secret else {
            return if optional {
                Ok(None)
            } else {
                Err(format!("secret \"{name}\" not found"))
            };
        };
        let value = secret["data"][key]
            .as_str()
            .and_then(base64_decode)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .or_else(|| secret["stringData"][key].as_str().map(str::to_string));
        match value {
            Some(v) => Ok(Some(v)),
            None if optional => Ok(None),
            None => Err(format!(
                "couldn't find key {key} in Secret {}/{name}",
                self.key.namespace
            )),
        }
    }

    fn launch(&mut self, i: usize) -> Result<(), String> {
        let spec = self.ctrs[i].spec.clone();
        let name = self.ctrs[i].name.clone();
        let user = User::of(&self.spec, &spec);
        if let Some(m) = user.non_root_violation(&self.pod_name(), &name) {
            return Err(m);
        }
        let mut binds = Vec::new();
        for m in spec["volumeMounts"].as_array().into_iter().flatten() {
            let vname = m["name"].as_str().unwrap_or_default();
            let dest = m["mountPath"].as_str().unwrap_or_default();
            let Some(v) = self.volumes.get(vname) else {
                return Err(format!(
                    "cannot find volume \"{vname}\" to mount into container \"{name}\""
                ));
            };
            let mut source = v.dir.clone();
            if let Some(sub) = m["subPath"].as_str().filter(|s| !s.is_empty()) {
                source = source.join(sub.trim_start_matches('/'));
                if !source.exists() {
                    let (mode, owner) = fs::metadata(&v.dir)
                        .map(|md| {
                            use std::os::unix::fs::MetadataExt;
                            (md.mode() & 0o7777, (md.uid(), md.gid()))
                        })
                        .map_err(|e| e.to_string())?;
                    make_dir(&source, owner, mode).map_err(|e| e.to_string())?;
                }
            }
            binds.push(Bind {
                source,
                dest: dest.to_string(),
                read_only: v.read_only || m["readOnly"] == true,
            });
        }
        let pod_dir = self.pk.pod_dir(&self.uid);
        let term_dir = pod_dir.join("term");
        traversable(&term_dir).map_err(|e| e.to_string())?;
        let term = term_dir.join(&name);
        let made = (|| -> io::Result<()> {
            fs::write(&term, b"")?;
            chown(&term, Some(user.uid.unwrap_or(0)), Some(user.gid))?;
            fs::set_permissions(&term, fs::Permissions::from_mode(0o666))
        })();
        made.map_err(|e| e.to_string())?;
        binds.push(Bind {
            source: term,
            dest: spec["terminationMessagePath"]
                .as_str()
                .unwrap_or("/dev/termination-log")
                .to_string(),
            read_only: false,
        });
        let log = self.pk.log_path(&self.uid, &name);
        if let Some(d) = log.parent() {
            fs::create_dir_all(d).map_err(|e| e.to_string())?;
        }
        let mut env: Vec<(String, String)> = Vec::new();
        for e in spec["env"].as_array().into_iter().flatten() {
            let Some(k) = e["name"].as_str() else {
                continue;
            };
            let v = match (
                e["value"].as_str(),
                e["valueFrom"]["secretKeyRef"].as_object(),
            ) {
                (Some(v), _) => v.to_string(),
                (None, Some(r)) => match self.secret_key(r)? {
                    Some(v) => v,
                    None => continue,
                },
                _ => continue,
            };
            env.retain(|(n, _)| n != k);
            env.push((k.to_string(), v));
        }
        if !env.iter().any(|(k, _)| k == "PATH") {
            env.push(("PATH".into(), DEFAULT_PATH.into()));
        }
        let argv: Vec<String> = ["command", "args"]
            .iter()
            .flat_map(|f| spec[*f].as_array().cloned().unwrap_or_default())
            .filter_map(|a| a.as_str().map(str::to_string))
            .collect();
        if argv.is_empty() {
            return Err(format!(
                "container \"{name}\": the fake kubelet runs no image entrypoint: give it a command"
            ));
        }
        let launch = Launch {
            bwrap: &self.pk.bwrap,
            argv,
            env,
            working_dir: spec["workingDir"].as_str().unwrap_or("/").to_string(),
            binds,
            user,
        };
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| format!("container \"{name}\": its log: {e}"))?;
        let file = Arc::new(Mutex::new(file));
        let mut child = launch
            .command()
            .and_then(|mut c| c.spawn())
            .map_err(|e| format!("starting container \"{name}\": {e}"))?;
        // The runtime's log: each stream copied line by line, stamped as read.
        let mut copiers = Vec::new();
        if let Some(out) = child.stdout.take() {
            let f = file.clone();
            copiers.push(std::thread::spawn(move || cri_log::copy(out, "stdout", f)));
        }
        if let Some(err) = child.stderr.take() {
            copiers.push(std::thread::spawn(move || {
                cri_log::copy(err, "stderr", file)
            }));
        }
        let tx = self.tx.clone();
        let outer = child.id() as i32;
        std::thread::Builder::new()
            .name("fake-kubelet-wait".into())
            .spawn(move || {
                let code = match child.wait() {
                    Ok(st) => st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0)),
                    Err(_) => 128,
                };
                // Every line written before the end is in the log before the end is
                // told (the pid namespace's end closed the pipes).
                for c in copiers {
                    let _ = c.join();
                }
                let _ = tx.send(Msg::Exited(i, code));
            })
            .map_err(|e| e.to_string())?;
        let c = &mut self.ctrs[i];
        c.outer = Some(outer);
        c.state = CState::Running(now_rfc3339());
        Ok(())
    }

    /// Handles messages while `cond` holds, signalling as a deletion asks.
    fn wait_while(&mut self, cond: impl Fn(&Worker) -> bool) {
        while cond(self) {
            let timeout = if self.stop == Stop::None {
                Duration::from_secs(3600)
            } else {
                Duration::from_millis(20)
            };
            match self.rx.recv_timeout(timeout) {
                Ok(m) => self.handle(m),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            self.enforce();
        }
        self.enforce();
    }

    fn handle(&mut self, m: Msg) {
        let now = Instant::now();
        let (stop, grace) = match m {
            Msg::Exited(i, code) => return self.exited(i, code),
            Msg::Delete(g) => (Stop::Delete, g),
            Msg::Gone => (Stop::Gone, 0),
            Msg::Shutdown => (Stop::Shutdown, 0),
        };
        self.stop = self.stop.max(stop);
        let d = now + Duration::from_secs(grace);
        self.deadline = Some(self.deadline.map_or(d, |old| old.min(d)));
        self.enforce();
    }

    /// SIGTERM to each running container's process (once), SIGKILL to all once the
    /// deadline passed.
    fn enforce(&mut self) {
        let Some(deadline) = self.deadline else {
            return;
        };
        let outers: Vec<i32> = self.ctrs.iter().filter_map(|c| c.outer).collect();
        if Instant::now() >= deadline {
            // Again on each pass until they are reaped: whatever started since dies too.
            for o in &outers {
                for p in kill_all(*o) {
                    if !self.doomed.contains(&p) {
                        self.doomed.push(p);
                    }
                }
            }
            return;
        }
        for o in outers {
            for p in main_processes(o) {
                if self.signalled.insert(p) {
                    signal(p, Signal::SIGTERM);
                }
            }
        }
    }

    fn exited(&mut self, i: usize, code: i32) {
        let started = match &self.ctrs[i].state {
            CState::Running(s) => s.clone(),
            _ => now_rfc3339(),
        };
        let name = self.ctrs[i].name.clone();
        let mut message = Vec::new();
        let term = self.pk.pod_dir(&self.uid).join("term").join(&name);
        if let Ok(f) = fs::File::open(&term) {
            let _ = f.take(MESSAGE_BYTES as u64).read_to_end(&mut message);
        }
        let policy = self.ctrs[i].spec["terminationMessagePolicy"].as_str();
        if message.is_empty() && code != 0 && policy == Some("FallbackToLogsOnError") {
            let log = fs::read(self.pk.log_path(&self.uid, &name)).unwrap_or_default();
            let mut text = Vec::new();
            for e in cri_log::parse_all(&log).0 {
                text.extend_from_slice(&e.text);
                text.push(b'\n');
            }
            message = tail(&text, FALLBACK_LINES, FALLBACK_BYTES);
        }
        let c = &mut self.ctrs[i];
        c.outer = None;
        c.state = CState::Terminated {
            code,
            message: String::from_utf8_lossy(&message).into_owned(),
            started,
            finished: now_rfc3339(),
        };
        if self.stop == Stop::None {
            self.write_status();
        }
    }

    /// After the containers: waits for killed processes to be gone, writes the
    /// final status, removes a deleted pod.
    fn end(&mut self) {
        // Anything still running (a Gone or Shutdown before a container ended).
        if self.ctrs.iter().any(Ctr::running) {
            if self.deadline.is_none() {
                self.deadline = Some(Instant::now());
            }
            self.wait_while(|w| w.ctrs.iter().any(Ctr::running));
        }
        let doomed = std::mem::take(&mut self.doomed);
        crate::wait_until(KILL_WAIT, || {
            doomed.iter().all(|p| !crate::alive(*p as u32))
        });
        match self.stop {
            Stop::Shutdown | Stop::Gone => {}
            Stop::Delete => {
                self.write_status();
                self.remove();
            }
            Stop::None => self.write_status(),
        }
    }

    /// Once marked done: a deletion that came in between is carried out.
    fn after_done(&mut self) {
        if self.stop != Stop::None {
            return;
        }
        while let Ok(m) = self.rx.try_recv() {
            if let Msg::Delete(_) = m {
                self.remove();
            }
        }
    }

    fn remove(&self) {
        let mut s = self.shared.lock();
        let same = s
            .objects
            .get(&self.key)
            .is_some_and(|p| p["metadata"]["uid"] == self.uid.as_str());
        if same {
            s.remove(&self.key);
        }
    }

    fn phase(&self) -> &'static str {
        let inits: Vec<&Ctr> = self.ctrs.iter().filter(|c| c.init).collect();
        let mains: Vec<&Ctr> = self.ctrs.iter().filter(|c| !c.init).collect();
        if inits.iter().any(|c| c.exit_code().is_some_and(|e| e != 0)) {
            return "Failed";
        }
        if !mains.is_empty() && mains.iter().all(|c| c.exit_code().is_some()) {
            return if mains.iter().all(|c| c.exit_code() == Some(0)) {
                "Succeeded"
            } else {
                "Failed"
            };
        }
        if mains
            .iter()
            .any(|c| matches!(c.state, CState::Running(_) | CState::Terminated { .. }))
        {
            return "Running";
        }
        "Pending"
    }

    fn container_status(&self, c: &Ctr) -> Value {
        let image = c.spec["image"].as_str().unwrap_or_default();
        let started_ever = !matches!(c.state, CState::Waiting(..));
        let state = match &c.state {
            CState::Waiting(reason, message) => {
                let mut w = json!({"reason": reason});
                if let Some(m) = message {
                    w["message"] = json!(m);
                }
                json!({ "waiting": w })
            }
            CState::Running(at) => json!({"running": {"startedAt": at}}),
            CState::Terminated {
                code,
                message,
                started,
                finished,
            } => {
                let mut t = json!({
                    "exitCode": code,
                    "reason": if *code == 0 { "Completed" } else { "Error" },
                    "startedAt": started, "finishedAt": finished, "containerID": c.container_id,
                });
                if !message.is_empty() {
                    t["message"] = json!(message);
                }
                json!({ "terminated": t })
            }
        };
        let running = matches!(c.state, CState::Running(_));
        let ready = if c.init {
            c.exit_code() == Some(0)
        } else {
            running
        };
        let mut s = json!({
            "name": c.name, "image": image,
            "imageID": if started_ever { c.image_id.as_str() } else { "" },
            "ready": ready, "started": running, "restartCount": 0,
            "state": state, "lastState": {},
        });
        if started_ever {
            s["containerID"] = json!(c.container_id);
        }
        s
    }

    fn status(&self, old: &Value) -> Value {
        let phase = self.phase();
        let cond = |typ: &str, ok: bool, reason: Option<&str>, message: Option<String>| {
            let status = if ok { "True" } else { "False" };
            let prev = old["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == typ));
            let at = match prev {
                Some(p) if p["status"] == status => p["lastTransitionTime"].clone(),
                _ => json!(now_rfc3339()),
            };
            let mut c = json!({"type": typ, "status": status, "lastProbeTime": null, "lastTransitionTime": at});
            if let Some(r) = reason {
                c["reason"] = json!(r);
            }
            if let Some(m) = message {
                c["message"] = json!(m);
            }
            c
        };
        let inits: Vec<&Ctr> = self.ctrs.iter().filter(|c| c.init).collect();
        let mains: Vec<&Ctr> = self.ctrs.iter().filter(|c| !c.init).collect();
        let pending_inits: Vec<&str> = inits
            .iter()
            .filter(|c| c.exit_code() != Some(0))
            .map(|c| c.name.as_str())
            .collect();
        let initialized = if pending_inits.is_empty() {
            cond("Initialized", true, None, None)
        } else {
            cond(
                "Initialized",
                false,
                Some("ContainersNotInitialized"),
                Some(format!(
                    "containers with incomplete status: [{}]",
                    pending_inits.join(" ")
                )),
            )
        };
        let unready: Vec<&str> = mains
            .iter()
            .filter(|c| !matches!(c.state, CState::Running(_)))
            .map(|c| c.name.as_str())
            .collect();
        let ready = |typ: &str| match phase {
            "Succeeded" => cond(typ, false, Some("PodCompleted"), None),
            "Failed" => cond(typ, false, Some("PodFailed"), None),
            _ if unready.is_empty() => cond(typ, true, None, None),
            _ => cond(
                typ,
                false,
                Some("ContainersNotReady"),
                Some(format!(
                    "containers with unready status: [{}]",
                    unready.join(" ")
                )),
            ),
        };
        let mut st = json!({
            "phase": phase,
            "conditions": [
                cond("PodReadyToStartContainers", self.sandbox_ready, None, None),
                initialized,
                ready("Ready"),
                ready("ContainersReady"),
                cond("PodScheduled", true, None, None),
            ],
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": self.start_time,
            "containerStatuses": mains.iter().map(|c| self.container_status(c)).collect::<Vec<_>>(),
            "qosClass": "BestEffort",
        });
        if !inits.is_empty() {
            st["initContainerStatuses"] = json!(inits
                .iter()
                .map(|c| self.container_status(c))
                .collect::<Vec<_>>());
        }
        st
    }

    /// Writes the status as the kubelet when it changed (not once the pod object is
    /// gone or another pod took its name).
    fn write_status(&self) {
        let mut s = self.shared.lock();
        let Some(pod) = s.objects.get(&self.key).cloned() else {
            return;
        };
        if pod["metadata"]["uid"] != self.uid.as_str() {
            return;
        }
        let status = self.status(&pod["status"]);
        if pod["status"] == status {
            return;
        }
        let mut new = pod;
        new["status"] = status;
        let w = Writer {
            manager: "kubelet",
            force: true,
            status: true,
        };
        let _ = s.replace(PODS, &self.key.namespace, &self.key.name, strip_rv(new), &w);
    }
}
