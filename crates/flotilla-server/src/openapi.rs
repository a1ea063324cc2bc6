//! The API's OpenAPI 3.1 document, generated from the handlers and DTOs by utoipa.
//! `crates/flotilla-server/openapi.json` is its committed copy (`scripts/update-schemas`
//! writes it; a test keeps it equal).

use crate::api;
use crate::blobs;
use crate::calls;
use crate::joining;
use crate::releases;
use crate::revisions;
use crate::service;

use crate::sessions;
use crate::status;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::OpenApi;

/// The document's definition.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Flotilla authority API",
        description = "The desired-state authority that `flotilla serve` runs: revisions, selection, role-filtered host snapshots (long-polled), agent reports, join tokens, signed releases relayed, blobs, rollouts, agents' release assignments and unskip requests.",
        license(name = "Apache-2.0")
    ),
    paths(
        service::healthz,
        service::readyz,
        service::metrics,
        service::ca_pem,
        crate::openapi::openapi,
        joining::join,
        joining::create_token,
        crate::credentials::list,
        crate::credentials::revoke,
        crate::credentials::create_metrics,
        crate::credentials::list_tokens,
        crate::credentials::revoke_token,
        revisions::snapshot,
        revisions::report,
        revisions::history,
        revisions::publish,
        revisions::select,
        revisions::revision,
        revisions::diff,
        status::status,
        crate::notify::routes::list_notifications,
        calls::enqueue_call,
        calls::pending_calls,
        calls::reply_call,
        calls::call_status,
        blobs::routes::put_blob,
        blobs::routes::get_blob,
        releases::publish_release,
        releases::list_releases,
        releases::create_rollout,
        releases::create_rollback,
        releases::list_rollouts,
        releases::get_rollout,
        releases::rollout_action,
        releases::assignment,
        releases::report_update,
        releases::request_unskip,
        releases::get_unskip,
        sessions::create_session,
        sessions::list_sessions,
        sessions::get_session,
        sessions::session_events,
        sessions::send_message,
        sessions::switch_mode,
        sessions::stop_runtime,
        sessions::delete_session,
        sessions::list_questions,
        sessions::answer_question,
        sessions::gate_hook,
        sessions::exec,
        sessions::push,
        sessions::get_output,
        sessions::alertmanager,
        sessions::create_alerts_credential,
        crate::ui::links::create,
        crate::ui::links::list,
        crate::ui::links::revoke,
    ),
    components(schemas(
        flotilla_api::notifications::NotificationList,
        flotilla_api::notifications::NotificationDto,
        flotilla_api::notifications::DeliveryDto,
        sessions::SessionDoc,
        sessions::RuntimeRecord,
        sessions::RuntimePod,
        sessions::RuntimeEnd,
        sessions::SessionState,
        sessions::QuestionDoc,
        sessions::AnswerDoc,
        sessions::CreateSessionRequest,
        sessions::SessionDto,
        sessions::SessionsResponse,
        sessions::SessionEventDto,
        sessions::SessionEventsResponse,
        sessions::MessageRequest,
        sessions::ModeRequest,
        sessions::QuestionDto,
        sessions::QuestionsResponse,
        sessions::AnswerRequest,
        sessions::ExecRequest,
        sessions::ExecResponse,
        sessions::PushRequest,
        sessions::PushResponse,
        sessions::AlertsResponse,
        sessions::AlertsCredentialRequest,
        sessions::AlertsCredentialResponse,
        sessions::CleanupReport,
        sessions::MirrorReport,
        api::ApiError,
        api::JoinRequest,
        api::JoinResponse,
        api::TokenRequest,
        api::TokenResponse,
        api::SnapshotResponse,
        api::Drift,
        api::AgentReport,
        api::PublishRequest,
        api::SelectRequest,
        api::SelectionDto,
        api::SelectResponse,
        api::RevisionSummaryDto,
        api::HistoryResponse,
        api::RevisionDto,
        api::ChangeDto,
        api::DiffResponse,
        api::HostStateDto,
        api::FleetStatus,
        api::EnqueueRequest,
        api::Enqueued,
        api::CallDto,
        api::CallsResponse,
        api::ReplyRequest,
        api::CallStatus,
        api::PublishReleaseRequest,
        api::ReleaseDto,
        api::ArtifactDto,
        api::CreateRolloutRequest,
        api::CreateRollbackRequest,
        api::RolloutDto,
        api::RolloutsResponse,
        api::Assignment,
        api::ReleaseAssignment,
        api::AgentIdentityDto,
        api::SelectedReleaseDto,
        api::UnskipRequest,
        api::CreateUnskipRequest,
        api::UnskipState,
        api::UnskipDto,
        flotilla_api::ui_links::UiLinkRequest,
        flotilla_api::ui_links::UiLinkCreated,
        flotilla_api::ui_links::UiLinkDto,
        flotilla_api::ui_links::UiLinkList,
        flotilla_api::ui_links::UiLinkRevoked,
        flotilla_api::credentials::CredentialDto,
        flotilla_api::credentials::CredentialList,
        flotilla_api::credentials::RevokeCredentials,
        flotilla_api::credentials::CredentialsRevoked,
        flotilla_api::credentials::MetricsCredentialRequest,
        flotilla_api::credentials::CredentialCreated,
        flotilla_api::credentials::JoinTokenDto,
        flotilla_api::credentials::JoinTokenList,
    ))
)]
pub struct ApiDoc;

/// The document as pretty-printed JSON, ending in a newline.
pub fn document() -> String {
    let mut s = ApiDoc::openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serialises");
    s.push('\n');
    s
}

/// `GET /v1/openapi.json`: this API's OpenAPI document.
#[utoipa::path(get, path = "/v1/openapi.json", responses((status = 200, description = "OpenAPI 3.1", body = Object)))]
pub async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::document(),
    )
        .into_response()
}
