//! [`SqliteAuthority`]: the authority's store in one SQLite file,
//! [`AUTHORITY_DB_FILE`], with its own forward-only migrations (recorded in that
//! file's `schema_version` table, like `state.db`'s, but a separate numbering:
//! [`AUTHORITY_SCHEMA_VERSION`]) and its own `application_id`
//! ([`AUTHORITY_APPLICATION_ID`]), so neither file can be opened as the other.

use super::{
    decide, existing_release, principal_columns, principal_from_columns, refusal, stored_id,
    stored_serial, AuthorityStore, Cas, HostReportRecord, HostUpdateRecord, NewJoinToken,
    NewRelease, NewRevision, NotificationRecord, Principal, QuestionRecord, QueuedCall, Redeem,
    ReleasePut, ReleaseRecord, RevisionRecord, RevisionSummary, RolloutRecord, SelectOutcome,
    Selection, SessionCreated, SessionDeleted, SessionEventRecord, SessionRecord, UnskipRecord,
    AUTHORITY_SCHEMA_VERSION,
};
use super::{
    hash_prefix, one_of, ByPrefix, CredentialRecord, JoinTokenRecord, LAST_USED_GRANULARITY_MS,
};
use super::{stored_ui_role, ui_link_refusal, NewUiLink, UiLinkRecord, UiLinkRedeem};
use crate::error::StoreError;
use crate::schema::{self, BeforeMigration, Migration};
use crate::store::{classify_open, TxError};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

mod blob_refs;

/// The authority database's file name inside the authority's state directory.
pub const AUTHORITY_DB_FILE: &str = "authority.db";

/// `PRAGMA application_id` of an authority database (`FLTA` in ASCII; the local
/// mode's `state.db` has [`crate::APPLICATION_ID`], `FLOT`).
pub const AUTHORITY_APPLICATION_ID: i32 = 0x464C_5441;

/// The authority's SQLite migrations. Never edit a released entry: append (and
/// the same version to the PostgreSQL list).
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "revisions, selection log, join tokens, credentials, host reports",
        sql: r#"
PRAGMA application_id = 1179407425;

-- Immutable desired states, named by the SHA-256 of their canonical JSON. `seq`
-- orders them by when they were stored. Times: ms since the Unix epoch, given by
-- the caller.
CREATE TABLE revisions (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    digest       TEXT    NOT NULL UNIQUE,
    content      TEXT    NOT NULL,
    created_ms   INTEGER NOT NULL,
    published_by TEXT    NOT NULL
) STRICT;

-- The selection log: the current revision is the one with the highest idx.
-- idx is 1, 2, 3… (the agents' long-poll index).
CREATE TABLE selections (
    idx         INTEGER PRIMARY KEY CHECK (idx >= 1),
    digest      TEXT    NOT NULL REFERENCES revisions (digest),
    selected_ms INTEGER NOT NULL,
    selected_by TEXT    NOT NULL
) STRICT;

-- One-time join tokens, by hash (never the token), each bound to one host.
CREATE TABLE join_tokens (
    token_hash      TEXT    PRIMARY KEY,
    host            TEXT    NOT NULL,
    created_ms      INTEGER NOT NULL,
    expires_ms      INTEGER NOT NULL,
    used_ms         INTEGER,               -- NULL while unused
    credential_hash TEXT,                  -- the credential it was exchanged for
    CHECK ((used_ms IS NULL) = (credential_hash IS NULL))
) STRICT;

-- Credentials, by hash (never the credential): who holds each.
CREATE TABLE credentials (
    credential_hash TEXT    PRIMARY KEY,
    kind            TEXT    NOT NULL CHECK (kind IN ('operator', 'agent')),
    name            TEXT    NOT NULL,      -- the operator's name or the agent's host
    created_ms      INTEGER NOT NULL
) STRICT;

-- The last report of each host.
CREATE TABLE host_reports (
    host        TEXT    PRIMARY KEY,
    revision    TEXT,
    report      TEXT    NOT NULL,          -- JSON, as received
    received_ms INTEGER NOT NULL
) STRICT;
"#,
    },
    Migration {
        version: 2,
        description: "agent call queue",
        sql: r#"
-- Calls (steps, observations) queued for a host's agent, each answered at most
-- once. id: 1, 2, 3… across all hosts (AUTOINCREMENT: never reused). call and
-- reply: JSON, stored as given.
CREATE TABLE agent_calls (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    host       TEXT    NOT NULL,
    call       TEXT    NOT NULL,
    created_ms INTEGER NOT NULL,
    reply      TEXT,                       -- NULL until answered
    replied_ms INTEGER,
    CHECK ((reply IS NULL) = (replied_ms IS NULL))
) STRICT;
CREATE INDEX agent_calls_pending ON agent_calls (host, id) WHERE reply IS NULL;
"#,
    },
    Migration {
        version: 3,
        description: "signed releases: blobs, releases, rollouts, host updates",
        sql: r#"
-- Blobs (release artifacts), named by the SHA-256 of their bytes (64 lowercase
-- hex, computed by the caller). size: total bytes. The bytes are in blob_chunks,
-- n = 0, 1, 2… of BLOB_CHUNK_BYTES each (the last may be shorter; none for an
-- empty blob), so no value nears SQLite's 10^9-byte limit.
CREATE TABLE blobs (
    sha256 TEXT    PRIMARY KEY,
    size   INTEGER NOT NULL CHECK (size >= 0)
) STRICT;
CREATE TABLE blob_chunks (
    sha256 TEXT    NOT NULL REFERENCES blobs (sha256),
    n      INTEGER NOT NULL CHECK (n >= 0),
    bytes  BLOB    NOT NULL,
    PRIMARY KEY (sha256, n)
) STRICT;

-- Signed release manifests, one per (name, version), never replaced. manifest:
-- the exact bytes signed; signature: minisign text. seq orders them by when they
-- were stored.
CREATE TABLE releases (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    name         TEXT    NOT NULL,
    version      TEXT    NOT NULL,
    serial       INTEGER NOT NULL CHECK (serial >= 0),
    manifest     BLOB    NOT NULL,
    signature    TEXT    NOT NULL,
    published_by TEXT    NOT NULL,
    created_ms   INTEGER NOT NULL,
    UNIQUE (name, version)
) STRICT;

-- Rollouts: JSON documents (the state machine lives in flotilla-release).
-- id: 1, 2, 3… (AUTOINCREMENT: never reused).
CREATE TABLE rollouts (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT    NOT NULL,
    doc        TEXT    NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
) STRICT;

-- The last update report of each host's agent (JSON, as received).
CREATE TABLE host_updates (
    host        TEXT    PRIMARY KEY,
    doc         TEXT    NOT NULL,
    received_ms INTEGER NOT NULL
) STRICT;
"#,
    },
    Migration {
        version: 4,
        description: "agent sessions: sessions, their events, questions, alert keys",
        sql: r#"
-- Credentials gain two kinds: a session's runtime and an alert sender. SQLite
-- cannot alter a CHECK: the table is rebuilt (nothing references it).
CREATE TABLE credentials_v4 (
    credential_hash TEXT    PRIMARY KEY,
    kind            TEXT    NOT NULL
                    CHECK (kind IN ('operator', 'agent', 'session', 'alerts')),
    name            TEXT    NOT NULL,      -- operator, host, session id or sender
    created_ms      INTEGER NOT NULL
) STRICT;
INSERT INTO credentials_v4 SELECT credential_hash, kind, name, created_ms FROM credentials;
DROP TABLE credentials;
ALTER TABLE credentials_v4 RENAME TO credentials;

-- Agent sessions: JSON documents (their meaning lives in flotilla-server).
CREATE TABLE sessions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    doc        TEXT    NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
) STRICT;

