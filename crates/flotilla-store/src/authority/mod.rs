//! The fleet authority's store (`flotilla serve`): revisions (immutable desired
//! states), the selection log (which revision is current, with a compare-and-swap),
//! one-time join tokens, credentials, the last report of each host, the queue of
//! calls (steps, observations) for each host's agent and, for signed releases
//! references to blobs (release artifacts by SHA-256, their bytes in files:
//! [`crate::blobs`]), releases (signed manifests,
//! unique by name and version), rollouts (JSON documents with store-given ids),
//! each host's last update report and operators' unskip requests (JSON documents,
//! pending until the host's agent cleared its skip lists).
//!
//! One trait, [`AuthorityStore`], two implementations run against one test suite
//! (`tests/authority.rs`):
//! - [`SqliteAuthority`] ([`sqlite`]): the default, embedded: one SQLite file,
//!   [`AUTHORITY_DB_FILE`] in the authority's state directory (not the local
//!   mode's `state.db`: its own schema and `application_id`).
//! - [`PostgresAuthority`] ([`postgres`]): `--database-url postgres://…`, for an
//!   authority whose state must survive its host (tokio-postgres, no TLS: a
//!   loopback or trusted-network server).
//!
//! [`AnyAuthority`] holds either, for code that picks one at run time.
//!
//! Conventions, as in the rest of the crate:
//! - **Time**: the store reads no clock. Every time is an `i64` in milliseconds
//!   since the Unix epoch, given by the caller and returned as given.
//! - **Secrets**: join tokens and credentials are only ever stored as hashes, which
//!   the caller computes (e.g. `sha256:<hex>` of the token); the store never sees
//!   a token or credential itself. Revisions are secret-free by construction
//!   (DESIGN.md invariant 9: secrets are referenced by name).
//! - **Durability**: a method that returned `Ok` has committed durably (SQLite:
//!   WAL with `synchronous=FULL`; PostgreSQL: its default `synchronous_commit`):
//!   `kill -9` of the authority at any moment loses no acknowledged write, and a
//!   write that did not return is either wholly there or not at all.
//! - **Atomicity**: every mutating method is one transaction; concurrent
//!   [`AuthorityStore::publish`] / [`AuthorityStore::select`] calls with the same
//!   `expect` (from one process or several sharing the database) cannot both win.
//! - **Opaque documents**: rollouts, host updates, unskip requests, agent calls
//!   and reports are JSON text the store keeps as given and never parses; release
//!   manifests and blobs are bytes kept exactly (this crate does not depend on
//!   `flotilla-release`, where their meaning lives).
//! - **Async**: methods return `Send` futures that must run inside a Tokio runtime
//!   (SQLite work runs in `tokio::task::spawn_blocking`; PostgreSQL's connections
//!   are driven by tasks spawned on the runtime).
//!
//! Code map: this module (the trait, the record types, [`AnyAuthority`]),
//! [`sqlite`] ([`SqliteAuthority`] and its schema), [`postgres`]
//! ([`PostgresAuthority`], its schema and connection pool), [`testing`] (a fresh
//! PostgreSQL database per test, for this crate's tests and the server's).

pub mod blob_refs;
pub mod cluster;
mod cluster_postgres;
mod cluster_sqlite;
pub mod postgres;
pub mod sqlite;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

use crate::error::StoreError;
use std::future::Future;

pub use blob_refs::{BlobRef, BlobRefs};
pub use cluster::{Cluster, Doc, Heard, Watermarks};
pub use postgres::{PostgresAuthority, POSTGRES_MAX_CONNECTIONS, POSTGRES_SCHEMA_TABLE};
pub use sqlite::{SqliteAuthority, AUTHORITY_APPLICATION_ID, AUTHORITY_DB_FILE};

/// The authority's schema version this build creates and understands (the last
/// migration's number; the same numbering on both backends).
pub const AUTHORITY_SCHEMA_VERSION: i64 = 10;

/// A credential's "last used" time and address
/// ([`AuthorityStore::touch_credential`]) are rewritten at most once per this many
/// ms (60 s): an agent that calls every 15 s does not write at every call, and the
/// listing's "last used" is exact to within this.
pub const LAST_USED_GRANULARITY_MS: i64 = 60_000;

/// Before schema 9, blobs were stored in the database in chunks of this many
/// bytes (8 MiB; the last chunk may be shorter), one row each; such a blob is
/// read chunk by chunk ([`BlobRefs::legacy_blob_chunk`]) when the authority
/// moves it to the blob store's files.
pub const BLOB_CHUNK_BYTES: usize = 8 * 1024 * 1024;

