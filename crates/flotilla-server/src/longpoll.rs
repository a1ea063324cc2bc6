//! Long polls: how long a request may wait, and parking a
//! request on a [`watch`] index until it moves or the wait ends.

use crate::failure::Failure;
use crate::metrics::Metrics;
use axum::http::StatusCode;
use std::time::Duration;
use tokio::sync::watch;

/// The longest a snapshot long poll waits (5 min).
pub const MAX_WAIT: Duration = Duration::from_secs(300);

/// The wait when the request names none (30 s).
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// Query of a snapshot long poll.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
pub struct PollQuery {
    /// The index the caller holds (0: none).
    #[serde(default)]
    pub index: u64,
    /// How long to wait for a newer one: a duration like `30s`, `500ms` (at most 5m).
    #[serde(default)]
    pub wait: Option<String>,
}

/// A long poll's wait: returns once `index` passes `after`, or after `wait` (at once
/// when it has passed already or `wait` is zero), counted as a waiter meanwhile.
pub(crate) async fn park(
    index: &watch::Sender<u64>,
    after: u64,
    wait: Duration,
    metrics: &Metrics,
) {
    let mut rx = index.subscribe();
    if *rx.borrow() <= after && !wait.is_zero() {
        let _waiting = crate::metrics::Held::new(&metrics.longpoll_waiters);
        let _ = tokio::time::timeout(wait, rx.wait_for(|i| *i > after)).await;
    }
}

pub(crate) fn wait_of(wait: &Option<String>) -> Result<Duration, Failure> {
    match wait {
        None => Ok(DEFAULT_WAIT),
        Some(w) => humantime::parse_duration(w)
            .map(|d| d.min(MAX_WAIT))
            .map_err(|e| {
                Failure::new(
                    StatusCode::BAD_REQUEST,
                    "invalid",
                    format!("wait `{w}`: {e}"),
                )
            }),
    }
}

/// Query of an answer's long poll.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
pub struct WaitQuery {
    /// How long to wait for the answer: `30s`, `500ms` (at most 5m).
    #[serde(default)]
    pub wait: Option<String>,
}
