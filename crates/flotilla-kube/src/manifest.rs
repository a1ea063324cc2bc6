//! The objects a Kubernetes component is made of, built by pure functions from the
//! component: its workload (an `apps/v1` Deployment or StatefulSet of one container)
//! and, when it declares ports, a `v1` Service selecting its pods. What Flotilla sends
//! is exactly these objects, applied with server-side apply under the field manager
//! [`FIELD_MANAGER`]; `scripts/test` validates them against the API's schemas
//! (`kubernetes-validate --strict`).
//!
//! Labels (the API's recommended labels,
//! <https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/>,
//! and Flotilla's own): `app.kubernetes.io/name` = the object name,
//! `app.kubernetes.io/managed-by` = `flotilla`, [`LABEL_PROJECT`] and
//! [`LABEL_COMPONENT`]. The pods are selected by the last two (a selector is
//! immutable once created). The workload carries the component's config digest in
//! the annotation [`ANNOTATION_CONFIG_DIGEST`].

use flotilla_model::inventory::{KubernetesSpec, WorkloadKind};
use flotilla_model::topology::Component;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec,
    ResourceRequirements, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;

/// The field manager of every apply Flotilla makes (server-side apply; what
/// `metadata.managedFields` names).
pub const FIELD_MANAGER: &str = "flotilla";
/// The label naming the project a Flotilla object belongs to.
pub const LABEL_PROJECT: &str = "io.flotilla.project";
/// The label naming the component a Flotilla object is part of.
pub const LABEL_COMPONENT: &str = "io.flotilla.component";
/// The recommended label naming the tool that manages an object.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The workload's annotation holding the component's config digest (`sha256:…`).
pub const ANNOTATION_CONFIG_DIGEST: &str = "io.flotilla.config-digest";
/// The pod template's annotation a rollout restart sets (as `kubectl rollout
/// restart` does), to an RFC 3339 time: a new value replaces every pod.
pub const ANNOTATION_RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";
/// The NVIDIA device plugin's extended resource.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// A component's workload: which kind, and the object.
#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    /// `apps/v1` Deployment.
    Deployment(Deployment),
    /// `apps/v1` StatefulSet.
    StatefulSet(StatefulSet),
}

impl Workload {
    /// The object as JSON (what an apply sends).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Workload::Deployment(d) => serde_json::to_value(d),
            Workload::StatefulSet(s) => serde_json::to_value(s),
        }
        .expect("a workload serialises")
    }

    /// Its pod template.
    pub fn template_mut(&mut self) -> Option<&mut PodTemplateSpec> {
        match self {
            Workload::Deployment(d) => d.spec.as_mut().map(|s| &mut s.template),
            Workload::StatefulSet(s) => s.spec.as_mut().map(|s| &mut s.template),
        }
    }

    /// Its metadata.
    pub fn meta(&self) -> &ObjectMeta {
        match self {
            Workload::Deployment(d) => &d.metadata,
            Workload::StatefulSet(s) => &s.metadata,
        }
    }
}

/// Every object of one component, in the order they are applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Objects {
    /// The namespace they live in.
    pub namespace: String,
    /// The workload.
    pub workload: Workload,
    /// The Service, when the component declares ports.
    pub service: Option<Service>,
}

/// The labels every object of `component` of `project` carries.
pub fn labels(project: &str, component: &str, name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), name.to_string()),
        (LABEL_MANAGED_BY.to_string(), "flotilla".to_string()),
        (LABEL_PROJECT.to_string(), project.to_string()),
        (LABEL_COMPONENT.to_string(), component.to_string()),
    ])
}

/// The labels that select `component`'s pods (immutable once the workload exists).
pub fn selector(project: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_PROJECT.to_string(), project.to_string()),
        (LABEL_COMPONENT.to_string(), component.to_string()),
    ])
}

/// `c`'s `kubernetes` table (defaults filled by validation).
///
/// # Errors
/// When `c` has none (not a Kubernetes component).
pub fn spec(c: &Component) -> Result<&KubernetesSpec, String> {
    c.kubernetes
        .as_ref()
        .ok_or_else(|| format!("component `{}` has no kubernetes table", c.name))
}

/// The object name and namespace of `c` (defaults filled by validation).
pub fn name_and_namespace(k: &KubernetesSpec, c: &Component) -> (String, String) {
    (
        k.name.clone().unwrap_or_else(|| c.name.clone()),
        k.namespace.clone().unwrap_or_else(|| "default".into()),
    )
}

/// What a component's objects are made from besides the component itself.
#[derive(Debug, Clone, Default)]
pub struct Inputs<'a> {
    /// The project.
    pub project: &'a str,
    /// The container's environment, resolved (declared variables only).
    pub env: &'a [(String, String)],
    /// Pods wanted (the declared `replicas` to run, 0 to stop).
    pub replicas: u32,
    /// The pod template's [`ANNOTATION_RESTARTED_AT`], when a restart asks for new pods.
    pub restarted_at: Option<&'a str>,
}

