//! The Kubernetes session runtime: each runtime of an agent session is one Pod
//! (`restartPolicy: Never`) in `[runtime.kubernetes] namespace`.
//!
//! - **Storage**: the session's tree and the agent's home live on a
//!   PersistentVolumeClaim of the session's own (`flotilla-session-<id>`, made by
//!   [`Runtime::own`], deleted by [`Runtime::remove`]), mounted as the session's
//!   directory (`<sessions dir>/<id>`, holding `tree` and `home` as a local
//!   runtime's does), so the command line and environment the authority builds
//!   hold in the pod.
//! - **Run files**: the hook settings, the CA, the turn's prompt and the session's
//!   credential go in a Secret per runtime (`flotilla-session-<id>-<boot>`),
//!   mounted read-only at `<sessions dir>/<id>/run` (mode 0440, group = the
//!   session's uid through `fsGroup`), deleted when the runtime ends. The pod holds
//!   no credential but its session's: no service-account token is mounted.
//! - **Containers**: the init container `prepare` (`flotilla session-pod prepare`)
//!   makes the tree on the first boot from a git bundle the authority serves and
//!   resets the home; the container `agent` (`flotilla session-pod run -- claude
//!   …`) runs Claude Code, whose stdout is the pod's log, copied by the authority
//!   as the runtime's transcript, and whose stderr's end is the termination
//!   message. Both run as the session's uid, without privilege escalation or
//!   capabilities, on a read-only root file system (`/tmp` an `emptyDir`).
//! - **Liveness**: from the pod's UID and phase in the shared pod watch
//!   ([`crate::watch`]), never polled; a pod that is gone, made again under the same
//!   name, or `Succeeded`/`Failed` does not run.
//!
//! Kubernetes behaviour relied on: pod lifecycle and container states
//! (<https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/>), init
//! containers (<https://kubernetes.io/docs/concepts/workloads/pods/init-containers/>),
//! termination messages
//! (<https://kubernetes.io/docs/tasks/debug/debug-application/determine-reason-pod-failure/>),
//! Secret volumes and `fsGroup`
//! (<https://kubernetes.io/docs/tasks/configure-pod-container/security-context/>),
//! `subPath` mounts
//! (<https://kubernetes.io/docs/concepts/storage/volumes/#using-subpath>), the
//! `pods/log` subresource with `follow`.

use crate::cluster::{self, Connection};
use crate::error::KubeError;
use crate::manifest::LABEL_MANAGED_BY;
use crate::watch::{watched, Watchable, Watched};
use flotilla_model::topology::Cluster;
use flotilla_sessions::config::KubernetesRuntimeConfig;
use flotilla_sessions::runtime::{
    Exit, HomeReset, PodRef, Removed, Running, Runtime, RuntimeKind, StartSpec, Started,
};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The label naming a session's objects (its id).
pub const LABEL_SESSION: &str = "io.flotilla.session";
/// The label naming a runtime's objects (its boot number).
pub const LABEL_BOOT: &str = "io.flotilla.boot";
/// The init container's name.
pub const PREPARE_CONTAINER: &str = "prepare";
/// The agent's container's name.
pub const AGENT_CONTAINER: &str = "agent";

/// Waiting reasons of a container that will not start without a change (the
/// image, the pod's configuration): the runtime ends at once with the reason
/// rather than waiting for an idle timeout.
const STUCK: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// The name of session `id`'s claim.
pub fn claim_name(id: u64) -> String {
    format!("flotilla-session-{id}")
}

/// The name of runtime `boot` of session `id`: its pod's and its Secret's.
pub fn runtime_name(id: u64, boot: u64) -> String {
    format!("flotilla-session-{id}-{boot}")
}

fn labels(id: u64, boot: Option<u64>) -> serde_json::Value {
    let mut l = json!({
        LABEL_MANAGED_BY: "flotilla",
        "app.kubernetes.io/component": "session",
        LABEL_SESSION: id.to_string(),
    });
    if let Some(b) = boot {
        l[LABEL_BOOT] = b.to_string().into();
    }
    l
}

