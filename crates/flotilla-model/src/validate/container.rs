//! Container components: the `container` table's rules (image reference, ports,
//! volumes, secrets, health check, GPU request, one restart owner), secrets kept out
//! of a container's environment, and the defaults the topology carries.

use super::{Located, Validator};
use crate::diag::{Code, Diagnostic, Location};
use crate::image_ref::ImageRef;
use crate::inventory::{
    AdapterKind, ComponentSpec, ContainerSpec, EngineRestart, PortProtocol, PullPolicy, VolumeType,
};
use crate::node::Node;
use crate::values::EnvValue;
use std::collections::BTreeMap;

/// Keys of a component that mean nothing for a container, and why.
const NOT_FOR_CONTAINERS: &[(&str, &str)] = &[
    (
        "cwd",
        "a container starts in its image's working directory; `cwd` is a directory on the host",
    ),
    (
        "inherit_env",
        "a container gets only `env` and `env_file`; take a value from the environment flotilla runs in with \"${env.NAME}\"",
    ),
    (
        "identity_files",
        "a container's runtime identity is the digest of the image it runs",
    ),
    (
        "release",
        "a container runs an image: name its version in `container.image`",
    ),
];

impl Validator {
    /// Checks the `container` table against the adapter (required for `container`,
    /// refused for any other), and a container component's keys: its image reference,
    /// ports, volumes, secrets, health check, GPU request, name, environment (a
    /// variable that takes a secret is exported from the secret's file by `/bin/sh`
    /// in the container: a shell name, and a secret name that is a file name) and
    /// restart owner.
    pub(super) fn container_rules(
        &mut self,
        name: &str,
        node: &Node,
        spec: &ComponentSpec,
        adapter: AdapterKind,
        env: &BTreeMap<String, Located<EnvValue>>,
        broken: &[Vec<String>],
    ) {
        // A list with an element set aside (its error reported) no longer lines up
        // with the source: its own checks would point at the wrong elements.
        let intact = |list: &str| {
            !broken
                .iter()
                .any(|p| p.len() > 2 && p[0] == "container" && p[1] == list)
        };
        let file = self.file;
        let at = |path: &[&str]| Location {
            file,
            span: node.span_at(path),
        };
        if adapter != AdapterKind::Container {
            return;
        }
        for (key, why) in NOT_FOR_CONTAINERS {
            if node.get(key).is_some() {
                self.push(
                    Diagnostic::error(
                        Code::InvalidValue,
                        format!("container component `{name}` declares `{key}`"),
                        self.loc(node.key_span_at(&[key])),
                    )
                    .with_help(format!("remove it: {why}")),
                );
            }
        }
        for (k, v) in env {
            let EnvValue::Secret(secret) = &v.value else {
                continue;
            };
            let shell_name = k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !shell_name || !secret_file_name(secret) {
                self.push(
                    Diagnostic::error(
                        Code::InvalidValue,
                        format!(
                            "container component `{name}`: env `{k}` takes secret `{secret}`, which the container exports from /run/secrets/{secret} with /bin/sh"
                        ),
                        v.loc,
                    )
                    .with_help(if shell_name {
                        "a secret's name is its file's name: no `/`, not `.` or `..`"
                    } else {
                        "such a variable's name must be a shell name: letters, digits and `_`, not starting with a digit"
                    }),
                );
            }
        }
        let Some(c) = &spec.container else {
            return;
        };
        if c.image.is_empty() {
            self.push(
                Diagnostic::error(
                    Code::MissingKey,
                    format!("component `{name}`: missing required key `image`"),
                    at(&["container"]),
                )
                .with_help("name the image in `container.image` (only a template such as llama-server, vllm, ollama or litellm supplies one)"),
            );
        } else if let Err(why) = ImageRef::parse(&c.image) {
            self.push(
                Diagnostic::error(
                    Code::InvalidValue,
                    format!(
                        "container component `{name}`: image `{}` is not an image reference: {why}",
                        c.image
                    ),
                    at(&["container", "image"]),
                )
                .with_help("an image reference is name[:tag][@sha256:<64 hex>], e.g. \"ghcr.io/open-webui/open-webui:main\""),
            );
        }
        if let Some(n) = &c.name {
            if !valid_container_name(n) {
                self.push(
                    Diagnostic::error(
                        Code::InvalidValue,
                        format!("container component `{name}`: container name `{n}` is not allowed"),
                        at(&["container", "name"]),
                    )
                    .with_help("a container name is a letter or digit, then letters, digits, `_`, `.` and `-`"),
                );
            }
        }
        if spec.restart.is_some() && c.restart.is_some_and(|r| r != EngineRestart::No) {
            let r = c.restart.unwrap_or_default();
            self.push(
                Diagnostic::error(
                    Code::InvalidValue,
                    format!(
                        "container component `{name}` declares both `restart` (Flotilla's supervision) and container.restart = \"{}\" (the engine's): one owner restarts it, never both",
                        r.as_str()
                    ),
                    at(&["container", "restart"]),
                )
                .with_help("remove container.restart (Flotilla's agent restarts it), or remove the component's `restart` table (the engine does)"),
            );
        }
        let ports = if intact("ports") { &c.ports[..] } else { &[] };
        for (i, p) in ports.iter().enumerate() {
            let idx = i.to_string();
            if let Some(ip) = &p.host_ip {
                if ip.parse::<core::net::IpAddr>().is_err() {
                    self.push(
                        Diagnostic::error(
                            Code::InvalidValue,
                            format!(
                                "container component `{name}`: port host_ip `{ip}` is not an IP address"
                            ),
                            at(&["container", "ports", &idx, "host_ip"]),
                        )
                        .with_help("e.g. host_ip = \"127.0.0.1\" (the default: loopback), or \"0.0.0.0\" to publish on every address"),
                    );
                }
            }
            let proto = p.protocol.unwrap_or_default();
            let dup = c.ports[..i].iter().any(|q| {
                q.published == p.published
                    && q.protocol.unwrap_or_default() == proto
                    && q.host_ip == p.host_ip
            });
            if dup {
                self.push(Diagnostic::error(
                    Code::PortConflict,
                    format!(
                        "container component `{name}` publishes {}/{} twice",
                        p.published.0,
                        proto.as_str()
                    ),
                    at(&["container", "ports", &idx, "published"]),
                ));
            }
        }
        let volumes = if intact("volumes") {
            &c.volumes[..]
        } else {
            &[]
        };
        for (i, v) in volumes.iter().enumerate() {
            let idx = i.to_string();
            if !v.target.starts_with('/') {
                self.push(Diagnostic::error(
                    Code::InvalidValue,
                    format!(
                        "container component `{name}`: volume target `{}` must be an absolute path inside the container",
                        v.target
                    ),
                    at(&["container", "volumes", &idx, "target"]),
                ));
            }
            let bad_source = match v.kind {
                VolumeType::Bind => v.source.is_empty().then_some(
                    "a bind mount's source is a host path (relative to the inventory's directory)",
                ),
                VolumeType::Volume => (!valid_container_name(&v.source)).then_some(
                    "a volume name is a letter or digit, then letters, digits, `_`, `.` and `-` (for a host path, write type = \"bind\")",
                ),
            };
            if let Some(help) = bad_source {
                self.push(
                    Diagnostic::error(
                        Code::InvalidValue,
                        format!(
                            "container component `{name}`: volume source `{}` is not allowed",
                            v.source
                        ),
                        at(&["container", "volumes", &idx, "source"]),
                    )
                    .with_help(help),
                );
            }
        }
        let secrets = if intact("secrets") {
            &c.secrets[..]
        } else {
            &[]
        };
        for (i, s) in secrets.iter().enumerate() {
            if !secret_file_name(s) {
                self.push(
                    Diagnostic::error(
                        Code::InvalidValue,
                        format!("container component `{name}`: secret name `{s}` cannot be a file name in /run/secrets"),
                        at(&["container", "secrets", &i.to_string()]),
                    )
                    .with_help("a secret's name is its file's name: no `/`, not `.` or `..`"),
                );
            }
        }
        if let Some(h) = &c.healthcheck {
            let ok = match h.test.first().map(String::as_str) {
                Some("NONE") => h.test.len() == 1,
                Some("CMD") | Some("CMD-SHELL") => h.test.len() >= 2,
                _ => false,
            };
            if !ok {
                self.push(
                    Diagnostic::error(
                        Code::InvalidValue,
                        format!("container component `{name}`: healthcheck test must be [\"CMD\", program, args…], [\"CMD-SHELL\", script] or [\"NONE\"]"),
                        at(&["container", "healthcheck", "test"]),
                    )
                    .with_help("e.g. test = [\"CMD\", \"curl\", \"-f\", \"http://localhost:8080/health\"]"),
                );
            }
        }
        if let Some(g) = &c.gpus {
            if g.count.is_some() && !g.device_ids.is_empty() {
                self.push(
                    Diagnostic::error(
                        Code::InvalidValue,
                        format!("container component `{name}`: the GPU request sets both `count` and `device_ids`"),
                        at(&["container", "gpus"]),
                    )
                    .with_help("ask for a number of GPUs (count = 1, or \"all\") or for particular ones (device_ids = [\"0\"]), not both"),
                );
            }
        }
        let devices = if intact("devices") {
            &c.devices[..]
        } else {
            &[]
        };
        for (i, d) in devices.iter().enumerate() {
            let parts: Vec<&str> = d.split(':').collect();
            let perms_ok = parts
                .get(2)
                .is_none_or(|p| !p.is_empty() && p.chars().all(|c| matches!(c, 'r' | 'w' | 'm')));
            if parts.len() > 3 || !parts[0].starts_with('/') || !perms_ok {
                self.push(
                    Diagnostic::error(
                        Code::InvalidValue,
                        format!("container component `{name}`: device `{d}` is not host[:container[:permissions]]"),
                        at(&["container", "devices", &i.to_string()]),
                    )
                    .with_help("e.g. \"/dev/dri:/dev/dri\" or \"/dev/kfd:/dev/kfd:rwm\""),
                );
            }
        }
    }
}

