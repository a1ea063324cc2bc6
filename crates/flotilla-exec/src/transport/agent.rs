//! The `agent` transport: a call for a component on an `agent` host is queued on the
//! authority for that host's agent, which picks it up on its long poll, runs it with
//! its own executor (exactly as `flotilla host serve` runs a call that came over
//! SSH, against the host's own journal) and answers; the answer (a `StepReport` for a
//! step) is kept by the authority beside the call. The controller's executor cannot
//! tell this from SSH.
//!
//! A queued call carries a deadline (ms since the Unix epoch, the controller's clock):
//! an agent that picks it up later refuses it instead of running it, so a step the
//! controller gave up on never runs behind its back.

use super::{BoxFuture, Transport};
use crate::remote::{Call, Reply};
use crate::ssh::TransportError;
use crate::this_process::now_ms;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where calls for agents are queued and their answers awaited (the authority's
/// `POST /v1/hosts/{host}/calls` and `GET /v1/calls/{id}?wait=`).
pub trait CallQueue: Send + Sync {
    /// Queues `request` (the JSON of a [`crate::remote::Request`]) for `host`'s
    /// agent, to be refused by the agent after `deadline_ms`; returns the call's id.
    ///
    /// # Errors
    /// Why it could not be queued, one line.
    fn enqueue<'a>(
        &'a self,
        host: &'a str,
        request: serde_json::Value,
        deadline_ms: i64,
    ) -> BoxFuture<'a, Result<u64, String>>;

    /// Waits at most `wait` for the answer to call `id`: the JSON of a
    /// [`crate::remote::Response`], or `None` if there is none yet.
    ///
    /// # Errors
    /// Why the authority could not be asked, one line.
    fn answer<'a>(
        &'a self,
        id: u64,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Option<serde_json::Value>, String>>;
}

/// Routes calls for `agent` hosts through a [`CallQueue`] and every other call to
/// `other` (the SSH transport).
pub struct AgentTransport {
    queue: Arc<dyn CallQueue>,
    agent_hosts: BTreeSet<String>,
    other: Arc<dyn Transport>,
}

impl AgentTransport {
    /// Calls for `agent_hosts` go to `queue`, the rest to `other`.
    pub fn new(
        queue: Arc<dyn CallQueue>,
        agent_hosts: BTreeSet<String>,
        other: Arc<dyn Transport>,
    ) -> AgentTransport {
        AgentTransport {
            queue,
            agent_hosts,
            other,
        }
    }
}

async fn through_queue(
    queue: &dyn CallQueue,
    host: &str,
    call: Call,
    timeout: Duration,
) -> Result<Reply, TransportError> {
    let started = Instant::now();
    let what = match &call {
        Call::Hello => "hello",
        Call::Observe { .. } => "observe",
        Call::Logs { .. } => "logs",
        Call::Check { .. } => "check",
        Call::Discover { .. } => "discover",
        Call::Step { .. } => "step",
        Call::Adopt { .. } => "adopt",
    };
    let request =
        serde_json::to_value(crate::remote::request(call)).map_err(|e| TransportError::Failed {
            host: host.to_string(),
            detail: e.to_string(),
        })?;
    let unreachable = |detail: String| TransportError::Unreachable {
        host: host.to_string(),
        address: "via the authority".into(),
        detail,
    };
    let id = queue
        .enqueue(host, request, now_ms() + timeout.as_millis() as i64)
        .await
        .map_err(|e| unreachable(format!("the authority did not queue the call: {e}")))?;
    let mut last_error: Option<String> = None;
    loop {
        let left = timeout.saturating_sub(started.elapsed());
        if left.is_zero() {
            if let Some(e) = last_error {
                return Err(unreachable(format!(
                    "the authority could not be asked for the answer to call {id} before its deadline: {e}"
                )));
            }
            return Err(TransportError::Timeout {
                host: host.to_string(),
                after: timeout,
                what: format!(
                    "{what}: its agent did not answer call {id} (is it running and connected?)"
                ),
            });
        }
        match queue.answer(id, left.min(Duration::from_secs(30))).await {
            Ok(Some(v)) => return crate::remote::interpret(host, v),
            Ok(None) => continue,
            Err(e) => {
                // The call is kept by the authority and answered by the agent once the
                // authority is back (a restarted authority, a broken connection): ask
                // again until the deadline rather than report a step that may well
                // succeed as failed.
                tracing::warn!(
                    host,
                    id,
                    "the authority did not answer about call {id}: {e}; asking again"
                );
                last_error = Some(e);
                tokio::time::sleep(Duration::from_millis(500).min(left)).await;
            }
        }
    }
}

impl Transport for AgentTransport {
    fn call<'a>(
        &'a self,
        host: &'a str,
        call: Call,
        timeout: Duration,
        give_up: Option<BoxFuture<'static, ()>>,
    ) -> BoxFuture<'a, Result<Reply, TransportError>> {
        if !self.agent_hosts.contains(host) {
            return self.other.call(host, call, timeout, give_up);
        }
        // A queued call cannot be recalled; its deadline bounds it instead.
        Box::pin(through_queue(self.queue.as_ref(), host, call, timeout))
    }
}