/// Session `id`'s PersistentVolumeClaim (`ReadWriteOnce`, `[runtime.kubernetes]
/// storage` and `storage_class`).
pub fn session_claim(id: u64, cfg: &KubernetesRuntimeConfig) -> PersistentVolumeClaim {
    let mut spec = json!({
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": cfg.storage}},
    });
    if let Some(class) = &cfg.storage_class {
        spec["storageClassName"] = class.clone().into();
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim_name(id), "namespace": cfg.namespace, "labels": labels(id, None)},
        "spec": spec,
    }))
    .expect("a PersistentVolumeClaim")
}

/// Runtime `boot` of session `id`'s Secret holding `files` (name → bytes).
pub fn runtime_secret(
    id: u64,
    boot: u64,
    namespace: &str,
    files: &BTreeMap<String, Vec<u8>>,
) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(runtime_name(id, boot)),
            namespace: Some(namespace.to_string()),
            labels: serde_json::from_value(labels(id, Some(boot))).ok(),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(
            files
                .iter()
                .map(|(k, v)| (k.clone(), k8s_openapi::ByteString(v.clone())))
                .collect(),
        ),
        ..Default::default()
    }
}

/// Whether the variable `name` is written in the pod's spec (Flotilla's own, `PATH`,
/// `HOME`) rather than read from the runtime's Secret.
pub fn is_literal_env(name: &str) -> bool {
    // The repository's URL may carry a credential.
    (name.starts_with("FLOTILLA_") && name != "FLOTILLA_TREE_ORIGIN")
        || name == "PATH"
        || name == "HOME"
}

/// Whether the init container gets variable `name` (Flotilla's own only).
fn for_prepare(name: &str) -> bool {
    name.starts_with("FLOTILLA_") || name == "PATH" || name == "HOME"
}

/// The runtime Secret's key holding variable `name`'s value.
pub fn env_key(name: &str) -> String {
    format!("env.{name}")
}

/// What one runtime's pod runs.
#[derive(Debug, Clone)]
pub struct PodPlan<'a> {
    /// The session.
    pub id: u64,
    /// The runtime's number.
    pub boot: u64,
    /// The session's uid (and gid, and `fsGroup`).
    pub uid: u32,
    /// The session's directory as the authority names it (`<sessions dir>/<id>`):
    /// the claim is mounted there (with `tree` and `home` on it), the runtime's
    /// Secret at its `run`.
    pub session_dir: &'a Path,
    /// Claude Code's arguments.
    pub args: &'a [String],
    /// The agent's environment (both containers get it, with `HOME` and
    /// `FLOTILLA_RUN`).
    pub env: &'a [(String, String)],
    /// Where and what.
    pub cfg: &'a KubernetesRuntimeConfig,
    /// The run files in the runtime's Secret (mounted at `run`).
    pub files: &'a [String],
}