-- Each session's log, append-only.
CREATE TABLE session_events (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    session INTEGER NOT NULL REFERENCES sessions (id),
    doc     TEXT    NOT NULL,
    at_ms   INTEGER NOT NULL
) STRICT;
CREATE INDEX session_events_by_session ON session_events (session, seq);

-- Durable questions asked of a human.
CREATE TABLE questions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    session    INTEGER NOT NULL REFERENCES sessions (id),
    doc        TEXT    NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
) STRICT;

-- The alert (deduplication key) that opened each alert session.
CREATE TABLE alert_sessions (
    alert_key TEXT    PRIMARY KEY,
    session   INTEGER NOT NULL REFERENCES sessions (id)
) STRICT;
"#,
    },
    Migration {
        version: 5,
        description: "unskip requests",
        sql: r#"
-- Operators' requests to clear a release version from a host's skip lists: JSON
-- documents (their meaning lives in flotilla-server), pending (1) until the
-- host's agent reported the entries gone. id: 1, 2, 3… (AUTOINCREMENT: never
-- reused).
CREATE TABLE unskips (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    host       TEXT    NOT NULL,
    doc        TEXT    NOT NULL,
    pending    INTEGER NOT NULL CHECK (pending IN (0, 1)),
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX unskips_pending ON unskips (id) WHERE pending = 1;
"#,
    },
    Migration {
        version: 6,
        description: "dashboard sign-in links",
        sql: r#"
-- Dashboard sign-in links (`flotilla serve ui-link`), by their credential's hash
-- (never the credential): one use each, with a role; revoking one ends the
-- dashboard sessions it opened. id: 1, 2, 3… (AUTOINCREMENT: never reused).
CREATE TABLE ui_links (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    credential_hash TEXT    NOT NULL UNIQUE,
    role            TEXT    NOT NULL CHECK (role IN ('operator', 'viewer')),
    created_by      TEXT    NOT NULL,
    created_ms      INTEGER NOT NULL,
    expires_ms      INTEGER NOT NULL,
    used_ms         INTEGER,               -- NULL while unused
    revoked_ms      INTEGER                -- NULL unless revoked
) STRICT;
"#,
    },
    Migration {
        version: 7,
        description: "notifications",
        sql: r#"
-- Notifications posted to webhooks: JSON documents (their meaning lives in
-- flotilla-server) with their deliveries; one per event (dedup_key).
CREATE TABLE notifications (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    dedup_key  TEXT    NOT NULL UNIQUE,
    doc        TEXT    NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
) STRICT;
"#,
    },
    Migration {
        version: 8,
        description: "credentials: metrics kind, last use, revocation; join tokens: revocation",
        sql: r#"
-- Credentials gain a kind (a metrics scraper), when and from where each was last
-- used (rewritten at most once a minute) and when it was revoked (kept for the
-- listing; a revoked credential is refused). SQLite cannot alter a CHECK: the
-- table is rebuilt (nothing references it).
CREATE TABLE credentials_v8 (
    credential_hash TEXT    PRIMARY KEY,
    kind            TEXT    NOT NULL
                    CHECK (kind IN ('operator', 'agent', 'session', 'alerts', 'metrics')),
    name            TEXT    NOT NULL,      -- operator, host, session id or sender
    created_ms      INTEGER NOT NULL,
    last_used_ms    INTEGER,               -- NULL: not used since recorded
    last_address    TEXT,                  -- the client's ip:port at that use
    revoked_ms      INTEGER                -- NULL unless revoked
) STRICT;
INSERT INTO credentials_v8 (credential_hash, kind, name, created_ms)
    SELECT credential_hash, kind, name, created_ms FROM credentials;
DROP TABLE credentials;
ALTER TABLE credentials_v8 RENAME TO credentials;
CREATE INDEX credentials_by_principal ON credentials (kind, name);

-- Join tokens can be revoked before use; one made with keep_credentials = 1
-- leaves its host's older agent credentials valid when redeemed (else they are
-- revoked then).
ALTER TABLE join_tokens ADD COLUMN revoked_ms INTEGER;
ALTER TABLE join_tokens ADD COLUMN keep_credentials INTEGER NOT NULL DEFAULT 0
    CHECK (keep_credentials IN (0, 1));
