//! What several authorities sharing one database need of it ([`Cluster`], a
//! supertrait of [`super::AuthorityStore`]): wake-ups that cross processes,
//! compare-and-swap writes of documents, leases for background work that must run
//! once, and the CA they all serve.
//!
//! - **Wake-ups** ([`Cluster::notify`], [`Cluster::listen`]): PostgreSQL's
//!   `NOTIFY`/`LISTEN` on the channel [`WAKE_CHANNEL`]. A payload is text the
//!   store never parses (at most [`MAX_PAYLOAD_BYTES`]); a listener hears every
//!   authority's, its own included. Notifications are a hint, never the truth: one
//!   lost while a listener reconnects is made up by [`Heard::Resync`]. An SQLite
//!   store has one authority: it sends nothing and [`Cluster::listen`] gives
//!   `None` (wake-ups stay in the process).
//! - **Versions** ([`Cluster::put_doc_if`]): rollouts, sessions and questions
//!   carry a version (1 when created, one more at every write); a write naming a
//!   version that is no longer the stored one fails with
//!   [`StoreError::StaleVersion`] and writes nothing.
//! - **Leases** ([`Cluster::take_lease`]): a row per lease (`name`, `holder`,
//!   expiry) whose times come from the database's clock only (PostgreSQL's
//!   `now()`, SQLite's `julianday('now')`), never the caller's. A lease is taken
//!   when free, expired, already held by the caller (a renewal), or when its
//!   expiry lies further ahead than the lease's own time (a row written under a
//!   clock far in the future is not honoured forever).
//! - **The CA** ([`Cluster::claim_ca`]): the first authority to start records
//!   its CA's pin; one with another CA is refused.

use crate::error::StoreError;
use std::future::Future;

/// The PostgreSQL channel wake-ups are sent on.
pub const WAKE_CHANNEL: &str = "flotilla_wake";

/// The longest payload [`Cluster::notify`] sends, in bytes (PostgreSQL's limit
/// is 8000): for a longer one it returns `Ok(false)` and sends nothing.
pub const MAX_PAYLOAD_BYTES: usize = 7900;

/// The key of the CA's pin in `authority_identity`.
pub(crate) const CA_PIN_KEY: &str = "ca_pin";

/// A document kind written with a compare-and-swap ([`Cluster::put_doc_if`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Doc {
    /// A rollout (`rollouts`).
    Rollout,
    /// An agent session (`sessions`).
    Session,
    /// A question of a session (`questions`).
    Question,
}

impl Doc {
    /// Its table.
    pub(crate) fn table(self) -> &'static str {
        match self {
            Doc::Rollout => "rollouts",
            Doc::Session => "sessions",
            Doc::Question => "questions",
        }
    }

    /// Its name in messages: `rollout`, `session`, `question`.
    pub fn name(self) -> &'static str {
        match self {
            Doc::Rollout => "rollout",
            Doc::Session => "session",
            Doc::Question => "question",
        }
    }

    /// The error for an id with no row.
    pub(crate) fn unknown(self, id: u64) -> StoreError {
        match self {
            Doc::Rollout => StoreError::UnknownRollout(id),
            Doc::Session => StoreError::UnknownSession(id),
            Doc::Question => StoreError::UnknownQuestion(id),
        }
    }
}

/// What a listener ([`Cluster::listen`]) hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// A payload sent with [`Cluster::notify`] (by any authority, this one too),
    /// as sent.
    Payload(String),
    /// The listening connection was opened again after a loss: notifications
    /// sent meanwhile may have been missed, so whatever they would have woken
    /// should be read again from the store.
    Resync,
    /// The listening connection was lost (or could not be opened again), and
    /// why; another attempt follows every 500 ms, then [`Heard::Resync`].
    Lost(String),
}

/// Cheap figures that move whenever something that wakes a long poll changes
/// ([`Cluster::watermarks`]): read periodically, they make up for a missed
/// notification.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Watermarks {
    /// The selection log's highest index (0: none).
    pub selection: u64,
    /// The highest agent call id (0: none).
    pub last_call: u64,
    /// A figure that changes whenever a rollout or an unskip request is written
    /// or created (a sum of versions, counts and times: compare, never interpret).
    pub releases: i64,
    /// The time of the latest agents' update report (ms since the Unix epoch, as
    /// given; 0: none) plus how many hosts sent one.
    pub updates: i64,
    /// A figure that changes whenever a credential is revoked (the sum of the
    /// revocation times plus their count: compare, never interpret).
    pub revocations: i64,
}

