//! The `process` check: the recorded runtime identity still matches the process
//! running (same pid, start time and executable).

use super::outcome::{ProbeOutcome, Recorder};
use super::ProbeContext;
use crate::identity::{self, IdentityMatch};
use serde_json::json;

/// `process`: [`crate::identity::verify`] of `ctx.identity`.
pub(super) async fn check_process(ctx: &ProbeContext<'_>) -> ProbeOutcome {
    let rec = Recorder::new();
    let Some(expected) = ctx.identity.clone() else {
        return rec.misconfigured(
            format!(
                "no runtime identity recorded for `{}`: a process check needs a component started by flotilla",
                ctx.component
            ),
            json!({"kind": "process"}),
        );
    };
    let pid = expected.pid;
    let verdict = tokio::task::spawn_blocking(move || identity::verify(&expected)).await;
    match verdict {
        Ok(Ok((IdentityMatch::Same, _))) => rec.done(
            true,
            format!("pid {pid} alive (identity matches)"),
            json!({"kind": "process", "pid": pid, "identity": "same"}),
        ),
        Ok(Ok((IdentityMatch::Gone, _))) => rec.done(
            false,
            format!("pid {pid} is gone"),
            json!({"kind": "process", "pid": pid, "identity": "gone"}),
        ),
        Ok(Ok((IdentityMatch::Reused { why }, _))) => rec.done(
            false,
            format!("pid {pid} now belongs to another process ({why})"),
            json!({"kind": "process", "pid": pid, "identity": "reused", "why": why}),
        ),
        Ok(Err(e)) => rec.done(
            false,
            format!("pid {pid}: cannot measure: {e}"),
            json!({"kind": "process", "pid": pid, "error": e.to_string()}),
        ),
        Err(e) => rec.done(
            false,
            format!("pid {pid}: measuring task failed: {e}"),
            json!({"kind": "process", "pid": pid}),
        ),
    }
}
