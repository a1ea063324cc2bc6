//! Supervision of `process` (and `ssh-tunnel`) components by their `restart` policy:
//! a component that died while its desired lifecycle is `running` is started again
//! after a backoff (`backoff`, doubled after each restart, capped at `max_backoff`),
//! each restart a journaled operation of the agent; never one stopped on purpose
//! (desired `stopped`); after `max_restarts` restarts in one streak the agent gives up
//! and reports the component `attention` with the crash loop as evidence. A streak
//! ends once the component has stayed up for `max_backoff`, or when someone (a new
//! desired state, a person) starts it again after the agent gave up.
//!
//! `on-failure` vs `always`: a process the agent started itself is its child, so its
//! exit status is known (`flotilla_exec::process::reaped_exit`); one that exited with
//! status 0 is restarted only under `always`. A process started by another invocation
//! (a `flotilla start` by hand, or the agent before it restarted) was re-parented to
//! init when that invocation exited, and its exit status is lost: its death counts as
//! a failure.
//!
//! `systemd` and `launchd` components are supervised by their native owner (the
//! policy is written into the unit or plist); the agent leaves them alone. External
//! components are never touched.
//!
//! [`Supervisor`] only decides (given what was observed and the time); the agent runs
//! the restarts it asks for.

use flotilla_model::inventory::{AdapterKind, Owner};
use flotilla_model::topology::Component;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

pub use flotilla_model::inventory::RestartPolicy;
pub use flotilla_model::topology::Restart;

/// `c`'s restart settings, when it declares some.
pub fn restart_of(c: &Component) -> Option<Restart> {
    c.restart
}

/// Whether the agent supervises `c` (rather than its native owner, or nobody).
pub fn supervised(c: &Component) -> bool {
    c.owner == Owner::Managed
        && matches!(
            c.adapter.unwrap_or_default(),
            AdapterKind::Process | AdapterKind::SshTunnel | AdapterKind::Container
        )
}

/// What was observed of a supervised component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Running.
    Up,
    /// Not running although its desired lifecycle is `running` (or the agent's own
    /// restart of it failed).
    Down {
        /// How its last process ended, when known (`Some(true)`: exit status 0).
        clean_exit: Option<bool>,
        /// What is known of that end: `pid 42 killed by SIGKILL`, `pid 42 is gone`.
        how: String,
    },
    /// Stopped on purpose (desired `stopped` or `disabled`, set by someone else than
    /// the agent): never restarted.
    StoppedOnPurpose,
    /// Starting, stopping, unknown or not yet operated: nothing to decide.
    Unsettled,
}

/// What supervision wants done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// It went down: restart `attempt` will come after `delay`.
    Scheduled {
        /// The component.
        component: String,
        /// Which restart of the streak (1-based).
        attempt: u32,
        /// The delay.
        delay: Duration,
        /// How it went down.
        how: String,
    },
    /// Restart it now.
    Restart {
        /// The component.
        component: String,
        /// Which restart of the streak (1-based).
        attempt: u32,
        /// `max_restarts`.
        max: u32,
        /// How it went down.
        how: String,
    },
    /// It exited cleanly and its policy is `on-failure`: left stopped.
    CleanExit {
        /// The component.
        component: String,
        /// How it ended.
        how: String,
    },
    /// Crash loop: no more restarts.
    GaveUp {
        /// The component.
        component: String,
        /// The evidence: `crash loop: 3 restarts in 2.1s; …`.
        evidence: String,
    },
}

#[derive(Debug, Default, Clone)]
struct Streak {
    restarts: u32,
    first_restart: Option<Instant>,
    backoff: Option<Duration>,
    /// The backoff before the last restart doubled it.
    backoff_before: Option<Duration>,
    next_at: Option<Instant>,
    up_since: Option<Instant>,
    gave_up: Option<String>,
    /// When it gave up.
    gave_up_at: Option<Instant>,
    /// `max_restarts` and how it went down, for the restart scheduled at `next_at`.
    pending: Option<(u32, String)>,
    clean_noted: bool,
    /// Why its restart is not carried out now (a dependency it would start is
    /// stopped).
    blocked: Option<String>,
    /// How it exited cleanly, left stopped by an `on-failure` policy.
    clean_exit: Option<String>,
}

/// Restart bookkeeping per component.
#[derive(Debug, Default)]
pub struct Supervisor {
    streaks: BTreeMap<String, Streak>,
}

