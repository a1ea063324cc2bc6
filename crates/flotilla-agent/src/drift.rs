//! Drift: local changes to what the agent manages, found by comparing the measured
//! status and the journal with the desired state. Reported with evidence, never
//! reverted (supervision aside) and never merged back into the desired state.
//!
//! - `stopped-by-hand`: desired `running` in the snapshot, but an operation that was
//!   not the agent's stopped it (its desired lifecycle in the journal is `stopped`).
//!
//! A component started or restarted through Flotilla (the CLI on the host, or an
//! operation through the authority) is as desired: never drift, whoever ran it.
//! - `foreign`: a process Flotilla did not start holds one of its ports.
//! - `config`: it runs another effective config than the snapshot's (condition
//!   `drift`).
//! - `runtime`: its executable, script or a declared `identity_files` file changed on
//!   disk since it started (condition `stale-runtime`).
//! - `undesired`: an instance Flotilla started runs for a component the snapshot does
//!   not have (ownership `orphaned`).
//!
//! Operations are the agent's when their command line starts with
//! [`AGENT_COMMAND`].

use crate::report::{Drift, DriftKind};
use flotilla_model::status::{
    Condition, DesiredLifecycle, Evidence, Lifecycle, Ownership, Signal, StartedBy, StatusReport,
};
use flotilla_model::Topology;
use flotilla_store::{LastStep, Store};
use std::collections::BTreeMap;

/// How every command line the agent journals begins.
pub const AGENT_COMMAND: &str = "flotilla agent";

/// Whether an operation with this command line was run by the agent.
pub fn is_agents(command_line: &str) -> bool {
    command_line.starts_with(AGENT_COMMAND)
}

/// The journal's facts drift needs: each component's last acting step.
#[derive(Debug, Default, Clone)]
pub struct JournalFacts {
    /// The newest step that acted on each component.
    pub last_steps: BTreeMap<String, LastStep>,
}

impl JournalFacts {
    /// Reads them from `store`.
    ///
    /// # Errors
    /// Journal read errors.
    pub fn read(store: &Store) -> Result<Self, flotilla_store::StoreError> {
        let last_steps = store
            .last_steps()?
            .into_iter()
            .map(|l| (l.component.clone(), l))
            .collect();
        Ok(JournalFacts { last_steps })
    }

    /// Whether `component` was stopped on purpose by someone other than the agent:
    /// its desired lifecycle is `stopped`/`disabled` and the last step acting on it is
    /// not the agent's (a failed start of the agent's own leaves `stopped` behind
    /// too, and is not a purpose).
    pub fn stopped_on_purpose(&self, component: &str, desired: Option<DesiredLifecycle>) -> bool {
        matches!(
            desired,
            Some(DesiredLifecycle::Stopped | DesiredLifecycle::Disabled)
        ) && self
            .last_steps
            .get(component)
            .is_none_or(|l| !is_agents(&l.command_line))
    }
}

fn condition_evidence(e: &[Evidence]) -> Vec<Evidence> {
    e.iter()
        .filter(|e| e.signal == Signal::Condition)
        .cloned()
        .collect()
}

/// The drift of the components of `status` against `desired` (the topology the agent
/// applied), given the journal's facts, at `now_ms` (ms since the Unix epoch).
/// Sorted by component, then kind.
pub fn find(
    desired: &Topology,
    status: &StatusReport,
    journal: &JournalFacts,
    now_ms: i64,
) -> Vec<Drift> {
    let mut out = Vec::new();
    let ev = |source: String, saw: String| Evidence {
        signal: Signal::Condition,
        source,
        at_ms: now_ms,
        saw,
    };
    for s in &status.components {
        if s.ownership == Ownership::Orphaned {
            out.push(Drift {
                component: s.name.clone(),
                kind: DriftKind::Undesired,
                evidence: condition_evidence(&s.evidence),
            });
            continue;
        }
        let Some(c) = desired.id(&s.name).map(|id| desired.component(id)) else {
            continue;
        };
        if !c.is_managed() {
            continue;
        }
        let running = s.lifecycle == Lifecycle::Running;
        if !running && journal.stopped_on_purpose(&s.name, s.desired) {
            let saw = match journal.last_steps.get(&s.name) {
                Some(l) => format!(
                    "{} `{}` stopped it ({} step at {}); the desired state has it running: left stopped",
                    l.operation,
                    l.command_line,
                    l.action,
                    rfc3339(l.step_started_at_ms)
                ),
                None => "its desired lifecycle is stopped in the journal; the desired state has it running: left stopped".into(),
            };
            out.push(Drift {
                component: s.name.clone(),
                kind: DriftKind::StoppedByHand,
                evidence: vec![ev("journal".into(), saw)],
            });
        }
        if let StartedBy::Foreign { evidence } = &s.started_by {
            out.push(Drift {
                component: s.name.clone(),
                kind: DriftKind::Foreign,
                evidence: vec![ev("status".into(), evidence.clone())],
            });
        }
        match s.condition {
            Condition::Drift => out.push(Drift {
                component: s.name.clone(),
                kind: DriftKind::Config,
                evidence: condition_evidence(&s.evidence),
            }),
            Condition::StaleRuntime => out.push(Drift {
                component: s.name.clone(),
                kind: DriftKind::Runtime,
                evidence: condition_evidence(&s.evidence),
            }),
            _ => {}
        }
    }
    out.sort_by(|a, b| (&a.component, a.kind).cmp(&(&b.component, b.kind)));
    out
}

