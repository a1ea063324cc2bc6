//! The inventory format: the declared desired state as written in `flotilla.toml`
//! (or the same document as JSON). These types are what the JSON Schema printed by
//! `flotilla schema` is generated from; unknown keys are errors everywhere.

use crate::values::{EnvValue, HumanDuration, Port, Signal, StatusRange};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The inventory format version this build writes and reads: an inventory declares
/// its own with `version = N` at the top (absent: 1). An older one is rewritten by
/// `flotilla config migrate`; a newer one is refused.
pub const INVENTORY_VERSION: u32 = 1;

/// The first inventory format version: what an absent `version` (or a revision's
/// absent `inventory_version`) means.
pub fn first_version() -> u32 {
    1
}

/// Whether `v` is the first version (left out of a revision's JSON).
pub(crate) fn is_first_version(v: &u32) -> bool {
    *v == 1
}

/// A whole inventory document.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    /// Optional JSON Schema reference, ignored (lets editors find the schema).
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// The inventory format version (an integer from 1; absent: 1). A version newer
    /// than this build reads ([`INVENTORY_VERSION`]) is refused; an older one is
    /// rewritten by `flotilla config migrate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub version: Option<u32>,
    /// The project this inventory belongs to (lowercase letters, digits, `-`, `_`);
    /// default: the inventory's directory name. Projects sharing a state directory
    /// never see, plan against or signal each other's processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Machines, by name. A host named `local` (transport `local`) exists implicitly.
    #[serde(default)]
    pub hosts: BTreeMap<String, HostSpec>,
    /// Components, by name.
    #[serde(default)]
    pub components: BTreeMap<String, ComponentSpec>,
    /// Stacks, by name.
    #[serde(default)]
    pub stacks: BTreeMap<String, StackSpec>,
}

/// How Flotilla reaches a host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TransportKind {
    /// This machine.
    #[default]
    Local,
    /// OpenSSH (honours `~/.ssh/config`).
    Ssh,
    /// The host's own `flotilla agent`, connected out to the authority
    /// (`flotilla serve`): its steps and observations go through the authority
    /// (`--server`), never over a direct connection.
    Agent,
    /// A Kubernetes cluster: its components (adapter `kubernetes`) are objects the
    /// adapter applies and watches through the cluster's API server, from where
    /// Flotilla runs, with a kubeconfig context (`kubeconfig`, `context`,
    /// `namespace`).
    Kubernetes,
}

impl TransportKind {
    /// The kebab-case name used in the inventory.
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::Local => "local",
            TransportKind::Ssh => "ssh",
            TransportKind::Agent => "agent",
            TransportKind::Kubernetes => "kubernetes",
        }
    }
}

/// What a host may receive of a revision (the role filter of snapshots).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum HostRole {
    /// Receives only its own snapshot: its components and, of other components, only
    /// the addresses its connections and tunnels need.
    #[default]
    Component,
    /// May also receive the whole (secret-free) topology, to plan from it.
    Control,
}

impl HostRole {
    /// Whether this is the default role (`component`).
    pub fn is_default(&self) -> bool {
        *self == HostRole::Component
    }
}

