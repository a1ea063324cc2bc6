//! The notifier's front: [`Notifier::send`] never waits. It drops an event seen
//! lately (the same deduplication key), else puts it on a bounded queue that the
//! delivery task ([`super::worker`]) empties; a full queue drops the event, counted
//! (`flotilla_notifications_dropped_total`) and logged.

use super::config::NotifyConfig;
use super::event::Event;
use crate::metrics::Metrics;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::mpsc;

/// Events waiting for the delivery task, at most.
pub const QUEUE_CAPACITY: usize = 1024;
/// Deduplication keys remembered in memory (the oldest forgotten first); the
/// store's unique key is the durable check behind them.
pub const REMEMBERED_KEYS: usize = 16_384;

/// Recently sent deduplication keys, bounded.
#[derive(Default)]
struct Seen {
    keys: HashSet<String>,
    order: VecDeque<String>,
}

impl Seen {
    /// Remembers `key`; false when it was known.
    fn insert(&mut self, key: &str) -> bool {
        if self.keys.contains(key) {
            return false;
        }
        if self.order.len() >= REMEMBERED_KEYS {
            if let Some(old) = self.order.pop_front() {
                self.keys.remove(&old);
            }
        }
        self.keys.insert(key.to_string());
        self.order.push_back(key.to_string());
        true
    }

    fn forget(&mut self, key: &str) {
        if self.keys.remove(key) {
            self.order.retain(|k| k != key);
        }
    }
}

/// The authority's notifier: its webhooks (none until
/// [`Notifier::configure`]), the queue and what was sent lately.
pub struct Notifier {
    config: OnceLock<Arc<NotifyConfig>>,
    tx: mpsc::Sender<Event>,
    rx: Mutex<Option<mpsc::Receiver<Event>>>,
    seen: Mutex<Seen>,
    /// Per host: its components down unexpectedly in its last report.
    pub(crate) down: Mutex<HashMap<String, BTreeSet<String>>>,
}

impl Default for Notifier {
    fn default() -> Self {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        Notifier {
            config: OnceLock::new(),
            tx,
            rx: Mutex::new(Some(rx)),
            seen: Mutex::new(Seen::default()),
            down: Mutex::new(HashMap::new()),
        }
    }
}

impl Notifier {
    /// Sets the webhooks (`notifications.toml`), once, before the service runs;
    /// false when they were set already.
    pub fn configure(&self, config: NotifyConfig) -> bool {
        self.config.set(Arc::new(config)).is_ok()
    }

    /// The webhooks, when any are configured.
    pub fn config(&self) -> Option<Arc<NotifyConfig>> {
        self.config
            .get()
            .filter(|c| !c.webhooks.is_empty())
            .cloned()
    }

    /// Whether anything is sent at all (some webhook configured).
    pub fn enabled(&self) -> bool {
        self.config().is_some()
    }

    /// The queue's receiving end, once (for the delivery task).
    pub(crate) fn take_receiver(&self) -> Option<mpsc::Receiver<Event>> {
        self.rx.lock().expect("not poisoned").take()
    }

    /// Queues `event` unless notifications are off or its key was sent lately.
    /// Never waits: a full queue drops it (counted, logged).
    pub fn send(&self, event: Event, metrics: &Metrics) {
        if !self.enabled() {
            return;
        }
        let key = event.dedup_key.clone();
        if !self.seen.lock().expect("not poisoned").insert(&key) {
            return;
        }
        if let Err(e) = self.tx.try_send(event) {
            // Not sent: a later trigger of the same event may try again.
            self.seen.lock().expect("not poisoned").forget(&key);
            metrics.notifications_dropped.inc();
            let why = match e {
                mpsc::error::TrySendError::Full(_) => "the queue is full",
                mpsc::error::TrySendError::Closed(_) => "the delivery task is gone",
            };
            tracing::warn!(key = %key, "notification dropped: {why}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_keys_are_bounded_and_forgettable() {
        let mut s = Seen::default();
        assert!(s.insert("a"));
        assert!(!s.insert("a"));
        s.forget("a");
        assert!(s.insert("a"));
        for i in 0..REMEMBERED_KEYS {
            s.insert(&i.to_string());
        }
        assert_eq!(s.keys.len(), REMEMBERED_KEYS);
        assert!(s.insert("a"), "the oldest key was forgotten");
    }
}
