//! What a component's workload and pods say about it, by pure functions of the
//! objects a watch delivered: its lifecycle with evidence, its runtime identity (the
//! pods' UIDs and the `imageID` digests they report), whether a rollout is complete
//! (`kubectl rollout status`'s rules, kubectl `pkg/polymorphichelpers/rollout_status.go`),
//! and failing pods (`CrashLoopBackOff`, `OOMKilled`, an image not pulled), the
//! kubelet's reasons
//! (<https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#container-states>).

use crate::manifest::{
    ANNOTATION_CONFIG_DIGEST, FIELD_MANAGER, LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_PROJECT,
};
use flotilla_model::status::{Lifecycle, RuntimeIdentity};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The prefix of a Kubernetes workload's [`RuntimeIdentity::exe`]:
/// `kubernetes://<namespace>/<kind>/<name>#<pod uid>,<pod uid>…` (UIDs sorted).
pub const EXE_PREFIX: &str = "kubernetes://";

/// Waiting reasons of a container that mean its pod will not become ready by itself.
const FAILING_REASONS: &[&str] = &[
    "CrashLoopBackOff",
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// The facts of a workload the adapter reads (Deployment and StatefulSet alike).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkloadFacts {
    /// `Deployment` or `StatefulSet`.
    pub kind: String,
    /// Namespace and name.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration`.
    pub observed_generation: i64,
    /// `spec.replicas` (default 1).
    pub desired: i32,
    /// `status.replicas`: pods of any revision.
    pub replicas: i32,
    /// `status.updatedReplicas`: pods of the current template.
    pub updated: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// `status.availableReplicas` (StatefulSet: ready, when the API does not say).
    pub available: i32,
    /// `Progressing=False` with its reason and message (a Deployment's deadline passed).
    pub stalled: Option<String>,
    /// The StatefulSet's `currentRevision` ≠ `updateRevision` (an update under way).
    pub revision_pending: bool,
    /// What the pod template's container of the workload's name (else its first)
    /// runs: its `image` and `args`.
    pub runs: Option<(String, Vec<String>)>,
    /// The field managers other than Flotilla's that own fields of its `spec`
    /// (`metadata.managedFields`), sorted.
    pub spec_managers: Vec<String>,
    /// The config digest Flotilla applied it with ([`ANNOTATION_CONFIG_DIGEST`]).
    pub config_digest: Option<String>,
}

/// The workload's [`ANNOTATION_CONFIG_DIGEST`].
fn applied_digest(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<String> {
    meta.annotations
        .as_ref()?
        .get(ANNOTATION_CONFIG_DIGEST)
        .cloned()
}

/// The image and args of `template`'s container named `name` (else its first).
fn template_runs(
    template: Option<&k8s_openapi::api::core::v1::PodTemplateSpec>,
    name: &str,
) -> Option<(String, Vec<String>)> {
    let containers = &template?.spec.as_ref()?.containers;
    let c = containers
        .iter()
        .find(|c| c.name == name)
        .or(containers.first())?;
    Some((
        c.image.clone().unwrap_or_default(),
        c.args.clone().unwrap_or_default(),
    ))
}

/// The managers other than [`FIELD_MANAGER`] owning fields under `spec`.
fn spec_managers(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Vec<String> {
    let mut out: Vec<String> = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.is_none())
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.get("f:spec").is_some())
        })
        .filter_map(|m| m.manager.clone())
        .filter(|m| m != FIELD_MANAGER)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// What the workload's template runs that the component's config (`image`, `args`,
/// its digest `digest`) does not, though Flotilla applied that very config — another
/// field manager changed it since — said with who may have; `None` when it runs what
/// the config says, or was applied with another config (then the config changed:
/// drift, which the executor tells).
pub fn template_drift(
    w: &WorkloadFacts,
    digest: &str,
    image: &str,
    args: &[String],
) -> Option<String> {
    if w.config_digest.as_deref() != Some(digest) {
        return None;
    }
    let (ran_image, ran_args) = w.runs.as_ref()?;
    let mut what = Vec::new();
    if ran_image != image {
        what.push(format!("image {ran_image}, not {image}"));
    }
    if ran_args != args {
        what.push(format!("args {ran_args:?}, not {args:?}"));
    }
    if what.is_empty() {
        return None;
    }
    let who = if w.spec_managers.is_empty() {
        String::new()
    } else {
        format!(
            " (its spec is also managed by {})",
            w.spec_managers.join(", ")
        )
    };
    Some(format!(
        "{}'s pod template runs {}{who}: changed outside Flotilla; `restart` applies the inventory's (a conflict with another field manager is reported, never forced unless kubernetes.force_conflicts)",
        w.what(),
        what.join("; ")
    ))
}

