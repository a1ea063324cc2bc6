//! Flotilla's state store: the journal and local state of local mode, in one
//! SQLite file (`state.db` in the state directory, see DESIGN.md "Where state
//! lives"), and the fleet authority's store ([`authority`]: SQLite
//! `authority.db` or PostgreSQL). This is the only crate that speaks SQL.
//!
//! - **Time**: the store never reads the clock. Every timestamp is an `i64` in
//!   milliseconds since the Unix epoch, passed in by the caller and returned as
//!   given.
//! - **Pure apart from the database**: no process, file or environment access
//!   beyond the SQLite file itself; every result is a function of the arguments
//!   and the database. The exception is [`backup`], which reads and writes the
//!   directories it is given (state directories, archives); it starts no process
//!   either (`pg_dump`/`pg_restore` run through the caller's
//!   [`PgTools`](backup::PgTools)).
//! - **Secrets**: callers must never pass any (DESIGN.md invariant 9); everything
//!   stored is plain text and shown by `--json` output.
//! - **Concurrency**: WAL mode and a 5 s busy timeout let one writer and any
//!   number of readers, in different processes, share the file. [`Store`] is
//!   `Send`, not `Sync`: see its docs for use from async code.
//!
//! Code map:
//! - [`authority`]: the authority's store (`flotilla serve`): the
//!   [`AuthorityStore`](authority::AuthorityStore) trait (revisions, selection
//!   log with compare-and-swap, join tokens, credentials, host reports, the
//!   agents' call queue, and for signed releases: blob references, releases,
//!   rollouts, host updates) and its
//!   two backends, [`SqliteAuthority`](authority::SqliteAuthority) and
//!   [`PostgresAuthority`](authority::PostgresAuthority), each with its own
//!   migrations. Async; everything else in the crate is blocking.
//! - [`blobs`]: blob bytes beside the database: the [`BlobStore`](blobs::BlobStore)
//!   trait and its file-system implementation, [`FsBlobStore`](blobs::FsBlobStore)
//!   (content-addressed files, written to a temporary name, fsynced, digest-checked
//!   and renamed into place; digest-checked again on every read).
//! - [`backup`]: archives of a project's state directory or of the authority
//!   (SQLite through the online backup API, PostgreSQL through `pg_dump` from an
//!   exported snapshot), each with a manifest (files' sizes and SHA-256, databases'
//!   schema versions and row counts), verified after writing by a restore into a
//!   scratch place; restore into a temporary sibling swapped in by renames;
//!   retention.
//! - [`store`]: [`Store`], opening (pragmas, migrations), [`BUSY_TIMEOUT`],
//!   [`STATE_DB_FILE`].
//! - [`schema`]: the SQL schema as forward-only numbered migrations,
//!   [`SCHEMA_VERSION`]; the hook called before migrating a database that holds
//!   data ([`schema::BeforeMigration`]).
//! - [`journal`]: operations and steps, written before and after each runs
//!   (invariant 2); unfinished operations and marking them interrupted; each
//!   component's last step.
//! - [`instances`]: instances Flotilla started (runtime identity at start), their
//!   removal history, desired lifecycle per component.
//! - [`stacks`]: the order each stack actually started in, for `down`.
//! - [`digests`]: digests of files already hashed, keyed by (device, inode, size,
//!   mtime, ctime).
//! - [`observations`]: the last observation of each component on a remote host.
//! - [`records`]: the record types (operations, steps, instances).
//! - [`outcome`]: the [`Outcome`] / [`RemovalReason`] enums kept as text.
//! - [`ids`]: [`OperationId`] (`op-<n>`) and [`StepId`] (`step-<n>`).
//! - [`error`]: the typed error, [`StoreError`].

#![warn(missing_docs)]

pub mod authority;
pub mod backup;
pub mod blobs;
pub mod digests;
pub mod error;
pub mod ids;
pub mod instances;
pub mod journal;
pub mod observations;
pub mod outcome;
pub mod records;
pub mod schema;
pub mod stacks;
pub mod store;

pub use digests::FileDigest;
pub use error::StoreError;
pub use flotilla_model::status::{DesiredLifecycle, StackRecord};
pub use ids::{OperationId, ParseIdError, StepId};
pub use journal::SUPERVISED_RESTART;
pub use observations::HostObservation;
pub use records::{
    InstanceRecord, LastStep, NewOperation, NewStep, OperationRecord, Outcome, ParseEnumError,
    RemovalReason, RemovedInstance, StepRecord,
};
pub use schema::{APPLICATION_ID, SCHEMA_VERSION};
pub use store::{Store, BUSY_TIMEOUT, STATE_DB_FILE};
