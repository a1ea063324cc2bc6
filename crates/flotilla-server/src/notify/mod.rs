//! Notifications: the authority posts to the webhooks of `notifications.toml`
//! ([`config`]) when a question opens, a rollout halts or a host of it rolls
//! back, a host's agent goes silent past the report deadline (and when it comes
//! back), or a component is reported down unexpectedly ([`triggers`]). Each
//! message carries the dashboard's deep link (`flotilla_api::links`, under the
//! authority's public URL) and is laid out as generic JSON, ntfy's or Slack's
//! ([`shapes`]).
//!
//! Never in the way of what caused it: a trigger only puts the event on a bounded
//! queue ([`queue`]; full: dropped, counted, logged). The delivery task
//! ([`worker`]) records it in the store — one row per deduplication key, so the
//! same event is sent once, across restarts and processes — and posts it, retried
//! with backoff and jitter ([`deliver`]); `GET /v1/notifications` ([`routes`])
//! shows the record and each delivery. Metrics: `flotilla_notifications_sent_total`
//! and `flotilla_notifications_failed_total` by webhook,
//! `flotilla_notifications_dropped_total`.
//!
//! Files: [`event`] (what is said; pure), [`config`], [`shapes`] (pure),
//! [`deliver`], [`queue`] ([`queue::Notifier`], held by the shared state),
//! [`worker`], [`triggers`], [`routes`].

pub mod config;
pub mod deliver;
pub mod event;
pub mod queue;
pub mod routes;
pub mod shapes;
pub mod triggers;
pub mod worker;

pub use config::{NotifyConfig, NotifyConfigError, Shape, Webhook, NOTIFICATIONS_FILE};
pub use event::{Event, Kind, Severity};
pub use queue::Notifier;
