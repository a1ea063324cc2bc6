//! Components and stacks decoded entry by entry; each component combined with its
//! active profile and template into a [`Draft`], with the owner/adapter rules checked.

use super::references::LoadedTemplate;
use super::{any_broken, help_for, hints, index_str, Located, Validator, START_KEYS};
use crate::diag::{Code, Diagnostic, Location};
use crate::inventory::{AdapterKind, ComponentSpec, Owner, ProbeSpec, ReleaseSpec, StackSpec};
use crate::node::{from_node, Entry, Node};
use crate::template::TemplateOutput;
use crate::topology::{Connection, Host, Probe, Restart, Tunnel};
use crate::values::{Endpoint, EnvValue};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A component after its own keys, profile and template are combined.
pub(super) struct Draft<'a> {
    pub(super) name: &'a str,
    pub(super) entry: &'a Entry<'a>,
    pub(super) spec: ComponentSpec,
    /// Key paths that failed to decode and were set aside (errors already reported):
    /// checks that depend on them are skipped so one mistake is reported once.
    pub(super) broken: Vec<Vec<String>>,
    pub(super) host: String,
    pub(super) owner: Owner,
    pub(super) adapter: Option<AdapterKind>,
    pub(super) command: Vec<Located<String>>,
    pub(super) env: BTreeMap<String, Located<EnvValue>>,
    pub(super) cwd: Option<Located<String>>,
    pub(super) endpoints: BTreeMap<String, Located<String>>,
    pub(super) readiness: Option<Located<ProbeSpec>>,
    pub(super) liveness: Option<Located<ProbeSpec>>,
    pub(super) stop: Option<crate::inventory::StopSpec>,
    /// The restart policy, resolved (managed components only).
    pub(super) restart: Option<Restart>,
    /// The release its program comes from, checked (managed components only).
    pub(super) release: Option<ReleaseSpec>,
    pub(super) tunnel: Option<Located<crate::inventory::TunnelSpec>>,
    // Filled in the cross-reference phase.
    pub(super) parsed_endpoints: BTreeMap<String, Endpoint>,
    /// Its host's address (`${host.address}` in endpoints and inline probe targets).
    pub(super) host_address: String,
    /// Its host's container engine API, for a container component whose host declares one.
    pub(super) container_api: Option<String>,
    /// Its host's cluster, for a `kubernetes` component on a cluster.
    pub(super) cluster: Option<crate::topology::Cluster>,
    /// Upstream components (indices into the name-sorted drafts) and where each
    /// dependency is declared.
    pub(super) deps: BTreeMap<usize, Location>,
    pub(super) connections: BTreeMap<String, Connection>,
    pub(super) resolved_tunnel: Option<Tunnel>,
    pub(super) resolved_readiness: Option<Probe>,
    pub(super) resolved_liveness: Option<Probe>,
}