"#,
    },
    Migration {
        version: 9,
        description: "blobs on the file system: the database keeps references",
        sql: r#"
-- Blob bytes move to files beside the database (`<blob dir>/sha256/ab/cdef…`):
-- a row now says a blob exists. on_disk: 1 once its bytes are a file (0: still
-- in blob_chunks, moved out when the authority starts); stored_ms: its last
-- upload (garbage collection spares a blob uploaded within its grace).
ALTER TABLE blobs ADD COLUMN on_disk INTEGER NOT NULL DEFAULT 0 CHECK (on_disk IN (0, 1));
ALTER TABLE blobs ADD COLUMN stored_ms INTEGER NOT NULL DEFAULT 0;
"#,
    },
    Migration {
        version: 10,
        description: "several authorities: document versions, leases, the CA's pin",
        sql: r#"
-- Documents read, changed and written back carry a version: a write names the
-- version it read and fails when another writer came first (compare-and-swap).
ALTER TABLE rollouts  ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
ALTER TABLE sessions  ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
ALTER TABLE questions ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
-- (Notifications share the documents' writes: they carry one too.)
ALTER TABLE notifications ADD COLUMN version INTEGER NOT NULL DEFAULT 1;

-- The same tables as PostgreSQL's: one authority owns an SQLite file, so its
-- leases are its own, but the CA's pin is still checked.
CREATE TABLE leases (
    name       TEXT    PRIMARY KEY,
    holder     TEXT    NOT NULL,
    expires_ms INTEGER NOT NULL
) STRICT;
CREATE TABLE authority_identity (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;
"#,
    },
];

const _: () = assert!(MIGRATIONS[MIGRATIONS.len() - 1].version == AUTHORITY_SCHEMA_VERSION);

/// The authority's store in one SQLite file (the default backend).
///
/// - **Durability**: WAL mode with `synchronous=FULL`: every commit is fsynced
///   before the method returns, so a `kill -9` (or a power cut) at any moment
///   loses no acknowledged write.
/// - **Concurrency**: one connection behind a mutex; each call runs on Tokio's
///   blocking pool (`spawn_blocking`), so calls from many tasks are serialised and
///   never block the async workers. Several processes may share the file: every
///   mutating call is one `BEGIN IMMEDIATE` transaction and waits up to
///   [`BUSY_TIMEOUT`](crate::BUSY_TIMEOUT) for another's.
/// - Cheap to clone (an `Arc`): clones share the connection.
#[derive(Debug, Clone)]
pub struct SqliteAuthority {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    conn: Mutex<Connection>,
    path: PathBuf,
}

impl SqliteAuthority {
    /// Opens the authority database at `path` (normally `<state
    /// dir>/`[`AUTHORITY_DB_FILE`]), creating the file if it does not exist (its
    /// directory must), and brings its schema up to [`AUTHORITY_SCHEMA_VERSION`].
    /// Sets WAL mode, `synchronous=FULL`, foreign keys on and a busy timeout of
    /// [`BUSY_TIMEOUT`](crate::BUSY_TIMEOUT). Blocks (briefly): from async code,
    /// call it in `spawn_blocking` or accept the short block at start-up.
    ///
    /// # Errors
    /// All name `path`: [`StoreError::Open`] (cannot open or create the file),
    /// [`StoreError::NotADatabase`], [`StoreError::ForeignDatabase`] (e.g. a
    /// local-mode `state.db`), [`StoreError::SchemaTooNew`],
    /// [`StoreError::Migration`], [`StoreError::Busy`].
    pub fn open(path: &Path) -> Result<SqliteAuthority, StoreError> {
        SqliteAuthority::open_with(path, None)
    }

    /// [`SqliteAuthority::open`], calling `before` (when given) before migrating
    /// a database that holds data and has an older schema, while holding its write
    /// lock (see [`BeforeMigration`]): how `flotilla serve` backs the database up
    /// before a migration.
    ///
    /// # Errors
    /// As [`SqliteAuthority::open`], and [`StoreError::BackupBeforeMigration`]
    /// when `before` fails (nothing was migrated).
    pub fn open_with(
        path: &Path,
        before: Option<BeforeMigration<'_>>,
    ) -> Result<SqliteAuthority, StoreError> {
        let conn = Connection::open(path).map_err(|source| StoreError::Open {
            path: path.to_owned(),
            source,
        })?;
        SqliteAuthority::setup(conn, path.to_owned(), true, before)
    }

    /// Opens a fresh, private in-memory authority database with the same schema
    /// (for tests; nothing persists). Errors name the path `:memory:`.
    ///
    /// # Errors
    /// [`StoreError::Open`] or [`StoreError::Migration`] if SQLite fails.
    pub fn open_in_memory() -> Result<SqliteAuthority, StoreError> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory().map_err(|source| StoreError::Open {
            path: path.clone(),
            source,
        })?;
        SqliteAuthority::setup(conn, path, false, None)
    }

    fn setup(
        mut conn: Connection,
        path: PathBuf,
        wal: bool,
        before: Option<BeforeMigration<'_>>,
    ) -> Result<Self, StoreError> {
        crate::store::prepare(&conn, &path, AUTHORITY_APPLICATION_ID, wal)?;
        let classify = |source: rusqlite::Error| classify_open(&path, source);
        // Per connection, not stored in the file: fsync the WAL at every commit.
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(classify)?;
        schema::apply(&mut conn, &path, classify, MIGRATIONS, before)?;
        Ok(SqliteAuthority {
            inner: Arc::new(Inner {
                conn: Mutex::new(conn),
                path,
            }),
        })
    }

    /// The database file (`:memory:` for [`SqliteAuthority::open_in_memory`]).
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Runs `f` on the blocking pool with the connection: in one `BEGIN
    /// IMMEDIATE` transaction (committed when `f` succeeds) when `write`, else in
    /// a deferred one (one consistent snapshot for several queries).
    /// Replaces document `id` of `table` (one of `rollouts`, `sessions`,
    /// `questions`: each has `id`, `doc` and `updated_ms`); `unknown(id)` when it
    /// has no such row.
    fn put_doc(
        &self,
        context: &'static str,
        table: &'static str,
        id: u64,
        doc: String,
        updated_ms: i64,
        unknown: fn(u64) -> StoreError,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.run(context, true, move |tx| {
            let n = match stored_id(id) {
                Some(stored) => tx.execute(
                    &format!("UPDATE {table} SET doc = ?2, updated_ms = ?3, version = version + 1 WHERE id = ?1"),
                    (stored, &doc, updated_ms),
                )?,
                None => 0,
            };
            if n == 0 {
                return Err(unknown(id).into());
            }
            Ok(())
        })
    }

    /// One document of `kind` by id; `None` when there is none.
    fn get_doc<R: Send + 'static>(
        &self,
        context: &'static str,
        kind: DocKind<R>,
        id: u64,
    ) -> impl Future<Output = Result<Option<R>, StoreError>> + Send {
        self.run(context, false, move |tx| {
            let Some(id) = stored_id(id) else {
                return Ok(None);
            };
            let sql = format!(
                "SELECT {} FROM {} WHERE id = ?1",
                kind.table.columns, kind.table.name
            );
            Ok(tx.query_row(&sql, [id], kind.row).optional()?)
        })
    }

    /// Every document of `kind`, newest first.
    fn list_docs<R: Send + 'static>(
        &self,
        context: &'static str,
        kind: DocKind<R>,
    ) -> impl Future<Output = Result<Vec<R>, StoreError>> + Send {
        self.run(context, false, move |tx| {
            let sql = format!(
                "SELECT {} FROM {} ORDER BY id DESC",
                kind.table.columns, kind.table.name
            );
            let mut stmt = tx.prepare(&sql)?;
            let rows = stmt.query_map([], kind.row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    pub(super) fn run<T: Send + 'static>(
        &self,
        context: &'static str,
        write: bool,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, TxError> + Send + 'static,
    ) -> impl Future<Output = Result<T, StoreError>> + Send + 'static {
        let inner = Arc::clone(&self.inner);
        async move {
            let task = tokio::task::spawn_blocking(move || {
                // A panic while holding the lock rolled its transaction back
                // (dropped): the connection is still consistent.
                let mut conn = inner.conn.lock().unwrap_or_else(|e| e.into_inner());
                let fail = |e: TxError| e.into_store_error(&inner.path, context);
                let behavior = if write {
                    TransactionBehavior::Immediate
                } else {
                    TransactionBehavior::Deferred
                };
                let tx = conn
                    .transaction_with_behavior(behavior)
                    .map_err(|e| fail(e.into()))?;
                let out = f(&tx).map_err(fail)?;
                tx.commit().map_err(|e| fail(e.into()))?;
                Ok(out)
            });
            match task.await {
                Ok(result) => result,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_) => Err(StoreError::Cancelled),
            }
        }
    }
}

/// The current selection, read inside `tx`.
fn current_selection(tx: &Transaction<'_>) -> rusqlite::Result<Option<Selection>> {
    tx.query_row(
        "SELECT idx, digest, selected_ms, selected_by FROM selections ORDER BY idx DESC LIMIT 1",
        [],
        selection_row,
    )
    .optional()
}

fn selection_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Selection> {
    Ok(Selection {
        index: row.get::<_, i64>(0)? as u64,
        digest: row.get(1)?,
        selected_ms: row.get(2)?,
        selected_by: row.get(3)?,
    })
}

/// Appends the selection `index` of `digest`.
fn append_selection(
    tx: &Transaction<'_>,
    index: u64,
    digest: &str,
    at_ms: i64,
    by: &str,
) -> rusqlite::Result<SelectOutcome> {
    tx.execute(
        "INSERT INTO selections (idx, digest, selected_ms, selected_by) VALUES (?1, ?2, ?3, ?4)",
        (index as i64, digest, at_ms, by),
    )?;
    Ok(SelectOutcome::Selected(Selection {
        index,
        digest: digest.to_owned(),
        selected_ms: at_ms,
        selected_by: by.to_owned(),
    }))
}

impl AuthorityStore for SqliteAuthority {
    fn publish(
        &self,
        rev: NewRevision,
        expect: Option<String>,
    ) -> impl Future<Output = Result<SelectOutcome, StoreError>> + Send {
        self.run("publish a revision", true, move |tx| {
            let stored: Option<String> = tx
                .query_row(
                    "SELECT content FROM revisions WHERE digest = ?1",
                    [&rev.digest],
                    |row| row.get(0),
                )
                .optional()?;
            if stored.as_ref().is_some_and(|content| *content != rev.content) {
                return Err(StoreError::RevisionContentMismatch { digest: rev.digest }.into());
            }
            // BEGIN IMMEDIATE holds the write lock: nobody selects in between.
            let outcome = match decide(current_selection(tx)?, &rev.digest, expect.as_deref()) {
                Cas::Unchanged(s) => SelectOutcome::Unchanged(s),
                Cas::Conflict(current) => SelectOutcome::Conflict { current },
                Cas::Append(index) => {
                    if stored.is_none() {
                        tx.execute(
                            "INSERT INTO revisions (digest, content, created_ms, published_by) VALUES (?1, ?2, ?3, ?4)",
                            (&rev.digest, &rev.content, rev.created_ms, &rev.published_by),
                        )?;
                    }
                    append_selection(tx, index, &rev.digest, rev.created_ms, &rev.published_by)?
                }
            };
            Ok(outcome)
        })
    }