/// A machine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// `local` (default), `ssh`, `agent` (driven by its `flotilla agent` through
    /// the authority), or `kubernetes` (a cluster, reached through its API server).
    #[serde(default)]
    pub transport: TransportKind,
    /// `component` (default): the host receives only its own snapshot; `control`: it
    /// may also receive the whole secret-free topology.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<HostRole>,
    /// Address or `~/.ssh/config` alias; defaults to the host's name for `ssh` and
    /// `agent` (other hosts reach its endpoints at it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Login user for `ssh`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// SSH port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<Port>,
    /// Private key file for `ssh` (OpenSSH's `-i`; `~/` is this machine's home).
    /// With it, only that key is offered (`IdentitiesOnly=yes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// Further OpenSSH client options, as `ssh -o Key=Value` takes them (see
    /// `ssh_config(5)`), e.g. `{ ProxyJump = "bastion", UserKnownHostsFile = "~/.ssh/fleet_hosts" }`.
    /// They take precedence over `~/.ssh/config`. Host keys are always checked:
    /// `StrictHostKeyChecking` other than `yes` is refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ssh_options: BTreeMap<String, String>,
    /// The host's state directory (an absolute path on that host); default: the
    /// remote `flotilla`'s own default (`$FLOTILLA_STATE_DIR`, `$XDG_STATE_HOME/flotilla`
    /// or `~/.local/state/flotilla` there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<String>,
    /// `<os>-<arch>`: `linux-x86_64`, `linux-aarch64`, `darwin-aarch64`, `darwin-x86_64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// Free-form labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The container engine's API on this host (the Docker Engine API; Podman's
    /// Docker-compatible service works too), for components with adapter
    /// `container`: `unix:///PATH` only. Default: `$DOCKER_HOST` where Flotilla runs
    /// the step, else `unix:///var/run/docker.sock`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_api: Option<String>,
    /// For transport `kubernetes`: the kubeconfig file (`~/` is this machine's home; a
    /// relative path is relative to the inventory's directory); default
    /// `$KUBECONFIG`, else `~/.kube/config` (kubectl's rules, one file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<String>,
    /// For transport `kubernetes`: the kubeconfig context naming the cluster and
    /// user; default: the kubeconfig's `current-context`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// For transport `kubernetes`: the namespace its components live in unless one
    /// names its own (`kubernetes.namespace`); default `default`. Flotilla never
    /// creates a namespace: one that does not exist is an error at apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Who owns a component's lifecycle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Owner {
    /// Flotilla starts and stops it through its adapter.
    #[default]
    Managed,
    /// Observed by its probes only, never mutated.
    External,
}

/// The native owner a managed component's lifecycle verbs map onto.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AdapterKind {
    /// A detached child process in its own session and process group.
    #[default]
    Process,
    /// A launchd job (macOS).
    Launchd,
    /// A systemd unit (Linux).
    Systemd,
    /// An OpenSSH port forward run as a managed process.
    SshTunnel,
    /// A container run by a container engine (Docker Engine API, or Podman's
    /// compatible service), described by the component's `container` table.
    Container,
    /// A workload (Deployment or StatefulSet) and its Service on a Kubernetes
    /// cluster (a host with transport `kubernetes`), described by the component's
    /// `kubernetes` table.
    Kubernetes,
}

impl AdapterKind {
    /// The kebab-case name used in the inventory.
    pub fn as_str(self) -> &'static str {
        match self {
            AdapterKind::Process => "process",
            AdapterKind::Launchd => "launchd",
            AdapterKind::Systemd => "systemd",
            AdapterKind::SshTunnel => "ssh-tunnel",
            AdapterKind::Container => "container",
            AdapterKind::Kubernetes => "kubernetes",
        }
    }
}

/// One independently managed service on one host.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ComponentSpec {
    /// One line saying what it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The host it runs on; default `local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// `managed` (default) or `external`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    /// Adapter for managed components; default `process`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<AdapterKind>,
    /// A built-in or user template supplying command, endpoints and probes from `params`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// The template's parameters (each template has its own schema).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, serde_json::Value>,
    /// argv: the program, then its arguments. `${...}` references are substituted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Environment variables of the component, over the base environment (see
    /// `inherit_env`). A value may take one from the environment Flotilla runs in
    /// explicitly: `"${env.NAME}"`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, EnvValue>,
    /// More variables to take from the environment Flotilla runs in, by name, beyond
    /// the base set (`PATH`, `HOME`, `USER`, `LOGNAME`, `SHELL`, `LANG`, `LC_ALL`,
    /// `TZ`, `TMPDIR`); nothing else is inherited. Absent ones are left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inherit_env: Vec<String>,
    /// A dotenv file (`NAME=value` lines, `#` comments, optional `export ` and
    /// quotes) read on the host when the component starts, relative to the
    /// inventory's directory; `env` overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_file: Option<String>,
    /// Working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// More files that are part of what runs (relative to `cwd`): a Python
    /// package's sources, a config the program reads once. Their digests are taken at
    /// start; a later change on disk is `stale-runtime` until a restart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub identity_files: Vec<String>,
    /// Named endpoints: URLs (`http://127.0.0.1:8080`) or `host:port`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub endpoints: BTreeMap<String, String>,
    /// Components that must be ready before this one starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// Endpoints of other components this one uses: `name = "component.endpoint"`.
    /// Each implies a dependency; `${connections.name}` gives its resolved URL.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub connections: BTreeMap<String, String>,
    /// The probe that says the component is ready (gates dependents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<ProbeSpec>,
    /// The probe that says a running component is still healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness: Option<ProbeSpec>,
    /// How to stop it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopSpec>,
    /// Named variants of command, env, endpoints, params and cwd.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub profiles: BTreeMap<String, ProfileSpec>,
    /// The active profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Free-form labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The forward, for adapter `ssh-tunnel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<TunnelSpec>,
    /// The job, for adapter `launchd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launchd: Option<LaunchdSpec>,
    /// The unit, for adapter `systemd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub systemd: Option<SystemdSpec>,
    /// The container, for adapter `container` (required there, refused elsewhere).
    /// `command` is then the container's `Cmd` (default: the image's), `env` its
    /// environment (literal values only: secrets go in `container.secrets`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerSpec>,
    /// The workload, for adapter `kubernetes` (required there, refused elsewhere).
    /// `command` is then the container's `args` (default: the image's `CMD`), `env`
    /// its environment (literal values only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesSpec>,
    /// Supervision: whether the component is restarted when it exits, and how fast.
    /// Without it Flotilla restarts nothing on its own. Not for `external`
    /// components, nor for a unit or plist Flotilla does not write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartSpec>,
    /// The release its program comes from (`flotilla release rollout NAME …`): the
    /// program is kept in the install root `root` (`<root>/versions/<version>-<sha12>/<name>`,
    /// `<root>/current`, `<root>/previous`) and the command runs
    /// `<root>/current/<name>`, so that a rollout of release `name` switches it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<ReleaseSpec>,
}

