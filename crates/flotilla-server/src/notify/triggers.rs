//! What makes the authority notify, each turned into an [`Event`] and handed to
//! the notifier without waiting: a question opened, a rollout halted or a host of
//! it rolled back, a component reported down unexpectedly, a host's agent silent
//! past the report deadline (and back). Each event's deduplication key names the
//! event itself, so the same one is sent once.

use super::event::{Event, Kind};
use crate::api::AgentReport;
use crate::state::AppState;
use flotilla_api::links::Link;
use flotilla_exec::this_process::now_ms;
use flotilla_model::status::{Condition, Signal};
use flotilla_release::rollout::{HostPhase, Rollout};
use flotilla_store::authority::AuthorityStore;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// The most characters of a tool input a question's notification quotes.
pub const INPUT_QUOTE_CHARS: usize = 300;

fn quote(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
}

/// Session `session`'s question `question` about `tool` (with `input`) opened.
pub(crate) fn question_opened<S: AuthorityStore>(
    state: &AppState<S>,
    session: u64,
    question: u64,
    tool: &str,
    input: &serde_json::Value,
    reason: &str,
) {
    let input = quote(&input.to_string(), INPUT_QUOTE_CHARS);
    state.notifier.send(
        Event {
            kind: Kind::QuestionOpened,
            title: format!("question {question} waits: {tool} in session {session}"),
            text: format!(
                "{reason}\n{tool} {input}\nanswer: flotilla question answer {question} allow|deny"
            ),
            object: Link::Question(question),
            at_ms: now_ms(),
            dedup_key: format!("question/{question}"),
        },
        &state.metrics,
    );
}

/// The events of a rollout's change from `before` to `after`: its halt, and each
/// host that rolled back (pure).
pub fn rollout_events(before: &Rollout, after: &Rollout, at_ms: i64) -> Vec<Event> {
    let id = after.id;
    let what = format!("{} {}", after.spec.name, after.spec.version);
    let mut out = Vec::new();
    for h in &after.hosts {
        let was = before.host(&h.host).map(|b| b.phase);
        if h.phase == HostPhase::RolledBack && was != Some(HostPhase::RolledBack) {
            let reason = h.reason.map(|r| r.to_string()).unwrap_or_default();
            out.push(Event {
                kind: Kind::RolloutRolledBack,
                title: format!("rollout {id} of {what}: {} rolled back ({reason})", h.host),
                text: format!("{}: {}", h.host, h.detail),
                object: Link::Rollout(id.to_string()),
                at_ms,
                dedup_key: format!("rollout/{id}/{}/rolled-back", h.host),
            });
        }
    }
    // An operator's abort is their own act, on the rollout's page and in its
    // events: not an incident to tell anyone about.
    let aborted = after.halted.as_deref() == Some(flotilla_release::Reason::Aborted.as_str());
    if let (None, Some(why), false) = (&before.halted, &after.halted, aborted) {
        let recent: Vec<&str> = after
            .events
            .iter()
            .rev()
            .take(5)
            .rev()
            .map(String::as_str)
            .collect();
        out.push(Event {
            kind: Kind::RolloutHalted,
            title: format!("rollout {id} of {what} halted: {why}"),
            text: recent.join("\n"),
            object: Link::Rollout(id.to_string()),
            at_ms,
            dedup_key: format!("rollout/{id}/halted"),
        });
    }
    out
}

/// Rollout `after` changed from `before`: its events sent.
pub(crate) fn rollout_changed<S: AuthorityStore>(
    state: &AppState<S>,
    before: &Rollout,
    after: &Rollout,
) {
    if !state.notifier.enabled() {
        return;
    }
    for e in rollout_events(before, after, now_ms()) {
        state.notifier.send(e, &state.metrics);
    }
}

/// The components of `report` down unexpectedly.
fn down_in(report: &AgentReport) -> BTreeSet<String> {
    report
        .status
        .components
        .iter()
        .filter(|c| c.condition == Condition::DownUnexpectedly)
        .map(|c| c.name.clone())
        .collect()
}

/// Host `host`'s agent reported `report` (received at `received_ms`): a
/// component down unexpectedly that was not in its previous report is sent.
pub(crate) fn report_received<S: AuthorityStore>(
    state: &AppState<S>,
    host: &str,
    report: &AgentReport,
    received_ms: i64,
) {
    if !state.notifier.enabled() {
        return;
    }
    let now = down_in(report);
    let before = state
        .notifier
        .down
        .lock()
        .expect("not poisoned")
        .insert(host.to_string(), now.clone())
        .unwrap_or_default();
    for name in now.difference(&before) {
        let Some(c) = report.status.components.iter().find(|c| &c.name == name) else {
            continue;
        };
        let saw: Vec<String> = c
            .evidence
            .iter()
            .filter(|e| matches!(e.signal, Signal::Condition | Signal::Lifecycle))
            .take(3)
            .map(|e| format!("{}: {}", e.source, e.saw))
            .collect();
        state.notifier.send(
            Event {
                kind: Kind::ComponentDown,
                title: format!("{name} on {host} is down unexpectedly"),
                text: if saw.is_empty() {
                    format!("{name} on {host} stopped without being asked to")
                } else {
                    saw.join("\n")
                },
                object: Link::Component(name.clone()),
                at_ms: received_ms,
                dedup_key: format!("component/{host}/{name}/down/{received_ms}"),
            },
            &state.metrics,
        );
    }
}

