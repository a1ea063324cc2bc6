//! Validation: source files in, a [`Topology`] (plus warnings) or every problem found
//! out, each located at `file:line:column`.
//!
//! Phases: parse each file; decode hosts, components and stacks one entry at a time
//! (one broken entry does not hide the others); load user templates; resolve each
//! component (profile, template, owner/adapter rules); resolve cross references
//! (dependencies, connections, tunnels, `${...}`, probes); check ports, stacks, names
//! and cycles; build the indexed topology.

use crate::diag::{did_you_mean, Code, Diagnostic, Location, Severity};
use crate::inventory::{
    AdapterKind, ComponentSpec, HostSpec, Owner, ProbeSpec, StackSpec, TransportKind,
};
use crate::node::{self, from_node, DecodeError, Entry, Node, Value};
use crate::source::{FileId, Sources, Span};
use crate::template::{self, TemplateFile, TemplateOutput};
use crate::topology::{
    Check, Component, ComponentId, Connection, Host, Probe, Stack, Stop, Topology, Tunnel,
};
use crate::values::{Endpoint, EnvValue, HumanDuration, Signal};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

fn refs_names(templates: &[TemplateRef]) -> HashSet<String> {
    templates.iter().map(|t| t.name.clone()).collect()
}

/// A user template file to load: its name (what `template = "..."` refers to) and file.
#[derive(Debug, Clone)]
pub struct TemplateRef {
    /// Template name.
    pub name: String,
    /// The file in the [`Sources`] set.
    pub file: FileId,
}

/// A valid inventory: the topology and any warnings.
#[derive(Debug, Clone)]
pub struct Validated {
    /// The topology.
    pub topology: Topology,
    /// Problems that do not make the inventory invalid.
    pub warnings: Vec<Diagnostic>,
}

/// Validates the inventory in `inventory` (and the user templates in `templates`).
///
/// # Errors
/// Every problem found (errors and warnings, in file order), when at least one is an
/// error.
pub fn validate(
    sources: &Sources,
    inventory: FileId,
    templates: &[TemplateRef],
) -> Result<Validated, Vec<Diagnostic>> {
    let mut v = Validator {
        file: inventory,
        diags: Vec::new(),
        broken_templates: refs_names(templates),
    };
    let text = &sources.get(inventory).text;
    let root = match node::parse(text, sources.get(inventory).format) {
        Ok(root) => root,
        Err(errors) => {
            for e in errors {
                let code = if e.message.contains("duplicate key") {
                    Code::DuplicateKey
                } else {
                    Code::Syntax
                };
                v.error_at(inventory, code, e.message, e.span);
            }
            return Err(v.diags);
        }
    };
    let templates = v.load_templates(sources, templates);
    v.broken_templates.retain(|n| !templates.contains_key(n));
    let result = v.run(&root, &templates);
    let mut diags = v.diags;
    diags.sort_by_key(|d| {
        d.location
            .map(|l| (l.file, l.span.start))
            .unwrap_or((FileId(u32::MAX), 0))
    });
    match result {
        Some(topology) if !diags.iter().any(|d| d.severity == Severity::Error) => Ok(Validated {
            topology,
            warnings: diags,
        }),
        _ => Err(diags),
    }
}

/// A user template file that loaded without errors.
struct LoadedTemplate {
    spec: TemplateFile,
}

struct Validator {
    file: FileId,
    diags: Vec<Diagnostic>,
    /// Template files that exist but failed to load (their errors are reported).
    broken_templates: HashSet<String>,
}

/// Why a `component.endpoint` reference failed: code, message, help.
/// (`Code::Suspicious` marks a reference to a broken entry, already reported.)
type RefProblem = (Code, String, Option<String>);

/// A component's host, parsed endpoints, and whether they may be incomplete because
/// part of the component failed to decode.
type EndpointView = (String, BTreeMap<String, Endpoint>, bool);

/// Keys whose breakage makes "how does it start" unanswerable.
const START_KEYS: &[&str] = &[
    "command", "template", "params", "adapter", "tunnel", "launchd", "systemd", "profiles", "owner",
];
/// Keys whose breakage makes the component's endpoints and references uncertain.
const ENDPOINT_KEYS: &[&str] = &[
    "endpoints",
    "template",
    "params",
    "profiles",
    "connections",
    "tunnel",
];

fn any_broken(broken: &[Vec<String>], keys: &[&str]) -> bool {
    broken
        .iter()
        .any(|p| p.first().is_some_and(|k| keys.contains(&k.as_str())))
}

/// A string and where it was written.
#[derive(Debug, Clone)]
struct Located<T> {
    value: T,
    loc: Location,
}

/// A component after its own keys, profile and template are combined.
struct Draft<'a> {
    name: &'a str,
    entry: &'a Entry<'a>,
    spec: ComponentSpec,
    /// Key paths that failed to decode and were set aside (errors already reported):
    /// checks that depend on them are skipped so one mistake is reported once.
    broken: Vec<Vec<String>>,
    host: String,
    owner: Owner,
    adapter: Option<AdapterKind>,
    command: Vec<Located<String>>,
    env: BTreeMap<String, Located<EnvValue>>,
    cwd: Option<Located<String>>,
    endpoints: BTreeMap<String, Located<String>>,
    readiness: Option<Located<ProbeSpec>>,
    liveness: Option<Located<ProbeSpec>>,
    stop: Option<crate::inventory::StopSpec>,
    tunnel: Option<Located<crate::inventory::TunnelSpec>>,
    // Filled in the cross-reference phase.
    parsed_endpoints: BTreeMap<String, Endpoint>,
    /// Upstream components (indices into the name-sorted drafts) and where each
    /// dependency is declared.
    deps: BTreeMap<usize, Location>,
    connections: BTreeMap<String, Connection>,
    resolved_tunnel: Option<Tunnel>,
    resolved_readiness: Option<Probe>,
    resolved_liveness: Option<Probe>,
}

const TOP_KEYS: &[&str] = &["$schema", "hosts", "components", "stacks"];

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn help_for(word: &str, candidates: impl IntoIterator<Item = impl AsRef<str>>) -> Option<String> {
    let owned: Vec<String> = candidates
        .into_iter()
        .map(|c| c.as_ref().to_string())
        .collect();
    did_you_mean(word, owned.iter().map(String::as_str)).map(|s| format!("did you mean `{s}`?"))
}

impl Validator {
    fn loc(&self, span: Span) -> Location {
        Location {
            file: self.file,
            span,
        }
    }

