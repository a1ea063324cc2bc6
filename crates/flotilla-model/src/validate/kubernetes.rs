//! Kubernetes components: the `kubernetes` table's rules (image reference, object and
//! port names, Service type, volumes, quantities' keys), the host they must run on
//! (a cluster, transport `kubernetes`, and only they run there), secrets kept out of
//! a pod's environment, and the defaults the topology carries.

use super::{Located, Validator};
use crate::diag::{Code, Diagnostic, Location};
use crate::image_ref::ImageRef;
use crate::inventory::{
    AdapterKind, ComponentSpec, KubernetesSpec, Owner, PortProtocol, ServiceType, TransportKind,
    WorkloadKind,
};
use crate::kube_names::{dns1035_label, dns_label, is_quantity, label_key, label_value};
use crate::node::Node;
use crate::topology::Host;
use crate::values::EnvValue;
use std::collections::BTreeMap;

/// Keys of a component that mean nothing on a cluster, and why.
const NOT_FOR_PODS: &[(&str, &str)] = &[
    (
        "cwd",
        "a pod's container starts in its image's working directory",
    ),
    (
        "inherit_env",
        "a pod gets only `env`; take a value from the environment flotilla runs in with \"${env.NAME}\"",
    ),
    ("env_file", "a pod gets only `env`"),
    (
        "identity_files",
        "a pod's runtime identity is the digest of the image it runs",
    ),
    (
        "release",
        "a pod runs an image: name its version in `kubernetes.image`",
    ),
    (
        "restart",
        "the cluster restarts a pod's containers itself (the pod's restartPolicy)",
    ),
];

