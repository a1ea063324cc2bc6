//! Flotilla's wire: what the authority (`flotilla serve`) and its clients say to each
//! other over HTTPS, and the client that says it. The authority, the agent and the CLI
//! (and any other face on the authority) depend on this crate; it depends on no
//! server, so an agent links no HTTP server, no certificate authority and no shell
//! parser.
//!
//! Code map:
//! - [`wire`]: the request and response bodies of every `/v1` route, with their
//!   OpenAPI schemas (utoipa); the model's domain types travel inside them unchanged.
//! - [`sessions`]: the same for sessions, questions, the executor, pushes, alerts
//!   and cleanup, with the documents stored per session and per question.
//! - [`client`]: [`Client`], reqwest over rustls with the authority's CA pinned,
//!   long-poll helpers, typed [`ClientError`]s.
//! - [`credentials`]: listing and revoking credentials and join tokens, and
//!   making a metrics scraper's credential.
//! - [`links`]: the web dashboard's stable URLs (`/ui/…`), shared by every face.
//! - [`notifications`]: the authority's record of the notifications it posted.
//! - [`tls`]: the client side of the authority's TLS (the CA pin, the one discovery
//!   request, this host's roots for servers outside the fleet).

#![warn(missing_docs)]

pub mod client;
pub mod credentials;
pub mod links;
pub mod notifications;
pub mod sessions;
pub mod tls;
pub mod ui_links;
pub mod wire;

pub use client::{Client, ClientError, RevisionPrefixError, UnskipError};