/// See the [module docs](self). Every method is one statement or transaction;
/// errors are the backend's (`Postgres`/`PostgresConnect`, `Sqlite`/`Busy`).
pub trait Cluster: Send + Sync + 'static {
    /// Whether other authority processes may share this store (PostgreSQL:
    /// `true`; SQLite: `false`, one authority per file).
    fn shared(&self) -> bool;

    /// Sends `payload` to every listener on [`WAKE_CHANNEL`] (PostgreSQL:
    /// `pg_notify`), after whatever it announces has committed. Returns whether
    /// it was sent: SQLite sends nothing (`false`), nor does PostgreSQL a payload
    /// longer than [`MAX_PAYLOAD_BYTES`].
    fn notify(&self, payload: String) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Listens on [`WAKE_CHANNEL`] on a connection of its own, kept open (opened
    /// again after a loss: [`Heard::Lost`], then [`Heard::Resync`]) until the
    /// receiver is dropped. Returns once listening. `None` for SQLite.
    ///
    /// # Errors
    /// The first connection's failure.
    fn listen(
        &self,
    ) -> impl Future<Output = Result<Option<tokio::sync::mpsc::Receiver<Heard>>, StoreError>> + Send;

    /// Replaces document `id` of `kind` with `doc` and sets its `updated_ms`,
    /// when its stored version is `version`; the new version (`version + 1`).
    ///
    /// # Errors
    /// [`StoreError::StaleVersion`] when the stored version is another (nothing
    /// written); `UnknownRollout`/`UnknownSession`/`UnknownQuestion` when there is
    /// no such document.
    fn put_doc_if(
        &self,
        kind: Doc,
        id: u64,
        doc: String,
        updated_ms: i64,
        version: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Takes or renews lease `name` for `holder` for `ttl_ms` from the
    /// database's clock; whether `holder` holds it now. See the [module
    /// docs](self) for when a held lease is taken over.
    fn take_lease(
        &self,
        name: String,
        holder: String,
        ttl_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Gives lease `name` up if `holder` holds it (another may take it at once).
    fn drop_lease(
        &self,
        name: String,
        holder: String,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Records `ca_pin` (`sha256:<hex>`) as the CA every authority on this
    /// database serves, unless one is recorded already.
    ///
    /// # Errors
    /// [`StoreError::CaMismatch`] when another pin is recorded.
    fn claim_ca(&self, ca_pin: String) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The current [`Watermarks`], in one query.
    fn watermarks(&self) -> impl Future<Output = Result<Watermarks, StoreError>> + Send;
}

/// The decision on a CA pin: `stored` is what the database holds after the
/// claim.
pub(crate) fn check_ca(stored: String, ours: String) -> Result<(), StoreError> {
    if stored == ours {
        Ok(())
    } else {
        Err(StoreError::CaMismatch { stored, ours })
    }
}

/// The decision after a conditional write matched no row: `found` is the
/// document's stored version (`None`: no such document).
pub(crate) fn stale(kind: Doc, id: u64, expected: u64, found: Option<i64>) -> StoreError {
    match found {
        None => kind.unknown(id),
        Some(found) => StoreError::StaleVersion {
            kind: kind.name(),
            id,
            expected,
            found: found as u64,
        },
    }
}

impl Cluster for super::AnyAuthority {
    fn shared(&self) -> bool {
        match self {
            super::AnyAuthority::Sqlite(s) => s.shared(),
            super::AnyAuthority::Postgres(s) => s.shared(),
        }
    }

    async fn notify(&self, payload: String) -> Result<bool, StoreError> {
        match self {
            super::AnyAuthority::Sqlite(s) => s.notify(payload).await,
            super::AnyAuthority::Postgres(s) => s.notify(payload).await,
        }
    }

    async fn listen(&self) -> Result<Option<tokio::sync::mpsc::Receiver<Heard>>, StoreError> {
        match self {
            super::AnyAuthority::Sqlite(s) => s.listen().await,
            super::AnyAuthority::Postgres(s) => s.listen().await,
        }
    }

    async fn put_doc_if(
        &self,
        kind: Doc,
        id: u64,
        doc: String,
        updated_ms: i64,
        version: u64,
    ) -> Result<u64, StoreError> {
        match self {
            super::AnyAuthority::Sqlite(s) => {
                s.put_doc_if(kind, id, doc, updated_ms, version).await
            }
            super::AnyAuthority::Postgres(s) => {
                s.put_doc_if(kind, id, doc, updated_ms, version).await
            }
        }
    }

    async fn take_lease(
        &self,
        name: String,
        holder: String,
        ttl_ms: i64,
    ) -> Result<bool, StoreError> {
        match self {
            super::AnyAuthority::Sqlite(s) => s.take_lease(name, holder, ttl_ms).await,
            super::AnyAuthority::Postgres(s) => s.take_lease(name, holder, ttl_ms).await,
        }
    }

    async fn drop_lease(&self, name: String, holder: String) -> Result<(), StoreError> {
        match self {
            super::AnyAuthority::Sqlite(s) => s.drop_lease(name, holder).await,
            super::AnyAuthority::Postgres(s) => s.drop_lease(name, holder).await,
        }
    }

    async fn claim_ca(&self, ca_pin: String) -> Result<(), StoreError> {
        match self {
            super::AnyAuthority::Sqlite(s) => s.claim_ca(ca_pin).await,
            super::AnyAuthority::Postgres(s) => s.claim_ca(ca_pin).await,
        }
    }

    async fn watermarks(&self) -> Result<Watermarks, StoreError> {
        match self {
            super::AnyAuthority::Sqlite(s) => s.watermarks().await,
            super::AnyAuthority::Postgres(s) => s.watermarks().await,
        }
    }
}
