//! One compose service as one container component: every key of the Compose
//! Specification's service is either carried over (into the component or its
//! `container` table) or noted with the reason it is not.
//!
//! `depends_on` is read here and resolved by the project ([`crate::project`]), which
//! knows every service's readiness.

use crate::ctx::Ctx;
use crate::health::{self, Health};
use crate::notes::Note;
use crate::ports::{self, Published};
use crate::secret::{plain_reference, secret_name};
use crate::yaml::{Node, Value};
use flotilla_model::inventory::{
    AdapterKind, ComponentSpec, ContainerHealthCheck, ContainerSpec, EngineRestart, GpuCount,
    GpuRequest, HttpCheck, ProbeSpec, PullPolicy, StopSpec,
};
use flotilla_model::values::{HumanDuration, Signal};
use std::collections::BTreeMap;

/// How a dependency must be before its dependent starts (compose's `condition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// `service_started` (the default).
    Started,
    /// `service_healthy`.
    Healthy,
    /// `service_completed_successfully`.
    Completed,
}

/// One entry of `depends_on`.
#[derive(Debug, Clone)]
pub struct Dependency {
    /// The service depended on (compose's name).
    pub service: String,
    /// Its condition.
    pub condition: Condition,
    /// `required: false`: compose starts the dependent without it.
    pub optional: bool,
    /// Where it is written.
    pub node: Node,
}

/// A service converted.
#[derive(Debug, Clone)]
pub struct Service {
    /// The compose name.
    pub compose_name: String,
    /// The component's name.
    pub name: String,
    /// Where the service starts in the file.
    pub line: u32,
    /// The component (its `depends_on` is filled by the project).
    pub spec: ComponentSpec,
    /// What was not carried over, or differently.
    pub notes: Vec<Note>,
    /// Its compose profiles (empty: started by a plain `docker compose up`).
    pub profiles: Vec<String>,
    /// Its `depends_on`.
    pub depends_on: Vec<Dependency>,
    /// The line of each `environment` variable (by name) and of `command`.
    pub lines: BTreeMap<String, u32>,
}

/// Compose keys the container table has no place for, with the reason.
const NOT_CARRIED: &[(&[&str], &str)] = &[
    (
        &["annotations", "labels", "label_file"],
        "container labels are not carried over (flotilla's containers carry its own io.flotilla.* labels)",
    ),
    (
        &["attach", "tty", "stdin_open"],
        "flotilla runs containers detached and reads their log from the engine",
    ),
    (
        &[
            "blkio_config", "cpu_count", "cpu_percent", "cpu_shares", "cpu_period", "cpu_quota",
            "cpu_rt_runtime", "cpu_rt_period", "cpus", "cpuset", "mem_limit", "mem_reservation",
            "mem_swappiness", "memswap_limit", "oom_kill_disable", "oom_score_adj", "pids_limit",
            "ulimits", "storage_opt",
        ],
        "resource limits are not in the container table",
    ),
    (
        &["shm_size", "ipc"],
        "the size of /dev/shm and the IPC namespace are not in the container table: the container gets its own, with the engine's default /dev/shm of 64 MiB, which PyTorch workers outgrow (vLLM's docs ask for `ipc: host` or a larger `shm_size` for tensor parallelism); until then run such a server outside flotilla and declare it `owner = \"external\"`",
    ),
    (
        &[
            "cap_add", "cap_drop", "privileged", "security_opt", "userns_mode", "group_add",
            "read_only", "sysctls", "cgroup", "cgroup_parent", "device_cgroup_rules",
            "credential_spec", "isolation", "init", "runtime", "platform",
        ],
        "a kernel, security or runtime setting the container table does not have",
    ),
    (
        &[
            "dns", "dns_opt", "dns_search", "domainname", "hostname", "extra_hosts", "mac_address",
            "links", "external_links", "pid", "uts",
        ],
        "a network or namespace setting the container table does not have",
    ),
    (
        &["working_dir"],
        "the working directory stays the image's (`WORKDIR`): the container table does not set it",
    ),
    (&["tmpfs"], "tmpfs mounts are not in the container table"),
    (
        &["volumes_from"],
        "mounts are declared per container: list the volumes here",
    ),
    (
        &["configs"],
        "compose configs are not carried over: mount the file with a bind volume",
    ),
    (
        &["logging"],
        "the log driver is the engine's: flotilla reads the container's log through the engine",
    ),
    (
        &["expose"],
        "a port open to other containers only: flotilla publishes ports (`ports`) or none",
    ),
    (&["scale"], "a component is one container: no replicas"),
    (&["develop"], "compose watch (development) settings"),
    (
        &["post_start", "pre_stop"],
        "lifecycle hooks are not in the container table",
    ),
    (
        &["use_api_socket", "provider", "models"],
        "a compose-specific service feature with no counterpart in flotilla",
    ),
];