/// The pod of [`PodPlan`]: a pure function of it.
pub fn session_pod(plan: &PodPlan<'_>) -> Pod {
    let sdir = plan.session_dir;
    let (tree, home, run) = (sdir.join("tree"), sdir.join("home"), sdir.join("run"));
    let mut env: Vec<(String, String)> = plan
        .env
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "HOME" | "FLOTILLA_RUN" | "FLOTILLA_AUTHORITY_WAIT"
            )
        })
        .cloned()
        .collect();
    env.push(("HOME".into(), home.display().to_string()));
    env.push(("FLOTILLA_RUN".into(), run.display().to_string()));
    env.push((
        "FLOTILLA_AUTHORITY_WAIT".into(),
        format!("{}ms", plan.cfg.authority_wait.as_millis()),
    ));
    // Flotilla's own variables are written in the spec; the configured environment
    // (a model key…) is read from the runtime's Secret, so reading the pod does
    // not show it, and the init container does not get it.
    let secret = runtime_name(plan.id, plan.boot);
    let entry = |(k, v): &(String, String)| {
        if is_literal_env(k) {
            json!({"name": k, "value": v})
        } else {
            json!({"name": k, "valueFrom": {"secretKeyRef": {"name": secret, "key": env_key(k)}}})
        }
    };
    let literal: Vec<serde_json::Value> = env
        .iter()
        .filter(|(k, _)| for_prepare(k))
        .map(entry)
        .collect();
    let all: Vec<serde_json::Value> = env.iter().map(entry).collect();
    // The claim is the session's directory (its root is the pod's group's to
    // write, through fsGroup; a subPath directory would be made by the kubelet as
    // root, 0750), the Secret over its `run`.
    let mounts = json!([
        {"name": "work", "mountPath": sdir.display().to_string()},
        {"name": "run", "mountPath": run.display().to_string(), "readOnly": true},
        {"name": "tmp", "mountPath": "/tmp"},
    ]);
    let security = json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": true,
    });
    let flotilla = plan.cfg.flotilla.display().to_string();
    let container = |name: &str, command: Vec<String>| {
        let mut c = json!({
            "name": name,
            "image": plan.cfg.image,
            "command": command,
            "env": if name == AGENT_CONTAINER { &all } else { &literal },
            "volumeMounts": mounts,
            // The init container makes the tree: it starts in the claim's root.
            "workingDir": if name == AGENT_CONTAINER { &tree } else { sdir }.display().to_string(),
            "securityContext": security,
            // The agent's wrapper writes the end of Claude Code's stderr; an
            // init container that fails says why on its log.
            "terminationMessagePolicy": "FallbackToLogsOnError",
        });
        if let Some(p) = &plan.cfg.image_pull_policy {
            c["imagePullPolicy"] = p.clone().into();
        }
        c
    };
    let mut run_cmd = vec![
        flotilla.clone(),
        "session-pod".into(),
        "run".into(),
        "--".into(),
        plan.cfg.claude.display().to_string(),
    ];
    run_cmd.extend(plan.args.iter().cloned());
    let mut spec = json!({
        "restartPolicy": "Never",
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "terminationGracePeriodSeconds": 10,
        "securityContext": {
            "runAsUser": plan.uid,
            "runAsGroup": plan.uid,
            "fsGroup": plan.uid,
            "runAsNonRoot": true,
        },
        "initContainers": [container(PREPARE_CONTAINER, vec![flotilla, "session-pod".into(), "prepare".into()])],
        "containers": [container(AGENT_CONTAINER, run_cmd)],
        "volumes": [
            {"name": "run", "secret": {
                "secretName": secret,
                "defaultMode": 0o440,
                // The run files only: the environment's keys are not files.
                "items": plan.files.iter().map(|f| json!({"key": f, "path": f})).collect::<Vec<_>>(),
            }},
            {"name": "work", "persistentVolumeClaim": {"claimName": claim_name(plan.id)}},
            {"name": "tmp", "emptyDir": {}},
        ],
    });
    if !plan.cfg.node_selector.is_empty() {
        spec["nodeSelector"] = json!(plan.cfg.node_selector);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": runtime_name(plan.id, plan.boot),
            "namespace": plan.cfg.namespace,
            "labels": labels(plan.id, Some(plan.boot)),
        },
        "spec": spec,
    }))
    .expect("a Pod")
}

/// Where a runtime's pod is, from what the watch shows of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodProgress {
    /// Not started yet (scheduling, pulling, the init container running).
    Pending,
    /// The agent's container runs (or ran): its log can be read.
    Started,
    /// It ended before the agent's container started: the code (when a container
    /// exited) and why.
    Failed(Option<i32>, String),
    /// A container waits for a reason that will not pass by itself.
    Stuck(String),
}

/// What `pod` says of its progress (pure).
pub fn progress(pod: &Pod) -> PodProgress {
    let Some(status) = &pod.status else {
        return PodProgress::Pending;
    };
    let agent = status
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == AGENT_CONTAINER);
    if let Some(state) = agent.and_then(|c| c.state.as_ref()) {
        if state.running.is_some() || state.terminated.is_some() {
            return PodProgress::Started;
        }
    }
    for c in status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
    {
        let Some(state) = &c.state else { continue };
        if let Some(t) = &state.terminated {
            if t.exit_code != 0 {
                let why = t
                    .message
                    .clone()
                    .filter(|m| !m.trim().is_empty())
                    .or_else(|| t.reason.clone())
                    .unwrap_or_default();
                return PodProgress::Failed(
                    Some(t.exit_code),
                    format!(
                        "container `{}` exited {}: {}",
                        c.name,
                        t.exit_code,
                        why.trim()
                    ),
                );
            }
        }
        if let Some(w) = &state.waiting {
            let reason = w.reason.clone().unwrap_or_default();
            if STUCK.contains(&reason.as_str()) {
                return PodProgress::Stuck(format!(
                    "container `{}`: {reason}: {}",
                    c.name,
                    w.message.clone().unwrap_or_default()
                ));
            }
        }
    }
    if status.phase.as_deref() == Some("Failed") {
        return PodProgress::Failed(
            None,
            format!(
                "the pod failed: {} {}",
                status.reason.clone().unwrap_or_default(),
                status.message.clone().unwrap_or_default()
            ),
        );
    }
    PodProgress::Pending
}

