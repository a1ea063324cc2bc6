//! `flotilla discover`: what runs on a host that its inventory does not cover, each
//! with a proposed inventory entry. Read-only: it reads `/proc`, asks `systemctl`
//! and the container engine, and asks each found port three `GET`s on loopback; it
//! never starts, stops, signals or adopts anything.
//!
//! What is looked at (each a [`Source`] in the report, saying what it saw or why it
//! could not look):
//! - listening TCP sockets and their processes (`sockets.rs`, Linux's `/proc`);
//! - running systemd service units (`units.rs`, when systemd is the init system);
//! - launchd jobs: not listed yet (macOS), and not on other platforms;
//! - running containers (`containers.rs`, the engine at the host's `container_api`,
//!   else `$DOCKER_HOST`, else Docker's socket; when none answers, the report says so).
//!
//! What is left out ([`Skipped`], with the reason): what the inventory declares (a
//! component of this host whose endpoint port, unit, container name, recorded pid or
//! command matches), what Flotilla started (its instance marker or its container
//! labels), Flotilla's own processes (`serve`, `agent`), a port a container engine
//! holds for a container, and system services ([`NOISE_PROGRAMS`], [`NOISE_UNITS`]).
//! Only what listens on a TCP port, or a running unit the administrator wrote (under
//! `/etc/systemd/system` or `/run/systemd/system`), is proposed.
//!
//! Each [`Finding`] carries what was seen and its proposal: adapter `process` (the
//! command line and working directory), `systemd` (the unit) or `container` (image,
//! name, published ports); endpoints from the ports (`http://127.0.0.1:PORT` for a
//! wildcard or loopback address, else the bound address); and a readiness probe
//! guessed by asking what answers (`guess.rs`). `proposal.rs` builds the entries and
//! writes the report as TOML to paste.
//!
//! The same [`discover`] runs on a remote host through `flotilla host serve`
//! ([`crate::remote::Call::Discover`]), with that host's snapshot.

pub mod containers;
pub mod guess;
pub mod proposal;
pub mod sockets;
pub mod units;

use crate::adapter::container::engine::EngineError;
use crate::statedir::StateDir;
use flotilla_model::inventory::{AdapterKind, ComponentSpec};
use flotilla_model::topology::{Component, Snapshot};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

/// Time allowed to each readiness question unless [`Options::probe_timeout_ms`]
/// says otherwise.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Programs (executable or command name) that are the system's own services, never
/// proposed: remote login, the init system and its helpers, D-Bus, time, mail, RPC,
/// printing, name resolution, and the container engines and their port holders
/// (a container is found through its engine). `systemd-*` and `rpc.*` too.
pub const NOISE_PROGRAMS: &[&str] = &[
    "sshd",
    "systemd",
    "init",
    "dbus-daemon",
    "dbus-broker",
    "chronyd",
    "ntpd",
    "rpcbind",
    "cupsd",
    "avahi-daemon",
    "exim4",
    "master",
    "polkitd",
    "cron",
    "rsyslogd",
    "dnsmasq",
    "containerd",
    "dockerd",
    "docker-proxy",
    "conmon",
    "rootlessport",
    "aardvark-dns",
];

/// Service units (names without `.service`; a trailing `@` stands for every
/// instance) that are the system's own, never proposed. `systemd-*` too.
pub const NOISE_UNITS: &[&str] = &[
    "ssh",
    "sshd",
    "dbus",
    "cron",
    "rsyslog",
    "polkit",
    "chrony",
    "ntp",
    "avahi-daemon",
    "cups",
    "exim4",
    "postfix",
    "networking",
    "NetworkManager",
    "wpa_supplicant",
    "unattended-upgrades",
    "containerd",
    "docker",
    "podman",
    "getty@",
    "serial-getty@",
    "container-getty@",
    "console-getty",
    "autovt@",
    "user@",
    "user-runtime-dir@",
];