/// Every service key this import knows (for "did you mean").
fn known_keys() -> Vec<&'static str> {
    let mut keys: Vec<&str> = NOT_CARRIED
        .iter()
        .flat_map(|(k, _)| k.iter().copied())
        .collect();
    keys.extend([
        "image",
        "build",
        "command",
        "entrypoint",
        "environment",
        "env_file",
        "ports",
        "volumes",
        "healthcheck",
        "depends_on",
        "restart",
        "user",
        "devices",
        "deploy",
        "gpus",
        "container_name",
        "network_mode",
        "networks",
        "secrets",
        "stop_grace_period",
        "stop_signal",
        "pull_policy",
        "profiles",
        "extends",
    ]);
    keys
}

/// The component name of compose service `name`: `.` (allowed in compose, not in
/// Flotilla's names) becomes `-`.
pub fn component_name(name: &str) -> String {
    name.replace('.', "-")
}

/// Converts service `name` (its key node `key`, its mapping `node`).
pub fn convert(ctx: &mut Ctx, name: &str, key: &Node, node: &Node) -> Option<Service> {
    let Some(entries) = node.as_map() else {
        ctx.error(
            node,
            format!("service `{name}` must be a mapping, not {}", node.kind()),
        );
        return None;
    };
    let mut notes = Vec::new();
    let component = component_name(name);
    if component != name {
        notes.push(Note::new(
            key.at.line,
            name,
            format!("the component is named `{component}`: flotilla's names have no `.`"),
        ));
    }
    let mut spec = ComponentSpec {
        adapter: Some(AdapterKind::Container),
        ..ComponentSpec::default()
    };
    let mut c = ContainerSpec::default();
    let mut image: Option<String> = None;
    let mut build: Option<&Node> = None;
    let mut published: Vec<Published> = Vec::new();
    let mut health = Health::default();
    let mut profiles = Vec::new();
    let mut depends_on = Vec::new();
    let mut lines = BTreeMap::new();
    let mut network_mode: Option<(&Node, &Node)> = None;
    let mut networks: Option<(&Node, &Node)> = None;
    for (k, v) in entries {
        let kt = k.key_text();
        let line = k.at.line;
        match kt {
            // An image that cannot be read has its error: no second one for a missing image.
            "image" => image = Some(ctx.string(v, kt, &mut notes)?),
            "build" => build = Some(k),
            "command" => {
                lines.insert("command".to_string(), v.at.line);
                spec.command = argv(ctx, v, kt, true, &mut notes)
            }
            "entrypoint" => c.entrypoint = argv(ctx, v, kt, false, &mut notes),
            "environment" => {
                let (env, env_lines) = crate::env::read(ctx, v, &mut notes);
                spec.env = env;
                lines.extend(env_lines.into_iter().map(|(k, l)| (format!("environment.{k}"), l)));
            }
            "env_file" => spec.env_file = crate::env::read_file(ctx, v, &mut notes),
            "ports" => published = ports::read(ctx, v, &mut notes),
            "volumes" => c.volumes = crate::volumes::read(ctx, v, &mut notes),
            "healthcheck" => health = health::read(ctx, v, &mut notes),
            "depends_on" => depends_on = dependencies(ctx, v, &mut notes),
            "restart" => c.restart = restart(ctx, v, &mut notes),
            "user" => c.user = ctx.string(v, kt, &mut notes),
            "devices" => c.devices = devices(ctx, v, &mut notes),
            "deploy" => deploy(ctx, v, &mut c, &mut notes),
            "gpus" => c.gpus = gpus(ctx, v, "gpus", &mut notes),
            "container_name" => c.name = ctx.string(v, kt, &mut notes),
            "network_mode" => network_mode = Some((k, v)),
            "networks" => networks = Some((k, v)),
            "secrets" => c.secrets = secrets(ctx, v, &mut notes),
            "stop_grace_period" => {
                if let Some(d) = ctx.duration(v, kt, &mut notes) {
                    spec.stop = Some(StopSpec {
                        signal: None,
                        grace_period: Some(HumanDuration(d)),
                    });
                }
            }
            "stop_signal" => {
                if let Some(s) = ctx.string(v, kt, &mut notes) {
                    match serde_json::from_value::<Signal>(serde_json::Value::String(s.clone())) {
                        Ok(sig) => c.stop_signal = Some(sig),
                        Err(e) => notes.push(Note::new(line, kt, format!("`{s}` not carried over: {e}"))),
                    }
                }
            }
            "pull_policy" => c.pull = pull_policy(ctx, v, &mut notes),
            "profiles" => {
                profiles = ctx.names(v, kt).into_iter().map(|(n, _, _)| n).collect();
            }
            "extends" => notes.push(Note::new(
                line,
                kt,
                format!(
                    "not carried over: the keys `{name}` would inherit ({}) are not merged here (compose's merge rules differ per key): copy them into this component, or import the output of `docker compose config`, which resolves `extends`",
                    extends_target(v)
                ),
            )),
            other if other.starts_with("x-") => notes.push(Note::new(
                line,
                other,
                "not carried over: an extension field (compose ignores it too)",
            )),
            other => match NOT_CARRIED.iter().find(|(keys, _)| keys.contains(&other)) {
                Some((_, why)) => notes.push(Note::new(line, other, format!("not carried over: {why}"))),
                None => {
                    let hint = flotilla_model::diag::did_you_mean(other, known_keys())
                        .map(|h| format!(" (did you mean `{h}`?)"))
                        .unwrap_or_default();
                    notes.push(Note::new(
                        line,
                        other,
                        format!("not carried over: not a key of a compose service{hint}"),
                    ));
                }
            },
        }
    }
    // The image: as written, or the one `docker compose build` tags.
    c.image = match (image, build) {
        (Some(image), Some(b)) => {
            notes.push(Note::new(
                b.at.line,
                "build",
                format!("not carried over: flotilla does not build images: build it first (`docker compose build {name}` tags it `{image}`)"),
            ));
            image
        }
        (Some(image), None) => qualify(&image),
        (None, Some(b)) => {
            let built = format!("{}-{name}", ctx.project);
            notes.push(Note::new(
                b.at.line,
                "build",
                format!("not carried over: flotilla does not build images: build it first (`docker compose build {name}` tags it `{built}`, the image named here)"),
            ));
            built
        }
        (None, None) => {
            ctx.error(
                key,
                format!("service `{name}` has neither `image` nor `build`: a container component needs an image"),
            );
            return None;
        }
    };
    // The container's name: compose's own for it (`<project>-<service>-1`), so that a
    // container compose made is found (foreign: never touched) and the two never run
    // side by side on the same volumes.
    if c.name.is_none() {
        c.name = Some(format!("{}-{name}-1", ctx.project));
    }
    network(ctx, network_mode, networks, &mut c, &mut notes);
    // Endpoints, one per published TCP port, and readiness from the health check.
    let (endpoints, probe_endpoint) = endpoints(&published, health.http.as_ref());
    spec.endpoints = endpoints;
    c.ports = published.into_iter().map(|p| p.port).collect();
    let has_healthcheck = health
        .check
        .as_ref()
        .is_some_and(|h| h.test.first().is_none_or(|t| t != "NONE"));
    spec.readiness = match (&health, probe_endpoint) {
        (
            Health {
                http: Some(get),
                check: Some(check),
            },
            Some(endpoint),
        ) => Some(ProbeSpec {
            http: Some(HttpCheck {
                endpoint: Some(endpoint),
                url: None,
                path: (get.path != "/").then(|| get.path.clone()),
                status: None,
                body_contains: None,
                json_pointer: None,
                json_equals: None,
            }),
            period: check.interval,
            timeout: check.timeout,
            ..ProbeSpec::default()
        }),
        _ if has_healthcheck => Some(ProbeSpec {
            container_health: Some(ContainerHealthCheck {}),
            ..ProbeSpec::default()
        }),
        _ => None,
    };
    c.healthcheck = health.check;
    spec.container = Some(c);
    Some(Service {
        compose_name: name.to_string(),
        name: component,
        line: key.at.line,
        spec,
        notes,
        profiles,
        depends_on,
        lines,
    })
}