/// `c`'s objects (see the module docs).
///
/// # Errors
/// When `c` is not a Kubernetes component.
pub fn objects(c: &Component, inputs: &Inputs<'_>) -> Result<Objects, String> {
    let k = spec(c)?;
    let (name, namespace) = name_and_namespace(k, c);
    let labels = labels(inputs.project, &c.name, &name);
    let selector = LabelSelector {
        match_labels: Some(selector(inputs.project, &c.name)),
        ..Default::default()
    };
    let mut annotations =
        BTreeMap::from([(ANNOTATION_CONFIG_DIGEST.to_string(), c.config_digest())]);
    if let Some(d) = &c.description {
        annotations.insert("io.flotilla.description".into(), d.clone());
    }
    let meta = ObjectMeta {
        name: Some(name.clone()),
        namespace: Some(namespace.clone()),
        labels: Some(labels.clone()),
        annotations: Some(annotations),
        ..Default::default()
    };
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels.clone()),
            annotations: inputs
                .restarted_at
                .map(|t| BTreeMap::from([(ANNOTATION_RESTARTED_AT.to_string(), t.to_string())])),
            ..Default::default()
        }),
        spec: Some(pod_spec(c, k, &name, inputs.env)),
    };
    let replicas = Some(i32::try_from(inputs.replicas).unwrap_or(i32::MAX));
    let workload = match k.kind.unwrap_or_default() {
        WorkloadKind::Deployment => Workload::Deployment(Deployment {
            metadata: meta.clone(),
            spec: Some(DeploymentSpec {
                replicas,
                selector,
                template,
                ..Default::default()
            }),
            status: None,
        }),
        WorkloadKind::StatefulSet => Workload::StatefulSet(StatefulSet {
            metadata: meta.clone(),
            spec: Some(StatefulSetSpec {
                replicas,
                selector,
                service_name: Some(name.clone()),
                template,
                ..Default::default()
            }),
            status: None,
        }),
    };
    let service = (!k.ports.is_empty()).then(|| Service {
        metadata: ObjectMeta {
            annotations: None,
            ..meta
        },
        spec: Some(ServiceSpec {
            type_: k.service_type.map(|t| t.as_str().to_string()),
            selector: Some(self::selector(inputs.project, &c.name)),
            ports: Some(
                k.ports
                    .iter()
                    .map(|p| ServicePort {
                        name: p.name.clone(),
                        port: i32::from(p.service_port.unwrap_or(p.container_port).0),
                        target_port: Some(IntOrString::Int(i32::from(p.container_port.0))),
                        node_port: p.node_port.map(|n| i32::from(n.0)),
                        protocol: Some(protocol(p.protocol)),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        status: None,
    });
    Ok(Objects {
        namespace,
        workload,
        service,
    })
}

fn protocol(p: Option<flotilla_model::inventory::PortProtocol>) -> String {
    p.unwrap_or_default().as_str().to_ascii_uppercase()
}

fn pod_spec(c: &Component, k: &KubernetesSpec, name: &str, env: &[(String, String)]) -> PodSpec {
    let mut requests: BTreeMap<String, Quantity> = k
        .requests
        .iter()
        .map(|(r, q)| (r.clone(), Quantity(q.clone())))
        .collect();
    let mut limits: BTreeMap<String, Quantity> = k
        .limits
        .iter()
        .map(|(r, q)| (r.clone(), Quantity(q.clone())))
        .collect();
    if let Some(n) = k.gpus {
        requests.insert(GPU_RESOURCE.into(), Quantity(n.to_string()));
        limits.insert(GPU_RESOURCE.into(), Quantity(n.to_string()));
    }
    let resources = (!requests.is_empty() || !limits.is_empty()).then(|| ResourceRequirements {
        requests: (!requests.is_empty()).then_some(requests),
        limits: (!limits.is_empty()).then_some(limits),
        ..Default::default()
    });
    let container = Container {
        name: name.to_string(),
        image: Some(k.image.clone()),
        image_pull_policy: k.image_pull_policy.map(|p| p.as_str().to_string()),
        command: k.entrypoint.clone(),
        args: (!c.command.is_empty()).then(|| c.command.clone()),
        env: (!env.is_empty()).then(|| {
            env.iter()
                .map(|(n, v)| EnvVar {
                    name: n.clone(),
                    value: Some(v.clone()),
                    value_from: None,
                })
                .collect()
        }),
        ports: (!k.ports.is_empty()).then(|| {
            k.ports
                .iter()
                .map(|p| ContainerPort {
                    name: p.name.clone(),
                    container_port: i32::from(p.container_port.0),
                    protocol: Some(protocol(p.protocol)),
                    ..Default::default()
                })
                .collect()
        }),
        resources,
        volume_mounts: (!k.volumes.is_empty()).then(|| {
            k.volumes
                .iter()
                .map(|v| VolumeMount {
                    name: v.claim.clone(),
                    mount_path: v.mount_path.clone(),
                    read_only: v.read_only.then_some(true),
                    ..Default::default()
                })
                .collect()
        }),
        ..Default::default()
    };
    PodSpec {
        containers: vec![container],
        node_selector: (!k.node_selector.is_empty()).then(|| k.node_selector.clone()),
        termination_grace_period_seconds: c
            .stop
            .as_ref()
            .map(|s| i64::try_from(s.grace_period.0.as_secs().max(1)).unwrap_or(i64::MAX)),
        volumes: (!k.volumes.is_empty()).then(|| {
            k.volumes
                .iter()
                .map(|v| Volume {
                    name: v.claim.clone(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: v.claim.clone(),
                        read_only: v.read_only.then_some(true),
                    }),
                    ..Default::default()
                })
                .collect()
        }),
        ..Default::default()
    }
}
