//! Group commit of agents' reports: every `POST /v1/hosts/{host}/report` hands its
//! record to one writer task, which stores what has queued meanwhile in one
//! transaction (`AuthorityStore::put_reports`) and answers each request once it
//! is committed. Nothing waits on a timer: an idle authority commits a lone report
//! at once, and under load the reports that arrive while one commit runs make the
//! next one — 10,000 agents reporting together cost a few commits, not 10,000.

use crate::failure::Failure;
use flotilla_store::authority::HostReportRecord;
use prometheus_client::metrics::{counter::Counter, gauge::Gauge};
use std::future::Future;
use std::pin::Pin;
use tokio::sync::{mpsc, oneshot};

/// The most reports one transaction stores.
pub const MAX_BATCH: usize = 2048;

/// How many reports may wait for the writer before a report waits to be queued.
const QUEUE: usize = 4 * MAX_BATCH;

type Reply = oneshot::Sender<Result<(), String>>;

/// Stores one batch in one transaction: the error's text when it stored none.
pub(crate) type Commit = Box<
    dyn Fn(Vec<HostReportRecord>) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>>
        + Send
        + Sync,
>;

/// The writer's figures (`/metrics`).
#[derive(Clone, Default)]
pub(crate) struct WriterMetrics {
    /// `flotilla_report_commits`: transactions.
    pub commits: Counter,
    /// `flotilla_reports_committed`: reports stored.
    pub committed: Counter,
    /// `flotilla_reports_waiting`: reports handed over, not stored yet.
    pub waiting: Gauge,
}

/// The writer task's queue; its task ends when this is dropped.
pub(crate) struct ReportWriter {
    queue: mpsc::Sender<(HostReportRecord, Reply)>,
    waiting: Gauge,
}

impl ReportWriter {
    /// Starts the writer task, storing each batch with `commit`.
    pub(crate) fn spawn(commit: Commit, metrics: WriterMetrics) -> ReportWriter {
        let (tx, mut rx) = mpsc::channel::<(HostReportRecord, Reply)>(QUEUE);
        let waiting = metrics.waiting.clone();
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(MAX_BATCH);
            while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
                let (records, replies): (Vec<_>, Vec<_>) =
                    std::mem::take(&mut batch).into_iter().unzip();
                let n = records.len() as u64;
                let result = commit(records).await;
                metrics.commits.inc();
                if let Err(e) = &result {
                    tracing::error!("store: {n} agents' reports: {e}");
                } else {
                    metrics.committed.inc_by(n);
                }
                metrics.waiting.dec_by(n as i64);
                for reply in replies {
                    let _ = reply.send(result.clone());
                }
            }
        });
        ReportWriter { queue: tx, waiting }
    }

    /// Stores `record` with whatever else is queued; returns once it is committed.
    ///
    /// # Errors
    /// 503 `unavailable` when the store failed (the transaction stored none of its
    /// reports) or the writer is gone.
    pub(crate) async fn put(&self, record: HostReportRecord) -> Result<(), Failure> {
        let unavailable = |why: String| {
            Failure::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                format!("the authority's store failed: {why}"),
            )
        };
        let (reply, answer) = oneshot::channel();
        // Counted before it is queued: the writer counts it out once stored.
        self.waiting.inc();
        if self.queue.send((record, reply)).await.is_err() {
            self.waiting.dec();
            return Err(unavailable("the report writer stopped".into()));
        }
        answer
            .await
            .map_err(|_| unavailable("the report writer stopped".into()))?
            .map_err(unavailable)
    }
}