impl Validator {
    /// Decodes every stack entry (its members and probes are checked later). A key
    /// that fails to decode is set aside, so the stack's other keys are still checked.
    pub(super) fn decode_stacks<'a>(
        &mut self,
        stacks_node: Option<&'a Node<'a>>,
    ) -> Vec<(&'a Entry<'a>, StackSpec)> {
        let mut stacks: Vec<(&Entry, StackSpec)> = Vec::new();
        for e in stacks_node.map(Node::entries).unwrap_or(&[]) {
            if !self.check_name("stack", e) {
                continue;
            }
            let what = || format!("stack `{}`", e.key);
            if let Some((s, _)) = self.decode_all::<StackSpec>(self.file, &what, &e.value) {
                stacks.push((e, s));
            }
        }
        stacks
    }

    /// Decodes every component entry into a [`Draft`] (in file order). Component names,
    /// even of broken entries, go into `declared_components`.
    pub(super) fn decode_components<'a>(
        &mut self,
        comp_entries: &'a [Entry<'a>],
        declared_components: &mut BTreeSet<&'a str>,
        declared_hosts: &BTreeSet<&str>,
        hosts: &BTreeMap<String, Host>,
        templates: &HashMap<String, LoadedTemplate>,
    ) -> Vec<Draft<'a>> {
        let mut drafts: Vec<Draft<'_>> = Vec::with_capacity(comp_entries.len());
        for e in comp_entries {
            declared_components.insert(&e.key);
            if !self.check_name("component", e) {
                continue;
            }
            let what = || format!("component `{}`", e.key);
            let json = self.json;
            if let Some((spec, broken)) = self.retry_decode(
                self.file,
                &what,
                &e.value,
                |n| from_node::<ComponentSpec>(n),
                |err, current| hints::component_error(err, current, json),
            ) {
                if let Some(d) = self.draft(e, spec, broken, declared_hosts, hosts, templates) {
                    drafts.push(d);
                }
            }
        }
        drafts
    }

    /// Combines a component's keys, active profile and template.
    fn draft<'a>(
        &mut self,
        e: &'a Entry,
        mut spec: ComponentSpec,
        mut broken: Vec<Vec<String>>,
        declared_hosts: &BTreeSet<&str>,
        hosts: &BTreeMap<String, Host>,
        templates: &HashMap<String, LoadedTemplate>,
    ) -> Option<Draft<'a>> {
        let name = e.key.as_ref();
        let node = &e.value;
        let file = self.file;
        let at = |path: &[&str]| Location {
            file,
            span: node.span_at(path),
        };

        let host = spec.host.clone().unwrap_or_else(|| "local".into());
        if !declared_hosts.contains(host.as_str()) {
            let mut d = Diagnostic::error(
                Code::UnknownHost,
                format!("component `{name}` runs on host `{host}`, which is not declared"),
                at(&["host"]),
            );
            d.help = help_for(&host, hosts.keys())
                .or_else(|| Some(format!("declare it under [hosts.{host}]")));
            self.push(d);
        }

        let profile = self.active_profile(name, &spec, at(&["profile"]));
        let prof = profile.as_ref().map(|p| &spec.profiles[p]);
        let ppath = |rest: &[&str]| -> Vec<String> {
            let mut v = vec!["profiles".to_string(), profile.clone().unwrap_or_default()];
            v.extend(rest.iter().map(|s| s.to_string()));
            v
        };
        let at_owned = |path: Vec<String>| {
            let refs: Vec<&str> = path.iter().map(String::as_str).collect();
            Location {
                file,
                span: node.span_at(&refs),
            }
        };

        // Template parameters: the component's, with the profile's merged over them.
        let tpl_loc = at(&["template"]);
        // A template that cannot be expanded (errors reported) is set aside like a
        // broken key: what depends on it (how it starts, its template endpoints) is
        // not checked, everything else is.
        let tpl = match self.component_template(
            e,
            &spec,
            profile.as_deref(),
            &host,
            hosts,
            templates,
            &mut broken,
            tpl_loc,
        ) {
            Some(tpl) => tpl,
            None => {
                broken.push(vec!["template".into()]);
                TemplateOutput::default()
            }
        };

        // A template's container (adapter `container`), under the component's own keys.
        if let Some(c) = tpl.container.clone() {
            spec.container = Some(crate::template::container_over(c, spec.container.take()));
        }
        let owner = spec.owner.or(tpl.owner).unwrap_or_default();
        let adapter = spec.adapter.or(tpl.adapter);

        // Command: profile, else component, else template.
        let command: Vec<Located<String>> = if let Some(c) = prof.and_then(|p| p.command.clone()) {
            c.into_iter()
                .enumerate()
                .map(|(i, a)| Located {
                    value: a,
                    loc: at_owned(ppath(&["command", index_str(i).as_ref()])),
                })
                .collect()
        } else if let Some(c) = &spec.command {
            c.iter()
                .enumerate()
                .map(|(i, a)| Located {
                    value: a.clone(),
                    loc: at(&["command", index_str(i).as_ref()]),
                })
                .collect()
        } else {
            tpl.command
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|a| Located {
                    value: a,
                    loc: tpl_loc,
                })
                .collect()
        };
        let mut env = layered(&tpl.env, tpl_loc, &spec.env, |k| at(&["env", k]));
        let mut endpoints = layered(&tpl.endpoints, tpl_loc, &spec.endpoints, |k| {
            at(&["endpoints", k])
        });
        let mut cwd = spec.cwd.clone().map(|c| Located {
            value: c,
            loc: at(&["cwd"]),
        });
        if let Some(p) = prof {
            for (k, v) in &p.env {
                env.insert(
                    k.clone(),
                    Located {
                        value: v.clone(),
                        loc: at_owned(ppath(&["env", k])),
                    },
                );
            }
            for (k, v) in &p.endpoints {
                endpoints.insert(
                    k.clone(),
                    Located {
                        value: v.clone(),
                        loc: at_owned(ppath(&["endpoints", k])),
                    },
                );
            }
            if let Some(c) = &p.cwd {
                cwd = Some(Located {
                    value: c.clone(),
                    loc: at_owned(ppath(&["cwd"])),
                });
            }
        }
        let readiness = match &spec.readiness {
            Some(r) => Some(Located {
                value: r.clone(),
                loc: at(&["readiness"]),
            }),
            None => tpl.readiness.clone().map(|r| Located {
                value: r,
                loc: tpl_loc,
            }),
        };
        let liveness = match &spec.liveness {
            Some(r) => Some(Located {
                value: r.clone(),
                loc: at(&["liveness"]),
            }),
            None => tpl.liveness.clone().map(|r| Located {
                value: r,
                loc: tpl_loc,
            }),
        };
        let tunnel = match &spec.tunnel {
            Some(t) => Some(Located {
                value: t.clone(),
                loc: at(&["tunnel"]),
            }),
            None => tpl.tunnel.clone().map(|t| Located {
                value: t,
                loc: tpl_loc,
            }),
        };
        let stop = spec.stop.clone().or(tpl.stop.clone());

        match owner {
            Owner::External => {
                let mut lifecycle_keys: Vec<&str> = Vec::new();
                let explicit = |k: &str| node.get(k).is_some();
                for k in [
                    "command",
                    "adapter",
                    "stop",
                    "cwd",
                    "env",
                    "tunnel",
                    "launchd",
                    "systemd",
                    "restart",
                    "release",
                    "container",
                ] {
                    if explicit(k) {
                        lifecycle_keys.push(k);
                    }
                }
                let profile_cmd = prof.is_some_and(|p| p.command.is_some());
                for k in &lifecycle_keys {
                    self.push(
                        Diagnostic::error(
                            Code::ExternalLifecycle,
                            format!("external component `{name}` declares `{k}`, but external components are observed only, never started or stopped"),
                            self.loc(node.key_span_at(&[k])),
                        )
                        .with_help(format!("remove `{k}`, or make `{name}` managed (owner = \"managed\")")),
                    );
                }
                if profile_cmd {
                    self.push(Diagnostic::error(
                        Code::ExternalLifecycle,
                        format!(
                            "external component `{name}` has a profile that declares `command`"
                        ),
                        at_owned(ppath(&["command"])),
                    ));
                }
                if tpl.command.is_some() {
                    self.push(Diagnostic::error(
                        Code::ExternalLifecycle,
                        format!(
                            "external component `{name}` uses a template that supplies a command"
                        ),
                        tpl_loc,
                    ));
                }
            }
            Owner::Managed => {
                let adapter = adapter.unwrap_or_default();
                let has_start = match adapter {
                    AdapterKind::Process => !command.is_empty(),
                    AdapterKind::SshTunnel => tunnel.is_some(),
                    AdapterKind::Launchd => {
                        spec.launchd.as_ref().is_some_and(|l| l.plist.is_some())
                            || (spec.launchd.is_some() && !command.is_empty())
                    }
                    AdapterKind::Systemd => {
                        !command.is_empty()
                            || spec.systemd.as_ref().is_some_and(|s| s.unit.is_some())
                    }
                    AdapterKind::Container => spec.container.is_some(),
                    AdapterKind::Kubernetes => spec.kubernetes.is_some(),
                };
                if !has_start && !any_broken(&broken, START_KEYS) {
                    let need = match adapter {
                        AdapterKind::Process => "a `command` (argv list) or a `template`",
                        AdapterKind::SshTunnel => "a `tunnel` table or template = \"ssh-tunnel\"",
                        AdapterKind::Launchd => "a `launchd` table with the job's `label`, and a `command` (Flotilla writes the job's plist) or `launchd.plist` (an existing one)",
                        AdapterKind::Systemd => "a `command` (Flotilla writes the unit) or `systemd = { unit = \"name.service\" }` (an existing unit)",
                        AdapterKind::Container => "a `container` table with the `image` it runs, e.g. container = { image = \"ghcr.io/open-webui/open-webui:main\" }",
                        AdapterKind::Kubernetes => "a `kubernetes` table with the `image` its pods run, e.g. kubernetes = { image = \"ghcr.io/ggml-org/llama.cpp:server\" }",
                    };
                    self.push(
                        Diagnostic::error(
                            Code::NoStartMethod,
                            format!(
                                "managed component `{name}` (adapter `{}`) has no way to start",
                                adapter.as_str()
                            ),
                            self.loc(e.key_span),
                        )
                        .with_help(format!(
                            "add {need}, or set owner = \"external\" if something else runs it"
                        )),
                    );
                }
                if adapter == AdapterKind::Process
                    && command.first().is_some_and(|c| c.value.is_empty())
                {
                    self.push(Diagnostic::error(
                        Code::NoStartMethod,
                        format!(
                            "component `{name}`: the program (first element of `command`) is empty"
                        ),
                        command[0].loc,
                    ));
                }
                // With its template set aside the adapter may be the template's.
                let adapter_known = spec.adapter.is_some() || !any_broken(&broken, &["template"]);
                for (key, wanted) in [
                    ("tunnel", AdapterKind::SshTunnel),
                    ("launchd", AdapterKind::Launchd),
                    ("systemd", AdapterKind::Systemd),
                    ("container", AdapterKind::Container),
                    ("kubernetes", AdapterKind::Kubernetes),
                ] {
                    if adapter_known && node.get(key).is_some() && adapter != wanted {
                        self.push(
                            Diagnostic::error(
                                Code::InvalidValue,
                                format!(
                                    "component `{name}` declares `{key}` but its adapter is `{}`",
                                    adapter.as_str()
                                ),
                                self.loc(node.key_span_at(&[key])),
                            )
                            .with_help(format!("set adapter = \"{}\"", wanted.as_str())),
                        );
                    }
                }
                if adapter_known {
                    self.container_rules(name, node, &spec, adapter, &env, &broken);
                }
            }
        }
        let restart = if owner == Owner::Managed {
            self.restart(
                name,
                node,
                &spec,
                adapter.unwrap_or_default(),
                command.is_empty(),
            )
        } else {
            None
        };
        let release = if owner == Owner::Managed {
            self.release(name, node, &spec, &command)
        } else {
            None
        };
        if owner == Owner::External || spec.adapter.is_some() || !any_broken(&broken, &["template"])
        {
            self.kubernetes_rules(
                name,
                node,
                self.loc(e.key_span),
                &spec,
                owner,
                adapter.unwrap_or_default(),
                hosts.get(&host),
                &env,
                &broken,
            );
        }
        let cluster = (adapter == Some(AdapterKind::Kubernetes) && owner == Owner::Managed)
            .then(|| hosts.get(&host).and_then(|h| h.cluster.clone()))
            .flatten();
        let container_api = (adapter == Some(AdapterKind::Container) && owner == Owner::Managed)
            .then(|| hosts.get(&host).and_then(|h| h.container_api.clone()))
            .flatten();
        // A draft is kept even when something above was wrong, so its dependencies,
        // connections and probes are still checked (errors already fail validation).
        Some(Draft {
            name,
            entry: e,
            spec,
            broken,
            host,
            owner,
            adapter: if owner == Owner::Managed {
                Some(adapter.unwrap_or_default())
            } else {
                None
            },
            command,
            env,
            cwd,
            endpoints,
            readiness,
            liveness,
            stop,
            restart,
            release,
            tunnel,
            parsed_endpoints: BTreeMap::new(),
            host_address: String::new(),
            container_api,
            cluster,
            deps: BTreeMap::new(),
            connections: BTreeMap::new(),
            resolved_tunnel: None,
            resolved_readiness: None,
            resolved_liveness: None,
        })
    }
}