impl WorkloadFacts {
    /// The facts of a Deployment.
    pub fn of_deployment(d: &Deployment) -> WorkloadFacts {
        let s = d.status.clone().unwrap_or_default();
        let stalled = s.conditions.unwrap_or_default().into_iter().find_map(|c| {
            (c.type_ == "Progressing" && c.status == "False").then(|| {
                format!(
                    "{}: {}",
                    c.reason.unwrap_or_default(),
                    c.message.unwrap_or_default()
                )
            })
        });
        WorkloadFacts {
            kind: "Deployment".into(),
            namespace: d.metadata.namespace.clone().unwrap_or_default(),
            name: d.metadata.name.clone().unwrap_or_default(),
            labels: d.metadata.labels.clone().unwrap_or_default(),
            generation: d.metadata.generation.unwrap_or(0),
            observed_generation: s.observed_generation.unwrap_or(0),
            desired: d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            replicas: s.replicas.unwrap_or(0),
            updated: s.updated_replicas.unwrap_or(0),
            ready: s.ready_replicas.unwrap_or(0),
            available: s.available_replicas.unwrap_or(0),
            stalled,
            revision_pending: false,
            runs: template_runs(
                d.spec.as_ref().map(|s| &s.template),
                d.metadata.name.as_deref().unwrap_or_default(),
            ),
            spec_managers: spec_managers(&d.metadata),
            config_digest: applied_digest(&d.metadata),
        }
    }

    /// The facts of a StatefulSet.
    pub fn of_statefulset(st: &StatefulSet) -> WorkloadFacts {
        let s = st.status.clone().unwrap_or_default();
        WorkloadFacts {
            kind: "StatefulSet".into(),
            namespace: st.metadata.namespace.clone().unwrap_or_default(),
            name: st.metadata.name.clone().unwrap_or_default(),
            labels: st.metadata.labels.clone().unwrap_or_default(),
            generation: st.metadata.generation.unwrap_or(0),
            observed_generation: s.observed_generation.unwrap_or(0),
            desired: st.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            replicas: s.replicas,
            updated: s.updated_replicas.unwrap_or(0),
            ready: s.ready_replicas.unwrap_or(0),
            available: s
                .available_replicas
                .unwrap_or(s.ready_replicas.unwrap_or(0)),
            stalled: None,
            revision_pending: s
                .update_revision
                .as_ref()
                .is_some_and(|u| s.current_revision.as_ref() != Some(u)),
            runs: template_runs(
                st.spec.as_ref().map(|s| &s.template),
                st.metadata.name.as_deref().unwrap_or_default(),
            ),
            spec_managers: spec_managers(&st.metadata),
            config_digest: applied_digest(&st.metadata),
        }
    }

    /// `<Kind> <namespace>/<name>`.
    pub fn what(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }

    /// Why the workload is not `component`'s of `project`: `None` when it is.
    pub fn foreign(&self, project: &str, component: &str) -> Option<String> {
        let l = &self.labels;
        if l.get(LABEL_MANAGED_BY).map(String::as_str) != Some("flotilla") {
            return Some(format!(
                "it is not managed by Flotilla (no {LABEL_MANAGED_BY}=flotilla)"
            ));
        }
        match (l.get(LABEL_PROJECT), l.get(LABEL_COMPONENT)) {
            (Some(p), _) if p != project => Some(format!("it belongs to project `{p}`")),
            (_, Some(c)) if c != component => Some(format!("its label says component `{c}`")),
            (None, _) | (_, None) => Some("it has no project or component label".into()),
            _ => None,
        }
    }

    /// Whether the rollout of its current generation is complete: observed, every
    /// wanted pod of the current template, no old ones left, all available.
    pub fn rolled_out(&self) -> bool {
        self.observed_generation >= self.generation
            && self.updated >= self.desired
            && self.replicas == self.desired
            && self.available >= self.desired
            && self.ready >= self.desired
            && !self.revision_pending
    }

    /// One line of what its controller reports.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} of {} pods ready, {} updated, {} in all (generation {}, observed {})",
            self.what(),
            self.ready,
            self.desired,
            self.updated,
            self.replicas,
            self.generation,
            self.observed_generation
        )
    }
}

