//! The authority as desired-state source and report sink, behind the small
//! [`AuthorityClient`] trait: `flotilla_api::client::Client` implements it once it
//! is wired to it (its `snapshot` and `report` have these signatures). Until then the
//! types here ([`SnapshotResponse`], [`ClientError`]) stand in for
//! `flotilla_api::wire::SnapshotResponse` and `flotilla_api::client::ClientError`;
//! wiring the real client means re-exporting the response, mapping the error and the
//! report (`crate::report::AgentReport` to the API's), in one `impl`.
//!
//! [`AuthoritySource`] long-polls `GET /v1/hosts/{host}/snapshot?index=N&wait=…`
//! (Consul's blocking queries): the request returns as soon as the authority's
//! selection index passes `N`, else after `wait` (jittered by up to 1/16, so a fleet's
//! polls spread out). When the authority cannot be reached it says so and tries again
//! with exponential backoff (1 s doubling to 1 min, jittered); the agent keeps its
//! components as they are meanwhile, and the revision the authority gives back when it
//! returns is compared with the one applied, so nothing restarts that did not change.

use crate::report::{AgentReport, ReportError, Reporter};
use crate::source::{Desired, Next, Source, SourceError};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The answer to a snapshot long-poll (the authority's wire type).
pub use flotilla_api::wire::SnapshotResponse;

/// Why the authority could not be asked: `flotilla_api::ClientError`'s message and
/// causes, one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ClientError(pub String);

/// The calls the agent makes to its authority.
pub trait AuthorityClient: Send + Sync + 'static {
    /// `GET /v1/hosts/{host}/snapshot?index={index}&wait={wait}`.
    ///
    /// # Errors
    /// [`ClientError`]: unreachable, refused, unreadable answer.
    fn snapshot(
        &self,
        host: &str,
        index: u64,
        wait: Duration,
    ) -> impl Future<Output = Result<SnapshotResponse, ClientError>> + Send;

    /// `POST /v1/hosts/{host}/report`.
    ///
    /// # Errors
    /// [`ClientError`].
    fn report(
        &self,
        host: &str,
        report: &AgentReport,
    ) -> impl Future<Output = Result<(), ClientError>> + Send;
}

/// The report as the authority's API carries it.
pub fn to_api(r: &AgentReport) -> flotilla_api::wire::AgentReport {
    flotilla_api::wire::AgentReport {
        revision: r.revision.clone(),
        agent_version: r.agent_version.clone(),
        platform: r.platform.clone(),
        status: r.status.clone(),
        drift: r
            .drift
            .iter()
            .map(|d| flotilla_api::wire::Drift {
                component: d.component.clone(),
                kind: d.kind.as_str().to_string(),
                evidence: d.evidence.clone(),
            })
            .collect(),
        events: r.events.clone(),
    }
}

/// `e` and its causes on one line, as the agent's [`ClientError`]. A refused
/// credential (401: revoked, or unknown to the authority) is said as such, with
/// the authority's reason and what the agent keeps doing.
pub(crate) fn one_line(e: &flotilla_api::ClientError) -> ClientError {
    if let flotilla_api::ClientError::Api {
        status: 401, error, ..
    } = e
    {
        return ClientError(format!(
            "the authority refused this agent's credential ({}): {}; the components keep running as last applied",
            error.code, error.message
        ));
    }
    ClientError(e.one_line())
}

impl AuthorityClient for flotilla_api::Client {
    async fn snapshot(
        &self,
        host: &str,
        index: u64,
        wait: Duration,
    ) -> Result<SnapshotResponse, ClientError> {
        flotilla_api::Client::snapshot(self, host, index, wait)
            .await
            .map_err(|e| one_line(&e))
    }

    async fn report(&self, host: &str, report: &AgentReport) -> Result<(), ClientError> {
        flotilla_api::Client::report(self, host, &to_api(report))
            .await
            .map_err(|e| one_line(&e))
    }
}