    fn select(
        &self,
        digest: String,
        expect: Option<String>,
        at_ms: i64,
        by: String,
    ) -> impl Future<Output = Result<SelectOutcome, StoreError>> + Send {
        self.run("select a revision", true, move |tx| {
            let known: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM revisions WHERE digest = ?1)",
                [&digest],
                |row| row.get(0),
            )?;
            if !known {
                return Err(StoreError::UnknownRevision(digest).into());
            }
            Ok(
                match decide(current_selection(tx)?, &digest, expect.as_deref()) {
                    Cas::Unchanged(s) => SelectOutcome::Unchanged(s),
                    Cas::Conflict(current) => SelectOutcome::Conflict { current },
                    Cas::Append(index) => append_selection(tx, index, &digest, at_ms, &by)?,
                },
            )
        })
    }

    fn revision(
        &self,
        digest: String,
    ) -> impl Future<Output = Result<Option<RevisionRecord>, StoreError>> + Send {
        self.run("read a revision", false, move |tx| {
            Ok(tx
                .query_row(
                    "SELECT digest, content, created_ms, published_by FROM revisions WHERE digest = ?1",
                    [&digest],
                    |row| {
                        Ok(RevisionRecord {
                            digest: row.get(0)?,
                            content: row.get(1)?,
                            created_ms: row.get(2)?,
                            published_by: row.get(3)?,
                        })
                    },
                )
                .optional()?)
        })
    }

    fn revisions(&self) -> impl Future<Output = Result<Vec<RevisionSummary>, StoreError>> + Send {
        self.run("list revisions", false, |tx| {
            let mut stmt = tx.prepare(
                "SELECT digest, created_ms, published_by FROM revisions ORDER BY seq DESC",
            )?;
            let rows = stmt.query_map([], |row| {
                Ok(RevisionSummary {
                    digest: row.get(0)?,
                    created_ms: row.get(1)?,
                    published_by: row.get(2)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn selection(&self) -> impl Future<Output = Result<Option<Selection>, StoreError>> + Send {
        self.run("read the current selection", false, |tx| {
            Ok(current_selection(tx)?)
        })
    }

    fn selections(&self) -> impl Future<Output = Result<Vec<Selection>, StoreError>> + Send {
        self.run("list selections", false, |tx| {
            let mut stmt = tx.prepare(
                "SELECT idx, digest, selected_ms, selected_by FROM selections ORDER BY idx DESC",
            )?;
            let rows = stmt.query_map([], selection_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn create_join_token(
        &self,
        token: NewJoinToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.run("create a join token", true, move |tx| {
            let n = tx.execute(
                "INSERT INTO join_tokens (token_hash, host, created_ms, expires_ms, keep_credentials)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (token_hash) DO NOTHING",
                (
                    &token.token_hash,
                    &token.host,
                    token.created_ms,
                    token.expires_ms,
                    token.keep_credentials,
                ),
            )?;
            if n == 0 {
                return Err(StoreError::AlreadyExists {
                    what: "a join token with this hash",
                }
                .into());
            }
            Ok(())
        })
    }

    fn redeem_join_token(
        &self,
        token_hash: String,
        credential_hash: String,
        now_ms: i64,
    ) -> impl Future<Output = Result<Redeem, StoreError>> + Send {
        self.run("redeem a join token", true, move |tx| {
            let won: Option<(String, bool)> = tx
                .query_row(
                    "UPDATE join_tokens SET used_ms = ?2, credential_hash = ?3
                     WHERE token_hash = ?1 AND revoked_ms IS NULL AND used_ms IS NULL
                       AND expires_ms > ?2
                     RETURNING host, keep_credentials",
                    (&token_hash, now_ms, &credential_hash),
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()?;
            let Some((host, keep)) = won else {
                let row = tx
                    .query_row(
                        "SELECT revoked_ms, used_ms, expires_ms FROM join_tokens WHERE token_hash = ?1",
                        [&token_hash],
                        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                    )
                    .optional()?;
                return Ok(refusal(row, now_ms));
            };
            let revoked = if keep {
                0
            } else {
                tx.execute(
                    "UPDATE credentials SET revoked_ms = ?2
                     WHERE kind = 'agent' AND name = ?1 AND revoked_ms IS NULL",
                    (&host, now_ms),
                )? as u64
            };
            insert_credential(tx, &credential_hash, "agent", &host, now_ms)?;
            Ok(Redeem::Joined { host, revoked })
        })
    }

    fn create_credential(
        &self,
        credential_hash: String,
        principal: Principal,
        created_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.run("create a credential", true, move |tx| {
            let (kind, name) = principal_columns(&principal)?;
            insert_credential(tx, &credential_hash, kind, &name, created_ms)
        })
    }

    fn principal(
        &self,
        credential_hash: String,
    ) -> impl Future<Output = Result<Option<Principal>, StoreError>> + Send {
        self.run("look up a credential", false, move |tx| {
            let row: Option<(String, String, Option<i64>)> = tx
                .query_row(
                    "SELECT kind, name, revoked_ms FROM credentials WHERE credential_hash = ?1",
                    [&credential_hash],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get::<_, Option<i64>>(2)?)),
                )
                .optional()?;
            if let Some((kind, name, revoked)) = row {
                return Ok(revoked
                    .is_none()
                    .then(|| principal_from_columns(&kind, name))
                    .flatten());
            }
            let link: Option<(i64, String)> = tx
                .query_row(
                    "SELECT id, role FROM ui_links WHERE credential_hash = ?1 AND revoked_ms IS NULL",
                    [&credential_hash],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()?;
            Ok(link.map(|(id, role)| Principal::UiLink {
                id: id as u64,
                role: stored_ui_role(&role),
            }))
        })
    }

    fn credential(
        &self,
        credential_hash: String,
    ) -> impl Future<Output = Result<Option<CredentialRecord>, StoreError>> + Send {
        self.run("look up a credential", false, move |tx| {
            let sql =
                format!("SELECT {CREDENTIAL_COLUMNS} FROM credentials WHERE credential_hash = ?1");
            Ok(tx
                .query_row(&sql, [&credential_hash], credential_row)
                .optional()?
                .flatten())
        })
    }

    fn credentials(
        &self,
    ) -> impl Future<Output = Result<Vec<CredentialRecord>, StoreError>> + Send {
        self.run("list credentials", false, move |tx| {
            let sql = format!(
                "SELECT {CREDENTIAL_COLUMNS} FROM credentials ORDER BY created_ms, credential_hash"
            );
            let mut stmt = tx.prepare(&sql)?;
            let rows = stmt.query_map([], credential_row)?;
            Ok(rows
                .collect::<rusqlite::Result<Vec<_>>>()?
                .into_iter()
                .flatten()
                .collect())
        })
    }

    fn touch_credential(
        &self,
        credential_hash: String,
        at_ms: i64,
        address: Option<String>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.run("record a credential's use", true, move |tx| {
            let n = tx.execute(
                "UPDATE credentials SET last_used_ms = ?2, last_address = ?3
                 WHERE credential_hash = ?1 AND revoked_ms IS NULL
                   AND (last_used_ms IS NULL OR last_used_ms <= ?4)",
                (
                    &credential_hash,
                    at_ms,
                    &address,
                    at_ms - LAST_USED_GRANULARITY_MS,
                ),
            )?;
            Ok(n == 1)
        })
    }

    fn revoke_credential(
        &self,
        id_prefix: String,
        now_ms: i64,
    ) -> impl Future<Output = Result<ByPrefix<CredentialRecord>, StoreError>> + Send {
        self.run("revoke a credential", true, move |tx| {
            let Some((prefix, len)) = hash_prefix(&id_prefix) else {
                return Ok(ByPrefix::Unknown);
            };
            let hashes = matching(tx, "credentials", "credential_hash", &prefix, len)?;
            let hash = match one_of(hashes) {
                Ok(h) => h,
                Err(other) => return Ok(other),
            };
            tx.execute(
                "UPDATE credentials SET revoked_ms = ?2 WHERE credential_hash = ?1 AND revoked_ms IS NULL",
                (&hash, now_ms),
            )?;
            let sql = format!("SELECT {CREDENTIAL_COLUMNS} FROM credentials WHERE credential_hash = ?1");
            match tx.query_row(&sql, [&hash], credential_row)? {
                Some(c) => Ok(ByPrefix::One(c)),
                None => Ok(ByPrefix::Unknown),
            }
        })
    }

    fn revoke_host_credentials(
        &self,
        host: String,
        now_ms: i64,
    ) -> impl Future<Output = Result<Vec<CredentialRecord>, StoreError>> + Send {
        self.run("revoke a host's credentials", true, move |tx| {
            let sql = format!(
                "UPDATE credentials SET revoked_ms = ?2
                 WHERE kind = 'agent' AND name = ?1 AND revoked_ms IS NULL
                 RETURNING {CREDENTIAL_COLUMNS}"
            );
            let mut stmt = tx.prepare(&sql)?;
            let rows = stmt.query_map((&host, now_ms), credential_row)?;
            let mut out: Vec<CredentialRecord> = rows
                .collect::<rusqlite::Result<Vec<_>>>()?
                .into_iter()
                .flatten()
                .collect();
            out.sort_by(|a, b| {
                (a.created_ms, &a.credential_hash).cmp(&(b.created_ms, &b.credential_hash))
            });
            Ok(out)
        })
    }

    fn join_tokens(&self) -> impl Future<Output = Result<Vec<JoinTokenRecord>, StoreError>> + Send {
        self.run("list join tokens", false, move |tx| {
            let sql = format!(
                "SELECT {JOIN_TOKEN_COLUMNS} FROM join_tokens ORDER BY created_ms DESC, token_hash"
            );
            let mut stmt = tx.prepare(&sql)?;
            let rows = stmt.query_map([], join_token_row)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    fn revoke_join_token(
        &self,
        id_prefix: String,
        now_ms: i64,
    ) -> impl Future<Output = Result<ByPrefix<JoinTokenRecord>, StoreError>> + Send {
        self.run("revoke a join token", true, move |tx| {
            let Some((prefix, len)) = hash_prefix(&id_prefix) else {
                return Ok(ByPrefix::Unknown);
            };
            let hashes = matching(tx, "join_tokens", "token_hash", &prefix, len)?;
            let hash = match one_of(hashes) {
                Ok(h) => h,
                Err(other) => return Ok(other),
            };
            tx.execute(
                "UPDATE join_tokens SET revoked_ms = ?2 WHERE token_hash = ?1 AND revoked_ms IS NULL",
                (&hash, now_ms),
            )?;
            let sql = format!("SELECT {JOIN_TOKEN_COLUMNS} FROM join_tokens WHERE token_hash = ?1");
            Ok(ByPrefix::One(tx.query_row(&sql, [&hash], join_token_row)?))
        })
    }

    fn put_reports(
        &self,
        reports: Vec<HostReportRecord>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.run("store host reports", true, move |tx| {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO host_reports (host, revision, report, received_ms) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (host) DO UPDATE SET revision = excluded.revision,
                     report = excluded.report, received_ms = excluded.received_ms",
            )?;
            for r in &reports {
                stmt.execute((&r.host, &r.revision, &r.report, r.received_ms))?;
            }
            Ok(())
        })
    }

    fn reports(&self) -> impl Future<Output = Result<Vec<HostReportRecord>, StoreError>> + Send {
        self.run("list host reports", false, |tx| {
            let mut stmt = tx.prepare(
                "SELECT host, revision, report, received_ms FROM host_reports ORDER BY host",
            )?;
            let rows = stmt.query_map([], |row| {
                Ok(HostReportRecord {
                    host: row.get(0)?,
                    revision: row.get(1)?,
                    report: row.get(2)?,
                    received_ms: row.get(3)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn enqueue_call(
        &self,
        host: String,
        call: String,
        created_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        // BEGIN IMMEDIATE serialises writers: ids are given in commit order.
        self.run("queue an agent call", true, move |tx| {
            let id: i64 = tx.query_row(
                "INSERT INTO agent_calls (host, call, created_ms) VALUES (?1, ?2, ?3) RETURNING id",
                (&host, &call, created_ms),
                |row| row.get(0),
            )?;
            Ok(id as u64)
        })
    }

    fn pending_calls(
        &self,
        host: String,
        after: u64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<QueuedCall>, StoreError>> + Send {
        self.run("list pending agent calls", false, move |tx| {
            let Some(after) = stored_id(after) else {
                return Ok(Vec::new());
            };
            let mut stmt = tx.prepare(
                "SELECT id, host, call, created_ms, reply, replied_ms FROM agent_calls
                 WHERE host = ?1 AND id > ?2 AND reply IS NULL ORDER BY id LIMIT ?3",
            )?;
            let rows = stmt.query_map((&host, after, i64::from(limit)), call_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn put_reply(
        &self,
        id: u64,
        host: String,
        reply: String,
        replied_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.run("store an agent reply", true, move |tx| {
            let Some(id) = stored_id(id) else {
                return Ok(false);
            };
            let n = tx.execute(
                "UPDATE agent_calls SET reply = ?3, replied_ms = ?4
                 WHERE id = ?1 AND host = ?2 AND reply IS NULL",
                (id, &host, &reply, replied_ms),
            )?;
            Ok(n == 1)
        })
    }

    fn call(&self, id: u64) -> impl Future<Output = Result<Option<QueuedCall>, StoreError>> + Send {
        self.run("read an agent call", false, move |tx| {
            let Some(id) = stored_id(id) else {
                return Ok(None);
            };
            Ok(tx
                .query_row(
                    "SELECT id, host, call, created_ms, reply, replied_ms FROM agent_calls WHERE id = ?1",
                    [id],
                    call_row,
                )
                .optional()?)
        })
    }

    fn last_call_id(&self) -> impl Future<Output = Result<u64, StoreError>> + Send {
        self.run("read the last agent call id", false, |tx| {
            let id: i64 =
                tx.query_row("SELECT COALESCE(MAX(id), 0) FROM agent_calls", [], |row| {
                    row.get(0)
                })?;
            Ok(id as u64)
        })
    }

    fn put_release(
        &self,
        release: NewRelease,
    ) -> impl Future<Output = Result<ReleasePut, StoreError>> + Send {
        self.run("store a release", true, move |tx| {
            let serial = stored_serial(release.serial)?;
            let stored: Option<(Vec<u8>, String)> = tx
                .query_row(
                    "SELECT manifest, signature FROM releases WHERE name = ?1 AND version = ?2",
                    (&release.name, &release.version),
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()?;
            if let Some((manifest, signature)) = stored {
                return Ok(existing_release(&release, &manifest, &signature));
            }
            tx.execute(
                "INSERT INTO releases (name, version, serial, manifest, signature, published_by, created_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                (
                    &release.name,
                    &release.version,
                    serial,
                    &release.manifest,
                    &release.signature,
                    &release.published_by,
                    release.created_ms,
                ),
            )?;
            Ok(ReleasePut::Created)
        })
    }

    fn release(
        &self,
        name: String,
        version: String,
    ) -> impl Future<Output = Result<Option<ReleaseRecord>, StoreError>> + Send {
        self.run("read a release", false, move |tx| {
            Ok(tx
                .query_row(
                    "SELECT name, version, serial, manifest, signature, published_by, created_ms
                     FROM releases WHERE name = ?1 AND version = ?2",
                    (&name, &version),
                    release_row,
                )
                .optional()?)
        })
    }

    fn releases(&self) -> impl Future<Output = Result<Vec<ReleaseRecord>, StoreError>> + Send {
        self.run("list releases", false, |tx| {
            let mut stmt = tx.prepare(
                "SELECT name, version, serial, manifest, signature, published_by, created_ms
                 FROM releases ORDER BY seq DESC",
            )?;
            let rows = stmt.query_map([], release_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn create_rollout(
        &self,
        doc: String,
        name: String,
        created_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        self.run("create a rollout", true, move |tx| {
            let id: i64 = tx.query_row(
                "INSERT INTO rollouts (name, doc, created_ms, updated_ms) VALUES (?1, ?2, ?3, ?3)
                 RETURNING id",
                (&name, &doc, created_ms),
                |row| row.get(0),
            )?;
            Ok(id as u64)
        })
    }

    fn put_rollout(
        &self,
        id: u64,
        doc: String,
        updated_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.put_doc(
            "store a rollout",
            "rollouts",
            id,
            doc,
            updated_ms,
            StoreError::UnknownRollout,
        )
    }

    fn rollout(
        &self,
        id: u64,
    ) -> impl Future<Output = Result<Option<RolloutRecord>, StoreError>> + Send {
        self.get_doc("read a rollout", ROLLOUTS, id)
    }

    fn rollouts(&self) -> impl Future<Output = Result<Vec<RolloutRecord>, StoreError>> + Send {
        self.list_docs("list rollouts", ROLLOUTS)
    }

    fn put_host_update(
        &self,
        host: String,
        doc: String,
        received_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.run("store a host update", true, move |tx| {
            tx.execute(
                "INSERT INTO host_updates (host, doc, received_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT (host) DO UPDATE SET doc = excluded.doc,
                     received_ms = excluded.received_ms",
                (&host, &doc, received_ms),
            )?;
            Ok(())
        })
    }

    fn host_updates(
        &self,
    ) -> impl Future<Output = Result<Vec<HostUpdateRecord>, StoreError>> + Send {
        self.run("list host updates", false, |tx| {
            let mut stmt = tx.prepare(
                "SELECT host, doc, received_ms FROM host_updates ORDER BY received_ms DESC, host",
            )?;
            let rows = stmt.query_map([], |row| {
                Ok(HostUpdateRecord {
                    host: row.get(0)?,
                    doc: row.get(1)?,
                    received_ms: row.get(2)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn create_unskip(
        &self,
        host: String,
        doc: String,
        created_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        self.run("create an unskip request", true, move |tx| {
            let id: i64 = tx.query_row(
                "INSERT INTO unskips (host, doc, pending, created_ms, updated_ms)
                 VALUES (?1, ?2, 1, ?3, ?3) RETURNING id",
                (&host, &doc, created_ms),
                |row| row.get(0),
            )?;
            Ok(id as u64)
        })
    }

    fn put_unskip(
        &self,
        id: u64,
        doc: String,
        pending: bool,
        updated_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.run("store an unskip request", true, move |tx| {
            let n = match stored_id(id) {
                Some(stored) => tx.execute(
                    "UPDATE unskips SET doc = ?2, pending = ?3, updated_ms = ?4 WHERE id = ?1",
                    (stored, &doc, i64::from(pending), updated_ms),
                )?,
                None => 0,
            };
            if n == 0 {
                return Err(StoreError::UnknownUnskip(id).into());
            }
            Ok(())
        })
    }

    fn unskip(
        &self,
        id: u64,
    ) -> impl Future<Output = Result<Option<UnskipRecord>, StoreError>> + Send {
        self.run("read an unskip request", false, move |tx| {
            let Some(id) = stored_id(id) else {
                return Ok(None);
            };
            Ok(tx
                .query_row(
                    "SELECT id, host, doc, pending, created_ms, updated_ms FROM unskips
                     WHERE id = ?1",
                    [id],
                    unskip_row,
                )
                .optional()?)
        })
    }

    fn pending_unskips(
        &self,
    ) -> impl Future<Output = Result<Vec<UnskipRecord>, StoreError>> + Send {
        self.run("list pending unskip requests", false, |tx| {
            let mut stmt = tx.prepare(
                "SELECT id, host, doc, pending, created_ms, updated_ms FROM unskips
                 WHERE pending = 1 ORDER BY id",
            )?;
            let rows = stmt.query_map([], unskip_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn create_session(
        &self,
        doc: String,
        alert_key: Option<String>,
        created_ms: i64,
    ) -> impl Future<Output = Result<SessionCreated, StoreError>> + Send {
        self.run("create a session", true, move |tx| {
            if let Some(key) = &alert_key {
                let held: Option<i64> = tx
                    .query_row(
                        "SELECT session FROM alert_sessions WHERE alert_key = ?1",
                        [key],
                        |row| row.get(0),
                    )
                    .optional()?;
                if let Some(id) = held {
                    return Ok(SessionCreated {
                        id: id as u64,
                        created: false,
                    });
                }
            }
            let id: i64 = tx.query_row(
                "INSERT INTO sessions (doc, created_ms, updated_ms) VALUES (?1, ?2, ?2)
                 RETURNING id",
                (&doc, created_ms),
                |row| row.get(0),
            )?;
            if let Some(key) = &alert_key {
                tx.execute(
                    "INSERT INTO alert_sessions (alert_key, session) VALUES (?1, ?2)",
                    (key, id),
                )?;
            }
            Ok(SessionCreated {
                id: id as u64,
                created: true,
            })
        })
    }

    fn put_session(
        &self,
        id: u64,
        doc: String,
        updated_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.put_doc(
            "store a session",
            "sessions",
            id,
            doc,
            updated_ms,
            StoreError::UnknownSession,
        )
    }

    fn session(
        &self,
        id: u64,
    ) -> impl Future<Output = Result<Option<SessionRecord>, StoreError>> + Send {
        self.get_doc("read a session", SESSIONS, id)
    }

    fn sessions(&self) -> impl Future<Output = Result<Vec<SessionRecord>, StoreError>> + Send {
        self.list_docs("list sessions", SESSIONS)
    }

    fn delete_session(
        &self,
        id: u64,
    ) -> impl Future<Output = Result<SessionDeleted, StoreError>> + Send {
        self.run("delete a session", true, move |tx| {
            let Some(stored) = stored_id(id) else {
                return Err(StoreError::UnknownSession(id).into());
            };
            let exists = tx
                .query_row("SELECT 1 FROM sessions WHERE id = ?1", [stored], |_| Ok(()))
                .optional()?
                .is_some();
            if !exists {
                return Err(StoreError::UnknownSession(id).into());
            }
            let events = tx.execute("DELETE FROM session_events WHERE session = ?1", [stored])?;
            let questions = tx.execute("DELETE FROM questions WHERE session = ?1", [stored])?;
            let alert_keys =
                tx.execute("DELETE FROM alert_sessions WHERE session = ?1", [stored])?;
            let credentials = tx.execute(
                "DELETE FROM credentials WHERE kind = 'session' AND name = ?1",
                [id.to_string()],
            )?;
            tx.execute("DELETE FROM sessions WHERE id = ?1", [stored])?;
            Ok(SessionDeleted {
                events: events as u64,
                questions: questions as u64,
                credentials: credentials as u64,
                alert_keys: alert_keys as u64,
            })
        })
    }

    fn append_session_event(
        &self,
        session: u64,
        doc: String,
        at_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        self.run("append a session event", true, move |tx| {
            let exists = match stored_id(session) {
                Some(id) => tx
                    .query_row("SELECT 1 FROM sessions WHERE id = ?1", [id], |_| Ok(()))
                    .optional()?
                    .is_some(),
                None => false,
            };
            if !exists {
                return Err(StoreError::UnknownSession(session).into());
            }
            let seq: i64 = tx.query_row(
                "INSERT INTO session_events (session, doc, at_ms) VALUES (?1, ?2, ?3)
                 RETURNING seq",
                (session as i64, &doc, at_ms),
                |row| row.get(0),
            )?;
            Ok(seq as u64)
        })
    }

    fn session_events(
        &self,
        session: u64,
        after: u64,
    ) -> impl Future<Output = Result<Vec<SessionEventRecord>, StoreError>> + Send {
        self.run("read session events", false, move |tx| {
            let (Some(session), Some(after)) = (stored_id(session), stored_id(after)) else {
                return Ok(Vec::new());
            };
            let mut stmt = tx.prepare(
                "SELECT seq, session, doc, at_ms FROM session_events
                 WHERE session = ?1 AND seq > ?2 ORDER BY seq",
            )?;
            let rows = stmt.query_map([session, after], |row| {
                Ok(SessionEventRecord {
                    seq: row.get::<_, i64>(0)? as u64,
                    session: row.get::<_, i64>(1)? as u64,
                    doc: row.get(2)?,
                    at_ms: row.get(3)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn create_question(
        &self,
        session: u64,
        doc: String,
        created_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        self.run("create a question", true, move |tx| {
            let exists = match stored_id(session) {
                Some(id) => tx
                    .query_row("SELECT 1 FROM sessions WHERE id = ?1", [id], |_| Ok(()))
                    .optional()?
                    .is_some(),
                None => false,
            };
            if !exists {
                return Err(StoreError::UnknownSession(session).into());
            }
            let id: i64 = tx.query_row(
                "INSERT INTO questions (session, doc, created_ms, updated_ms)
                 VALUES (?1, ?2, ?3, ?3) RETURNING id",
                (session as i64, &doc, created_ms),
                |row| row.get(0),
            )?;
            Ok(id as u64)
        })
    }

    fn put_question(
        &self,
        id: u64,
        doc: String,
        updated_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.put_doc(
            "store a question",
            "questions",
            id,
            doc,
            updated_ms,
            StoreError::UnknownQuestion,
        )
    }

    fn question(
        &self,
        id: u64,
    ) -> impl Future<Output = Result<Option<QuestionRecord>, StoreError>> + Send {
        self.get_doc("read a question", QUESTIONS, id)
    }

    fn questions(&self) -> impl Future<Output = Result<Vec<QuestionRecord>, StoreError>> + Send {
        self.list_docs("list questions", QUESTIONS)
    }

    fn create_notification(
        &self,
        dedup_key: String,
        doc: String,
        created_ms: i64,
    ) -> impl Future<Output = Result<Option<u64>, StoreError>> + Send {
        self.run("record a notification", true, move |tx| {
            let id: Option<i64> = tx
                .query_row(
                    "INSERT INTO notifications (dedup_key, doc, created_ms, updated_ms)
                     VALUES (?1, ?2, ?3, ?3) ON CONFLICT (dedup_key) DO NOTHING RETURNING id",
                    (&dedup_key, &doc, created_ms),
                    |row| row.get(0),
                )
                .optional()?;
            Ok(id.map(|i| i as u64))
        })
    }

    fn put_notification(
        &self,
        id: u64,
        doc: String,
        updated_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.put_doc(
            "store a notification",
            "notifications",
            id,
            doc,
            updated_ms,
            StoreError::UnknownNotification,
        )
    }

    fn notifications(
        &self,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<NotificationRecord>, StoreError>> + Send {
        self.run("list notifications", false, move |tx| {
            let mut stmt = tx.prepare(
                "SELECT id, dedup_key, doc, created_ms, updated_ms FROM notifications
                 ORDER BY id DESC LIMIT ?1",
            )?;
            let rows = stmt.query_map([limit as i64], |row| {
                Ok(NotificationRecord {
                    id: row.get::<_, i64>(0)? as u64,
                    dedup_key: row.get(1)?,
                    doc: row.get(2)?,
                    created_ms: row.get(3)?,
                    updated_ms: row.get(4)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.run("ping the database", false, |tx| {
            tx.query_row("SELECT 1", [], |_| Ok(()))?;
            Ok(())
        })
    }

    fn create_ui_link(
        &self,
        link: NewUiLink,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        self.run("create a dashboard sign-in link", true, move |tx| {
            let id: Option<i64> = tx
                .query_row(
                    "INSERT INTO ui_links (credential_hash, role, created_by, created_ms, expires_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (credential_hash) DO NOTHING RETURNING id",
                    (
                        &link.credential_hash,
                        link.role.as_str(),
                        &link.created_by,
                        link.created_ms,
                        link.expires_ms,
                    ),
                    |row| row.get(0),
                )
                .optional()?;
            match id {
                Some(id) => Ok(id as u64),
                None => Err(StoreError::AlreadyExists {
                    what: "a dashboard sign-in link with this hash",
                }
                .into()),
            }
        })
    }

    fn redeem_ui_link(
        &self,
        credential_hash: String,
        now_ms: i64,
    ) -> impl Future<Output = Result<UiLinkRedeem, StoreError>> + Send {
        self.run("redeem a dashboard sign-in link", true, move |tx| {
            let won: Option<(i64, String)> = tx
                .query_row(
                    "UPDATE ui_links SET used_ms = ?2
                     WHERE credential_hash = ?1 AND revoked_ms IS NULL AND used_ms IS NULL
                       AND expires_ms > ?2
                     RETURNING id, role",
                    (&credential_hash, now_ms),
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()?;
            if let Some((id, role)) = won {
                return Ok(UiLinkRedeem::SignedIn {
                    id: id as u64,
                    role: stored_ui_role(&role),
                });
            }
            let row = tx
                .query_row(
                    "SELECT revoked_ms, used_ms, expires_ms FROM ui_links WHERE credential_hash = ?1",
                    [&credential_hash],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                )
                .optional()?;
            Ok(ui_link_refusal(row, now_ms))
        })
    }

    fn ui_links(&self) -> impl Future<Output = Result<Vec<UiLinkRecord>, StoreError>> + Send {
        self.run("list dashboard sign-in links", false, move |tx| {
            let mut stmt = tx.prepare(
                "SELECT id, role, created_by, created_ms, expires_ms, used_ms, revoked_ms
                 FROM ui_links ORDER BY id DESC",
            )?;
            let rows = stmt.query_map([], |row| {
                Ok(UiLinkRecord {
                    id: row.get::<_, i64>(0)? as u64,
                    role: stored_ui_role(&row.get::<_, String>(1)?),
                    created_by: row.get(2)?,
                    created_ms: row.get(3)?,
                    expires_ms: row.get(4)?,
                    used_ms: row.get(5)?,
                    revoked_ms: row.get(6)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    fn revoke_ui_link(
        &self,
        id: u64,
        now_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.run("revoke a dashboard sign-in link", true, move |tx| {
            let Some(stored) = stored_id(id) else {
                return Ok(false);
            };
            let n = tx.execute(
                "UPDATE ui_links SET revoked_ms = ?2 WHERE id = ?1 AND revoked_ms IS NULL",
                (stored, now_ms),
            )?;
            Ok(n == 1)
        })
    }
}

/// A kind of document row: its table and columns ([`super::DocTable`]) and how a
/// row of them becomes a record in this backend.
struct DocKind<R> {
    table: super::DocTable,
    row: fn(&rusqlite::Row<'_>) -> rusqlite::Result<R>,
}

const ROLLOUTS: DocKind<RolloutRecord> = DocKind {
    table: super::ROLLOUT_DOCS,
    row: rollout_row,
};

const SESSIONS: DocKind<SessionRecord> = DocKind {
    table: super::SESSION_DOCS,
    row: session_row,
};

const QUESTIONS: DocKind<QuestionRecord> = DocKind {
    table: super::QUESTION_DOCS,
    row: question_row,
};

fn session_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<SessionRecord> {
    Ok(SessionRecord {
        id: row.get::<_, i64>(0)? as u64,
        doc: row.get(1)?,
        created_ms: row.get(2)?,
        updated_ms: row.get(3)?,
        version: row.get::<_, i64>(4)? as u64,
    })
}

fn question_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<QuestionRecord> {
    Ok(QuestionRecord {
        id: row.get::<_, i64>(0)? as u64,
        session: row.get::<_, i64>(1)? as u64,
        doc: row.get(2)?,
        created_ms: row.get(3)?,
        updated_ms: row.get(4)?,
        version: row.get::<_, i64>(5)? as u64,
    })
}

fn call_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<QueuedCall> {
    Ok(QueuedCall {
        id: row.get::<_, i64>(0)? as u64,
        host: row.get(1)?,
        call: row.get(2)?,
        created_ms: row.get(3)?,
        reply: row.get(4)?,
        replied_ms: row.get(5)?,
    })
}

fn release_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<ReleaseRecord> {
    Ok(ReleaseRecord {
        name: row.get(0)?,
        version: row.get(1)?,
        serial: row.get::<_, i64>(2)? as u64,
        manifest: row.get(3)?,
        signature: row.get(4)?,
        published_by: row.get(5)?,
        created_ms: row.get(6)?,
    })
}

fn unskip_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<UnskipRecord> {
    Ok(UnskipRecord {
        id: row.get::<_, i64>(0)? as u64,
        host: row.get(1)?,
        doc: row.get(2)?,
        pending: row.get::<_, i64>(3)? != 0,
        created_ms: row.get(4)?,
        updated_ms: row.get(5)?,
    })
}

fn rollout_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RolloutRecord> {
    Ok(RolloutRecord {
        id: row.get::<_, i64>(0)? as u64,
        name: row.get(1)?,
        doc: row.get(2)?,
        created_ms: row.get(3)?,
        updated_ms: row.get(4)?,
        version: row.get::<_, i64>(5)? as u64,
    })
}

/// The columns [`credential_row`] reads.
const CREDENTIAL_COLUMNS: &str =
    "credential_hash, kind, name, created_ms, last_used_ms, last_address, revoked_ms";

/// A credential row (`None` for a kind this build does not know).
fn credential_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Option<CredentialRecord>> {
    let kind: String = row.get(1)?;
    let Some(principal) = principal_from_columns(&kind, row.get(2)?) else {
        return Ok(None);
    };
    Ok(Some(CredentialRecord {
        credential_hash: row.get(0)?,
        principal,
        created_ms: row.get(3)?,
        last_used_ms: row.get(4)?,
        last_address: row.get(5)?,
        revoked_ms: row.get(6)?,
    }))
}

/// The columns [`join_token_row`] reads.
const JOIN_TOKEN_COLUMNS: &str =
    "token_hash, host, created_ms, expires_ms, used_ms, revoked_ms, keep_credentials";

fn join_token_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<JoinTokenRecord> {
    Ok(JoinTokenRecord {
        token_hash: row.get(0)?,
        host: row.get(1)?,
        created_ms: row.get(2)?,
        expires_ms: row.get(3)?,
        used_ms: row.get(4)?,
        revoked_ms: row.get(5)?,
        keep_credentials: row.get(6)?,
    })
}

/// The hashes in `table`'s `column` that start with `prefix` (`len` characters),
/// at most a few (enough to say it is ambiguous).
fn matching(
    tx: &Transaction<'_>,
    table: &str,
    column: &str,
    prefix: &str,
    len: i64,
) -> rusqlite::Result<Vec<String>> {
    let sql = format!(
        "SELECT {column} FROM {table} WHERE substr({column}, 1, ?2) = ?1 ORDER BY {column} LIMIT 10"
    );
    let mut stmt = tx.prepare(&sql)?;
    let rows = stmt.query_map((prefix, len), |row| row.get(0))?;
    rows.collect()
}

/// Inserts a credential; [`StoreError::AlreadyExists`] when its hash is taken.
fn insert_credential(
    tx: &Transaction<'_>,
    credential_hash: &str,
    kind: &str,
    name: &str,
    created_ms: i64,
) -> Result<(), TxError> {
    let n = tx.execute(
        "INSERT INTO credentials (credential_hash, kind, name, created_ms) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (credential_hash) DO NOTHING",
        (credential_hash, kind, name, created_ms),
    )?;
    if n == 0 {
        return Err(StoreError::AlreadyExists {
            what: "a credential with this hash",
        }
        .into());
    }
    Ok(())
}

/// Makes an authority database at `path` holding only the first `version`
/// migrations (an older Flotilla's file), for tests of what opening it does.
///
/// # Errors
/// As [`SqliteAuthority::open`].
#[cfg(any(test, feature = "testing"))]
pub(crate) fn create_at_version(path: &Path, version: i64) -> Result<(), StoreError> {
    let mut conn = Connection::open(path).map_err(|source| StoreError::Open {
        path: path.to_owned(),
        source,
    })?;
    crate::store::prepare(&conn, path, AUTHORITY_APPLICATION_ID, true)?;
    let classify = |source: rusqlite::Error| classify_open(path, source);
    let upto = MIGRATIONS
        .iter()
        .position(|m| m.version == version)
        .map_or(0, |i| i + 1);
    schema::apply(&mut conn, path, classify, &MIGRATIONS[..upto], None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::BlobRefs;

    #[test]
    fn migrations_are_numbered_one_by_one() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1, "{}", m.description);
        }
    }

    #[test]
    fn file_is_wal_with_synchronous_full() {
        let dir = tempfile::tempdir().unwrap();
        let authority = SqliteAuthority::open(&dir.path().join(AUTHORITY_DB_FILE)).unwrap();
        let conn = authority.inner.conn.lock().unwrap();
        let synchronous: i64 = conn
            .pragma_query_value(None, "synchronous", |row| row.get(0))
            .unwrap();
        assert_eq!(synchronous, 2, "synchronous=FULL");
        let mode: String = conn
            .pragma_query_value(None, "journal_mode", |row| row.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let version = schema::current_version(&conn).unwrap();
        assert_eq!(version, AUTHORITY_SCHEMA_VERSION);
    }

    /// A database made by an older build (schema 2, with data) is brought up to
    /// the current schema on open, keeping its data.
    #[test]
    fn schema_2_is_upgraded_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(AUTHORITY_DB_FILE);
        {
            let mut conn = Connection::open(&path).unwrap();
            crate::store::prepare(&conn, &path, AUTHORITY_APPLICATION_ID, true).unwrap();
            let classify = |source: rusqlite::Error| classify_open(&path, source);
            schema::apply(&mut conn, &path, classify, &MIGRATIONS[..2], None).unwrap();
            assert_eq!(schema::current_version(&conn).unwrap(), 2);
            conn.execute(
                "INSERT INTO agent_calls (host, call, created_ms) VALUES ('studio', '{}', 1)",
                [],
            )
            .unwrap();
        }
        let authority = SqliteAuthority::open(&path).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            assert_eq!(authority.last_call_id().await.unwrap(), 1);
            assert!(authority.put_blob("ab".repeat(32), 3, 1).await.unwrap());
            assert_eq!(
                authority
                    .create_rollout("{}".into(), "flotilla".into(), 2)
                    .await
                    .unwrap(),
                1
            );
        });
        let conn = authority.inner.conn.lock().unwrap();
        assert_eq!(
            schema::current_version(&conn).unwrap(),
            AUTHORITY_SCHEMA_VERSION
        );
    }

    #[test]
    fn application_id_literal_matches_constant() {
        assert!(MIGRATIONS[0].sql.contains(&format!(
            "PRAGMA application_id = {AUTHORITY_APPLICATION_ID};"
        )));
    }
}
