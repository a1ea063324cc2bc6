//! The DAG checks: ports claimed twice on one host, stack members and names, and
//! dependency cycles (with the topological order when there is none).

use super::{help_for, index_str, Draft, Validator};
use crate::diag::{Code, Diagnostic, Location};
use crate::inventory::StackSpec;
use crate::node::Entry;
use crate::topology::{ComponentId, Host, Stack};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

impl Validator {
    /// Reports two components on one host that listen on one port (in their active
    /// profiles).
    pub(super) fn check_ports(&mut self, drafts: &[Draft<'_>], hosts: &BTreeMap<String, Host>) {
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