/// The authority's storage: revisions, the selection log, join tokens,
/// credentials, host reports, the agents' call queue, blobs, releases, rollouts
/// and host updates. See the [module docs](self) for time, secrets,
/// durability and concurrency.
///
/// Every method is one transaction. Errors are [`StoreError`]s: the ones named
/// below, plus the backend's own (`Sqlite`/`Busy`/`NotADatabase` for SQLite,
/// `Postgres` for PostgreSQL, e.g. a lost connection).
pub trait AuthorityStore: BlobRefs + Cluster + Send + Sync + 'static {
    /// Stores the revision (if new) and selects it, in one transaction.
    ///
    /// - `expect`: compare-and-swap on the current selection's digest (`None`:
    ///   unconditional). When the current selection is another revision than
    ///   `expect` (or there is none), the outcome is
    ///   [`SelectOutcome::Conflict`] naming the current revision, and nothing is
    ///   written (not even the revision).
    /// - When `rev.digest` is already the current selection, the outcome is
    ///   [`SelectOutcome::Unchanged`] and nothing is written, whatever `expect`
    ///   says (the desired state already holds: publishing the same content twice
    ///   changes nothing).
    /// - Otherwise the revision is stored unless already present (a stored
    ///   revision keeps its first `created_ms` and `published_by`), and a new
    ///   selection is appended with the next index, `selected_ms =
    ///   rev.created_ms`, `selected_by = rev.published_by`:
    ///   [`SelectOutcome::Selected`].
    ///
    /// # Errors
    /// [`StoreError::RevisionContentMismatch`] when `rev.digest` is stored with
    /// other content (nothing is written).
    fn publish(
        &self,
        rev: NewRevision,
        expect: Option<String>,
    ) -> impl Future<Output = Result<SelectOutcome, StoreError>> + Send;

    /// Selects the stored revision `digest` (e.g. a rollback to an older one), with
    /// the same compare-and-swap as [`AuthorityStore::publish`]: `expect` stale →
    /// [`SelectOutcome::Conflict`] (nothing written); `digest` already current →
    /// [`SelectOutcome::Unchanged`]; else a new selection with the next index,
    /// `at_ms` and `by`: [`SelectOutcome::Selected`].
    ///
    /// # Errors
    /// [`StoreError::UnknownRevision`] when no revision has this digest (checked
    /// first: nothing is written).
    fn select(
        &self,
        digest: String,
        expect: Option<String>,
        at_ms: i64,
        by: String,
    ) -> impl Future<Output = Result<SelectOutcome, StoreError>> + Send;

    /// The revision named `digest`, with its content; `None` when unknown.
    fn revision(
        &self,
        digest: String,
    ) -> impl Future<Output = Result<Option<RevisionRecord>, StoreError>> + Send;

    /// Every stored revision without its content, most recently stored first.
    fn revisions(&self) -> impl Future<Output = Result<Vec<RevisionSummary>, StoreError>> + Send;

    /// The current selection (the one with the highest index); `None` before the
    /// first publish.
    fn selection(&self) -> impl Future<Output = Result<Option<Selection>, StoreError>> + Send;

    /// The selection log, newest (highest index) first.
    fn selections(&self) -> impl Future<Output = Result<Vec<Selection>, StoreError>> + Send;

    /// Stores a one-time join token (by its hash) bound to one host.
    ///
    /// # Errors
    /// [`StoreError::AlreadyExists`] when a token with this hash exists.
    fn create_join_token(
        &self,
        token: NewJoinToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Atomically: checks that the token (by hash) is known, not revoked, unused
    /// and unexpired at `now_ms` (it expires when `now_ms >= expires_ms`), marks it
    /// used and stores the agent credential (by hash) for its host:
    /// [`Redeem::Joined`]. Unless the token was made with `keep_credentials`, the
    /// agent credentials issued earlier for the same host are revoked at `now_ms`
    /// in the same transaction (a host that joins again leaves no older credential
    /// working). Otherwise nothing is written and the answer says why, checked in
    /// this order: [`Redeem::Unknown`], [`Redeem::Revoked`], [`Redeem::Used`],
    /// [`Redeem::Expired`]. Of two concurrent redeems of one token, exactly one
    /// joins.
    ///
    /// # Errors
    /// [`StoreError::AlreadyExists`] when a credential with this hash exists (the
    /// token stays unused).
    fn redeem_join_token(
        &self,
        token_hash: String,
        credential_hash: String,
        now_ms: i64,
    ) -> impl Future<Output = Result<Redeem, StoreError>> + Send;

    /// Stores a credential (by hash) for a principal, e.g. the operator's.
    ///
    /// # Errors
    /// [`StoreError::AlreadyExists`] when a credential with this hash exists.
    fn create_credential(
        &self,
        credential_hash: String,
        principal: Principal,
        created_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Who holds the credential with this hash; `None` when unknown or revoked
    /// ([`AuthorityStore::revoke_credential`]). A dashboard
    /// sign-in link ([`AuthorityStore::create_ui_link`]) is
    /// [`Principal::UiLink`] until revoked, then `None`.
    fn principal(
        &self,
        credential_hash: String,
    ) -> impl Future<Output = Result<Option<Principal>, StoreError>> + Send;

    /// The credential with this hash, revoked or not; `None` when unknown (a
    /// dashboard sign-in link is not one: see [`AuthorityStore::principal`]).
    fn credential(
        &self,
        credential_hash: String,
    ) -> impl Future<Output = Result<Option<CredentialRecord>, StoreError>> + Send;

    /// Every credential (revoked ones too, never a secret), oldest first (by
    /// `created_ms`, then hash).
    fn credentials(&self)
        -> impl Future<Output = Result<Vec<CredentialRecord>, StoreError>> + Send;

    /// Records that the credential was used at `at_ms` from `address` (the
    /// client's `ip:port`; `None`: not known), only when its stored last use is
    /// unset or at least [`LAST_USED_GRANULARITY_MS`] older and it is not revoked:
    /// `true`. Otherwise nothing is written: `false`.
    fn touch_credential(
        &self,
        credential_hash: String,
        at_ms: i64,
        address: Option<String>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Revokes the one credential whose hash starts with `sha256:` + `id_prefix`
    /// (lowercase hex, as [`credential_id`] shows it) at `now_ms`:
    /// [`ByPrefix::One`] with the credential as it is now (one revoked earlier
    /// keeps its first `revoked_ms`). No match: [`ByPrefix::Unknown`]; several:
    /// [`ByPrefix::Ambiguous`] with their hashes; then nothing is written. From
    /// then on [`AuthorityStore::principal`] answers `None` for it.
    fn revoke_credential(
        &self,
        id_prefix: String,
        now_ms: i64,
    ) -> impl Future<Output = Result<ByPrefix<CredentialRecord>, StoreError>> + Send;

    /// Revokes every agent credential of `host` not revoked yet, at `now_ms`; the
    /// credentials revoked (none: nothing written).
    fn revoke_host_credentials(
        &self,
        host: String,
        now_ms: i64,
    ) -> impl Future<Output = Result<Vec<CredentialRecord>, StoreError>> + Send;

    /// Every join token (never the token: its hash), newest first (by
    /// `created_ms`, then hash).
    fn join_tokens(&self) -> impl Future<Output = Result<Vec<JoinTokenRecord>, StoreError>> + Send;

    /// Revokes the one join token whose hash starts with `sha256:` + `id_prefix`
    /// at `now_ms`, as [`AuthorityStore::revoke_credential`] does credentials: a
    /// revoked token can no longer be redeemed ([`Redeem::Revoked`]).
    fn revoke_join_token(
        &self,
        id_prefix: String,
        now_ms: i64,
    ) -> impl Future<Output = Result<ByPrefix<JoinTokenRecord>, StoreError>> + Send;

    /// Stores a host's report, replacing that host's previous one.
    fn put_report(
        &self,
        report: HostReportRecord,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.put_reports(vec![report])
    }

    /// Stores several hosts' reports in one transaction (a group commit), each
    /// replacing its host's previous one; of several reports of one host, the last
    /// given is kept. All or none are stored.
    fn put_reports(
        &self,
        reports: Vec<HostReportRecord>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The last report of every host that reported, ordered by host name.
    fn reports(&self) -> impl Future<Output = Result<Vec<HostReportRecord>, StoreError>> + Send;

    /// Queues `call` (opaque JSON text, stored as given) for `host`'s agent and
    /// returns its id: 1, 2, 3… across all hosts, with no gaps, in commit order (a
    /// reader that sees call `n` sees every call before it, so an agent's `after`
    /// cursor never skips one).
    fn enqueue_call(
        &self,
        host: String,
        call: String,
        created_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// The calls queued for `host` with an id greater than `after` that have no
    /// reply yet, oldest (lowest id) first, at most `limit` of them.
    fn pending_calls(
        &self,
        host: String,
        after: u64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<QueuedCall>, StoreError>> + Send;

    /// Records `reply` (opaque JSON text, stored as given) to call `id`, only if
    /// the call is `host`'s and has no reply yet: `true`. Otherwise (unknown id,
    /// another host's call, already answered) nothing is written: `false`. Of two
    /// concurrent replies to one call, exactly one is recorded.
    fn put_reply(
        &self,
        id: u64,
        host: String,
        reply: String,
        replied_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Call `id` whole (with its reply when there is one); `None` when unknown.
    fn call(&self, id: u64) -> impl Future<Output = Result<Option<QueuedCall>, StoreError>> + Send;

    /// The highest call id (0 before the first call): where an agent that starts
    /// afresh begins its `after` cursor.
    fn last_call_id(&self) -> impl Future<Output = Result<u64, StoreError>> + Send;

    // Signed releases.

    /// Stores a release, unique by (`name`, `version`):
    /// - none stored under that name and version: stored,
    ///   [`ReleasePut::Created`];
    /// - one stored with byte-identical `manifest` and an identical `signature`
    ///   (e.g. a retried publish): [`ReleasePut::Exists`], nothing written (the
    ///   stored one keeps its `serial`, `published_by` and `created_ms`);
    /// - one stored with another `manifest` or `signature`:
    ///   [`ReleasePut::Conflict`], nothing written (a published version is never
    ///   replaced; publish a new version).
    ///
    /// The store does not parse the manifest nor check the signature: the caller
    /// (`flotilla-release`) does, and fills `name`, `version` and `serial` from it.
    ///
    /// # Errors
    /// [`StoreError::OutOfRange`] (field `serial`) when `serial` exceeds
    /// `i64::MAX`; nothing is written.
    fn put_release(
        &self,
        release: NewRelease,
    ) -> impl Future<Output = Result<ReleasePut, StoreError>> + Send;

    /// The release `name` `version` (exact, case-sensitive match); `None` when
    /// unknown.
    fn release(
        &self,
        name: String,
        version: String,
    ) -> impl Future<Output = Result<Option<ReleaseRecord>, StoreError>> + Send;

    /// Every stored release (with its manifest and signature), most recently
    /// stored first.
    fn releases(&self) -> impl Future<Output = Result<Vec<ReleaseRecord>, StoreError>> + Send;

    /// Stores a new rollout and returns its id: 1, 2, 3… as rollouts are
    /// created; ids only increase and are never reused, even across restarts
    /// (on PostgreSQL a creation that failed may leave a gap).
    /// `doc` is the rollout as JSON (`flotilla_release::rollout::Rollout`), stored
    /// as given: a document that holds its own id is written again with
    /// [`AuthorityStore::put_rollout`] once the id is known. `name` is a label
    /// stored as given (the release's name). `updated_ms` starts equal to
    /// `created_ms` (ms since the Unix epoch).
    fn create_rollout(
        &self,
        doc: String,
        name: String,
        created_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Replaces rollout `id`'s document with `doc` (JSON, stored as given) and
    /// sets its `updated_ms`. Unconditional: the last write wins (callers
    /// serialise a rollout's updates themselves).
    ///
    /// # Errors
    /// [`StoreError::UnknownRollout`] when no rollout has this id (nothing is
    /// written).
    fn put_rollout(
        &self,
        id: u64,
        doc: String,
        updated_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Rollout `id` with its document; `None` when unknown.
    fn rollout(
        &self,
        id: u64,
    ) -> impl Future<Output = Result<Option<RolloutRecord>, StoreError>> + Send;

    /// Every rollout with its document, newest (highest id) first.
    fn rollouts(&self) -> impl Future<Output = Result<Vec<RolloutRecord>, StoreError>> + Send;

    /// Stores what `host`'s agent last said about its release (`doc`: JSON,
    /// `flotilla_release::rollout::HostUpdate`, stored as given), replacing that
    /// host's previous one: the last write wins, whatever its `received_ms` (ms
    /// since the Unix epoch, when the authority received it).
    fn put_host_update(
        &self,
        host: String,
        doc: String,
        received_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The last update of every host that sent one (one per host), most recently
    /// received (highest `received_ms`) first, ties by host name.
    fn host_updates(
        &self,
    ) -> impl Future<Output = Result<Vec<HostUpdateRecord>, StoreError>> + Send;

    /// Stores a new unskip request for `host` (an operator's `flotilla release
    /// unskip`: `doc` is its JSON, `flotilla_server::api::UnskipDto`, stored as
    /// given), pending, and returns its id: 1, 2, 3… as requests are created, only
    /// increasing and never reused, even across restarts (on PostgreSQL a creation
    /// that failed may leave a gap). A document that holds its own id is written
    /// again with [`AuthorityStore::put_unskip`] once the id is known.
    /// `updated_ms` starts equal to `created_ms` (ms since the Unix epoch).
    fn create_unskip(
        &self,
        host: String,
        doc: String,
        created_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Replaces unskip request `id`'s document with `doc` (JSON, stored as given),
    /// sets whether it is still `pending` and its `updated_ms` (ms since the Unix
    /// epoch). Unconditional: the last write wins (callers serialise a request's
    /// updates themselves).
    ///
    /// # Errors
    /// [`StoreError::UnknownUnskip`] when no request has this id (nothing is
    /// written).
    fn put_unskip(
        &self,
        id: u64,
        doc: String,
        pending: bool,
        updated_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Unskip request `id` with its document; `None` when unknown.
    fn unskip(
        &self,
        id: u64,
    ) -> impl Future<Output = Result<Option<UnskipRecord>, StoreError>> + Send;

    /// Every pending unskip request, of every host, oldest (lowest id) first.
    fn pending_unskips(&self)
        -> impl Future<Output = Result<Vec<UnskipRecord>, StoreError>> + Send;

    /// Creates an agent session (`doc`: JSON, `flotilla_server::sessions::Session`,
    /// stored as given) and returns its id (1, 2, 3…, never reused).
    ///
    /// With `alert_key` (an alert's deduplication key), the key is claimed in
    /// the same transaction: when a session already holds it, nothing is written
    /// and that session's id is returned with `created: false`. Concurrent calls
    /// with one key create one session.
    fn create_session(
        &self,
        doc: String,
        alert_key: Option<String>,
        created_ms: i64,
    ) -> impl Future<Output = Result<SessionCreated, StoreError>> + Send;

    /// Replaces session `id`'s document.
    ///
    /// # Errors
    /// [`StoreError::UnknownSession`] when there is no such session.
    fn put_session(
        &self,
        id: u64,
        doc: String,
        updated_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Session `id`, if it exists.
    fn session(
        &self,
        id: u64,
    ) -> impl Future<Output = Result<Option<SessionRecord>, StoreError>> + Send;

    /// Every session, newest (highest id) first.
    fn sessions(&self) -> impl Future<Output = Result<Vec<SessionRecord>, StoreError>> + Send;

    /// Deletes session `id` and everything stored under it, in one transaction:
    /// its events, its questions, the alert key that opened it (a later alert
    /// with that key opens a new session) and its runtimes' credentials (kind
    /// `session`, name `id`: none of them is honoured any more). Ids are never
    /// reused, so nothing later can meet what was deleted. Blobs are shared by
    /// digest and are not touched.
    ///
    /// # Errors
    /// [`StoreError::UnknownSession`] when there is no such session (nothing is
    /// written).
    fn delete_session(
        &self,
        id: u64,
    ) -> impl Future<Output = Result<SessionDeleted, StoreError>> + Send;

    /// Appends an event (`doc`: JSON, stored as given) to session `session`'s log
    /// and returns its sequence number (increasing across all sessions).
    ///
    /// # Errors
    /// [`StoreError::UnknownSession`] when there is no such session.
    fn append_session_event(
        &self,
        session: u64,
        doc: String,
        at_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Session `session`'s events with a sequence number above `after` (0: all),
    /// oldest first.
    fn session_events(
        &self,
        session: u64,
        after: u64,
    ) -> impl Future<Output = Result<Vec<SessionEventRecord>, StoreError>> + Send;

    /// Creates a question of session `session` (`doc`: JSON, stored as given)
    /// and returns its id (1, 2, 3…, never reused).
    ///
    /// # Errors
    /// [`StoreError::UnknownSession`] when there is no such session.
    fn create_question(
        &self,
        session: u64,
        doc: String,
        created_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Replaces question `id`'s document.
    ///
    /// # Errors
    /// [`StoreError::UnknownQuestion`] when there is no such question.
    fn put_question(
        &self,
        id: u64,
        doc: String,
        updated_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Question `id`, if it exists.
    fn question(
        &self,
        id: u64,
    ) -> impl Future<Output = Result<Option<QuestionRecord>, StoreError>> + Send;

    /// Every question, newest (highest id) first.
    fn questions(&self) -> impl Future<Output = Result<Vec<QuestionRecord>, StoreError>> + Send;

    /// Records a notification under `dedup_key` (its document as JSON); its id, or
    /// `None` when one with this key exists already (nothing was written): the
    /// same event is recorded, and so sent, once, across restarts and processes.
    fn create_notification(
        &self,
        dedup_key: String,
        doc: String,
        created_ms: i64,
    ) -> impl Future<Output = Result<Option<u64>, StoreError>> + Send;

    /// Replaces notification `id`'s document (its deliveries' progress).
    /// [`StoreError::UnknownNotification`] when there is none.
    fn put_notification(
        &self,
        id: u64,
        doc: String,
        updated_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The newest `limit` notifications, newest (highest id) first.
    fn notifications(
        &self,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<NotificationRecord>, StoreError>> + Send;

    /// Checks that the database answers (for `/readyz`).
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    // Dashboard sign-in links (`flotilla serve ui-link`).

    /// Stores a dashboard sign-in link (by its credential's hash) and returns its
    /// id (1, 2, 3…, never reused).
    ///
    /// # Errors
    /// [`StoreError::AlreadyExists`] when a link with this hash exists.
    fn create_ui_link(
        &self,
        link: NewUiLink,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Atomically: checks that the link (by hash) is known, not revoked, unused
    /// and unexpired at `now_ms` (it expires when `now_ms >= expires_ms`) and marks
    /// it used: [`UiLinkRedeem::SignedIn`]. Otherwise nothing is written and the
    /// answer says why, checked in this order: `Unknown`, `Revoked`, `Used`,
    /// `Expired`. Of two concurrent redeems of one link, exactly one signs in.
    fn redeem_ui_link(
        &self,
        credential_hash: String,
        now_ms: i64,
    ) -> impl Future<Output = Result<UiLinkRedeem, StoreError>> + Send;

    /// Every dashboard sign-in link (never its credential), newest (highest id)
    /// first.
    fn ui_links(&self) -> impl Future<Output = Result<Vec<UiLinkRecord>, StoreError>> + Send;

    /// Revokes link `id` at `now_ms`: `true`; `false` when there is no such link or
    /// it was already revoked (nothing is written). A revoked link's principal is
    /// unknown from then on ([`AuthorityStore::principal`] answers `None`).
    fn revoke_ui_link(
        &self,
        id: u64,
        now_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// A revision to store ([`AuthorityStore::publish`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRevision {
    /// Its name: `sha256:<64 hex>` of `content` (computed by the caller,
    /// `Topology::digest`).
    pub digest: String,
    /// The canonical JSON of the topology (`Topology::revision_json`).
    pub content: String,
    /// When it was published, ms since the Unix epoch.
    pub created_ms: i64,
    /// Who published it (the operator's name).
    pub published_by: String,
}

/// A stored revision, with its content ([`AuthorityStore::revision`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevisionRecord {
    /// Its name (`sha256:<hex>` of `content`).
    pub digest: String,
    /// The canonical JSON of the topology.
    pub content: String,
    /// When it was first published, ms since the Unix epoch.
    pub created_ms: i64,
    /// Who first published it.
    pub published_by: String,
}

/// A stored revision without its content ([`AuthorityStore::revisions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevisionSummary {
    /// Its name (`sha256:<hex>`).
    pub digest: String,
    /// When it was first published, ms since the Unix epoch.
    pub created_ms: i64,
    /// Who first published it.
    pub published_by: String,
}

/// One entry of the selection log: from then on, `digest` was the current
/// revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// Its sequence number: 1, 2, 3… with no gaps (the agents' long-poll index).
    pub index: u64,
    /// The selected revision.
    pub digest: String,
    /// When, ms since the Unix epoch.
    pub selected_ms: i64,
    /// By whom (the operator's name).
    pub selected_by: String,
}

/// What [`AuthorityStore::publish`] or [`AuthorityStore::select`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectOutcome {
    /// A new selection was appended (this one).
    Selected(Selection),
    /// The revision was already the current selection (this one); nothing was
    /// written.
    Unchanged(Selection),
    /// `expect` did not name the current selection; nothing was written.
    Conflict {
        /// The current selection's digest (`None`: nothing selected yet).
        current: Option<String>,
    },
}

/// A one-time join token to store ([`AuthorityStore::create_join_token`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJoinToken {
    /// The token's hash (never the token).
    pub token_hash: String,
    /// The host it is bound to: joining with it yields an agent credential for
    /// this host only.
    pub host: String,
    /// When it was made, ms since the Unix epoch.
    pub created_ms: i64,
    /// When it expires, ms since the Unix epoch (refused from then on).
    pub expires_ms: i64,
    /// Whether the host's older agent credentials stay valid when it is redeemed
    /// (`false`: they are revoked, [`AuthorityStore::redeem_join_token`]).
    pub keep_credentials: bool,
}

/// A stored join token ([`AuthorityStore::join_tokens`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinTokenRecord {
    /// Its hash (`sha256:<hex>`; never the token). [`credential_id`] shortens it.
    pub token_hash: String,
    /// The host it is bound to.
    pub host: String,
    /// When it was made, ms since the Unix epoch.
    pub created_ms: i64,
    /// When it expires, ms since the Unix epoch.
    pub expires_ms: i64,
    /// When it was redeemed (`None`: not yet).
    pub used_ms: Option<i64>,
    /// When it was revoked (`None`: it was not).
    pub revoked_ms: Option<i64>,
    /// Whether redeeming it keeps the host's older agent credentials.
    pub keep_credentials: bool,
}

/// A stored credential ([`AuthorityStore::credentials`]): who holds it and how
/// it was used, never the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialRecord {
    /// Its hash (`sha256:<hex>`). [`credential_id`] shortens it.
    pub credential_hash: String,
    /// Who holds it.
    pub principal: Principal,
    /// When it was made, ms since the Unix epoch.
    pub created_ms: i64,
    /// When it was last used, ms since the Unix epoch, to within
    /// [`LAST_USED_GRANULARITY_MS`] (`None`: never, since this was recorded).
    pub last_used_ms: Option<i64>,
    /// The client address (`ip:port`) of that use, when known.
    pub last_address: Option<String>,
    /// When it was revoked (`None`: it was not).
    pub revoked_ms: Option<i64>,
}

/// What a lookup by a hash's prefix found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ByPrefix<T> {
    /// Exactly one: this (as it is after the call).
    One(T),
    /// None.
    Unknown,
    /// Several: their hashes (nothing was written).
    Ambiguous(Vec<String>),
}

/// The short id shown for a credential or join token: the first 12 hex digits of
/// its hash (`sha256:<hex>`), never the secret. Revoking takes any unique prefix
/// of the hex digits.
pub fn credential_id(hash: &str) -> &str {
    let hex = hash.strip_prefix("sha256:").unwrap_or(hash);
    &hex[..hex.len().min(12)]
}

/// What [`AuthorityStore::redeem_join_token`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redeem {
    /// The token was valid: it is now used and the credential is stored as the
    /// agent of `host`.
    Joined {
        /// The host the token was bound to.
        host: String,
        /// How many older agent credentials of the host this revoked.
        revoked: u64,
    },
    /// No token has this hash.
    Unknown,
    /// The token was revoked.
    Revoked,
    /// The token was already used.
    Used,
    /// The token expired.
    Expired,
}

/// Who holds a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// An operator (the CLI): may publish, select and read everything.
    Operator {
        /// The operator's name.
        name: String,
    },
    /// The agent of one host: may read only that host's snapshot and write only
    /// its reports.
    Agent {
        /// The host.
        host: String,
    },
    /// The runtime of one agent session: may ask the gate about its own tool calls
    /// and the executor to run commands for it, nothing else.
    Session {
        /// The session's id.
        id: u64,
    },
    /// A webhook sender (Alertmanager): may post alerts, nothing else.
    Alerts {
        /// The sender's name (e.g. `alertmanager`).
        name: String,
    },
    /// A metrics scraper (Prometheus): may read `/metrics`, nothing else.
    Metrics {
        /// The scraper's name (e.g. `prometheus`).
        name: String,
    },
    /// A dashboard sign-in link (`flotilla serve ui-link`): may sign in to the web
    /// dashboard once, with its role; nothing on `/v1`.
    UiLink {
        /// The link's id ([`AuthorityStore::create_ui_link`]).
        id: u64,
        /// What its dashboard sessions may do.
        role: UiRole,
    },
}

/// What a dashboard session may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UiRole {
    /// Read every page and act (start, stop, answer…).
    Operator,
    /// Read every page; every action is refused.
    Viewer,
}

impl UiRole {
    /// `operator` or `viewer` (as stored and shown).
    pub fn as_str(self) -> &'static str {
        match self {
            UiRole::Operator => "operator",
            UiRole::Viewer => "viewer",
        }
    }

    /// The role named `s` (`operator` or `viewer`); `None` otherwise.
    pub fn parse(s: &str) -> Option<UiRole> {
        match s {
            "operator" => Some(UiRole::Operator),
            "viewer" => Some(UiRole::Viewer),
            _ => None,
        }
    }
}

/// A dashboard sign-in link to store ([`AuthorityStore::create_ui_link`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewUiLink {
    /// Its credential's hash (never the credential).
    pub credential_hash: String,
    /// The role its sessions get.
    pub role: UiRole,
    /// Who made it (the operator's name).
    pub created_by: String,
    /// When it was made, ms since the Unix epoch.
    pub created_ms: i64,
    /// When it expires unused, ms since the Unix epoch.
    pub expires_ms: i64,
}

/// A stored dashboard sign-in link ([`AuthorityStore::ui_links`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UiLinkRecord {
    /// Its id.
    pub id: u64,
    /// The role its sessions get.
    pub role: UiRole,
    /// Who made it.
    pub created_by: String,
    /// When it was made, ms since the Unix epoch.
    pub created_ms: i64,
    /// When it expires unused, ms since the Unix epoch.
    pub expires_ms: i64,
    /// When it was used to sign in (`None`: not yet).
    pub used_ms: Option<i64>,
    /// When it was revoked (`None`: it was not).
    pub revoked_ms: Option<i64>,
}

/// What [`AuthorityStore::redeem_ui_link`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UiLinkRedeem {
    /// The link was valid and is now used.
    SignedIn {
        /// Its id.
        id: u64,
        /// Its role.
        role: UiRole,
    },
    /// No link has this hash.
    Unknown,
    /// The link was revoked.
    Revoked,
    /// The link was already used.
    Used,
    /// The link expired unused.
    Expired,
}

/// `reports` with only the last of each host's, in the order of those kept:
/// what [`AuthorityStore::put_reports`] writes.
pub(crate) fn last_report_of_each_host(reports: Vec<HostReportRecord>) -> Vec<HostReportRecord> {
    let mut last = std::collections::HashMap::with_capacity(reports.len());
    for (i, r) in reports.iter().enumerate() {
        last.insert(r.host.clone(), i);
    }
    reports
        .into_iter()
        .enumerate()
        .filter(|(i, r)| last.get(&r.host) == Some(i))
        .map(|(_, r)| r)
        .collect()
}

/// A host's last report ([`AuthorityStore::put_report`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostReportRecord {
    /// The reporting host.
    pub host: String,
    /// The revision its agent runs (`None`: none applied yet).
    pub revision: Option<String>,
    /// The report as JSON (the server's `AgentReport`), stored as given.
    pub report: String,
    /// When the authority received it, ms since the Unix epoch.
    pub received_ms: i64,
}

/// A call queued for a host's agent ([`AuthorityStore::enqueue_call`]), with its
/// reply once answered ([`AuthorityStore::put_reply`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedCall {
    /// Its id: 1, 2, 3… across all hosts.
    pub id: u64,
    /// The host whose agent is to answer it.
    pub host: String,
    /// The call (a step or an observation) as JSON, stored as given.
    pub call: String,
    /// When it was queued, ms since the Unix epoch.
    pub created_ms: i64,
    /// The agent's reply as JSON, stored as given (`None`: not answered yet).
    pub reply: Option<String>,
    /// When the reply was recorded, ms since the Unix epoch (`Some` exactly when
    /// `reply` is).
    pub replied_ms: Option<i64>,
}

/// A release to store ([`AuthorityStore::put_release`]): a signed manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRelease {
    /// The release's name (the manifest's `name`, e.g. `flotilla`).
    pub name: String,
    /// Its version (the manifest's `version`, e.g. `1.4.0`); with `name`, the
    /// release's key.
    pub version: String,
    /// The manifest's `serial` (anti-rollback counter); at most `i64::MAX`.
    pub serial: u64,
    /// The manifest exactly as signed (JSON bytes; stored and returned
    /// byte-for-byte, never re-encoded: the signature covers these bytes).
    pub manifest: Vec<u8>,
    /// The minisign signature of `manifest` (the `.minisig` file's text).
    pub signature: String,
    /// Who published it (the operator's name).
    pub published_by: String,
    /// When it was published, ms since the Unix epoch.
    pub created_ms: i64,
}

/// A stored release ([`AuthorityStore::release`], [`AuthorityStore::releases`]);
/// the same fields as the [`NewRelease`] that first stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseRecord {
    /// The release's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The manifest's `serial`.
    pub serial: u64,
    /// The manifest, byte-for-byte as published.
    pub manifest: Vec<u8>,
    /// The minisign signature of `manifest` (`.minisig` text), as published.
    pub signature: String,
    /// Who published it.
    pub published_by: String,
    /// When it was published, ms since the Unix epoch.
    pub created_ms: i64,
}