/// Where a component's program comes from: a release and the install root that keeps
/// its versions on the component's host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseSpec {
    /// The release name (a manifest's `name`, e.g. `llama-server`), also the program's
    /// file name in each version directory: `[A-Za-z0-9._+-]`, not `flotilla-agent`.
    pub name: String,
    /// The install root, an absolute path on the component's host (e.g. `/opt/llama`).
    pub root: String,
}

/// When a component that exits while it should run is restarted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    /// After an exit with a non-zero status or by a signal (default).
    #[default]
    OnFailure,
    /// After any exit, successful or not.
    Always,
    /// Never.
    Never,
}

impl RestartPolicy {
    /// The kebab-case name used in the inventory.
    pub fn as_str(self) -> &'static str {
        match self {
            RestartPolicy::OnFailure => "on-failure",
            RestartPolicy::Always => "always",
            RestartPolicy::Never => "never",
        }
    }
}

/// Supervision of a managed component (`process`, `ssh-tunnel`: by the host's
/// `flotilla agent`; `systemd`, `launchd`: written into the unit or plist Flotilla
/// generates, so the native owner restarts it — systemd as `Restart=`, `RestartSec=`
/// and a start limit, launchd as `KeepAlive` and `ThrottleInterval`; neither grows
/// the delay). A component stopped on purpose is never restarted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestartSpec {
    /// `on-failure` (default), `always` or `never`.
    #[serde(default)]
    pub policy: RestartPolicy,
    /// Delay before the first restart (default `1s`, at least 1ms); it doubles after
    /// each restart in a row, up to `max_backoff`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<HumanDuration>,
    /// The longest delay between restarts (default `5m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_backoff: Option<HumanDuration>,
    /// Restarts in a row after which supervision gives up (default 10): the component
    /// is left failed, with condition `attention` (a crash loop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<u32>,
}

/// A named variant of a component's runtime settings. Set keys replace the
/// component's (`command`, `cwd`) or are merged over them (`env`, `endpoints`, `params`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfileSpec {
    /// Replaces the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Merged over the environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, EnvValue>,
    /// Merged over the endpoints.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub endpoints: BTreeMap<String, String>,
    /// Merged over the template parameters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, serde_json::Value>,
    /// Replaces the working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// A probe: exactly one check (`process`, `tcp`, `http`, `exec`, `request`, `log`,