impl Validator {
    /// Resolves a managed component's `restart` table: defaults filled, durations at
    /// least 1 ms, `backoff` ≤ `max_backoff`, and only where Flotilla can make it
    /// happen (not on a unit or plist it does not write).
    fn restart(
        &mut self,
        name: &str,
        node: &Node,
        spec: &ComponentSpec,
        adapter: AdapterKind,
        no_command: bool,
    ) -> Option<Restart> {
        let r = spec.restart.as_ref()?;
        let file = self.file;
        let at = |key: &str| Location {
            file,
            span: node.span_at(&["restart", key]),
        };
        let foreign = match adapter {
            AdapterKind::Systemd if no_command => Some((
                "an existing systemd unit",
                "set `Restart=` in the unit itself (its own policy is respected and its restarts are reported)",
            )),
            AdapterKind::Launchd if spec.launchd.as_ref().is_some_and(|l| l.plist.is_some()) => Some((
                "an existing launchd plist",
                "set `KeepAlive` and `ThrottleInterval` in the plist itself",
            )),
            _ => None,
        };
        if let Some((what, help)) = foreign {
            self.push(
                Diagnostic::error(
                    Code::InvalidValue,
                    format!("component `{name}` declares `restart`, but it runs as {what}, which Flotilla does not write"),
                    self.loc(node.key_span_at(&["restart"])),
                )
                .with_help(help),
            );
            return None;
        }
        let mut ok = true;
        let mut millis = [1_000u64, 300_000u64];
        for (i, (key, d)) in [("backoff", r.backoff), ("max_backoff", r.max_backoff)]
            .into_iter()
            .enumerate()
        {
            let Some(d) = d else { continue };
            millis[i] = u64::try_from(d.0.as_millis()).unwrap_or(u64::MAX);
            if millis[i] == 0 {
                ok = false;
                self.push(
                    Diagnostic::error(
                        Code::InvalidValue,
                        format!("component `{name}`: restart `{key}` must be at least 1ms"),
                        at(key),
                    )
                    .with_help("e.g. backoff = \"1s\", max_backoff = \"5m\""),
                );
            }
        }
        let [backoff_ms, max_backoff_ms] = millis;
        if ok && backoff_ms > max_backoff_ms {
            let limit = match r.max_backoff {
                Some(m) => format!("`max_backoff` ({})", humantime::format_duration(m.0)),
                None => "the default `max_backoff` (5m)".to_string(),
            };
            self.push(
                Diagnostic::error(
                    Code::InvalidValue,
                    format!("component `{name}`: restart `backoff` is longer than {limit}"),
                    at("backoff"),
                )
                .with_help("the delay doubles after each restart in a row, up to max_backoff: make backoff ≤ max_backoff"),
            );
            ok = false;
        }
        ok.then_some(Restart {
            policy: r.policy,
            backoff_ms,
            max_backoff_ms,
            max_restarts: r.max_restarts.unwrap_or(10),
        })
    }
}

