//! The fleet's status as the authority can honestly tell it: each agent's measured
//! report, aged. A host whose agent has not reported within the deadline is
//! `unreachable`, its components shown with their last-known state and its age —
//! never `stopped`; a component of the selected revision whose host never reported
//! is `unobserved`. Pure: the clock and the reports are arguments.

use crate::api::AgentReport;
use flotilla_model::status::{
    Condition, ConfigIdentity, Evidence, Health, LastKnown, Lifecycle, Observability, Ownership,
    Signal, StatusReport,
};
use flotilla_model::topology::Topology;
use std::collections::BTreeSet;

/// One host's last report and when it arrived (ms since the Unix epoch).
pub struct Received<'a> {
    /// The host.
    pub host: &'a str,
    /// Arrival time.
    pub received_ms: i64,
    /// The report.
    pub report: &'a AgentReport,
}

/// Merges the hosts' reports into one status report at `now_ms`; reports older than
/// `deadline_ms` make their components `unreachable` with last-known state.
/// Components are in the selected topology's dependency order where it has them,
/// then the rest by host and name.
pub fn merged(
    topology: Option<&Topology>,
    reports: &[Received<'_>],
    now_ms: i64,
    deadline_ms: i64,
) -> StatusReport {
    let mut out = StatusReport {
        observed_at_ms: now_ms,
        components: Vec::new(),
        interrupted: Vec::new(),
        in_progress: Vec::new(),
        stacks: Vec::new(),
    };
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for r in reports {
        let age = now_ms - r.received_ms;
        let stale = age > deadline_ms;
        for c in &r.report.status.components {
            let mut c = c.clone();
            if stale {
                c.last_known = Some(LastKnown {
                    lifecycle: c.lifecycle,
                    health: c.health,
                    condition: c.condition,
                    observed_at_ms: r.report.status.observed_at_ms,
                });
                c.lifecycle = Lifecycle::Unknown;
                c.health = Health::Unknown;
                c.condition = Condition::Attention;
                c.observability = Observability::Unreachable;
                c.evidence.insert(
                    0,
                    Evidence {
                        signal: Signal::Observability,
                        source: format!("agent {}", r.host),
                        at_ms: now_ms,
                        saw: format!(
                            "no report from the agent for {} s (deadline {} s)",
                            age / 1000,
                            deadline_ms / 1000
                        ),
                    },
                );
            }
            seen.insert(c.name.clone());
            out.components.push(c);
        }
        if !stale {
            out.interrupted
                .extend(r.report.status.interrupted.iter().cloned());
            out.in_progress
                .extend(r.report.status.in_progress.iter().cloned());
        }
    }
    if let Some(t) = topology {
        for c in &t.components {
            if seen.contains(&c.name) {
                continue;
            }
            out.components
                .push(flotilla_model::status::ComponentStatus {
                    name: c.name.clone(),
                    host: c.host.clone(),
                    lifecycle: Lifecycle::Unknown,
                    desired: None,
                    health: Health::Unknown,
                    condition: Condition::Attention,
                    observability: Observability::Unobserved,
                    ownership: Ownership::of(c.owner, c.adapter),
                    started_by: Default::default(),
                    config_identity: ConfigIdentity {
                        selected: c.config_digest(),
                        running: None,
                    },
                    runtime_identity: None,
                    config_changes: Vec::new(),
                    evidence: vec![match t.hosts.get(&c.host).map(|h| h.transport) {
                        Some(flotilla_model::inventory::TransportKind::Agent) => Evidence {
                            signal: Signal::Observability,
                            source: format!("agent {}", c.host),
                            at_ms: now_ms,
                            saw: "its host's agent has not reported it".into(),
                        },
                        // Only agents report to the authority: a host reached over
                        // SSH or this machine is observed by the CLI, not here.
                        _ => Evidence {
                            signal: Signal::Observability,
                            source: "authority".into(),
                            at_ms: now_ms,
                            saw: format!(
                                "host `{}` has no agent: nothing reports it here; `flotilla status` observes it where the host can be reached",
                                c.host
                            ),
                        },
                    }],
                    last_known: None,
                    owner_error: None,
                    restarts: None,
                    running_ports: None,
                });
        }
        let order: std::collections::HashMap<&str, usize> = t
            .order()
            .iter()
            .enumerate()
            .map(|(i, id)| (t.component(*id).name.as_str(), i))
            .collect();
        out.components.sort_by(|a, b| {
            let ka = order.get(a.name.as_str()).copied().unwrap_or(usize::MAX);
            let kb = order.get(b.name.as_str()).copied().unwrap_or(usize::MAX);
            ka.cmp(&kb)
                .then_with(|| a.host.cmp(&b.host))
                .then_with(|| a.name.cmp(&b.name))
        });
    }
    out
}
