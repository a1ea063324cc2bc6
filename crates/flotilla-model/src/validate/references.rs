//! Cross references: user templates and their parameters, profiles, template
//! expansion, endpoints, tunnels, `depends_on`, connections, and `${...}` substitution
//! into the final component.

use super::{
    endpoint_uncertain, help_for, index_str, reference_uncertain, Draft, Located, TemplateRef,
    Validator,
};
use crate::diag::{Code, Diagnostic, Location};
use crate::inventory::{AdapterKind, ComponentSpec, Owner, ProbeSpec, TransportKind};
use crate::node::{self, DecodeError, Entry, Node, Value};
use crate::source::{Sources, Span};
use crate::template::{self, TemplateFile, TemplateOutput};
use crate::topology::{Component, Connection, Host, Stop, Tunnel};
use crate::values::{Endpoint, EnvValue, HumanDuration, Signal};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// A user template file that loaded without errors.
pub(super) struct LoadedTemplate {
    pub(super) spec: TemplateFile,
}

/// Why a `component.endpoint` reference failed: code, message, help.
/// (`Code::Suspicious` marks a reference to a broken entry, already reported.)
type RefProblem = (Code, String, Option<String>);

/// A component's host, parsed endpoints, and the key paths set aside when it was
/// decoded (an endpoint they make uncertain is not reported missing).
type EndpointView = (String, BTreeMap<String, Endpoint>, Vec<Vec<String>>);

