//! The wire types of dashboard sign-in links (`flotilla serve ui-link`):
//! `POST /v1/ui-links` makes one, `GET /v1/ui-links` lists them, `DELETE
//! /v1/ui-links/{id}` revokes one (operator credential; the authority stores only
//! the link credential's hash).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1/ui-links`: a new one-time sign-in link.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UiLinkRequest {
    /// `operator` (acts) or `viewer` (read-only).
    pub role: String,
    /// How long it may be used, seconds (default 15 minutes; at most 7 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
}

/// A new sign-in link (its URL is shown once).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UiLinkCreated {
    /// Its id (for `flotilla serve ui-link --revoke ID`).
    pub id: u64,
    /// Its role.
    pub role: String,
    /// `<public URL>/ui/login?token=flt-ui-…`: opening it signs in once.
    pub url: String,
    /// When it expires unused, ms since the Unix epoch.
    pub expires_ms: i64,
}

/// A stored sign-in link (never its credential).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UiLinkDto {
    /// Its id.
    pub id: u64,
    /// `operator` or `viewer`.
    pub role: String,
    /// Who made it.
    pub created_by: String,
    /// When, ms since the Unix epoch.
    pub created_ms: i64,
    /// When it expires unused, ms since the Unix epoch.
    pub expires_ms: i64,
    /// When it was used to sign in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_ms: Option<i64>,
    /// When it was revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_ms: Option<i64>,
    /// `unused`, `used` (its session may be open), `expired` or `revoked`.
    pub state: String,
}

/// `GET /v1/ui-links`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UiLinkList {
    /// Newest first.
    pub links: Vec<UiLinkDto>,
}

/// `DELETE /v1/ui-links/{id}`: what revoking did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UiLinkRevoked {
    /// The link.
    pub id: u64,
    /// Dashboard sessions of this authority process ended by it (others sharing the
    /// database end theirs at their next request).
    pub sessions_ended: usize,
}