/// `ms` since the Unix epoch as RFC 3339 (seconds).
pub fn rfc3339(ms: i64) -> String {
    humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64),
    )
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_model::status::{
        ComponentStatus, ConfigIdentity, Health, Observability, Ownership,
    };
    use flotilla_model::{validate, Format, SourceFile, Sources};
    use flotilla_store::{OperationId, Outcome, StepId};

    fn topology() -> Topology {
        let mut sources = Sources::new();
        let id = sources.add(SourceFile::from_bytes(
            String::from("t.toml"),
            Format::Toml,
            b"[components.a]\ncommand = [\"/bin/true\"]\n[components.b]\ncommand = [\"/bin/true\"]\n".to_vec(),
        ));
        validate(&sources, id, &[]).unwrap().topology
    }

    fn status(
        name: &str,
        lifecycle: Lifecycle,
        desired: DesiredLifecycle,
        op: Option<&str>,
    ) -> ComponentStatus {
        ComponentStatus {
            name: name.into(),
            host: "local".into(),
            lifecycle,
            desired: Some(desired),
            health: Health::NotApplicable,
            condition: Condition::Ok,
            observability: Observability::Observed,
            ownership: Ownership::Managed(Default::default()),
            started_by: op.map_or(StartedBy::Nobody, |o| StartedBy::Flotilla {
                operation: o.into(),
            }),
            config_identity: ConfigIdentity {
                selected: String::new(),
                running: None,
            },
            runtime_identity: None,
            config_changes: Vec::new(),
            evidence: Vec::new(),
            last_known: None,
            owner_error: None,
            restarts: None,
            running_ports: None,
        }
    }

    fn last(component: &str, op: i64, command_line: &str, action: &str) -> LastStep {
        LastStep {
            component: component.into(),
            step: StepId(op),
            action: action.into(),
            step_outcome: Outcome::Succeeded,
            step_started_at_ms: 5_000,
            step_summary: None,
            operation: OperationId(op),
            command_line: command_line.into(),
            operation_pid: 1,
            operation_outcome: Outcome::Succeeded,
            operation_error: None,
            failed_component: None,
            failed_summary: None,
        }
    }

    #[test]
    fn hand_made_stops_and_starts_are_drift_the_agents_own_are_not() {
        let t = topology();
        let report = |a: ComponentStatus, b: ComponentStatus| StatusReport {
            observed_at_ms: 0,
            components: vec![a, b],
            interrupted: Vec::new(),
            in_progress: Vec::new(),
            stacks: Vec::new(),
        };
        let mut journal = JournalFacts::default();
        journal
            .last_steps
            .insert("a".into(), last("a", 7, "flotilla stop a", "stop"));
        journal.last_steps.insert(
            "b".into(),
            last("b", 3, "flotilla agent: apply sha256:1: start b", "start"),
        );
        let r = report(
            status("a", Lifecycle::Stopped, DesiredLifecycle::Stopped, None),
            status(
                "b",
                Lifecycle::Running,
                DesiredLifecycle::Running,
                Some("op-3"),
            ),
        );
        let d = find(&t, &r, &journal, 9_000);
        assert_eq!(d.len(), 1, "{d:#?}");
        assert_eq!(
            (d[0].component.as_str(), d[0].kind),
            ("a", DriftKind::StoppedByHand)
        );
        assert!(
            d[0].evidence[0].saw.contains("op-7 `flotilla stop a`"),
            "{d:#?}"
        );

        // b restarted through the CLI after the snapshot was applied: a change made
        // through Flotilla is never drift.
        let r = report(
            status(
                "a",
                Lifecycle::Running,
                DesiredLifecycle::Running,
                Some("op-3"),
            ),
            status(
                "b",
                Lifecycle::Running,
                DesiredLifecycle::Running,
                Some("op-9"),
            ),
        );
        let d = find(&t, &r, &journal, 9_000);
        assert!(d.is_empty(), "{d:?}");
        assert!(find(&t, &r, &journal, 9_000).is_empty());

        // The agent's own failed start left `stopped`: not a purpose, not drift.
        journal.last_steps.insert(
            "a".into(),
            last("a", 11, "flotilla agent: supervise: restart a", "stop"),
        );
        let r = report(
            status("a", Lifecycle::Stopped, DesiredLifecycle::Stopped, None),
            status(
                "b",
                Lifecycle::Running,
                DesiredLifecycle::Running,
                Some("op-3"),
            ),
        );
        assert!(find(&t, &r, &journal, 9_000).is_empty());
        assert!(!journal.stopped_on_purpose("a", Some(DesiredLifecycle::Stopped)));
    }
}
