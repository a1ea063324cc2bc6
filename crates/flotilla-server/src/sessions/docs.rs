//! A session's state derived from its stored document (never stored), and whether
//! its runtime still runs.

use flotilla_api::sessions::{RuntimeEnd, RuntimeRecord, SessionDoc, SessionState};

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

pub(crate) fn alive(r: &RuntimeRecord) -> bool {
    flotilla_exec::process_start_ticks(r.pid) == Some(r.start_ticks)
}