/// What [`AuthorityStore::put_release`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleasePut {
    /// The release was stored.
    Created,
    /// The same release (identical manifest bytes and signature) was already
    /// stored; nothing was written.
    Exists,
    /// Another release (other manifest bytes or another signature) is stored
    /// under this name and version; nothing was written.
    Conflict,
}

/// A stored rollout ([`AuthorityStore::rollout`], [`AuthorityStore::rollouts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutRecord {
    /// Its id (1, 2, 3…), given by [`AuthorityStore::create_rollout`].
    pub id: u64,
    /// Its label, as given at creation (the release's name).
    pub name: String,
    /// The rollout as JSON (`flotilla_release::rollout::Rollout`), as last
    /// stored.
    pub doc: String,
    /// When it was created, ms since the Unix epoch.
    pub created_ms: i64,
    /// When its document was last stored (`created_ms` until the first
    /// [`AuthorityStore::put_rollout`]), ms since the Unix epoch.
    pub updated_ms: i64,
    /// Its version: 1 when created, one more at every write of its document
    /// (the compare-and-swap of [`Cluster::put_doc_if`]).
    pub version: u64,
}

/// What [`AuthorityStore::create_session`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionCreated {
    /// The new session's id, or the one that already held the alert key.
    pub id: u64,
    /// `false` when the alert key was already held (nothing was written).
    pub created: bool,
}

