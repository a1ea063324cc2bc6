//! The `kubernetes` adapter: a component's lifecycle verbs as server-side applies of
//! its objects ([`crate::manifest`]) under the field manager `flotilla`, and what it
//! is read from the watches ([`crate::watch`]) and assessed ([`crate::assess`]).
//!
//! - start: every object is applied as a server-side dry run first (a conflict with
//!   another field manager, a refused verb, a namespace that does not exist or an
//!   invalid object fails here, and nothing is applied), then for real (Service, then
//!   workload); then the rollout is awaited (`kubectl rollout status`'s rules) until
//!   every wanted pod is ready, failing at once when a pod crash-loops, is killed for
//!   memory or cannot pull its image. The runtime identity is the ready pods' UIDs and
//!   `imageID` digests.
//! - restart: a rollout restart (the pod template's `kubectl.kubernetes.io/restartedAt`,
//!   as `kubectl rollout restart` sets it), proven by pods whose UIDs are all new.
//! - stop: the workload scaled to 0 (its Service and its ClusterIP stay), awaited until
//!   no pod of it is left.
//! - an object of the component's name that Flotilla does not manage (or another
//!   project's) is never touched.

use crate::assess::{self, PodFacts, WorkloadFacts};
use crate::cluster::{self, Connection};
use crate::error::KubeError;
use crate::manifest::{self, Inputs, Objects, Workload, FIELD_MANAGER};
use crate::watch;
use flotilla_exec::adapter::{Adapter, Freshness, Launch, Launched, Seen, Stopped};
use flotilla_exec::{ExecError, RuntimeIdentity};
use flotilla_model::inventory::{AdapterKind, KubernetesSpec, WorkloadKind};
use flotilla_model::topology::Component;
use flotilla_store::InstanceRecord;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, Service};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a start or restart waits for its rollout by default
/// (`FLOTILLA_KUBERNETES_ROLLOUT_TIMEOUT` overrides; a Deployment's own
/// `progressDeadlineSeconds` is 600 s too).
pub const DEFAULT_ROLLOUT_TIMEOUT: Duration = Duration::from_secs(600);

/// What `check` says of how far the adapter was tested: never against a real
/// cluster in Flotilla's CI.
pub const UNTESTED: &str = "Flotilla's CI runs this adapter against an in-memory API server and kmock, never a real cluster";

/// The `kubernetes` adapter.
#[derive(Debug, Clone)]
pub struct Kubernetes {
    /// The longest wait for a rollout (start, restart) or a scale to zero (stop, on
    /// top of the pods' grace period).
    pub rollout_timeout: Duration,
}

impl Default for Kubernetes {
    fn default() -> Self {
        Kubernetes {
            rollout_timeout: std::env::var("FLOTILLA_KUBERNETES_ROLLOUT_TIMEOUT")
                .ok()
                .and_then(|v| humantime::parse_duration(&v).ok())
                .filter(|d| !d.is_zero())
                .unwrap_or(DEFAULT_ROLLOUT_TIMEOUT),
        }
    }
}

fn adapter_err(c: &Component, e: impl std::fmt::Display) -> ExecError {
    ExecError::Adapter {
        component: c.name.clone(),
        message: e.to_string(),
    }
}

/// A component's place on its cluster: the connection, its table, name, namespace.
struct Place<'a> {
    conn: Connection,
    k: &'a KubernetesSpec,
    name: String,
    namespace: String,
}

