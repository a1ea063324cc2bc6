//! The role filter, property-tested: inventories are generated (hosts with random
//! transports and roles, components on random hosts with dependencies, connections
//! across hosts, probes, restart policies, tunnels, a stack), validated by the real
//! validator, and every host's [`HostView`] is checked:
//!
//! - nothing written for a component of another host (its command, environment and
//!   secret names, working directory, probes, labels, description, env file, identity
//!   files) appears anywhere in a `component` host's serialised view — each of those
//!   fields carries a marker unique to its component, and no marker of another host's
//!   component, nor the stack's, occurs in the view's JSON;
//! - the host's own components are all there (the filter does not pass by dropping
//!   everything);
//! - a `control` host's view carries the whole revision, which rebuilds into a
//!   topology with the same digest (through JSON, as it travels).

use flotilla_model::digest::canonical_json;
use flotilla_model::inventory::HostRole;
use flotilla_model::{validate, Format, HostView, SourceFile, Sources, Topology};
use proptest::prelude::*;
use std::fmt::Write as _;

/// A generated component.
#[derive(Debug, Clone)]
struct Comp {
    /// Index into the fleet's host names.
    host: usize,
    /// Earlier components it depends on.
    depends_on: Vec<usize>,
    /// Earlier components whose `http` endpoint it connects to.
    connects: Vec<usize>,
    /// 0: none, 1: http, 2: exec, 3: log readiness.
    probe: u8,
    restart: bool,
    stop: bool,
}

/// A generated inventory.
#[derive(Debug, Clone)]
struct Fleet {
    /// `(transport is ssh, role is control, explicit address)` of hosts `h0..`.
    hosts: Vec<(bool, bool, bool)>,
    /// The role of `local`.
    local_control: bool,
    comps: Vec<Comp>,
    /// Components whose endpoint gets an ssh tunnel on `local` (when on an ssh host).
    tunnels: Vec<usize>,
    /// Stack members.
    stack: Vec<usize>,
}

impl Fleet {
    fn host_name(&self, i: usize) -> String {
        if i == 0 {
            "local".into()
        } else {
            format!("h{}", i - 1)
        }
    }

    /// Whether component `j` may be connected to from component `i`'s host: on the
    /// same host, or on a remote host (whose endpoints are not loopback).
    fn reachable(&self, i: usize, j: usize) -> bool {
        let (hi, hj) = (self.comps[i].host, self.comps[j].host);
        hi == hj || hj != 0
    }

    /// The tunnels that are valid: their target runs on an `ssh` host.
    fn tunnel_targets(&self) -> Vec<usize> {
        let mut t: Vec<usize> = self
            .tunnels
            .iter()
            .copied()
            .filter(|&j| j < self.comps.len())
            .filter(|&j| {
                let h = self.comps[j].host;
                h != 0 && self.hosts[h - 1].0
            })
            .collect();
        t.sort();
        t.dedup();
        t
    }