/// Why one source could not be read. Discovery goes on without it; the report's
/// [`Source`] says so.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    /// The listening sockets could not be read (`/proc/net/tcp`, or not Linux).
    #[error("reading the listening sockets")]
    Sockets(#[source] crate::ExecError),
    /// `systemctl` could not be run, or failed.
    #[error(transparent)]
    Verb(#[from] crate::detached::VerbError),
    /// The container engine could not be asked.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// What to look for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Options {
    /// Only what listens on (or publishes) one of these TCP ports; everything when
    /// empty (then also units without a port).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    /// Component names the inventory already has: proposals get other names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taken_names: Vec<String>,
    /// Time allowed to each readiness question, ms ([`DEFAULT_PROBE_TIMEOUT`] when
    /// absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_timeout_ms: Option<u64>,
}

/// A process, as `/proc` showed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessFacts {
    /// Its pid.
    pub pid: u32,
    /// `/proc/<pid>/exe` (may end in ` (deleted)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    /// Its command line (`/proc/<pid>/cmdline`, lossily decoded).
    pub argv: Vec<String>,
    /// Its command name (`comm`).
    pub comm: String,
    /// Its working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Its real user id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// That user's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// When it started (RFC 3339, UTC, to the second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<String>,
    /// Its start time in clock ticks since boot (with the pid, names it for good).
    pub start_time_ticks: u64,
    /// Its control group (`/system.slice/llama.service`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
}

impl ProcessFacts {
    /// Its program's name: the executable's file name, else its command name.
    pub fn program(&self) -> String {
        self.exe
            .as_deref()
            .map(|e| flotilla_model::status::strip_deleted(Path::new(e)))
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.comm.clone())
    }
}

/// A systemd unit, as `systemctl show` described it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitFacts {
    /// The unit's name (`llama.service`).
    pub unit: String,
    /// `Description`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `MainPID` (0: none).
    pub main_pid: u32,
    /// `FragmentPath`: its unit file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fragment_path: Option<String>,
    /// `ControlGroup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_group: Option<String>,
    /// `UnitFileState` (`enabled`, `disabled`, `static`…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit_file_state: Option<String>,
    /// `User`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The `argv[]` of its first `ExecStart`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exec_start: Vec<String>,
}

/// A running container, as its engine listed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerFacts {
    /// Its id (12 hex digits).
    pub id: String,
    /// Its name.
    pub name: String,
    /// The image it was created from, as given then.
    pub image: String,
    /// Its command, as the engine shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its command (`Cmd`), when it is not its image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    /// Its entrypoint, when it is not its image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// Its published ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<Published>,
    /// Its `io.flotilla.project` label: Flotilla created it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flotilla_project: Option<String>,
    /// Its `io.flotilla.component` label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flotilla_component: Option<String>,
}

/// A container's published port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Published {
    /// The port on the host.
    pub published: u16,
    /// The port in the container.
    pub target: u16,
    /// The host address it is published on (absent: every address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<String>,
    /// `tcp`, `udp`…
    pub protocol: String,
}

/// Something that runs and is not in the inventory, with its proposed entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The proposed component name.
    pub name: String,
    /// The proposed adapter: `process`, `systemd`, `launchd` or `container`.
    pub adapter: AdapterKind,
    /// The process that listens (the unit's main process for a unit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessFacts>,
    /// The unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<UnitFacts>,
    /// The container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerFacts>,
    /// Where it listens (a container: where its ports are published), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listening: Vec<SocketAddr>,
    /// What each port answered when asked (loopback only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<guess::Answer>,
    /// What to look at before using the proposal (a redacted argument, a port bound
    /// to another address than loopback…).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The proposed inventory entry.
    pub proposal: ComponentSpec,
}

/// Something seen and left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// What (`pid 4242 (python3) on 127.0.0.1:8080`, `unit llama.service`,
    /// `container web (nginx:1)`).
    pub what: String,
    /// Why (`declared: component `llm` (endpoint llm.http, port 8080)`).
    pub reason: String,
}

/// One place discovery looks, and what it saw there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// `sockets`, `systemd`, `launchd` or `containers`.
    pub source: String,
    /// Whether it could be read.
    pub looked: bool,
    /// What was seen, or why it could not look.
    pub saw: String,
}

/// What runs on a host that its inventory does not cover.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Discovery {
    /// The host (its inventory name).
    pub host: String,
    /// Each place looked at.
    pub sources: Vec<Source>,
    /// What is not covered, each with a proposal, in name order.
    pub findings: Vec<Finding>,
    /// What was seen and left out.
    pub skipped: Vec<Skipped>,
}

