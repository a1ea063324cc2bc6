//! Waiting for readiness: a probe checked until it passes `success_threshold` times in
//! a row, paced by the kind of check ([`Backoff`] for checks that reach the
//! component, a fast silent poll otherwise), until a deadline, the component's exit or
//! a misconfigured outcome.

use super::outcome::{human, ProbeOutcome};
use super::{check, ProbeContext};
use flotilla_model::topology::{Check, Probe};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::time::{Duration, Instant};

/// The pace of readiness checks that reach the component itself (`http`, `request`,
/// `exec`, `log`): the delay after the n-th attempt is `steps[n]` (the last step
/// repeating), capped by the probe's `period`, and at least `floor` once `settle` has
/// passed since the pace (re)started. With the defaults (5, 10, 20, 50, 100 ms; 1 s;
/// 100 ms) that is about 14 checks in the first second and at most 10 per second
/// after it, whatever the period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    /// Delays after the first, second… attempt; the last one repeats.
    pub steps: Vec<Duration>,
    /// From this long after the pace (re)started, delays are at least `floor`.
    pub settle: Duration,
    /// The least delay after `settle`.
    pub floor: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            steps: [5, 10, 20, 50, 100]
                .into_iter()
                .map(Duration::from_millis)
                .collect(),
            settle: Duration::from_secs(1),
            floor: Duration::from_millis(100),
        }
    }
}

impl Backoff {
    /// The delay after attempt `n` (from 0), `since` the pace (re)started, for a
    /// probe whose period is `period`.
    pub fn delay(&self, n: usize, since: Duration, period: Duration) -> Duration {
        let step = self
            .steps
            .get(n)
            .or(self.steps.last())
            .copied()
            .unwrap_or(self.floor);
        let d = step.min(period);
        if since >= self.settle {
            d.max(self.floor)
        } else {
            d
        }
    }
}

/// How [`wait_ready_with`] waits.
pub struct WaitOptions<'a> {
    /// Give up at this instant.
    pub deadline: Instant,
    /// "Has it died?": `Some(description)` once the component's process has exited,
    /// e.g. `&|| started.child.exit_description()` (see
    /// [`crate::process::ChildWatch::exit_description`]). Checked before every
    /// attempt and every 10 ms while waiting, so a crash ends the wait within ~10 ms.
    pub exited: Option<ExitedFn<'a>>,
    /// The first delay between polls of a silent signal (default 5 ms): a `tcp` or
    /// `process` check, or whether the port of an `http`/`request` probe listens.
    pub first_poll: Duration,
    /// The delay between later polls of a silent signal (default 10 ms).
    pub poll: Duration,
    /// How long `tcp` and `process` checks are polled every `poll` (default 10 s);
    /// after that their delay doubles up to the probe's `period`. (The listening
    /// port of an `http`/`request` probe is polled every `poll` throughout.)
    pub fast_phase: Duration,
    /// The pace of checks that reach the component (`http`, `request`, `exec`, `log`).
    pub backoff: Backoff,
}

impl<'a> WaitOptions<'a> {
    /// Wait until `deadline`, no exit callback, the default pace (see the fields).
    pub fn until(deadline: Instant) -> Self {
        WaitOptions {
            deadline,
            exited: None,
            first_poll: Duration::from_millis(5),
            poll: Duration::from_millis(10),
            fast_phase: Duration::from_secs(10),
            backoff: Backoff::default(),
        }
    }

    /// The same, with an exit callback.
    pub fn exited(mut self, f: ExitedFn<'a>) -> Self {
        self.exited = Some(f);
        self
    }
}

impl fmt::Debug for WaitOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitOptions")
            .field("deadline", &self.deadline)
            .field("exited", &self.exited.is_some())
            .field("first_poll", &self.first_poll)
            .field("poll", &self.poll)
            .field("fast_phase", &self.fast_phase)
            .field("backoff", &self.backoff)
            .finish()
    }
}

/// What an exit callback answers when the wait was interrupted (Ctrl-C, a
/// cancelled run) rather than the process having exited.
pub const INTERRUPTED: &str = "interrupted (Ctrl-C)";

/// Why [`wait_ready`] gave up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "reason")]
pub enum WaitFailure {
    /// The deadline passed without `success_threshold` consecutive passes.
    Deadline,
    /// The component's process exited.
    Exited {
        /// As reported by the exit callback, e.g. "pid 4242 exit status 1".
        status: String,
    },
    /// The probe cannot pass as configured (see [`ProbeOutcome::misconfigured`]).
    Misconfigured,
}

