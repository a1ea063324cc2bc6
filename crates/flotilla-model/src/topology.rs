//! The validated topology: every component resolved (active profile applied, template
//! expanded, `${...}` references substituted, defaults filled) and the dependency DAG
//! indexed for the planner.
//!
//! A `Topology` only comes out of [`crate::validate`], so its invariants hold: every
//! host, dependency, endpoint and stack member named exists, and the graph is acyclic.

use crate::inventory::{
    AdapterKind, ContainerSpec, HostRole, KubernetesSpec, LaunchdSpec, Owner, RestartPolicy,
    SystemdSpec, TransportKind, TunnelDirection,
};
use crate::values::{Endpoint, EnvValue, HumanDuration, Signal, StatusRange};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Dense index of a component inside a [`Topology`] (its position in name order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ComponentId(pub u32);

impl ComponentId {
    /// As a `usize` index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A validated host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// Address or SSH alias (the name when not given).
    pub address: String,
    /// The container engine's API (`unix:///PATH`), when declared (serialised only
    /// then, so topologies without containers keep their digests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_api: Option<String>,
    /// SSH private key file (on the machine that connects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// A Kubernetes cluster's kubeconfig file and context (transport `kubernetes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<Cluster>,
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Its name.
    pub name: String,
    /// `<os>-<arch>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// SSH port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// What it may receive of a revision (serialised only when not `component`, so
    /// topologies without roles keep their digests).
    #[serde(default, skip_serializing_if = "HostRole::is_default")]
    pub role: HostRole,
    /// Extra OpenSSH client options (`-o Key=Value`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ssh_options: BTreeMap<String, String>,
    /// State directory on the host (absolute), when not the remote default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<String>,
    /// How it is reached.
    pub transport: TransportKind,
    /// SSH user.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

impl Host {
    /// Whether steps and observations of its components are carried to it by a
    /// transport (`ssh`, or `agent` through the authority) rather than run by the
    /// executor of this process.
    pub fn is_remote(&self) -> bool {
        matches!(self.transport, TransportKind::Ssh | TransportKind::Agent)
    }
}

/// Where a Kubernetes cluster's API server is found: a kubeconfig file and one of its
/// contexts (kubectl's terms; <https://kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig/>).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Cluster {
    /// The kubeconfig file (`~/` is the home of the machine Flotilla runs on; a
    /// relative path as declared is made relative to the inventory's directory when
    /// the inventory is loaded); `None`: `$KUBECONFIG`, else `~/.kube/config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<String>,
    /// The context; `None`: the kubeconfig's `current-context`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The namespace components use unless they name their own (`default` when not
    /// declared).
    pub namespace: String,
}

/// A resolved restart policy (see [`crate::inventory::RestartSpec`]), defaults
/// filled: who supervises follows from the adapter (the host's agent for `process`
/// and `ssh-tunnel`, the native owner for `systemd` and `launchd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restart {
    /// Delay before the first restart in a row, in milliseconds (≥ 1).
    pub backoff_ms: u64,
    /// The longest delay between restarts, in milliseconds (≥ `backoff_ms`).
    pub max_backoff_ms: u64,
    /// Restarts in a row after which supervision gives up.
    pub max_restarts: u32,
    /// When to restart.
    pub policy: RestartPolicy,
}

impl Restart {
    /// The delay before restart number `attempt` of a series (0 for the first), in
    /// milliseconds: `backoff_ms · 2^attempt`, at most `max_backoff_ms`.
    pub fn delay_ms(&self, attempt: u32) -> u64 {
        let factor = 1u64.checked_shl(attempt.min(63)).unwrap_or(u64::MAX);
        self.backoff_ms
            .saturating_mul(factor)
            .min(self.max_backoff_ms)
    }

    /// The time the whole series of `max_restarts` delays takes, in milliseconds
    /// (the sum of [`Restart::delay_ms`] over every attempt): a crash loop that makes
    /// `max_restarts` restarts within it has used up its budget.
    pub fn window_ms(&self) -> u64 {
        (0..self.max_restarts).fold(0u64, |sum, i| sum.saturating_add(self.delay_ms(i)))
    }
}

/// A resolved connection: this component uses `component`'s `endpoint` at `url`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Connection {
    /// The component providing the endpoint.
    pub component: String,
    /// The endpoint's name on that component.
    pub endpoint: String,
    /// The endpoint's resolved URL.
    pub url: String,
}