/// The facts of one pod the adapter reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodFacts {
    /// Its name.
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// `status.phase`.
    pub phase: String,
    /// Its `Ready` condition is `True`.
    pub ready: bool,
    /// Being deleted (`metadata.deletionTimestamp` set).
    pub deleting: bool,
    /// `status.startTime` in milliseconds since the epoch (0 when not started).
    pub started_ms: u64,
    /// The `sha256:…` digests its containers run (from `imageID`).
    pub digests: Vec<String>,
    /// Restarts of its containers, summed.
    pub restarts: u64,
    /// A container's failing state: `<reason>` (and the kubelet's message), with the
    /// last termination's reason and exit code when known.
    pub failing: Option<String>,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
}

impl PodFacts {
    /// The facts of `p`.
    pub fn of(p: &Pod) -> PodFacts {
        let s = p.status.clone().unwrap_or_default();
        let statuses = s.container_statuses.clone().unwrap_or_default();
        let ready = s
            .conditions
            .clone()
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let failing = statuses.iter().find_map(|cs| {
            let waiting = cs.state.as_ref().and_then(|st| st.waiting.as_ref());
            let last = cs
                .last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .map(|t| {
                    format!(
                        "last exit: {} (code {})",
                        t.reason.clone().unwrap_or_else(|| "exited".into()),
                        t.exit_code
                    )
                });
            match waiting {
                Some(w) if FAILING_REASONS.contains(&w.reason.as_deref().unwrap_or_default()) => {
                    let mut why = format!(
                        "container {} is {}",
                        cs.name,
                        w.reason.clone().unwrap_or_default()
                    );
                    if cs.restart_count > 0 {
                        why.push_str(&match cs.restart_count {
                            1 => " (restarted once".to_string(),
                            n => format!(" (restarted {n} times"),
                        });
                        if let Some(l) = &last {
                            why.push_str(&format!("; {l}"));
                        }
                        why.push(')');
                    }
                    if let Some(m) = w.message.as_deref().filter(|m| !m.is_empty()) {
                        why.push_str(&format!(": {m}"));
                    }
                    Some(why)
                }
                _ => None,
            }
        });
        PodFacts {
            name: p.metadata.name.clone().unwrap_or_default(),
            uid: p.metadata.uid.clone().unwrap_or_default(),
            phase: s.phase.clone().unwrap_or_default(),
            ready,
            deleting: p.metadata.deletion_timestamp.is_some(),
            started_ms: s
                .start_time
                .as_ref()
                .map(|t| u64::try_from(t.0.as_millisecond()).unwrap_or(0))
                .unwrap_or(0),
            digests: statuses
                .iter()
                .filter_map(|cs| digest_of_image_id(&cs.image_id))
                .collect(),
            restarts: statuses
                .iter()
                .map(|cs| u64::try_from(cs.restart_count).unwrap_or(0))
                .sum(),
            failing,
            labels: p.metadata.labels.clone().unwrap_or_default(),
        }
    }

    /// Whether it is `component`'s of `project`.
    pub fn belongs_to(&self, project: &str, component: &str) -> bool {
        self.labels.get(LABEL_PROJECT).map(String::as_str) == Some(project)
            && self.labels.get(LABEL_COMPONENT).map(String::as_str) == Some(component)
    }
}

/// The `sha256:<hex>` digest in a container status' `imageID`
/// (`docker.io/library/x@sha256:…`, `docker-pullable://x@sha256:…`, or `sha256:…`).
pub fn digest_of_image_id(image_id: &str) -> Option<String> {
    let at = image_id.rfind("sha256:")?;
    let hex = &image_id[at + 7..];
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| format!("sha256:{hex}"))
}

/// The identity of a workload's live pods (see [`EXE_PREFIX`]); `argv` is the
/// container's command and arguments as declared.
pub fn identity(w: &WorkloadFacts, pods: &[&PodFacts], argv: &[String]) -> RuntimeIdentity {
    let mut uids: Vec<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
    uids.sort_unstable();
    let mut digests: Vec<&str> = pods
        .iter()
        .flat_map(|p| p.digests.iter().map(String::as_str))
        .collect();
    digests.sort_unstable();
    digests.dedup();
    RuntimeIdentity {
        pid: 0,
        pgid: 0,
        start_time_ticks: pods.iter().map(|p| p.started_ms).max().unwrap_or(0),
        exe: PathBuf::from(format!(
            "{EXE_PREFIX}{}/{}/{}#{}",
            w.namespace,
            w.kind.to_ascii_lowercase(),
            w.name,
            uids.join(",")
        )),
        exe_sha256: digests.join(","),
        argv_digest: flotilla_exec::identity::argv_digest(argv),
    }
}