/// `container_health`) and its timing, in the manner of Kubernetes probes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProbeSpec {
    /// Passes while the component's process is alive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessCheck>,
    /// Passes when a TCP connection to an endpoint is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpCheck>,
    /// Passes when an HTTP GET answers as expected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpCheck>,
    /// Passes when a command exits 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecCheck>,
    /// Passes when a full request (method, headers, body) answers as expected: the end-to-end check of a route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<RequestCheck>,
    /// Passes when the component's log has a line matching a regex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogCheck>,
    /// Passes when the container engine reports the component's container `healthy`
    /// (its image's `HEALTHCHECK` or `container.healthcheck`); adapter `container` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_health: Option<ContainerHealthCheck>,
    /// Wait before the first check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_delay: Option<HumanDuration>,
    /// Time between checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<HumanDuration>,
    /// Time allowed for one check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
    /// Consecutive passes needed to count as passing (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_threshold: Option<u32>,
    /// Consecutive failures needed to count as failing (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_threshold: Option<u32>,
}

/// Process liveness check (no settings).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessCheck {}

/// TCP connect check: `endpoint` or `address`, exactly one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [{"required": ["endpoint"]}, {"required": ["address"]}]))]
pub struct TcpCheck {
    /// Name of one of the component's endpoints. Set this or `address`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// An address given inline instead of an endpoint: `host:port` (e.g.
    /// `"127.0.0.1:5432"`, `"[::1]:5432"`); may reference `${host.address}`,
    /// `${host.name}` and `${component.name}`. Set this or `endpoint`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Also require that the peer does not close the connection within this time
    /// after accepting it (e.g. `"250ms"`): what tells a live SSH forward from one
    /// whose far end is gone (`ssh` accepts, then closes when the remote connect
    /// fails).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stays_open: Option<HumanDuration>,
}

/// HTTP GET check: `endpoint` or `url`, exactly one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [{"required": ["endpoint"]}, {"required": ["url"]}]))]
pub struct HttpCheck {
    /// Name of one of the component's endpoints. Set this or `url`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// A URL given inline instead of an endpoint: `http://` or `https://`, a host, and
    /// a port unless the scheme's default (e.g. `"http://127.0.0.1:8080/health"`); may
    /// reference `${host.address}`, `${host.name}` and `${component.name}`. Set this
    /// or `endpoint`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Path appended to the endpoint, e.g. `/health` (with `url`, write the path in
    /// the URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Accepted statuses; default `200-299`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<StatusRange>,
    /// The body must contain this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_contains: Option<String>,
    /// A JSON Pointer (RFC 6901) into the body, compared with `json_equals`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_pointer: Option<String>,
    /// The value expected at `json_pointer`; without it, the pointer must merely exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_equals: Option<serde_json::Value>,
}

/// Container health check (no settings): the engine's health status of the
/// component's container (`State.Health.Status` in the Docker Engine API) is `healthy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContainerHealthCheck {}

/// Command check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecCheck {
    /// argv; exit status 0 passes.
    pub command: Vec<String>,
}

/// End-to-end request check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestCheck {
    /// An endpoint of this component (`http`) or of another (`proxy.http`).
    pub endpoint: String,
    /// HTTP method; default `GET`, or `POST` when a body is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Path appended to the endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Request headers. Values may reference secrets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, EnvValue>,
    /// Raw request body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// JSON request body (sets `Content-Type: application/json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<serde_json::Value>,
    /// Accepted statuses; default `200-299`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<StatusRange>,
    /// The body must contain this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_contains: Option<String>,
    /// A JSON Pointer (RFC 6901) that must exist in the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_pointer: Option<String>,
    /// The value expected at `json_pointer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_equals: Option<serde_json::Value>,
}

/// Log line check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogCheck {
    /// A regular expression (Rust `regex` syntax) matched against each log line.
    pub pattern: String,
}

/// How a managed component is stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StopSpec {
    /// Signal sent first (default `SIGTERM`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<Signal>,
    /// Time allowed before `SIGKILL` (default `10s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period: Option<HumanDuration>,
}

/// Direction of an SSH port forward (OpenSSH's `-L` and `-R`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TunnelDirection {
    /// `-L`: listen on the component's host, forward through `via` to the target.
    #[default]
    Local,
    /// `-R`: listen on `via`, forward back to the target on the component's host.
    Remote,
}

/// An SSH port forward.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TunnelSpec {
    /// The host `ssh` connects to.
    pub via: String,
    /// The forwarded endpoint, `component.endpoint`.
    pub target: String,
    /// The port the forward listens on.
    pub listen_port: Port,
    /// Address the forward listens on; default `127.0.0.1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind: Option<String>,
    /// `local` (`-L`, default) or `remote` (`-R`).
    #[serde(default)]
    pub direction: TunnelDirection,
}

