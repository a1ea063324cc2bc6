//! Transports: how a step or an observation of a component reaches the executor of
//! the component's own host.
//!
//! A component on this host runs in this process (no transport). A component on a
//! remote host ([`flotilla_model::topology::Host::is_remote`]) is sent through a
//! [`Transport`]: one versioned request ([`crate::remote::Call`]: hello, observe,
//! step…) answered by one [`crate::remote::Reply`] from that host's own executor,
//! which runs it against its own journal. The executor and the observer see only
//! this trait: an `agent` transport (a call queued on the authority for an
//! outbound-only agent, answered on its next poll) implements it without touching them.

pub mod agent;

use crate::remote::{Call, Reply};
use crate::ssh::{Pool, TransportError};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A boxed, sendable future (what trait objects can return).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Carries calls to the executors of remote hosts.
pub trait Transport: Send + Sync {
    /// Sends `call` to `host` and returns its reply (never [`Reply::Error`]: that is
    /// a [`TransportError`]). The whole exchange is bounded by `timeout`; when
    /// `give_up` resolves first, the host is told to abandon the call (it stops what
    /// the call launched) and the answer is an error.
    ///
    /// # Errors
    /// [`TransportError`]: unreachable, host key, authentication, not installed,
    /// version skew, timeout, or the host's own error — each naming the host.
    fn call<'a>(
        &'a self,
        host: &'a str,
        call: Call,
        timeout: Duration,
        give_up: Option<BoxFuture<'static, ()>>,
    ) -> BoxFuture<'a, Result<Reply, TransportError>>;
}

/// The `ssh` transport: `flotilla host serve` on the host, over one multiplexed
/// OpenSSH connection per host ([`Pool`]).
impl Transport for Pool {
    fn call<'a>(
        &'a self,
        host: &'a str,
        call: Call,
        timeout: Duration,
        give_up: Option<BoxFuture<'static, ()>>,
    ) -> BoxFuture<'a, Result<Reply, TransportError>> {
        Box::pin(crate::remote::call_until(
            self, host, call, timeout, give_up,
        ))
    }
}
