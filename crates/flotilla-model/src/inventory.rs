//! The inventory format: the declared desired state as written in `flotilla.toml`
//! (or the same document as JSON). These types are what the JSON Schema printed by
//! `flotilla schema` is generated from; unknown keys are errors everywhere.

use crate::values::{EnvValue, HumanDuration, Port, Signal, StatusRange};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A whole inventory document.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    /// Optional JSON Schema reference, ignored (lets editors find the schema).
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
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
}

impl TransportKind {
    /// The kebab-case name used in the inventory.
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::Local => "local",
            TransportKind::Ssh => "ssh",
            TransportKind::Agent => "agent",
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
    /// `local` (default), `ssh`, or `agent` (driven by its `flotilla agent` through
    /// the authority).
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
}

impl AdapterKind {
    /// The kebab-case name used in the inventory.
    pub fn as_str(self) -> &'static str {
        match self {
            AdapterKind::Process => "process",
            AdapterKind::Launchd => "launchd",
            AdapterKind::Systemd => "systemd",
            AdapterKind::SshTunnel => "ssh-tunnel",
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

/// A probe: exactly one check (`process`, `tcp`, `http`, `exec`, `request`, `log`)
/// and its timing, in the manner of Kubernetes probes.
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
