//! Durable questions: opening one for a call the gate asks about, finding the
//! answered one for the same input, and using an answer once.

use super::records::open_questions;
use crate::failure::Failure;
use crate::state::AppState;
use flotilla_api::sessions::{AnswerDoc, QuestionDoc};
use flotilla_exec::this_process::now_ms;
use flotilla_store::authority::AuthorityStore;

/// The most open questions one session may have; past it, calls that would ask
/// are denied (a runtime cannot flood the humans' queue).
pub const MAX_OPEN_QUESTIONS: usize = 50;

/// Session `id`'s open (unanswered) questions.
pub(crate) async fn open_count<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
) -> Result<usize, Failure> {
    Ok(open_questions(state)
        .await?
        .iter()
        .filter(|(_, s, _, q)| *s == id && q.answer.is_none())
        .count())
}

/// Marks answered question `qid` used (an answer applies to one call) and returns
/// its answer. The answers lock is held.
pub(crate) async fn use_answer<S: AuthorityStore>(
    state: &AppState<S>,
    qid: u64,
    mut q: QuestionDoc,
) -> Result<AnswerDoc, Failure> {
    q.used = true;
    super::records::save_question(state, qid, &q).await?;
    Ok(q.answer.expect("an answered question"))
}

/// Opens a question of session `id` about exactly `tool_name` with `input`; its id.
pub(crate) async fn open_question<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
    tool_name: &str,
    input: &serde_json::Value,
    reason: &str,
) -> Result<u64, Failure> {
    let q = QuestionDoc {
        tool_name: tool_name.into(),
        tool_input: input.clone(),
        reason: reason.into(),
        answer: None,
        used: false,
        outcome: None,
    };
    let qid = state
        .store
        .create_question(id, serde_json::to_string(&q).expect("serialises"), now_ms())
        .await?;
    state.ui.hub.changed(crate::ui::hub::Topic::Questions);
    crate::notify::triggers::question_opened(state, id, qid, tool_name, input, reason);
    Ok(qid)
}

/// The tool name of executor questions.
pub const EXECUTOR_TOOL: &str = "Executor";

/// The canonical text of a tool input (keys sorted), for "exact input" matching.
fn canonical(v: &serde_json::Value) -> String {
    serde_jcs::to_string(v).unwrap_or_else(|_| v.to_string())
}

/// The answered, unused question of session `session` for exactly this call, if
/// any; or the open one (to reuse rather than ask twice).
pub(crate) async fn find_question<S: AuthorityStore>(
    state: &AppState<S>,
    session: u64,
    tool_name: &str,
    input: &serde_json::Value,
) -> Result<(Option<(u64, QuestionDoc)>, Option<u64>), Failure> {
    let want = canonical(input);
    let mut answered = None;
    let mut open = None;
    for (id, s, _, q) in open_questions(state).await? {
        if s != session || q.tool_name != tool_name || canonical(&q.tool_input) != want {
            continue;
        }
        match &q.answer {
            Some(_) if !q.used => answered = Some((id, q)),
            None => open = Some(id),
            _ => {}
        }
    }
    Ok((answered, open))
}