/// The agent container's end in `pod`: its exit code and termination message.
pub fn agent_end(pod: &Pod) -> Option<(i32, String)> {
    pod.status
        .as_ref()?
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == AGENT_CONTAINER)?
        .state
        .as_ref()?
        .terminated
        .as_ref()
        .map(|t| (t.exit_code, t.message.clone().unwrap_or_default()))
}

/// Whether `pod` (as the watch shows it) is the runtime `r` and still runs.
pub fn pod_runs(pod: Option<&Pod>, r: &PodRef) -> bool {
    let Some(pod) = pod else { return false };
    pod.metadata.uid.as_deref() == Some(r.uid.as_str())
        && !matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

/// The Kubernetes session runtime (see the module docs).
pub struct PodRuntime {
    conn: Connection,
    cfg: KubernetesRuntimeConfig,
    /// The sessions' directory (`[sessions] dir`): the authority's copies of run
    /// files and outputs, and the paths the pods mount at.
    dir: PathBuf,
    /// Session credentials given and not yet put in a Secret.
    tokens: Mutex<HashMap<u64, String>>,
    /// The pod watch, once its first list came.
    pods: OnceLock<Arc<Watched<Pod>>>,
    /// Pods made (name → UID) that the watch has not shown yet: they run (a gate
    /// call from a pod may come before the watch's event of its creation).
    unseen: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for PodRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodRuntime")
            .field("conn", &self.conn)
            .field("namespace", &self.cfg.namespace)
            .finish_non_exhaustive()
    }
}

fn io_err(e: KubeError) -> io::Error {
    io::Error::other(crate::error::chain(&e))
}

impl PodRuntime {
    /// Reaches the cluster of `cfg` (its kubeconfig and context) for sessions whose
    /// directory is `dir`, and starts watching the namespace's pods (waiting up to
    /// the API time limit for the first list; a cluster that does not answer yet is
    /// only logged: pods are watched once it does).
    ///
    /// # Errors
    /// The kubeconfig cannot be read, has no such context, or gives no client
    /// ([`KubeError`]).
    pub fn connect(cfg: &KubernetesRuntimeConfig, dir: &Path) -> Result<PodRuntime, KubeError> {
        let conn = cluster::connect(&Cluster {
            kubeconfig: cfg.kubeconfig.as_ref().map(|p| p.display().to_string()),
            context: cfg.context.clone(),
            namespace: cfg.namespace.clone(),
        })?;
        let rt = PodRuntime {
            conn,
            cfg: cfg.clone(),
            dir: dir.to_path_buf(),
            tokens: Mutex::new(HashMap::new()),
            pods: OnceLock::new(),
            unseen: Mutex::new(HashMap::new()),
        };
        if let Err(e) = rt.pods() {
            tracing::warn!("sessions' pods: {}", crate::error::chain(&e));
        }
        Ok(rt)
    }