/// What [`AuthorityStore::delete_session`] deleted besides the session's row:
/// how many rows of each kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionDeleted {
    /// Events of its log.
    pub events: u64,
    /// Its questions (answered or not).
    pub questions: u64,
    /// Its runtimes' credentials (one per boot, by hash).
    pub credentials: u64,
    /// Alert keys (0 or 1: the alert that opened it).
    pub alert_keys: u64,
}

/// A stored agent session ([`AuthorityStore::session`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// Its id (1, 2, 3…).
    pub id: u64,
    /// The session as JSON, as last stored.
    pub doc: String,
    /// When it was created, ms since the Unix epoch.
    pub created_ms: i64,
    /// When its document was last stored, ms since the Unix epoch.
    pub updated_ms: i64,
    /// Its version: 1 when created, one more at every write of its document
    /// (the compare-and-swap of [`Cluster::put_doc_if`]).
    pub version: u64,
}

/// One event of a session's log ([`AuthorityStore::session_events`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEventRecord {
    /// Its sequence number (increasing across all sessions).
    pub seq: u64,
    /// The session it belongs to.
    pub session: u64,
    /// The event as JSON, as given.
    pub doc: String,
    /// When it happened, ms since the Unix epoch.
    pub at_ms: i64,
}

/// A stored question ([`AuthorityStore::question`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuestionRecord {
    /// Its id (1, 2, 3…).
    pub id: u64,
    /// The session that asked it.
    pub session: u64,
    /// The question as JSON, as last stored.
    pub doc: String,
    /// When it was asked, ms since the Unix epoch.
    pub created_ms: i64,
    /// When its document was last stored, ms since the Unix epoch.
    pub updated_ms: i64,
    /// Its version: 1 when created, one more at every write of its document
    /// (the compare-and-swap of [`Cluster::put_doc_if`]).
    pub version: u64,
}