/// Serves the calls the `agent` transport queues for `host` on the authority (steps
/// and observations a controller sends with `--server`), until `shutdown`: each is
/// run by this host's executor exactly as `flotilla host serve` runs one that came
/// over SSH (`flotilla_exec::host_mode::serve`, against this host's journal), each in
/// its own task, and answered once. A call picked up after its deadline is refused
/// (`expired`), never run. While the authority cannot be reached, it retries with
/// backoff (1 s doubling to 1 min).
pub async fn serve_calls(
    client: Arc<flotilla_api::Client>,
    host: String,
    state_dir: Option<PathBuf>,
    log: crate::Log,
    shutdown: impl Future<Output = ()>,
) {
    let run = async {
        let mut after = 0u64;
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        let mut failing = false;
        loop {
            let calls = match client
                .pending_calls(&host, after, jittered(Duration::from_secs(30), 16))
                .await
            {
                Ok(c) => {
                    if failing {
                        log("calls: the authority answers again");
                    }
                    failing = false;
                    backoff.reset();
                    c.calls
                }
                Err(e) => {
                    if !failing {
                        log(&format!("calls: {}", one_line(&e).0));
                    }
                    failing = true;
                    tokio::time::sleep(jittered(backoff.next_delay(), 4)).await;
                    continue;
                }
            };
            for c in calls {
                after = after.max(c.id);
                let client = Arc::clone(&client);
                let state_dir = state_dir.clone();
                let log = Arc::clone(&log);
                tokio::spawn(async move {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_millis() as i64)
                        .unwrap_or(0);
                    let response = if now > c.deadline_ms {
                        flotilla_exec::remote::error(
                            "expired",
                            format!(
                                "call {} reached the agent {} ms after its deadline: not run",
                                c.id,
                                now - c.deadline_ms
                            ),
                        )
                    } else {
                        // The host side keeps its journal open across awaits (not
                        // `Send`): each call runs on a thread of its own, as
                        // `flotilla host serve` runs one per process.
                        let input = serde_json::to_vec(&c.request).unwrap_or_default();
                        let served = tokio::task::spawn_blocking(move || {
                            tokio::runtime::Builder::new_current_thread()
                                .enable_all()
                                .build()
                                .map(|rt| {
                                    rt.block_on(flotilla_exec::host_mode::serve(
                                        &input,
                                        state_dir.as_deref(),
                                        flotilla_exec::CancellationToken::new(),
                                    ))
                                })
                        })
                        .await;
                        match served {
                            Ok(Ok(r)) => r,
                            Ok(Err(e)) => flotilla_exec::remote::error(
                                "agent",
                                format!("no runtime for the call: {e}"),
                            ),
                            Err(e) => flotilla_exec::remote::error(
                                "agent",
                                format!("the call's task failed: {e}"),
                            ),
                        }
                    };
                    let value = serde_json::to_value(&response).unwrap_or_default();
                    // The answer is delivered even across an authority restart: tried
                    // again (1 s doubling to 30 s) until taken, refused, or a minute
                    // past the call's deadline, when nobody waits for it any more.
                    let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
                    loop {
                        match client.reply_call(c.id, value.clone()).await {
                            Ok(()) => break,
                            Err(e) if e.status().is_some() => {
                                log(&format!(
                                    "call {}: the answer was refused: {}",
                                    c.id,
                                    one_line(&e).0
                                ));
                                break;
                            }
                            Err(e) => {
                                let now = std::time::SystemTime::now()
                                    .duration_since(std::time::UNIX_EPOCH)
                                    .map(|d| d.as_millis() as i64)
                                    .unwrap_or(0);
                                if now > c.deadline_ms + 60_000 {
                                    log(&format!(
                                        "call {}: the answer could not be delivered: {}",
                                        c.id,
                                        one_line(&e).0
                                    ));
                                    break;
                                }
                                tokio::time::sleep(jittered(backoff.next_delay(), 4)).await;
                            }
                        }
                    }
                });
            }
        }
    };
    tokio::select! {
        _ = run => {}
        _ = shutdown => {}
    }
}

