//! How the authority's controller reaches hosts: calls for `agent` hosts go into
//! its own call queue ([`InProcess`], the same store rows and wake-ups as `POST
//! /v1/hosts/{host}/calls` and `GET /v1/calls/{id}?wait=`, without HTTP); no other
//! host is reached from here ([`NotDriven`]: the authority holds no SSH keys and runs
//! nothing on its own machine).

use crate::state::AppState;
use flotilla_exec::remote::{Call, Reply};
use flotilla_exec::ssh::TransportError;
use flotilla_exec::transport::agent::{AgentTransport, CallQueue};
use flotilla_exec::transport::{BoxFuture, Transport};
use flotilla_model::inventory::TransportKind;
use flotilla_model::topology::Topology;
use flotilla_store::authority::AuthorityStore;
use std::sync::Arc;
use std::time::Duration;

/// The authority's own call queue, in process.
pub struct InProcess<S>(pub Arc<AppState<S>>);

impl<S: AuthorityStore> CallQueue for InProcess<S> {
    fn enqueue<'a>(
        &'a self,
        host: &'a str,
        request: serde_json::Value,
        deadline_ms: i64,
    ) -> BoxFuture<'a, Result<u64, String>> {
        Box::pin(async move {
            crate::calls::queue(&self.0, host.to_string(), request, deadline_ms)
                .await
                .map_err(|f| f.1.message)
        })
    }

    fn answer<'a>(
        &'a self,
        id: u64,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Option<serde_json::Value>, String>> {
        Box::pin(async move {
            crate::calls::answer(&self.0, id, wait)
                .await
                .map(|c| c.response)
                .map_err(|f| f.1.message)
        })
    }
}

/// Every host that is not an `agent` host, from the authority: not reached.
pub struct NotDriven;

impl Transport for NotDriven {
    fn call<'a>(
        &'a self,
        host: &'a str,
        _call: Call,
        _timeout: Duration,
        _give_up: Option<BoxFuture<'static, ()>>,
    ) -> BoxFuture<'a, Result<Reply, TransportError>> {
        Box::pin(async move {
            Err(TransportError::Failed {
                host: host.to_string(),
                detail: "the authority reaches agent hosts only (this one is reached over SSH from a terminal: `flotilla status`)".into(),
            })
        })
    }
}

/// The transport of the controller's invocations on `topology`.
pub fn fleet<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    topology: &Topology,
) -> Arc<dyn Transport> {
    let agent_hosts = topology
        .hosts
        .iter()
        .filter(|(_, h)| h.transport == TransportKind::Agent)
        .map(|(n, _)| n.clone())
        .collect();
    Arc::new(AgentTransport::new(
        Arc::new(InProcess(Arc::clone(state))),
        agent_hosts,
        Arc::new(NotDriven),
    ))
}