fn extends_target(v: &Node) -> String {
    match (
        v.as_str(),
        v.get("service").and_then(Node::as_str),
        v.get("file").and_then(Node::as_str),
    ) {
        (Some(s), _, _) => format!("from service `{s}`"),
        (_, Some(s), Some(f)) => format!("from service `{s}` of {f}"),
        (_, Some(s), None) => format!("from service `{s}`"),
        _ => "from another service".into(),
    }
}

/// An image reference written in full, as Docker reads a short one:
/// `postgres:16` is `docker.io/library/postgres:16`, `ollama/ollama` is
/// `docker.io/ollama/ollama` (Podman needs the registry written).
pub fn qualify(image: &str) -> String {
    let first = image.split('/').next().unwrap_or_default();
    let has_registry = image.contains('/') && (first.contains(['.', ':']) || first == "localhost");
    if has_registry {
        image.to_string()
    } else if image.contains('/') {
        format!("docker.io/{image}")
    } else {
        format!("docker.io/library/{image}")
    }
}

/// `command` or `entrypoint`: a list, or a string split by shell rules (compose uses
/// shellwords; quotes and backslashes group, nothing is expanded). `flotilla_refs`:
/// `${NAME}` becomes `${env.NAME}` (command) rather than being resolved now (entrypoint).
fn argv(
    ctx: &mut Ctx,
    v: &Node,
    key: &str,
    flotilla_refs: bool,
    notes: &mut Vec<Note>,
) -> Option<Vec<String>> {
    let words: Vec<(String, &Node)> = match &v.value {
        Value::Seq(items) => items
            .iter()
            .filter_map(|n| ctx.scalar(n, key).map(|s| (s, n)))
            .collect(),
        _ if v.is_null() => return None,
        Value::Scalar { text, .. } => match shlex::split(text) {
            Some(words) => words.into_iter().map(|w| (w, v)).collect(),
            None => {
                ctx.error(v, format!("`{key}`: unbalanced quotes in `{text}`"));
                return None;
            }
        },
        Value::Map(_) => {
            ctx.error(
                v,
                format!("`{key}` must be a string or a list, not a mapping"),
            );
            return None;
        }
    };
    let mut out = Vec::new();
    for (i, (w, n)) in words.iter().enumerate() {
        let k = format!("{key}[{i}]");
        // A literal after a secret-named flag (`--api-key sk-…`, `--token=…`) would be
        // written into the inventory, which plans and revisions show.
        let flag_value = match w.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => Some((flag, value)),
            _ => i
                .checked_sub(1)
                .map(|p| words[p].0.as_str())
                .filter(|f| f.starts_with('-') && !f.contains('='))
                .map(|f| (f, w.as_str())),
        };
        if let Some((flag, _)) = flag_value.filter(|(f, v)| {
            secret_name(f.trim_start_matches('-')) && !v.is_empty() && !plain_reference(v)
        }) {
            ctx.error(
                n,
                format!(
                    "`{k}`: the value of `{flag}` looks like a secret, and is not written into the inventory: take it out of `{key}` and give it to the program through its environment as a secret (most servers read one: vLLM's VLLM_API_KEY, llama-server's LLAMA_API_KEY, LiteLLM's LITELLM_MASTER_KEY)"
                ),
            );
            return None;
        }
        let a = if flotilla_refs {
            ctx.flotilla(w, n, &k, notes)
        } else {
            ctx.resolve(w, n, &k, notes)
        };
        out.push(a?);
    }
    Some(out)
}