/// What a probe checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Check {
    /// The component's process is alive.
    Process,
    /// A TCP connection to `address` is accepted.
    Tcp {
        /// `host:port` dialled.
        address: String,
        /// The endpoint it was resolved from; `None` when the address was given
        /// inline (`tcp = { address = "host:port" }`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        endpoint: Option<String>,
        /// The connection must not be closed by the peer within this time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stays_open: Option<HumanDuration>,
    },
    /// An HTTP GET answers as expected.
    Http {
        /// Text the body must contain.
        #[serde(skip_serializing_if = "Option::is_none")]
        body_contains: Option<String>,
        /// The endpoint it was resolved from; `None` when the URL was given inline
        /// (`http = { url = "http://…" }`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        endpoint: Option<String>,
        /// Expected value at the pointer.
        #[serde(skip_serializing_if = "Option::is_none")]
        json_equals: Option<serde_json::Value>,
        /// JSON Pointer that must exist (and equal `json_equals` when set).
        #[serde(skip_serializing_if = "Option::is_none")]
        json_pointer: Option<String>,
        /// Accepted statuses.
        status: StatusRange,
        /// Full URL requested.
        url: String,
    },
    /// A command exits 0.
    Exec {
        /// argv.
        command: Vec<String>,
    },
    /// A full request answers as expected.
    Request {
        /// Raw body.
        #[serde(skip_serializing_if = "Option::is_none")]
        body: Option<String>,
        /// Text the body must contain.
        #[serde(skip_serializing_if = "Option::is_none")]
        body_contains: Option<String>,
        /// `component.endpoint` the request goes to.
        endpoint: String,
        /// Headers (secret values by name only).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers: BTreeMap<String, EnvValue>,
        /// JSON body.
        #[serde(skip_serializing_if = "Option::is_none")]
        json: Option<serde_json::Value>,
        /// Expected value at the pointer.
        #[serde(skip_serializing_if = "Option::is_none")]
        json_equals: Option<serde_json::Value>,
        /// JSON Pointer that must exist.
        #[serde(skip_serializing_if = "Option::is_none")]
        json_pointer: Option<String>,
        /// HTTP method.
        method: String,
        /// Accepted statuses.
        status: StatusRange,
        /// Full URL requested.
        url: String,
    },
    /// A log line matches `pattern`.
    Log {
        /// Regex.
        pattern: String,
    },
    /// The container engine reports the component's container `healthy`.
    ContainerHealth,
}

impl Check {
    /// What the check looks at, in a few words for plans and messages:
    /// `GET http://127.0.0.1:8080/health`, `connect 127.0.0.1:5432`, `exec pg_isready`,
    /// `log /listening/`, `process`.
    pub fn target(&self) -> String {
        match self {
            Check::Process => "process".into(),
            Check::Tcp { address, .. } => format!("connect {address}"),
            Check::Http { url, .. } => format!("GET {url}"),
            Check::Request { method, url, .. } => format!("{method} {url}"),
            Check::Exec { command } => format!("exec {}", command.join(" ")),
            Check::Log { pattern } => format!("log /{pattern}/"),
            Check::ContainerHealth => "container health".into(),
        }
    }
}

/// A probe with its timing defaults filled (Kubernetes' defaults, except a 1 s period).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// What it checks.
    pub check: Check,
    /// Consecutive failures to fail (default 3).
    pub failure_threshold: u32,
    /// Wait before the first check (default 0s).
    pub initial_delay: HumanDuration,
    /// Time between checks (default 1s).
    pub period: HumanDuration,
    /// Consecutive passes to pass (default 1).
    pub success_threshold: u32,
    /// Time allowed for one check (default 1s).
    pub timeout: HumanDuration,
}

/// How a component is stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stop {
    /// Time before `SIGKILL`.
    pub grace_period: HumanDuration,
    /// First signal.
    pub signal: Signal,
}

/// A resolved SSH port forward.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tunnel {
    /// Address the forward listens on.
    pub bind: String,
    /// `-L` or `-R`.
    pub direction: TunnelDirection,
    /// Port the forward listens on.
    pub listen_port: u16,
    /// `host:port` the forward connects to, as seen from the far end.
    pub target_address: String,
    /// The forwarded component.
    pub target_component: String,
    /// The forwarded endpoint's name.
    pub target_endpoint: String,
    /// Host `ssh` connects to.
    pub via: String,
}