impl Validator {
    /// Checks a component against its host's transport (a `kubernetes` component runs
    /// on a cluster; a cluster runs only `kubernetes` and `external` components) and
    /// the `kubernetes` table (required for adapter `kubernetes`, refused for any
    /// other; the table's own rules).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn kubernetes_rules(
        &mut self,
        name: &str,
        node: &Node,
        key_loc: Location,
        spec: &ComponentSpec,
        owner: Owner,
        adapter: AdapterKind,
        host: Option<&Host>,
        env: &BTreeMap<String, Located<EnvValue>>,
        broken: &[Vec<String>],
    ) {
        let file = self.file;
        let at = |path: &[&str]| Location {
            file,
            span: node.span_at(path),
        };
        let on_cluster = host.is_some_and(|h| h.transport == TransportKind::Kubernetes);
        let kube = owner == Owner::Managed && adapter == AdapterKind::Kubernetes;
        if kube && host.is_some() && !on_cluster {
            let h = host.map(|h| h.name.as_str()).unwrap_or_default();
            self.push(
                Diagnostic::error(
                    Code::InvalidValue,
                    format!("component `{name}` has adapter `kubernetes` but its host `{h}` is not a cluster"),
                    if node.get("host").is_some() { at(&["host"]) } else { key_loc },
                )
                .with_help("put it on a host with transport = \"kubernetes\" (and that host's kubeconfig context)"),
            );
        }
        if on_cluster && owner == Owner::Managed && adapter != AdapterKind::Kubernetes {
            let h = host.map(|h| h.name.as_str()).unwrap_or_default();
            self.push(
                Diagnostic::error(
                    Code::InvalidValue,
                    format!(
                        "component `{name}` runs on cluster `{h}` with adapter `{}`",
                        adapter.as_str()
                    ),
                    if node.get("adapter").is_some() { at(&["adapter"]) } else { key_loc },
                )
                .with_help("a cluster's components have adapter = \"kubernetes\" and a `kubernetes` table (or owner = \"external\" when something else runs them)"),
            );
        }
        if !kube {
            return;
        }
        for (key, why) in NOT_FOR_PODS {
            if node.get(key).is_some() {
                self.push(
                    Diagnostic::error(
                        Code::InvalidValue,
                        format!("kubernetes component `{name}` declares `{key}`"),
                        self.loc(node.key_span_at(&[key])),
                    )
                    .with_help(format!("remove it: {why}")),
                );
            }
        }
        for (k, v) in env {
            if let EnvValue::Secret(secret) = &v.value {
                self.push(
                    Diagnostic::error(
                        Code::InvalidValue,
                        format!("kubernetes component `{name}`: env `{k}` takes secret `{secret}`, which a pod cannot receive from this machine"),
                        v.loc,
                    )
                    .with_help("keep the value in a Kubernetes Secret of the cluster; Flotilla does not copy secrets into a cluster"),
                );
            }
        }
        let Some(k) = &spec.kubernetes else {
            return;
        };
        // A list with an element set aside (its error reported) no longer lines up
        // with the source: its own checks would point at the wrong elements.
        let intact = |list: &str| {
            !broken
                .iter()
                .any(|p| p.len() > 2 && p[0] == "kubernetes" && p[1] == list)
        };
        if let Err(why) = ImageRef::parse(&k.image) {
            self.push(
                Diagnostic::error(
                    Code::InvalidValue,
                    format!(
                        "kubernetes component `{name}`: image `{}` is not an image reference: {why}",
                        k.image
                    ),
                    at(&["kubernetes", "image"]),
                )
                .with_help("an image reference is name[:tag][@sha256:<64 hex>], e.g. \"ghcr.io/ggml-org/llama.cpp:server\""),
            );
        }
        let object = k.name.clone().unwrap_or_else(|| name.to_string());
        // With ports the name is its Service's too: a DNS-1035 label.
        let checked = if k.ports.is_empty() {
            dns_label(&object)
        } else {
            dns1035_label(&object)
        };
        if let Err(why) = checked {
            let (path, help): (&[&str], _) = if k.name.is_some() {
                (&["kubernetes", "name"], "an object name is a DNS-1123 label: lowercase letters, digits and `-`, at most 63; with ports (a Service) it starts with a letter")
            } else {
                (&["kubernetes"], "set kubernetes.name to a DNS-1123 label (lowercase letters, digits and `-`, at most 63; with ports, starting with a letter), e.g. the component's name with `_` written as `-`")
            };
            self.push(
                Diagnostic::error(
                    Code::InvalidValue,
                    format!("kubernetes component `{name}`: object name `{object}` {why}"),
                    at(path),
                )
                .with_help(help),
            );
        }
        if let Some(ns) = &k.namespace {
            if let Err(why) = dns_label(ns) {
                self.push(Diagnostic::error(
                    Code::InvalidValue,
                    format!("kubernetes component `{name}`: namespace `{ns}` {why}"),
                    at(&["kubernetes", "namespace"]),
                ));
            }
        }
        if k.kind == Some(WorkloadKind::StatefulSet) && k.ports.is_empty() {
            self.push(
                Diagnostic::error(
                    Code::InvalidValue,
                    format!("kubernetes component `{name}` is a StatefulSet without ports"),
                    at(&["kubernetes", "kind"]),
                )
                .with_help("a StatefulSet names the Service that gives its pods their names: declare the container's ports (kubernetes.ports)"),
            );
        }
        if k.replicas == Some(0) {
            self.push(
                Diagnostic::error(
                    Code::InvalidValue,
                    format!("kubernetes component `{name}`: replicas = 0"),
                    at(&["kubernetes", "replicas"]),
                )
                .with_help(
                    "a component that runs has at least one pod; `flotilla stop` scales it to 0",
                ),
            );
        }
        if let Some(h) = host {
            let ns = k
                .namespace
                .clone()
                .or_else(|| h.cluster.as_ref().map(|c| c.namespace.clone()))
                .unwrap_or_else(|| "default".into());
            let key = (h.name.clone(), ns.clone(), object.clone());
            match self.kube_objects.get(&key) {
                Some(first) => self.push(
                    Diagnostic::error(
                        Code::InvalidValue,
                        format!("kubernetes component `{name}` names the objects {ns}/{object} on `{}`, which component `{first}` owns", h.name),
                        if k.name.is_some() { at(&["kubernetes", "name"]) } else { key_loc },
                    )
                    .with_help("give one of them another kubernetes.name or namespace"),
                ),
                None => {
                    self.kube_objects.insert(key, name.to_string());
                }
            }
        }
        let ports = if intact("ports") { &k.ports[..] } else { &[] };
        for (i, p) in ports.iter().enumerate() {
            let idx = i.to_string();
            if let Some(n) = &p.name {
                let ok = n.len() <= 15
                    && dns_label(n).is_ok()
                    && n.bytes().any(|b| b.is_ascii_lowercase())
                    && !n.contains("--");
                if !ok {
                    self.push(
                        Diagnostic::error(
                            Code::InvalidValue,
                            format!("kubernetes component `{name}`: port name `{n}` is not an IANA service name"),
                            at(&["kubernetes", "ports", &idx, "name"]),
                        )
                        .with_help("a port name is at most 15 lowercase letters, digits and single `-`, with at least one letter, e.g. \"http\""),
                    );
                }
            }
            if p.node_port.is_some() && k.service_type.unwrap_or_default() == ServiceType::ClusterIP
            {
                self.push(
                    Diagnostic::error(
                        Code::InvalidValue,
                        format!("kubernetes component `{name}`: a node_port needs service_type NodePort or LoadBalancer"),
                        at(&["kubernetes", "ports", &idx, "node_port"]),
                    )
                    .with_help("set kubernetes.service_type = \"NodePort\", or remove node_port"),
                );
            }
            let proto = p.protocol.unwrap_or_default();
            let port = p.service_port.unwrap_or(p.container_port);
            let dup = k.ports[..i].iter().any(|q| {
                q.service_port.unwrap_or(q.container_port) == port
                    && q.protocol.unwrap_or_default() == proto
            });
            if dup {
                self.push(Diagnostic::error(
                    Code::PortConflict,
                    format!(
                        "kubernetes component `{name}` exposes {}/{} twice",
                        port.0,
                        proto.as_str()
                    ),
                    at(&["kubernetes", "ports", &idx]),
                ));
            }
        }
        let volumes = if intact("volumes") {
            &k.volumes[..]
        } else {
            &[]
        };
        for (i, v) in volumes.iter().enumerate() {
            let idx = i.to_string();
            if !v.mount_path.starts_with('/') {
                self.push(Diagnostic::error(
                    Code::InvalidValue,
                    format!(
                        "kubernetes component `{name}`: mount_path `{}` must be an absolute path inside the container",
                        v.mount_path
                    ),
                    at(&["kubernetes", "volumes", &idx, "mount_path"]),
                ));
            }
            if let Err(why) = dns_label(&v.claim) {
                self.push(Diagnostic::error(
                    Code::InvalidValue,
                    format!("kubernetes component `{name}`: claim `{}` {why}", v.claim),
                    at(&["kubernetes", "volumes", &idx, "claim"]),
                ));
            }
        }
        for (table, map) in [("requests", &k.requests), ("limits", &k.limits)] {
            for (res, q) in map {
                if !is_quantity(q) {
                    self.push(
                        Diagnostic::error(
                            Code::InvalidValue,
                            format!("kubernetes component `{name}`: {table}.{res} `{q}` is not a Kubernetes quantity"),
                            at(&["kubernetes", table, res]),
                        )
                        .with_help("a quantity is a number with an optional suffix: \"500m\", \"2\", \"8Gi\", \"1e3\""),
                    );
                }
            }
        }
        for (key, value) in &k.node_selector {
            let why = label_key(key)
                .map_err(|w| format!("key `{key}`: {w}"))
                .and_then(|()| label_value(value).map_err(|w| format!("value `{value}` {w}")));
            if let Err(why) = why {
                self.push(Diagnostic::error(
                    Code::InvalidValue,
                    format!("kubernetes component `{name}`: node_selector {why}"),
                    at(&["kubernetes", "node_selector", key]),
                ));
            }
        }
        if k.gpus == Some(0) {
            self.push(
                Diagnostic::error(
                    Code::InvalidValue,
                    format!("kubernetes component `{name}`: gpus = 0"),
                    at(&["kubernetes", "gpus"]),
                )
                .with_help("remove `gpus` for a pod without GPUs"),
            );
        }
    }
}