impl<'a> Place<'a> {
    fn of(c: &'a Component) -> Result<Place<'a>, ExecError> {
        let k = manifest::spec(c).map_err(|e| adapter_err(c, e))?;
        let cluster = c.cluster.as_ref().ok_or_else(|| {
            adapter_err(c, "its host is not a cluster (transport = \"kubernetes\")")
        })?;
        let conn = cluster::connect(cluster).map_err(|e| adapter_err(c, e))?;
        let (name, namespace) = manifest::name_and_namespace(k, c);
        Ok(Place {
            conn,
            k,
            name,
            namespace,
        })
    }

    fn kind(&self) -> WorkloadKind {
        self.k.kind.unwrap_or_default()
    }

    fn what(&self) -> String {
        format!(
            "{} {}/{}",
            self.kind().api_kind(),
            self.namespace,
            self.name
        )
    }

    fn source(&self) -> String {
        format!("cluster {} ({})", self.conn.context, self.conn.server)
    }

    /// The stores this component is read from, their watches started.
    fn stores(&self) -> Result<Stores, KubeError> {
        let pods = watch::watched::<Pod>(&self.conn, &self.namespace, cluster::api_timeout())?;
        let workloads = match self.kind() {
            WorkloadKind::Deployment => WorkloadStore::Deployment(watch::watched::<Deployment>(
                &self.conn,
                &self.namespace,
                cluster::api_timeout(),
            )?),
            WorkloadKind::StatefulSet => WorkloadStore::StatefulSet(watch::watched::<StatefulSet>(
                &self.conn,
                &self.namespace,
                cluster::api_timeout(),
            )?),
        };
        Ok(Stores { pods, workloads })
    }
}

enum WorkloadStore {
    Deployment(Arc<watch::Watched<Deployment>>),
    StatefulSet(Arc<watch::Watched<StatefulSet>>),
}

struct Stores {
    pods: Arc<watch::Watched<Pod>>,
    workloads: WorkloadStore,
}

impl Stores {
    fn workload(&self, name: &str) -> Option<WorkloadFacts> {
        match &self.workloads {
            WorkloadStore::Deployment(w) => w.named(name).map(|d| WorkloadFacts::of_deployment(&d)),
            WorkloadStore::StatefulSet(w) => {
                w.named(name).map(|s| WorkloadFacts::of_statefulset(&s))
            }
        }
    }

    /// `component`'s pods (of `project`) as the watch holds them, by their labels.
    fn pod_objects(&self, project: &str, component: &str) -> Vec<Arc<Pod>> {
        fn label<'p>(p: &'p Pod, k: &str) -> Option<&'p str> {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(k))
                .map(String::as_str)
        }
        self.pods
            .objects()
            .into_iter()
            .filter(|p| {
                label(p, crate::manifest::LABEL_PROJECT) == Some(project)
                    && label(p, crate::manifest::LABEL_COMPONENT) == Some(component)
            })
            .collect()
    }

    fn pods(&self, project: &str, component: &str) -> Vec<PodFacts> {
        // The labels first: only this component's pods are read further.
        self.pod_objects(project, component)
            .iter()
            .map(|p| PodFacts::of(p))
            .collect()
    }

    /// Why the watches cannot be trusted now (a LIST or WATCH failing, the API
    /// server gone), when they cannot.
    fn failing(&self) -> Option<String> {
        let w = match &self.workloads {
            WorkloadStore::Deployment(w) => w.error(),
            WorkloadStore::StatefulSet(w) => w.error(),
        };
        self.pods.error().or(w)
    }

    /// The events of both watches, to wait on together.
    fn events(&self) -> Events {
        Events {
            pods: self.pods.changed(),
            workloads: match &self.workloads {
                WorkloadStore::Deployment(w) => w.changed(),
                WorkloadStore::StatefulSet(w) => w.changed(),
            },
        }
    }
}

/// The container's argv as declared (entrypoint, then arguments).
fn argv(c: &Component, k: &KubernetesSpec) -> Vec<String> {
    k.entrypoint
        .iter()
        .flatten()
        .chain(c.command.iter())
        .cloned()
        .collect()
}

/// The declared environment, resolved (what `launch.env` holds of `c.env`).
fn declared_env(launch: &Launch) -> Vec<(String, String)> {
    launch
        .env
        .iter()
        .filter(|(k, _)| launch.component.env.contains_key(k))
        .cloned()
        .collect()
}

/// Refuses when an object of the component's name exists that is not its own: the
/// workload (from the watch) and the Service (one GET).
fn refuse_foreign(
    place: &Place<'_>,
    stores: &Stores,
    project: &str,
    c: &Component,
) -> Result<(), KubeError> {
    if let Some(w) = stores.workload(&place.name) {
        if let Some(why) = w.foreign(project, &c.name) {
            return Err(foreign_err(&w.what(), &why));
        }
    }
    if place.k.ports.is_empty() {
        return Ok(());
    }
    let client = place.conn.client.clone();
    let (ns, name, server) = (
        place.namespace.clone(),
        place.name.clone(),
        place.conn.server.clone(),
    );
    let svc = cluster::call("get of the Service", async move {
        let api: kube::Api<Service> = kube::Api::namespaced(client, &ns);
        api.get_opt(&name)
            .await
            .map_err(|e| KubeError::from_kube("get", &format!("Service {ns}/{name}"), &server, e))
    })?;
    if let Some(svc) = svc {
        let facts = WorkloadFacts {
            kind: "Service".into(),
            namespace: place.namespace.clone(),
            name: place.name.clone(),
            labels: svc.metadata.labels.unwrap_or_default(),
            ..Default::default()
        };
        if let Some(why) = facts.foreign(project, &c.name) {
            return Err(foreign_err(&facts.what(), &why));
        }
    }
    Ok(())
}

