//! The wire types of credentials and join tokens (`flotilla serve credentials`,
//! `flotilla serve token`): `GET /v1/credentials` lists credentials, `POST
//! /v1/credentials/revoke` revokes one (by id) or a host's agent credentials,
//! `POST /v1/credentials/metrics` makes a metrics scraper's credential, `GET
//! /v1/tokens` lists join tokens and `DELETE /v1/tokens/{id}` revokes one. All
//! need an operator credential.
//!
//! An id is the first 12 hex digits of the SHA-256 the authority stores (never the
//! secret); any unique prefix of at least 4 of them names one.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One credential, never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CredentialDto {
    /// Its id: the first 12 hex digits of its hash.
    pub id: String,
    /// `operator`, `agent`, `session`, `alerts` or `metrics`.
    pub kind: String,
    /// Whose: the operator's or sender's name, the agent's host, the session's id.
    pub name: String,
    /// The agent's host (kind `agent` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// When it was made, ms since the Unix epoch.
    pub created_ms: i64,
    /// When it was last used, ms since the Unix epoch, to within a minute (`None`:
    /// not since this was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_ms: Option<i64>,
    /// The client address (`ip:port`) of that use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_address: Option<String>,
    /// When it was revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_ms: Option<i64>,
}

/// `GET /v1/credentials`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CredentialList {
    /// Oldest first.
    pub credentials: Vec<CredentialDto>,
}

/// `POST /v1/credentials/revoke`: exactly one of `id` and `host`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RevokeCredentials {
    /// A unique prefix (at least 4 hex digits) of a credential's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Every agent credential of this host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// What revoking did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CredentialsRevoked {
    /// The credentials revoked by this request, as they are now (a credential
    /// named by id that was revoked already is listed with its first revocation
    /// time).
    pub credentials: Vec<CredentialDto>,
}

/// `POST /v1/credentials/metrics`: a credential that may only read `/metrics`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MetricsCredentialRequest {
    /// The scraper's name (e.g. `prometheus`).
    pub name: String,
}

/// A new credential (its secret is shown once).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CredentialCreated {
    /// Its id.
    pub id: String,
    /// Its kind.
    pub kind: String,
    /// Whose.
    pub name: String,
    /// The secret (`flt-metrics-…`): `Authorization: Bearer <it>`.
    pub credential: String,
}

/// One join token, never the token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct JoinTokenDto {
    /// Its id: the first 12 hex digits of its hash.
    pub id: String,
    /// The host it is bound to.
    pub host: String,
    /// When it was made, ms since the Unix epoch.
    pub created_ms: i64,
    /// When it expires, ms since the Unix epoch.
    pub expires_ms: i64,
    /// When it was used to join.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_ms: Option<i64>,
    /// When it was revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_ms: Option<i64>,
    /// Whether joining with it keeps the host's older agent credentials.
    pub keep_credentials: bool,
    /// `unused`, `used`, `expired` or `revoked`.
    pub state: String,
}

/// `GET /v1/tokens`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JoinTokenList {
    /// Newest first.
    pub tokens: Vec<JoinTokenDto>,
}