fn dependencies(ctx: &mut Ctx, v: &Node, notes: &mut Vec<Note>) -> Vec<Dependency> {
    let mut out = Vec::new();
    for (service, at, long) in ctx.names(v, "depends_on") {
        let mut condition = Condition::Started;
        let mut optional = false;
        if let Some(long) = long.and_then(Node::as_map) {
            for (k, val) in long {
                let key = format!("depends_on.{service}.{}", k.key_text());
                match (k.key_text(), val.as_str()) {
                    ("condition", Some("service_started")) => condition = Condition::Started,
                    ("condition", Some("service_healthy")) => condition = Condition::Healthy,
                    ("condition", Some("service_completed_successfully")) => {
                        condition = Condition::Completed
                    }
                    ("condition", _) => ctx.error(
                        val,
                        format!("`{key}`: service_started, service_healthy or service_completed_successfully"),
                    ),
                    ("restart", _) if val.as_bool() == Some(true) => notes.push(Note::new(
                        k.at.line,
                        key,
                        format!("not carried over: restarting `{service}` does not restart this one by itself: use `flotilla restart {service} --cascade`"),
                    )),
                    ("required", _) if val.as_bool() == Some(false) => optional = true,
                    ("restart" | "required", _) => {}
                    (other, _) => notes.push(Note::new(
                        k.at.line,
                        key,
                        format!("not carried over: `{other}` is not a key of depends_on"),
                    )),
                }
            }
        }
        out.push(Dependency {
            service,
            condition,
            optional,
            node: at.clone(),
        });
    }
    out
}

