//! `GET /v1/status`: the fleet's status from the agents' reports.

use crate::api::{self, ApiError};
use crate::failure::{Answer, Failure};
use crate::releases;
use crate::state::{selection_dto, AppState};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use flotilla_exec::this_process::now_ms;
use flotilla_store::authority::AuthorityStore;
use std::sync::Arc;

/// `GET /v1/status` (operator): every host's last report and its age.
#[utoipa::path(get, path = "/v1/status", responses((status = 200, body = api::FleetStatus), (status = 403, body = ApiError)))]
pub async fn status<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
) -> Answer<api::FleetStatus> {
    state.operator(&headers).await?;
    Ok(Json(fleet_status(&state).await?))
}

/// The fleet's status now: what `GET /v1/status` answers and the dashboard's
/// overview and host pages show. Reads every host's last report once (one store
/// call) and the in-memory selection.
///
/// # Errors
/// The store's, as a 503 [`Failure`].
pub(crate) async fn fleet_status<S: AuthorityStore>(
    state: &AppState<S>,
) -> Result<api::FleetStatus, Failure> {
    let now = now_ms();
    let deadline = state.settings.report_deadline.as_millis() as i64;
    let current = state.current();
    let mut hosts: std::collections::BTreeMap<String, api::HostStateDto> = Default::default();
    if let Some(c) = &current {
        // Hosts that run something or have an agent (not the implicit `local` host
        // of an inventory that puts nothing there).
        let used: std::collections::BTreeSet<&str> = c
            .topology
            .components
            .iter()
            .map(|x| x.host.as_str())
            .collect();
        for (name, h) in &c.topology.hosts {
            if !used.contains(name.as_str())
                && h.transport != flotilla_model::inventory::TransportKind::Agent
            {
                continue;
            }
            hosts.insert(
                name.clone(),
                api::HostStateDto {
                    host: name.clone(),
                    observability: "never-reported".into(),
                    last_report_ms: None,
                    age_ms: None,
                    revision: None,
                    report: None,
                    agent_identity: None,
                    report_before: None,
                },
            );
        }
    }
    let stored = state.store.reports().await?;
    let parsed: Vec<(String, i64, api::AgentReport)> = stored
        .iter()
        .filter_map(|r| {
            serde_json::from_str(&r.report)
                .ok()
                .map(|rep| (r.host.clone(), r.received_ms, rep))
        })
        .collect();
    let received: Vec<crate::fleet::Received<'_>> = parsed
        .iter()
        .map(|(host, received_ms, report)| crate::fleet::Received {
            host,
            received_ms: *received_ms,
            report,
        })
        .collect();
    let mut merged = crate::fleet::merged(
        current.as_ref().map(|c| &*c.topology),
        &received,
        now,
        deadline,
    );
    if let Some(c) = &current {
        releases::annotate_component_releases(state, &c.topology, &mut merged).await;
    }
    // A report measured before the last operation step its host answered may show
    // what that step undid: say so on each of its components.
    let last_steps = state.last_steps.lock().expect("not poisoned").clone();
    let before: std::collections::HashMap<&str, &str> = parsed
        .iter()
        .filter_map(|(host, _, report)| {
            let (op, at) = last_steps.get(host)?;
            (report.status.observed_at_ms < *at).then_some((host.as_str(), op.as_str()))
        })
        .collect();
    for c in &mut merged.components {
        if let Some(op) = before.get(c.host.as_str()) {
            c.evidence.push(flotilla_model::status::Evidence {
                signal: flotilla_model::status::Signal::Lifecycle,
                source: "authority".into(),
                at_ms: now,
                saw: format!(
                    "reported before {op}, which changed this host since: a newer report is due"
                ),
            });
        }
    }
    for r in stored {
        let age = now - r.received_ms;
        let report: Option<api::AgentReport> = serde_json::from_str(&r.report).ok();
        let measured_ms = report
            .as_ref()
            .map_or(r.received_ms, |p| p.status.observed_at_ms);
        let report_before = last_steps
            .get(&r.host)
            .filter(|(_, at)| measured_ms < *at)
            .map(|(op, _)| op.clone());
        hosts.insert(
            r.host.clone(),
            api::HostStateDto {
                host: r.host,
                observability: if age <= deadline {
                    "observed"
                } else {
                    "unreachable"
                }
                .into(),
                last_report_ms: Some(r.received_ms),
                age_ms: Some(age),
                revision: r.revision,
                report,
                agent_identity: None,
                report_before,
            },
        );
    }
    for (host, id) in releases::agent_identities(state).await {
        if let Some(h) = hosts.get_mut(&host) {
            h.agent_identity = Some(id);
        }
    }
    Ok(api::FleetStatus {
        selection: current.as_ref().map(|c| selection_dto(&c.selection)),
        now_ms: now,
        report_deadline_ms: deadline,
        hosts: hosts.into_values().collect(),
        report: merged,
    })
}