    fn toml(&self) -> String {
        let mut s = String::new();
        let role = |control: bool| if control { "control" } else { "component" };
        writeln!(s, "[hosts.local]\nrole = \"{}\"", role(self.local_control)).unwrap();
        for (i, &(ssh, control, address)) in self.hosts.iter().enumerate() {
            writeln!(
                s,
                "[hosts.h{i}]\ntransport = \"{}\"\nrole = \"{}\"",
                if ssh { "ssh" } else { "agent" },
                role(control)
            )
            .unwrap();
            if address {
                writeln!(s, "address = \"10.0.0.{}\"", i + 1).unwrap();
            }
        }
        for (i, c) in self.comps.iter().enumerate() {
            let m = format!("MARKC{i}Z");
            writeln!(s, "[components.c{i}]").unwrap();
            writeln!(s, "host = \"{}\"", self.host_name(c.host)).unwrap();
            writeln!(s, "description = \"{m} description\"").unwrap();
            writeln!(s, "command = [\"prog-{m}\", \"--flag\", \"{m}-arg\"]").unwrap();
            writeln!(s, "cwd = \"/srv/{m}\"").unwrap();
            writeln!(s, "inherit_env = [\"{m}_INHERIT\"]").unwrap();
            writeln!(s, "env_file = \"{m}.env\"").unwrap();
            writeln!(s, "identity_files = [\"{m}.py\"]").unwrap();
            writeln!(s, "labels = {{ mark = \"{m}-label\" }}").unwrap();
            writeln!(
                s,
                "endpoints = {{ http = \"http://${{host.address}}:{}\" }}",
                20000 + i
            )
            .unwrap();
            let deps: Vec<String> = c.depends_on.iter().map(|d| format!("\"c{d}\"")).collect();
            writeln!(s, "depends_on = [{}]", deps.join(", ")).unwrap();
            let conns: Vec<usize> = c
                .connects
                .iter()
                .copied()
                .filter(|&j| self.reachable(i, j))
                .collect();
            let mut env = format!("V = \"{m}-env\", S = {{ secret = \"{m}_SECRET\" }}");
            if !conns.is_empty() {
                let list: Vec<String> = conns
                    .iter()
                    .map(|j| format!("up{j} = \"c{j}.http\""))
                    .collect();
                writeln!(s, "connections = {{ {} }}", list.join(", ")).unwrap();
                for j in &conns {
                    write!(env, ", UP{j} = \"${{connections.up{j}}}/{m}\"").unwrap();
                }
            }
            writeln!(s, "env = {{ {env} }}").unwrap();
            match c.probe {
                1 => writeln!(
                    s,
                    "readiness = {{ http = {{ endpoint = \"http\", path = \"/{m}/health\" }} }}"
                ),
                2 => writeln!(
                    s,
                    "readiness = {{ exec = {{ command = [\"check\", \"{m}-probe\"] }} }}"
                ),
                3 => writeln!(s, "liveness = {{ log = {{ pattern = \"{m}-ready\" }} }}"),
                _ => Ok(()),
            }
            .unwrap();
            if c.restart {
                writeln!(s, "restart = {{ policy = \"always\", backoff = \"2s\" }}").unwrap();
            }
            if c.stop {
                writeln!(s, "stop = {{ signal = \"SIGINT\", grace_period = \"3s\" }}").unwrap();
            }
        }
        for j in self.tunnel_targets() {
            let m = format!("MARKT{j}Z");
            writeln!(
                s,
                "[components.t{j}]\ndescription = \"{m}\"\nlabels = {{ mark = \"{m}\" }}\nadapter = \"ssh-tunnel\"\ntunnel = {{ via = \"{}\", target = \"c{j}.http\", listen_port = {} }}",
                self.host_name(self.comps[j].host),
                30000 + j
            )
            .unwrap();
        }
        let mut members: Vec<usize> = self
            .stack
            .iter()
            .copied()
            .filter(|&i| i < self.comps.len())
            .collect();
        members.sort();
        members.dedup();
        if !members.is_empty() {
            let list: Vec<String> = members.iter().map(|i| format!("\"c{i}\"")).collect();
            writeln!(
                s,
                "[stacks.everything]\ndescription = \"MARKSTACKZ\"\ncomponents = [{}]\n[[stacks.everything.readiness]]\nexec = {{ command = [\"MARKSTACKZ-check\"] }}",
                list.join(", ")
            )
            .unwrap();
        }
        s
    }

    /// Every component's name and host, with the marker written into its fields.
    fn markers(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .comps
            .iter()
            .enumerate()
            .map(|(i, c)| (format!("MARKC{i}Z"), self.host_name(c.host)))
            .collect();
        out.extend(
            self.tunnel_targets()
                .into_iter()
                .map(|j| (format!("MARKT{j}Z"), "local".to_string())),
        );
        out
    }
}

