//! `GET /metrics`: the authority's figures in the Prometheus text exposition format
//! (version 0.0.4), through `prometheus-client`.
//!
//! - `flotilla_agents_connected`: agents whose last report is within the deadline.
//! - `flotilla_agent_revision{host,revision}`: 1 for the revision each agent says it runs.
//! - `flotilla_longpoll_waiters`: snapshot requests waiting now.
//! - `flotilla_selection_index`: the selection's index.
//! - `flotilla_http_requests_total{route,status}` and
//!   `flotilla_http_request_duration_seconds{route}` (histogram).
//! - `flotilla_notifications_sent_total{webhook}`,
//!   `flotilla_notifications_failed_total{webhook}` (given up after its attempts,
//!   or refused) and `flotilla_notifications_dropped_total` (the queue was full).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// Labels of a request metric.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// The matched route, e.g. `/v1/hosts/{host}/snapshot`.
    pub route: String,
    /// The HTTP status code.
    pub status: u16,
}

/// Labels of a route's latency.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Route {
    /// The matched route.
    pub route: String,
}

/// Labels of an agent's revision.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AgentRevision {
    /// The agent's host.
    pub host: String,
    /// The revision it reports.
    pub revision: String,
}

/// Labels of a notification metric.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabel {
    /// The webhook's name (`notifications.toml`).
    pub webhook: String,
}

/// Every metric the authority keeps.
pub struct Metrics {
    registry: Registry,
    /// Agents that reported within the deadline (set when scraped).
    pub agents_connected: Gauge,
    /// Revision per agent.
    pub agent_revision: Family<AgentRevision, Gauge>,
    /// Long-poll requests waiting.
    pub longpoll_waiters: Gauge,
    /// The selection's index.
    pub selection_index: Gauge<u64, AtomicU64>,
    /// Requests by route and status.
    pub requests: Family<RouteLabels, Counter>,
    /// Request latency by route.
    pub latency: Family<Route, Histogram>,
    /// Notifications delivered, by webhook.
    pub notifications_sent: Family<WebhookLabel, Counter>,
    /// Notifications given up, by webhook.
    pub notifications_failed: Family<WebhookLabel, Counter>,
    /// Notifications dropped because the queue was full.
    pub notifications_dropped: Counter,
    /// Dashboard event streams open now.
    pub ui_streams: Gauge,
    /// Dashboard event streams ended because their client left
    /// [`crate::ui::events::CLIENT_BUFFER`] events unread.
    pub ui_streams_dropped: Counter,
    /// The group commit of agents' reports: transactions, reports stored,
    /// reports waiting.
    pub(crate) reports: crate::report_writer::WriterMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let agents_connected = Gauge::default();
        let agent_revision = Family::<AgentRevision, Gauge>::default();
        let longpoll_waiters = Gauge::default();
        let selection_index = Gauge::<u64, AtomicU64>::default();
        let requests = Family::<RouteLabels, Counter>::default();
        let latency = Family::<Route, Histogram>::new_with_constructor(|| {
            // 1 ms … ~65 s.
            Histogram::new(exponential_buckets(0.001, 2.0, 17))
        });
        registry.register(
            "flotilla_agents_connected",
            "Agents whose last report is within the deadline",
            agents_connected.clone(),
        );
        registry.register(
            "flotilla_agent_revision",
            "The revision each agent reports running (1)",
            agent_revision.clone(),
        );
        registry.register(
            "flotilla_longpoll_waiters",
            "Snapshot long-polls waiting now",
            longpoll_waiters.clone(),
        );
        registry.register(
            "flotilla_selection_index",
            "Index of the current selection",
            selection_index.clone(),
        );
        registry.register(
            "flotilla_http_requests",
            "HTTP requests by route and status",
            requests.clone(),
        );
        registry.register(
            "flotilla_http_request_duration_seconds",
            "HTTP request latency by route",
            latency.clone(),
        );
        let notifications_sent = Family::<WebhookLabel, Counter>::default();
        let notifications_failed = Family::<WebhookLabel, Counter>::default();
        let notifications_dropped = Counter::default();
        registry.register(
            "flotilla_notifications_sent",
            "Notifications delivered, by webhook",
            notifications_sent.clone(),
        );
        registry.register(
            "flotilla_notifications_failed",
            "Notifications given up after their attempts or refused, by webhook",
            notifications_failed.clone(),
        );
        registry.register(
            "flotilla_notifications_dropped",
            "Notifications dropped because the delivery queue was full",
            notifications_dropped.clone(),
        );
        let ui_streams = Gauge::default();
        let ui_streams_dropped = Counter::default();
        registry.register(
            "flotilla_ui_streams",
            "Dashboard event streams open now",
            ui_streams.clone(),
        );
        registry.register(
            "flotilla_ui_streams_dropped",
            "Dashboard event streams ended because their client did not read",
            ui_streams_dropped.clone(),
        );
        let reports = crate::report_writer::WriterMetrics::default();
        registry.register(
            "flotilla_report_commits",
            "Transactions that stored agents' reports (a group commit holds many)",
            reports.commits.clone(),
        );
        registry.register(
            "flotilla_reports_committed",
            "Agents' reports stored",
            reports.committed.clone(),
        );
        registry.register(
            "flotilla_reports_waiting",
            "Agents' reports waiting for their group commit",
            reports.waiting.clone(),
        );
        Metrics {
            reports,
            ui_streams,
            ui_streams_dropped,
            notifications_sent,
            notifications_failed,
            notifications_dropped,
            registry,
            agents_connected,
            agent_revision,
            longpoll_waiters,
            selection_index,
            requests,
            latency,
        }
    }
}

/// Counts one in `gauge` for as long as it lives (a waiting long poll, an open
/// dashboard stream): a client that goes away drops its handler or task, and the
/// count still comes down.
pub(crate) struct Held(Gauge);

impl Held {
    pub(crate) fn new(gauge: &Gauge) -> Held {
        gauge.inc();
        Held(gauge.clone())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String does not fail");
        out
    }
}