fn short(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

impl Supervisor {
    /// A supervisor with no history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets `component`'s streak (a new desired state changed or removed it).
    pub fn forget(&mut self, component: &str) {
        self.streaks.remove(component);
    }

    /// The restart just decided for `component` could not run (another invocation
    /// held the lifecycle lock): it does not count, and the next one waits no longer.
    pub fn not_attempted(&mut self, component: &str) {
        if let Some(s) = self.streaks.get_mut(component) {
            s.restarts = s.restarts.saturating_sub(1);
            if s.restarts == 0 {
                s.first_restart = None;
            }
            s.backoff = s.backoff_before.take().or(s.backoff);
        }
    }

    /// When the agent gave up on `component`: the evidence.
    pub fn gave_up(&self, component: &str) -> Option<&str> {
        self.streaks
            .get(component)
            .and_then(|s| s.gave_up.as_deref())
    }

    /// Decides for `component` (restart settings `restart`) observed in `state` at
    /// `now`.
    pub fn decide(
        &mut self,
        component: &str,
        restart: &Restart,
        state: &State,
        now: Instant,
    ) -> Option<Decision> {
        let s = self.streaks.entry(component.to_string()).or_default();
        let max_backoff = Duration::from_millis(restart.max_backoff_ms);
        match state {
            State::Unsettled => None,
            State::StoppedOnPurpose => {
                self.streaks.remove(component);
                None
            }
            State::Up => {
                s.next_at = None;
                s.clean_noted = false;
                s.blocked = None;
                s.clean_exit = None;
                if s.gave_up.take().is_some() {
                    // Started again by someone: a new streak.
                    *s = Streak::default();
                }
                let since = *s.up_since.get_or_insert(now);
                if s.restarts > 0 && now.duration_since(since) >= max_backoff {
                    *s = Streak {
                        up_since: Some(since),
                        ..Streak::default()
                    };
                }
                None
            }
            State::Down { clean_exit, how } => {
                s.up_since = None;
                if s.gave_up.is_some() || restart.policy == RestartPolicy::Never {
                    return None;
                }
                if restart.policy == RestartPolicy::OnFailure && *clean_exit == Some(true) {
                    if std::mem::replace(&mut s.clean_noted, true) {
                        return None;
                    }
                    s.clean_exit = Some(how.clone());
                    return Some(Decision::CleanExit {
                        component: component.to_string(),
                        how: how.clone(),
                    });
                }
                match s.next_at {
                    None if s.restarts >= restart.max_restarts => {
                        let over = s
                            .first_restart
                            .map(|t| now.duration_since(t))
                            .unwrap_or_default();
                        let evidence = format!(
                            "crash loop: {} restart{} in {}; gave up (max_restarts = {}); last: {how}",
                            s.restarts,
                            if s.restarts == 1 { "" } else { "s" },
                            short(over),
                            restart.max_restarts
                        );
                        s.gave_up = Some(evidence.clone());
                        s.gave_up_at = Some(now);
                        Some(Decision::GaveUp {
                            component: component.to_string(),
                            evidence,
                        })
                    }
                    None => {
                        let delay = *s
                            .backoff
                            .get_or_insert(Duration::from_millis(restart.backoff_ms));
                        s.next_at = Some(now + delay);
                        s.pending = Some((restart.max_restarts, how.clone()));
                        Some(Decision::Scheduled {
                            component: component.to_string(),
                            attempt: s.restarts + 1,
                            delay,
                            how: how.clone(),
                        })
                    }
                    Some(at) if now >= at => {
                        s.next_at = None;
                        s.restarts += 1;
                        s.first_restart.get_or_insert(now);
                        let b = s
                            .backoff
                            .unwrap_or(Duration::from_millis(restart.backoff_ms));
                        s.backoff_before = Some(b);
                        s.backoff = Some((b * 2).min(max_backoff.max(b)));
                        Some(Decision::Restart {
                            component: component.to_string(),
                            attempt: s.restarts,
                            max: restart.max_restarts,
                            how: how.clone(),
                        })
                    }
                    Some(_) => None,
                }
            }
        }
    }

    /// Holds `component`'s restarts while `why` (a stopped dependency it would also
    /// start): an attempt just decided does not count, and none is scheduled until
    /// [`Supervisor::unblock`]. Whether it was not blocked before (say so once).
    pub fn block(&mut self, component: &str, why: String) -> bool {
        let attempted = self
            .streaks
            .get(component)
            .is_some_and(|s| s.next_at.is_none() && s.backoff_before.is_some());
        if attempted {
            self.not_attempted(component);
        }
        let s = self.streaks.entry(component.to_string()).or_default();
        s.next_at = None;
        s.backoff_before = None;
        s.blocked.replace(why).is_none()
    }

    /// Whether `component`'s restarts are held ([`Supervisor::block`]).
    pub fn is_blocked(&self, component: &str) -> bool {
        self.streaks
            .get(component)
            .is_some_and(|s| s.blocked.is_some())
    }

    /// Lets `component`'s restarts go on (what blocked them is gone).
    pub fn unblock(&mut self, component: &str) {
        if let Some(s) = self.streaks.get_mut(component) {
            s.blocked = None;
        }
    }

    /// When `component` exited cleanly and its `on-failure` policy left it stopped:
    /// how it ended.
    pub fn exited_cleanly(&self, component: &str) -> Option<&str> {
        self.streaks
            .get(component)
            .and_then(|s| s.clean_exit.as_deref())
    }

    /// Takes back what an earlier run of the agent recorded (its
    /// [`flotilla_exec::supervision`] file): crash loops given up on and clean exits
    /// stay so after the agent restarts, instead of being started again.
    pub fn restore(&mut self, file: &flotilla_exec::supervision::SupervisionFile, now: Instant) {
        use flotilla_exec::supervision::Supervision;
        for (name, seen) in &file.components {
            let s = self.streaks.entry(name.clone()).or_default();
            match seen {
                Supervision::GaveUp { evidence, .. } => {
                    s.gave_up = Some(evidence.clone());
                    s.gave_up_at = Some(now);
                }
                Supervision::Exited { how } => {
                    s.clean_exit = Some(how.clone());
                    s.clean_noted = true;
                }
                Supervision::BackingOff { .. } | Supervision::Blocked { .. } => {}
            }
        }
    }

    /// What supervision is doing about each component, as shared with `status`
    /// ([`flotilla_exec::supervision`]): a restart pending after its backoff, or a
    /// crash loop given up on. `now` and `now_ms` are the same moment on the
    /// monotonic and the wall clock.
    pub fn view(
        &self,
        now: Instant,
        now_ms: i64,
    ) -> BTreeMap<String, flotilla_exec::supervision::Supervision> {
        use flotilla_exec::supervision::Supervision;
        let wall = |at: Instant| -> i64 {
            if at >= now {
                now_ms + at.duration_since(now).as_millis() as i64
            } else {
                now_ms - now.duration_since(at).as_millis() as i64
            }
        };
        self.streaks
            .iter()
            .filter_map(|(name, s)| {
                let seen = if let Some(evidence) = &s.gave_up {
                    Supervision::GaveUp {
                        evidence: evidence.clone(),
                        at_ms: s.gave_up_at.map(wall).unwrap_or(now_ms),
                    }
                } else if let Some(why) = &s.blocked {
                    Supervision::Blocked { why: why.clone() }
                } else if let Some(how) = &s.clean_exit {
                    Supervision::Exited { how: how.clone() }
                } else {
                    let (at, (max, after)) = (s.next_at?, s.pending.clone()?);
                    Supervision::BackingOff {
                        attempt: s.restarts + 1,
                        max,
                        due_at_ms: wall(at),
                        after,
                    }
                };
                Some((name.clone(), seen))
            })
            .collect()
    }

    /// The earliest moment a scheduled restart is due, if any (the agent looks again
    /// then rather than at its next regular check).
    pub fn next_due(&self) -> Option<Instant> {
        self.streaks.values().filter_map(|s| s.next_at).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(p: RestartPolicy, max: u32) -> Restart {
        Restart {
            policy: p,
            backoff_ms: 100,
            max_backoff_ms: 350,
            max_restarts: max,
        }
    }

    fn down(clean: Option<bool>) -> State {
        State::Down {
            clean_exit: clean,
            how: "pid 1 killed by SIGKILL".into(),
        }
    }

    /// Drives a component that is always down: the delays between restarts, until
    /// it gives up.
    #[test]
    fn backoff_doubles_is_capped_and_gives_up_after_max_restarts() {
        let mut s = Supervisor::new();
        let r = policy(RestartPolicy::OnFailure, 4);
        let t0 = Instant::now();
        let mut now = t0;
        let mut delays = Vec::new();
        let mut restarts = 0;
        loop {
            match s.decide("a", &r, &down(None), now) {
                Some(Decision::Scheduled { delay, attempt, .. }) => {
                    assert_eq!(attempt, restarts + 1);
                    delays.push(delay.as_millis());
                    assert_eq!(s.decide("a", &r, &down(None), now), None, "not due yet");
                    assert_eq!(s.next_due(), Some(now + delay));
                    now += delay;
                }
                Some(Decision::Restart { attempt, max, .. }) => {
                    restarts += 1;
                    assert_eq!((attempt, max), (restarts, 4));
                }
                Some(Decision::GaveUp { evidence, .. }) => {
                    assert!(
                        evidence.starts_with("crash loop: 4 restarts in "),
                        "{evidence}"
                    );
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(delays, vec![100, 200, 350, 350]);
        assert!(s.gave_up("a").is_some());
        assert_eq!(
            s.decide("a", &r, &down(None), now + Duration::from_secs(60)),
            None
        );
        // Started again by someone: a fresh streak.
        assert_eq!(s.decide("a", &r, &State::Up, now), None);
        assert!(s.gave_up("a").is_none());
        assert!(matches!(
            s.decide("a", &r, &down(None), now),
            Some(Decision::Scheduled { attempt: 1, delay, .. }) if delay.as_millis() == 100
        ));
    }

    #[test]
    fn on_failure_leaves_a_clean_exit_and_always_restarts_it() {
        let mut s = Supervisor::new();
        let now = Instant::now();
        let r = policy(RestartPolicy::OnFailure, 3);
        assert!(matches!(
            s.decide("a", &r, &down(Some(true)), now),
            Some(Decision::CleanExit { .. })
        ));
        assert_eq!(s.decide("a", &r, &down(Some(true)), now), None, "said once");
        assert!(matches!(
            s.decide("b", &r, &down(Some(false)), now),
            Some(Decision::Scheduled { .. })
        ));
        let always = policy(RestartPolicy::Always, 3);
        assert!(matches!(
            s.decide("c", &always, &down(Some(true)), now),
            Some(Decision::Scheduled { .. })
        ));
        let never = policy(RestartPolicy::Never, 3);
        assert_eq!(s.decide("d", &never, &down(Some(false)), now), None);
    }

    #[test]
    fn stopped_on_purpose_is_never_restarted_and_ends_the_streak() {
        let mut s = Supervisor::new();
        let now = Instant::now();
        let r = policy(RestartPolicy::Always, 3);
        assert!(s.decide("a", &r, &down(None), now).is_some());
        assert_eq!(s.decide("a", &r, &State::StoppedOnPurpose, now), None);
        assert_eq!(s.next_due(), None);
        assert_eq!(
            s.decide(
                "a",
                &r,
                &State::StoppedOnPurpose,
                now + Duration::from_secs(9)
            ),
            None
        );
    }

    #[test]
    fn a_restart_that_could_not_run_does_not_count() {
        let mut s = Supervisor::new();
        let r = policy(RestartPolicy::OnFailure, 1);
        let mut now = Instant::now();
        s.decide("a", &r, &down(None), now);
        now += Duration::from_millis(100);
        assert!(matches!(
            s.decide("a", &r, &down(None), now),
            Some(Decision::Restart { attempt: 1, .. })
        ));
        s.not_attempted("a");
        assert!(matches!(
            s.decide("a", &r, &down(None), now),
            Some(Decision::Scheduled { attempt: 1, delay, .. }) if delay.as_millis() == 100
        ));
    }

    #[test]
    fn staying_up_for_max_backoff_ends_the_streak() {
        let mut s = Supervisor::new();
        let r = policy(RestartPolicy::OnFailure, 1);
        let mut now = Instant::now();
        s.decide("a", &r, &down(None), now);
        now += Duration::from_millis(100);
        assert!(matches!(
            s.decide("a", &r, &down(None), now),
            Some(Decision::Restart { .. })
        ));
        s.decide("a", &r, &State::Up, now);
        now += Duration::from_millis(400);
        s.decide("a", &r, &State::Up, now);
        // A new streak: restarted again rather than given up on.
        assert!(matches!(
            s.decide("a", &r, &down(None), now),
            Some(Decision::Scheduled { attempt: 1, .. })
        ));
    }
}