fn restart(ctx: &mut Ctx, v: &Node, notes: &mut Vec<Note>) -> Option<EngineRestart> {
    let text = ctx.string(v, "restart", notes)?;
    let (policy, retries) = match text.split_once(':') {
        Some((p, n)) => (p, Some(n)),
        None => (text.as_str(), None),
    };
    let r = match policy {
        "no" => return None,
        "always" => EngineRestart::Always,
        "unless-stopped" => EngineRestart::UnlessStopped,
        "on-failure" => EngineRestart::OnFailure,
        other => {
            ctx.error(
                v,
                format!("`restart`: `{other}` is not no, always, on-failure or unless-stopped"),
            );
            return None;
        }
    };
    if let Some(n) = retries {
        notes.push(Note::new(
            v.at.line,
            "restart",
            format!("`{text}`: the engine restarts it on failure without the limit of {n} tries (the container table has no maximum)"),
        ));
    }
    Some(r)
}

fn pull_policy(ctx: &mut Ctx, v: &Node, notes: &mut Vec<Note>) -> Option<PullPolicy> {
    let text = ctx.string(v, "pull_policy", notes)?;
    match text.as_str() {
        "always" => Some(PullPolicy::Always),
        "missing" | "if_not_present" => Some(PullPolicy::Missing),
        "never" => Some(PullPolicy::Never),
        "build" => {
            notes.push(Note::new(
                v.at.line,
                "pull_policy",
                "`build` not carried over: flotilla does not build images",
            ));
            None
        }
        other => {
            notes.push(Note::new(
                v.at.line,
                "pull_policy",
                format!("`{other}` is written as `missing` (flotilla pulls an image it does not have, never on a schedule)"),
            ));
            Some(PullPolicy::Missing)
        }
    }
}

/// `devices`: `HOST[:CONTAINER[:PERMISSIONS]]`, or `{ source, target, permissions }`.
fn devices(ctx: &mut Ctx, v: &Node, notes: &mut Vec<Note>) -> Vec<String> {
    let Some(items) = v.as_seq() else {
        ctx.error(v, format!("`devices` must be a list, not {}", v.kind()));
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let key = format!("devices[{i}]");
        if item.as_map().is_some() {
            let mut parts = Vec::new();
            for k in ["source", "target", "permissions"] {
                if let Some(p) = item.get(k) {
                    parts.extend(ctx.string(p, &format!("{key}.{k}"), notes));
                }
            }
            if parts.is_empty() {
                ctx.error(item, format!("`{key}` needs `source`"));
            } else {
                out.push(parts.join(":"));
            }
        } else if let Some(d) = ctx.string(item, &key, notes) {
            if d.contains("=") {
                // A CDI device name (`nvidia.com/gpu=all`).
                notes.push(Note::new(
                    item.at.line,
                    key,
                    format!("`{d}` not carried over: a CDI device name (the container table takes device paths; for GPUs write `container.gpus`)"),
                ));
            } else {
                out.push(d);
            }
        }
    }
    out
}

