//! [`StoreError`]: everything that can go wrong in the store, typed.

use crate::ids::{OperationId, StepId};
use crate::outcome::Outcome;
use std::path::PathBuf;

/// An error from the store.
///
/// Errors that concern the database file as a whole ([`StoreError::Open`],
/// [`StoreError::NotADatabase`], [`StoreError::ForeignDatabase`],
/// [`StoreError::Busy`], [`StoreError::SchemaTooNew`], [`StoreError::Migration`])
/// name its path (`:memory:` for an in-memory store).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database file could not be opened or set up (missing parent directory,
    /// permissions, read-only file system…).
    #[error("cannot open the state database {}: {source}", path.display())]
    Open {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },

    /// The file exists but is not an SQLite database, or is corrupted.
    #[error(
        "{} is not a usable Flotilla state database (not an SQLite file, or corrupted): {source}",
        path.display()
    )]
    NotADatabase {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },

    /// Another process held the database lock for longer than the busy timeout
    /// ([`crate::BUSY_TIMEOUT`]).
    #[error(
        "the state database {} stayed locked by another process for more than {} s while trying to {context}",
        path.display(),
        crate::BUSY_TIMEOUT.as_secs()
    )]
    Busy {
        /// The database file.
        path: PathBuf,
        /// What the store was doing, e.g. `begin an operation`.
        context: &'static str,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },

    /// An SQLite file that belongs to another application (its `application_id`
    /// is neither 0 nor Flotilla's [`crate::APPLICATION_ID`]); it is left untouched.
    #[error(
        "{} is an SQLite database of another application (application_id {application_id:#x}), not a Flotilla state database",
        path.display()
    )]
    ForeignDatabase {
        /// The database file.
        path: PathBuf,
        /// Its `application_id`.
        application_id: i32,
    },

    /// The database was written by a newer Flotilla (its schema version is higher
    /// than this build knows); it is left untouched.
    #[error(
        "the state database {} has schema version {found}, newer than the {supported} this flotilla understands; upgrade flotilla",
        path.display()
    )]
    SchemaTooNew {
        /// The database file.
        path: PathBuf,
        /// Version found in the file.
        found: i64,
        /// Highest version this build knows ([`crate::SCHEMA_VERSION`] for
        /// `state.db`, [`crate::authority::AUTHORITY_SCHEMA_VERSION`] for the
        /// authority's `authority.db`).
        supported: i64,
    },

    /// A schema migration failed (the database is left at the previous version).
    #[error("cannot migrate the state database {} to schema version {version}: {source}", path.display())]
    Migration {
        /// The database file.
        path: PathBuf,
        /// The migration that failed.
        version: i64,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },

    /// Any other SQLite failure, with what the store was doing.
    #[error("state database: cannot {context}: {source}")]
    Sqlite {
        /// What the store was doing, e.g. `list operations`.
        context: &'static str,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },

    /// No operation has this id.
    #[error("no operation {0} in the journal")]
    UnknownOperation(OperationId),

    /// No step has this id.
    #[error("no step {0} in the journal")]
    UnknownStep(StepId),

    /// The operation already has a final outcome; the journal is append-only in
    /// that sense and is not rewritten.
    #[error("operation {id} already finished ({outcome})")]
    OperationAlreadyFinished {
        /// The operation.
        id: OperationId,
        /// Its recorded outcome.
        outcome: Outcome,
    },

    /// The step already has a final outcome.
    #[error("step {id} already finished ({outcome})")]
    StepAlreadyFinished {
        /// The step.
        id: StepId,
        /// Its recorded outcome.
        outcome: Outcome,
    },

    /// `finish_*` was called with [`Outcome::Running`], which is not a final outcome.
    #[error("`{0}` is not a final outcome")]
    NotAFinalOutcome(Outcome),

    /// A value does not fit the database's 64-bit signed integers (e.g. a
    /// `start_time_ticks` above `i64::MAX`).
    #[error("{field} = {value} does not fit in a signed 64-bit integer")]
    OutOfRange {
        /// The field, e.g. `start_time_ticks`.
        field: &'static str,
        /// The value.
        value: u64,
    },

    /// A JSON value could not be encoded (e.g. a map with non-string keys in
    /// step evidence).
    #[error("cannot encode {what} as JSON: {source}")]
    Json {
        /// What was being encoded, e.g. `step evidence`.
        what: &'static str,
        /// What serde_json said.
        #[source]
        source: serde_json::Error,
    },

    /// No revision has this digest (the authority's store,
    /// [`crate::authority::AuthorityStore::select`]).
    #[error("no revision {0} in the authority's store")]
    UnknownRevision(String),

    /// A revision with this digest is already stored with different content. A
    /// digest names its content (SHA-256 of the canonical JSON), so this is a
    /// caller's bug or a corrupted database; nothing was written.
    #[error(
        "revision {digest} is already stored with different content (a digest names its content)"
    )]
    RevisionContentMismatch {
        /// The digest.
        digest: String,
    },

    /// No rollout has this id (the authority's store,
    /// [`crate::authority::AuthorityStore::put_rollout`]); nothing was written.
    #[error("no rollout {0} in the authority's store")]
    UnknownRollout(u64),

    /// No unskip request has this id (the authority's store,
    /// [`crate::authority::AuthorityStore::put_unskip`]); nothing was written.
    #[error("no unskip request {0} in the authority's store")]
    UnknownUnskip(u64),

    /// No agent session has this id; nothing was written.
    #[error("no session {0} in the authority's store")]
    UnknownSession(u64),

    /// No question has this id; nothing was written.
    #[error("no question {0} in the authority's store")]
    UnknownQuestion(u64),

    /// No notification has this id; nothing was written.
    #[error("no notification {0} in the authority's store")]
    UnknownNotification(u64),

    /// A row with this key already exists, e.g. a join token or credential with
    /// the same hash; nothing was written.
    #[error("{what} already exists")]
    AlreadyExists {
        /// What, e.g. `a join token with this hash`.
        what: &'static str,
    },

    /// A dashboard sign-in link's principal is made by
    /// `AuthorityStore::create_ui_link`, not stored as a plain credential; nothing
    /// was written.
    #[error("a dashboard sign-in link is made with create_ui_link, not as a credential")]
    UiLinkNotACredential,

    /// Cannot connect to the authority's PostgreSQL server (or the connection
    /// string is invalid). The URL is not repeated: it may hold a password.
    #[error("cannot connect to the authority's PostgreSQL database: {source}")]
    PostgresConnect {
        /// What tokio-postgres said.
        #[source]
        source: tokio_postgres::Error,
    },

    /// The authority's PostgreSQL database was written by a newer Flotilla (its
    /// schema version, in `flotilla_authority_schema`, is higher than this build
    /// knows); it is left untouched.
    #[error(
        "the authority's PostgreSQL database has schema version {found}, newer than the {supported} this flotilla understands; upgrade flotilla"
    )]
    PostgresSchemaTooNew {
        /// Version found in the database.
        found: i64,
        /// Highest version this build knows
        /// ([`crate::authority::AUTHORITY_SCHEMA_VERSION`]).
        supported: i64,
    },

    /// A schema migration of the authority's PostgreSQL database failed (it is
    /// left at the previous version).
    #[error(
        "cannot migrate the authority's PostgreSQL database to schema version {version}: {source}"
    )]
    PostgresMigration {
        /// The migration that failed.
        version: i64,
        /// What PostgreSQL said.
        #[source]
        source: tokio_postgres::Error,
    },

    /// The connection pool refused a connection for a reason other than opening it
    /// (a timeout, a closed pool: neither is configured).
    #[error("the authority's PostgreSQL connection pool: {why}")]
    PostgresPool {
        /// What the pool said.
        why: String,
    },

    /// Any other PostgreSQL failure (including a lost connection), with what the
    /// store was doing.
    #[error("authority database (PostgreSQL): cannot {context}: {source}")]
    Postgres {
        /// What the store was doing, e.g. `select a revision`.
        context: &'static str,
        /// What tokio-postgres said.
        #[source]
        source: tokio_postgres::Error,
    },

    /// The backup taken before a schema migration (a
    /// [`BeforeMigration`](crate::schema::BeforeMigration) hook) failed: nothing
    /// was migrated, the database is as it was.
    #[error("the backup before migrating {database} from schema version {found} to {target} failed, so nothing was migrated: {source}")]
    BackupBeforeMigration {
        /// The database (its file, or `PostgreSQL`).
        database: String,
        /// Its schema version.
        found: i64,
        /// The version the migration would have brought it to.
        target: i64,
        /// Why the backup failed (the hook's error: a
        /// [`HookError`](crate::schema::HookError)).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// The blocking task that runs an SQLite query was cancelled because the Tokio
    /// runtime is shutting down before it ran; nothing was written.
    #[error("the authority database query was cancelled: the runtime is shutting down")]
    Cancelled,

    /// A compare-and-swap write of a document
    /// ([`crate::authority::Cluster::put_doc_if`]) named a version that is no
    /// longer the stored one: another writer (this authority or another sharing
    /// the database) changed it since it was read. Nothing was written; read it
    /// again and retry, or report the conflict.
    #[error("{kind} {id} was changed by another writer (version {found}, not {expected}): read it again")]
    StaleVersion {
        /// `rollout`, `session` or `question`.
        kind: &'static str,
        /// Its id.
        id: u64,
        /// The version the write expected.
        expected: u64,
        /// The version stored.
        found: u64,
    },

    /// The database was first served under another CA than this authority's
    /// ([`crate::authority::Cluster::claim_ca`]): every authority sharing a
    /// database must serve the same CA, so that its clients' pin holds whichever
    /// one answers.
    #[error("this database is served under the CA {stored}, not this authority's {ours}: give every authority sharing it the same CA (copy the first authority's directory: its CA and server certificate files)")]
    CaMismatch {
        /// The pin recorded in the database (`sha256:<hex>`).
        stored: String,
        /// This authority's pin.
        ours: String,
    },
}