/// The pod UIDs a workload identity names (empty for another kind of identity).
pub fn pod_uids(identity: &RuntimeIdentity) -> Vec<String> {
    identity
        .exe
        .to_str()
        .and_then(|s| s.strip_prefix(EXE_PREFIX))
        .and_then(|s| s.split_once('#'))
        .map(|(_, uids)| {
            uids.split(',')
                .filter(|u| !u.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// What a component is, from its workload (when there is one of its name) and the
/// pods of its selector.
#[derive(Debug, Clone, PartialEq)]
pub struct Assessment {
    /// Its lifecycle.
    pub lifecycle: Lifecycle,
    /// What was seen, one line each.
    pub evidence: Vec<String>,
    /// The pods that count (live, of this component), when it runs.
    pub identity: Option<RuntimeIdentity>,
    /// Why its pods fail, when they do.
    pub failing: Option<String>,
    /// Restarts the kubelet made of its containers.
    pub restarts: u64,
}

/// Assesses `w` (`None`: no workload of that name) and the pods selected for
/// `component` of `project`; `argv` as for [`identity`].
pub fn assess(
    w: Option<&WorkloadFacts>,
    pods: &[PodFacts],
    project: &str,
    component: &str,
    argv: &[String],
) -> Assessment {
    let live: Vec<&PodFacts> = pods
        .iter()
        .filter(|p| p.belongs_to(project, component) && !p.deleting)
        .collect();
    let restarts = live.iter().map(|p| p.restarts).sum();
    let Some(w) = w else {
        return Assessment {
            lifecycle: if live.is_empty() {
                Lifecycle::Stopped
            } else {
                Lifecycle::Stopping
            },
            evidence: vec![format!(
                "no workload of this component; {} of its pods left",
                live.len()
            )],
            identity: None,
            failing: None,
            restarts,
        };
    };
    let failing: Vec<String> = live
        .iter()
        .filter_map(|p| p.failing.as_ref().map(|f| format!("pod {}: {f}", p.name)))
        .collect();
    let mut evidence = vec![w.summary()];
    if let Some(s) = &w.stalled {
        evidence.push(format!("rollout stalled: {s}"));
    }
    evidence.extend(failing.iter().cloned());
    let ready: Vec<&PodFacts> = live.iter().copied().filter(|p| p.ready).collect();
    let lifecycle = if !failing.is_empty() || w.stalled.is_some() {
        Lifecycle::Failed
    } else if w.desired == 0 {
        if live.is_empty() {
            Lifecycle::Stopped
        } else {
            Lifecycle::Stopping
        }
    } else if w.rolled_out() && ready.len() >= w.desired as usize {
        Lifecycle::Running
    } else {
        Lifecycle::Starting
    };
    let identity = (lifecycle == Lifecycle::Running).then(|| identity(w, &ready, argv));
    Assessment {
        lifecycle,
        evidence,
        identity,
        failing: (!failing.is_empty())
            .then(|| failing.join("; "))
            .or_else(|| w.stalled.clone()),
        restarts,
    }
}

/// Whether what runs is still what the image reference names: for a reference by
/// digest, every pod runs that digest; for a tag, every pod runs the digest the
/// newest pod pulled (a tag that moved shows once any pod pulled it: the cluster
/// resolves tags, Flotilla does not ask the registry). `Some((current, why))` when
/// stale.
pub fn stale(image: &str, ready: &[&PodFacts]) -> (Option<String>, Option<String>) {
    let pinned = image
        .rfind("@sha256:")
        .map(|at| image[at + 1..].to_string());
    let current = pinned.clone().or_else(|| {
        ready
            .iter()
            .max_by_key(|p| p.started_ms)
            .and_then(|p| p.digests.first().cloned())
    });
    let Some(cur) = &current else {
        return (None, None);
    };
    let behind: Vec<String> = ready
        .iter()
        .filter(|p| p.digests.iter().any(|d| d != cur))
        .map(|p| {
            format!(
                "{} runs {}",
                p.name,
                short(p.digests.first().map_or("", String::as_str))
            )
        })
        .collect();
    if behind.is_empty() {
        return (current.clone(), None);
    }
    let whose = if pinned.is_some() {
        format!("image {image} names {}", short(cur))
    } else {
        format!(
            "image {image} now gives {} (the newest pod pulled it)",
            short(cur)
        )
    };
    (
        current.clone(),
        Some(format!(
            "{whose}, but {}: `restart` runs the new one",
            behind.join(", ")
        )),
    )
}

/// A digest shortened to its first 12 hex digits.
pub fn short(d: &str) -> &str {
    let hex = d.strip_prefix("sha256:").unwrap_or(d);
    hex.get(..12).unwrap_or(hex)
}

#[cfg(test)]
mod tests;