/// A random number from the operating system (`getrandom`), to jitter poll intervals;
/// 0 in the unlikely case it has none to give (no jitter then).
fn random() -> u64 {
    getrandom::u64().unwrap_or(0)
}

/// `d` plus a random part of up to `d / fraction`.
pub fn jittered(d: Duration, fraction: u32) -> Duration {
    let span = (d / fraction.max(1)).as_millis() as u64;
    if span == 0 {
        return d;
    }
    d + Duration::from_millis(random() % (span + 1))
}

/// Exponential backoff: `start`, doubled after each failure, capped at `max`.
#[derive(Debug, Clone)]
pub struct Backoff {
    start: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    /// Starting at `start`, at most `max`.
    pub fn new(start: Duration, max: Duration) -> Self {
        Backoff {
            start,
            max,
            current: start,
        }
    }

    /// The delay to wait now; the next one is twice as long (capped).
    pub fn next_delay(&mut self) -> Duration {
        let d = self.current;
        self.current = (self.current * 2).min(self.max);
        d
    }

    /// Back to the start, after a success.
    pub fn reset(&mut self) {
        self.current = self.start;
    }
}

/// The authority as desired-state source.
pub struct AuthoritySource<C> {
    client: Arc<C>,
    host: String,
    wait: Duration,
    index: u64,
    last_revision: Option<String>,
    failed: bool,
    backoff: Backoff,
    base_dir: PathBuf,
}

impl<C: AuthorityClient> AuthoritySource<C> {
    /// Polls `client` for `host`'s snapshot, each poll waiting at most `wait` (plus
    /// jitter); components' relative paths start at `base_dir` (the home directory).
    pub fn new(client: Arc<C>, host: impl Into<String>, wait: Duration, base_dir: PathBuf) -> Self {
        AuthoritySource {
            client,
            host: host.into(),
            wait,
            index: 0,
            last_revision: None,
            failed: false,
            backoff: Backoff::new(Duration::from_secs(1), Duration::from_secs(60)),
            base_dir,
        }
    }
}

impl<C: AuthorityClient> Source for AuthoritySource<C> {
    async fn next(&mut self) -> Result<Next, SourceError> {
        if self.failed {
            tokio::time::sleep(jittered(self.backoff.next_delay(), 4)).await;
        }
        let span = tracing::info_span!(
            "poll",
            what = "snapshot",
            host = self.host.as_str(),
            index = self.index
        );
        let answer = tracing::Instrument::instrument(
            self.client
                .snapshot(&self.host, self.index, jittered(self.wait, 16)),
            span.clone(),
        )
        .await;
        let r = match answer {
            Ok(r) => r,
            Err(e) => {
                self.failed = true;
                span.in_scope(|| tracing::debug!(error = %e.0, "poll failed"));
                return Err(SourceError::Authority(e.0));
            }
        };
        span.in_scope(|| {
            tracing::debug!(
                index = r.index,
                revision = r.revision.as_deref().unwrap_or("-"),
                "poll answered"
            )
        });
        self.failed = false;
        self.backoff.reset();
        self.index = r.index;
        let (Some(revision), Some(snapshot)) = (r.revision, r.snapshot) else {
            return Ok(Next::Unchanged);
        };
        if snapshot.host != self.host {
            self.failed = true;
            return Err(SourceError::Authority(format!(
                "sent the snapshot of host `{}` to host `{}`",
                snapshot.host, self.host
            )));
        }
        if self.last_revision.as_deref() == Some(revision.as_str()) {
            return Ok(Next::Unchanged);
        }
        self.last_revision = Some(revision.clone());
        Ok(Next::Changed(Desired {
            revision,
            index: Some(r.index),
            snapshot,
            base_dir: self.base_dir.clone(),
        }))
    }