/// A component's workload with the defaults filled: kind `deployment`, the
/// component's name, the host's namespace, one replica, each port's name
/// (`p<container_port>`), Service port (the container's) and protocol (`tcp`).
pub(super) fn with_defaults(
    mut k: KubernetesSpec,
    component: &str,
    host_namespace: Option<&str>,
) -> KubernetesSpec {
    k.kind.get_or_insert(WorkloadKind::Deployment);
    k.name.get_or_insert_with(|| component.to_string());
    k.namespace
        .get_or_insert_with(|| host_namespace.unwrap_or("default").to_string());
    k.replicas.get_or_insert(1);
    k.service_type.get_or_insert(ServiceType::ClusterIP);
    for p in &mut k.ports {
        p.name
            .get_or_insert_with(|| format!("p{}", p.container_port.0));
        p.service_port.get_or_insert(p.container_port);
        p.protocol.get_or_insert(PortProtocol::Tcp);
    }
    k
}

#[cfg(test)]
mod tests {
    use crate::kube_names::is_quantity;

    #[test]
    fn quantities_as_the_api_writes_them() {
        for ok in [
            "1", "500m", "2.5", "8Gi", "1e3", "1E-2", "+1", "0.5Ki", "100M",
        ] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "Gi", "8GB", "1..2", "e3", "1e", "two", "8 Gi", "."] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }
}