fn foreign_err(what: &str, why: &str) -> KubeError {
    KubeError::Api {
        verb: "apply".into(),
        what: what.into(),
        code: 409,
        reason: "Foreign".into(),
        message: format!("it already exists and is not this component's ({why}): not touched"),
        help: "; remove or rename it, or give the component another kubernetes.name".into(),
    }
}

/// The events of a component's two watches (its pods, its workload).
struct Events {
    pods: tokio::sync::watch::Receiver<u64>,
    workloads: tokio::sync::watch::Receiver<u64>,
}

impl Events {
    /// Blocks until either watch has an event it has not seen, `limit` has passed or
    /// `cancel` fires; what was there is then seen.
    fn next(&mut self, limit: Duration, cancel: &tokio_util::sync::CancellationToken) {
        let (mut pods, mut workloads) = (self.pods.clone(), self.workloads.clone());
        let cancel = cancel.clone();
        cluster::block(async move {
            let _ = tokio::time::timeout(limit, async {
                tokio::select! {
                    _ = pods.changed() => (),
                    _ = workloads.changed() => (),
                    _ = cancel.cancelled() => (),
                }
            })
            .await;
        });
        self.pods.borrow_and_update();
        self.workloads.borrow_and_update();
    }
}

/// How long the watches a wait reads have been failing: past the API time limit, the
/// wait gives up with their error instead of waiting out its whole deadline.
#[derive(Default)]
struct Stalled {
    since: Option<Instant>,
}

impl Stalled {
    fn check(&mut self, stores: &Stores, place: &Place<'_>) -> Result<(), KubeError> {
        match stores.failing() {
            None => {
                self.since = None;
                Ok(())
            }
            Some(why) => {
                let since = *self.since.get_or_insert_with(Instant::now);
                if since.elapsed() >= cluster::api_timeout() {
                    Err(KubeError::Unreachable {
                        verb: "watch".into(),
                        what: place.what(),
                        server: place.conn.server.clone(),
                        message: format!("{why} (for {} s)", since.elapsed().as_secs()),
                    })
                } else {
                    Ok(())
                }
            }
        }
    }
}