    fn pods(&self) -> Result<Arc<Watched<Pod>>, KubeError> {
        if let Some(w) = self.pods.get() {
            return Ok(Arc::clone(w));
        }
        let w = watched::<Pod>(&self.conn, &self.cfg.namespace, cluster::api_timeout())?;
        Ok(Arc::clone(self.pods.get_or_init(|| w)))
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.conn.client.clone(), &self.cfg.namespace)
    }

    fn what(&self, kind: &str, name: &str) -> String {
        format!("{kind} {}/{name}", self.cfg.namespace)
    }

    /// Creates `obj` (a 409 `AlreadyExists` is fine when `existing_ok`).
    fn create<K>(&self, obj: K, existing_ok: bool) -> Result<Option<K>, KubeError>
    where
        K: Watchable + serde::Serialize,
    {
        let api: Api<K> = self.api();
        let name = obj.meta().name.clone().unwrap_or_default();
        let what = self.what(&K::kind(&()), &name);
        let server = self.conn.server.clone();
        cluster::call(&format!("create {what}"), async move {
            match api.create(&PostParams::default(), &obj).await {
                Ok(o) => Ok(Some(o)),
                Err(kube::Error::Api(s)) if s.code == 409 && existing_ok => Ok(None),
                Err(e) => Err(KubeError::from_kube("create", &what, &server, e)),
            }
        })
    }

    /// Deletes the objects of kind `K` labelled for session `id` (every runtime's)
    /// at once; none is fine. What was deleted (`Kind namespace/name`).
    fn delete_labelled<K>(&self, id: u64) -> Result<Vec<String>, KubeError>
    where
        K: Watchable,
    {
        let api: Api<K> = self.api();
        let selector = format!("{LABEL_MANAGED_BY}=flotilla,{LABEL_SESSION}={id}");
        let kind = K::kind(&()).to_string();
        let ns = self.cfg.namespace.clone();
        let what = format!("{kind}s of session {id} in {ns}");
        let server = self.conn.server.clone();
        cluster::call(&format!("delete {what}"), async move {
            let dp = at_once();
            let lp = ListParams::default().labels(&selector);
            let listed = api
                .list(&lp)
                .await
                .map_err(|e| KubeError::from_kube("list", &what, &server, e))?;
            let mut deleted = Vec::new();
            for o in listed.items {
                let name = o.meta().name.clone().unwrap_or_default();
                match api.delete(&name, &dp).await {
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Ok(_) => deleted.push(format!("{kind} {ns}/{name}")),
                    Err(e) => return Err(KubeError::from_kube("delete", &what, &server, e)),
                }
            }
            Ok(deleted)
        })
    }

    /// The run files the authority wrote for this runtime, and its credential.
    fn run_files(&self, id: u64) -> io::Result<BTreeMap<String, Vec<u8>>> {
        let run = self.dir.join(id.to_string()).join("run");
        let mut files = BTreeMap::new();
        for name in ["ca.pem", "settings.json", "prompt"] {
            match std::fs::read(run.join(name)) {
                Ok(b) => {
                    files.insert(name.to_string(), b);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound && name == "prompt" => {}
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{}: {e}", run.join(name).display()),
                    ))
                }
            }
        }
        let token = self
            .tokens
            .lock()
            .expect("tokens")
            .remove(&id)
            .ok_or_else(|| io::Error::other(format!("session {id} was given no credential")))?;
        files.insert("token".into(), token.into_bytes());
        Ok(files)
    }
}