/// A stored notification ([`AuthorityStore::notifications`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationRecord {
    /// Its id (1, 2, 3…).
    pub id: u64,
    /// The event's deduplication key (unique).
    pub dedup_key: String,
    /// The notification and its deliveries as JSON
    /// (`flotilla_api::notifications::NotificationDto`), as last stored.
    pub doc: String,
    /// When it was recorded, ms since the Unix epoch.
    pub created_ms: i64,
    /// When its document was last stored, ms since the Unix epoch.
    pub updated_ms: i64,
}

/// A host's last update report ([`AuthorityStore::host_updates`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostUpdateRecord {
    /// The reporting host.
    pub host: String,
    /// Its report as JSON (`flotilla_release::rollout::HostUpdate`), stored as
    /// given.
    pub doc: String,
    /// When the authority received it, ms since the Unix epoch.
    pub received_ms: i64,
}

/// A stored unskip request ([`AuthorityStore::unskip`],
/// [`AuthorityStore::pending_unskips`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnskipRecord {
    /// Its id (1, 2, 3…), given by [`AuthorityStore::create_unskip`].
    pub id: u64,
    /// The host whose skip lists it clears.
    pub host: String,
    /// The request as JSON (`flotilla_server::api::UnskipDto`), as last stored.
    pub doc: String,
    /// Whether it is still waiting for the host's agent.
    pub pending: bool,
    /// When it was created, ms since the Unix epoch.
    pub created_ms: i64,
    /// When its document was last stored, ms since the Unix epoch.
    pub updated_ms: i64,
}