/// `deploy`: only `resources.reservations.devices` (GPU requests) has a place.
fn deploy(ctx: &mut Ctx, v: &Node, c: &mut ContainerSpec, notes: &mut Vec<Note>) {
    let Some(entries) = v.as_map() else {
        ctx.error(v, format!("`deploy` must be a mapping, not {}", v.kind()));
        return;
    };
    for (k, val) in entries {
        let key = format!("deploy.{}", k.key_text());
        match k.key_text() {
            "resources" => {
                for (rk, rv) in val.as_map().unwrap_or_default() {
                    let rkey = format!("{key}.{}", rk.key_text());
                    if rk.key_text() != "reservations" {
                        notes.push(Note::new(rk.at.line, rkey, "not carried over: resource limits are not in the container table"));
                        continue;
                    }
                    for (sk, sv) in rv.as_map().unwrap_or_default() {
                        let skey = format!("{rkey}.{}", sk.key_text());
                        if sk.key_text() == "devices" {
                            c.gpus = gpus(ctx, sv, &skey, notes);
                        } else {
                            notes.push(Note::new(sk.at.line, skey, "not carried over: resource reservations other than GPUs are not in the container table"));
                        }
                    }
                }
            }
            "replicas" => notes.push(Note::new(k.at.line, key, "not carried over: a component is one container, no replicas")),
            "restart_policy" => notes.push(Note::new(
                k.at.line,
                key,
                "not carried over: swarm's restart policy (the service's `restart` is the engine's)",
            )),
            _ => notes.push(Note::new(k.at.line, key, "not carried over: a swarm deployment setting")),
        }
    }
}

/// A GPU request: `all`, or a list of device requests (`{ driver, count, device_ids,
/// capabilities, options }`); the first that asks for `gpu` is kept.
fn gpus(ctx: &mut Ctx, v: &Node, key: &str, notes: &mut Vec<Note>) -> Option<GpuRequest> {
    if let Some(s) = v.as_str().filter(|_| v.as_seq().is_none()) {
        if s == "all" {
            return Some(GpuRequest {
                count: Some(GpuCount::All),
                ..GpuRequest::default()
            });
        }
        ctx.error(v, format!("`{key}`: `all` or a list of device requests"));
        return None;
    }
    let Some(items) = v.as_seq() else {
        ctx.error(
            v,
            format!(
                "`{key}` must be a list of device requests, not {}",
                v.kind()
            ),
        );
        return None;
    };
    let mut kept = None;
    for (i, item) in items.iter().enumerate() {
        let ikey = format!("{key}[{i}]");
        let mut r = GpuRequest::default();
        for (k, val) in item.as_map().unwrap_or_default() {
            let sub = format!("{ikey}.{}", k.key_text());
            match k.key_text() {
                "driver" => r.driver = ctx.string(val, &sub, notes),
                "count" => {
                    r.count = match (val.as_int(), val.as_str()) {
                        (Some(n), _) if n > 0 => Some(GpuCount::Count(n as u32)),
                        (_, Some("all")) => Some(GpuCount::All),
                        _ => {
                            ctx.error(
                                val,
                                format!("`{sub}`: a number of GPUs (at least 1) or `all`"),
                            );
                            None
                        }
                    }
                }
                "device_ids" => r.device_ids = ctx.strings(val, &sub, notes),
                "capabilities" => r.capabilities = ctx.strings(val, &sub, notes),
                "options" => notes.push(Note::new(
                    k.at.line,
                    sub,
                    "not carried over: driver options are not in the container table",
                )),
                other => notes.push(Note::new(
                    k.at.line,
                    sub,
                    format!("not carried over: `{other}` is not a key of a device request"),
                )),
            }
        }
        let gpu = r.capabilities.is_empty() || r.capabilities.iter().any(|c| c == "gpu");
        if !gpu {
            notes.push(Note::new(
                item.at.line,
                ikey,
                "not carried over: a device request that is not for GPUs",
            ));
        } else if kept.is_some() {
            notes.push(Note::new(
                item.at.line,
                ikey,
                "not carried over: the container table takes one GPU request",
            ));
        } else {
            if !r.device_ids.is_empty() && r.count.is_some() {
                ctx.error(
                    item,
                    format!("`{ikey}`: `count` and `device_ids` together (compose refuses it too)"),
                );
            }
            kept = Some(r);
        }
    }
    kept
}