/// How often hosts' report times are checked against the deadline: a quarter of
/// it, between 100 ms and 1 s.
pub fn watch_period(deadline: Duration) -> Duration {
    (deadline / 4).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

/// The reachability events at `now_ms` for hosts last heard at `heard` (ms),
/// `unreachable` holding the hosts sent unreachable and the last report time of
/// that episode; updated (pure).
pub fn reachability(
    heard: &HashMap<String, i64>,
    unreachable: &mut HashMap<String, i64>,
    now_ms: i64,
    deadline_ms: i64,
) -> Vec<Event> {
    let mut out = Vec::new();
    let mut hosts: Vec<(&String, &i64)> = heard.iter().collect();
    hosts.sort();
    for (host, &last) in hosts {
        let stale = now_ms - last > deadline_ms;
        if stale && !unreachable.contains_key(host) {
            unreachable.insert(host.clone(), last);
            out.push(Event {
                kind: Kind::HostUnreachable,
                title: format!("{host} is unreachable"),
                text: format!(
                    "no report from the agent of {host} for {} s (deadline {} s)",
                    (now_ms - last) / 1000,
                    deadline_ms / 1000
                ),
                object: Link::Host(host.clone()),
                at_ms: now_ms,
                dedup_key: format!("host/{host}/unreachable/{last}"),
            });
        } else if !stale {
            if let Some(episode) = unreachable.remove(host) {
                out.push(Event {
                    kind: Kind::HostReachable,
                    title: format!("{host} reports again"),
                    text: format!(
                        "the agent of {host} reports again after {} s",
                        (last - episode) / 1000
                    ),
                    object: Link::Host(host.clone()),
                    at_ms: now_ms,
                    dedup_key: format!("host/{host}/reachable/{episode}"),
                });
            }
        }
    }
    out
}

/// Seeds what the triggers compare with from the store (each host's last
/// report), then checks every [`watch_period`] which hosts went silent past the
/// report deadline or came back. A host is not judged on times before this
/// process started: its agent may not have had the chance to report.
pub(crate) fn spawn_watch<S: AuthorityStore>(state: &Arc<AppState<S>>) {
    let weak = Arc::downgrade(state);
    let deadline = state.settings.report_deadline;
    tokio::spawn(async move {
        let started = now_ms();
        let mut heard: HashMap<String, i64> = HashMap::new();
        {
            let Some(state) = weak.upgrade() else { return };
            match state.store.reports().await {
                Ok(reports) => {
                    let mut down = state.notifier.down.lock().expect("not poisoned");
                    for r in reports {
                        if let Ok(rep) = serde_json::from_str::<AgentReport>(&r.report) {
                            down.entry(r.host.clone()).or_insert_with(|| down_in(&rep));
                        }
                        heard.insert(r.host, r.received_ms.max(started));
                    }
                }
                Err(e) => tracing::error!("notifications: reading the hosts' reports: {e}"),
            }
        }
        let mut unreachable: HashMap<String, i64> = HashMap::new();
        let mut tick = tokio::time::interval(watch_period(deadline));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(state) = weak.upgrade() else { return };
            for (host, (ms, _)) in state.last_reports.lock().expect("not poisoned").iter() {
                let at = (*ms).max(started);
                heard
                    .entry(host.clone())
                    .and_modify(|v| *v = (*v).max(at))
                    .or_insert(at);
            }
            let deadline_ms = deadline.as_millis() as i64;
            for e in reachability(&heard, &mut unreachable, now_ms(), deadline_ms) {
                state.notifier.send(e, &state.metrics);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_halted_rollout_is_told_but_an_operators_abort_is_not() {
        let spec = flotilla_release::rollout::RolloutSpec {
            name: "flotilla-agent".into(),
            version: "2.0.0".into(),
            serial: 9,
            selector: Default::default(),
            max_in_flight: 1,
            canary: 0,
            min_healthy_ms: 1_000,
            timeout_ms: 600_000,
        };
        let artifacts = [("linux-x86_64".to_string(), "1".repeat(64))].into();
        let before = Rollout::new(
            7,
            spec,
            artifacts,
            vec![("h0".to_string(), "linux-x86_64".to_string())],
            0,
        );
        let mut aborted = before.clone();
        aborted.abort(10).unwrap();
        assert!(aborted.halted.is_some());
        assert!(rollout_events(&before, &aborted, 10).is_empty());
        let mut failed = before.clone();
        failed.halted = Some(flotilla_release::Reason::InstallFailed.as_str().to_string());
        let sent = rollout_events(&before, &failed, 10);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].kind, Kind::RolloutHalted);
    }

    #[test]
    fn a_silent_host_is_sent_once_per_episode_and_its_return_too() {
        let mut heard = HashMap::from([("a".to_string(), 1_000), ("b".to_string(), 9_000)]);
        let mut unreachable = HashMap::new();
        let e = reachability(&heard, &mut unreachable, 10_000, 5_000);
        assert_eq!(e.len(), 1);
        assert_eq!(
            (e[0].kind, e[0].dedup_key.as_str()),
            (Kind::HostUnreachable, "host/a/unreachable/1000")
        );
        assert!(reachability(&heard, &mut unreachable, 11_000, 5_000).is_empty());
        heard.insert("a".into(), 12_000);
        let e = reachability(&heard, &mut unreachable, 12_500, 5_000);
        assert_eq!(
            (e[0].kind, e[0].dedup_key.as_str()),
            (Kind::HostReachable, "host/a/reachable/1000")
        );
        assert_eq!(e[0].object, Link::Host("a".into()));
        assert!(reachability(&heard, &mut unreachable, 13_000, 5_000).is_empty());
    }
}