impl Validator {
    /// Loads each user template file: parsed, decoded, parameter defaults checked, and
    /// every `${params.X}` naming a declared parameter. Only files without errors load.
    pub(super) fn load_templates(
        &mut self,
        sources: &Sources,
        refs: &[TemplateRef],
    ) -> HashMap<String, LoadedTemplate> {
        let mut out = HashMap::new();
        for r in refs {
            if let Some(d) = super::not_utf8(sources, r.file) {
                self.push(d);
                continue;
            }
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
            let Some((spec, set_aside)) = self.decode_all::<TemplateFile>(
                r.file,
                &|| format!("template `{}`", r.name),
                &root,
            ) else {
                continue;
            };
            // A template with a key set aside is not used: what it supplies is uncertain,
            // and components using it would only repeat its errors.
            let mut ok = set_aside.is_empty();
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
            // A probe's http or tcp check targets an endpoint or an inline address:
            // exactly one (checked here, in the template's own file).
            for (which, probe) in [("readiness", &spec.readiness), ("liveness", &spec.liveness)] {
                let Some(p) = probe else { continue };
                let targets = [
                    p.http
                        .as_ref()
                        .map(|h| ("http", "url", h.endpoint.is_some(), h.url.is_some())),
                    p.tcp
                        .as_ref()
                        .map(|t| ("tcp", "address", t.endpoint.is_some(), t.address.is_some())),
                ];
                for (kind, inline, named, given) in targets.into_iter().flatten() {
                    if named == given {
                        ok = false;
                        self.push(super::probes::one_target(
                            &format!("template `{}`", r.name),
                            which,
                            kind,
                            inline,
                            named,
                            Location {
                                file: r.file,
                                span: root.span_at(&[which, kind]),
                            },
                        ));
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

    /// The component's active profile: the one `profile` selects, when the component
    /// declares it.
    pub(super) fn active_profile(
        &mut self,
        name: &str,
        spec: &ComponentSpec,
        at_profile: Location,
    ) -> Option<String> {
        match &spec.profile {
            Some(p) if !spec.profiles.contains_key(p) => {
                let mut d = Diagnostic::error(
                    Code::UnknownProfile,
                    format!("component `{name}` selects profile `{p}`, which it does not declare"),
                    at_profile,
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
        }
    }

    /// Expands the component's template (built in or a user file) with its `params`, the
    /// active profile's merged over them; key paths of parameters set aside go into
    /// `broken`. `None` when the template cannot be expanded (the errors are reported;
    /// the component is drafted without it, its `template` key set aside).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn component_template(
        &mut self,
        e: &Entry,
        spec: &ComponentSpec,
        profile: Option<&str>,
        host: &str,
        hosts: &BTreeMap<String, Host>,
        templates: &HashMap<String, LoadedTemplate>,
        broken: &mut Vec<Vec<String>>,
        tpl_loc: Location,
    ) -> Option<TemplateOutput> {
        let name = e.key.as_ref();
        let node = &e.value;
        let prof = profile.map(|p| &spec.profiles[p]);
        let mut tpl = TemplateOutput::default();
        if let Some(tname) = &spec.template {
            let mut entries: Vec<Entry> = node
                .get("params")
                .map(|p| p.entries().to_vec())
                .unwrap_or_default();
            if let Some(pp) = node
                .get("profiles")
                .and_then(|p| p.get(profile.unwrap_or("")))
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
                let adjust = |mut err: DecodeError, _: &Node| {
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
                    |p| template::expand_builtin(tname, p, spec.adapter),
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
                    if let Some(p) = hosts.get(host).and_then(|h| h.platform.as_deref()) {
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
        Some(tpl)
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
            readiness: spec.readiness.as_ref().map(|p| probe_params(p, &sub)),
            liveness: spec.liveness.as_ref().map(|p| probe_params(p, &sub)),
            stop: spec.stop.clone(),
            tunnel: None,
            // User templates have no container table (a component writes its own).
            container: None,
        })
    }

    /// Endpoints of every component, with `${host.*}` and `${component.name}`
    /// substituted: connections and probes refer to them.
    pub(super) fn parse_endpoints(
        &mut self,
        drafts: &mut [Draft<'_>],
        hosts: &BTreeMap<String, Host>,
    ) {
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
            d.host_address = host_addr;
        }
    }

    /// Tunnels, `depends_on` and connections (each resolved into a dependency), then
    /// every probe.
    pub(super) fn resolve_references(
        &mut self,
        drafts: &mut [Draft<'_>],
        index: &HashMap<&str, usize>,
        declared: &BTreeSet<&str>,
        declared_hosts: &BTreeSet<&str>,
        hosts: &BTreeMap<String, Host>,
    ) {
        let all_names: Vec<&str> = declared.iter().copied().collect();
        let names: Vec<&str> = drafts.iter().map(|d| d.name).collect();
        // Read-only views of every component's host and endpoints.
        let endpoints: Vec<EndpointView> = drafts
            .iter()
            .map(|d| (d.host.clone(), d.parsed_endpoints.clone(), d.broken.clone()))
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
                None if endpoint_uncertain(&endpoints[i].2, ep) => {
                    Err((Code::Suspicious, String::new(), None))
                }
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
                    // Declared, but its entry is broken (reported where it is).
                    None if declared_hosts.contains(t.via.as_str()) => ok = false,
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
            .map(|d| (d.host.clone(), d.parsed_endpoints.clone(), d.broken.clone()))
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
        self.resolve_probes(drafts, index, declared);
    }

    /// Substitutes `${...}` in command, env and cwd, and builds the final component.
    pub(super) fn finish(&mut self, d: Draft<'_>, names: &[String]) -> Option<Component> {
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
                // Taken from the environment Flotilla runs in when it starts: kept.
                ["env", name] if !name.is_empty() => Some(format!("${{env.{name}}}")),
                _ => None,
            }
        };
        let help = "references: ${connections.NAME[.url|.host|.port|.scheme|.path]}, ${endpoints.NAME[...]}, ${component.name}, ${component.host}, ${env.NAME} (from the environment flotilla runs in, when it starts)";
        let broken = &d.broken;
        let mut sub = |s: &Located<String>, what: &str, this: &mut Self| -> String {
            match crate::interp::substitute(&s.value, resolve) {
                Ok(v) => v,
                Err(crate::interp::RefError::Unknown(_)) => {
                    ok = false;
                    // Every reference that resolves to nothing, except those that may
                    // only because part of the component was set aside.
                    for r in crate::interp::references(&s.value) {
                        if resolve(&r).is_none() && !reference_uncertain(broken, &r) {
                            this.push(
                                Diagnostic::error(
                                    Code::UnknownReference,
                                    format!(
                                        "component `{}`, {what}: {}",
                                        d.name,
                                        crate::interp::RefError::Unknown(r.clone())
                                    ),
                                    s.loc,
                                )
                                .with_help(if r.contains('.') {
                                    help.to_string()
                                } else {
                                    // `${PORT}`: a shell or compose habit.
                                    format!("did you mean `${{env.{r}}}` (the environment flotilla runs in)? {help}")
                                }),
                            );
                        }
                    }
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
        // A shell-style `$NAME` reaches the program literally: no shell runs (except
        // in a script given to a shell with `-c`).
        let shell = d.command.first().is_some_and(|p| {
            let name = p.value.rsplit('/').next().unwrap_or_default();
            matches!(
                name,
                "sh" | "bash" | "dash" | "zsh" | "ksh" | "fish" | "env"
            )
        });
        for (i, a) in d.command.iter().enumerate() {
            if !(shell && i > 0) {
                self.bare_dollar(d.name, &format!("command[{i}]"), a);
            }
        }
        for (k, v) in &d.env {
            if let EnvValue::Literal(text) = &v.value {
                let at = Located {
                    value: text.clone(),
                    loc: v.loc,
                };
                self.bare_dollar(d.name, &format!("env `{k}`"), &at);
            }
        }
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
            restart: d.restart,
            stop,
            tunnel: d.resolved_tunnel,
            launchd: d.spec.launchd,
            systemd: d.spec.systemd,
            container_api: d.container_api,
            kubernetes: match (d.adapter, d.spec.kubernetes) {
                (Some(AdapterKind::Kubernetes), Some(k)) => Some(super::kubernetes::with_defaults(
                    k,
                    d.name,
                    d.cluster.as_ref().map(|c| c.namespace.as_str()),
                )),
                _ => None,
            },
            cluster: d.cluster,
            container: match (d.adapter, d.spec.container) {
                (Some(AdapterKind::Container), Some(c)) => Some(super::container::with_defaults(
                    c,
                    d.stop.as_ref().and_then(|s| s.signal.as_ref()),
                )),
                _ => None,
            },
            labels: d.spec.labels,
            inherit_env: d.spec.inherit_env,
            env_file: d.spec.env_file,
            identity_files: d.spec.identity_files,
            release: d.release,
        };
        Some(c)
    }
}

impl Validator {
    /// Warns (`suspicious`) when `s` holds a shell-style `$NAME` or `$1`: no shell
    /// expands it, so the program receives those characters.
    fn bare_dollar(&mut self, component: &str, what: &str, s: &Located<String>) {
        let bytes = s.value.as_bytes();
        let found = bytes.windows(2).enumerate().find(|(i, w)| {
            w[0] == b'$'
                && (w[1].is_ascii_alphabetic() || w[1] == b'_' || w[1].is_ascii_digit())
                && (*i == 0 || bytes[i - 1] != b'$')
        });
        if let Some((i, _)) = found {
            let name: String = s.value[i + 1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            self.push(
                Diagnostic::warning(
                    Code::Suspicious,
                    format!(
                        "component `{component}`, {what}: `${name}` reaches the program literally (no shell expands it)"
                    ),
                    s.loc,
                )
                .with_help(format!(
                    "to take it from the environment flotilla runs in, write `${{env.{name}}}`; to have a shell expand it, run the command under `sh -c`"
                )),
            );
        }
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

/// `p` with `${params.NAME}` substituted (by `sub`) in an inline probe target (`url`,
/// `address`), the one place a template's probe may carry an address of its own.
fn probe_params(p: &ProbeSpec, sub: &impl Fn(&str) -> String) -> ProbeSpec {
    let mut p = p.clone();
    if let Some(h) = &mut p.http {
        h.url = h.url.as_deref().map(sub);
    }
    if let Some(t) = &mut p.tcp {
        t.address = t.address.as_deref().map(sub);
    }
    p
}
