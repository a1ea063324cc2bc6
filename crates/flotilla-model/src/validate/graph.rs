//! The DAG checks: ports claimed twice on one host, stack members and names, and
//! dependency cycles (with the topological order when there is none).

use super::references::LoadedTemplate;
use super::{help_for, index_str, Draft, Validator};
use crate::diag::{Code, Diagnostic, Location};
use crate::inventory::StackSpec;
use crate::node::{Entry, Node, Value};
use crate::source::Span;
use crate::template;
use crate::topology::{ComponentId, Host, Stack};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

impl Validator {
    /// Reports two components on one host that listen on one port (in their active
    /// profiles), in file order: the error is at the later one's port, with a label at
    /// the earlier one's. A port is located where it is written: in the endpoint's URL,
    /// in the template parameter that sets it, or in `tunnel.listen_port`.
    pub(super) fn check_ports(
        &mut self,
        drafts: &[Draft<'_>],
        hosts: &BTreeMap<String, Host>,
        templates: &HashMap<String, LoadedTemplate>,
    ) {
        let mut in_file_order: Vec<&Draft<'_>> = drafts.iter().collect();
        in_file_order.sort_by_key(|d| d.entry.key_span.start);
        let mut claims: HashMap<(&str, u16), (&str, &str, Claim)> = HashMap::new();
        for d in in_file_order {
            let addr = hosts.get(&d.host).map(|h| h.address.as_str()).unwrap_or("");
            for (ename, ep) in &d.parsed_endpoints {
                if !(ep.is_local_bind() || ep.host == addr) {
                    continue;
                }
                let claim = self.port_claim(d, ename, ep.port, templates);
                match claims.get(&(d.host.as_str(), ep.port)) {
                    Some((other, other_ep, other_claim)) if *other != d.name => {
                        let port = ep.port;
                        let mut label = format!("`{other}` claims port {port} here");
                        if let Some(t) = &other_claim.from_template {
                            label.push_str(&format!(" ({})", t.short()));
                        }
                        let mut help = "give one of them another port".to_string();
                        match (&claim.from_template, &other_claim.from_template) {
                            (Some(a), Some(b)) if a == b => {
                                help.push_str(&format!("; both are {}", a.fix("on one of them")))
                            }
                            (mine, theirs) => {
                                for (name, t) in [(d.name, mine), (*other, theirs)] {
                                    if let Some(t) = t {
                                        help.push_str(&format!(
                                            "; `{name}`'s is {}",
                                            t.fix("to change it")
                                        ));
                                    }
                                }
                            }
                        }
                        self.push(
                            Diagnostic::error(
                                Code::PortConflict,
                                format!(
                                    "components `{other}` and `{}` both claim port {port} on host `{}` (endpoints `{other}.{other_ep}` and `{}.{ename}`)",
                                    d.name, d.host, d.name
                                ),
                                claim.loc,
                            )
                            .with_label(other_claim.loc, label)
                            .with_help(help),
                        );
                    }
                    Some(_) => {}
                    None => {
                        claims.insert((d.host.as_str(), ep.port), (d.name, ename.as_str(), claim));
                    }
                }
            }
        }
    }

    /// Where component `d` writes the port of its endpoint `ename`: the port in the
    /// endpoint's URL (its own or its active profile's), the template parameter that
    /// sets it (the active profile's `params` first), or `tunnel.listen_port`; the
    /// `template` value when the port is the template's own (with why).
    fn port_claim(
        &self,
        d: &Draft<'_>,
        ename: &str,
        port: u16,
        templates: &HashMap<String, LoadedTemplate>,
    ) -> Claim {
        let node = &d.entry.value;
        let profile = d
            .spec
            .profile
            .as_deref()
            .filter(|p| d.spec.profiles.contains_key(*p));
        let in_profile = |path: &[&str]| {
            profile
                .and_then(|p| node.get("profiles")?.get(p))
                .and_then(|n| node_at(n, path))
        };
        let param = |pname: &str| {
            in_profile(&["params", pname]).or_else(|| node_at(node, &["params", pname]))
        };
        let at = |n: &Node<'_>| Claim {
            loc: self.loc(match &n.value {
                Value::String(_) => port_in_string(&self.text, n.span, port),
                _ => n.span,
            }),
            from_template: None,
        };
        // Written in the inventory: the endpoint's URL.
        if d.endpoints.contains_key(ename) {
            if let Some(n) =
                in_profile(&["endpoints", ename]).or_else(|| node_at(node, &["endpoints", ename]))
            {
                return at(n);
            }
        }
        let template_line = |from_template: Option<FromTemplate>| Claim {
            loc: self.loc(node.span_at(&["template"])),
            from_template,
        };
        let Some(tname) = d.spec.template.as_deref() else {
            // A tunnel's own table.
            return Claim {
                loc: self.loc(node.span_at(&["tunnel", "listen_port"])),
                from_template: None,
            };
        };
        if !d.endpoints.contains_key(ename) {
            // The forward's listening port, from the tunnel table or the template's
            // parameters.
            if let Some(n) =
                node_at(node, &["tunnel", "listen_port"]).or_else(|| param("listen_port"))
            {
                return at(n);
            }
            return template_line(None);
        }
        // From the template: which parameter sets the port.
        let pname = if template::is_builtin(tname) {
            Some(
                if tname == "external-http" {
                    "url"
                } else {
                    "port"
                }
                .to_string(),
            )
        } else {
            templates
                .get(tname)
                .and_then(|t| t.spec.endpoints.get(ename))
                .and_then(|raw| port_param(raw))
        };
        match pname {
            Some(pname) => match param(&pname) {
                Some(n) => at(n),
                None => template_line(Some(FromTemplate {
                    template: tname.to_string(),
                    param: Some(pname),
                })),
            },
            None => template_line(Some(FromTemplate {
                template: tname.to_string(),
                param: None,
            })),
        }
    }
    /// Checks stack members and names (a stack must not share a component's name) and
    /// builds the stacks, members deduplicated in declared order.
    pub(super) fn check_stacks(
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

    /// Reports every dependency cycle (one per strongly connected component) and
    /// returns a topological order when there is none.
    pub(super) fn check_cycles(&mut self, drafts: &[Draft<'_>]) -> Option<Vec<ComponentId>> {
        let n = drafts.len();
        let adj: Vec<Vec<usize>> = drafts
            .iter()
            .map(|d| d.deps.keys().copied().collect())
            .collect();
        // Kahn's algorithm; ties broken by name (index order) for a stable order.
        let edges = adj
            .iter()
            .enumerate()
            .flat_map(|(i, ups)| ups.iter().map(move |&u| (u, i)));
        let left = match crate::toposort::topo_order(n, edges) {
            Ok(order) => return Some(order.into_iter().map(|i| ComponentId(i as u32)).collect()),
            Err(left) => left,
        };
        // Some nodes remain: find the cycles among them, one per strongly connected set.
        let mut remaining = vec![false; n];
        for i in left {
            remaining[i] = true;
        }
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

/// Where a component claims a port, and the template it comes from when the port is
/// not written in the inventory.
struct Claim {
    loc: Location,
    from_template: Option<FromTemplate>,
}

/// A port the inventory does not write: a template parameter's default, or (no
/// parameter) written in the template itself.
#[derive(PartialEq, Eq)]
struct FromTemplate {
    template: String,
    param: Option<String>,
}

impl FromTemplate {
    /// For a label: "the default of template `llama-server`".
    fn short(&self) -> String {
        match &self.param {
            Some(_) => format!("the default of template `{}`", self.template),
            None => format!("written in template `{}`", self.template),
        }
    }

    /// For help: what it is and how to change it (`how`: "to change it").
    fn fix(&self, how: &str) -> String {
        match &self.param {
            Some(p) => format!(
                "the default of template `{}`: set `params.{p}` {how}",
                self.template
            ),
            None => format!(
                "written in template `{}`: change the template, or set `endpoints` {how}",
                self.template
            ),
        }
    }
}

fn node_at<'n, 'a>(node: &'n Node<'a>, path: &[&str]) -> Option<&'n Node<'a>> {
    let mut n = node;
    for step in path {
        n = n.get(step)?;
    }
    Some(n)
}

/// The span of `port` in the string literal at `span` of `text` (its last `:PORT` not
/// followed by a digit), or the whole literal.
fn port_in_string(text: &str, span: Span, port: u16) -> Span {
    let Some(raw) = text.get(span.start..span.end) else {
        return span;
    };
    let digits = port.to_string();
    let needle = format!(":{digits}");
    let found = raw
        .match_indices(&needle)
        .filter(|(i, m)| {
            !raw[i + m.len()..]
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit())
        })
        .last();
    match found {
        Some((i, _)) => {
            let start = span.start + i + 1;
            Span::new(start, start + digits.len())
        }
        None => span,
    }
}

/// The parameter `X` a user template's endpoint takes its port from
/// (`...:${params.X}`), if any.
fn port_param(raw: &str) -> Option<String> {
    let (_, after) = raw.rsplit_once(":${params.")?;
    let (name, rest) = after.split_once('}')?;
    (rest.is_empty() || rest.starts_with('/')).then(|| name.trim().to_string())
}