/// A table of document-like records (rollouts, sessions, questions) and the columns
/// its records are read from, in that order: the same in both backends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DocTable {
    /// The table.
    pub(crate) name: &'static str,
    /// The columns read, comma-separated.
    pub(crate) columns: &'static str,
}

/// Rollouts: id, name, doc, created, updated, version.
pub(crate) const ROLLOUT_DOCS: DocTable = DocTable {
    name: "rollouts",
    columns: "id, name, doc, created_ms, updated_ms, version",
};

/// Sessions: id, doc, created, updated, version.
pub(crate) const SESSION_DOCS: DocTable = DocTable {
    name: "sessions",
    columns: "id, doc, created_ms, updated_ms, version",
};

/// Questions: id, session, doc, created, updated, version.
pub(crate) const QUESTION_DOCS: DocTable = DocTable {
    name: "questions",
    columns: "id, session, doc, created_ms, updated_ms, version",
};

/// Either backend, chosen at run time (`flotilla serve` with or without
/// `--database-url`). Implements [`AuthorityStore`] by delegating.
#[derive(Debug, Clone)]
pub enum AnyAuthority {
    /// The embedded SQLite store.
    Sqlite(SqliteAuthority),
    /// The PostgreSQL store.
    Postgres(PostgresAuthority),
}

impl From<SqliteAuthority> for AnyAuthority {
    fn from(s: SqliteAuthority) -> Self {
        AnyAuthority::Sqlite(s)
    }
}

impl From<PostgresAuthority> for AnyAuthority {
    fn from(s: PostgresAuthority) -> Self {
        AnyAuthority::Postgres(s)
    }
}

/// Delegates one method call to the backend.
macro_rules! delegate {
    ($self:ident . $method:ident ( $($arg:ident),* )) => {
        match $self {
            AnyAuthority::Sqlite(s) => s.$method($($arg),*).await,
            AnyAuthority::Postgres(s) => s.$method($($arg),*).await,
        }
    };
}

impl AuthorityStore for AnyAuthority {
    async fn publish(
        &self,
        rev: NewRevision,
        expect: Option<String>,
    ) -> Result<SelectOutcome, StoreError> {
        delegate!(self.publish(rev, expect))
    }

    async fn select(
        &self,
        digest: String,
        expect: Option<String>,
        at_ms: i64,
        by: String,
    ) -> Result<SelectOutcome, StoreError> {
        delegate!(self.select(digest, expect, at_ms, by))
    }

    async fn revision(&self, digest: String) -> Result<Option<RevisionRecord>, StoreError> {
        delegate!(self.revision(digest))
    }

    async fn revisions(&self) -> Result<Vec<RevisionSummary>, StoreError> {
        delegate!(self.revisions())
    }

    async fn selection(&self) -> Result<Option<Selection>, StoreError> {
        delegate!(self.selection())
    }

    async fn selections(&self) -> Result<Vec<Selection>, StoreError> {
        delegate!(self.selections())
    }

    async fn create_join_token(&self, token: NewJoinToken) -> Result<(), StoreError> {
        delegate!(self.create_join_token(token))
    }

    async fn redeem_join_token(
        &self,
        token_hash: String,
        credential_hash: String,
        now_ms: i64,
    ) -> Result<Redeem, StoreError> {
        delegate!(self.redeem_join_token(token_hash, credential_hash, now_ms))
    }

    async fn create_credential(
        &self,
        credential_hash: String,
        principal: Principal,
        created_ms: i64,
    ) -> Result<(), StoreError> {
        delegate!(self.create_credential(credential_hash, principal, created_ms))
    }

    async fn principal(&self, credential_hash: String) -> Result<Option<Principal>, StoreError> {
        delegate!(self.principal(credential_hash))
    }

    async fn credential(
        &self,
        credential_hash: String,
    ) -> Result<Option<CredentialRecord>, StoreError> {
        delegate!(self.credential(credential_hash))
    }

    async fn credentials(&self) -> Result<Vec<CredentialRecord>, StoreError> {
        delegate!(self.credentials())
    }

    async fn touch_credential(
        &self,
        credential_hash: String,
        at_ms: i64,
        address: Option<String>,
    ) -> Result<bool, StoreError> {
        delegate!(self.touch_credential(credential_hash, at_ms, address))
    }

