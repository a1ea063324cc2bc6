//! The checks of the baseline and of the acceptance, the same words at both so they
//! pair up: who listens on each declared local endpoint, the component's readiness
//! probe (checked with the measured identity of what runs, so a `process` check
//! works on a process Flotilla did not start), and the readiness of each running
//! dependent as its own status observes it (its route to the component).

use super::record::CheckResult;
use crate::identity::RuntimeIdentity;
use crate::probe::ProbeContext;
use crate::secrets::SecretResolver;
use flotilla_model::status::{ComponentStatus, Health, Lifecycle, Signal};
use flotilla_model::topology::Component;
use flotilla_model::Topology;
use std::path::PathBuf;

/// `listening on PORT` for each declared local port of `c`: who holds it.
///
/// # Errors
/// As [`crate::process::listeners_on`].
pub fn listening(c: &Component) -> Result<Vec<CheckResult>, crate::ExecError> {
    let ports = super::prior::declared_ports(c);
    let held = super::prior::holders(&ports)?;
    Ok(ports
        .iter()
        .map(|port| {
            let here: Vec<String> = held
                .iter()
                .filter(|l| l.address.port() == *port)
                .map(|l| {
                    let socket =
                        crate::adapter::container::engine::socket_for(c.container_api.as_deref());
                    format!(
                        "{} on {}",
                        crate::discover::containers::describe_holder(l, &socket),
                        l.address
                    )
                })
                .collect();
            CheckResult {
                what: format!("listening on port {port}"),
                passed: !here.is_empty(),
                saw: if here.is_empty() {
                    "nothing listens".into()
                } else {
                    here.join(", ")
                },
            }
        })
        .collect())
}

/// `readiness of NAME`: one check of `c`'s readiness probe, the `process` kind
/// answered by `identity`; `None` when it declares none.
pub async fn readiness(
    c: &Component,
    identity: Option<RuntimeIdentity>,
    log_path: Option<PathBuf>,
    secrets: &SecretResolver,
) -> Option<CheckResult> {
    let probe = c.readiness.as_ref()?;
    let lookup = |n: &str| secrets.get(n);
    let ctx = ProbeContext {
        component: c.name.clone(),
        identity,
        log_path,
        log_start_offset: 0,
        secrets: &lookup,
        owner: None,
    };
    let outcome = crate::probe::observe(probe, &ctx).await;
    Some(CheckResult {
        what: format!("readiness of {}", c.name),
        passed: outcome.passed,
        saw: outcome.evidence,
    })
}

/// The components that depend on `component` directly, in the topology's order.
pub fn dependents(topology: &Topology, component: &str) -> Vec<String> {
    topology
        .order()
        .iter()
        .map(|&id| topology.component(id))
        .filter(|d| d.depends_on.iter().any(|u| u == component))
        .map(|d| d.name.clone())
        .collect()
}

/// `readiness of D (depends on X)` for each dependent's status: healthy, as its own
/// probes saw it.
pub fn of_dependents(component: &str, statuses: &[ComponentStatus]) -> Vec<CheckResult> {
    statuses
        .iter()
        .map(|s| {
            let health: Vec<&str> = s
                .evidence
                .iter()
                .filter(|e| e.signal == Signal::Health)
                .map(|e| e.saw.as_str())
                .collect();
            let saw = match (s.lifecycle, health.is_empty()) {
                (Lifecycle::Running, false) => format!(
                    "{}: {}",
                    crate::observe::value_name(&s.health),
                    health.join("; ")
                ),
                (Lifecycle::Running, true) => crate::observe::value_name(&s.health),
                (other, _) => format!("not running ({})", crate::observe::value_name(&other)),
            };
            CheckResult {
                what: format!("readiness of {} (depends on {component})", s.name),
                passed: s.lifecycle == Lifecycle::Running
                    && matches!(s.health, Health::Healthy | Health::NotApplicable),
                saw,
            }
        })
        .collect()
}

/// The acceptance's verdict against the baseline: every check that passed then
/// passes now, and the component's own readiness passes. The failures, each one
/// line; empty when accepted.
pub fn failures(component: &str, baseline: &[CheckResult], now: &[CheckResult]) -> Vec<String> {
    let mut out = Vec::new();
    for b in baseline.iter().filter(|b| b.passed) {
        match now.iter().find(|n| n.what == b.what) {
            Some(n) if n.passed => {}
            Some(n) => out.push(format!("{}: {} (at baseline: {})", n.what, n.saw, b.saw)),
            None => out.push(format!("{}: not checked (at baseline: {})", b.what, b.saw)),
        }
    }
    let own = format!("readiness of {component}");
    for n in now.iter().filter(|n| n.what == own && !n.passed) {
        if !out.iter().any(|o| o.starts_with(&own)) {
            out.push(format!("{}: {}", n.what, n.saw));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(what: &str, passed: bool) -> CheckResult {
        CheckResult {
            what: what.into(),
            passed,
            saw: if passed { "ok" } else { "refused" }.into(),
        }
    }

    #[test]
    fn acceptance_needs_what_passed_at_baseline_and_its_own_readiness() {
        let baseline = [
            c("listening on port 1", true),
            c("readiness of llm", true),
            c("readiness of chat (depends on llm)", false),
        ];
        let same = [
            c("listening on port 1", true),
            c("readiness of llm", true),
            c("readiness of chat (depends on llm)", false),
        ];
        assert!(failures("llm", &baseline, &same).is_empty());
        let worse = [
            c("listening on port 1", false),
            c("readiness of llm", true),
            c("readiness of chat (depends on llm)", true),
        ];
        assert_eq!(
            failures("llm", &baseline, &worse),
            ["listening on port 1: refused (at baseline: ok)"]
        );
        let unready = [c("listening on port 1", true), c("readiness of llm", false)];
        let bad_baseline = [c("listening on port 1", true), c("readiness of llm", false)];
        assert_eq!(
            failures("llm", &bad_baseline, &unready),
            ["readiness of llm: refused"],
            "its own readiness must pass even when it did not at baseline"
        );
    }
}