/// A fully resolved component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Component {
    /// Adapter, for managed components only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adapter: Option<AdapterKind>,
    /// argv (empty for external components and unit/label-based adapters).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Connections by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub connections: BTreeMap<String, Connection>,
    /// The container, for adapter `container`, defaults filled (`name`, `pull`,
    /// `restart`, `network`, each port's `host_ip` and `protocol`, `stop_signal` from
    /// `stop.signal` when declared there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerSpec>,
    /// The container engine's API (`unix:///PATH`) from its host's `container_api`,
    /// for a container component whose host declares one (else the engine is found
    /// where the step runs: `$DOCKER_HOST`, else `/var/run/docker.sock`). Not part of
    /// the runtime config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_api: Option<String>,
    /// The cluster of a `kubernetes` component's host (kubeconfig and context). Not
    /// part of the runtime config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<Cluster>,
    /// The workload, for adapter `kubernetes`, defaults filled (`kind`, `name`,
    /// `namespace`, `replicas`, each port's `name`, `service_port` and `protocol`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesSpec>,
    /// Working directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Every upstream component (explicit, from connections, from a tunnel), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// What it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Endpoints by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub endpoints: BTreeMap<String, Endpoint>,
    /// Environment (secret values by name only; `${env.NAME}` taken from the
    /// environment Flotilla runs in when it starts).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, EnvValue>,
    /// A dotenv file read at start, relative to the inventory's directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_file: Option<String>,
    /// The host it runs on.
    pub host: String,
    /// Files that are part of its runtime identity besides the executable (relative
    /// to `cwd`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub identity_files: Vec<String>,
    /// Variables inherited from the environment Flotilla runs in, beyond the base set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inherit_env: Vec<String>,
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// launchd job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launchd: Option<LaunchdSpec>,
    /// Liveness probe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub liveness: Option<Probe>,
    /// Its name.
    pub name: String,
    /// `managed` or `external`.
    pub owner: Owner,
    /// Active profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Readiness probe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Probe>,
    /// The release its program comes from and the install root that keeps it (not
    /// part of the runtime config: switching a release changes the measured runtime
    /// identity, not the config identity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<crate::inventory::ReleaseSpec>,
    /// Restart policy (managed components only; absent: never restarted on its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<Restart>,
    /// Stop settings (managed components only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    /// systemd unit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub systemd: Option<SystemdSpec>,
    /// Template it was expanded from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// SSH forward.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<Tunnel>,
}

impl Component {
    /// The effective runtime config (host, owner, adapter, command, env with secret
    /// names, cwd, endpoints, restart policy, stop, tunnel, unit, job, container) as canonical JSON: what "config
    /// drift" compares. Description, labels and probes are left out: changing them
    /// does not call for a restart.
    pub fn runtime_config(&self) -> String {
        crate::digest::canonical_json(&self.runtime())
    }

    /// `sha256:` digest of [`Component::runtime_config`].
    pub fn config_digest(&self) -> String {
        crate::digest::digest_of(&self.runtime())
    }

    fn runtime(&self) -> impl Serialize + '_ {
        #[derive(Serialize)]
        struct Runtime<'a> {
            adapter: Option<AdapterKind>,
            command: &'a [String],
            // Left out when absent, so configs without it keep their digests.
            #[serde(skip_serializing_if = "Option::is_none")]
            container: &'a Option<ContainerSpec>,
            cwd: &'a Option<String>,
            endpoints: &'a BTreeMap<String, Endpoint>,
            env: &'a BTreeMap<String, EnvValue>,
            env_file: &'a Option<String>,
            host: &'a str,
            inherit_env: &'a [String],
            // Left out when absent, so configs without it keep their digests.
            #[serde(skip_serializing_if = "Option::is_none")]
            kubernetes: &'a Option<KubernetesSpec>,
            launchd: &'a Option<LaunchdSpec>,
            owner: Owner,
            // Left out when absent, so configs without it keep their digests.
            #[serde(skip_serializing_if = "Option::is_none")]
            restart: &'a Option<Restart>,
            stop: &'a Option<Stop>,
            systemd: &'a Option<SystemdSpec>,
            tunnel: &'a Option<Tunnel>,
        }
        Runtime {
            adapter: self.adapter,
            command: &self.command,
            container: &self.container,
            cwd: &self.cwd,
            endpoints: &self.endpoints,
            env: &self.env,
            env_file: &self.env_file,
            host: &self.host,
            inherit_env: &self.inherit_env,
            kubernetes: &self.kubernetes,
            launchd: &self.launchd,
            owner: self.owner,
            restart: &self.restart,
            stop: &self.stop,
            systemd: &self.systemd,
            tunnel: &self.tunnel,
        }
    }

    /// The path its command should start with when it declares a release:
    /// `<root>/current/<name>`.
    pub fn release_program(&self) -> Option<String> {
        self.release
            .as_ref()
            .map(|r| format!("{}/current/{}", r.root.trim_end_matches('/'), r.name))
    }

    /// Whether Flotilla may start, stop or restart it.
    pub fn is_managed(&self) -> bool {
        self.owner == Owner::Managed
    }
}