impl Discovery {
    /// The report as TOML to paste into an inventory ([`proposal::render`]).
    pub fn to_toml(&self) -> String {
        proposal::render(self)
    }
}

/// What the inventory declares on the host, each with the words that say so.
#[derive(Debug, Default)]
struct Covered {
    ports: HashMap<u16, String>,
    units: HashMap<String, String>,
    containers: HashMap<String, String>,
    pids: HashMap<(u32, u64), String>,
    commands: HashMap<Vec<String>, String>,
}

impl Covered {
    /// From `snapshot`'s components, and the pids recorded in `state`'s journal.
    fn of(snapshot: &Snapshot, state: Option<&StateDir>) -> Covered {
        let mut c = Covered::default();
        for comp in snapshot
            .components
            .iter()
            .filter(|comp| comp.host == snapshot.host)
        {
            let name = &comp.name;
            for (ep, e) in &comp.endpoints {
                c.ports.entry(e.port).or_insert_with(|| {
                    format!(
                        "declared: component `{name}` (endpoint {name}.{ep}, port {})",
                        e.port
                    )
                });
            }
            match comp.adapter {
                Some(AdapterKind::Systemd) => {
                    let unit = crate::adapter::systemd::unit_name(comp);
                    c.units.insert(
                        unit.clone(),
                        format!("declared: component `{name}` (unit {unit})"),
                    );
                }
                Some(AdapterKind::Container) => {
                    let n = crate::adapter::container::container_name(
                        snapshot
                            .project
                            .as_deref()
                            .unwrap_or(flotilla_model::topology::DEFAULT_PROJECT),
                        comp,
                    );
                    for p in comp.container.iter().flat_map(|k| &k.ports) {
                        c.ports.entry(p.published.0).or_insert_with(|| {
                            format!(
                                "declared: component `{name}` (published port {})",
                                p.published.0
                            )
                        });
                    }
                    c.containers.insert(
                        n.clone(),
                        format!("declared: component `{name}` (container {n})"),
                    );
                }
                _ => {}
            }
            if !comp.command.is_empty() && is_process_family(comp) {
                c.commands.insert(
                    comp.command.clone(),
                    format!("declared: component `{name}` (the same command)"),
                );
            }
        }
        let db = state.map(StateDir::database);
        if let Some(store) = db
            .filter(|d| d.exists())
            .and_then(|d| flotilla_store::Store::open(&d).ok())
        {
            for rec in store.instances().unwrap_or_default() {
                if rec.host == snapshot.host {
                    c.pids.insert(
                        (rec.pid, rec.start_time_ticks),
                        format!(
                            "declared: component `{}` (pid {} in the journal)",
                            rec.component, rec.pid
                        ),
                    );
                }
            }
        }
        c
    }

    /// Why a process listening on `ports` is covered, if it is.
    fn process(&self, p: &ProcessFacts, ports: &[u16]) -> Option<String> {
        self.pids
            .get(&(p.pid, p.start_time_ticks))
            .or_else(|| ports.iter().find_map(|port| self.ports.get(port)))
            .or_else(|| self.commands.get(&p.argv))
            .cloned()
    }
}

fn is_process_family(c: &Component) -> bool {
    matches!(
        c.adapter,
        None | Some(AdapterKind::Process) | Some(AdapterKind::SshTunnel)
    )
}

/// Whether `p` is Flotilla itself (`serve`, `agent run`, `host serve`…): an
/// executable named `flotilla` or `flotilla-agent`, or this very binary.
fn flotilla_own(p: &ProcessFacts) -> bool {
    let program = p.program();
    let this = crate::sys::self_exe()
        .map(|e| flotilla_model::status::strip_deleted(&e).to_path_buf())
        .zip(p.exe.as_deref())
        .is_some_and(|(me, exe)| me == flotilla_model::status::strip_deleted(Path::new(exe)));
    this || program == "flotilla" || program == "flotilla-agent"
}