/// A launchd job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LaunchdSpec {
    /// The job's `Label`, e.g. `com.example.llm`.
    pub label: String,
    /// Path of an existing property list; without it one is generated from `command`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plist: Option<String>,
}

/// A systemd unit (systemd.unit(5), systemd.service(5)).
///
/// With a `command`, Flotilla owns the unit: it writes a runtime unit file
/// (`/run/systemd/system/<unit>`, or `$XDG_RUNTIME_DIR/systemd/user/<unit>` for `user`)
/// generated from the component and never enables it. Without a `command`, `unit`
/// names an existing unit that Flotilla drives with `systemctl`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SystemdSpec {
    /// Unit name, e.g. `llama.service`; default `flotilla-<component>.service` for a
    /// unit Flotilla writes. Required to drive an existing unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// Use the user manager (`systemctl --user`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub user: bool,
}

/// A container (adapter `container`): what the engine is asked to create. Terms follow
/// the Compose Specification (long syntax) and the Docker Engine API's container
/// create body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContainerSpec {
    /// The image: a reference by tag or by digest, `name[:tag][@sha256:<64 hex>]`
    /// (e.g. `ghcr.io/open-webui/open-webui:main`). A name without tag or digest
    /// means `:latest`. Required, unless the component's template supplies one (the
    /// AI servers' templates name their project's image): empty means not given.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// When the image is pulled: `never` (default: a missing image is an error),
    /// `missing` (only when the engine does not have it) or `always` (before each start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<PullPolicy>,
    /// Overrides the image's `ENTRYPOINT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// The container's name; default `flotilla-<project>-<component>`. A container of that name
    /// that Flotilla did not create (without its labels, or another project's) is
    /// foreign and never touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Published ports (published on `host_ip`, loopback unless asked).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ContainerPort>,
    /// Bind mounts and named volumes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<ContainerVolume>,
    /// `user[:group]` (names or numbers) the main process runs as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Devices, `host[:container[:cgroup permissions]]` (e.g. `/dev/dri:/dev/dri:rwm`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// A GPU request (`docker run --gpus`, the Engine API's `DeviceRequests`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<GpuRequest>,
    /// `bridge` (default), `host`, or the name of an existing engine network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// The engine's own restart policy: `no` (default), `on-failure`, `always` or
    /// `unless-stopped`. Refused (other than `no`) together with the component's
    /// `restart` table: one owner restarts it, never both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<EngineRestart>,
    /// Secrets by name, each resolved on the host like `{ secret = "NAME" }` and
    /// mounted read-only at `/run/secrets/<NAME>` (mode 0400); never in the
    /// container's environment, labels, inspect output or logs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// The engine's health check (Docker's `HealthConfig`), overriding the image's
    /// `HEALTHCHECK`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthcheck: Option<ContainerHealthcheck>,
    /// The signal the engine stops the container with (default: the component's
    /// `stop.signal` when declared, else the image's `STOPSIGNAL`, else `SIGTERM`);
    /// the grace period before `SIGKILL` is the component's `stop.grace_period`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<Signal>,
}

/// When a container's image is pulled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PullPolicy {
    /// Never: an image the engine does not have is an error (default).
    #[default]
    Never,
    /// Only when the engine does not have the image.
    Missing,
    /// Before every start.
    Always,
}

impl PullPolicy {
    /// The kebab-case name used in the inventory.
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Never => "never",
            PullPolicy::Missing => "missing",
            PullPolicy::Always => "always",
        }
    }
}

/// The engine's own restart policy for a container (Docker's `RestartPolicy.Name`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EngineRestart {
    /// Never restarted by the engine (default).
    #[default]
    No,
    /// After a non-zero exit.
    OnFailure,
    /// After any exit, and when the engine starts.
    Always,
    /// Like `always`, except after a stop on purpose.
    UnlessStopped,
}

impl EngineRestart {
    /// The name used in the inventory and by the Engine API.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineRestart::No => "no",
            EngineRestart::OnFailure => "on-failure",
            EngineRestart::Always => "always",
            EngineRestart::UnlessStopped => "unless-stopped",
        }
    }
}

