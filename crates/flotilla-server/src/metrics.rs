//! `GET /metrics`: the authority's figures in the Prometheus text exposition format
//! (version 0.0.4), through `prometheus-client`.
//!
//! - `flotilla_agents_connected`: agents whose last report is within the deadline.
//! - `flotilla_agent_revision{host,revision}`: 1 for the revision each agent says it runs.
//! - `flotilla_longpoll_waiters`: snapshot requests waiting now.
//! - `flotilla_selection_index`: the selection's index.
//! - `flotilla_http_requests_total{route,status}` and
//!   `flotilla_http_request_duration_seconds{route}` (histogram).

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
        Metrics {
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

impl Metrics {
    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String does not fail");
        out
    }
}