impl Validator {
    /// Checks a managed component's `release` table: a release name of
    /// `[A-Za-z0-9._+-]` other than `flotilla-agent`, an absolute `root`; warns when the
    /// command does not run `<root>/current/<name>` (a rollout would then switch files
    /// the component never runs: `RestartHadNoEffect`).
    fn release(
        &mut self,
        name: &str,
        node: &Node,
        spec: &ComponentSpec,
        command: &[Located<String>],
    ) -> Option<ReleaseSpec> {
        let r = spec.release.as_ref()?;
        let file = self.file;
        let at = |key: &str| Location {
            file,
            span: node.span_at(&["release", key]),
        };
        let mut ok = true;
        let word = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'+' | b'-'))
                && s != "."
                && s != ".."
        };
        if !word(&r.name) {
            ok = false;
            self.push(
                Diagnostic::error(
                    Code::InvalidValue,
                    format!(
                        "component `{name}`: release name `{}` must be letters, digits and `._+-` (it is the program's file name)",
                        r.name
                    ),
                    at("name"),
                )
                .with_help("the name of the release as its manifest says, e.g. name = \"llama-server\""),
            );
        } else if r.name == "flotilla-agent" {
            ok = false;
            self.push(
                Diagnostic::error(
                    Code::InvalidValue,
                    format!("component `{name}`: release `flotilla-agent` is the agent's own binary, not a component's"),
                    at("name"),
                )
                .with_help("agents update themselves from their own install root (flotilla agent install --root DIR)"),
            );
        }
        if !r.root.starts_with('/') {
            ok = false;
            self.push(
                Diagnostic::error(
                    Code::InvalidValue,
                    format!(
                        "component `{name}`: release root `{}` must be an absolute path on its host",
                        r.root
                    ),
                    at("root"),
                )
                .with_help("e.g. root = \"/opt/llama\""),
            );
        }
        if !ok {
            return None;
        }
        let want = format!("{}/current/{}", r.root.trim_end_matches('/'), r.name);
        match command.first() {
            Some(c) if c.value == want || c.value.contains("${") => {}
            Some(c) => self.push(
                Diagnostic::warning(
                    Code::Suspicious,
                    format!(
                        "component `{name}` declares release `{}` but its command runs `{}`, not `{want}`: a rollout would switch a program it does not run",
                        r.name, c.value
                    ),
                    c.loc,
                )
                .with_help(format!("make the command's first element \"{want}\"")),
            ),
            None => self.push(
                Diagnostic::warning(
                    Code::Suspicious,
                    format!(
                        "component `{name}` declares release `{}` but has no command that runs `{want}`",
                        r.name
                    ),
                    self.loc(node.key_span_at(&["release"])),
                )
                .with_help(format!("make the command's first element \"{want}\"")),
            ),
        }
        Some(r.clone())
    }
}

/// A template's map (each value located at the template) with the component's own
/// entries over it (each located where `at` says).
fn layered<V: Clone>(
    template: &BTreeMap<String, V>,
    template_loc: Location,
    own: &BTreeMap<String, V>,
    at: impl Fn(&str) -> Location,
) -> BTreeMap<String, Located<V>> {
    let located = |value: &V, loc| Located {
        value: value.clone(),
        loc,
    };
    let mut out: BTreeMap<String, Located<V>> = template
        .iter()
        .map(|(k, v)| (k.clone(), located(v, template_loc)))
        .collect();
    for (k, v) in own {
        out.insert(k.clone(), located(v, at(k)));
    }
    out
}