    fn push(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    fn error_at(&mut self, file: FileId, code: Code, msg: impl Into<String>, span: Span) {
        self.diags
            .push(Diagnostic::error(code, msg, Location { file, span }));
    }

    fn decode_error(&mut self, file: FileId, what: &str, e: DecodeError, fallback: Span) {
        let mut d = Diagnostic::error(
            e.code,
            format!("{what}: {}", e.message),
            Location {
                file,
                span: e.span.unwrap_or(fallback),
            },
        );
        d.help = e.help;
        self.push(d);
    }

    /// Decodes `node` as `T`, reporting every decoding error it can: after each error
    /// the offending key is set aside and decoding is tried again. Returns the value
    /// decoded from what remains (the errors already make validation fail), or `None`
    /// when a required part is missing or broken.
    fn decode_all<T: serde::de::DeserializeOwned>(
        &mut self,
        file: FileId,
        what: &dyn Fn() -> String,
        node: &Node,
    ) -> Option<(T, Vec<Vec<String>>)> {
        self.retry_decode(file, what, node, |n| from_node::<T>(n), |e| e)
    }

    /// Runs `decode` on `node`; after each error (reported, after `adjust`), the
    /// offending key is set aside and decoding is tried again. Returns the value and
    /// the key paths set aside, or `None` when a required part is missing or broken.
    fn retry_decode<T>(
        &mut self,
        file: FileId,
        what: &dyn Fn() -> String,
        node: &Node,
        decode: impl Fn(&Node) -> Result<T, DecodeError>,
        adjust: impl Fn(DecodeError) -> DecodeError,
    ) -> Option<(T, Vec<Vec<String>>)> {
        let mut pruned: Option<Node> = None;
        let mut removed: Vec<Vec<String>> = Vec::new();
        for _ in 0..32 {
            let current = pruned.as_ref().unwrap_or(node);
            match decode(current) {
                Ok(v) => return Some((v, removed)),
                Err(err) => {
                    if err
                        .missing
                        .as_ref()
                        .is_some_and(|k| removed.iter().any(|p| p.last() == Some(k)))
                    {
                        // We set that key aside ourselves; its error is already reported.
                        return None;
                    }
                    let span = err.span.unwrap_or(node.span);
                    if let Some(p) = key_path_at(current, span) {
                        removed.push(p);
                    }
                    let missing = err.code == Code::MissingKey;
                    self.decode_error(file, &what(), adjust(err), node.span);
                    if missing || span == node.span {
                        return None;
                    }
                    let mut next = current.clone();
                    if !next.remove_span(span) {
                        return None;
                    }
                    pruned = Some(next);
                }
            }
        }
        None
    }

    fn load_templates(
        &mut self,
        sources: &Sources,
        refs: &[TemplateRef],
    ) -> HashMap<String, LoadedTemplate> {
        let mut out = HashMap::new();
        for r in refs {
            let f = sources.get(r.file);
            let root = match node::parse(&f.text, f.format) {
                Ok(root) => root,
                Err(errors) => {
                    for e in errors {
                        self.error_at(r.file, Code::Syntax, e.message, e.span);
                    }
                    continue;
                }
            };
            if template::is_builtin(&r.name) {
                self.error_at(
                    r.file,
                    Code::AmbiguousName,
                    format!(
                        "template file `{}` has the name of a built-in template; rename the file",
                        f.name
                    ),
                    Span::new(0, 0),
                );
                continue;
            }
            let Some(spec) = self
                .decode_all::<TemplateFile>(r.file, &|| format!("template `{}`", r.name), &root)
                .map(|(t, _)| t)
            else {
                continue;
            };
            let mut ok = true;
            for (pname, decl) in &spec.params {
                if let Some(def) = &decl.default {
                    if let Err(msg) = template::render_default(decl.kind, def) {
                        ok = false;
                        self.error_at(
                            r.file,
                            Code::InvalidTemplateParam,
                            format!("default of parameter `{pname}`: {msg}"),
                            root.span_at(&["params", pname, "default"]),
                        );
                    }
                }
            }
            // Every `${params.X}` must name a declared parameter.
            let mut strings: Vec<(String, Span)> = Vec::new();
            if let Some(cmd) = &spec.command {
                for (i, a) in cmd.iter().enumerate() {
                    strings.push((a.clone(), root.span_at(&["command", index_str(i).as_ref()])));
                }
            }
            for (k, val) in &spec.env {
                if let EnvValue::Literal(s) = val {
                    strings.push((s.clone(), root.span_at(&["env", k])));
                }
            }
            for (k, s) in &spec.endpoints {
                strings.push((s.clone(), root.span_at(&["endpoints", k])));
            }
            for (s, span) in strings {
                for reference in crate::interp::references(&s) {
                    if let Some(p) = reference.strip_prefix("params.") {
                        if !spec.params.contains_key(p) {
                            ok = false;
                            let mut d = Diagnostic::error(
                                Code::UnknownReference,
                                format!(
                                    "template `{}` references `${{{reference}}}`, but declares no parameter `{p}`",
                                    r.name
                                ),
                                Location { file: r.file, span },
                            );
                            d.help = help_for(p, spec.params.keys());
                            self.push(d);
                        }
                    }
                }
            }
            if ok {
                out.insert(r.name.clone(), LoadedTemplate { spec });
            }
        }
        out
    }

    fn run(
        &mut self,
        root: &Node,
        templates: &HashMap<String, LoadedTemplate>,
    ) -> Option<Topology> {
        let mut hosts_node = None;
        let mut components_node = None;
        let mut stacks_node = None;
        for e in root.entries() {
            let slot = match e.key.as_ref() {
                "hosts" => &mut hosts_node,
                "components" => &mut components_node,
                "stacks" => &mut stacks_node,
                "$schema" => {
                    if !matches!(e.value.value, Value::String(_)) {
                        self.push(Diagnostic::error(
                            Code::InvalidValue,
                            "`$schema` must be a string",
                            self.loc(e.value.span),
                        ));
                    }
                    continue;
                }
                other => {
                    let mut d = Diagnostic::error(
                        Code::UnknownKey,
                        format!("unknown top-level key `{other}`"),
                        self.loc(e.key_span),
                    );
                    d.help = help_for(other, TOP_KEYS)
                        .or_else(|| Some("expected one of: hosts, components, stacks".into()));
                    self.push(d);
                    continue;
                }
            };
            if !matches!(e.value.value, Value::Table(_)) {
                self.push(Diagnostic::error(
                    Code::InvalidValue,
                    format!(
                        "`{}` must be a table, found {}",
                        e.key,
                        e.value.value.kind()
                    ),
                    self.loc(e.value.span),
                ));
                continue;
            }
            *slot = Some(&e.value);
        }

        // Names declared (even if their bodies are broken), so references to a broken
        // entry do not produce a second, misleading error.
        let mut declared_hosts: BTreeSet<&str> = BTreeSet::new();
        let mut declared_components: BTreeSet<&str> = BTreeSet::new();

        let mut hosts: BTreeMap<String, Host> = BTreeMap::new();
        for e in hosts_node.map(Node::entries).unwrap_or(&[]) {
            declared_hosts.insert(&e.key);
            if !self.check_name("host", e) {
                continue;
            }
            let what = || format!("host `{}`", e.key);
            if let Some((h, _)) = self.decode_all::<HostSpec>(self.file, &what, &e.value) {
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
                    if h.transport == TransportKind::Local {
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
                                        format!("host `{}`: `{key}` applies to transport `ssh` only", e.key),
                                        self.loc(e.value.span_at(&[key])),
                                    )
                                    .with_help("set transport = \"ssh\", or remove it (a local host uses this machine's own state directory: --state-dir)"),
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
                                TransportKind::Ssh => e.key.to_string(),
                            }),
                            user: h.user,
                            port: h.port.map(|p| p.0),
                            identity: h.identity,
                            ssh_options: h.ssh_options,
                            state_dir: h.state_dir,
                            platform: h.platform,
                            labels: h.labels,
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
                    identity: None,
                    ssh_options: BTreeMap::new(),
                    state_dir: None,
                    platform: None,
                    labels: BTreeMap::new(),
                },
            );
        }

        let mut stacks: Vec<(&Entry, StackSpec)> = Vec::new();
        for e in stacks_node.map(Node::entries).unwrap_or(&[]) {
            if !self.check_name("stack", e) {
                continue;
            }
            match from_node::<StackSpec>(&e.value) {
                Ok(s) => stacks.push((e, s)),
                Err(err) => {
                    self.decode_error(self.file, &format!("stack `{}`", e.key), err, e.value.span)
                }
            }
        }

        let comp_entries = components_node.map(Node::entries).unwrap_or(&[]);
        let mut drafts: Vec<Draft<'_>> = Vec::with_capacity(comp_entries.len());
        for e in comp_entries {
            declared_components.insert(&e.key);
            if !self.check_name("component", e) {
                continue;
            }
            let what = || format!("component `{}`", e.key);
            if let Some((spec, broken)) =
                self.decode_all::<ComponentSpec>(self.file, &what, &e.value)
            {
                if let Some(d) = self.draft(e, spec, broken, &declared_hosts, &hosts, templates) {
                    drafts.push(d);
                }
            }
        }
        drafts.sort_by(|a, b| a.name.cmp(b.name));
        let index: HashMap<&str, usize> = drafts
            .iter()
            .enumerate()
            .map(|(i, d)| (d.name, i))
            .collect();

        // Endpoints of every component first: connections and probes refer to them.
        for d in drafts.iter_mut() {
            let host_addr = hosts
                .get(&d.host)
                .map(|h| h.address.clone())
                .unwrap_or_default();
            let mut parsed = BTreeMap::new();
            for (name, s) in &d.endpoints {
                let text = match crate::interp::substitute(&s.value, |r| match r {
                    "host.address" => Some(host_addr.clone()),
                    "host.name" => Some(d.host.clone()),
                    "component.name" => Some(d.name.to_string()),
                    _ => None,
                }) {
                    Ok(t) => t,
                    Err(e) => {
                        self.push(Diagnostic::error(
                            Code::UnknownReference,
                            format!("component `{}`, endpoint `{name}`: {e}", d.name),
                            s.loc,
                        ).with_help("endpoints may reference ${host.address}, ${host.name} and ${component.name}"));
                        continue;
                    }
                };
                match Endpoint::parse(&text) {
                    Ok(ep) => {
                        parsed.insert(name.clone(), ep);
                    }
                    Err(msg) => self.push(Diagnostic::error(
                        Code::InvalidValue,
                        format!("component `{}`, endpoint `{name}`: {msg}", d.name),
                        s.loc,
                    )),
                }
            }
            d.parsed_endpoints = parsed;
        }

        self.resolve_references(&mut drafts, &index, &declared_components, &hosts);
        self.check_ports(&drafts, &hosts);
        let endpoints: Vec<&BTreeMap<String, Endpoint>> =
            drafts.iter().map(|d| &d.parsed_endpoints).collect();
        // The stacks' readiness probes, decoded once with the stacks, resolved below.
        let stack_probes: Vec<(&Entry, Vec<ProbeSpec>)> = stacks
            .iter_mut()
            .map(|(e, s)| (*e, std::mem::take(&mut s.readiness)))
            .collect();
        let mut stacks = self.check_stacks(stacks, &index, &declared_components, comp_entries);
        self.stack_readiness(&mut stacks, &stack_probes, &index, &endpoints);
        let order = self.check_cycles(&drafts)?;

        let mut components = Vec::with_capacity(drafts.len());
        let names: Vec<String> = drafts.iter().map(|d| d.name.to_string()).collect();
        for d in drafts {
            components.push(self.finish(d, &names)?);
        }
        if self.diags.iter().any(|d| d.severity == Severity::Error) {
            return None;
        }
        Some(Topology::build(hosts, components, stacks, order))
    }

    fn check_name(&mut self, kind: &str, e: &Entry) -> bool {
        if valid_name(&e.key) {
            return true;
        }
        self.push(
            Diagnostic::error(
                Code::InvalidValue,
                format!("{kind} name `{}` is not allowed", e.key),
                self.loc(e.key_span),
            )
            .with_help("names use letters, digits, `-` and `_` (a `.` would be ambiguous in `component.endpoint`)"),
        );
        false
    }

    /// Combines a component's keys, active profile and template.
    fn draft<'a>(
        &mut self,
        e: &'a Entry,
        spec: ComponentSpec,
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

        let profile = match &spec.profile {
            Some(p) if !spec.profiles.contains_key(p) => {
                let mut d = Diagnostic::error(
                    Code::UnknownProfile,
                    format!("component `{name}` selects profile `{p}`, which it does not declare"),
                    at(&["profile"]),
                );
                d.help = help_for(p, spec.profiles.keys()).or_else(|| {
                    if spec.profiles.is_empty() {
                        Some("declare it under [components.NAME.profiles.PROFILE]".into())
                    } else {
                        Some(format!(
                            "declared profiles: {}",
                            spec.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
                        ))
                    }
                });
                self.push(d);
                None
            }
            Some(p) => Some(p.clone()),
            None => None,
        };
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
        let mut tpl = TemplateOutput::default();
        if let Some(tname) = &spec.template {
            let mut entries: Vec<Entry> = node
                .get("params")
                .map(|p| p.entries().to_vec())
                .unwrap_or_default();
            if let Some(pp) = node
                .get("profiles")
                .and_then(|p| p.get(profile.as_deref().unwrap_or("")))
                .and_then(|p| p.get("params"))
            {
                for pe in pp.entries() {
                    match entries.iter_mut().find(|x| x.key == pe.key) {
                        Some(x) => *x = pe.clone(),
                        None => entries.push(pe.clone()),
                    }
                }
            }
            let params = Node {
                span: node.get("params").map(|p| p.span).unwrap_or(tpl_loc.span),
                value: Value::Table(entries),
            };
            if template::is_builtin(tname) {
                let file = self.file;
                let what = || format!("component `{name}`, template `{tname}`");
                let no_params_table = node.get("params").is_none();
                let adjust = |mut err: DecodeError| {
                    if err.code == Code::UnknownKey {
                        err.message = format!(
                            "{} (not a parameter of `{tname}`)",
                            err.message.replace("key", "parameter")
                        );
                    }
                    err.code = Code::InvalidTemplateParam;
                    if err.span.is_none_or(|s| s == params.span) && no_params_table {
                        err.span = Some(tpl_loc.span);
                    }
                    err
                };
                match self.retry_decode(
                    file,
                    &what,
                    &params,
                    |p| template::expand_builtin(tname, p),
                    adjust,
                ) {
                    Some((out, removed)) => {
                        tpl = out;
                        broken.extend(removed.into_iter().map(|mut p| {
                            p.insert(0, "params".into());
                            p
                        }));
                    }
                    None => return None,
                }
                if tname == "mlx-lm" {
                    if let Some(p) = hosts.get(&host).and_then(|h| h.platform.as_deref()) {
                        if p != "darwin-aarch64" {
                            self.push(Diagnostic::warning(
                                Code::Suspicious,
                                format!("component `{name}` uses template `mlx-lm`, which runs on Apple silicon only, on host `{host}` ({p})"),
                                tpl_loc,
                            ));
                        }
                    }
                }
            } else if let Some(t) = templates.get(tname) {
                match self.expand_user(name, tname, t, &params, tpl_loc) {
                    Some(out) => tpl = out,
                    None => return None,
                }
            } else if self.broken_templates.contains(tname) {
                // The file exists; its own errors are reported where they are.
                return None;
            } else {
                let mut all: Vec<String> = template::BUILTIN_TEMPLATES
                    .iter()
                    .map(|(n, _)| n.to_string())
                    .collect();
                all.extend(templates.keys().cloned());
                let mut d = Diagnostic::error(
                    Code::UnknownTemplate,
                    format!("component `{name}` uses template `{tname}`, which is neither built in nor a file in templates/"),
                    tpl_loc,
                );
                d.help = help_for(tname, &all)
                    .or_else(|| Some(format!("built-in templates: {}", all.join(", "))));
                self.push(d);
                return None;
            }
        } else if !spec.params.is_empty() || prof.is_some_and(|p| !p.params.is_empty()) {
            self.push(
                Diagnostic::error(
                    Code::InvalidTemplateParam,
                    format!("component `{name}` sets `params` but uses no template"),
                    self.loc(node.key_span_at(&["params"])),
                )
                .with_help("add `template = \"...\"`, or remove `params`"),
            );
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
        let mut env: BTreeMap<String, Located<EnvValue>> = tpl
            .env
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    Located {
                        value: v.clone(),
                        loc: tpl_loc,
                    },
                )
            })
            .collect();
        for (k, v) in &spec.env {
            env.insert(
                k.clone(),
                Located {
                    value: v.clone(),
                    loc: at(&["env", k]),
                },
            );
        }
        let mut endpoints: BTreeMap<String, Located<String>> = tpl
            .endpoints
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    Located {
                        value: v.clone(),
                        loc: tpl_loc,
                    },
                )
            })
            .collect();
        for (k, v) in &spec.endpoints {
            endpoints.insert(
                k.clone(),
                Located {
                    value: v.clone(),
                    loc: at(&["endpoints", k]),
                },
            );
        }
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
                    "command", "adapter", "stop", "cwd", "env", "tunnel", "launchd", "systemd",
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
                };
                if !has_start && !any_broken(&broken, START_KEYS) {
                    let need = match adapter {
                        AdapterKind::Process => "a `command` (argv list) or a `template`",
                        AdapterKind::SshTunnel => "a `tunnel` table or template = \"ssh-tunnel\"",
                        AdapterKind::Launchd => "a `launchd` table with the job's `label`, and a `command` (Flotilla writes the job's plist) or `launchd.plist` (an existing one)",
                        AdapterKind::Systemd => "a `command` (Flotilla writes the unit) or `systemd = { unit = \"name.service\" }` (an existing unit)",
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
                for (key, wanted) in [
                    ("tunnel", AdapterKind::SshTunnel),
                    ("launchd", AdapterKind::Launchd),
                    ("systemd", AdapterKind::Systemd),
                ] {
                    if node.get(key).is_some() && adapter != wanted {
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
            }
        }
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
            tunnel,
            parsed_endpoints: BTreeMap::new(),
            deps: BTreeMap::new(),
            connections: BTreeMap::new(),
            resolved_tunnel: None,
            resolved_readiness: None,
            resolved_liveness: None,
        })
    }

    fn expand_user(
        &mut self,
        name: &str,
        tname: &str,
        t: &LoadedTemplate,
        params: &Node,
        tpl_loc: Location,
    ) -> Option<TemplateOutput> {
        let mut ok = true;
        let mut values: HashMap<String, String> = HashMap::new();
        for pe in params.entries() {
            match t.spec.params.get(pe.key.as_ref()) {
                None => {
                    ok = false;
                    let mut d = Diagnostic::error(
                        Code::InvalidTemplateParam,
                        format!(
                            "component `{name}`: `{}` is not a parameter of template `{tname}`",
                            pe.key
                        ),
                        self.loc(pe.key_span),
                    );
                    d.help = help_for(&pe.key, t.spec.params.keys());
                    self.push(d);
                }
                Some(decl) => match template::render_param(decl.kind, &pe.value.value) {
                    Ok(s) => {
                        values.insert(pe.key.to_string(), s);
                    }
                    Err(msg) => {
                        ok = false;
                        self.push(Diagnostic::error(
                            Code::InvalidTemplateParam,
                            format!("component `{name}`, parameter `{}`: {msg}", pe.key),
                            self.loc(pe.value.span),
                        ));
                    }
                },
            }
        }
        for (pname, decl) in &t.spec.params {
            if values.contains_key(pname) || params.get(pname).is_some() {
                continue;
            }
            match &decl.default {
                Some(def) => {
                    if let Ok(s) = template::render_default(decl.kind, def) {
                        values.insert(pname.clone(), s);
                    }
                }
                None => {
                    ok = false;
                    self.push(Diagnostic::error(
                        Code::InvalidTemplateParam,
                        format!("component `{name}`: template `{tname}` requires parameter `{pname}`"),
                        tpl_loc,
                    ).with_help(format!("add `{pname}` under [components.{name}.params]")));
                }
            }
        }
        if !ok {
            return None;
        }
        let sub = |s: &str| {
            crate::interp::substitute(s, |r| match r.strip_prefix("params.") {
                Some(p) => values.get(p).cloned(),
                // Leave other references for the component-level pass.
                None => Some(format!("${{{r}}}")),
            })
            .unwrap_or_else(|_| s.to_string())
        };
        let spec = &t.spec;
        Some(TemplateOutput {
            owner: spec.owner,
            adapter: spec.adapter,
            command: spec
                .command
                .as_ref()
                .map(|c| c.iter().map(|a| sub(a)).collect()),
            env: spec
                .env
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        EnvValue::Literal(s) => EnvValue::Literal(sub(s)),
                        other => other.clone(),
                    };
                    (k.clone(), v)
                })
                .collect(),
            endpoints: spec
                .endpoints
                .iter()
                .map(|(k, v)| (k.clone(), sub(v)))
                .collect(),
            readiness: spec.readiness.clone(),
            liveness: spec.liveness.clone(),
            stop: spec.stop.clone(),
            tunnel: None,
        })
    }

    fn resolve_references(
        &mut self,
        drafts: &mut [Draft<'_>],
        index: &HashMap<&str, usize>,
        declared: &BTreeSet<&str>,
        hosts: &BTreeMap<String, Host>,
    ) {
        let all_names: Vec<&str> = declared.iter().copied().collect();
        let names: Vec<&str> = drafts.iter().map(|d| d.name).collect();
        // Read-only views of every component's host and endpoints.
        let endpoints: Vec<EndpointView> = drafts
            .iter()
            .map(|d| {
                (
                    d.host.clone(),
                    d.parsed_endpoints.clone(),
                    any_broken(&d.broken, ENDPOINT_KEYS),
                )
            })
            .collect();
        let lookup_endpoint = |endpoints: &[EndpointView],
                               reference: &str|
         -> Result<(usize, String, Endpoint), RefProblem> {
            let Some((comp, ep)) = reference.split_once('.') else {
                return Err((
                    Code::InvalidValue,
                    format!("`{reference}` is not of the form `component.endpoint`"),
                    None,
                ));
            };
            let Some(&i) = index.get(comp) else {
                if declared.contains(comp) {
                    return Err((Code::Suspicious, String::new(), None));
                }
                return Err((
                    Code::UnknownDependency,
                    format!("`{reference}` names component `{comp}`, which is not declared"),
                    help_for(comp, &all_names),
                ));
            };
            match endpoints[i].1.get(ep) {
                Some(e) => Ok((i, ep.to_string(), e.clone())),
                // Part of that component failed to decode; that error is reported.
                None if endpoints[i].2 => Err((Code::Suspicious, String::new(), None)),
                None => Err((
                    Code::UnknownEndpoint,
                    format!("component `{comp}` has no endpoint `{ep}`"),
                    help_for(ep, endpoints[i].1.keys()).or_else(|| {
                        Some(if endpoints[i].1.is_empty() {
                            format!("`{comp}` declares no endpoints")
                        } else {
                            format!(
                                "its endpoints: {}",
                                endpoints[i]
                                    .1
                                    .keys()
                                    .cloned()
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )
                        })
                    }),
                )),
            }
        };

        for d in drafts.iter_mut() {
            let node = &d.entry.value;
            // tunnel
            if let Some(t) = &d.tunnel {
                let tl = t.loc;
                let in_table = d.spec.tunnel.is_some();
                let file = self.file;
                let tloc = |k: &str| {
                    if in_table {
                        Location {
                            file,
                            span: node.span_at(&["tunnel", k]),
                        }
                    } else {
                        Location {
                            file,
                            span: node.span_at(&["params", k]),
                        }
                        .or(tl)
                    }
                };
                let t = &t.value;
                let mut ok = true;
                match hosts.get(&t.via) {
                    None => {
                        ok = false;
                        let mut diag = Diagnostic::error(
                            Code::TunnelUnresolved,
                            format!(
                                "tunnel `{}` goes through host `{}`, which is not declared",
                                d.name, t.via
                            ),
                            tloc("via"),
                        );
                        diag.help = help_for(&t.via, hosts.keys());
                        self.push(diag);
                    }
                    Some(h) if h.transport != TransportKind::Ssh => {
                        ok = false;
                        self.push(Diagnostic::error(
                            Code::TunnelUnresolved,
                            format!("tunnel `{}` goes through host `{}`, whose transport is not ssh", d.name, t.via),
                            tloc("via"),
                        ).with_help(format!("set transport = \"ssh\" on host `{}`", t.via)));
                    }
                    Some(_) => {}
                }
                match lookup_endpoint(&endpoints, &t.target) {
                    Ok((i, ep, endpoint)) => {
                        let tname = names[i].to_string();
                        let thost = &endpoints[i].0;
                        let (must_be, side) = match t.direction {
                            crate::inventory::TunnelDirection::Local => {
                                (&t.via, "the host it goes through")
                            }
                            crate::inventory::TunnelDirection::Remote => {
                                (&d.host, "the tunnel's own host")
                            }
                        };
                        let via_known = hosts.contains_key(&t.via);
                        if thost != must_be
                            && (via_known
                                || t.direction == crate::inventory::TunnelDirection::Remote)
                        {
                            ok = false;
                            self.push(Diagnostic::error(
                                Code::TunnelUnresolved,
                                format!("tunnel `{}` forwards to `{}`, which runs on host `{thost}`, not on `{must_be}` ({side})", d.name, t.target),
                                tloc("target"),
                            ));
                        }
                        d.deps.entry(i).or_insert(tloc("target"));
                        if ok {
                            let bind = t.bind.clone().unwrap_or_else(|| "127.0.0.1".into());
                            if d.parsed_endpoints.is_empty() {
                                if let crate::inventory::TunnelDirection::Local = t.direction {
                                    let url = match &endpoint.scheme {
                                        Some(s) => format!(
                                            "{s}://{}:{}{}",
                                            crate::values::dial_host(&bind),
                                            t.listen_port.0,
                                            endpoint.path
                                        ),
                                        None => format!(
                                            "{}:{}",
                                            crate::values::dial_host(&bind),
                                            t.listen_port.0
                                        ),
                                    };
                                    if let Ok(e) = Endpoint::parse(&url) {
                                        d.parsed_endpoints.insert(ep.clone(), e);
                                    }
                                }
                            }
                            d.resolved_tunnel = Some(Tunnel {
                                via: t.via.clone(),
                                direction: t.direction,
                                bind,
                                listen_port: t.listen_port.0,
                                target_component: tname,
                                target_endpoint: ep,
                                target_address: format!("{}:{}", endpoint.host, endpoint.port),
                            });
                        }
                    }
                    Err((Code::Suspicious, _, _)) => {}
                    Err((_, msg, help)) => {
                        let mut diag = Diagnostic::error(
                            Code::TunnelUnresolved,
                            format!("tunnel `{}`: target {msg}", d.name),
                            tloc("target"),
                        );
                        diag.help = help;
                        self.push(diag);
                    }
                }
            }
        }
        let endpoints: Vec<EndpointView> = drafts
            .iter()
            .map(|d| {
                (
                    d.host.clone(),
                    d.parsed_endpoints.clone(),
                    any_broken(&d.broken, ENDPOINT_KEYS),
                )
            })
            .collect();
        for d in drafts.iter_mut() {
            let node = &d.entry.value;
            // depends_on
            for (i, dep) in d.spec.depends_on.iter().enumerate() {
                let loc = self.loc(node.span_at(&["depends_on", index_str(i).as_ref()]));
                if let Some(&j) = index.get(dep.as_str()) {
                    d.deps.entry(j).or_insert(loc);
                } else if !declared.contains(dep.as_str()) {
                    let mut diag = Diagnostic::error(
                        Code::UnknownDependency,
                        format!(
                            "component `{}` depends on `{dep}`, which is not declared",
                            d.name
                        ),
                        loc,
                    );
                    diag.help = help_for(dep, &all_names);
                    self.push(diag);
                }
            }
            // connections
            for (cname, target) in &d.spec.connections {
                let loc = self.loc(node.span_at(&["connections", cname]));
                match lookup_endpoint(&endpoints, target) {
                    Ok((i, ep, endpoint)) => {
                        let tname = names[i];
                        d.deps.entry(i).or_insert(loc);
                        let thost = &endpoints[i].0;
                        if thost != &d.host && endpoint.is_local_bind() {
                            self.push(Diagnostic::warning(
                                Code::Suspicious,
                                format!(
                                    "connection `{cname}` of `{}` (host `{}`) uses `{target}` at {}, a loopback address on host `{thost}`",
                                    d.name, d.host, endpoint.url
                                ),
                                loc,
                            ).with_help("reach it through an ssh-tunnel component, or bind it to an address other hosts can reach"));
                        }
                        d.connections.insert(
                            cname.clone(),
                            Connection {
                                component: tname.to_string(),
                                endpoint: ep,
                                url: endpoint.url,
                            },
                        );
                    }
                    Err((Code::Suspicious, _, _)) => {}
                    Err((code, msg, help)) => {
                        let mut diag = Diagnostic::error(
                            code,
                            format!("component `{}`, connection `{cname}`: {msg}", d.name),
                            loc,
                        );
                        diag.help = help;
                        self.push(diag);
                    }
                }
            }
        }
        // Probes may name another component's endpoint (`request`): resolve after all
        // tunnel endpoints are known.
        let endpoints: Vec<BTreeMap<String, Endpoint>> =
            drafts.iter().map(|d| d.parsed_endpoints.clone()).collect();
        for d in drafts.iter_mut() {
            // A tunnel that did not resolve has no endpoint yet: its probes would only
            // repeat that error.
            if d.tunnel.is_some() && d.resolved_tunnel.is_none() {
                continue;
            }
            for which in ["readiness", "liveness"] {
                let spec = if which == "readiness" {
                    d.readiness.clone()
                } else {
                    d.liveness.clone()
                };
                let Some(spec) = spec else { continue };
                let probe = self.resolve_probe(d, which, &spec, index, &endpoints);
                if which == "readiness" {
                    d.resolved_readiness = probe;
                } else {
                    d.resolved_liveness = probe;
                }
            }
        }
    }

    fn resolve_probe(
        &mut self,
        d: &Draft<'_>,
        which: &str,
        spec: &Located<ProbeSpec>,
        index: &HashMap<&str, usize>,
        endpoints: &[BTreeMap<String, Endpoint>],
    ) -> Option<Probe> {
        let node = &d.entry.value;
        let from_spec = node.get(which).is_some();
        let file = self.file;
        let at = |path: &[&str]| {
            if from_spec {
                let mut p = vec![which];
                p.extend_from_slice(path);
                Location {
                    file,
                    span: node.span_at(&p),
                }
            } else {
                spec.loc
            }
        };
        let p = &spec.value;
        let kinds: Vec<&str> = [
            ("process", p.process.is_some()),
            ("tcp", p.tcp.is_some()),
            ("http", p.http.is_some()),
            ("exec", p.exec.is_some()),
            ("request", p.request.is_some()),
            ("log", p.log.is_some()),
        ]
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(k, _)| k)
        .collect();
        if kinds.len() != 1 {
            self.push(
                Diagnostic::error(
                    Code::InvalidProbe,
                    if kinds.is_empty() {
                        format!("{which} probe of `{}` sets no check", d.name)
                    } else {
                        format!(
                            "{which} probe of `{}` sets {} checks ({}); a probe has exactly one",
                            d.name,
                            kinds.len(),
                            kinds.join(", ")
                        )
                    },
                    at(&[]),
                )
                .with_help("set exactly one of: process, tcp, http, exec, request, log"),
            );
            return None;
        }
        let own = |ep: &str, key: &str, this: &mut Self| -> Option<Endpoint> {
            match d.parsed_endpoints.get(ep) {
                Some(e) => Some(e.clone()),
                None if any_broken(&d.broken, ENDPOINT_KEYS) => None,
                None => {
                    let mut diag = Diagnostic::error(
                        Code::UnknownEndpoint,
                        format!("{which} probe of `{}` names endpoint `{ep}`, which `{}` does not declare", d.name, d.name),
                        at(&[key, "endpoint"]),
                    );
                    diag.help = help_for(ep, d.parsed_endpoints.keys()).or_else(|| {
                        Some(if d.parsed_endpoints.is_empty() {
                            format!("declare it under [components.{}.endpoints]", d.name)
                        } else {
                            format!(
                                "its endpoints: {}",
                                d.parsed_endpoints
                                    .keys()
                                    .cloned()
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )
                        })
                    });
                    this.push(diag);
                    None
                }
            }
        };
        let join = |e: &Endpoint, path: &Option<String>| -> String {
            let base = e.url.trim_end_matches('/');
            let base = if e.scheme.is_none() {
                format!("http://{base}")
            } else {
                base.to_string()
            };
            match path {
                Some(p) => format!("{base}{}{}", if p.starts_with('/') { "" } else { "/" }, p),
                None => {
                    if e.path.is_empty() {
                        format!("{base}/")
                    } else {
                        base
                    }
                }
            }
        };
        let check = if p.process.is_some() {
            if d.owner == Owner::External {
                self.push(Diagnostic::error(
                    Code::InvalidProbe,
                    format!("{which} probe of external component `{}` is a process check, but Flotilla does not know its process", d.name),
                    at(&["process"]),
                ).with_help("use a tcp, http or request check"));
                return None;
            }
            Check::Process
        } else if let Some(t) = &p.tcp {
            let e = own(&t.endpoint, "tcp", self)?;
            Check::Tcp {
                endpoint: t.endpoint.clone(),
                address: format!("{}:{}", e.host, e.port),
                stays_open: t.stays_open,
            }
        } else if let Some(h) = &p.http {
            let e = own(&h.endpoint, "http", self)?;
            Check::Http {
                endpoint: h.endpoint.clone(),
                url: join(&e, &h.path),
                status: h.status.unwrap_or_default(),
                body_contains: h.body_contains.clone(),
                json_pointer: h.json_pointer.clone(),
                json_equals: h.json_equals.clone(),
            }
        } else if let Some(x) = &p.exec {
            if x.command.is_empty() || x.command[0].is_empty() {
                self.push(Diagnostic::error(
                    Code::InvalidProbe,
                    format!("{which} probe of `{}`: exec command is empty", d.name),
                    at(&["exec", "command"]),
                ));
                return None;
            }
            Check::Exec {
                command: x.command.clone(),
            }
        } else if let Some(r) = &p.request {
            let e = match r.endpoint.split_once('.') {
                None => own(&r.endpoint, "request", self)?,
                Some((comp, ep)) => {
                    match index.get(comp).and_then(|&i| endpoints[i].get(ep)) {
                        Some(e) => e.clone(),
                        None => {
                            let mut diag = Diagnostic::error(
                            Code::UnknownEndpoint,
                            format!("{which} probe of `{}` names endpoint `{}`, which does not exist", d.name, r.endpoint),
                            at(&["request", "endpoint"]),
                        );
                            if let Some(&i) = index.get(comp) {
                                diag.help = help_for(ep, endpoints[i].keys());
                            }
                            self.push(diag);
                            return None;
                        }
                    }
                }
            };
            if r.body.is_some() && r.json.is_some() {
                self.push(Diagnostic::error(
                    Code::InvalidProbe,
                    format!(
                        "{which} probe of `{}`: set `body` or `json`, not both",
                        d.name
                    ),
                    at(&["request"]),
                ));
                return None;
            }
            let method = r
                .method
                .clone()
                .map(|m| m.to_ascii_uppercase())
                .unwrap_or_else(|| {
                    if r.body.is_some() || r.json.is_some() {
                        "POST".into()
                    } else {
                        "GET".into()
                    }
                });
            if !["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
                .contains(&method.as_str())
            {
                self.push(Diagnostic::error(
                    Code::InvalidValue,
                    format!(
                        "{which} probe of `{}`: unknown HTTP method `{method}`",
                        d.name
                    ),
                    at(&["request", "method"]),
                ));
                return None;
            }
            Check::Request {
                endpoint: r.endpoint.clone(),
                url: join(&e, &r.path),
                method,
                headers: r.headers.clone(),
                body: r.body.clone(),
                json: r.json.clone(),
                status: r.status.unwrap_or_default(),
                body_contains: r.body_contains.clone(),
                json_pointer: r.json_pointer.clone(),
                json_equals: r.json_equals.clone(),
            }
        } else if let Some(l) = &p.log {
            if let Err(e) = regex_syntax_check(&l.pattern) {
                self.push(Diagnostic::error(
                    Code::InvalidValue,
                    format!("{which} probe of `{}`: invalid regex: {e}", d.name),
                    at(&["log", "pattern"]),
                ));
                return None;
            }
            Check::Log {
                pattern: l.pattern.clone(),
            }
        } else {
            unreachable!("exactly one kind is set")
        };
        for (key, v) in [
            ("success_threshold", p.success_threshold),
            ("failure_threshold", p.failure_threshold),
        ] {
            if v == Some(0) {
                self.push(Diagnostic::error(
                    Code::InvalidValue,
                    format!("{which} probe of `{}`: `{key}` must be at least 1", d.name),
                    at(&[key]),
                ));
                return None;
            }
        }
        for (key, v) in [("period", p.period), ("timeout", p.timeout)] {
            if v.is_some_and(|v| v.0.is_zero()) {
                self.push(Diagnostic::error(
                    Code::InvalidValue,
                    format!(
                        "{which} probe of `{}`: `{key}` must be longer than 0s",
                        d.name
                    ),
                    at(&[key]),
                ));
                return None;
            }
        }
        Some(Probe {
            check,
            initial_delay: p.initial_delay.unwrap_or(HumanDuration(Duration::ZERO)),
            period: p.period.unwrap_or(HumanDuration(Duration::from_secs(1))),
            timeout: p.timeout.unwrap_or(HumanDuration(Duration::from_secs(1))),
            success_threshold: p.success_threshold.unwrap_or(1),
            failure_threshold: p.failure_threshold.unwrap_or(3),
        })
    }

    fn check_ports(&mut self, drafts: &[Draft<'_>], hosts: &BTreeMap<String, Host>) {
        let mut claims: HashMap<(&str, u16), (&str, &str, Location)> = HashMap::new();
        for d in drafts {
            let addr = hosts.get(&d.host).map(|h| h.address.as_str()).unwrap_or("");
            for (ename, ep) in &d.parsed_endpoints {
                if !(ep.is_local_bind() || ep.host == addr) {
                    continue;
                }
                let loc =
                    d.endpoints.get(ename).map(|l| l.loc).unwrap_or_else(|| {
                        self.loc(d.entry.value.span_at(&["tunnel", "listen_port"]))
                    });
                match claims.get(&(d.host.as_str(), ep.port)) {
                    Some((other, other_ep, other_loc)) if *other != d.name => {
                        self.push(
                            Diagnostic::error(
                                Code::PortConflict,
                                format!(
                                    "components `{other}` and `{}` both claim port {} on host `{}` (endpoints `{other}.{other_ep}` and `{}.{ename}`)",
                                    d.name, ep.port, d.host, d.name
                                ),
                                loc,
                            )
                            .with_label(*other_loc, format!("`{other}` claims port {} here", ep.port)),
                        );
                    }
                    Some(_) => {}
                    None => {
                        claims.insert((d.host.as_str(), ep.port), (d.name, ename.as_str(), loc));
                    }
                }
            }
        }
    }

    fn check_stacks(
        &mut self,
        stacks: Vec<(&Entry, StackSpec)>,
        index: &HashMap<&str, usize>,
        declared: &BTreeSet<&str>,
        comp_entries: &[Entry],
    ) -> BTreeMap<String, Stack> {
        let names: Vec<&str> = declared.iter().copied().collect();
        let mut out = BTreeMap::new();
        for (e, s) in stacks {
            if let Some(c) = comp_entries.iter().find(|c| c.key == e.key) {
                self.push(
                    Diagnostic::error(
                        Code::AmbiguousName,
                        format!("`{}` names both a stack and a component, so `flotilla start {}` would be ambiguous", e.key, e.key),
                        self.loc(e.key_span),
                    )
                    .with_label(self.loc(c.key_span), "the component is declared here")
                    .with_help("rename the stack or the component"),
                );
            }
            if s.components.is_empty() {
                self.push(Diagnostic::warning(
                    Code::Suspicious,
                    format!("stack `{}` has no components", e.key),
                    self.loc(e.value.span_at(&["components"])),
                ));
            }
            let mut seen = HashSet::new();
            for (i, m) in s.components.iter().enumerate() {
                let loc = self.loc(e.value.span_at(&["components", index_str(i).as_ref()]));
                if !seen.insert(m.as_str()) {
                    self.push(Diagnostic::warning(
                        Code::Suspicious,
                        format!("stack `{}` lists `{m}` twice", e.key),
                        loc,
                    ));
                } else if !index.contains_key(m.as_str()) && !declared.contains(m.as_str()) {
                    let mut d = Diagnostic::error(
                        Code::UnknownStackMember,
                        format!(
                            "stack `{}` lists `{m}`, which is not a declared component",
                            e.key
                        ),
                        loc,
                    );
                    d.help = help_for(m, &names);
                    self.push(d);
                }
            }
            let mut members = Vec::new();
            for m in s.components {
                if !members.contains(&m) {
                    members.push(m);
                }
            }
            out.insert(
                e.key.to_string(),
                Stack {
                    name: e.key.to_string(),
                    description: s.description,
                    components: members,
                    readiness: Vec::new(),
                },
            );
        }
        out
    }

    /// Resolves each stack's readiness probes: `request` checks naming
    /// `component.endpoint`, or `exec` checks.
    fn stack_readiness(
        &mut self,
        stacks: &mut BTreeMap<String, Stack>,
        probes: &[(&Entry<'_>, Vec<ProbeSpec>)],
        index: &HashMap<&str, usize>,
        endpoints: &[&BTreeMap<String, Endpoint>],
    ) {
        for (entry, specs) in probes {
            let name = entry.key.as_ref();
            let Some(stack) = stacks.get_mut(name) else {
                continue;
            };
            let node = &entry.value;
            for (i, spec) in specs.iter().enumerate() {
                let idx = index_str(i);
                let at = |path: &[&str]| {
                    let mut p = vec!["readiness", idx.as_ref()];
                    p.extend_from_slice(path);
                    self.loc(node.span_at(&p))
                };
                let probe_loc = at(&[]);
                let timing = |spec: &ProbeSpec, check| Probe {
                    check,
                    initial_delay: spec.initial_delay.unwrap_or(HumanDuration(Duration::ZERO)),
                    period: spec.period.unwrap_or(HumanDuration(Duration::from_secs(1))),
                    timeout: spec
                        .timeout
                        .unwrap_or(HumanDuration(Duration::from_secs(10))),
                    success_threshold: spec.success_threshold.unwrap_or(1).max(1),
                    failure_threshold: spec.failure_threshold.unwrap_or(3).max(1),
                };
                let others = spec.process.is_some()
                    || spec.tcp.is_some()
                    || spec.http.is_some()
                    || spec.log.is_some();
                match (&spec.request, &spec.exec, others) {
                    (Some(r), None, false) => {
                        let found = r
                            .endpoint
                            .split_once('.')
                            .and_then(|(c, e)| index.get(c).and_then(|&i| endpoints[i].get(e)));
                        let Some(ep) = found else {
                            self.push(
                                Diagnostic::error(
                                    Code::UnknownEndpoint,
                                    format!("readiness probe of stack `{name}` names `{}`, which is not a `component.endpoint` that exists", r.endpoint),
                                    at(&["request", "endpoint"]),
                                )
                                .with_help("a stack's request probe names a member's endpoint, e.g. `proxy.http`"),
                            );
                            continue;
                        };
                        let base = ep.url.trim_end_matches('/');
                        let url = match &r.path {
                            Some(p) => format!("{base}{}{p}", if p.starts_with('/') { "" } else { "/" }),
                            None => base.to_string(),
                        };
                        let method = r.method.clone().map(|m| m.to_ascii_uppercase()).unwrap_or_else(|| {
                            if r.body.is_some() || r.json.is_some() { "POST".into() } else { "GET".into() }
                        });
                        stack.readiness.push(timing(spec, Check::Request {
                            body: r.body.clone(),
                            body_contains: r.body_contains.clone(),
                            endpoint: r.endpoint.clone(),
                            headers: r.headers.clone(),
                            json: r.json.clone(),
                            json_equals: r.json_equals.clone(),
                            json_pointer: r.json_pointer.clone(),
                            method,
                            status: r.status.unwrap_or_default(),
                            url,
                        }));
                    }
                    (None, Some(x), false) if !x.command.is_empty() => {
                        stack.readiness.push(timing(spec, Check::Exec { command: x.command.clone() }));
                    }
                    _ => self.push(
                        Diagnostic::error(
                            Code::InvalidProbe,
                            format!("readiness probe of stack `{name}` must be exactly one `request` (to `component.endpoint`) or `exec` check"),
                            probe_loc,
                        )
                        .with_help("a stack has no process or endpoints of its own; check a route through its members"),
                    ),
                }
            }
        }
    }

    /// Reports every dependency cycle (one per strongly connected component) and
    /// returns a topological order when there is none.
    fn check_cycles(&mut self, drafts: &[Draft<'_>]) -> Option<Vec<ComponentId>> {
        let n = drafts.len();
        let adj: Vec<Vec<usize>> = drafts
            .iter()
            .map(|d| d.deps.keys().copied().collect())
            .collect();
        // Kahn's algorithm; ties broken by name (index order) for a stable order.
        let mut indeg = vec![0usize; n];
        let mut rev: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, ups) in adj.iter().enumerate() {
            indeg[i] = ups.len();
            for &u in ups {
                rev[u].push(i);
            }
        }
        let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = (0..n)
            .filter(|&i| indeg[i] == 0)
            .map(std::cmp::Reverse)
            .collect();
        let mut order = Vec::with_capacity(n);
        while let Some(std::cmp::Reverse(i)) = ready.pop() {
            order.push(ComponentId(i as u32));
            for &dn in &rev[i] {
                indeg[dn] -= 1;
                if indeg[dn] == 0 {
                    ready.push(std::cmp::Reverse(dn));
                }
            }
        }
        if order.len() == n {
            return Some(order);
        }
        // Some nodes remain: find the cycles among them, one per strongly connected set.
        let remaining: Vec<bool> = (0..n).map(|i| indeg[i] > 0).collect();
        let mut reported: HashSet<usize> = HashSet::new();
        for start in 0..n {
            if !remaining[start] || reported.contains(&start) {
                continue;
            }
            // Walk upstream edges staying inside the remaining set until a node repeats.
            let mut path = vec![start];
            let mut pos: HashMap<usize, usize> = HashMap::from([(start, 0)]);
            let mut cur = start;
            let cycle = loop {
                let next = adj[cur]
                    .iter()
                    .copied()
                    .find(|&u| remaining[u])
                    .expect("a node left by Kahn's algorithm has a remaining upstream");
                if let Some(&p) = pos.get(&next) {
                    break path[p..].to_vec();
                }
                pos.insert(next, path.len());
                path.push(next);
                cur = next;
            };
            if cycle.iter().any(|c| reported.contains(c)) {
                continue;
            }
            // Mark the whole strongly connected set as reported: everything reachable
            // from the cycle that can also reach it.
            let scc = strongly_connected(&adj, &remaining, cycle[0]);
            reported.extend(scc.iter().copied());
            // Present it from its smallest name, following dependencies: a → b means a depends on b.
            let min_at = cycle
                .iter()
                .enumerate()
                .min_by_key(|(_, &c)| c)
                .map(|(i, _)| i)
                .unwrap_or(0);
            let mut ordered: Vec<usize> = cycle[min_at..]
                .iter()
                .chain(cycle[..min_at].iter())
                .copied()
                .collect();
            ordered.push(ordered[0]);
            let text = ordered
                .iter()
                .map(|&i| drafts[i].name)
                .collect::<Vec<_>>()
                .join(" → ");
            let first = &drafts[ordered[0]];
            let loc = first.deps[&ordered[1]];
            let mut diag = Diagnostic::error(
                Code::DependencyCycle,
                format!("dependency cycle: {text}"),
                loc,
            );
            for w in ordered.windows(2).skip(1) {
                let from = &drafts[w[0]];
                diag = diag.with_label(
                    from.deps[&w[1]],
                    format!("`{}` depends on `{}` here", from.name, drafts[w[1]].name),
                );
            }
            self.push(diag.with_help("remove one of these dependencies"));
        }
        None
    }

    /// Substitutes `${...}` in command, env and cwd, and builds the final component.
    fn finish(&mut self, d: Draft<'_>, names: &[String]) -> Option<Component> {
        let mut ok = true;
        let host_addr_name = d.host.clone();
        let resolve = |r: &str| -> Option<String> {
            let parts: Vec<&str> = r.split('.').collect();
            match parts.as_slice() {
                ["component", "name"] => Some(d.name.to_string()),
                ["component", "host"] | ["host", "name"] => Some(host_addr_name.clone()),
                // A declared connection that failed to resolve was reported already.
                ["connections", c, ..]
                    if !d.connections.contains_key(*c) && d.spec.connections.contains_key(*c) =>
                {
                    Some(String::new())
                }
                ["connections", c] | ["connections", c, "url"] => {
                    d.connections.get(*c).map(|c| c.url.clone())
                }
                ["connections", c, field] => {
                    let conn = d.connections.get(*c)?;
                    let ep = Endpoint::parse(&conn.url).ok()?;
                    endpoint_field(&ep, field)
                }
                ["endpoints", e] | ["endpoints", e, "url"] => {
                    d.parsed_endpoints.get(*e).map(|e| e.url.clone())
                }
                ["endpoints", e, field] => endpoint_field(d.parsed_endpoints.get(*e)?, field),
                _ => None,
            }
        };
        let help = "references: ${connections.NAME[.url|.host|.port|.scheme|.path]}, ${endpoints.NAME[...]}, ${component.name}, ${component.host}";
        let uncertain = any_broken(&d.broken, ENDPOINT_KEYS);
        let mut sub = |s: &Located<String>, what: &str, this: &mut Self| -> String {
            match crate::interp::substitute(&s.value, resolve) {
                Ok(v) => v,
                Err(_) if uncertain => {
                    ok = false;
                    s.value.clone()
                }
                Err(e) => {
                    ok = false;
                    this.push(
                        Diagnostic::error(
                            Code::UnknownReference,
                            format!("component `{}`, {what}: {e}", d.name),
                            s.loc,
                        )
                        .with_help(help),
                    );
                    s.value.clone()
                }
            }
        };
        let command: Vec<String> = d.command.iter().map(|a| sub(a, "command", self)).collect();
        let mut env = BTreeMap::new();
        for (k, v) in &d.env {
            let value = match &v.value {
                EnvValue::Literal(s) => EnvValue::Literal(sub(
                    &Located {
                        value: s.clone(),
                        loc: v.loc,
                    },
                    &format!("env `{k}`"),
                    self,
                )),
                secret => secret.clone(),
            };
            env.insert(k.clone(), value);
        }
        let cwd = d.cwd.as_ref().map(|c| sub(c, "cwd", self));
        if !ok {
            return None;
        }
        let stop = (d.owner == Owner::Managed).then(|| {
            let s = d.stop.clone().unwrap_or_default();
            Stop {
                signal: s.signal.unwrap_or_else(Signal::term),
                grace_period: s
                    .grace_period
                    .unwrap_or(HumanDuration(Duration::from_secs(10))),
            }
        });
        let c = Component {
            name: d.name.to_string(),
            description: d.spec.description,
            host: d.host,
            owner: d.owner,
            adapter: d.adapter,
            template: d.spec.template,
            profile: d.spec.profile,
            command,
            env,
            cwd,
            endpoints: d.parsed_endpoints,
            depends_on: d.deps.into_keys().map(|i| names[i].to_string()).collect(),
            connections: d.connections,
            readiness: d.resolved_readiness,
            liveness: d.resolved_liveness,
            stop,
            tunnel: d.resolved_tunnel,
            launchd: d.spec.launchd,
            systemd: d.spec.systemd,
            labels: d.spec.labels,
        };
        Some(c)
    }
}

/// The key path (array indices as decimal strings) of the entry or element whose key
/// or value has `span`, anywhere in `node`.
fn key_path_at(node: &Node, span: Span) -> Option<Vec<String>> {
    for e in node.entries() {
        if e.key_span == span || e.value.span == span {
            return Some(vec![e.key.to_string()]);
        }
        if let Some(mut p) = key_path_at(&e.value, span) {
            p.insert(0, e.key.to_string());
            return Some(p);
        }
    }
    if let Value::Array(items) = &node.value {
        for (i, n) in items.iter().enumerate() {
            if n.span == span {
                return Some(vec![i.to_string()]);
            }
            if let Some(mut p) = key_path_at(n, span) {
                p.insert(0, i.to_string());
                return Some(p);
            }
        }
    }
    None
}

/// Array index `i` as a path step, without allocating for the usual small indices.
fn index_str(i: usize) -> Cow<'static, str> {
    const SMALL: [&str; 16] = [
        "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15",
    ];
    match SMALL.get(i) {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(i.to_string()),
    }
}

fn endpoint_field(ep: &Endpoint, field: &str) -> Option<String> {
    match field {
        "host" => Some(ep.host.clone()),
        "port" => Some(ep.port.to_string()),
        "scheme" => ep.scheme.clone(),
        "path" => Some(ep.path.clone()),
        "url" => Some(ep.url.clone()),
        _ => None,
    }
}

fn is_platform(p: &str) -> bool {
    matches!(
        p,
        "linux-x86_64" | "linux-aarch64" | "darwin-aarch64" | "darwin-x86_64"
    )
}

/// Nodes of the strongly connected set containing `start`, within `alive` nodes.
fn strongly_connected(adj: &[Vec<usize>], alive: &[bool], start: usize) -> Vec<usize> {
    let reach = |forward: bool| -> HashSet<usize> {
        let mut seen = HashSet::from([start]);
        let mut stack = vec![start];
        while let Some(x) = stack.pop() {
            let nexts: Vec<usize> = if forward {
                adj[x].clone()
            } else {
                (0..adj.len()).filter(|&y| adj[y].contains(&x)).collect()
            };
            for y in nexts {
                if alive[y] && seen.insert(y) {
                    stack.push(y);
                }
            }
        }
        seen
    };
    let f = reach(true);
    let b = reach(false);
    f.intersection(&b).copied().collect()
}

fn regex_syntax_check(pattern: &str) -> Result<(), String> {
    regex::Regex::new(pattern)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

impl Location {
    fn or(self, other: Location) -> Location {
        if self.span == Span::default() {
            other
        } else {
            self
        }
    }
}