/// A validated stack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stack {
    /// Members, as declared.
    pub components: Vec<String>,
    /// What it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its name.
    pub name: String,
    /// End-to-end checks run after `up` (request or exec checks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readiness: Vec<Probe>,
}

/// The validated dependency graph of components across hosts.
#[derive(Debug, Clone, Serialize)]
pub struct Topology {
    /// Components in name order; a component's [`ComponentId`] is its index here.
    pub components: Vec<Component>,
    #[serde(skip)]
    downstream: Vec<Vec<ComponentId>>,
    /// Hosts by name.
    pub hosts: BTreeMap<String, Host>,
    /// The format version of the inventory it was validated from
    /// ([`crate::inventory::INVENTORY_VERSION`] at most). Left out of the revision's
    /// JSON when 1, as an inventory leaves it out: revisions made before versions
    /// existed keep their digests.
    #[serde(
        default = "crate::inventory::first_version",
        skip_serializing_if = "crate::inventory::is_first_version"
    )]
    pub inventory_version: u32,
    /// The project the inventory belongs to: its journal, instances, locks and logs
    /// are kept apart from every other project's ([`Topology::set_project`]; the
    /// inventory's `project` key until the caller decides). Declared after `hosts`:
    /// fields serialise in declaration order, and canonical JSON sorts keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(skip)]
    digest: std::sync::OnceLock<String>,
    #[serde(skip)]
    index: HashMap<String, ComponentId>,
    /// Each host's components, in name order (what a host's snapshot is cut from).
    #[serde(skip)]
    by_host: HashMap<String, Vec<ComponentId>>,
    #[serde(skip)]
    order: Vec<ComponentId>,
    /// Stacks by name.
    pub stacks: BTreeMap<String, Stack>,
    #[serde(skip)]
    upstream: Vec<Vec<ComponentId>>,
}

/// What a target name refers to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target<'a> {
    /// A component.
    Component(ComponentId),
    /// A stack.
    Stack(&'a Stack),
}