    async fn revoke_credential(
        &self,
        id_prefix: String,
        now_ms: i64,
    ) -> Result<ByPrefix<CredentialRecord>, StoreError> {
        delegate!(self.revoke_credential(id_prefix, now_ms))
    }

    async fn revoke_host_credentials(
        &self,
        host: String,
        now_ms: i64,
    ) -> Result<Vec<CredentialRecord>, StoreError> {
        delegate!(self.revoke_host_credentials(host, now_ms))
    }

    async fn join_tokens(&self) -> Result<Vec<JoinTokenRecord>, StoreError> {
        delegate!(self.join_tokens())
    }

    async fn revoke_join_token(
        &self,
        id_prefix: String,
        now_ms: i64,
    ) -> Result<ByPrefix<JoinTokenRecord>, StoreError> {
        delegate!(self.revoke_join_token(id_prefix, now_ms))
    }

    async fn put_reports(&self, reports: Vec<HostReportRecord>) -> Result<(), StoreError> {
        delegate!(self.put_reports(reports))
    }

    async fn reports(&self) -> Result<Vec<HostReportRecord>, StoreError> {
        delegate!(self.reports())
    }

    async fn enqueue_call(
        &self,
        host: String,
        call: String,
        created_ms: i64,
    ) -> Result<u64, StoreError> {
        delegate!(self.enqueue_call(host, call, created_ms))
    }

    async fn pending_calls(
        &self,
        host: String,
        after: u64,
        limit: u32,
    ) -> Result<Vec<QueuedCall>, StoreError> {
        delegate!(self.pending_calls(host, after, limit))
    }

    async fn put_reply(
        &self,
        id: u64,
        host: String,
        reply: String,
        replied_ms: i64,
    ) -> Result<bool, StoreError> {
        delegate!(self.put_reply(id, host, reply, replied_ms))
    }

    async fn call(&self, id: u64) -> Result<Option<QueuedCall>, StoreError> {
        delegate!(self.call(id))
    }

    async fn last_call_id(&self) -> Result<u64, StoreError> {
        delegate!(self.last_call_id())
    }

    async fn put_release(&self, release: NewRelease) -> Result<ReleasePut, StoreError> {
        delegate!(self.put_release(release))
    }

    async fn release(
        &self,
        name: String,
        version: String,
    ) -> Result<Option<ReleaseRecord>, StoreError> {
        delegate!(self.release(name, version))
    }

    async fn releases(&self) -> Result<Vec<ReleaseRecord>, StoreError> {
        delegate!(self.releases())
    }

    async fn create_rollout(
        &self,
        doc: String,
        name: String,
        created_ms: i64,
    ) -> Result<u64, StoreError> {
        delegate!(self.create_rollout(doc, name, created_ms))
    }

    async fn put_rollout(&self, id: u64, doc: String, updated_ms: i64) -> Result<(), StoreError> {
        delegate!(self.put_rollout(id, doc, updated_ms))
    }

    async fn rollout(&self, id: u64) -> Result<Option<RolloutRecord>, StoreError> {
        delegate!(self.rollout(id))
    }

    async fn rollouts(&self) -> Result<Vec<RolloutRecord>, StoreError> {
        delegate!(self.rollouts())
    }

    async fn put_host_update(
        &self,
        host: String,
        doc: String,
        received_ms: i64,
    ) -> Result<(), StoreError> {
        delegate!(self.put_host_update(host, doc, received_ms))
    }

    async fn host_updates(&self) -> Result<Vec<HostUpdateRecord>, StoreError> {
        delegate!(self.host_updates())
    }

    async fn create_unskip(
        &self,
        host: String,
        doc: String,
        created_ms: i64,
    ) -> Result<u64, StoreError> {
        delegate!(self.create_unskip(host, doc, created_ms))
    }

    async fn put_unskip(
        &self,
        id: u64,
        doc: String,
        pending: bool,
        updated_ms: i64,
    ) -> Result<(), StoreError> {
        delegate!(self.put_unskip(id, doc, pending, updated_ms))
    }

    async fn unskip(&self, id: u64) -> Result<Option<UnskipRecord>, StoreError> {
        delegate!(self.unskip(id))
    }

    async fn pending_unskips(&self) -> Result<Vec<UnskipRecord>, StoreError> {
        delegate!(self.pending_unskips())
    }

    async fn create_session(
        &self,
        doc: String,
        alert_key: Option<String>,
        created_ms: i64,
    ) -> Result<SessionCreated, StoreError> {
        delegate!(self.create_session(doc, alert_key, created_ms))
    }

    async fn put_session(&self, id: u64, doc: String, updated_ms: i64) -> Result<(), StoreError> {
        delegate!(self.put_session(id, doc, updated_ms))
    }

    async fn session(&self, id: u64) -> Result<Option<SessionRecord>, StoreError> {
        delegate!(self.session(id))
    }

    async fn sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        delegate!(self.sessions())
    }

    async fn delete_session(&self, id: u64) -> Result<SessionDeleted, StoreError> {
        delegate!(self.delete_session(id))
    }

    async fn append_session_event(
        &self,
        session: u64,
        doc: String,
        at_ms: i64,
    ) -> Result<u64, StoreError> {
        delegate!(self.append_session_event(session, doc, at_ms))
    }

    async fn session_events(
        &self,
        session: u64,
        after: u64,
    ) -> Result<Vec<SessionEventRecord>, StoreError> {
        delegate!(self.session_events(session, after))
    }

    async fn create_question(
        &self,
        session: u64,
        doc: String,
        created_ms: i64,
    ) -> Result<u64, StoreError> {
        delegate!(self.create_question(session, doc, created_ms))
    }

    async fn put_question(&self, id: u64, doc: String, updated_ms: i64) -> Result<(), StoreError> {
        delegate!(self.put_question(id, doc, updated_ms))
    }

    async fn question(&self, id: u64) -> Result<Option<QuestionRecord>, StoreError> {
        delegate!(self.question(id))
    }

    async fn questions(&self) -> Result<Vec<QuestionRecord>, StoreError> {
        delegate!(self.questions())
    }

    async fn create_notification(
        &self,
        dedup_key: String,
        doc: String,
        created_ms: i64,
    ) -> Result<Option<u64>, StoreError> {
        delegate!(self.create_notification(dedup_key, doc, created_ms))
    }

    async fn put_notification(
        &self,
        id: u64,
        doc: String,
        updated_ms: i64,
    ) -> Result<(), StoreError> {
        delegate!(self.put_notification(id, doc, updated_ms))
    }

    async fn notifications(&self, limit: u32) -> Result<Vec<NotificationRecord>, StoreError> {
        delegate!(self.notifications(limit))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        delegate!(self.ping())
    }

    async fn create_ui_link(&self, link: NewUiLink) -> Result<u64, StoreError> {
        delegate!(self.create_ui_link(link))
    }

    async fn redeem_ui_link(
        &self,
        credential_hash: String,
        now_ms: i64,
    ) -> Result<UiLinkRedeem, StoreError> {
        delegate!(self.redeem_ui_link(credential_hash, now_ms))
    }

    async fn ui_links(&self) -> Result<Vec<UiLinkRecord>, StoreError> {
        delegate!(self.ui_links())
    }

    async fn revoke_ui_link(&self, id: u64, now_ms: i64) -> Result<bool, StoreError> {
        delegate!(self.revoke_ui_link(id, now_ms))
    }
}

