//! The authority's record of the notifications it posted to its webhooks
//! (`GET /v1/notifications`): what happened, its deep link, and each webhook's
//! delivery.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One notification and how its deliveries went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NotificationDto {
    /// The record's id (the generic JSON shape's `id`).
    pub id: u64,
    /// `question-opened`, `rollout-halted`, `rollout-rolled-back`,
    /// `host-unreachable`, `host-reachable` or `component-down`.
    pub kind: String,
    /// `info`, `warning` or `critical`.
    pub severity: String,
    /// One line.
    pub title: String,
    /// The details, plain text.
    pub text: String,
    /// The dashboard page it links to (absolute URL).
    pub link: String,
    /// When it happened, ms since the Unix epoch.
    pub at_ms: i64,
    /// The same event has the same key; it is sent once.
    pub dedup_key: String,
    /// One per webhook that takes this kind.
    pub deliveries: Vec<DeliveryDto>,
}

/// One webhook's delivery of a notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeliveryDto {
    /// The webhook's name (`notifications.toml`).
    pub webhook: String,
    /// `json`, `ntfy` or `slack`.
    pub shape: String,
    /// `pending`, `delivered` or `failed`.
    pub state: String,
    /// Attempts made.
    pub attempts: u32,
    /// The last HTTP status received, if any.
    pub status: Option<u16>,
    /// Why the last attempt failed, if it did.
    pub error: Option<String>,
    /// When it was delivered or given up, ms since the Unix epoch.
    pub finished_ms: Option<i64>,
}

/// `GET /v1/notifications`: the newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct NotificationList {
    /// The notifications, newest first (at most the `limit` asked, default 100).
    pub notifications: Vec<NotificationDto>,
}