impl Topology {
    /// Builds the indices. `components` must be sorted by name, every `depends_on`
    /// name must exist, and the graph must be acyclic (validation guarantees all three).
    pub(crate) fn build(
        hosts: BTreeMap<String, Host>,
        components: Vec<Component>,
        stacks: BTreeMap<String, Stack>,
        order: Vec<ComponentId>,
    ) -> Topology {
        let index: HashMap<String, ComponentId> = components
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.clone(), ComponentId(i as u32)))
            .collect();
        let mut upstream = vec![Vec::new(); components.len()];
        let mut downstream = vec![Vec::new(); components.len()];
        let mut by_host: HashMap<String, Vec<ComponentId>> = HashMap::new();
        for (i, c) in components.iter().enumerate() {
            by_host
                .entry(c.host.clone())
                .or_default()
                .push(ComponentId(i as u32));
            for d in &c.depends_on {
                let d = index[d];
                upstream[i].push(d);
                downstream[d.index()].push(ComponentId(i as u32));
            }
        }
        Topology {
            hosts,
            components,
            project: None,
            inventory_version: crate::inventory::INVENTORY_VERSION,
            stacks,
            digest: std::sync::OnceLock::new(),
            index,
            by_host,
            upstream,
            downstream,
            order,
        }
    }

    /// The project's name: [`Topology::project`], else [`DEFAULT_PROJECT`].
    pub fn project_name(&self) -> &str {
        self.project.as_deref().unwrap_or(DEFAULT_PROJECT)
    }

    /// Sets the project (e.g. from `-p`, else the inventory's key, else its directory's
    /// name). Call it before anything reads [`Topology::digest`], which covers it.
    pub fn set_project(&mut self, project: impl Into<String>) {
        self.project = Some(project.into());
        self.digest = std::sync::OnceLock::new();
    }

    /// `sha256:` digest of the canonical JSON of this topology (its components, hosts
    /// and stacks): what a plan records so a later apply can refuse a stale plan.
    /// Computed on first use.
    pub fn digest(&self) -> &str {
        self.digest.get_or_init(|| crate::digest::digest_of(self))
    }

    /// The id of the component named `name`.
    pub fn id(&self, name: &str) -> Option<ComponentId> {
        self.index.get(name).copied()
    }

    /// The component with this id.
    pub fn component(&self, id: ComponentId) -> &Component {
        &self.components[id.index()]
    }

    /// What `name` names: a component or a stack (validation forbids both).
    pub fn target(&self, name: &str) -> Option<Target<'_>> {
        if let Some(id) = self.id(name) {
            return Some(Target::Component(id));
        }
        self.stacks.get(name).map(Target::Stack)
    }

    /// Direct upstream dependencies of `id`.
    pub fn upstream(&self, id: ComponentId) -> &[ComponentId] {
        &self.upstream[id.index()]
    }

    /// The names of `target`'s components (a component, or a stack's members) and of
    /// everything they depend on, directly or not: what `status TARGET` shows.
    pub fn with_upstream(&self, target: &Target<'_>) -> Vec<String> {
        let mut todo: Vec<ComponentId> = match target {
            Target::Component(id) => vec![*id],
            Target::Stack(s) => s.components.iter().filter_map(|n| self.id(n)).collect(),
        };
        let mut seen = vec![false; self.len()];
        let mut out = Vec::new();
        while let Some(id) = todo.pop() {
            if !std::mem::replace(&mut seen[id.index()], true) {
                out.push(self.component(id).name.clone());
                todo.extend(self.upstream(id).iter().copied());
            }
        }
        out
    }

    /// Direct dependents of `id`.
    pub fn downstream(&self, id: ComponentId) -> &[ComponentId] {
        &self.downstream[id.index()]
    }

    /// All components in a dependency order (dependencies first; ties by name).
    pub fn order(&self) -> &[ComponentId] {
        &self.order
    }

    /// Number of components.
    pub fn len(&self) -> usize {
        self.components.len()
    }

    /// Whether there are no components.
    pub fn is_empty(&self) -> bool {
        self.components.is_empty()
    }
}

/// A host's role-filtered view of a topology, as sent to that host: its own
/// components (with the endpoints they connect to already resolved into their
/// connections and environment), its own host entry and the hosts its tunnels go
/// through. No stacks, no other host's components, and no secret values (a topology
/// only ever holds secret *names*). Fields are declared in sorted order, so it
/// serialises as canonical JSON (RFC 8785) like the topology itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The host's components, in name order; `depends_on` keeps only names in here.
    pub components: Vec<Component>,
    /// The host it is for.
    pub host: String,
    /// That host and the hosts its tunnels go through, by name.
    pub hosts: BTreeMap<String, Host>,
    /// The project: the host keeps its state for it apart from other projects'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Digest of the whole topology it was cut from.
    pub topology_digest: String,
}

/// Why a [`Snapshot`] cannot be turned back into a [`Topology`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// Components are not in strict name order (or a name repeats).
    #[error("snapshot components are not in strict name order at `{0}`")]
    Order(String),
    /// A component names a host or dependency the snapshot does not carry.
    #[error("snapshot component `{component}` refers to `{missing}`, which it does not carry")]
    Missing {
        /// The component.
        component: String,
        /// The host or dependency.
        missing: String,
    },
    /// The dependencies form a cycle.
    #[error("snapshot dependencies form a cycle through `{0}`")]
    Cycle(String),
}

impl Topology {
    /// The snapshot for `host`: see [`Snapshot`]. An unknown host gives an empty one.
    pub fn snapshot(&self, host: &str) -> Snapshot {
        // Through the per-host index: cutting every host's snapshot stays linear in
        // the size of the topology (a fleet of 10,000 hosts after each publish).
        let mut components: Vec<Component> = self
            .by_host
            .get(host)
            .map(|ids| {
                ids.iter()
                    .map(|id| self.components[id.index()].clone())
                    .collect()
            })
            .unwrap_or_default();
        let names: std::collections::BTreeSet<String> =
            components.iter().map(|c| c.name.clone()).collect();
        let mut hosts = BTreeMap::new();
        for c in &mut components {
            c.depends_on.retain(|d| names.contains(d));
            if let Some(t) = &c.tunnel {
                if let Some(h) = self.hosts.get(&t.via) {
                    hosts.insert(t.via.clone(), h.clone());
                }
            }
        }
        if let Some(h) = self.hosts.get(host) {
            hosts.insert(host.to_string(), h.clone());
        }
        Snapshot {
            host: host.to_string(),
            hosts,
            components,
            project: self.project.clone(),
            topology_digest: self.digest().to_string(),
        }
    }

