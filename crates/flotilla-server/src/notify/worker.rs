//! The delivery task: takes each queued event, records it in the store (once per
//! deduplication key: a key recorded already means sent already), posts it to
//! every webhook that takes its kind at once, and stores how each delivery went.

use super::config::{NotifyConfig, Webhook};
use super::deliver::{deliver, Outcome};
use super::event::Event;
use super::shapes::render;
use crate::metrics::WebhookLabel;
use crate::state::AppState;
use flotilla_api::notifications::{DeliveryDto, NotificationDto};
use flotilla_exec::this_process::now_ms;
use flotilla_store::authority::AuthorityStore;
use std::sync::Arc;

/// Notifications being delivered at once, at most (a hung receiver holds one
/// until its attempts run out).
pub const IN_FLIGHT: usize = 32;

/// Starts the delivery task and the reachability watch when webhooks are
/// configured; nothing otherwise.
pub fn spawn<S: AuthorityStore>(state: &Arc<AppState<S>>) {
    let Some(config) = state.notifier.config() else {
        return;
    };
    let Some(mut rx) = state.notifier.take_receiver() else {
        return;
    };
    let client = match super::deliver::client() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("notifications are off: no HTTP client: {e}");
            return;
        }
    };
    tracing::info!(
        webhooks = config.webhooks.len(),
        "notifications: posting to {}",
        config
            .webhooks
            .iter()
            .map(|w| format!("{} ({})", w.name, w.shape.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    super::triggers::spawn_watch(state);
    let weak = Arc::downgrade(state);
    tokio::spawn(async move {
        let limit = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
        while let Some(event) = rx.recv().await {
            let Some(state) = weak.upgrade() else { return };
            let Ok(permit) = limit.clone().acquire_owned().await else {
                return;
            };
            let (config, client) = (config.clone(), client.clone());
            tokio::spawn(async move {
                one(&state, &config, &client, event).await;
                drop(permit);
            });
        }
    });
}

fn delivery(hook: &Webhook) -> DeliveryDto {
    DeliveryDto {
        webhook: hook.name.clone(),
        shape: hook.shape.as_str().into(),
        state: "pending".into(),
        attempts: 0,
        status: None,
        error: None,
        finished_ms: None,
    }
}

/// Records `event` and delivers it to each webhook that takes its kind.
async fn one<S: AuthorityStore>(
    state: &AppState<S>,
    config: &NotifyConfig,
    client: &reqwest::Client,
    event: Event,
) {
    let hooks: Vec<&Webhook> = config
        .webhooks
        .iter()
        .filter(|w| w.kinds.contains(&event.kind))
        .collect();
    if hooks.is_empty() {
        return;
    }
    let base = &state.settings.public_url;
    let mut doc = NotificationDto {
        id: 0,
        kind: event.kind.as_str().into(),
        severity: event.kind.severity().as_str().into(),
        title: event.title.clone(),
        text: event.text.clone(),
        link: event.object.url(base),
        at_ms: event.at_ms,
        dedup_key: event.dedup_key.clone(),
        deliveries: hooks.iter().map(|h| delivery(h)).collect(),
    };
    let json = |d: &NotificationDto| serde_json::to_string(d).expect("serialises");
    let id = match state
        .store
        .create_notification(event.dedup_key.clone(), json(&doc), now_ms())
        .await
    {
        Ok(Some(id)) => id,
        Ok(None) => {
            tracing::debug!(key = %event.dedup_key, "notification sent already");
            return;
        }
        Err(e) => {
            tracing::error!(key = %event.dedup_key, "notification not recorded, not sent: {e}");
            for h in &hooks {
                state
                    .metrics
                    .notifications_failed
                    .get_or_create(&WebhookLabel {
                        webhook: h.name.clone(),
                    })
                    .inc();
            }
            return;
        }
    };
    doc.id = id;
    let sends = hooks.iter().map(|h| async {
        let message = render(h.shape, id, &event, base);
        (deliver(client, h, &message).await, now_ms())
    });
    let outcomes: Vec<(Outcome, i64)> = futures_util::future::join_all(sends).await;
    for ((d, h), (o, at)) in doc.deliveries.iter_mut().zip(&hooks).zip(outcomes) {
        let label = WebhookLabel {
            webhook: h.name.clone(),
        };
        if o.delivered {
            state.metrics.notifications_sent.get_or_create(&label).inc();
            tracing::info!(id, webhook = %h.name, kind = event.kind.as_str(), attempts = o.attempts, "notification delivered");
        } else {
            state
                .metrics
                .notifications_failed
                .get_or_create(&label)
                .inc();
            tracing::warn!(id, webhook = %h.name, kind = event.kind.as_str(), attempts = o.attempts,
                "notification not delivered: {}", o.error.as_deref().unwrap_or("?"));
        }
        d.state = if o.delivered { "delivered" } else { "failed" }.into();
        d.attempts = o.attempts;
        d.status = o.status;
        d.error = o.error;
        d.finished_ms = Some(at);
    }
    if let Err(e) = state.store.put_notification(id, json(&doc), now_ms()).await {
        tracing::error!(id, "storing notification {id}'s deliveries: {e}");
    }
}