impl Runtime for PodRuntime {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Kubernetes
    }

    /// Makes the session's claim (its tree and home), if it is not there.
    fn own(&self, id: u64, _uid: u32) -> io::Result<()> {
        self.create(session_claim(id, &self.cfg), true)
            .map(|_| ())
            .map_err(io_err)
    }

    /// The home is reset in the pod, by its init container; what is known here is
    /// whether the conversation began ([`Runtime::has_transcript`]).
    fn reset_home(&self, id: u64, agent_session: &str) -> io::Result<HomeReset> {
        Ok(HomeReset {
            removed: Vec::new(),
            transcript: self.has_transcript(id, agent_session)?,
        })
    }

    /// Whether an earlier runtime's transcript (the authority's copy of its pod's
    /// log, `<session>/runtime-<n>.jsonl`) shows conversation `agent_session` begun.
    /// The pod itself decides between naming and resuming it by its home
    /// ([`flotilla_sessions::pod::conversation_args`]), so a wrong guess here
    /// costs nothing.
    fn has_transcript(&self, id: u64, agent_session: &str) -> io::Result<bool> {
        let sdir = self.dir.join(id.to_string());
        let needle = format!("\"session_id\":\"{agent_session}\"");
        Ok(std::fs::read_dir(&sdir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with("runtime-") && n.ends_with(".jsonl")
            })
            .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains(&needle))))
    }

    /// Kept until [`Runtime::start`] puts it in the runtime's Secret.
    fn give_credential(&self, id: u64, _uid: u32, token: &str) -> io::Result<()> {
        self.tokens
            .lock()
            .expect("tokens")
            .insert(id, token.to_string());
        Ok(())
    }

    fn give_sockets(&self, _id: u64, _uid: u32) -> io::Result<()> {
        Err(io::Error::other(
            "a pod has the cluster's network: [runtime] network must be \"host\"",
        ))
    }

    fn start(&self, spec: StartSpec) -> io::Result<Started> {
        if spec.program != "claude" {
            return Err(io::Error::other(format!(
                "a pod runs Claude Code itself, not `{}` ([runtime] network must be \"host\")",
                spec.program
            )));
        }
        let (id, boot) = (spec.id, spec.boot);
        let mut files = self.run_files(id)?;
        let names: Vec<String> = files.keys().cloned().collect();
        for (k, v) in spec.env.iter().filter(|(k, _)| !is_literal_env(k)) {
            files.insert(env_key(k), v.clone().into_bytes());
        }
        // A pod of an earlier runtime that ended stays until its end was read;
        // none may run beside this one.
        self.delete_labelled::<Pod>(id).map_err(io_err)?;
        self.delete_labelled::<Secret>(id).map_err(io_err)?;
        self.own(id, spec.uid)?;
        self.create(runtime_secret(id, boot, &self.cfg.namespace, &files), false)
            .map_err(io_err)?;
        let sdir = self.dir.join(id.to_string());
        let pod = session_pod(&PodPlan {
            id,
            boot,
            uid: spec.uid,
            session_dir: &sdir,
            args: &spec.args,
            env: &spec.env,
            cfg: &self.cfg,
            files: &names,
        });
        // The watch first: a pod is never made that nothing follows.
        let pods = match self.pods() {
            Ok(p) => p,
            Err(e) => {
                let _ = self.delete_labelled::<Secret>(id);
                return Err(io_err(e));
            }
        };
        let made = match self.create(pod, false) {
            Ok(made) => made.expect("created"),
            Err(e) => {
                // Its credential goes with the pod that was not made.
                let _ = self.delete_labelled::<Secret>(id);
                return Err(io_err(e));
            }
        };
        let pod = PodRef {
            namespace: self.cfg.namespace.clone(),
            name: runtime_name(id, boot),
            uid: made.metadata.uid.clone().unwrap_or_default(),
        };
        self.unseen
            .lock()
            .expect("unseen pods")
            .insert(pod.name.clone(), pod.uid.clone());
        let [_, out, err] = spec.stdio;
        let follow = Follow {
            conn: self.conn.clone(),
            pods,
            pod: pod.clone(),
            out,
            err,
        };
        Ok(Started {
            pid: 0,
            start_ticks: 0,
            pod: Some(pod),
            exit: Box::new(move || cluster::block(follow.run())),
        })
    }

    fn running(&self, r: &Running) -> bool {
        let Some(pod) = &r.pod else { return false };
        match self.pods() {
            Ok(w) => {
                let seen = w.named(&pod.name);
                let mut unseen = self.unseen.lock().expect("unseen pods");
                match seen {
                    Some(p) => {
                        unseen.remove(&pod.name);
                        pod_runs(Some(&p), pod)
                    }
                    None => unseen.get(&pod.name) == Some(&pod.uid),
                }
            }
            // Not known (the cluster has not answered since this process
            // started): believed to run until the watch says otherwise or the
            // idle timeout tears it down.
            Err(_) => true,
        }
    }

    fn stop(&self, r: &Running) -> io::Result<()> {
        let Some(pod) = &r.pod else {
            return Ok(());
        };
        self.unseen.lock().expect("unseen pods").remove(&pod.name);
        let api: Api<Pod> = self.api();
        let (name, uid) = (pod.name.clone(), pod.uid.clone());
        let what = self.what("Pod", &name);
        let server = self.conn.server.clone();
        cluster::call(&format!("delete {what}"), async move {
            let dp = DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..at_once()
            };
            match api.delete(&name, &dp).await {
                // Gone already, or another pod by now (its UID precondition).
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
                Ok(_) => Ok(()),
                Err(e) => Err(KubeError::from_kube("delete", &what, &server, e)),
            }
        })
        .map_err(io_err)
    }

    /// A pod is settled once it is gone: an ended pod still there holds its end.
    fn settled(&self, r: &Running) -> bool {
        let Some(pod) = &r.pod else { return true };
        match self.pods() {
            Ok(w) => w
                .named(&pod.name)
                .is_none_or(|p| p.metadata.uid.as_deref() != Some(pod.uid.as_str())),
            Err(_) => true,
        }
    }

    /// Follows a pod an earlier authority started, running or ended (while no
    /// authority watched) but still there: its whole log again (the pod keeps it),
    /// then its end, as [`Runtime::start`]'s wait does. `None` when the pod is gone.
    fn reattach(&self, r: &Running, stdio: [std::fs::File; 2]) -> Option<Exit> {
        let pod = r.pod.clone()?;
        let pods = self.pods().ok()?;
        pods.named(&pod.name)
            .filter(|p| p.metadata.uid.as_deref() == Some(pod.uid.as_str()))?;
        let [out, mut err] = stdio;
        // The whole log again, over what the earlier authority copied.
        out.set_len(0).ok()?;
        std::io::Seek::seek(&mut err, std::io::SeekFrom::End(0)).ok()?;
        let follow = Follow {
            conn: self.conn.clone(),
            pods,
            pod,
            out,
            err,
        };
        Some(Box::new(move || cluster::block(follow.run())))
    }

    /// Deletes the session's pods, Secrets and claim, and the authority's copies
    /// (its outputs and run files); what is measured is those copies (the claim's
    /// bytes are the cluster's to count).
    fn remove(&self, id: u64) -> io::Result<Removed> {
        let mut elsewhere = self.delete_labelled::<Pod>(id).map_err(io_err)?;
        elsewhere.extend(self.delete_labelled::<Secret>(id).map_err(io_err)?);
        elsewhere.extend(
            self.delete_labelled::<PersistentVolumeClaim>(id)
                .map_err(io_err)?,
        );
        let sdir = self.dir.join(id.to_string());
        let (bytes, files) = measure(&sdir);
        let problem = match std::fs::remove_dir_all(&sdir) {
            Ok(()) => None,
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => Some(format!("{}: {e}", sdir.display())),
        };
        let (left_bytes, left_files) = measure(&sdir);
        Ok(Removed {
            elsewhere,
            bytes,
            files,
            left_bytes,
            left_files,
            problem,
        })
    }
}