/// The compare-and-swap decision shared by both backends, made inside the
/// transaction (with the selection log locked) from the current selection.
#[derive(Debug)]
pub(crate) enum Cas {
    /// `digest` is already current.
    Unchanged(Selection),
    /// `expect` is stale: the current digest.
    Conflict(Option<String>),
    /// Append a selection with this index.
    Append(u64),
}

/// Decides a publish or select of `digest` given the `current` selection.
pub(crate) fn decide(current: Option<Selection>, digest: &str, expect: Option<&str>) -> Cas {
    match current {
        Some(cur) if cur.digest == digest => Cas::Unchanged(cur),
        cur => {
            let current_digest = cur.as_ref().map(|c| c.digest.as_str());
            match expect {
                Some(e) if Some(e) != current_digest => {
                    Cas::Conflict(current_digest.map(str::to_owned))
                }
                _ => Cas::Append(cur.map_or(1, |c| c.index + 1)),
            }
        }
    }
}

/// `principal` as stored in `credentials`: (kind, name).
///
/// # Errors
/// [`StoreError::UiLinkNotACredential`] for a dashboard sign-in link (its own table).
pub(crate) fn principal_columns(
    principal: &Principal,
) -> Result<(&'static str, String), StoreError> {
    Ok(match principal {
        Principal::Operator { name } => ("operator", name.clone()),
        Principal::Agent { host } => ("agent", host.clone()),
        Principal::Session { id } => ("session", id.to_string()),
        Principal::Alerts { name } => ("alerts", name.clone()),
        Principal::Metrics { name } => ("metrics", name.clone()),
        Principal::UiLink { .. } => return Err(StoreError::UiLinkNotACredential),
    })
}

/// Why a dashboard sign-in link could not be redeemed, from its stored row
/// (`revoked_ms`, `used_ms`, `expires_ms`; `None`: unknown).
pub(crate) fn ui_link_refusal(
    row: Option<(Option<i64>, Option<i64>, i64)>,
    now_ms: i64,
) -> UiLinkRedeem {
    match row {
        None => UiLinkRedeem::Unknown,
        Some((Some(_), _, _)) => UiLinkRedeem::Revoked,
        Some((None, Some(_), _)) => UiLinkRedeem::Used,
        Some((None, None, expires_ms)) if now_ms >= expires_ms => UiLinkRedeem::Expired,
        // Unreachable: a valid link is redeemed. Reported as used rather than
        // panicking.
        Some((None, None, _)) => UiLinkRedeem::Used,
    }
}

/// A dashboard sign-in link's role as stored; an unknown one (the schema's CHECK
/// makes that impossible) reads as the least: `viewer`.
pub(crate) fn stored_ui_role(s: &str) -> UiRole {
    UiRole::parse(s).unwrap_or(UiRole::Viewer)
}

/// The principal stored as (kind, name); `None` for an unknown kind (the schema's
/// CHECK makes that impossible).
pub(crate) fn principal_from_columns(kind: &str, name: String) -> Option<Principal> {
    match kind {
        "operator" => Some(Principal::Operator { name }),
        "agent" => Some(Principal::Agent { host: name }),
        "session" => name.parse().ok().map(|id| Principal::Session { id }),
        "alerts" => Some(Principal::Alerts { name }),
        "metrics" => Some(Principal::Metrics { name }),
        _ => None,
    }
}

/// Why a token could not be redeemed, from its stored row (`revoked_ms`,
/// `used_ms`, `expires_ms`; `None`: unknown).
pub(crate) fn refusal(row: Option<(Option<i64>, Option<i64>, i64)>, now_ms: i64) -> Redeem {
    match row {
        None => Redeem::Unknown,
        Some((Some(_), _, _)) => Redeem::Revoked,
        Some((None, Some(_), _)) => Redeem::Used,
        Some((None, None, expires_ms)) if now_ms >= expires_ms => Redeem::Expired,
        // Unreachable: an unused, unexpired token is redeemed. Reported as used
        // rather than panicking.
        Some((None, None, _)) => Redeem::Used,
    }
}

/// The hash prefix (`sha256:` + `id_prefix`) a revoke by id matches, and its
/// length in characters; `None` when `id_prefix` is not lowercase hex (it then
/// matches nothing).
pub(crate) fn hash_prefix(id_prefix: &str) -> Option<(String, i64)> {
    if id_prefix.is_empty() || !id_prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let p = format!("sha256:{}", id_prefix.to_ascii_lowercase());
    let n = p.len() as i64;
    Some((p, n))
}

/// The one hash of `hashes` (those matching a prefix), else what a lookup by
/// prefix answers.
pub(crate) fn one_of<T>(mut hashes: Vec<String>) -> Result<String, ByPrefix<T>> {
    match hashes.len() {
        0 => Err(ByPrefix::Unknown),
        1 => Ok(hashes.remove(0)),
        _ => Err(ByPrefix::Ambiguous(hashes)),
    }
}

/// A call or rollout id as stored (a signed 64-bit integer); `None` above
/// `i64::MAX`, where none is ever stored.
pub(crate) fn stored_id(id: u64) -> Option<i64> {
    i64::try_from(id).ok()
}

/// A release's `serial` as stored (a signed 64-bit integer).
///
/// # Errors
/// [`StoreError::OutOfRange`] above `i64::MAX`.
pub(crate) fn stored_serial(serial: u64) -> Result<i64, StoreError> {
    i64::try_from(serial).map_err(|_| StoreError::OutOfRange {
        field: "serial",
        value: serial,
    })
}

/// What [`AuthorityStore::put_release`] answers when a release is already stored
/// under the name and version: the same one or another.
pub(crate) fn existing_release(
    new: &NewRelease,
    stored_manifest: &[u8],
    stored_signature: &str,
) -> ReleasePut {
    if stored_manifest == new.manifest.as_slice() && stored_signature == new.signature {
        ReleasePut::Exists
    } else {
        ReleasePut::Conflict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(index: u64, digest: &str) -> Selection {
        Selection {
            index,
            digest: digest.into(),
            selected_ms: 0,
            selected_by: "ada".into(),
        }
    }

    #[test]
    fn cas_decisions() {
        assert!(matches!(decide(None, "a", None), Cas::Append(1)));
        assert!(matches!(decide(None, "a", Some("b")), Cas::Conflict(None)));
        assert!(
            matches!(decide(Some(sel(3, "a")), "a", Some("x")), Cas::Unchanged(s) if s.index == 3)
        );
        assert!(matches!(
            decide(Some(sel(3, "a")), "b", None),
            Cas::Append(4)
        ));
        assert!(matches!(
            decide(Some(sel(3, "a")), "b", Some("a")),
            Cas::Append(4)
        ));
        assert!(
            matches!(decide(Some(sel(3, "a")), "b", Some("c")), Cas::Conflict(Some(d)) if d == "a")
        );
    }

    #[test]
    fn refusals() {
        assert_eq!(refusal(None, 5), Redeem::Unknown);
        assert_eq!(refusal(Some((None, Some(1), 10)), 5), Redeem::Used);
        assert_eq!(refusal(Some((None, Some(1), 1)), 5), Redeem::Used);
        assert_eq!(refusal(Some((None, None, 5)), 5), Redeem::Expired);
        assert_eq!(refusal(Some((Some(2), Some(1), 1)), 5), Redeem::Revoked);
        assert_eq!(hash_prefix("AB12"), Some(("sha256:ab12".into(), 11)));
        assert_eq!(hash_prefix("x%"), None);
        assert_eq!(hash_prefix(""), None);
        assert_eq!(credential_id("sha256:0123456789abcdef"), "0123456789ab");
    }
}