fn fleet() -> impl Strategy<Value = Fleet> {
    (
        prop::collection::vec((any::<bool>(), any::<bool>(), any::<bool>()), 0..4),
        any::<bool>(),
        1usize..9,
    )
        .prop_flat_map(|(hosts, local_control, n)| {
            let n_hosts = hosts.len() + 1;
            let comp = (
                0..n_hosts,
                prop::collection::vec(0usize..8, 0..3),
                prop::collection::vec(0usize..8, 0..3),
                0u8..4,
                any::<bool>(),
                any::<bool>(),
            );
            (
                Just(hosts),
                Just(local_control),
                prop::collection::vec(comp, n),
                prop::collection::vec(0usize..8, 0..3),
                prop::collection::vec(0usize..8, 0..4),
            )
        })
        .prop_map(|(hosts, local_control, comps, tunnels, stack)| {
            let comps = comps
                .into_iter()
                .enumerate()
                .map(|(i, (host, deps, conns, probe, restart, stop))| {
                    // Only earlier components: the graph is acyclic.
                    let earlier = |v: Vec<usize>| {
                        let mut v: Vec<usize> = v.into_iter().filter(|&j| j < i).collect();
                        v.sort();
                        v.dedup();
                        v
                    };
                    Comp {
                        host,
                        depends_on: earlier(deps),
                        connects: earlier(conns),
                        probe,
                        restart,
                        stop,
                    }
                })
                .collect();
            Fleet {
                hosts,
                local_control,
                comps,
                tunnels,
                stack,
            }
        })
}

fn topology_of(toml: &str) -> Result<Topology, String> {
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new("flotilla.toml", Format::Toml, toml));
    validate(&sources, id, &[])
        .map(|v| v.topology)
        .map_err(|d| format!("{d:#?}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn a_component_host_sees_nothing_of_other_hosts_components(f in fleet()) {
        let toml = f.toml();
        let t = match topology_of(&toml) {
            Ok(t) => t,
            Err(e) => return Err(TestCaseError::fail(format!("generated inventory invalid:\n{toml}\n{e}"))),
        };
        let markers = f.markers();
        for (name, host) in &t.hosts {
            let view = t.host_view(name);
            prop_assert_eq!(view.role, host.role);
            let json = canonical_json(&view);
            // Its own components are there, whole.
            for (m, h) in &markers {
                if h == name {
                    let label = format!("{m}-label");
                    prop_assert!(json.contains(&label) || m.starts_with("MARKT"));
                    prop_assert!(json.contains(m.as_str()), "{} missing from {}'s view", m, name);
                }
            }
            match view.role {
                HostRole::Component => {
                    prop_assert!(view.topology.is_none());
                    for (m, h) in &markers {
                        if h != name {
                            prop_assert!(
                                !json.contains(m.as_str()),
                                "{}'s marker {} (host {}) leaked into {}'s view:\n{}\n{}",
                                m, m, h, name, toml, json
                            );
                        }
                    }
                    prop_assert!(!json.contains("MARKSTACKZ"), "the stack leaked into {}'s view", name);
                }
                HostRole::Control => {
                    let doc = view.topology.clone().expect("a control host gets the revision");
                    // As it travels: JSON, then rebuilt and checked.
                    let back: HostView = serde_json::from_str(&json).unwrap();
                    prop_assert_eq!(&back, &view);
                    let rebuilt = Topology::from_revision(&canonical_json(&doc)).unwrap();
                    prop_assert_eq!(rebuilt.digest(), t.digest());
                    let rebuilt = Topology::from_revision_doc(back.topology.unwrap()).unwrap();
                    prop_assert_eq!(rebuilt.digest(), t.digest());
                    prop_assert_eq!(rebuilt.order(), t.order());
                }
            }
            // The snapshot part holds only the host's own components.
            prop_assert!(view.snapshot.components.iter().all(|c| &c.host == name));
            prop_assert_eq!(
                view.snapshot.components.len(),
                t.components.iter().filter(|c| &c.host == name).count()
            );
        }
        // Every revision round-trips, whatever the roles.
        let back = Topology::from_revision(&t.revision_json()).unwrap();
        prop_assert_eq!(back.digest(), t.digest());
    }
}