/// A deletion without grace, its dependents collected in the background: a
/// runtime's objects go at once.
fn at_once() -> DeleteParams {
    DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::background()
    }
}

/// Bytes and files beneath `dir` (links not followed).
fn measure(dir: &Path) -> (u64, u64) {
    let mut total = (0, 0);
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(m) = e.path().symlink_metadata() else {
            continue;
        };
        if m.is_dir() {
            let (b, f) = measure(&e.path());
            total = (total.0 + b, total.1 + f);
        } else {
            total = (total.0 + m.len(), total.1 + 1);
        }
    }
    total
}

/// Waits for one runtime's pod to end, copying its log to `out` and its end to
/// `err`, then deletes it and its Secret.
struct Follow {
    conn: Connection,
    pods: Arc<Watched<Pod>>,
    /// Its pod (its Secret has the pod's name).
    pod: PodRef,
    out: std::fs::File,
    err: std::fs::File,
}

impl Follow {
    fn current(&self) -> Option<Arc<Pod>> {
        self.pods
            .named(&self.pod.name)
            .filter(|p| p.metadata.uid.as_deref() == Some(self.pod.uid.as_str()))
    }

    /// The runtime's exit code (`None` when it never ran or was deleted).
    async fn run(mut self) -> Option<i32> {
        use std::io::Write;
        let mut changed = self.pods.changed();
        // 1. Until the agent's container starts, or the pod cannot get there. A pod
        // just made may not be in the watch's store yet.
        let mut seen = false;
        let appear_by = tokio::time::Instant::now() + cluster::api_timeout();
        loop {
            let Some(pod) = self.current() else {
                if !seen {
                    match tokio::time::timeout_at(appear_by, changed.changed()).await {
                        Ok(Ok(())) => continue,
                        Ok(Err(_)) => return None,
                        Err(_) => {
                            let _ = writeln!(
                                self.err,
                                "the pod {} never showed in the watch of {}'s pods",
                                self.pod.name, self.pod.namespace
                            );
                            self.clean_up().await;
                            return None;
                        }
                    }
                }
                let _ = writeln!(self.err, "the pod {} was deleted", self.pod.name);
                return None;
            };
            seen = true;
            match progress(&pod) {
                PodProgress::Started => break,
                PodProgress::Pending => {}
                PodProgress::Failed(code, why) => {
                    let _ = writeln!(self.err, "{why}");
                    self.clean_up().await;
                    return code.or(Some(1));
                }
                PodProgress::Stuck(why) => {
                    let _ = writeln!(self.err, "{why}");
                    self.clean_up().await;
                    return None;
                }
            }
            if changed.changed().await.is_err() {
                return None;
            }
        }
        // 2. Its log (stdout, the transcript) until it ends.
        let api: Api<Pod> = Api::namespaced(self.conn.client.clone(), &self.pod.namespace);
        let lp = LogParams {
            container: Some(AGENT_CONTAINER.into()),
            follow: true,
            ..LogParams::default()
        };
        // Whether the stream broke (the API server or a proxy went away): the
        // whole log is read again once the container has ended.
        let mut broken = false;
        match api.log_stream(&self.pod.name, &lp).await {
            Ok(stream) => {
                use futures_util::io::AsyncReadExt;
                let mut stream = Box::pin(stream);
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) => break,
                        Ok(n) => {
                            if self.out.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        Err(_) => {
                            broken = true;
                            break;
                        }
                    }
                }
            }
            Err(_) => broken = true,
        }
        // A stream that ended while the container still runs broke too.
        broken |= self.current().is_some_and(|p| agent_end(&p).is_none());
        // 3. Its end, as the kubelet reports it.
        let end = loop {
            match self.current() {
                None => {
                    let _ = writeln!(
                        self.err,
                        "the pod {} was deleted before its end was read",
                        self.pod.name
                    );
                    break None;
                }
                Some(pod) => {
                    if let Some(end) = agent_end(&pod) {
                        break Some(end);
                    }
                }
            }
            if changed.changed().await.is_err() {
                break None;
            }
        };
        if broken && end.is_some() {
            // The whole log again, over the part the broken stream copied; the
            // pod keeps it until it is deleted below.
            let lp = LogParams {
                container: Some(AGENT_CONTAINER.into()),
                ..LogParams::default()
            };
            let mut tries = 0;
            loop {
                match api.logs(&self.pod.name, &lp).await {
                    Ok(whole) => {
                        use std::io::Seek;
                        let rewritten = self
                            .out
                            .set_len(0)
                            .and_then(|()| self.out.seek(std::io::SeekFrom::Start(0)).map(|_| ()))
                            .and_then(|()| self.out.write_all(whole.as_bytes()));
                        if let Err(e) = rewritten {
                            let _ = writeln!(self.err, "writing the pod's log again: {e}");
                        }
                        break;
                    }
                    Err(e) if tries < 30 => {
                        tries += 1;
                        tracing::debug!("reading pod {}'s log again: {e}", self.pod.name);
                        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                    }
                    Err(e) => {
                        let _ = writeln!(
                            self.err,
                            "the pod's log could not be read whole, so the transcript may end early: {}",
                            crate::error::chain(&e)
                        );
                        break;
                    }
                }
            }
        }
        let code = end.map(|(code, message)| {
            if !message.is_empty() {
                let _ = self.err.write_all(message.as_bytes());
            }
            code
        });
        self.clean_up().await;
        code
    }

    /// Deletes the runtime's pod and Secret (its credential with it).
    async fn clean_up(&self) {
        let dp = at_once();
        let name = &self.pod.name;
        let pods: Api<Pod> = Api::namespaced(self.conn.client.clone(), &self.pod.namespace);
        let secrets: Api<Secret> = Api::namespaced(self.conn.client.clone(), &self.pod.namespace);
        // Either may be gone already (`session stop` deleted the pod).
        let gone = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404);
        if let Err(e) = secrets.delete(name, &dp).await {
            if !gone(&e) {
                tracing::warn!(
                    "deleting Secret {}/{name}: {}",
                    self.pod.namespace,
                    crate::error::chain(&e)
                );
            }
        }
        if let Err(e) = pods.delete(name, &dp).await {
            if !gone(&e) {
                tracing::warn!(
                    "deleting Pod {}/{name}: {}",
                    self.pod.namespace,
                    crate::error::chain(&e)
                );
            }
        }
    }
}