impl fmt::Display for WaitFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitFailure::Deadline => f.write_str("deadline passed"),
            WaitFailure::Exited { status } if status == INTERRUPTED => f.write_str(status),
            WaitFailure::Exited { status } => write!(f, "process exited ({status})"),
            WaitFailure::Misconfigured => f.write_str("probe cannot pass as configured"),
        }
    }
}

/// A readiness wait that did not succeed.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[error("component `{component}` not ready: {reason} after {attempts} attempt(s) in {}{}", human(*waited), last.as_ref().map(|o| format!("; last: {}", o.evidence)).unwrap_or_default())]
pub struct WaitError {
    /// The component waited for.
    pub component: String,
    /// The last outcome seen, if any attempt ran.
    pub last: Option<ProbeOutcome>,
    /// Checks run.
    pub attempts: u32,
    /// From the call to giving up.
    #[serde(rename = "waited_ms", with = "crate::serde_ms")]
    pub waited: Duration,
    /// Why it gave up.
    pub reason: WaitFailure,
}

/// Sleeps until `until`, waking every 10 ms to ask `exited`; the death notice if any.
async fn nap(
    until: Instant,
    exited: Option<&(dyn Fn() -> Option<String> + Send + Sync)>,
) -> Option<String> {
    const SLICE: Duration = Duration::from_millis(10);
    loop {
        if let Some(dead) = exited.and_then(|f| f()) {
            return Some(dead);
        }
        let now = Instant::now();
        if now >= until {
            return None;
        }
        let step = match exited {
            Some(_) => SLICE.min(until - now),
            None => until - now,
        };
        tokio::time::sleep(step).await;
    }
}

/// The "has it died?" callback of a readiness wait: `Some(description)` once the
/// component's process has exited (e.g. `|| started.child.exit_description()`).
pub type ExitedFn<'a> = &'a (dyn Fn() -> Option<String> + Send + Sync);

/// Waits until `probe` passes `success_threshold` times in a row, or `deadline`.
///
/// [`wait_ready_with`] with [`WaitOptions::until`]`(deadline)` (the default pace)
/// and `exited`. See [`wait_ready_with`].
///
/// # Errors
/// As [`wait_ready_with`].
pub async fn wait_ready(
    probe: &Probe,
    ctx: &ProbeContext<'_>,
    deadline: Instant,
    exited: Option<ExitedFn<'_>>,
    on_attempt: impl FnMut(&ProbeOutcome),
) -> Result<ProbeOutcome, WaitError> {
    let mut opts = WaitOptions::until(deadline);
    opts.exited = exited;
    wait_ready_with(probe, ctx, &opts, on_attempt).await
}

/// How a readiness wait paces a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pace {
    /// `tcp`, `process`: the check itself is the cheap, silent signal; polled fast.
    Silent,
    /// `http`, `request`: a request the component answers (and may log), paced by
    /// [`Backoff`], plus a fast silent poll of whether its port listens.
    Endpoint,
    /// `exec`, `log`: paced by [`Backoff`] alone.
    Paced,
}

fn pace_of(check: &Check) -> Pace {
    match check {
        Check::Process | Check::Tcp { .. } => Pace::Silent,
        Check::Http { .. } | Check::Request { .. } => Pace::Endpoint,
        Check::Exec { .. } | Check::Log { .. } | Check::ContainerHealth => Pace::Paced,
    }
}

/// The addresses behind an `http`/`request` probe's URL, resolved once; `None` when
/// they cannot be known (the wait then paces the probe alone).
async fn listen_gate(check: &Check) -> Option<Vec<std::net::SocketAddr>> {
    let url = match check {
        Check::Http { url, .. } | Check::Request { url, .. } => url,
        _ => return None,
    };
    let url = reqwest::Url::parse(url).ok()?;
    let host = url.host_str()?.to_string();
    let port = url.port_or_known_default()?;
    let addrs: Vec<_> = tokio::net::lookup_host((host.trim_matches(['[', ']']), port))
        .await
        .ok()?
        .collect();
    (!addrs.is_empty()).then_some(addrs)
}