/// A transport protocol of a published port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PortProtocol {
    /// TCP (default).
    #[default]
    Tcp,
    /// UDP.
    Udp,
}

impl PortProtocol {
    /// `tcp` or `udp`.
    pub fn as_str(self) -> &'static str {
        match self {
            PortProtocol::Tcp => "tcp",
            PortProtocol::Udp => "udp",
        }
    }
}

/// A published port (Compose's long syntax).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContainerPort {
    /// The port inside the container.
    pub target: Port,
    /// The port on the host (what the component's endpoints name).
    pub published: Port,
    /// The host address it is published on (an IP address); default `127.0.0.1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<String>,
    /// `tcp` (default) or `udp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<PortProtocol>,
}

/// What a mount's source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VolumeType {
    /// A host path (relative to the inventory's directory), which must exist.
    Bind,
    /// A named engine volume (created by the engine when missing).
    Volume,
}

/// A mount (Compose's long syntax).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContainerVolume {
    /// `bind` or `volume`.
    #[serde(rename = "type")]
    pub kind: VolumeType,
    /// A host path for `bind` (relative paths are the inventory directory's), a
    /// volume name for `volume`.
    pub source: String,
    /// The absolute path inside the container.
    pub target: String,
    /// Mounted read-only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
}

/// How many GPUs a request asks for: a number, or `"all"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuCount {
    /// This many.
    Count(u32),
    /// Every GPU the driver has (the Engine API's `Count = -1`).
    All,
}

impl Serialize for GpuCount {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            GpuCount::Count(n) => s.serialize_u32(*n),
            GpuCount::All => s.serialize_str("all"),
        }
    }
}

impl<'de> Deserialize<'de> for GpuCount {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = GpuCount;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number of GPUs, or \"all\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<GpuCount, E> {
                u32::try_from(v)
                    .ok()
                    .filter(|n| *n > 0)
                    .map(GpuCount::Count)
                    .ok_or_else(|| {
                        E::custom(format!(
                            "GPU count {v} must be at least 1 (or \"all\"), e.g. count = 1"
                        ))
                    })
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<GpuCount, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(i64::MAX))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<GpuCount, E> {
                if v == "all" {
                    Ok(GpuCount::All)
                } else {
                    Err(E::custom(format!(
                        "GPU count `{v}`: write a number or \"all\""
                    )))
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for GpuCount {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GpuCount".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A number of GPUs (at least 1), or \"all\".",
            "anyOf": [
                { "type": "integer", "minimum": 1 },
                { "const": "all" }
            ]
        })
    }
}

/// A GPU request (Compose's `deploy.resources.reservations.devices`, the Engine API's
/// `DeviceRequest`): `count` or `device_ids`, not both.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuRequest {
    /// How many GPUs: a number or `"all"` (default `all` when no `device_ids`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<GpuCount>,
    /// The driver, e.g. `nvidia`; default: the engine's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// Capabilities asked for; default `["gpu"]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    /// Particular devices by id or index (e.g. `["0"]`), instead of a `count`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_ids: Vec<String>,
}

/// The engine's health check of a container (Docker's `HealthConfig`, Compose's
/// `healthcheck`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContainerHealthcheck {
    /// As in Compose: `["CMD", prog, args…]`, `["CMD-SHELL", "script"]`, or `["NONE"]`
    /// (disables the image's).
    pub test: Vec<String>,
    /// Time between checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<HumanDuration>,
    /// Time one check may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
    /// Consecutive failures that make it `unhealthy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// Time after start during which failures do not count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_period: Option<HumanDuration>,
}

/// A named group of components operated together.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StackSpec {
    /// One line saying what it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Members; operating the stack also covers their dependencies.
    pub components: Vec<String>,
    /// End-to-end checks of the stack's routes, run after `up` once every member is
    /// ready: `request` checks naming `component.endpoint`, or `exec` checks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readiness: Vec<ProbeSpec>,
}

/// The JSON Schema (draft 2020-12) of the inventory format.
pub fn inventory_schema() -> serde_json::Value {
    let schema = schemars::schema_for!(Inventory);
    serde_json::to_value(schema).expect("schema serialises")
}