/// Waits until the component's rollout is complete with pods none of which is in
/// `old` (the pods before a restart), failing at once on failing pods.
#[allow(clippy::too_many_arguments)]
fn await_rollout(
    place: &Place<'_>,
    stores: &Stores,
    project: &str,
    c: &Component,
    old: &[String],
    generation: i64,
    timeout: Duration,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<RuntimeIdentity, KubeError> {
    let argv = argv(c, place.k);
    let deadline = Instant::now() + timeout;
    let mut events = stores.events();
    let mut stalled = Stalled::default();
    loop {
        // Until the watch delivers the workload as applied, what it holds is older.
        let w = stores
            .workload(&place.name)
            .filter(|w| w.generation >= generation);
        let pods = stores.pods(project, &c.name);
        let a = assess::assess(w.as_ref(), &pods, project, &c.name, &argv);
        if let Some(why) = &a.failing {
            return Err(KubeError::PodsFailing {
                what: place.what(),
                why: why.clone(),
            });
        }
        if let Some(id) = &a.identity {
            let uids = assess::pod_uids(id);
            if !uids.iter().any(|u| old.contains(u)) {
                return Ok(id.clone());
            }
        }
        stalled.check(stores, place)?;
        if cancel.is_cancelled() {
            return Err(KubeError::Interrupted {
                what: format!("the rollout of {}", place.what()),
            });
        }
        let left = deadline
            .saturating_duration_since(Instant::now())
            .min(cluster::api_timeout());
        if left.is_zero() {
            return Err(KubeError::Timeout {
                what: format!("the rollout of {}", place.what()),
                waited: timeout,
                state: a.evidence.join("; "),
            });
        }
        events.next(left, cancel);
    }
}

/// Waits until no live pod of the component is left.
fn await_no_pods(
    place: &Place<'_>,
    stores: &Stores,
    project: &str,
    c: &Component,
    generation: i64,
    timeout: Duration,
) -> Result<usize, KubeError> {
    let deadline = Instant::now() + timeout;
    let mut events = stores.events();
    let mut stalled = Stalled::default();
    let mut most = 0;
    loop {
        let live = stores
            .pods(project, &c.name)
            .into_iter()
            .filter(|p| !p.deleting)
            .count();
        most = most.max(live);
        let scaled = stores
            .workload(&place.name)
            .is_some_and(|w| w.generation >= generation && w.desired == 0);
        if live == 0 && scaled {
            return Ok(most);
        }
        stalled.check(stores, place)?;
        let left = deadline
            .saturating_duration_since(Instant::now())
            .min(cluster::api_timeout());
        if left.is_zero() {
            return Err(KubeError::Timeout {
                what: format!("scaling {} to 0", place.what()),
                waited: timeout,
                state: format!("{live} pods still running"),
            });
        }
        events.next(left, &tokio_util::sync::CancellationToken::new());
    }
}

impl Kubernetes {
    /// Scales `c`'s workload to 0 (only the replica count changes: the pod template
    /// the cluster has is applied as it is) and waits until no pod of it is left;
    /// how many pods there were.
    fn scale_to_zero(
        &self,
        place: &Place<'_>,
        stores: &Stores,
        project: &str,
        c: &Component,
    ) -> Result<usize, KubeError> {
        let before = stores
            .pods(project, &c.name)
            .iter()
            .filter(|p| !p.deleting)
            .count();
        let objs = manifest::objects(
            c,
            &Inputs {
                project,
                env: &[],
                replicas: 0,
                restarted_at: None,
            },
        )
        .map_err(|e| KubeError::PodsFailing {
            what: place.what(),
            why: e,
        })?;
        let objs = Objects {
            service: None,
            workload: keep_template(objs.workload, stores, &place.name),
            ..objs
        };
        let generation = crate::apply::server_side_apply(
            &place.conn,
            &objs,
            place.k.force_conflicts,
            &[true, false],
        )?;
        let (_, grace) = flotilla_exec::adapter::stop_settings(c);
        Ok(await_no_pods(
            place,
            stores,
            project,
            c,
            generation,
            grace + self.rollout_timeout,
        )?
        .max(before))
    }

    /// Applies `c`'s objects with `replicas` pods (and a restart annotation when
    /// given) and waits for the rollout; `old`: pods that must be gone.
    fn roll_out(
        &self,
        launch: &Launch,
        restarted_at: Option<&str>,
        old: Option<Vec<String>>,
    ) -> Result<Launched, ExecError> {
        let c = &launch.component;
        let place = Place::of(c)?;
        let stores = place.stores().map_err(|e| adapter_err(c, e))?;
        refuse_foreign(&place, &stores, &launch.project, c).map_err(|e| adapter_err(c, e))?;
        let old = match old {
            Some(o) => o,
            None => stores
                .pods(&launch.project, &c.name)
                .into_iter()
                .map(|p| p.uid)
                .collect(),
        };
        let env = declared_env(launch);
        let objs = manifest::objects(
            c,
            &Inputs {
                project: &launch.project,
                env: &env,
                replicas: place.k.replicas.unwrap_or(1),
                restarted_at,
            },
        )
        .map_err(|e| adapter_err(c, e))?;
        let generation = crate::apply::server_side_apply(
            &place.conn,
            &objs,
            place.k.force_conflicts,
            &[true, false],
        )
        .map_err(|e| adapter_err(c, e))?;
        let identity = match await_rollout(
            &place,
            &stores,
            &launch.project,
            c,
            &old,
            generation,
            self.rollout_timeout,
            &launch.cancel,
        ) {
            Ok(id) => id,
            // A start that did not come up leaves nothing running: scaled back to
            // 0 (its objects stay, as a stop leaves them). A restart's old pods are
            // the workload controller's to keep while the new ones fail.
            Err(e) if restarted_at.is_none() => {
                let back = self.scale_to_zero(&place, &stores, &launch.project, c);
                return Err(adapter_err(
                    c,
                    match back {
                        Ok(_) => format!("{e}; scaled {} back to 0", place.what()),
                        Err(b) => format!("{e}; scaling it back to 0 failed too: {b}"),
                    },
                ));
            }
            Err(e) => {
                return Err(adapter_err(
                    c,
                    format!("{e}; the pods of the previous template keep running while the workload's controller keeps them"),
                ))
            }
        };
        Ok(Launched {
            facts: serde_json::json!({
                "workload": place.what(),
                "service": objs.service.as_ref().map(|_| format!("Service {}/{}", place.namespace, place.name)),
                "context": place.conn.context,
                "server": place.conn.server,
                "pods": assess::pod_uids(&identity),
                "image_digests": identity.exe_sha256,
                "field_manager": FIELD_MANAGER,
            }),
            identity,
            log_start_offset: flotilla_exec::logs::file_len(&launch.log_path),
            child: None,
            start_marked: false,
        })
    }
}

/// Now as RFC 3339 with seconds (what `kubectl rollout restart` writes).
fn now_rfc3339() -> String {
    humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string()
}

impl Adapter for Kubernetes {
    fn kind(&self) -> Option<AdapterKind> {
        Some(AdapterKind::Kubernetes)
    }

    fn start(&self, launch: &Launch) -> Result<Launched, ExecError> {
        self.roll_out(launch, None, None)
    }

    fn restart(
        &self,
        launch: &Launch,
        _recorded: Option<&InstanceRecord>,
    ) -> Result<Launched, ExecError> {
        let at = now_rfc3339();
        self.roll_out(launch, Some(&at), None)
    }

    fn stop(
        &self,
        project: &str,
        c: &Component,
        _recorded: Option<&InstanceRecord>,
    ) -> Result<Stopped, ExecError> {
        let place = Place::of(c)?;
        let stores = place.stores().map_err(|e| adapter_err(c, e))?;
        let Some(w) = stores.workload(&place.name) else {
            return Ok(Stopped::AlreadyGone {
                summary: format!("no {} in the cluster", place.what()),
            });
        };
        if let Some(why) = w.foreign(project, &c.name) {
            return Ok(Stopped::NotOurs {
                why: format!("{} is not this component's ({why})", w.what()),
                facts: serde_json::json!({ "workload": w.what() }),
            });
        }
        let began = Instant::now();
        let gone = self
            .scale_to_zero(&place, &stores, project, c)
            .map_err(|e| adapter_err(c, e))?;
        Ok(Stopped::Stopped {
            summary: format!(
                "scaled {} to 0: {gone} {} gone in {} ms",
                place.what(),
                if gone == 1 { "pod" } else { "pods" },
                began.elapsed().as_millis()
            ),
            facts: serde_json::json!({ "workload": place.what(), "pods": gone, "context": place.conn.context }),
        })
    }

    fn collect_log(
        &self,
        project: &str,
        c: &Component,
        log: &std::path::Path,
    ) -> Option<Result<usize, String>> {
        let copied = Place::of(c).map_err(|e| e.to_string()).and_then(|place| {
            let of = crate::logs::PodsOf {
                conn: &place.conn,
                namespace: &place.namespace,
                component: &c.name,
                container: &place.name,
            };
            let stores = place.stores().map_err(|e| {
                format!(
                    "read the logs of the pods of {}/{}: {e}",
                    place.namespace, c.name
                )
            })?;
            let pods = stores.pod_objects(project, &c.name);
            crate::logs::sync(&of, pods, log).map_err(|e| e.to_string())
        });
        Some(copied)
    }

    fn observe(
        &self,
        project: &str,
        c: &Component,
        recorded: Option<&InstanceRecord>,
    ) -> Result<Option<Seen>, ExecError> {
        let place = Place::of(c)?;
        let source = place.source();
        let stores = place.stores().map_err(|e| adapter_err(c, e))?;
        let w = stores.workload(&place.name);
        if let Some(w) = &w {
            if let Some(why) = w.foreign(project, &c.name) {
                return Ok(Some(Seen::foreign(
                    source,
                    format!(
                        "{} is not this component's ({why}): not adopted, never touched",
                        w.what()
                    ),
                )));
            }
        }
        let pods = stores.pods(project, &c.name);
        let a = assess::assess(w.as_ref(), &pods, project, &c.name, &argv(c, place.k));
        let mut evidence: Vec<(String, String)> = a
            .evidence
            .iter()
            .map(|e| (source.clone(), e.clone()))
            .collect();
        if w.is_none() {
            evidence = vec![(
                source.clone(),
                format!("no {} in the cluster", place.what()),
            )];
        }
        let fresh = a.identity.as_ref().map(|_| {
            // Changed outside Flotilla (another field manager's edit of the template)
            // first: the pods then run what the config does not say at all.
            let drift = w.as_ref().and_then(|w| {
                assess::template_drift(w, &c.config_digest(), &place.k.image, &c.command)
            });
            let ready: Vec<&PodFacts> = pods.iter().filter(|p| p.ready && !p.deleting).collect();
            let (current, stale) = assess::stale(&place.k.image, &ready);
            Freshness {
                current,
                stale: match drift {
                    Some(d) => Some((place.what(), d)),
                    None => stale.map(|s| (format!("pods of {}", place.what()), s)),
                },
            }
        });
        let recorded_main = match (recorded, &a.identity) {
            (Some(r), Some(id)) => r.exe == id.exe.display().to_string(),
            _ => false,
        };
        Ok(Some(Seen {
            lifecycle: a.lifecycle,
            main: a.identity,
            recorded_main,
            owner_restarts: Some(a.restarts),
            evidence,
            fresh,
            foreign: None,
        }))
    }

    fn ended(&self, c: &Component, identity: &RuntimeIdentity) -> Option<String> {
        let place = Place::of(c).ok()?;
        let stores = place.stores().ok()?;
        let uids = assess::pod_uids(identity);
        let pods: Vec<PodFacts> = stores
            .pods
            .objects()
            .iter()
            .map(|p| PodFacts::of(p))
            .filter(|p| uids.contains(&p.uid))
            .collect();
        if let Some(f) = pods.iter().find_map(|p| p.failing.as_ref().map(|f| (p, f))) {
            return Some(format!("pod {}: {}", f.0.name, f.1));
        }
        let gone: Vec<&String> = uids
            .iter()
            .filter(|u| !pods.iter().any(|p| &&p.uid == u && !p.deleting))
            .collect();
        (!gone.is_empty())
            .then(|| format!("{} of the pods of {} are gone", gone.len(), place.what()))
    }

    fn prove_restart(
        &self,
        _c: &Component,
        before: Option<&RuntimeIdentity>,
        after: &RuntimeIdentity,
    ) -> Result<(), String> {
        let after_uids = assess::pod_uids(after);
        if after_uids.is_empty() {
            return Err("no pod runs after the restart".into());
        }
        let Some(before) = before else {
            return Ok(());
        };
        let still: Vec<String> = assess::pod_uids(before)
            .into_iter()
            .filter(|u| after_uids.contains(u))
            .collect();
        if still.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "restart had no effect: pods {} still run",
                still.join(", ")
            ))
        }
    }

    fn preflight(&self, project: &str, c: &Component) -> Option<Vec<(String, bool, String)>> {
        let mut out = Vec::new();
        let place = match Place::of(c) {
            Ok(p) => p,
            Err(e) => {
                out.push(("cluster".into(), false, e.to_string()));
                return Some(out);
            }
        };
        let client = place.conn.client.clone();
        let server = place.conn.server.clone();
        let version = cluster::call("get /version", async move {
            client
                .apiserver_version()
                .await
                .map_err(|e| KubeError::from_kube("get", "/version", &server, e))
        });
        match version {
            Ok(v) => out.push((
                "cluster".into(),
                true,
                format!(
                    "context {} of {}: the API server at {} answers (Kubernetes {}.{}); {UNTESTED}",
                    place.conn.context,
                    place.conn.kubeconfig.display(),
                    place.conn.server,
                    v.major,
                    v.minor
                ),
            )),
            Err(e) => {
                out.push(("cluster".into(), false, e.to_string()));
                return Some(out);
            }
        }
        let stores = match place.stores() {
            Ok(s) => {
                out.push((
                    "watch".into(),
                    true,
                    format!(
                        "pods and {}s of namespace {} can be listed and watched",
                        place.kind().as_str(),
                        place.namespace
                    ),
                ));
                s
            }
            Err(e) => {
                out.push(("watch".into(), false, e.to_string()));
                return Some(out);
            }
        };
        if let Err(e) = refuse_foreign(&place, &stores, project, c) {
            out.push(("objects".into(), false, e.to_string()));
            return Some(out);
        }
        let objs = match manifest::objects(
            c,
            &Inputs {
                project,
                env: &[],
                replicas: place.k.replicas.unwrap_or(1),
                restarted_at: None,
            },
        ) {
            Ok(o) => o,
            Err(e) => {
                out.push(("objects".into(), false, e));
                return Some(out);
            }
        };
        out.push(
            match crate::apply::server_side_apply(
                &place.conn,
                &objs,
                place.k.force_conflicts,
                &[true],
            ) {
                Ok(_) => (
                    "apply (dry run)".into(),
                    true,
                    format!(
                        "{}{} would be applied by field manager {FIELD_MANAGER}",
                        objs.service
                            .as_ref()
                            .map(|_| format!("Service {}/{} and ", place.namespace, place.name))
                            .unwrap_or_default(),
                        place.what()
                    ),
                ),
                Err(e) => ("apply (dry run)".into(), false, e.to_string()),
            },
        );
        Some(out)
    }

    fn owner_checks(
        &self,
        project: &str,
        c: &Component,
    ) -> Option<Arc<dyn flotilla_exec::probe::OwnerChecks>> {
        Some(Arc::new(Checks {
            project: project.to_string(),
            component: c.clone(),
        }))
    }
}

