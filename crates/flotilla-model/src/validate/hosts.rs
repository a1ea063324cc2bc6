//! Hosts: transport (`local`, `ssh`, `agent`, `kubernetes`), role, platform, SSH
//! settings, the container engine's API, a cluster's kubeconfig, context and namespace
//! (each checked where it is written), and the implicit `local` host.

use super::Validator;
use crate::diag::{Code, Diagnostic};
use crate::inventory::{HostSpec, TransportKind};
use crate::kube_names::dns_label;
use crate::node::Node;
use crate::topology::Host;
use std::collections::{BTreeMap, BTreeSet};

impl Validator {
    /// Decodes and checks every host, and adds the implicit `local` host when it is not
    /// declared. Host names, even of broken entries, go into `declared_hosts`.
    pub(super) fn hosts<'a>(
        &mut self,
        hosts_node: Option<&'a Node<'_>>,
        declared_hosts: &mut BTreeSet<&'a str>,
    ) -> BTreeMap<String, Host> {
        let mut hosts: BTreeMap<String, Host> = BTreeMap::new();
        for e in hosts_node.map(Node::entries).unwrap_or(&[]) {
            declared_hosts.insert(&e.key);
            if !self.check_name("host", e) {
                continue;
            }
            let what = || format!("host `{}`", e.key);
            let json = self.json;
            if let Some((h, _)) = self.retry_decode(
                self.file,
                &what,
                &e.value,
                |n| crate::node::from_node::<HostSpec>(n),
                |err, current| super::hints::host_error(err, current, json),
            ) {
                {
                    if e.key == "local" && h.transport != TransportKind::Local {
                        self.push(
                            Diagnostic::error(
                                Code::InvalidValue,
                                "host `local` is this machine: its transport must be `local`",
                                self.loc(e.value.span_at(&["transport"])),
                            )
                            .with_help("give the remote machine another name, e.g. [hosts.studio]"),
                        );
                    }
                    if let Some(p) = &h.platform {
                        if !is_platform(p) {
                            self.push(
                                Diagnostic::error(
                                    Code::InvalidValue,
                                    format!("host `{}`: unknown platform `{p}`", e.key),
                                    self.loc(e.value.span_at(&["platform"])),
                                )
                                .with_help("a platform is <os>-<arch>: linux-x86_64, linux-aarch64, darwin-aarch64 or darwin-x86_64"),
                            );
                        }
                    }
                    if h.transport != TransportKind::Ssh {
                        let help = match h.transport {
                            TransportKind::Kubernetes => "remove it: a cluster is reached through its API server, with the kubeconfig's context (`kubeconfig`, `context`)",
                            TransportKind::Agent => "remove it: an agent host is reached through its own `flotilla agent`, which keeps its own state directory (or set transport = \"ssh\")",
                            _ => "set transport = \"ssh\", or remove it (a local host uses this machine's own state directory: --state-dir)",
                        };
                        for (key, set) in [
                            ("user", h.user.is_some()),
                            ("port", h.port.is_some()),
                            ("identity", h.identity.is_some()),
                            ("ssh_options", !h.ssh_options.is_empty()),
                            ("state_dir", h.state_dir.is_some()),
                        ] {
                            if set {
                                self.push(
                                    Diagnostic::error(
                                        Code::InvalidValue,
                                        format!(
                                            "host `{}`: `{key}` applies to transport `ssh` only",
                                            e.key
                                        ),
                                        self.loc(e.value.span_at(&[key])),
                                    )
                                    .with_help(help),
                                );
                            }
                        }
                    }
                    for (k, v) in &h.ssh_options {
                        let lower = k.to_ascii_lowercase();
                        let bad = match lower.as_str() {
                            "stricthostkeychecking" => (!v.eq_ignore_ascii_case("yes")).then_some(
                                "host keys are always checked: an unknown or changed key is refused, never accepted",
                            ),
                            "batchmode" => (!v.eq_ignore_ascii_case("yes")).then_some(
                                "Flotilla never prompts: BatchMode is always yes",
                            ),
                            "controlmaster" | "controlpath" | "controlpersist" => Some(
                                "Flotilla runs its own multiplexed master connection per host",
                            ),
                            _ if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric()) => {
                                Some("an OpenSSH option name is letters and digits, e.g. ProxyJump (see ssh_config(5))")
                            }
                            _ => None,
                        };
                        if let Some(why) = bad {
                            self.push(Diagnostic::error(
                                Code::InvalidValue,
                                format!(
                                    "host `{}`: ssh option `{k} = {v}` is not allowed: {why}",
                                    e.key
                                ),
                                self.loc(e.value.span_at(&["ssh_options", k])),
                            ));
                        } else if v.contains(['\n', '\r']) {
                            self.push(Diagnostic::error(
                                Code::InvalidValue,
                                format!(
                                    "host `{}`: ssh option `{k}` has a line break in its value",
                                    e.key
                                ),
                                self.loc(e.value.span_at(&["ssh_options", k])),
                            ));
                        }
                    }
                    for (key, v) in [("address", &h.address), ("user", &h.user)] {
                        if let Some(v) = v {
                            if v.is_empty()
                                || v.starts_with('-')
                                || v.chars().any(|c| c.is_whitespace() || c.is_control())
                            {
                                self.push(Diagnostic::error(
                                    Code::InvalidValue,
                                    format!("host `{}`: {key} `{v}` is not a host name, address or user (empty, starts with `-`, or has spaces)", e.key),
                                    self.loc(e.value.span_at(&[key])),
                                ));
                            }
                        }
                    }
                    if let Some(api) = &h.container_api {
                        let path = api.strip_prefix("unix://").unwrap_or_default();
                        if !path.starts_with('/') || path.contains(['\n', '\r', '\0']) {
                            self.push(
                                Diagnostic::error(
                                    Code::InvalidValue,
                                    format!("host `{}`: container_api `{api}` is not unix:///PATH", e.key),
                                    self.loc(e.value.span_at(&["container_api"])),
                                )
                                .with_help("the engine's socket on that host, e.g. \"unix:///run/podman/podman.sock\" or \"unix:///var/run/docker.sock\" (only unix sockets: reach a remote engine through the host's transport)"),
                            );
                        }
                    }
                    self.cluster_keys(&e.key, &e.value, &h);
                    if let Some(d) = &h.state_dir {
                        if !d.starts_with('/') {
                            self.push(Diagnostic::error(
                                Code::InvalidValue,
                                format!("host `{}`: state_dir `{d}` must be an absolute path on that host", e.key),
                                self.loc(e.value.span_at(&["state_dir"])),
                            ));
                        }
                    }
                    hosts.insert(
                        e.key.to_string(),
                        Host {
                            name: e.key.to_string(),
                            transport: h.transport,
                            address: h.address.clone().unwrap_or_else(|| match h.transport {
                                TransportKind::Local => "localhost".into(),
                                TransportKind::Ssh
                                | TransportKind::Agent
                                | TransportKind::Kubernetes => e.key.to_string(),
                            }),
                            cluster: (h.transport == TransportKind::Kubernetes).then(|| {
                                crate::topology::Cluster {
                                    kubeconfig: h.kubeconfig.clone(),
                                    context: h.context.clone(),
                                    namespace: h
                                        .namespace
                                        .clone()
                                        .unwrap_or_else(|| "default".into()),
                                }
                            }),
                            role: h.role.unwrap_or_default(),
                            user: h.user,
                            port: h.port.map(|p| p.0),
                            identity: h.identity,
                            ssh_options: h.ssh_options,
                            state_dir: h.state_dir,
                            platform: h.platform,
                            labels: h.labels,
                            container_api: h.container_api,
                        },
                    );
                }
            }
        }
        if !declared_hosts.contains("local") {
            declared_hosts.insert("local");
            hosts.insert(
                "local".into(),
                Host {
                    name: "local".into(),
                    transport: TransportKind::Local,
                    address: "localhost".into(),
                    user: None,
                    port: None,
                    role: crate::inventory::HostRole::default(),
                    identity: None,
                    ssh_options: BTreeMap::new(),
                    state_dir: None,
                    platform: None,
                    labels: BTreeMap::new(),
                    container_api: None,
                    cluster: None,
                },
            );
        }
        hosts
    }
}