/// Whether a program name is one of [`NOISE_PROGRAMS`] (or `systemd-*`, `rpc.*`).
pub fn noise_program(name: &str) -> bool {
    NOISE_PROGRAMS.contains(&name) || name.starts_with("systemd-") || name.starts_with("rpc.")
}

/// Whether a unit (`cron.service`, `getty@tty1.service`) is one of [`NOISE_UNITS`]
/// (or `systemd-*`).
pub fn noise_unit(unit: &str) -> bool {
    let base = unit.strip_suffix(".service").unwrap_or(unit);
    base.starts_with("systemd-")
        || NOISE_UNITS.iter().any(|n| match n.strip_suffix('@') {
            Some(prefix) => base
                .strip_prefix(prefix)
                .is_some_and(|r| r.starts_with('@')),
            None => base == *n,
        })
}

/// Whether the administrator wrote the unit (its file is under `/etc/systemd/system`
/// or `/run/systemd/system`), rather than a package.
fn admin_unit(u: &UnitFacts) -> bool {
    u.fragment_path.as_deref().is_some_and(|f| {
        f.starts_with("/etc/systemd/system/") || f.starts_with("/run/systemd/system/")
    })
}

/// `addresses` as `a, b, c`.
fn list(addresses: &[SocketAddr]) -> String {
    addresses
        .iter()
        .map(SocketAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `pid 4242 (python3)`.
fn who(p: &ProcessFacts) -> String {
    format!("pid {} ({})", p.pid, p.program())
}

/// Something to propose, before its readiness is asked and its name given.
#[derive(Debug, Clone)]
pub struct Draft {
    /// The adapter proposed.
    pub adapter: AdapterKind,
    /// Its process.
    pub process: Option<ProcessFacts>,
    /// Its unit.
    pub unit: Option<UnitFacts>,
    /// Its container.
    pub container: Option<ContainerFacts>,
    /// Where it listens, sorted and each once.
    pub listening: Vec<SocketAddr>,
}

/// What the three sources gave, before anything is decided.
#[derive(Debug, Default)]
struct Seen {
    sockets: Option<sockets::Sockets>,
    units: Option<Vec<UnitFacts>>,
    containers: Option<Vec<ContainerFacts>>,
    sources: Vec<Source>,
}

/// Reads the sources: sockets, units, containers (blocking).
fn look(snapshot: &Snapshot, options: &Options) -> Seen {
    let mut seen = Seen::default();
    match sockets::listening(&options.ports) {
        Ok(s) => {
            seen.sources.push(Source {
                source: "sockets".into(),
                looked: true,
                saw: format!(
                    "{} listening TCP socket(s){} in /proc/net/tcp and tcp6",
                    s.sockets,
                    if options.ports.is_empty() {
                        String::new()
                    } else {
                        format!(" on port(s) {}", ports_text(&options.ports))
                    }
                ),
            });
            seen.sockets = Some(s);
        }
        Err(e) => seen.sources.push(Source {
            source: "sockets".into(),
            looked: false,
            saw: crate::error::chain(&e),
        }),
    }
    match crate::adapter::systemd::unavailable() {
        Some(why) => seen.sources.push(Source {
            source: "systemd".into(),
            looked: false,
            saw: why.split(':').next().unwrap_or(&why).to_string(),
        }),
        None => {
            let systemctl = crate::adapter::systemd::Systemd::from_env().systemctl;
            match units::running(&systemctl) {
                Ok(u) => {
                    seen.sources.push(Source {
                        source: "systemd".into(),
                        looked: true,
                        saw: format!("{} running service unit(s)", u.len()),
                    });
                    seen.units = Some(u);
                }
                Err(e) => seen.sources.push(Source {
                    source: "systemd".into(),
                    looked: false,
                    saw: crate::error::chain(&e),
                }),
            }
        }
    }
    seen.sources.push(Source {
        source: "launchd".into(),
        looked: false,
        saw: if cfg!(target_os = "macos") {
            "listing launchd jobs is not supported yet".into()
        } else {
            format!(
                "not on this platform ({}): launchd is macOS's",
                std::env::consts::OS
            )
        },
    });
    let api = snapshot
        .hosts
        .get(&snapshot.host)
        .and_then(|h| h.container_api.as_deref());
    let socket = crate::adapter::container::engine::socket_for(api);
    match containers::running(&socket) {
        Ok(c) => {
            seen.sources.push(Source {
                source: "containers".into(),
                looked: true,
                saw: format!("{} running container(s) on the engine at {socket}", c.len()),
            });
            seen.containers = Some(c);
        }
        Err(e) => seen.sources.push(Source {
            source: "containers".into(),
            looked: false,
            saw: format!("skipped: {}", crate::error::chain(&e)),
        }),
    }
    seen
}

/// `ports` as `8080, 8081`.
pub(crate) fn ports_text(ports: &[u16]) -> String {
    ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Decides, from what was seen, what to propose and what to leave out (and why).
fn decide(
    seen: Seen,
    covered: &Covered,
    options: &Options,
) -> (Vec<Draft>, Vec<Skipped>, Vec<Source>) {
    let mut drafts = Vec::new();
    let mut skipped = Vec::new();
    let mut sources = seen.sources;
    let filter: HashSet<u16> = options.ports.iter().copied().collect();
    let wanted = |ports: &mut dyn Iterator<Item = u16>| {
        let ports: Vec<u16> = ports.collect();
        filter.is_empty() || ports.iter().any(|p| filter.contains(p))
    };

    // Containers first: the ports their engine holds are theirs.
    let mut container_ports: HashMap<u16, String> = HashMap::new();
    for c in seen.containers.unwrap_or_default() {
        let tcp: Vec<&Published> = c.ports.iter().filter(|p| p.protocol == "tcp").collect();
        for p in &tcp {
            container_ports.insert(p.published, c.name.clone());
        }
        if !wanted(&mut tcp.iter().map(|p| p.published)) {
            continue;
        }
        let what = format!("container {} ({})", c.name, c.image);
        let reason = if let Some(project) = &c.flotilla_project {
            Some(format!(
                "created by flotilla (project `{project}`{})",
                c.flotilla_component
                    .as_ref()
                    .map(|n| format!(", component `{n}`"))
                    .unwrap_or_default()
            ))
        } else {
            covered
                .containers
                .get(&c.name)
                .or_else(|| tcp.iter().find_map(|p| covered.ports.get(&p.published)))
                .cloned()
        };
        match reason {
            Some(reason) => skipped.push(Skipped { what, reason }),
            None => {
                let mut listening: Vec<SocketAddr> = tcp
                    .iter()
                    .map(|p| {
                        let ip = p
                            .host_ip
                            .as_deref()
                            .and_then(|i| i.parse().ok())
                            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
                        SocketAddr::new(ip, p.published)
                    })
                    .collect();
                listening.sort();
                listening.dedup();
                drafts.push(Draft {
                    adapter: AdapterKind::Container,
                    process: None,
                    unit: None,
                    container: Some(c),
                    listening,
                });
            }
        }
    }

    // Which unit a process belongs to: by its control group, or as a main pid.
    let units = seen.units.unwrap_or_default();
    let mut unit_of_cgroup: HashMap<&str, usize> = HashMap::new();
    let mut unit_of_pid: HashMap<u32, usize> = HashMap::new();
    for (i, u) in units.iter().enumerate() {
        if let Some(cg) = &u.control_group {
            unit_of_cgroup.insert(cg.as_str(), i);
        }
        if u.main_pid != 0 {
            unit_of_pid.insert(u.main_pid, i);
        }
    }
    let mut unit_listening: Vec<Vec<SocketAddr>> = vec![Vec::new(); units.len()];

    let mut unowned = Vec::new();
    if let Some(s) = seen.sockets {
        unowned = s.unowned;
        for l in s.processes {
            let p = l.process;
            let ports: Vec<u16> = {
                let mut v: Vec<u16> = l.addresses.iter().map(SocketAddr::port).collect();
                v.sort_unstable();
                v.dedup();
                v
            };
            let what = format!("{} on {}", who(&p), list(&l.addresses));
            let reason = if flotilla_own(&p) {
                Some(format!(
                    "flotilla's own process (`{}`)",
                    std::iter::once(p.program())
                        .chain(p.argv.iter().skip(1).take(2).cloned())
                        .collect::<Vec<_>>()
                        .join(" ")
                ))
            } else if let Some(owner) = crate::process::flotilla_owner(p.pid) {
                Some(format!("started by flotilla: {owner}"))
            } else if let Some(c) = ports.iter().find_map(|port| container_ports.get(port)) {
                Some(format!(
                    "holds a port the container engine publishes for container {c} (see the container)"
                ))
            } else {
                covered.process(&p, &ports)
            };
            if let Some(reason) = reason {
                skipped.push(Skipped { what, reason });
                continue;
            }
            let unit = p
                .cgroup
                .as_deref()
                .and_then(|cg| unit_of(cg, &unit_of_cgroup))
                .or_else(|| unit_of_pid.get(&p.pid).copied());
            if let Some(i) = unit {
                unit_listening[i].extend(l.addresses);
                continue;
            }
            let program = p.program();
            if noise_program(&program) || noise_program(&p.comm) {
                skipped.push(Skipped {
                    what,
                    reason: format!("a system service ({program}): not proposed"),
                });
                continue;
            }
            let mut listening = l.addresses;
            listening.sort();
            drafts.push(Draft {
                adapter: AdapterKind::Process,
                process: Some(p),
                unit: None,
                container: None,
                listening,
            });
        }
    }
    if !unowned.is_empty() {
        skipped.push(Skipped {
            what: format!("socket(s) on {}", list(&unowned)),
            reason: if nix::unistd::geteuid().is_root() {
                "their owner is not visible here (a process of another PID namespace: a sandbox or a container)".into()
            } else {
                "their owner is not visible here (another user's process: run as root to see it)".into()
            },
        });
    }

    let mut quiet = 0;
    for (u, mut listening) in units.into_iter().zip(unit_listening) {
        listening.sort();
        listening.dedup();
        if !filter.is_empty() && listening.is_empty() {
            continue;
        }
        let main = (u.main_pid != 0)
            .then(|| sockets::process_facts(u.main_pid))
            .flatten();
        let what = if listening.is_empty() {
            format!("unit {}", u.unit)
        } else {
            format!("unit {} on {}", u.unit, list(&listening))
        };
        let ports: Vec<u16> = listening.iter().map(SocketAddr::port).collect();
        let reason = if let Some(owner) = main
            .as_ref()
            .and_then(|m| crate::process::flotilla_owner(m.pid))
        {
            Some(format!("started by flotilla: {owner}"))
        } else if main.as_ref().is_some_and(flotilla_own) {
            Some("flotilla's own process (its agent's unit)".to_string())
        } else {
            covered
                .units
                .get(&u.unit)
                .or_else(|| ports.iter().find_map(|p| covered.ports.get(p)))
                .cloned()
        };
        if let Some(reason) = reason {
            skipped.push(Skipped { what, reason });
            continue;
        }
        let noisy = noise_unit(&u.unit)
            || main
                .as_ref()
                .is_some_and(|m| noise_program(&m.program()) || noise_program(&m.comm));
        if noisy || (listening.is_empty() && !admin_unit(&u)) {
            if listening.is_empty() {
                quiet += 1;
            } else {
                skipped.push(Skipped {
                    what,
                    reason: "a system service: not proposed".into(),
                });
            }
            continue;
        }
        drafts.push(Draft {
            adapter: AdapterKind::Systemd,
            process: main,
            unit: Some(u),
            container: None,
            listening,
        });
    }
    if quiet > 0 {
        if let Some(s) = sources.iter_mut().find(|s| s.source == "systemd") {
            s.saw.push_str(&format!(
                "; {quiet} of them the system's own or a package's without a listening port (not listed)"
            ));
        }
    }
    skipped.sort_by(|a, b| a.what.cmp(&b.what));
    (drafts, skipped, sources)
}

/// The unit whose control group holds `cgroup` (itself or one of its parents).
fn unit_of(cgroup: &str, units: &HashMap<&str, usize>) -> Option<usize> {
    let mut path = cgroup;
    loop {
        if let Some(i) = units.get(path) {
            return Some(*i);
        }
        match path.rfind('/') {
            Some(k) if k > 0 => path = &path[..k],
            _ => return None,
        }
    }
}

/// The loopback address to ask about `addr`'s port: `127.0.0.1` for a wildcard
/// address, the address itself on loopback; `None` for any other address (only
/// loopback is asked).
pub fn loopback_target(addr: &SocketAddr) -> Option<SocketAddr> {
    let ip = addr.ip();
    if ip.is_unspecified() {
        Some(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            addr.port(),
        ))
    } else if ip.is_loopback() {
        Some(*addr)
    } else {
        None
    }
}

/// What runs on `snapshot`'s host that the snapshot does not cover, each with a
/// proposal; `state` is the host's state directory of the snapshot's project (its
/// journal's recorded pids count as covered). Never fails: a source that cannot be
/// read is said in [`Discovery::sources`].
pub async fn discover(
    snapshot: &Snapshot,
    state: Option<&StateDir>,
    options: &Options,
) -> Discovery {
    let covered = Covered::of(snapshot, state);
    let (snap, opts) = (snapshot.clone(), options.clone());
    let seen = tokio::task::spawn_blocking(move || look(&snap, &opts))
        .await
        .unwrap_or_else(|e| Seen {
            sources: vec![Source {
                source: "sockets".into(),
                looked: false,
                saw: format!("discovery's task failed: {e}"),
            }],
            ..Seen::default()
        });
    let (drafts, skipped, sources) = decide(seen, &covered, options);
    let timeout = options
        .probe_timeout_ms
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_PROBE_TIMEOUT);
    // Every port of every draft asked at once.
    let asks = drafts.iter().map(|d| async move {
        let mut targets: Vec<SocketAddr> = d.listening.iter().filter_map(loopback_target).collect();
        targets.sort_by_key(|a| (a.port(), a.is_ipv6()));
        targets.dedup_by_key(|a| a.port());
        futures_util::future::join_all(targets.iter().map(|t| guess::ask(t.to_string(), timeout)))
            .await
    });
    let answers = futures_util::future::join_all(asks).await;
    let mut taken: BTreeSet<String> = options.taken_names.iter().cloned().collect();
    taken.extend(snapshot.components.iter().map(|c| c.name.clone()));
    let mut findings: Vec<Finding> = drafts
        .into_iter()
        .zip(answers)
        .map(|(d, a)| proposal::finding(d, a, &snapshot.host, &mut taken))
        .collect();
    findings.sort_by(|a, b| a.name.cmp(&b.name));
    Discovery {
        host: snapshot.host.clone(),
        sources,
        findings,
        skipped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noise_is_a_short_list() {
        for n in ["sshd", "systemd-resolved", "rpc.statd", "conmon"] {
            assert!(noise_program(n), "{n}");
        }
        for n in ["llama-server", "python3", "flotilla-testkit", "nginx"] {
            assert!(!noise_program(n), "{n}");
        }
        for u in [
            "ssh.service",
            "systemd-journald.service",
            "getty@tty1.service",
            "user@0.service",
            "cron.service",
        ] {
            assert!(noise_unit(u), "{u}");
        }
        for u in [
            "llama.service",
            "getty.service",
            "user.service",
            "nginx.service",
        ] {
            assert!(!noise_unit(u), "{u}");
        }
    }

    #[test]
    fn a_process_belongs_to_the_unit_above_its_control_group() {
        let units: HashMap<&str, usize> = [("/system.slice/llama.service", 3)].into();
        assert_eq!(unit_of("/system.slice/llama.service", &units), Some(3));
        assert_eq!(
            unit_of("/system.slice/llama.service/worker", &units),
            Some(3)
        );
        assert_eq!(unit_of("/system.slice/other.service", &units), None);
        assert_eq!(unit_of("/", &units), None);
    }

    #[test]
    fn only_loopback_is_asked() {
        let t = |s: &str| loopback_target(&s.parse().unwrap()).map(|a| a.to_string());
        assert_eq!(t("0.0.0.0:80").as_deref(), Some("127.0.0.1:80"));
        assert_eq!(t("[::]:80").as_deref(), Some("127.0.0.1:80"));
        assert_eq!(t("127.0.0.2:80").as_deref(), Some("127.0.0.2:80"));
        assert_eq!(t("[::1]:80").as_deref(), Some("[::1]:80"));
        assert_eq!(t("10.1.2.3:80"), None);
    }
}