/// The workload to apply for a scale: `fresh` with the pod template the cluster has
/// now (so that a scale does not change what the pods run).
fn keep_template(mut fresh: Workload, stores: &Stores, name: &str) -> Workload {
    let now = match &stores.workloads {
        WorkloadStore::Deployment(w) => w
            .named(name)
            .and_then(|o| o.spec.clone())
            .map(|s| s.template),
        WorkloadStore::StatefulSet(w) => w
            .named(name)
            .and_then(|o| o.spec.clone())
            .map(|s| s.template),
    };
    if let (Some(now), Some(template)) = (now, fresh.template_mut()) {
        *template = now;
    }
    fresh
}

/// The `process` and `container_health` checks of a Kubernetes component, read from
/// its watches: alive while the identity's pods are all there and none fails;
/// healthy while they are all `Ready`.
struct Checks {
    project: String,
    component: Component,
}

impl Checks {
    fn pods(&self, identity: Option<&RuntimeIdentity>) -> Result<(String, Vec<PodFacts>), String> {
        let place = Place::of(&self.component).map_err(|e| e.to_string())?;
        let stores = place.stores().map_err(|e| e.to_string())?;
        let mut pods: Vec<PodFacts> = stores
            .pods(&self.project, &self.component.name)
            .into_iter()
            .filter(|p| !p.deleting)
            .collect();
        if let Some(id) = identity {
            let uids = assess::pod_uids(id);
            pods.retain(|p| uids.contains(&p.uid));
            if pods.len() < uids.len() {
                return Err(format!(
                    "{} of the {} pods of {} are gone",
                    uids.len() - pods.len(),
                    uids.len(),
                    place.what()
                ));
            }
        }
        if pods.is_empty() {
            return Err(format!("no pod of {} runs", place.what()));
        }
        Ok((place.what(), pods))
    }
}

impl flotilla_exec::probe::OwnerChecks for Checks {
    fn alive(&self, identity: Option<&RuntimeIdentity>) -> Result<String, String> {
        let (what, pods) = self.pods(identity)?;
        if let Some(f) = pods.iter().find_map(|p| p.failing.as_ref().map(|f| (p, f))) {
            return Err(format!("pod {}: {}", f.0.name, f.1));
        }
        Ok(format!("{} pods of {what} running", pods.len()))
    }

    fn healthy(&self, identity: Option<&RuntimeIdentity>) -> Result<String, String> {
        let (what, pods) = self.pods(identity)?;
        let unready: Vec<&str> = pods
            .iter()
            .filter(|p| !p.ready)
            .map(|p| p.name.as_str())
            .collect();
        if unready.is_empty() {
            Ok(format!("{} pods of {what} Ready", pods.len()))
        } else {
            Err(format!("pods not Ready: {}", unready.join(", ")))
        }
    }
}
