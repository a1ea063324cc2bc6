//! A session's state derived from its stored document (never stored), and whether
//! its runtime still runs.

use flotilla_api::sessions::{RuntimeEnd, RuntimeRecord, SessionDoc, SessionState};
use flotilla_sessions::runtime::{PodRef, Running};

/// The state of a session from its facts: a live runtime wins (`Working`), then an
/// open question, then how the last runtime ended.
pub fn derive_state(doc: &SessionDoc, runtime_alive: bool, open_questions: usize) -> SessionState {
    if runtime_alive {
        SessionState::Working
    } else if open_questions > 0 {
        SessionState::WaitingForAnswer
    } else {
        match &doc.last_end {
            None => SessionState::New,
            Some(RuntimeEnd { code: Some(0), .. }) => SessionState::Idle,
            Some(RuntimeEnd { how, .. }) if how == "idle" || how == "stopped" => SessionState::Idle,
            Some(_) => SessionState::Failed,
        }
    }
}

/// What a runtime is told of runtime record `r` (its pid and start time, or its
/// pod).
pub(crate) fn running_of(r: &RuntimeRecord) -> Running {
    Running {
        pid: r.pid,
        start_ticks: r.start_ticks,
        pod: r.pod.as_ref().map(|p| PodRef {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            uid: p.uid.clone(),
        }),
    }
}