    fn describe(&self) -> String {
        format!("authority (host {})", self.host)
    }
}

/// Reports to the authority, and into the local status file too (so `status.json`
/// shows the last report even while the authority cannot be reached).
pub struct AuthorityReporter<C> {
    client: Arc<C>,
    host: String,
    local: crate::report::LocalReporter,
}

impl<C: AuthorityClient> AuthorityReporter<C> {
    /// Reports for `host` through `client`, and through `local`.
    pub fn new(
        client: Arc<C>,
        host: impl Into<String>,
        local: crate::report::LocalReporter,
    ) -> Self {
        AuthorityReporter {
            client,
            host: host.into(),
            local,
        }
    }
}

impl<C: AuthorityClient> Reporter for AuthorityReporter<C> {
    async fn report(&mut self, report: &AgentReport) -> Result<(), ReportError> {
        self.local.report(report).await?;
        self.client
            .report(&self.host, report)
            .await
            .map_err(|e| ReportError::Authority(e.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_model::topology::Snapshot;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    /// An authority answering from a script of responses.
    struct Scripted {
        answers: Mutex<Vec<Result<SnapshotResponse, ClientError>>>,
        asked: Mutex<Vec<u64>>,
    }

    impl AuthorityClient for Scripted {
        async fn snapshot(
            &self,
            _host: &str,
            index: u64,
            _wait: Duration,
        ) -> Result<SnapshotResponse, ClientError> {
            self.asked.lock().unwrap().push(index);
            self.answers.lock().unwrap().remove(0)
        }
        async fn report(&self, _host: &str, _r: &AgentReport) -> Result<(), ClientError> {
            Ok(())
        }
    }

    fn answer(index: u64, rev: &str) -> Result<SnapshotResponse, ClientError> {
        Ok(SnapshotResponse {
            index,
            revision: Some(rev.into()),
            role: Some("component".into()),
            snapshot: Some(Snapshot {
                components: Vec::new(),
                host: "h".into(),
                hosts: BTreeMap::new(),
                project: None,
                topology_digest: rev.into(),
            }),
            topology: None,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn long_polls_from_the_last_index_and_yields_only_new_revisions() {
        let client = Arc::new(Scripted {
            answers: Mutex::new(vec![
                Ok(SnapshotResponse {
                    index: 0,
                    revision: None,
                    role: None,
                    snapshot: None,
                    topology: None,
                }),
                answer(1, "sha256:a"),
                answer(1, "sha256:a"),
                Err(ClientError("connection refused".into())),
                answer(2, "sha256:a"),
                answer(3, "sha256:b"),
            ]),
            asked: Mutex::new(Vec::new()),
        });
        let mut s = AuthoritySource::new(client.clone(), "h", Duration::from_secs(30), "/".into());
        assert_eq!(s.next().await.unwrap(), Next::Unchanged);
        assert!(
            matches!(s.next().await.unwrap(), Next::Changed(d) if d.revision == "sha256:a" && d.index == Some(1))
        );
        assert_eq!(s.next().await.unwrap(), Next::Unchanged);
        assert!(matches!(s.next().await, Err(SourceError::Authority(m)) if m.contains("refused")));
        // Back: the same revision again restarts nothing.
        assert_eq!(s.next().await.unwrap(), Next::Unchanged);
        assert!(matches!(s.next().await.unwrap(), Next::Changed(d) if d.revision == "sha256:b"));
        assert_eq!(*client.asked.lock().unwrap(), vec![0, 0, 1, 1, 1, 2]);
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
        let d: Vec<u128> = (0..4).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(d, vec![100, 200, 350, 350]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(100));
    }

    #[test]
    fn jitter_stays_within_its_fraction() {
        for _ in 0..100 {
            let j = jittered(Duration::from_secs(16), 16);
            assert!(
                j >= Duration::from_secs(16) && j <= Duration::from_secs(17),
                "{j:?}"
            );
        }
    }
}
