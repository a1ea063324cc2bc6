//! What changed, for the dashboard's live updates: a [`Topic`] per kind of state
//! the pages show, a sequence number bumped at every change, and a bounded
//! broadcast of `(seq, topic)` that every open event stream subscribes to.
//!
//! Event ids on the wire are `<boot>-<seq>` ([`Hub::mark`]): `boot` names this
//! process's hub, so an id from before a restart is recognised as foreign and the
//! client gets a fresh full set of its fragments.

use std::sync::Mutex;
use tokio::sync::broadcast;

/// A kind of state the dashboard shows. Pages say which topics each of their live
/// fragments depends on; code that changes that state calls [`Hub::changed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Topic {
    /// Agents' reports (and so the fleet's status), host calls answered.
    Fleet,
    /// The selected revision (publish, select).
    Selection,
    /// Releases, rollouts, agents' update reports.
    Releases,
    /// Agent sessions and their events.
    Sessions,
    /// Questions asked of a human.
    Questions,
    /// Alerts received.
    Alerts,
}

impl Topic {
    /// Every topic.
    pub const ALL: [Topic; 6] = [
        Topic::Fleet,
        Topic::Selection,
        Topic::Releases,
        Topic::Sessions,
        Topic::Questions,
        Topic::Alerts,
    ];

    fn index(self) -> usize {
        match self {
            Topic::Fleet => 0,
            Topic::Selection => 1,
            Topic::Releases => 2,
            Topic::Sessions => 3,
            Topic::Questions => 4,
            Topic::Alerts => 5,
        }
    }
}

/// How many changes a slow stream may fall behind before it re-renders everything
/// (`broadcast`'s lag: nothing grows without bound).
const BACKLOG: usize = 256;

/// The change feed of one authority process.
pub struct Hub {
    boot: u64,
    /// The last sequence number and, per topic, the sequence of its last change.
    seqs: Mutex<(u64, [u64; Topic::ALL.len()])>,
    tx: broadcast::Sender<(u64, Topic)>,
}

impl Default for Hub {
    fn default() -> Self {
        let mut b = [0u8; 8];
        let _ = getrandom::fill(&mut b);
        Hub {
            boot: u64::from_le_bytes(b) >> 16,
            seqs: Mutex::new((0, [0; Topic::ALL.len()])),
            tx: broadcast::Sender::new(BACKLOG),
        }
    }
}

impl Hub {
    /// Records that `topic`'s state changed and wakes every stream. Cheap: call it
    /// after every committed change, never while holding a lock a renderer takes.
    pub fn changed(&self, topic: Topic) {
        let seq = {
            let mut s = self.seqs.lock().expect("not poisoned");
            s.0 += 1;
            s.1[topic.index()] = s.0;
            s.0
        };
        let _ = self.tx.send((seq, topic));
    }

    /// This moment, as an event id (`<boot>-<seq>`): a page embeds it in its event
    /// stream's URL so the stream sends what changed after the page was rendered.
    pub fn mark(&self) -> String {
        self.id(self.seqs.lock().expect("not poisoned").0)
    }

    /// The event id of sequence number `seq`.
    pub(crate) fn id(&self, seq: u64) -> String {
        format!("{:x}-{seq}", self.boot)
    }

    /// The last sequence number.
    pub(crate) fn seq(&self) -> u64 {
        self.seqs.lock().expect("not poisoned").0
    }

    /// The topics changed after event id `since`; every topic when `since` is
    /// absent, malformed or from another process.
    pub(crate) fn changed_since(&self, since: Option<&str>) -> Vec<Topic> {
        let seq = since
            .and_then(|s| s.split_once('-'))
            .filter(|(boot, _)| u64::from_str_radix(boot, 16).ok() == Some(self.boot))
            .and_then(|(_, n)| n.parse::<u64>().ok());
        let s = self.seqs.lock().expect("not poisoned");
        match seq {
            Some(n) if n <= s.0 => Topic::ALL
                .into_iter()
                .filter(|t| s.1[t.index()] > n)
                .collect(),
            _ => Topic::ALL.to_vec(),
        }
    }

    /// A receiver of every later change.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<(u64, Topic)> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_names_what_changed_after_it() {
        let hub = Hub::default();
        let start = hub.mark();
        assert!(hub.changed_since(Some(&start)).is_empty());
        hub.changed(Topic::Fleet);
        let mid = hub.mark();
        hub.changed(Topic::Questions);
        assert_eq!(
            hub.changed_since(Some(&start)),
            vec![Topic::Fleet, Topic::Questions]
        );
        assert_eq!(hub.changed_since(Some(&mid)), vec![Topic::Questions]);
        // Another process's id, a future one, garbage: everything.
        assert_eq!(hub.changed_since(Some("1-1")).len(), Topic::ALL.len());
        assert_eq!(
            hub.changed_since(Some(&hub.id(999))).len(),
            Topic::ALL.len()
        );
        assert_eq!(hub.changed_since(Some("x")).len(), Topic::ALL.len());
        assert_eq!(hub.changed_since(None).len(), Topic::ALL.len());
    }
}
