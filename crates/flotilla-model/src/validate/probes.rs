//! Probes: each component's readiness and liveness probe (exactly one check, naming
//! endpoints that exist), and each stack's readiness probes.

use super::{endpoint_uncertain, help_for, index_str, Draft, EndpointsOf, Located, Validator};
use crate::diag::{Code, Diagnostic, Location};
use crate::inventory::{AdapterKind, Owner, ProbeSpec};
use crate::node::Entry;
use crate::topology::{Check, Probe, Stack};
use crate::values::{Endpoint, HumanDuration};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// A component's parsed endpoints and the key paths set aside when it was decoded.
type OwnedEndpoints = (BTreeMap<String, Endpoint>, Vec<Vec<String>>);

impl Validator {
    /// Resolves each component's readiness and liveness probes.
    pub(super) fn resolve_probes(
        &mut self,
        drafts: &mut [Draft<'_>],
        index: &HashMap<&str, usize>,
        declared: &BTreeSet<&str>,
    ) {
        // Probes may name another component's endpoint (`request`): resolve after all
        // tunnel endpoints are known.
        let endpoints: Vec<OwnedEndpoints> = drafts
            .iter()
            .map(|d| (d.parsed_endpoints.clone(), d.broken.clone()))
            .collect();
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
                let probe = self.resolve_probe(d, which, &spec, index, declared, &endpoints);
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
        declared: &BTreeSet<&str>,
        endpoints: &[OwnedEndpoints],
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
            ("container_health", p.container_health.is_some()),
        ]
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(k, _)| k)
        .collect();
        // The probe's check failed to decode and was set aside (reported there).
        if kinds.is_empty()
            && from_spec
            && d.broken
                .iter()
                .any(|p| p.first().is_some_and(|k| k == which))
        {
            return None;
        }
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
                .with_help(
                    "set exactly one of: process, tcp, http, exec, request, log, container_health",
                ),
            );
            return None;
        }
        let own = |ep: &str, key: &str, this: &mut Self| -> Option<Endpoint> {
            match d.parsed_endpoints.get(ep) {
                Some(e) => Some(e.clone()),
                None if endpoint_uncertain(&d.broken, ep) => None,
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
            let address = match (&t.endpoint, &t.address) {
                (Some(ep), None) => {
                    let e = own(ep, "tcp", self)?;
                    format!("{}:{}", e.host, e.port)
                }
                (None, Some(a)) => {
                    let text =
                        self.inline_target(d, which, "address", a, at(&["tcp", "address"]))?;
                    match inline_address(&text) {
                        Ok(a) => a,
                        Err(msg) => {
                            self.push(
                                Diagnostic::error(
                                    Code::InvalidValue,
                                    format!("{which} probe of `{}`: tcp address `{text}`: {msg}", d.name),
                                    at(&["tcp", "address"]),
                                )
                                .with_help("an address is host:port, e.g. `tcp = { address = \"127.0.0.1:5432\" }`"),
                            );
                            return None;
                        }
                    }
                }
                (endpoint, _) => {
                    self.push(one_target(
                        &format!("`{}`", d.name),
                        which,
                        "tcp",
                        "address",
                        endpoint.is_some(),
                        at(&["tcp"]),
                    ));
                    return None;
                }
            };
            Check::Tcp {
                endpoint: t.endpoint.clone(),
                address,
                stays_open: t.stays_open,
            }
        } else if let Some(h) = &p.http {
            let url = match (&h.endpoint, &h.url) {
                (Some(ep), None) => join(&own(ep, "http", self)?, &h.path),
                (None, Some(u)) => {
                    if h.path.is_some() {
                        self.push(
                            Diagnostic::error(
                                Code::InvalidProbe,
                                format!("{which} probe of `{}`: an http check with `url` takes its path from the URL, not `path`", d.name),
                                at(&["http", "path"]),
                            )
                            .with_help(format!(
                                "write the path in the URL, e.g. `url = \"{}/{}\"`",
                                u.trim_end_matches('/'),
                                h.path.as_deref().unwrap_or("health").trim_start_matches('/')
                            )),
                        );
                        return None;
                    }
                    let text = self.inline_target(d, which, "url", u, at(&["http", "url"]))?;
                    match inline_url(&text) {
                        Ok(u) => u,
                        Err(msg) => {
                            self.push(
                                Diagnostic::error(
                                    Code::InvalidValue,
                                    format!("{which} probe of `{}`: http url `{text}`: {msg}", d.name),
                                    at(&["http", "url"]),
                                )
                                .with_help("a URL is http:// or https://, a host, and a port unless the scheme's default, e.g. `http = { url = \"http://127.0.0.1:8080/health\" }`"),
                            );
                            return None;
                        }
                    }
                }
                (endpoint, _) => {
                    self.push(one_target(
                        &format!("`{}`", d.name),
                        which,
                        "http",
                        "url",
                        endpoint.is_some(),
                        at(&["http"]),
                    ));
                    return None;
                }
            };
            Check::Http {
                endpoint: h.endpoint.clone(),
                url,
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
                    match index.get(comp).and_then(|&i| endpoints[i].0.get(ep)) {
                        Some(e) => e.clone(),
                        // That component, or that endpoint of it, is broken (reported).
                        None if match index.get(comp) {
                            Some(&i) => endpoint_uncertain(&endpoints[i].1, ep),
                            None => declared.contains(comp),
                        } =>
                        {
                            return None
                        }
                        None => {
                            let mut diag = Diagnostic::error(
                            Code::UnknownEndpoint,
                            format!("{which} probe of `{}` names endpoint `{}`, which does not exist", d.name, r.endpoint),
                            at(&["request", "endpoint"]),
                        );
                            if let Some(&i) = index.get(comp) {
                                diag.help = help_for(ep, endpoints[i].0.keys());
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
        } else if p.container_health.is_some() {
            if d.adapter != Some(AdapterKind::Container) {
                self.push(
                    Diagnostic::error(
                        Code::InvalidProbe,
                        format!(
                            "{which} probe of `{}` is a container_health check, but `{}` is not a container component",
                            d.name, d.name
                        ),
                        at(&["container_health"]),
                    )
                    .with_help("container_health reads the engine's health status of the component's own container (adapter = \"container\"); use an http, tcp or exec check"),
                );
                return None;
            }
            Check::ContainerHealth
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

    /// Resolves each stack's readiness probes: `request` checks naming
    /// `component.endpoint`, or `exec` checks.
    pub(super) fn stack_readiness(
        &mut self,
        stacks: &mut BTreeMap<String, Stack>,
        probes: &[(&Entry<'_>, Vec<ProbeSpec>)],
        index: &HashMap<&str, usize>,
        declared: &BTreeSet<&str>,
        endpoints: &[EndpointsOf<'_>],
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
                    || spec.log.is_some()
                    || spec.container_health.is_some();
                match (&spec.request, &spec.exec, others) {
                    (Some(r), None, false) => {
                        let target = r.endpoint.split_once('.');
                        let found = target
                            .and_then(|(c, e)| index.get(c).and_then(|&i| endpoints[i].0.get(e)));
                        // That member, or that endpoint of it, is broken (reported).
                        let uncertain = target.is_some_and(|(c, e)| match index.get(c) {
                            Some(&i) => endpoint_uncertain(endpoints[i].1, e),
                            None => declared.contains(c),
                        });
                        if found.is_none() && uncertain {
                            continue;
                        }
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
}

impl Validator {
    /// An inline probe target (`key` is `url` or `address`) with `${host.address}`,
    /// `${host.name}` and `${component.name}` substituted, as in endpoints; `None`
    /// after reporting a reference that resolves to nothing.
    fn inline_target(
        &mut self,
        d: &Draft<'_>,
        which: &str,
        key: &str,
        text: &str,
        loc: Location,
    ) -> Option<String> {
        let resolved = crate::interp::substitute(text, |r| match r {
            "host.address" => Some(d.host_address.clone()),
            "host.name" => Some(d.host.clone()),
            "component.name" => Some(d.name.to_string()),
            _ => None,
        });
        match resolved {
            Ok(t) => Some(t),
            Err(e) => {
                self.push(
                    Diagnostic::error(
                        Code::UnknownReference,
                        format!("{which} probe of `{}`, `{key}`: {e}", d.name),
                        loc,
                    )
                    .with_help(format!(
                        "a probe's `{key}` may reference ${{host.address}}, ${{host.name}} and ${{component.name}}; to probe one of the component's endpoints, name it with `endpoint`"
                    )),
                );
                None
            }
        }
    }
}

/// The error for a `kind` check (`tcp`, `http`) of `owner`'s `which` probe that names
/// both an endpoint and an inline target (`inline`: `address`, `url`), or neither.
pub(super) fn one_target(
    owner: &str,
    which: &str,
    kind: &str,
    inline: &str,
    both: bool,
    loc: Location,
) -> Diagnostic {
    let example = if kind == "http" {
        "http = { url = \"http://127.0.0.1:8080/health\" }"
    } else {
        "tcp = { address = \"127.0.0.1:8080\" }"
    };
    let named = if kind == "http" {
        "http = { endpoint = \"http\", path = \"/health\" }"
    } else {
        "tcp = { endpoint = \"http\" }"
    };
    Diagnostic::error(
        Code::InvalidProbe,
        if both {
            format!("{which} probe of {owner}: the {kind} check sets both `endpoint` and `{inline}`; set exactly one")
        } else {
            format!("{which} probe of {owner}: the {kind} check sets neither `endpoint` nor `{inline}`; set exactly one")
        },
        loc,
    )
    .with_help(format!(
        "name one of the component's endpoints, e.g. `{named}`, or give the target inline, e.g. `{example}`"
    ))
}

/// An inline `tcp` address, `host:port` (IPv6 in brackets), as dialled.
fn inline_address(text: &str) -> Result<String, String> {
    if let Some((scheme, _)) = text.split_once("://") {
        return Err(format!("an address has no scheme (`{scheme}://`)"));
    }
    let e = Endpoint::parse(text)?;
    if !e.path.is_empty() {
        return Err(format!("an address has no path (`{}`)", e.path));
    }
    Ok(if e.host.contains(':') {
        format!("[{}]:{}", e.host, e.port)
    } else {
        format!("{}:{}", e.host, e.port)
    })
}

/// An inline `http` URL: `http://` or `https://`, a host, a port (or the scheme's
/// default); `/` when it has no path.
fn inline_url(text: &str) -> Result<String, String> {
    if !text.contains("://") {
        return Err(format!(
            "not a URL: it has no scheme (write `http://{text}`)"
        ));
    }
    let e = Endpoint::parse(text)?;
    let scheme = e.scheme.as_deref().unwrap_or_default();
    if !matches!(scheme, "http" | "https") {
        return Err(format!(
            "the scheme is `{scheme}`: an http check speaks http:// or https://"
        ));
    }
    Ok(if e.path.is_empty() {
        format!("{text}/")
    } else {
        text.to_string()
    })
}

fn regex_syntax_check(pattern: &str) -> Result<(), String> {
    regex::Regex::new(pattern)
        .map(|_| ())
        .map_err(|e| e.to_string())
}
