//! Server-side apply of a component's objects
//! (<https://kubernetes.io/docs/reference/using-api/server-side-apply/>): each object
//! is sent whole as an apply patch (`PATCH`, `Content-Type:
//! application/apply-patch+yaml`, a JSON body) under the field manager
//! [`FIELD_MANAGER`], never forced unless asked; the Service before the workload, and
//! every object as a dry run (`dryRun=All`) before any is applied for real.

use crate::cluster::{self, Connection};
use crate::error::KubeError;
use crate::manifest::{Objects, Workload, FIELD_MANAGER};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Patch, PatchParams};

/// Applies `objs` (Service, then workload) with server-side apply: as a dry run first,
/// then for real. Returns the workload's `metadata.generation` after the apply (what
/// the watch must have delivered before a wait can trust what it reads).
///
/// `passes`: `[true, false]` for a dry run then the apply (what a start does), `[true]`
/// for the dry run alone (`flotilla check`). `force` takes over fields another field
/// manager owns (server-side apply's `force=true`).
///
/// # Errors
/// The first refusal ([`KubeError::Api`]: a conflict, 403, a namespace that does not
/// exist, an invalid object) or [`KubeError::Unreachable`]; a refusal in the dry run
/// leaves every object as it was.
pub fn server_side_apply(
    conn: &Connection,
    objs: &Objects,
    force: bool,
    passes: &[bool],
) -> Result<i64, KubeError> {
    let mut generation = 0;
    for &dry_run in passes {
        let client = conn.client.clone();
        let server = conn.server.clone();
        let ns = objs.namespace.clone();
        let service = objs.service.clone();
        let workload = objs.workload.clone();
        let verb = if dry_run { "apply (dry run)" } else { "apply" };
        let kind = match &workload {
            Workload::Deployment(_) => "Deployment",
            Workload::StatefulSet(_) => "StatefulSet",
        };
        let what = format!(
            "{verb} of {}",
            objs.workload.meta().name.clone().unwrap_or_default()
        );
        generation = cluster::call(&what, async move {
            let mut pp = PatchParams::apply(FIELD_MANAGER);
            pp.force = force;
            pp.dry_run = dry_run;
            if let Some(svc) = service {
                let name = svc.metadata.name.clone().unwrap_or_default();
                let api: kube::Api<Service> = kube::Api::namespaced(client.clone(), &ns);
                api.patch(&name, &pp, &Patch::Apply(&svc))
                    .await
                    .map_err(|e| {
                        KubeError::from_kube(verb, &format!("Service {ns}/{name}"), &server, e)
                    })?;
            }
            let name = workload.meta().name.clone().unwrap_or_default();
            let result = match workload {
                Workload::Deployment(d) => {
                    let api: kube::Api<Deployment> = kube::Api::namespaced(client, &ns);
                    api.patch(&name, &pp, &Patch::Apply(&d))
                        .await
                        .map(|d| d.metadata.generation.unwrap_or(0))
                }
                Workload::StatefulSet(s) => {
                    let api: kube::Api<StatefulSet> = kube::Api::namespaced(client, &ns);
                    api.patch(&name, &pp, &Patch::Apply(&s))
                        .await
                        .map(|s| s.metadata.generation.unwrap_or(0))
                }
            };
            result
                .map_err(|e| KubeError::from_kube(verb, &format!("{kind} {ns}/{name}"), &server, e))
        })?;
    }
    Ok(generation)
}