/// `secrets`: names, or `{ source, target, uid, gid, mode }`; each is mounted at
/// `/run/secrets/<source>`.
fn secrets(ctx: &mut Ctx, v: &Node, notes: &mut Vec<Note>) -> Vec<String> {
    let Some(items) = v.as_seq() else {
        ctx.error(v, format!("`secrets` must be a list, not {}", v.kind()));
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let key = format!("secrets[{i}]");
        let source = if item.as_map().is_some() {
            let source = item.get("source").and_then(|s| ctx.string(s, &key, notes));
            for (k, val) in item.as_map().unwrap_or_default() {
                match k.key_text() {
                    "source" => {}
                    "target" if val.as_str() == source.as_deref() => {}
                    other => notes.push(Note::new(
                        k.at.line,
                        format!("{key}.{other}"),
                        format!("not carried over: the secret is mounted at /run/secrets/{} (mode 0400)", source.as_deref().unwrap_or("NAME")),
                    )),
                }
            }
            source
        } else {
            ctx.string(item, &key, notes)
        };
        let Some(source) = source else {
            ctx.error(item, format!("`{key}` needs `source`"));
            continue;
        };
        if !ctx.secrets.contains_key(&source) {
            ctx.error(item, format!("`{key}`: secret `{source}` is not declared in the top-level `secrets` (compose refuses it too)"));
        }
        out.push(source);
    }
    out
}

/// `network_mode` and `networks`.
fn network(
    ctx: &mut Ctx,
    mode: Option<(&Node, &Node)>,
    networks: Option<(&Node, &Node)>,
    c: &mut ContainerSpec,
    notes: &mut Vec<Note>,
) {
    if let Some((k, v)) = mode {
        match ctx.string(v, "network_mode", notes).as_deref() {
            Some(m @ ("host" | "bridge")) => c.network = Some(m.to_string()),
            Some(other) => notes.push(Note::new(
                k.at.line,
                "network_mode",
                format!("`{other}` not carried over: the container table joins `bridge`, `host` or a named network"),
            )),
            None => {}
        }
    }
    let Some((k, v)) = networks else { return };
    let joined = ctx.names(v, "networks");
    let named: Vec<&(String, &Node, Option<&Node>)> =
        joined.iter().filter(|(n, _, _)| n != "default").collect();
    for (n, _, settings) in &joined {
        if let Some(s) = settings.filter(|s| !s.is_null()) {
            for (sk, _) in s.as_map().unwrap_or_default() {
                notes.push(Note::new(
                    sk.at.line,
                    format!("networks.{n}.{}", sk.key_text()),
                    "not carried over: per-network settings (aliases, addresses) are not in the container table",
                ));
            }
        }
    }
    match named.as_slice() {
        [] => {}
        [(n, at, _)] if c.network.is_none() => {
            let declared = ctx.networks.get(n).cloned();
            match declared {
                Some(d) if d.external => {
                    c.network = Some(d.name.clone().unwrap_or_else(|| n.clone()));
                }
                Some(d) => {
                    let engine = d.name.clone().unwrap_or_else(|| format!("{}_{n}", ctx.project));
                    notes.push(Note::new(
                        at.at.line,
                        format!("networks.{n}"),
                        format!("not carried over: compose creates network `{engine}` at `up`; flotilla joins an existing network only: create it and write container.network = \"{engine}\""),
                    ));
                }
                None => ctx.error(at, format!("network `{n}` is not declared in the top-level `networks` (compose refuses it too)")),
            }
        }
        _ => {
            notes.push(Note::new(
                k.at.line,
                "networks",
                format!(
                "not carried over: the container table joins one network; this service joins {}",
                named.iter().map(|(n, _, _)| format!("`{n}`")).collect::<Vec<_>>().join(", ")
            ),
            ))
        }
    }
}