/// A component on a Kubernetes cluster (adapter `kubernetes`): one workload of one
/// container and, when it has `ports`, a Service selecting its pods. Terms follow
/// the Kubernetes API (`apps/v1` Deployment and StatefulSet, `v1` Service, `v1`
/// PodSpec; <https://kubernetes.io/docs/reference/kubernetes-api/>).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KubernetesSpec {
    /// The container image: `name[:tag][@sha256:<64 hex>]`. A tag that moves makes
    /// the running pods `stale-runtime` (their `imageID` digests are measured).
    pub image: String,
    /// `deployment` (default) or `statefulset`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<WorkloadKind>,
    /// The objects' name (a DNS-1123 label: lowercase letters, digits, `-`, at most
    /// 63); default: the component's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The namespace; default: the host's `namespace`, else `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Pods wanted while the component runs (default 1); a stop scales to 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    /// Overrides the image's `ENTRYPOINT` (the container's `command`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// Ports of the container; with any, a Service of the workload's name selects its
    /// pods and exposes each as `service_port` (default: `container_port`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<KubernetesPort>,
    /// The Service's type: `ClusterIP` (default), `NodePort` or `LoadBalancer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_type: Option<ServiceType>,
    /// GPUs the container asks for: the extended resource `nvidia.com/gpu` (NVIDIA's
    /// device plugin), as both request and limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// Resource requests by name (`cpu = "2"`, `memory = "8Gi"`: Kubernetes
    /// quantities).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, String>,
    /// Resource limits by name (Kubernetes quantities).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, String>,
    /// The pod's `nodeSelector`: node labels a node must have to run it (e.g.
    /// `{ "nvidia.com/gpu.product" = "NVIDIA-L4" }`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// PersistentVolumeClaims mounted into the container (model files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<KubernetesVolume>,
    /// The image's pull policy: `IfNotPresent`, `Always` or `Never`; default: the
    /// API server's (`Always` for `:latest` or no tag, else `IfNotPresent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,
    /// Take over fields another field manager owns (server-side apply's `force`,
    /// kubectl's `--force-conflicts`). Default: such a conflict is reported and
    /// nothing is applied.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force_conflicts: bool,
}

/// The workload resource a Kubernetes component owns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// `apps/v1` Deployment (default): interchangeable pods.
    #[default]
    Deployment,
    /// `apps/v1` StatefulSet: pods with stable names (`<name>-0`…), one at a time.
    StatefulSet,
}

impl WorkloadKind {
    /// The inventory's name (`deployment`, `statefulset`).
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "deployment",
            WorkloadKind::StatefulSet => "statefulset",
        }
    }

    /// The API's kind (`Deployment`, `StatefulSet`).
    pub fn api_kind(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
        }
    }
}

/// A container port of a Kubernetes component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KubernetesPort {
    /// The port's name (an IANA service name: lowercase letters, digits, `-`, at
    /// most 15); default `p<container_port>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The port the container listens on.
    pub container_port: Port,
    /// The Service's port; default: `container_port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_port: Option<Port>,
    /// The node port (type `NodePort` or `LoadBalancer` only); default: the cluster
    /// picks one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_port: Option<Port>,
    /// `tcp` (default) or `udp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<PortProtocol>,
}

/// A Kubernetes Service's type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ServiceType {
    /// A cluster-internal virtual IP (default).
    #[default]
    ClusterIP,
    /// ClusterIP plus a port on every node.
    NodePort,
    /// NodePort plus the cloud's load balancer.
    LoadBalancer,
}

impl ServiceType {
    /// The API's name.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::ClusterIP => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
        }
    }
}

/// When the kubelet pulls a container's image (the API's `imagePullPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ImagePullPolicy {
    /// Only when the node does not have it.
    IfNotPresent,
    /// Before every container start.
    Always,
    /// Never: a missing image fails the pod.
    Never,
}

impl ImagePullPolicy {
    /// The API's name.
    pub fn as_str(self) -> &'static str {
        match self {
            ImagePullPolicy::IfNotPresent => "IfNotPresent",
            ImagePullPolicy::Always => "Always",
            ImagePullPolicy::Never => "Never",
        }
    }
}

/// A PersistentVolumeClaim mounted into a Kubernetes component's container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KubernetesVolume {
    /// The claim's name in the component's namespace (it must exist).
    pub claim: String,
    /// The absolute path inside the container.
    pub mount_path: String,
    /// Mounted read-only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
}