/// Whether something accepts connections at one of `addrs` (connected, then closed
/// at once: nothing is sent, so the component has no request to log).
async fn listening(addrs: &[std::net::SocketAddr], timeout: Duration) -> bool {
    for a in addrs {
        if let Ok(Ok(_)) = tokio::time::timeout(timeout, tokio::net::TcpStream::connect(a)).await {
            return true;
        }
    }
    false
}

/// Whether an `http`/`request` outcome says nothing listens (its connection was
/// refused), rather than that the component answered or is slow.
fn refused(o: &ProbeOutcome) -> bool {
    o.detail.get("status").is_none()
        && o.detail.get("error").and_then(Value::as_str) == Some("connection refused")
}

/// Waits until `probe` passes `success_threshold` times in a row.
///
/// Sleeps `initial_delay` (bounded by the deadline), checks at once, then paces the
/// retries by the kind of check, so that waiting never floods a component with
/// requests (a model server loading for minutes answers 503 to each one, and logs
/// it) yet a component that is ready when it starts listening is noticed within
/// milliseconds:
///
/// - `tcp`, `process` (silent, cheap): retried after `first_poll` (5 ms), then every
///   `poll` (10 ms) for `fast_phase` (10 s), then at doubling delays up to the
///   probe's `period`.
/// - `http`, `request`: retried on the [`Backoff`] pace (5, 10, 20, 50, 100 ms, then
///   every 100 ms: ≤ 10 requests per second after the first second). While the last
///   attempt's connection was refused, whether the URL's port listens is polled
///   every `poll` (a TCP connect, closed at once: no request), and the moment it
///   listens the probe runs and its pace starts over. So a component that answers
///   as soon as it listens is seen ≈ `poll`/2 + one request after it listens, and
///   one that answers 503 for 5 s after listening gets ≈ 55 requests.
/// - `exec`, `log`: the [`Backoff`] pace from the first attempt.
///
/// The probe's `period` caps every delay (where it is shorter than the pace's).
/// Each check's timeout is the probe's `timeout`, cut short by the deadline.
/// `on_attempt` sees every check's outcome (not the port polls), for progress
/// display. `failure_threshold` does not apply here: the deadline decides.
///
/// # Errors
/// [`WaitError`] with the last outcome and attempt count when the deadline passes
/// ([`WaitFailure::Deadline`]), the exit callback reports a death
/// ([`WaitFailure::Exited`], within ~10 ms of the exit), or an outcome is
/// misconfigured ([`WaitFailure::Misconfigured`], at once).
pub async fn wait_ready_with(
    probe: &Probe,
    ctx: &ProbeContext<'_>,
    opts: &WaitOptions<'_>,
    mut on_attempt: impl FnMut(&ProbeOutcome),
) -> Result<ProbeOutcome, WaitError> {
    let t0 = Instant::now();
    let mut attempts = 0u32;
    let mut last: Option<ProbeOutcome> = None;
    let mut passes = 0u32;
    let need = probe.success_threshold.max(1);
    let period = probe.period.0.max(Duration::from_millis(1));
    let fail = |reason, last: Option<ProbeOutcome>, attempts| WaitError {
        component: ctx.component.clone(),
        last,
        attempts,
        waited: t0.elapsed(),
        reason,
    };

    if !probe.initial_delay.0.is_zero() {
        let until = (t0 + probe.initial_delay.0).min(opts.deadline);
        if let Some(status) = nap(until, opts.exited).await {
            return Err(fail(WaitFailure::Exited { status }, last, attempts));
        }
    }
    let pace = pace_of(&probe.check);
    let gate = match pace {
        Pace::Endpoint => listen_gate(&probe.check).await,
        _ => None,
    };
    // Whether the component's port was seen listening since the last refused attempt
    // (then the port is not polled).
    let mut is_listening = false;
    // The pace: attempts since it (re)started, and when.
    let (mut n, mut paced_from) = (0usize, Instant::now());
    // The silent pace's delay once past the fast phase (doubles up to the period).
    let mut slow = opts.poll;
    let mut next_check = Instant::now();
    let mut next_poll = Instant::now();
    loop {
        if let Some(status) = opts.exited.and_then(|f| f()) {
            return Err(fail(WaitFailure::Exited { status }, last, attempts));
        }
        let now = Instant::now();
        if now >= opts.deadline {
            return Err(fail(WaitFailure::Deadline, last, attempts));
        }
        if now >= next_check {
            let timeout = probe.timeout.0.min(opts.deadline - now);
            let outcome = check(&probe.check, ctx, timeout).await;
            attempts += 1;
            on_attempt(&outcome);
            if outcome.passed {
                passes += 1;
                if passes >= need {
                    return Ok(outcome);
                }
            } else {
                passes = 0;
                if outcome.misconfigured {
                    return Err(fail(WaitFailure::Misconfigured, Some(outcome), attempts));
                }
            }
            if gate.is_some() {
                is_listening = !refused(&outcome);
            }
            last = Some(outcome);
            let delay = match pace {
                Pace::Silent if t0.elapsed() < opts.fast_phase => {
                    if attempts == 1 {
                        opts.first_poll
                    } else {
                        opts.poll
                    }
                }
                Pace::Silent => {
                    let d = slow;
                    slow = (slow * 2).min(period);
                    d
                }
                Pace::Endpoint | Pace::Paced => opts.backoff.delay(n, paced_from.elapsed(), period),
            }
            .min(period);
            n += 1;
            next_check = Instant::now() + delay;
            continue;
        }
        let mut wake = next_check.min(opts.deadline);
        if let (Some(addrs), false) = (&gate, is_listening) {
            if now >= next_poll {
                let limit = Duration::from_millis(100).min(opts.deadline - now);
                if listening(addrs, limit).await {
                    // It listens now: check at once, and start the pace over.
                    is_listening = true;
                    (n, paced_from) = (0, Instant::now());
                    next_check = Instant::now();
                    continue;
                }
                next_poll = Instant::now()
                    + if attempts <= 1 {
                        opts.first_poll
                    } else {
                        opts.poll
                    };
            }
            wake = wake.min(next_poll);
        }
        if let Some(status) = nap(wake, opts.exited).await {
            return Err(fail(WaitFailure::Exited { status }, last, attempts));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::observe;
    use super::super::outcome::Recorder;
    use super::*;
    use serde_json::json;

    #[test]
    fn futures_are_send() {
        fn assert_send<T: Send>(_: &T) {}
        let p = Probe {
            check: Check::Process,
            failure_threshold: 1,
            initial_delay: flotilla_model::values::HumanDuration(Duration::ZERO),
            period: flotilla_model::values::HumanDuration(Duration::from_secs(1)),
            success_threshold: 1,
            timeout: flotilla_model::values::HumanDuration(Duration::from_secs(1)),
        };
        let ctx = ProbeContext::new("x");
        let opts = WaitOptions::until(Instant::now());
        let mut n = 0;
        let fut = wait_ready_with(&p, &ctx, &opts, |_| n += 1);
        assert_send(&fut);
        let exited = || None;
        let fut = wait_ready(&p, &ctx, Instant::now(), Some(&exited), |_| {});
        assert_send(&fut);
        assert_send(&observe(&p, &ctx));
    }

    #[test]
    fn backoff_paces_requests() {
        let b = Backoff::default();
        let ms = Duration::from_millis;
        let s = Duration::from_secs(1);
        let early: Vec<u128> = (0..7).map(|n| b.delay(n, ms(0), s).as_millis()).collect();
        assert_eq!(early, [5, 10, 20, 50, 100, 100, 100]);
        // A shorter period caps the delays; after the first second, 100 ms at least.
        assert_eq!(b.delay(4, ms(500), ms(30)), ms(30));
        assert_eq!(b.delay(9, ms(1000), ms(30)), ms(100));
        assert_eq!(b.delay(0, ms(1000), s), ms(100));
        // At most 10 per second after the first second, ≈ 14 in it.
        let (mut t, mut n, mut first_second) = (ms(0), 0, 0);
        while t < s {
            first_second += 1;
            t += b.delay(n, t, s);
            n += 1;
        }
        assert!((12..=16).contains(&first_second), "{first_second}");
    }

    #[test]
    fn refused_means_not_listening() {
        let rec = Recorder::new();
        let o = rec.done(
            false,
            "x".into(),
            json!({"kind": "http", "error": "connection refused"}),
        );
        assert!(refused(&o));
        let o = rec.done(false, "x".into(), json!({"kind": "http", "status": 503}));
        assert!(!refused(&o));
        let o = rec.done(
            false,
            "x".into(),
            json!({"kind": "http", "error": "no answer within 1 s"}),
        );
        assert!(!refused(&o));
    }
}
