//! Reading and writing a session's rows: its document, its events, its open
//! questions, its answer shape; the errors the sessions' routes share.

use super::state::Sessions;
use flotilla_api::sessions::{QuestionDoc, SessionDoc};

use crate::failure::{not_found, Failure};
use crate::sessions_config::*;
use crate::state::AppState;
use axum::http::StatusCode;
use flotilla_exec::this_process::now_ms;
use flotilla_store::authority::{AuthorityStore, Doc};

pub(crate) fn off() -> Failure {
    Failure::new(
        StatusCode::CONFLICT,
        "sessions-off",
        format!("agent sessions are off: the authority has no {SESSIONS_CONFIG_FILE}"),
    )
}

pub(crate) fn sessions_of<S>(state: &AppState<S>) -> Result<&Sessions, Failure> {
    state.sessions.as_ref().ok_or_else(off)
}

pub(crate) async fn event<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
    ev: serde_json::Value,
) -> Result<(), Failure> {
    state
        .store
        .append_session_event(id, ev.to_string(), now_ms())
        .await?;
    state.ui.hub.changed(crate::ui::hub::Topic::Sessions);
    Ok(())
}

pub(crate) async fn load_session<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
) -> Result<(SessionDoc, i64), Failure> {
    let rec = state
        .store
        .session(id)
        .await?
        .ok_or_else(|| not_found(format!("no session {id}")))?;
    let doc = serde_json::from_str(&rec.doc).map_err(|e| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "corrupt",
            format!("session {id}'s document does not parse: {e}"),
        )
    })?;
    state.cluster.read_at(Doc::Session, id, rec.version);
    Ok((doc, rec.created_ms))
}

pub(crate) async fn save_session<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
    doc: &SessionDoc,
) -> Result<(), Failure> {
    let text = serde_json::to_string(doc).expect("serialises");
    crate::cluster::put_doc(state, Doc::Session, id, text).await?;
    state.ui.hub.changed(crate::ui::hub::Topic::Sessions);
    crate::cluster::announce(state, crate::cluster::Wake::Session { id }).await;
    Ok(())
}

/// Writes question `id`'s document on the version this process read it at (409
/// when another authority wrote it since) and tells whoever shows questions.
pub(crate) async fn save_question<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
    doc: &QuestionDoc,
) -> Result<(), Failure> {
    let text = serde_json::to_string(doc).expect("serialises");
    crate::cluster::put_doc(state, Doc::Question, id, text).await?;
    state.ui.hub.changed(crate::ui::hub::Topic::Questions);
    crate::cluster::announce(state, crate::cluster::Wake::Question { id }).await;
    Ok(())
}

pub(crate) async fn open_questions<S: AuthorityStore>(
    state: &AppState<S>,
) -> Result<Vec<(u64, u64, i64, QuestionDoc)>, Failure> {
    Ok(state
        .store
        .questions()
        .await?
        .into_iter()
        .filter_map(|q| {
            state.cluster.read_at(Doc::Question, q.id, q.version);
            serde_json::from_str::<QuestionDoc>(&q.doc)
                .ok()
                .map(|d| (q.id, q.session, q.created_ms, d))
        })
        .collect())
}
