//! Flotilla's desired-state authority, `flotilla serve`: the HTTPS API that agents
//! connect out to and the CLI's `--server` speaks.
//!
//! It holds immutable revisions (a validated topology named by the SHA-256 of its
//! canonical JSON) and which one is selected; serves each host its role-filtered view
//! of the selection as a Consul-style long poll; takes agents' measured reports;
//! issues one-time join tokens and per-agent credentials (stored hashed); and exposes
//! `/metrics`, `/healthz`, `/readyz` and its OpenAPI document. Storage is
//! `flotilla_store::authority` (SQLite or PostgreSQL) behind one trait. The wire types
//! and the client are `flotilla-api`'s (re-exported here as [`api`] and [`client`]).
//!
//! Code map (no file imports one that imports it back; the tidy test checks):
//! - [`server`]: the router, its middleware (credential first, request ids and
//!   metrics per route) and [`server::run`].
//! - [`state`]: the shared state ([`state::AppState`]) and who a caller is.
//! - [`failure`]: an error answer and the handlers' result type.
//! - [`longpoll`]: waits, the waiting gauge, parking a request on an index.
//! - [`service`]: `/healthz`, `/readyz`, `/metrics`, `/v1/ca.pem`.
//! - [`joining`]: join tokens and agent credentials.
//! - [`credentials`]: credentials and join tokens listed and revoked, metrics
//!   scrapers' credentials made.
//! - [`revisions`]: publishing and selecting revisions, history, diffs, each host's
//!   long-polled snapshot and its reports.
//! - [`status`]: the fleet's status route; [`fleet`]: that status from agents'
//!   reports, aged (pure).
//! - [`calls`]: operators' calls to agents and their replies.
//! - [`cluster`]: several authorities on one database: wake-ups announced to
//!   and heard from the others, leases for background work, document versions.
//! - [`controller`]: the authority as a controller: lifecycle operations on the
//!   selected revision, planned and shown first, applied exactly as planned through
//!   its own call queue to the agents.
//! - [`releases`]: signed releases relayed, the blob store, rollouts advanced
//!   (`flotilla_release::rollout`), agents' release assignments and update reports;
//!   their state in memory in [`releases::state`].
//! - [`sessions`]: agent sessions (a directory of its own: state, stored documents,
//!   wire types, records, the runtime's lifecycle, routes, questions, the gate's HTTP
//!   hook, pushes, the executor, Alertmanager's webhook, cleanup and retention).
//! - [`egress`]: a session runtime's only way out (the model API with its
//!   credential injected, a `CONNECT` allowlist, the authority's API).
//! - `sessions.toml`, the users the authority's pieces run as and the privilege
//!   separation (the root launcher that starts sandboxes as session uids, the
//!   executor, the unprivileged API) are the sessions runtime's, in
//!   `flotilla-sessions` (re-exported as [`sessions_config`], [`users`], [`privsep`]).
//! - [`tls`]: the private CA (`serve init`) and the server's TLS configuration.
//! - [`authority`]: the authority directory, `serve init`, backends,
//!   [`authority::serve`]; [`error`]: what can go wrong running one.
//! - [`backup`]: backups of the authority (its directory, and its PostgreSQL
//!   database), restore under its `serve.lock`, and the backup taken before a
//!   migration of its store ([`backup::migration_hooks`]).
//! - [`auth`]: secrets (tokens, credentials) and their hashes.
//! - [`diff`]: revision diffs as DTOs.
//! - [`metrics`]: the Prometheus figures.
//! - [`report_writer`]: agents' reports stored by group commit.
//! - [`notify`]: notifications to webhooks (`notifications.toml`): triggers, the
//!   bounded queue, delivery with retries, shapes (JSON, ntfy, Slack), the record.
//! - [`openapi`]: the generated OpenAPI document.
//! - [`ui`]: the web dashboard under `/ui` (sign-in, pages, live updates).

#![warn(missing_docs)]

pub mod auth;
pub mod authority;
pub mod backup;
pub mod blobs;
pub mod calls;
pub mod cluster;
pub mod controller;
pub mod credentials;
pub mod diff;
pub mod egress;
pub mod error;
pub mod failure;
pub mod fleet;
pub mod joining;
pub mod longpoll;
pub mod metrics;
pub mod notify;
pub mod openapi;
pub mod releases;
pub mod report_writer;
pub mod revisions;
pub mod server;
pub mod service;
pub mod sessions;
pub mod state;
pub mod status;
pub mod tls;
pub mod ui;

/// The wire types of `/v1` (`flotilla_api::wire`).
pub use flotilla_api::wire as api;
pub use flotilla_api::{client, Client, ClientError, UnskipError};
/// `sessions.toml` (`flotilla_sessions::config`).
pub use flotilla_sessions::config as sessions_config;
/// The authority's privilege separation (`flotilla_sessions::privsep`).
pub use flotilla_sessions::privsep;
/// The users the authority's pieces run as (`flotilla_sessions::users`).
pub use flotilla_sessions::users;