/// A component's container with the defaults filled: pull `never`, restart `no`,
/// network `bridge`, each port on `127.0.0.1` over `tcp`, and the stop signal from
/// `stop.signal` when only that is declared. The name stays as declared: its default
/// (`flotilla-<project>-<component>`) depends on the project, which the inventory
/// alone does not settle (`-p`, or the directory's name).
pub(super) fn with_defaults(
    mut c: ContainerSpec,
    stop_signal: Option<&crate::values::Signal>,
) -> ContainerSpec {
    c.pull.get_or_insert(PullPolicy::Never);
    c.restart.get_or_insert(EngineRestart::No);
    c.network.get_or_insert_with(|| "bridge".into());
    for p in &mut c.ports {
        p.host_ip.get_or_insert_with(|| "127.0.0.1".into());
        p.protocol.get_or_insert(PortProtocol::Tcp);
    }
    if c.stop_signal.is_none() {
        c.stop_signal = stop_signal.cloned();
    }
    c
}

/// Whether secret `s` can be a file's name in `/run/secrets`.
fn secret_file_name(s: &str) -> bool {
    !(s.is_empty() || s == "." || s == ".." || s.contains(['/', '\0']))
}

/// Docker's container (and volume) name rule: `[a-zA-Z0-9][a-zA-Z0-9_.-]*`.
fn valid_container_name(n: &str) -> bool {
    n.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}