/// Well-known ports of services that do not speak HTTP, by container port.
const KNOWN_PORTS: &[(u16, &str)] = &[
    (5432, "postgres"),
    (3306, "mysql"),
    (6379, "redis"),
    (27017, "mongodb"),
    (5672, "amqp"),
    (11211, "memcached"),
    (6334, "grpc"),
    (9000, "minio"),
];

/// One endpoint per published TCP port, as clients on this host reach it, and the
/// name of the one the health check's GET goes to. Names: the port's own (long
/// syntax `name`), else `http` for the health-checked port, else a well-known name by
/// container port (`postgres`…), else `http` for the first other, `port-<target>`
/// for the rest. `http`/`https` endpoints are URLs; the others `host:port`.
fn endpoints(
    ports: &[Published],
    get: Option<&health::HttpGet>,
) -> (BTreeMap<String, String>, Option<String>) {
    let mut out = BTreeMap::new();
    let mut probe = None;
    let tcp: Vec<&Published> = ports
        .iter()
        .filter(|p| {
            p.port
                .protocol
                .is_none_or(|pr| pr == flotilla_model::inventory::PortProtocol::Tcp)
        })
        .collect();
    let mut names: Vec<Option<String>> = tcp
        .iter()
        .map(|p| p.name.clone().filter(|n| crate::valid_name(n)))
        .collect();
    // The health-checked port first.
    if let Some(get) = get {
        if let Some(i) = tcp.iter().position(|p| p.port.target.0 == get.port) {
            let scheme = if get.https { "https" } else { "http" };
            if names[i].is_none() && !names.iter().any(|n| n.as_deref() == Some(scheme)) {
                names[i] = Some(scheme.into());
            }
            probe = names[i].clone();
        }
    }
    for (i, p) in tcp.iter().enumerate() {
        if names[i].is_some() {
            continue;
        }
        let known = KNOWN_PORTS
            .iter()
            .find(|(port, _)| *port == p.port.target.0)
            .map(|(_, n)| n.to_string());
        let taken =
            |n: &str, names: &[Option<String>]| names.iter().any(|x| x.as_deref() == Some(n));
        names[i] = Some(match known {
            Some(k) if !taken(&k, &names) => k,
            _ if !taken("http", &names)
                && p.app_protocol.as_deref().is_none_or(|a| a == "http") =>
            {
                "http".into()
            }
            _ => format!("port-{}", p.port.target.0),
        });
    }
    for (p, name) in tcp.iter().zip(names) {
        let name = name.unwrap_or_default();
        let host = match p.port.host_ip.as_deref() {
            None | Some("0.0.0.0") | Some("") => "127.0.0.1".to_string(),
            Some("::") => "[::1]".to_string(),
            Some(ip) if ip.contains(':') => format!("[{ip}]"),
            Some(ip) => ip.to_string(),
        };
        let scheme = match (name.as_str(), p.app_protocol.as_deref()) {
            (_, Some(a @ ("http" | "https"))) => Some(a),
            ("http", _) => Some("http"),
            ("https", _) => Some("https"),
            _ => None,
        };
        let value = match scheme {
            Some(s) => format!("{s}://{host}:{}", p.port.published.0),
            None => format!("{host}:{}", p.port.published.0),
        };
        out.insert(name, value);
    }
    (out, probe)
}

#[cfg(test)]
mod tests {
    use super::qualify;

    #[test]
    fn images_are_written_in_full() {
        assert_eq!(qualify("postgres:16"), "docker.io/library/postgres:16");
        assert_eq!(qualify("ollama/ollama"), "docker.io/ollama/ollama");
        assert_eq!(
            qualify("ghcr.io/open-webui/open-webui:main"),
            "ghcr.io/open-webui/open-webui:main"
        );
        assert_eq!(qualify("localhost/app:1"), "localhost/app:1");
        assert_eq!(qualify("registry:5000/app"), "registry:5000/app");
    }
}