    /// Rebuilds a topology from a snapshot (on the host it was cut for), checking the
    /// invariants [`Topology`] relies on.
    ///
    /// # Errors
    /// [`SnapshotError`] when components are out of order, refer to what the
    /// snapshot lacks, or form a cycle.
    pub fn from_snapshot(s: Snapshot) -> Result<Topology, SnapshotError> {
        for w in s.components.windows(2) {
            if w[0].name >= w[1].name {
                return Err(SnapshotError::Order(w[1].name.clone()));
            }
        }
        let index: HashMap<&str, usize> = s
            .components
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.as_str(), i))
            .collect();
        let mut edges = Vec::new();
        for (i, c) in s.components.iter().enumerate() {
            if !s.hosts.contains_key(&c.host) {
                return Err(SnapshotError::Missing {
                    component: c.name.clone(),
                    missing: c.host.clone(),
                });
            }
            for d in &c.depends_on {
                let Some(&j) = index.get(d.as_str()) else {
                    return Err(SnapshotError::Missing {
                        component: c.name.clone(),
                        missing: d.clone(),
                    });
                };
                edges.push((j, i));
            }
        }
        // Kahn's algorithm; ties by name (indices are in name order).
        let order = match crate::toposort::topo_order(s.components.len(), edges) {
            Ok(order) => order.into_iter().map(|i| ComponentId(i as u32)).collect(),
            Err(left) => {
                let stuck = left
                    .first()
                    .map(|&i| s.components[i].name.clone())
                    .unwrap_or_default();
                return Err(SnapshotError::Cycle(stuck));
            }
        };
        let mut t = Topology::build(s.hosts, s.components, BTreeMap::new(), order);
        t.project = s.project;
        Ok(t)
    }
}

/// Whether `name` is a usable project name: 1 to 63 characters of lowercase ASCII
/// letters, digits, `-` and `_`, starting with a letter or digit (docker compose's
/// rule for its project names).
pub fn valid_project_name(name: &str) -> bool {
    name.len() <= 63
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// The project of a topology or snapshot that names none.
pub const DEFAULT_PROJECT: &str = "default";

/// The project name a directory name gives (as compose does): lowercased, every
/// character outside `[a-z0-9_-]` dropped, leading `-`/`_` trimmed; `default` when
/// nothing is left.
pub fn project_from_dir_name(dir: &str) -> String {
    let name: String = dir
        .to_lowercase()
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '_')
        .collect();
    let name = name.trim_start_matches(['-', '_']);
    let name: String = name.chars().take(63).collect();
    if name.is_empty() {
        "default".into()
    } else {
        name
    }
}

/// What differs between two runtime configs ([`Component::runtime_config`] JSON),
/// key by key: `command[2]: "18752" → "18755"`, `env.MODEL: (none) → "small"`, in key
/// order. Unparsable input yields one line saying the configs differ.
pub fn config_changes(before: &str, after: &str) -> Vec<String> {
    fn flatten(prefix: &str, v: &serde_json::Value, out: &mut BTreeMap<String, String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    flatten(&key, v, out);
                }
            }
            serde_json::Value::Array(a) => {
                for (i, v) in a.iter().enumerate() {
                    flatten(&format!("{prefix}[{i}]"), v, out);
                }
                if a.is_empty() {
                    out.insert(prefix.to_string(), "[]".into());
                }
            }
            serde_json::Value::Null => {}
            other => {
                out.insert(prefix.to_string(), other.to_string());
            }
        }
    }
    let (Ok(b), Ok(a)) = (
        serde_json::from_str::<serde_json::Value>(before),
        serde_json::from_str::<serde_json::Value>(after),
    ) else {
        return vec!["the effective config changed".into()];
    };
    let (mut fb, mut fa) = (BTreeMap::new(), BTreeMap::new());
    flatten("", &b, &mut fb);
    flatten("", &a, &mut fa);
    let keys: std::collections::BTreeSet<&String> = fb.keys().chain(fa.keys()).collect();
    keys.into_iter()
        .filter(|k| fb.get(*k) != fa.get(*k))
        .map(|k| {
            let show = |v: Option<&String>| v.cloned().unwrap_or_else(|| "(none)".into());
            format!("{k} {} → {}", show(fb.get(k)), show(fa.get(k)))
        })
        .collect()
}
