//! Injected failures (API faults, and pods that misbehave) and the request log.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::status::{status_failure, Reply};

/// A failure to answer instead of serving a request: checked before the request
/// touches the store, so a failed write writes nothing.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Fault {
    /// HTTP method to match (`PATCH`); any when `None`.
    #[serde(default)]
    pub method: Option<String>,
    /// A substring of the request path to match (`/deployments/web`); any when empty.
    #[serde(default)]
    pub path: String,
    /// HTTP status of the answer (e.g. 500, 403, 429).
    pub status: u16,
    /// The Status body's `reason` (`InternalError`, `Forbidden`, `TooManyRequests`…).
    #[serde(default = "default_reason")]
    pub reason: String,
    /// The Status body's `message`.
    #[serde(default)]
    pub message: String,
    /// How many requests it answers before it goes; forever when `None`.
    #[serde(default)]
    pub times: Option<u32>,
}

fn default_reason() -> String {
    "InternalError".into()
}

impl Fault {
    /// A fault answering every request to a path containing `path` with `status`.
    pub fn new(
        method: Option<&str>,
        path: &str,
        status: u16,
        reason: &str,
        message: &str,
    ) -> Fault {
        Fault {
            method: method.map(str::to_string),
            path: path.to_string(),
            status,
            reason: reason.to_string(),
            message: message.to_string(),
            times: None,
        }
    }

    /// The same fault answering only the next `n` matching requests.
    pub fn times(mut self, n: u32) -> Fault {
        self.times = Some(n);
        self
    }

    fn matches(&self, method: &str, path: &str) -> bool {
        self.method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && path.contains(&self.path)
    }
}

/// One request the API served (or failed), in arrival order.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RecordedRequest {
    /// `GET`, `PATCH`…
    pub method: String,
    /// The path without the query (`/apis/apps/v1/namespaces/default/deployments/web`).
    pub path: String,
    /// The raw query string (percent-encoded, as sent), empty when none.
    pub query: String,
    /// The `Content-Type` header, empty when none.
    pub content_type: String,
    /// Whether an `Authorization` header was sent.
    pub authorization: bool,
    /// The body as text (JSON for the API's writes), empty when none.
    pub body: String,
    /// The HTTP status answered (for a watch: 200 when it started).
    pub status: u16,
}

/// The first fault matching, used up by one (removed when its `times` run out).
pub(crate) fn take_fault(faults: &mut Vec<Fault>, method: &str, path: &str) -> Option<Reply> {
    let i = faults.iter().position(|f| f.matches(method, path))?;
    let f = &mut faults[i];
    let reply = status_failure(f.status, &f.reason, &f.message, None);
    if let Some(t) = f.times.as_mut() {
        *t = t.saturating_sub(1);
        if *t == 0 {
            faults.remove(i);
        }
    }
    Some(reply)
}

/// Parses a body as JSON, `None` when it is not.
pub(crate) fn json_body(body: &[u8]) -> Option<Value> {
    serde_json::from_slice(body).ok()
}

/// How a workload's pods go wrong (or not).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Misbehaviour {
    /// Running and ready.
    #[default]
    Healthy,
    /// Containers exit and are restarted with back-off: `state.waiting.reason`
    /// `CrashLoopBackOff`, `ready` false, `restartCount` rising once a second,
    /// `lastState.terminated` with this `reason` and `exitCode` (`OOMKilled`/137,
    /// `Error`/1).
    #[serde(rename_all = "camelCase")]
    CrashLoop { reason: String, exit_code: i32 },
    /// The image cannot be pulled: `state.waiting.reason` `ErrImagePull`, then
    /// `ImagePullBackOff` a second later; phase `Pending`.
    ImagePullFailure,
    /// Never scheduled: phase `Pending`, condition `PodScheduled` False with reason
    /// `Unschedulable`, no containerStatuses.
    NeverReady,
}