impl Validator {
    /// The cluster keys of host `name` (`kubeconfig`, `context`, `namespace`): only
    /// with transport `kubernetes`, each well formed; and what a cluster does not
    /// have (SSH settings, a container engine).
    fn cluster_keys(&mut self, name: &str, node: &Node<'_>, h: &HostSpec) {
        let kube = h.transport == TransportKind::Kubernetes;
        for (key, set) in [
            ("kubeconfig", h.kubeconfig.is_some()),
            ("context", h.context.is_some()),
            ("namespace", h.namespace.is_some()),
        ] {
            if set && !kube {
                self.push(
                    Diagnostic::error(
                        Code::InvalidValue,
                        format!("host `{name}`: `{key}` applies to transport `kubernetes` only"),
                        self.loc(node.span_at(&[key])),
                    )
                    .with_help("set transport = \"kubernetes\" for a cluster, or remove it"),
                );
            }
        }
        if !kube {
            return;
        }
        if h.container_api.is_some() {
            self.push(
                Diagnostic::error(
                    Code::InvalidValue,
                    format!("host `{name}`: a cluster has no `container_api`"),
                    self.loc(node.span_at(&["container_api"])),
                )
                .with_help("a cluster runs containers as pods: give its components adapter = \"kubernetes\" and a `kubernetes` table"),
            );
        }
        if let Some(ns) = &h.namespace {
            if let Err(why) = dns_label(ns) {
                self.push(
                    Diagnostic::error(
                        Code::InvalidValue,
                        format!("host `{name}`: namespace `{ns}` {why}"),
                        self.loc(node.span_at(&["namespace"])),
                    )
                    .with_help("a namespace name is a DNS-1123 label: lowercase letters, digits and `-`, at most 63, starting and ending with a letter or digit"),
                );
            }
        }
        for (key, v) in [("kubeconfig", &h.kubeconfig), ("context", &h.context)] {
            if v.as_deref()
                .is_some_and(|v| v.is_empty() || v.contains(['\n', '\r', '\0']))
            {
                self.push(Diagnostic::error(
                    Code::InvalidValue,
                    format!("host `{name}`: `{key}` is empty or has a line break"),
                    self.loc(node.span_at(&[key])),
                ));
            }
        }
    }
}

fn is_platform(p: &str) -> bool {
    matches!(
        p,
        "linux-x86_64" | "linux-aarch64" | "darwin-aarch64" | "darwin-x86_64"
    )
}
