//! The Kubernetes adapter: components on a cluster (a host with transport
//! `kubernetes`) as a workload and a Service each, applied with server-side apply and
//! observed through watches. The only crate that depends on kube-rs.
//!
//! - [`adapter`]: [`Kubernetes`], the `kubernetes` adapter (apply, roll out, scale,
//!   observe);
//! - [`apply`]: server-side apply of a component's objects, a dry run first;
//! - [`assess`]: what a workload and its pods say (lifecycle, identity, failing
//!   pods, stale images), by pure functions;
//! - [`watch`]: one watch per cluster, namespace and kind, shared by every component;
//! - [`manifest`]: the objects of a component, built by pure functions;
//! - [`logs`]: the pods' logs copied into the component's log file;
//! - [`session`]: [`session::PodRuntime`], the sessions' runtime on a cluster (one
//!   Pod per runtime);
//! - [`cluster`]: a kubeconfig context becomes a client; the adapter's runtime;
//! - [`error`]: [`KubeError`], naming the cluster, the object and the verb.

pub mod adapter;
pub mod apply;
pub mod assess;
pub mod cluster;
pub mod error;
pub mod logs;
pub mod manifest;
pub mod session;
pub mod watch;

pub use adapter::Kubernetes;
pub use error::KubeError;

/// Makes the `kubernetes` adapter part of every executor this process makes (the
/// binary calls it once at start).
pub fn install() {
    flotilla_exec::adapter::Adapters::install_kubernetes(
        std::sync::Arc::new(Kubernetes::default()),
    );
}
