//! [`PostgresAuthority`]: the authority's store in a PostgreSQL database
//! (`flotilla serve --database-url postgres://…`), through tokio-postgres without
//! TLS (`NoTls`: a loopback or trusted-network server).
//!
//! - **Schema**: forward-only migrations, the same numbering as the SQLite ones
//!   ([`AUTHORITY_SCHEMA_VERSION`]), recorded in [`POSTGRES_SCHEMA_TABLE`] and
//!   applied by [`PostgresAuthority::connect`] in one transaction under an advisory
//!   lock (several authorities starting at once apply them once). The tables have
//!   plain names (`revisions`, `selections`, …): give the authority a database of
//!   its own.
//! - **Atomicity**: publish and select lock the selection log (`LOCK TABLE
//!   selections IN EXCLUSIVE MODE`, which readers pass) before reading the current
//!   selection, so two concurrent calls with the same `expect`, from one authority
//!   or several, are serialised and the second sees the first's selection. A
//!   redeem is one conditional `UPDATE … RETURNING`: of two concurrent ones, the
//!   second waits for the first's row lock and then finds the token used.
//!   Queuing an agent call takes a transaction-scoped advisory lock
//!   (key `FLTC`) and gives the next id (`MAX(id) + 1`), so ids have no
//!   gaps and are visible in id order: an agent's `after` cursor never skips a
//!   call committed late. A reply is one conditional `UPDATE` (exactly one of two
//!   concurrent ones matches).
//! - **Blobs and releases**: a blob's reference is one `INSERT … ON CONFLICT DO
//!   UPDATE` (its bytes are files, [`crate::blobs`]): of concurrent puts of one
//!   digest, the one that inserted is new. A release is one `INSERT … ON CONFLICT DO
//!   NOTHING` on (name, version), then a read of the row that won. Rollout ids
//!   come from an identity column (only increasing, never reused; a failed
//!   creation may leave a gap).
//! - **Connections**: a small `deadpool-postgres` pool (at most
//!   [`POSTGRES_MAX_CONNECTIONS`]; further calls wait), opened on demand; a
//!   connection found closed when taken (server restarted, network cut) is dropped
//!   and another taken or opened (`RecyclingMethod::Fast`: no query per checkout).
//!   The pool is shared by clones.

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
use crate::schema::{BeforePostgresMigration, PendingMigration};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod};
use std::time::Duration;
use tokio_postgres::{Client, Config, NoTls, Row, Transaction};

mod blob_refs;

/// The table that records the applied schema migrations (`version`,
/// `description`).
pub const POSTGRES_SCHEMA_TABLE: &str = "flotilla_authority_schema";

/// The most connections one [`PostgresAuthority`] (and its clones) opens at once;
/// further calls wait for a free one.
pub const POSTGRES_MAX_CONNECTIONS: usize = 8;

/// How long opening a connection may take when the URL sets no `connect_timeout`.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The advisory lock key held while migrating (`FLTA` in ASCII).
const MIGRATION_LOCK_KEY: i64 = 0x464C_5441;

/// The advisory lock key held while queuing an agent call (`FLTC` in ASCII).
const ENQUEUE_LOCK_KEY: i64 = 0x464C_5443;

/// One PostgreSQL migration.
struct Migration {
    /// Its number: 1, 2, 3… (the same as the SQLite migration of that number).
    version: i64,
    /// One line, recorded in [`POSTGRES_SCHEMA_TABLE`].
    description: &'static str,
    /// The SQL, run as one batch.
    sql: &'static str,
}

/// Every migration, in order. Never edit a released entry: append (and the same
/// version to the SQLite list).
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "revisions, selection log, join tokens, credentials, host reports",
        sql: r#"
-- Immutable desired states, named by the SHA-256 of their canonical JSON. `seq`
-- orders them by when they were stored. Times: ms since the Unix epoch, given by
-- the caller.
CREATE TABLE revisions (
    seq          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    digest       TEXT   NOT NULL UNIQUE,
    content      TEXT   NOT NULL,
    created_ms   BIGINT NOT NULL,
    published_by TEXT   NOT NULL
);

-- The selection log: the current revision is the one with the highest idx.
-- idx is 1, 2, 3… (the agents' long-poll index).
CREATE TABLE selections (
    idx         BIGINT PRIMARY KEY CHECK (idx >= 1),
    digest      TEXT   NOT NULL REFERENCES revisions (digest),
    selected_ms BIGINT NOT NULL,
    selected_by TEXT   NOT NULL
);

-- One-time join tokens, by hash (never the token), each bound to one host.
CREATE TABLE join_tokens (
    token_hash      TEXT   PRIMARY KEY,
    host            TEXT   NOT NULL,
    created_ms      BIGINT NOT NULL,
    expires_ms      BIGINT NOT NULL,
    used_ms         BIGINT,                -- NULL while unused
    credential_hash TEXT,                  -- the credential it was exchanged for
    CHECK ((used_ms IS NULL) = (credential_hash IS NULL))
);

-- Credentials, by hash (never the credential): who holds each.
CREATE TABLE credentials (
    credential_hash TEXT   PRIMARY KEY,
    kind            TEXT   NOT NULL CHECK (kind IN ('operator', 'agent')),
    name            TEXT   NOT NULL,       -- the operator's name or the agent's host
    created_ms      BIGINT NOT NULL
);

-- The last report of each host.
CREATE TABLE host_reports (
    host        TEXT   PRIMARY KEY,
    revision    TEXT,
    report      TEXT   NOT NULL,           -- JSON, as received
    received_ms BIGINT NOT NULL
);
"#,
    },
    Migration {
        version: 2,
        description: "agent call queue",
        sql: r#"
-- Calls (steps, observations) queued for a host's agent, each answered at most
-- once. id: 1, 2, 3… across all hosts, given as MAX(id) + 1 under an advisory
-- lock (no gaps, visible in order). call and reply: JSON, stored as given.
CREATE TABLE agent_calls (
    id         BIGINT PRIMARY KEY CHECK (id >= 1),
    host       TEXT   NOT NULL,
    call       TEXT   NOT NULL,
    created_ms BIGINT NOT NULL,
    reply      TEXT,                       -- NULL until answered
    replied_ms BIGINT,
    CHECK ((reply IS NULL) = (replied_ms IS NULL))
);
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
-- empty blob), so no value nears bytea's 1 GB limit.
CREATE TABLE blobs (
    sha256 TEXT   PRIMARY KEY,
    size   BIGINT NOT NULL CHECK (size >= 0)
);
CREATE TABLE blob_chunks (
    sha256 TEXT   NOT NULL REFERENCES blobs (sha256),
    n      BIGINT NOT NULL CHECK (n >= 0),
    bytes  BYTEA  NOT NULL,
    PRIMARY KEY (sha256, n)
);
-- Out of line, uncompressed: artifacts rarely compress, and trying costs time.
ALTER TABLE blob_chunks ALTER COLUMN bytes SET STORAGE EXTERNAL;

-- Signed release manifests, one per (name, version), never replaced. manifest:
-- the exact bytes signed; signature: minisign text. seq orders them by when they
-- were stored.
CREATE TABLE releases (
    seq          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         TEXT   NOT NULL,
    version      TEXT   NOT NULL,
    serial       BIGINT NOT NULL CHECK (serial >= 0),
    manifest     BYTEA  NOT NULL,
    signature    TEXT   NOT NULL,
    published_by TEXT   NOT NULL,
    created_ms   BIGINT NOT NULL,
    UNIQUE (name, version)
);

-- Rollouts: JSON documents (the state machine lives in flotilla-release).
-- id: 1, 2, 3… from an identity column (only increasing, never reused).
CREATE TABLE rollouts (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       TEXT   NOT NULL,
    doc        TEXT   NOT NULL,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL
);

-- The last update report of each host's agent (JSON, as received).
CREATE TABLE host_updates (
    host        TEXT   PRIMARY KEY,
    doc         TEXT   NOT NULL,
    received_ms BIGINT NOT NULL
);
"#,
    },
    Migration {
        version: 4,
        description: "agent sessions: sessions, their events, questions, alert keys",
        sql: r#"
-- Credentials gain two kinds: a session's runtime and an alert sender.
ALTER TABLE credentials DROP CONSTRAINT credentials_kind_check;
ALTER TABLE credentials ADD CONSTRAINT credentials_kind_check
    CHECK (kind IN ('operator', 'agent', 'session', 'alerts'));

-- Agent sessions: JSON documents (their meaning lives in flotilla-server).
CREATE TABLE sessions (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    doc        TEXT   NOT NULL,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL
);

-- Each session's log, append-only.
CREATE TABLE session_events (
    seq     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session BIGINT NOT NULL REFERENCES sessions (id),
    doc     TEXT   NOT NULL,
    at_ms   BIGINT NOT NULL
);
CREATE INDEX session_events_by_session ON session_events (session, seq);

-- Durable questions asked of a human.
CREATE TABLE questions (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session    BIGINT NOT NULL REFERENCES sessions (id),
    doc        TEXT   NOT NULL,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL
);

-- The alert (deduplication key) that opened each alert session.
CREATE TABLE alert_sessions (
    alert_key TEXT   PRIMARY KEY,
    session   BIGINT NOT NULL REFERENCES sessions (id)
);
"#,
    },
    Migration {
        version: 5,
        description: "unskip requests",
        sql: r#"
-- Operators' requests to clear a release version from a host's skip lists: JSON
-- documents (their meaning lives in flotilla-server), pending until the host's
-- agent reported the entries gone. id: 1, 2, 3… from an identity column (only
-- increasing, never reused).
CREATE TABLE unskips (
    id         BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    host       TEXT    NOT NULL,
    doc        TEXT    NOT NULL,
    pending    BOOLEAN NOT NULL,
    created_ms BIGINT  NOT NULL,
    updated_ms BIGINT  NOT NULL
);
CREATE INDEX unskips_pending ON unskips (id) WHERE pending;
"#,
    },
    Migration {
        version: 6,
        description: "dashboard sign-in links",
        sql: r#"
-- Dashboard sign-in links (`flotilla serve ui-link`), by their credential's hash
-- (never the credential): one use each, with a role; revoking one ends the
-- dashboard sessions it opened. id: 1, 2, 3… from an identity column.
CREATE TABLE ui_links (
    id              BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    credential_hash TEXT    NOT NULL UNIQUE,
    role            TEXT    NOT NULL CHECK (role IN ('operator', 'viewer')),
    created_by      TEXT    NOT NULL,
    created_ms      BIGINT  NOT NULL,
    expires_ms      BIGINT  NOT NULL,
    used_ms         BIGINT,
    revoked_ms      BIGINT
);
"#,
    },
    Migration {
        version: 7,
        description: "notifications",
        sql: r#"
-- Notifications posted to webhooks: JSON documents (their meaning lives in
-- flotilla-server) with their deliveries; one per event (dedup_key).
CREATE TABLE notifications (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dedup_key  TEXT   NOT NULL UNIQUE,
    doc        TEXT   NOT NULL,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL
);
"#,
    },
    Migration {
        version: 8,
        description: "credentials: metrics kind, last use, revocation; join tokens: revocation",
        sql: r#"
-- Credentials gain a kind (a metrics scraper), when and from where each was last
-- used (rewritten at most once a minute) and when it was revoked (kept for the
-- listing; a revoked credential is refused).
ALTER TABLE credentials DROP CONSTRAINT credentials_kind_check;
ALTER TABLE credentials ADD CONSTRAINT credentials_kind_check
    CHECK (kind IN ('operator', 'agent', 'session', 'alerts', 'metrics'));
ALTER TABLE credentials ADD COLUMN last_used_ms BIGINT;
ALTER TABLE credentials ADD COLUMN last_address TEXT;
ALTER TABLE credentials ADD COLUMN revoked_ms BIGINT;
CREATE INDEX credentials_by_principal ON credentials (kind, name);

-- Join tokens can be revoked before use; one made with keep_credentials leaves
-- its host's older agent credentials valid when redeemed (else they are revoked
-- then).
ALTER TABLE join_tokens ADD COLUMN revoked_ms BIGINT;
ALTER TABLE join_tokens ADD COLUMN keep_credentials BOOLEAN NOT NULL DEFAULT FALSE;
"#,
    },
    Migration {
        version: 9,
        description: "blobs on the file system: the database keeps references",
        sql: r#"
-- Blob bytes move to files beside the database (`<blob dir>/sha256/ab/cdef…`):
-- a row now says a blob exists. on_disk: true once its bytes are a file (false:
-- still in blob_chunks, moved out when the authority starts); stored_ms: its
-- last upload (garbage collection spares a blob uploaded within its grace).
ALTER TABLE blobs ADD COLUMN on_disk BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE blobs ADD COLUMN stored_ms BIGINT NOT NULL DEFAULT 0;
"#,
    },
    Migration {
        version: 10,
        description: "several authorities: document versions, leases, the CA's pin",
        sql: r#"
-- Documents read, changed and written back carry a version: a write names the
-- version it read and fails when another writer came first (compare-and-swap).
ALTER TABLE rollouts  ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
ALTER TABLE sessions  ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
ALTER TABLE questions ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
-- (Notifications share the documents' writes: they carry one too.)
ALTER TABLE notifications ADD COLUMN version BIGINT NOT NULL DEFAULT 1;

-- Background work done by one authority at a time: who holds it, until when
-- (the database's clock: now() at the last renewal plus the lease's time).
CREATE TABLE leases (
    name       TEXT        PRIMARY KEY,
    holder     TEXT        NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);

-- Facts every authority sharing the database must agree on (`ca_pin`: the pin
-- of the CA its clients trust), set by the first to start.
CREATE TABLE authority_identity (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"#,
    },
];

const _: () = assert!(MIGRATIONS[MIGRATIONS.len() - 1].version == AUTHORITY_SCHEMA_VERSION);

/// The authority's store in a PostgreSQL database. Cheap to clone (an `Arc`):
/// clones share the connection pool. See the [module docs](self).
#[derive(Clone)]
pub struct PostgresAuthority {
    pool: Pool,
    /// How connections are opened (the listener opens one of its own).
    pub(super) config: std::sync::Arc<Config>,
}

impl std::fmt::Debug for PostgresAuthority {
    // Not the config: it may hold a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresAuthority")
            .field("max_connections", &POSTGRES_MAX_CONNECTIONS)
            .finish_non_exhaustive()
    }
}

impl PostgresAuthority {
    /// Connects to the database at `url` (a libpq connection string:
    /// `postgres://user[:password]@host[:port]/dbname[?…]` or `key=value …`),
    /// without TLS, and brings its schema up to [`AUTHORITY_SCHEMA_VERSION`]. Sets
    /// `application_name=flotilla` and a 10 s connect timeout unless the URL sets
    /// them. Must run inside a Tokio runtime.
    ///
    /// # Errors
    /// [`StoreError::PostgresConnect`] (invalid URL, server unreachable,
    /// authentication refused, no such database),
    /// [`StoreError::PostgresSchemaTooNew`], [`StoreError::PostgresMigration`],
    /// [`StoreError::Postgres`].
    pub async fn connect(url: &str) -> Result<PostgresAuthority, StoreError> {
        PostgresAuthority::connect_with(url, None).await
    }

    /// [`PostgresAuthority::connect`], awaiting `before` (when given) before
    /// migrating a database that holds data and has an older schema, inside the
    /// migration's transaction (see [`BeforePostgresMigration`]): how `flotilla
    /// serve` backs the database up before a migration.
    ///
    /// # Errors
    /// As [`PostgresAuthority::connect`], and
    /// [`StoreError::BackupBeforeMigration`] when `before` fails (nothing was
    /// migrated).
    pub async fn connect_with(
        url: &str,
        before: Option<&BeforePostgresMigration>,
    ) -> Result<PostgresAuthority, StoreError> {
        let mut config: Config = url
            .parse()
            .map_err(|source| StoreError::PostgresConnect { source })?;
        if config.get_application_name().is_none() {
            config.application_name("flotilla");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
        }
        let shared_config = std::sync::Arc::new(config.clone());
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POSTGRES_MAX_CONNECTIONS)
            .build()
            .expect("a pool without timeouts or hooks needs no runtime to build");
        let authority = PostgresAuthority {
            pool,
            config: shared_config,
        };
        {
            let mut conn = authority.conn().await?;
            migrate_with(&mut conn, MIGRATIONS, before).await?;
        }
        Ok(authority)
    }

    /// The schema version recorded in the database (equal to
    /// [`AUTHORITY_SCHEMA_VERSION`] once connected).
    ///
    /// # Errors
    /// [`StoreError::Postgres`] or [`StoreError::PostgresConnect`].
    pub async fn schema_version(&self) -> Result<i64, StoreError> {
        let conn = self.conn().await?;
        let row = conn
            .query_one(
                &format!("SELECT COALESCE(MAX(version), 0) FROM {POSTGRES_SCHEMA_TABLE}"),
                &[],
            )
            .await
            .map_err(pg("read the schema version"))?;
        Ok(row.get(0))
    }

    /// Replaces document `id` of `table` (one of `rollouts`, `sessions`,
    /// `questions`: each has `id`, `doc` and `updated_ms`); `unknown(id)` when it
    /// has no such row.
    async fn put_doc(
        &self,
        context: &'static str,
        table: &'static str,
        id: u64,
        doc: String,
        updated_ms: i64,
        unknown: fn(u64) -> StoreError,
    ) -> Result<(), StoreError> {
        let Some(stored) = stored_id(id) else {
            return Err(unknown(id));
        };
        let conn = self.conn().await?;
        let n = conn
            .execute(
                &format!("UPDATE {table} SET doc = $2, updated_ms = $3, version = version + 1 WHERE id = $1"),
                &[&stored, &doc, &updated_ms],
            )
            .await
            .map_err(pg(context))?;
        if n == 0 {
            return Err(unknown(id));
        }
        Ok(())
    }

    /// A connection from the pool (waits while all are in use), opening one when
    /// none is idle.
    /// One document of `kind` by id; `None` when there is none.
    async fn get_doc<R>(
        &self,
        context: &'static str,
        kind: &DocKind<R>,
        id: u64,
    ) -> Result<Option<R>, StoreError> {
        let Some(id) = stored_id(id) else {
            return Ok(None);
        };
        let conn = self.conn().await?;
        let sql = format!(
            "SELECT {} FROM {} WHERE id = $1",
            kind.table.columns, kind.table.name
        );
        let row = conn.query_opt(&sql, &[&id]).await.map_err(pg(context))?;
        Ok(row.map(|row| (kind.row)(&row)))
    }

    /// Every document of `kind`, newest first.
    async fn list_docs<R>(
        &self,
        context: &'static str,
        kind: &DocKind<R>,
    ) -> Result<Vec<R>, StoreError> {
        let conn = self.conn().await?;
        let sql = format!(
            "SELECT {} FROM {} ORDER BY id DESC",
            kind.table.columns, kind.table.name
        );
        let rows = conn.query(&sql, &[]).await.map_err(pg(context))?;
        Ok(rows.iter().map(kind.row).collect())
    }

    pub(super) async fn conn(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(|e| match e {
            PoolError::Backend(source) => StoreError::PostgresConnect { source },
            // No timeouts, hooks or closing are configured: not expected.
            other => StoreError::PostgresPool {
                why: other.to_string(),
            },
        })
    }
}

/// Maps a tokio-postgres error met while doing `context`.
pub(super) fn pg(context: &'static str) -> impl Fn(tokio_postgres::Error) -> StoreError + Copy {
    move |source| StoreError::Postgres { context, source }
}

/// Applies the pending ones of `migrations` (a prefix of [`MIGRATIONS`]) in one
/// transaction, under an advisory lock.
async fn migrate_with(
    client: &mut Client,
    migrations: &[Migration],
    before: Option<&BeforePostgresMigration>,
) -> Result<(), StoreError> {
    let supported = migrations.last().map_or(0, |m| m.version);
    let e = pg("migrate the schema");
    let tx = client.transaction().await.map_err(e)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK_KEY])
        .await
        .map_err(e)?;
    tx.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {POSTGRES_SCHEMA_TABLE} (
             version     BIGINT PRIMARY KEY,
             description TEXT   NOT NULL
         )"
    ))
    .await
    .map_err(e)?;
    let found: i64 = tx
        .query_one(
            &format!("SELECT COALESCE(MAX(version), 0) FROM {POSTGRES_SCHEMA_TABLE}"),
            &[],
        )
        .await
        .map_err(e)?
        .get(0);
    if found > supported {
        return Err(StoreError::PostgresSchemaTooNew { found, supported });
    }
    if let Some(before) = before.filter(|_| found > 0 && found < supported) {
        let pending = PendingMigration {
            path: None,
            found,
            target: supported,
        };
        before(pending)
            .await
            .map_err(|source| StoreError::BackupBeforeMigration {
                database: "the authority's PostgreSQL database".into(),
                found,
                target: supported,
                source,
            })?;
    }
    for m in migrations.iter().filter(|m| m.version > found) {
        let failed = |source| StoreError::PostgresMigration {
            version: m.version,
            source,
        };
        tx.batch_execute(m.sql).await.map_err(failed)?;
        tx.execute(
            &format!("INSERT INTO {POSTGRES_SCHEMA_TABLE} (version, description) VALUES ($1, $2)"),
            &[&m.version, &m.description],
        )
        .await
        .map_err(failed)?;
    }
    tx.commit().await.map_err(e)
}

fn selection_row(row: &Row) -> Selection {
    Selection {
        index: row.get::<_, i64>(0) as u64,
        digest: row.get(1),
        selected_ms: row.get(2),
        selected_by: row.get(3),
    }
}

fn call_row(row: &Row) -> QueuedCall {
    QueuedCall {
        id: row.get::<_, i64>(0) as u64,
        host: row.get(1),
        call: row.get(2),
        created_ms: row.get(3),
        reply: row.get(4),
        replied_ms: row.get(5),
    }
}

fn release_row(row: &Row) -> ReleaseRecord {
    ReleaseRecord {
        name: row.get(0),
        version: row.get(1),
        serial: row.get::<_, i64>(2) as u64,
        manifest: row.get(3),
        signature: row.get(4),
        published_by: row.get(5),
        created_ms: row.get(6),
    }
}

/// A kind of document row: its table and columns ([`super::DocTable`]) and how a
/// row of them becomes a record in this backend.
struct DocKind<R> {
    table: super::DocTable,
    row: fn(&Row) -> R,
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

fn session_row(row: &Row) -> SessionRecord {
    SessionRecord {
        id: row.get::<_, i64>(0) as u64,
        doc: row.get(1),
        created_ms: row.get(2),
        updated_ms: row.get(3),
        version: row.get::<_, i64>(4) as u64,
    }
}

fn question_row(row: &Row) -> QuestionRecord {
    QuestionRecord {
        id: row.get::<_, i64>(0) as u64,
        session: row.get::<_, i64>(1) as u64,
        doc: row.get(2),
        created_ms: row.get(3),
        updated_ms: row.get(4),
        version: row.get::<_, i64>(5) as u64,
    }
}

fn unskip_row(row: &Row) -> UnskipRecord {
    UnskipRecord {
        id: row.get::<_, i64>(0) as u64,
        host: row.get(1),
        doc: row.get(2),
        pending: row.get(3),
        created_ms: row.get(4),
        updated_ms: row.get(5),
    }
}

fn rollout_row(row: &Row) -> RolloutRecord {
    RolloutRecord {
        id: row.get::<_, i64>(0) as u64,
        name: row.get(1),
        doc: row.get(2),
        created_ms: row.get(3),
        updated_ms: row.get(4),
        version: row.get::<_, i64>(5) as u64,
    }
}

/// Locks the selection log for the rest of `tx` (writers wait, readers pass) and
/// decides the compare-and-swap on the current selection.
async fn lock_and_decide(
    tx: &Transaction<'_>,
    digest: &str,
    expect: Option<&str>,
    context: &'static str,
) -> Result<Cas, StoreError> {
    tx.batch_execute("LOCK TABLE selections IN EXCLUSIVE MODE")
        .await
        .map_err(pg(context))?;
    let current = tx
        .query_opt(
            "SELECT idx, digest, selected_ms, selected_by FROM selections ORDER BY idx DESC LIMIT 1",
            &[],
        )
        .await
        .map_err(pg(context))?
        .map(|row| selection_row(&row));
    Ok(decide(current, digest, expect))
}

/// Appends the selection `index` of `digest`.
async fn append_selection(
    tx: &Transaction<'_>,
    index: u64,
    digest: &str,
    at_ms: i64,
    by: &str,
    context: &'static str,
) -> Result<SelectOutcome, StoreError> {
    tx.execute(
        "INSERT INTO selections (idx, digest, selected_ms, selected_by) VALUES ($1, $2, $3, $4)",
        &[&(index as i64), &digest, &at_ms, &by],
    )
    .await
    .map_err(pg(context))?;
    Ok(SelectOutcome::Selected(Selection {
        index,
        digest: digest.to_owned(),
        selected_ms: at_ms,
        selected_by: by.to_owned(),
    }))
}

/// The columns [`credential_row`] reads.
const CREDENTIAL_COLUMNS: &str =
    "credential_hash, kind, name, created_ms, last_used_ms, last_address, revoked_ms";

/// A credential row (`None` for a kind this build does not know).
fn credential_row(row: &Row) -> Option<CredentialRecord> {
    let principal = principal_from_columns(row.get(1), row.get(2))?;
    Some(CredentialRecord {
        credential_hash: row.get(0),
        principal,
        created_ms: row.get(3),
        last_used_ms: row.get(4),
        last_address: row.get(5),
        revoked_ms: row.get(6),
    })
}

/// The columns [`join_token_row`] reads.
const JOIN_TOKEN_COLUMNS: &str =
    "token_hash, host, created_ms, expires_ms, used_ms, revoked_ms, keep_credentials";

fn join_token_row(row: &Row) -> JoinTokenRecord {
    JoinTokenRecord {
        token_hash: row.get(0),
        host: row.get(1),
        created_ms: row.get(2),
        expires_ms: row.get(3),
        used_ms: row.get(4),
        revoked_ms: row.get(5),
        keep_credentials: row.get(6),
    }
}

/// The hashes in `table`'s `column` that start with `prefix` (`len` characters),
/// at most a few (enough to say it is ambiguous), row-locked until `tx` ends.
async fn matching(
    tx: &Transaction<'_>,
    table: &str,
    column: &str,
    prefix: &str,
    len: i64,
    context: &'static str,
) -> Result<Vec<String>, StoreError> {
    let sql = format!(
        "SELECT {column} FROM {table} WHERE substr({column}, 1, $2::INT) = $1
         ORDER BY {column} LIMIT 10 FOR UPDATE"
    );
    let len = len as i32;
    let rows = tx
        .query(&sql, &[&prefix, &len])
        .await
        .map_err(pg(context))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Inserts a credential; [`StoreError::AlreadyExists`] when its hash is taken.
async fn insert_credential(
    tx: &Transaction<'_>,
    credential_hash: &str,
    kind: &str,
    name: &str,
    created_ms: i64,
    context: &'static str,
) -> Result<(), StoreError> {
    let n = tx
        .execute(
            "INSERT INTO credentials (credential_hash, kind, name, created_ms) VALUES ($1, $2, $3, $4)
             ON CONFLICT (credential_hash) DO NOTHING",
            &[&credential_hash, &kind, &name, &created_ms],
        )
        .await
        .map_err(pg(context))?;
    if n == 0 {
        return Err(StoreError::AlreadyExists {
            what: "a credential with this hash",
        });
    }
    Ok(())
}

impl AuthorityStore for PostgresAuthority {
    async fn publish(
        &self,
        rev: NewRevision,
        expect: Option<String>,
    ) -> Result<SelectOutcome, StoreError> {
        const CX: &str = "publish a revision";
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await.map_err(pg(CX))?;
        let cas = lock_and_decide(&tx, &rev.digest, expect.as_deref(), CX).await?;
        let stored: Option<String> = tx
            .query_opt(
                "SELECT content FROM revisions WHERE digest = $1",
                &[&rev.digest],
            )
            .await
            .map_err(pg(CX))?
            .map(|row| row.get(0));
        if stored
            .as_ref()
            .is_some_and(|content| *content != rev.content)
        {
            return Err(StoreError::RevisionContentMismatch { digest: rev.digest });
        }
        let outcome = match cas {
            Cas::Unchanged(s) => SelectOutcome::Unchanged(s),
            Cas::Conflict(current) => SelectOutcome::Conflict { current },
            Cas::Append(index) => {
                if stored.is_none() {
                    tx.execute(
                        "INSERT INTO revisions (digest, content, created_ms, published_by) VALUES ($1, $2, $3, $4)",
                        &[&rev.digest, &rev.content, &rev.created_ms, &rev.published_by],
                    )
                    .await
                    .map_err(pg(CX))?;
                }
                append_selection(
                    &tx,
                    index,
                    &rev.digest,
                    rev.created_ms,
                    &rev.published_by,
                    CX,
                )
                .await?
            }
        };
        tx.commit().await.map_err(pg(CX))?;
        Ok(outcome)
    }

    async fn select(
        &self,
        digest: String,
        expect: Option<String>,
        at_ms: i64,
        by: String,
    ) -> Result<SelectOutcome, StoreError> {
        const CX: &str = "select a revision";
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await.map_err(pg(CX))?;
        let cas = lock_and_decide(&tx, &digest, expect.as_deref(), CX).await?;
        let known: bool = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM revisions WHERE digest = $1)",
                &[&digest],
            )
            .await
            .map_err(pg(CX))?
            .get(0);
        if !known {
            return Err(StoreError::UnknownRevision(digest));
        }
        let outcome = match cas {
            Cas::Unchanged(s) => SelectOutcome::Unchanged(s),
            Cas::Conflict(current) => SelectOutcome::Conflict { current },
            Cas::Append(index) => append_selection(&tx, index, &digest, at_ms, &by, CX).await?,
        };
        tx.commit().await.map_err(pg(CX))?;
        Ok(outcome)
    }

    async fn revision(&self, digest: String) -> Result<Option<RevisionRecord>, StoreError> {
        let conn = self.conn().await?;
        let row = conn
            .query_opt(
                "SELECT digest, content, created_ms, published_by FROM revisions WHERE digest = $1",
                &[&digest],
            )
            .await
            .map_err(pg("read a revision"))?;
        Ok(row.map(|row| RevisionRecord {
            digest: row.get(0),
            content: row.get(1),
            created_ms: row.get(2),
            published_by: row.get(3),
        }))
    }

    async fn revisions(&self) -> Result<Vec<RevisionSummary>, StoreError> {
        let conn = self.conn().await?;
        let rows = conn
            .query(
                "SELECT digest, created_ms, published_by FROM revisions ORDER BY seq DESC",
                &[],
            )
            .await
            .map_err(pg("list revisions"))?;
        Ok(rows
            .iter()
            .map(|row| RevisionSummary {
                digest: row.get(0),
                created_ms: row.get(1),
                published_by: row.get(2),
            })
            .collect())
    }

    async fn selection(&self) -> Result<Option<Selection>, StoreError> {
        let conn = self.conn().await?;
        let row = conn
            .query_opt(
                "SELECT idx, digest, selected_ms, selected_by FROM selections ORDER BY idx DESC LIMIT 1",
                &[],
            )
            .await
            .map_err(pg("read the current selection"))?;
        Ok(row.map(|row| selection_row(&row)))
    }

    async fn selections(&self) -> Result<Vec<Selection>, StoreError> {
        let conn = self.conn().await?;
        let rows = conn
            .query(
                "SELECT idx, digest, selected_ms, selected_by FROM selections ORDER BY idx DESC",
                &[],
            )
            .await
            .map_err(pg("list selections"))?;
        Ok(rows.iter().map(selection_row).collect())
    }

    async fn create_join_token(&self, token: NewJoinToken) -> Result<(), StoreError> {
        let conn = self.conn().await?;
        let n = conn
            .execute(
                "INSERT INTO join_tokens (token_hash, host, created_ms, expires_ms, keep_credentials)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (token_hash) DO NOTHING",
                &[
                    &token.token_hash,
                    &token.host,
                    &token.created_ms,
                    &token.expires_ms,
                    &token.keep_credentials,
                ],
            )
            .await
            .map_err(pg("create a join token"))?;
        if n == 0 {
            return Err(StoreError::AlreadyExists {
                what: "a join token with this hash",
            });
        }
        Ok(())
    }

    async fn redeem_join_token(
        &self,
        token_hash: String,
        credential_hash: String,
        now_ms: i64,
    ) -> Result<Redeem, StoreError> {
        const CX: &str = "redeem a join token";
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await.map_err(pg(CX))?;
        // Row-locks the token: a concurrent redeem waits, then re-checks the
        // condition against this one's committed update and finds it used.
        let won: Option<(String, bool)> = tx
            .query_opt(
                "UPDATE join_tokens SET used_ms = $2, credential_hash = $3
                 WHERE token_hash = $1 AND revoked_ms IS NULL AND used_ms IS NULL
                   AND expires_ms > $2
                 RETURNING host, keep_credentials",
                &[&token_hash, &now_ms, &credential_hash],
            )
            .await
            .map_err(pg(CX))?
            .map(|row| (row.get(0), row.get(1)));
        let Some((host, keep)) = won else {
            let row = tx
                .query_opt(
                    "SELECT revoked_ms, used_ms, expires_ms FROM join_tokens WHERE token_hash = $1",
                    &[&token_hash],
                )
                .await
                .map_err(pg(CX))?
                .map(|row| (row.get(0), row.get(1), row.get(2)));
            return Ok(refusal(row, now_ms));
        };
        let revoked = if keep {
            0
        } else {
            tx.execute(
                "UPDATE credentials SET revoked_ms = $2
                 WHERE kind = 'agent' AND name = $1 AND revoked_ms IS NULL",
                &[&host, &now_ms],
            )
            .await
            .map_err(pg(CX))?
        };
        insert_credential(&tx, &credential_hash, "agent", &host, now_ms, CX).await?;
        tx.commit().await.map_err(pg(CX))?;
        Ok(Redeem::Joined { host, revoked })
    }

    async fn create_credential(
        &self,
        credential_hash: String,
        principal: Principal,
        created_ms: i64,
    ) -> Result<(), StoreError> {
        const CX: &str = "create a credential";
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await.map_err(pg(CX))?;
        let (kind, name) = principal_columns(&principal)?;
        insert_credential(&tx, &credential_hash, kind, &name, created_ms, CX).await?;
        tx.commit().await.map_err(pg(CX))
    }

    async fn principal(&self, credential_hash: String) -> Result<Option<Principal>, StoreError> {
        let conn = self.conn().await?;
        let row = conn
            .query_opt(
                "SELECT kind, name, revoked_ms FROM credentials WHERE credential_hash = $1",
                &[&credential_hash],
            )
            .await
            .map_err(pg("look up a credential"))?;
        if let Some(row) = row {
            if row.get::<_, Option<i64>>(2).is_some() {
                return Ok(None);
            }
            return Ok(principal_from_columns(row.get(0), row.get(1)));
        }
        let link = conn
            .query_opt(
                "SELECT id, role FROM ui_links WHERE credential_hash = $1 AND revoked_ms IS NULL",
                &[&credential_hash],
            )
            .await
            .map_err(pg("look up a credential"))?;
        Ok(link.map(|row| Principal::UiLink {
            id: row.get::<_, i64>(0) as u64,
            role: stored_ui_role(row.get(1)),
        }))
    }

    async fn credential(
        &self,
        credential_hash: String,
    ) -> Result<Option<CredentialRecord>, StoreError> {
        let conn = self.conn().await?;
        let sql =
            format!("SELECT {CREDENTIAL_COLUMNS} FROM credentials WHERE credential_hash = $1");
        let row = conn
            .query_opt(&sql, &[&credential_hash])
            .await
            .map_err(pg("look up a credential"))?;
        Ok(row.as_ref().and_then(credential_row))
    }

    async fn credentials(&self) -> Result<Vec<CredentialRecord>, StoreError> {
        let conn = self.conn().await?;
        let sql = format!(
            "SELECT {CREDENTIAL_COLUMNS} FROM credentials ORDER BY created_ms, credential_hash"
        );
        let rows = conn
            .query(&sql, &[])
            .await
            .map_err(pg("list credentials"))?;
        Ok(rows.iter().filter_map(credential_row).collect())
    }

    async fn touch_credential(
        &self,
        credential_hash: String,
        at_ms: i64,
        address: Option<String>,
    ) -> Result<bool, StoreError> {
        let conn = self.conn().await?;
        let n = conn
            .execute(
                "UPDATE credentials SET last_used_ms = $2, last_address = $3
                 WHERE credential_hash = $1 AND revoked_ms IS NULL
                   AND (last_used_ms IS NULL OR last_used_ms <= $4)",
                &[
                    &credential_hash,
                    &at_ms,
                    &address,
                    &(at_ms - LAST_USED_GRANULARITY_MS),
                ],
            )
            .await
            .map_err(pg("record a credential's use"))?;
        Ok(n == 1)
    }

    async fn revoke_credential(
        &self,
        id_prefix: String,
        now_ms: i64,
    ) -> Result<ByPrefix<CredentialRecord>, StoreError> {
        const CX: &str = "revoke a credential";
        let Some((prefix, len)) = hash_prefix(&id_prefix) else {
            return Ok(ByPrefix::Unknown);
        };
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await.map_err(pg(CX))?;
        let hashes = matching(&tx, "credentials", "credential_hash", &prefix, len, CX).await?;
        let hash = match one_of(hashes) {
            Ok(h) => h,
            Err(other) => return Ok(other),
        };
        tx.execute(
            "UPDATE credentials SET revoked_ms = $2 WHERE credential_hash = $1 AND revoked_ms IS NULL",
            &[&hash, &now_ms],
        )
        .await
        .map_err(pg(CX))?;
        let sql =
            format!("SELECT {CREDENTIAL_COLUMNS} FROM credentials WHERE credential_hash = $1");
        let row = tx.query_one(&sql, &[&hash]).await.map_err(pg(CX))?;
        tx.commit().await.map_err(pg(CX))?;
        Ok(credential_row(&row).map_or(ByPrefix::Unknown, ByPrefix::One))
    }

    async fn revoke_host_credentials(
        &self,
        host: String,
        now_ms: i64,
    ) -> Result<Vec<CredentialRecord>, StoreError> {
        let conn = self.conn().await?;
        let sql = format!(
            "UPDATE credentials SET revoked_ms = $2
             WHERE kind = 'agent' AND name = $1 AND revoked_ms IS NULL
             RETURNING {CREDENTIAL_COLUMNS}"
        );
        let rows = conn
            .query(&sql, &[&host, &now_ms])
            .await
            .map_err(pg("revoke a host's credentials"))?;
        let mut out: Vec<CredentialRecord> = rows.iter().filter_map(credential_row).collect();
        out.sort_by(|a, b| {
            (a.created_ms, &a.credential_hash).cmp(&(b.created_ms, &b.credential_hash))
        });
        Ok(out)
    }

    async fn join_tokens(&self) -> Result<Vec<JoinTokenRecord>, StoreError> {
        let conn = self.conn().await?;
        let sql = format!(
            "SELECT {JOIN_TOKEN_COLUMNS} FROM join_tokens ORDER BY created_ms DESC, token_hash"
        );
        let rows = conn
            .query(&sql, &[])
            .await
            .map_err(pg("list join tokens"))?;
        Ok(rows.iter().map(join_token_row).collect())
    }

    async fn revoke_join_token(
        &self,
        id_prefix: String,
        now_ms: i64,
    ) -> Result<ByPrefix<JoinTokenRecord>, StoreError> {
        const CX: &str = "revoke a join token";
        let Some((prefix, len)) = hash_prefix(&id_prefix) else {
            return Ok(ByPrefix::Unknown);
        };
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await.map_err(pg(CX))?;
        let hashes = matching(&tx, "join_tokens", "token_hash", &prefix, len, CX).await?;
        let hash = match one_of(hashes) {
            Ok(h) => h,
            Err(other) => return Ok(other),
        };
        tx.execute(
            "UPDATE join_tokens SET revoked_ms = $2 WHERE token_hash = $1 AND revoked_ms IS NULL",
            &[&hash, &now_ms],
        )
        .await
        .map_err(pg(CX))?;
        let sql = format!("SELECT {JOIN_TOKEN_COLUMNS} FROM join_tokens WHERE token_hash = $1");
        let row = tx.query_one(&sql, &[&hash]).await.map_err(pg(CX))?;
        tx.commit().await.map_err(pg(CX))?;
        Ok(ByPrefix::One(join_token_row(&row)))
    }

    async fn put_reports(&self, reports: Vec<HostReportRecord>) -> Result<(), StoreError> {
        // One statement over arrays: one round trip and one commit for them all.
        // ON CONFLICT may touch a row once per statement: one report per host.
        let reports = super::last_report_of_each_host(reports);
        let hosts: Vec<&str> = reports.iter().map(|r| r.host.as_str()).collect();
        let revisions: Vec<Option<&str>> = reports.iter().map(|r| r.revision.as_deref()).collect();
        let texts: Vec<&str> = reports.iter().map(|r| r.report.as_str()).collect();
        let received: Vec<i64> = reports.iter().map(|r| r.received_ms).collect();
        let conn = self.conn().await?;
        conn.execute(
            "INSERT INTO host_reports (host, revision, report, received_ms)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[])
             ON CONFLICT (host) DO UPDATE SET revision = excluded.revision,
                 report = excluded.report, received_ms = excluded.received_ms",
            &[&hosts, &revisions, &texts, &received],
        )
        .await
        .map_err(pg("store host reports"))?;
        Ok(())
    }

    async fn reports(&self) -> Result<Vec<HostReportRecord>, StoreError> {
        let conn = self.conn().await?;
        let rows = conn
            .query(
                "SELECT host, revision, report, received_ms FROM host_reports ORDER BY host",
                &[],
            )
            .await
            .map_err(pg("list host reports"))?;
        Ok(rows
            .iter()
            .map(|row| HostReportRecord {
                host: row.get(0),
                revision: row.get(1),
                report: row.get(2),
                received_ms: row.get(3),
            })
            .collect())
    }

    async fn enqueue_call(
        &self,
        host: String,
        call: String,
        created_ms: i64,
    ) -> Result<u64, StoreError> {
        const CX: &str = "queue an agent call";
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await.map_err(pg(CX))?;
        // Held until commit: the next enqueue reads MAX(id) after this one's
        // insert is visible.
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&ENQUEUE_LOCK_KEY])
            .await
            .map_err(pg(CX))?;
        let id: i64 = tx
            .query_one(
                "INSERT INTO agent_calls (id, host, call, created_ms)
                 SELECT COALESCE(MAX(id), 0) + 1, $1, $2, $3 FROM agent_calls
                 RETURNING id",
                &[&host, &call, &created_ms],
            )
            .await
            .map_err(pg(CX))?
            .get(0);
        tx.commit().await.map_err(pg(CX))?;
        Ok(id as u64)
    }

    async fn pending_calls(
        &self,
        host: String,
        after: u64,
        limit: u32,
    ) -> Result<Vec<QueuedCall>, StoreError> {
        let Some(after) = stored_id(after) else {
            return Ok(Vec::new());
        };
        let conn = self.conn().await?;
        let rows = conn
            .query(
                "SELECT id, host, call, created_ms, reply, replied_ms FROM agent_calls
                 WHERE host = $1 AND id > $2 AND reply IS NULL ORDER BY id LIMIT $3",
                &[&host, &after, &i64::from(limit)],
            )
            .await
            .map_err(pg("list pending agent calls"))?;
        Ok(rows.iter().map(call_row).collect())
    }

    async fn put_reply(
        &self,
        id: u64,
        host: String,
        reply: String,
        replied_ms: i64,
    ) -> Result<bool, StoreError> {
        let Some(id) = stored_id(id) else {
            return Ok(false);
        };
        let conn = self.conn().await?;
        // A concurrent reply to the same call waits for this one's row lock, then
        // re-checks `reply IS NULL` and matches nothing.
        let n = conn
            .execute(
                "UPDATE agent_calls SET reply = $3, replied_ms = $4
                 WHERE id = $1 AND host = $2 AND reply IS NULL",
                &[&id, &host, &reply, &replied_ms],
            )
            .await
            .map_err(pg("store an agent reply"))?;
        Ok(n == 1)
    }

    async fn call(&self, id: u64) -> Result<Option<QueuedCall>, StoreError> {
        let Some(id) = stored_id(id) else {
            return Ok(None);
        };
        let conn = self.conn().await?;
        let row = conn
            .query_opt(
                "SELECT id, host, call, created_ms, reply, replied_ms FROM agent_calls WHERE id = $1",
                &[&id],
            )
            .await
            .map_err(pg("read an agent call"))?;
        Ok(row.map(|row| call_row(&row)))
    }

    async fn last_call_id(&self) -> Result<u64, StoreError> {
        let conn = self.conn().await?;
        let id: i64 = conn
            .query_one("SELECT COALESCE(MAX(id), 0)::BIGINT FROM agent_calls", &[])
            .await
            .map_err(pg("read the last agent call id"))?
            .get(0);
        Ok(id as u64)
    }

    async fn put_release(&self, release: NewRelease) -> Result<ReleasePut, StoreError> {
        const CX: &str = "store a release";
        let serial = stored_serial(release.serial)?;
        let conn = self.conn().await?;
        // A concurrent insert of the same name and version waits for the first
        // to commit, then inserts nothing.
        let n = conn
            .execute(
                "INSERT INTO releases (name, version, serial, manifest, signature, published_by, created_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (name, version) DO NOTHING",
                &[
                    &release.name,
                    &release.version,
                    &serial,
                    &release.manifest,
                    &release.signature,
                    &release.published_by,
                    &release.created_ms,
                ],
            )
            .await
            .map_err(pg(CX))?;
        if n == 1 {
            return Ok(ReleasePut::Created);
        }
        // The row that won is committed (and releases are never deleted): this
        // statement's snapshot sees it.
        let row = conn
            .query_one(
                "SELECT manifest, signature FROM releases WHERE name = $1 AND version = $2",
                &[&release.name, &release.version],
            )
            .await
            .map_err(pg(CX))?;
        Ok(existing_release(
            &release,
            row.get::<_, &[u8]>(0),
            row.get::<_, &str>(1),
        ))
    }

    async fn release(
        &self,
        name: String,
        version: String,
    ) -> Result<Option<ReleaseRecord>, StoreError> {
        let conn = self.conn().await?;
        let row = conn
            .query_opt(
                "SELECT name, version, serial, manifest, signature, published_by, created_ms
                 FROM releases WHERE name = $1 AND version = $2",
                &[&name, &version],
            )
            .await
            .map_err(pg("read a release"))?;
        Ok(row.map(|row| release_row(&row)))
    }

    async fn releases(&self) -> Result<Vec<ReleaseRecord>, StoreError> {
        let conn = self.conn().await?;
        let rows = conn
            .query(
                "SELECT name, version, serial, manifest, signature, published_by, created_ms
                 FROM releases ORDER BY seq DESC",
                &[],
            )
            .await
            .map_err(pg("list releases"))?;
        Ok(rows.iter().map(release_row).collect())
    }

    async fn create_rollout(
        &self,
        doc: String,
        name: String,
        created_ms: i64,
    ) -> Result<u64, StoreError> {
        let conn = self.conn().await?;
        let id: i64 = conn
            .query_one(
                "INSERT INTO rollouts (name, doc, created_ms, updated_ms) VALUES ($1, $2, $3, $3)
                 RETURNING id",
                &[&name, &doc, &created_ms],
            )
            .await
            .map_err(pg("create a rollout"))?
            .get(0);
        Ok(id as u64)
    }

    async fn put_rollout(&self, id: u64, doc: String, updated_ms: i64) -> Result<(), StoreError> {
        self.put_doc(
            "store a rollout",
            "rollouts",
            id,
            doc,
            updated_ms,
            StoreError::UnknownRollout,
        )
        .await
    }

    async fn rollout(&self, id: u64) -> Result<Option<RolloutRecord>, StoreError> {
        self.get_doc("read a rollout", &ROLLOUTS, id).await
    }

    async fn rollouts(&self) -> Result<Vec<RolloutRecord>, StoreError> {
        self.list_docs("list rollouts", &ROLLOUTS).await
    }

    async fn put_host_update(
        &self,
        host: String,
        doc: String,
        received_ms: i64,
    ) -> Result<(), StoreError> {
        let conn = self.conn().await?;
        conn.execute(
            "INSERT INTO host_updates (host, doc, received_ms) VALUES ($1, $2, $3)
             ON CONFLICT (host) DO UPDATE SET doc = excluded.doc,
                 received_ms = excluded.received_ms",
            &[&host, &doc, &received_ms],
        )
        .await
        .map_err(pg("store a host update"))?;
        Ok(())
    }

    async fn host_updates(&self) -> Result<Vec<HostUpdateRecord>, StoreError> {
        let conn = self.conn().await?;
        let rows = conn
            .query(
                "SELECT host, doc, received_ms FROM host_updates ORDER BY received_ms DESC, host",
                &[],
            )
            .await
            .map_err(pg("list host updates"))?;
        Ok(rows
            .iter()
            .map(|row| HostUpdateRecord {
                host: row.get(0),
                doc: row.get(1),
                received_ms: row.get(2),
            })
            .collect())
    }

    async fn create_unskip(
        &self,
        host: String,
        doc: String,
        created_ms: i64,
    ) -> Result<u64, StoreError> {
        let conn = self.conn().await?;
        let id: i64 = conn
            .query_one(
                "INSERT INTO unskips (host, doc, pending, created_ms, updated_ms)
                 VALUES ($1, $2, TRUE, $3, $3) RETURNING id",
                &[&host, &doc, &created_ms],
            )
            .await
            .map_err(pg("create an unskip request"))?
            .get(0);
        Ok(id as u64)
    }

    async fn put_unskip(
        &self,
        id: u64,
        doc: String,
        pending: bool,
        updated_ms: i64,
    ) -> Result<(), StoreError> {
        let Some(stored) = stored_id(id) else {
            return Err(StoreError::UnknownUnskip(id));
        };
        let conn = self.conn().await?;
        let n = conn
            .execute(
                "UPDATE unskips SET doc = $2, pending = $3, updated_ms = $4 WHERE id = $1",
                &[&stored, &doc, &pending, &updated_ms],
            )
            .await
            .map_err(pg("store an unskip request"))?;
        if n == 0 {
            return Err(StoreError::UnknownUnskip(id));
        }
        Ok(())
    }

    async fn unskip(&self, id: u64) -> Result<Option<UnskipRecord>, StoreError> {
        let Some(id) = stored_id(id) else {
            return Ok(None);
        };
        let conn = self.conn().await?;
        let row = conn
            .query_opt(
                "SELECT id, host, doc, pending, created_ms, updated_ms FROM unskips
                 WHERE id = $1",
                &[&id],
            )
            .await
            .map_err(pg("read an unskip request"))?;
        Ok(row.map(|row| unskip_row(&row)))
    }

    async fn pending_unskips(&self) -> Result<Vec<UnskipRecord>, StoreError> {
        let conn = self.conn().await?;
        let rows = conn
            .query(
                "SELECT id, host, doc, pending, created_ms, updated_ms FROM unskips
                 WHERE pending ORDER BY id",
                &[],
            )
            .await
            .map_err(pg("list pending unskip requests"))?;
        Ok(rows.iter().map(unskip_row).collect())
    }

    async fn create_session(
        &self,
        doc: String,
        alert_key: Option<String>,
        created_ms: i64,
    ) -> Result<SessionCreated, StoreError> {
        const CX: &str = "create a session";
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await.map_err(pg(CX))?;
        let id: i64 = tx
            .query_one(
                "INSERT INTO sessions (doc, created_ms, updated_ms) VALUES ($1, $2, $2)
                 RETURNING id",
                &[&doc, &created_ms],
            )
            .await
            .map_err(pg(CX))?
            .get(0);
        if let Some(key) = &alert_key {
            // A concurrent claim of the same key waits here on the unique index
            // until the other transaction ends, then sees its row.
            let claimed = tx
                .execute(
                    "INSERT INTO alert_sessions (alert_key, session) VALUES ($1, $2)
                     ON CONFLICT (alert_key) DO NOTHING",
                    &[key, &id],
                )
                .await
                .map_err(pg(CX))?;
            if claimed == 0 {
                tx.rollback().await.map_err(pg(CX))?;
                let held: i64 = conn
                    .query_one(
                        "SELECT session FROM alert_sessions WHERE alert_key = $1",
                        &[key],
                    )
                    .await
                    .map_err(pg(CX))?
                    .get(0);
                return Ok(SessionCreated {
                    id: held as u64,
                    created: false,
                });
            }
        }
        tx.commit().await.map_err(pg(CX))?;
        Ok(SessionCreated {
            id: id as u64,
            created: true,
        })
    }

    async fn put_session(&self, id: u64, doc: String, updated_ms: i64) -> Result<(), StoreError> {
        self.put_doc(
            "store a session",
            "sessions",
            id,
            doc,
            updated_ms,
            StoreError::UnknownSession,
        )
        .await
    }

    async fn session(&self, id: u64) -> Result<Option<SessionRecord>, StoreError> {
        self.get_doc("read a session", &SESSIONS, id).await
    }

    async fn sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.list_docs("list sessions", &SESSIONS).await
    }

    async fn delete_session(&self, id: u64) -> Result<SessionDeleted, StoreError> {
        const CX: &str = "delete a session";
        let Some(stored) = stored_id(id) else {
            return Err(StoreError::UnknownSession(id));
        };
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await.map_err(pg(CX))?;
        // The session's row first, locked: a concurrent event or question waits
        // on it, then finds no session.
        let exists = tx
            .query_opt(
                "SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE",
                &[&stored],
            )
            .await
            .map_err(pg(CX))?
            .is_some();
        if !exists {
            return Err(StoreError::UnknownSession(id));
        }
        let events = tx
            .execute("DELETE FROM session_events WHERE session = $1", &[&stored])
            .await
            .map_err(pg(CX))?;
        let questions = tx
            .execute("DELETE FROM questions WHERE session = $1", &[&stored])
            .await
            .map_err(pg(CX))?;
        let alert_keys = tx
            .execute("DELETE FROM alert_sessions WHERE session = $1", &[&stored])
            .await
            .map_err(pg(CX))?;
        let credentials = tx
            .execute(
                "DELETE FROM credentials WHERE kind = 'session' AND name = $1",
                &[&id.to_string()],
            )
            .await
            .map_err(pg(CX))?;
        tx.execute("DELETE FROM sessions WHERE id = $1", &[&stored])
            .await
            .map_err(pg(CX))?;
        tx.commit().await.map_err(pg(CX))?;
        Ok(SessionDeleted {
            events,
            questions,
            credentials,
            alert_keys,
        })
    }

    async fn append_session_event(
        &self,
        session: u64,
        doc: String,
        at_ms: i64,
    ) -> Result<u64, StoreError> {
        let Some(stored) = stored_id(session) else {
            return Err(StoreError::UnknownSession(session));
        };
        let conn = self.conn().await?;
        let row = conn
            .query_opt(
                "INSERT INTO session_events (session, doc, at_ms)
                 SELECT id, $2, $3 FROM sessions WHERE id = $1 RETURNING seq",
                &[&stored, &doc, &at_ms],
            )
            .await
            .map_err(pg("append a session event"))?;
        match row {
            Some(row) => Ok(row.get::<_, i64>(0) as u64),
            None => Err(StoreError::UnknownSession(session)),
        }
    }

    async fn session_events(
        &self,
        session: u64,
        after: u64,
    ) -> Result<Vec<SessionEventRecord>, StoreError> {
        let (Some(session), Some(after)) = (stored_id(session), stored_id(after)) else {
            return Ok(Vec::new());
        };
        let conn = self.conn().await?;
        let rows = conn
            .query(
                "SELECT seq, session, doc, at_ms FROM session_events
                 WHERE session = $1 AND seq > $2 ORDER BY seq",
                &[&session, &after],
            )
            .await
            .map_err(pg("read session events"))?;
        Ok(rows
            .iter()
            .map(|row| SessionEventRecord {
                seq: row.get::<_, i64>(0) as u64,
                session: row.get::<_, i64>(1) as u64,
                doc: row.get(2),
                at_ms: row.get(3),
            })
            .collect())
    }

    async fn create_question(
        &self,
        session: u64,
        doc: String,
        created_ms: i64,
    ) -> Result<u64, StoreError> {
        let Some(stored) = stored_id(session) else {
            return Err(StoreError::UnknownSession(session));
        };
        let conn = self.conn().await?;
        let row = conn
            .query_opt(
                "INSERT INTO questions (session, doc, created_ms, updated_ms)
                 SELECT id, $2, $3, $3 FROM sessions WHERE id = $1 RETURNING id",
                &[&stored, &doc, &created_ms],
            )
            .await
            .map_err(pg("create a question"))?;
        match row {
            Some(row) => Ok(row.get::<_, i64>(0) as u64),
            None => Err(StoreError::UnknownSession(session)),
        }
    }

    async fn put_question(&self, id: u64, doc: String, updated_ms: i64) -> Result<(), StoreError> {
        self.put_doc(
            "store a question",
            "questions",
            id,
            doc,
            updated_ms,
            StoreError::UnknownQuestion,
        )
        .await
    }

    async fn question(&self, id: u64) -> Result<Option<QuestionRecord>, StoreError> {
        self.get_doc("read a question", &QUESTIONS, id).await
    }

    async fn questions(&self) -> Result<Vec<QuestionRecord>, StoreError> {
        self.list_docs("list questions", &QUESTIONS).await
    }

    async fn create_notification(
        &self,
        dedup_key: String,
        doc: String,
        created_ms: i64,
    ) -> Result<Option<u64>, StoreError> {
        let conn = self.conn().await?;
        let row = conn
            .query_opt(
                "INSERT INTO notifications (dedup_key, doc, created_ms, updated_ms)
                 VALUES ($1, $2, $3, $3) ON CONFLICT (dedup_key) DO NOTHING RETURNING id",
                &[&dedup_key, &doc, &created_ms],
            )
            .await
            .map_err(pg("record a notification"))?;
        Ok(row.map(|r| r.get::<_, i64>(0) as u64))
    }

    async fn put_notification(
        &self,
        id: u64,
        doc: String,
        updated_ms: i64,
    ) -> Result<(), StoreError> {
        self.put_doc(
            "store a notification",
            "notifications",
            id,
            doc,
            updated_ms,
            StoreError::UnknownNotification,
        )
        .await
    }

    async fn notifications(&self, limit: u32) -> Result<Vec<NotificationRecord>, StoreError> {
        let conn = self.conn().await?;
        let rows = conn
            .query(
                "SELECT id, dedup_key, doc, created_ms, updated_ms FROM notifications
                 ORDER BY id DESC LIMIT $1",
                &[&(limit as i64)],
            )
            .await
            .map_err(pg("list notifications"))?;
        Ok(rows
            .iter()
            .map(|row| NotificationRecord {
                id: row.get::<_, i64>(0) as u64,
                dedup_key: row.get(1),
                doc: row.get(2),
                created_ms: row.get(3),
                updated_ms: row.get(4),
            })
            .collect())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let conn = self.conn().await?;
        conn.simple_query("SELECT 1")
            .await
            .map_err(pg("ping the database"))?;
        Ok(())
    }

    async fn create_ui_link(&self, link: NewUiLink) -> Result<u64, StoreError> {
        let conn = self.conn().await?;
        let row = conn
            .query_opt(
                "INSERT INTO ui_links (credential_hash, role, created_by, created_ms, expires_ms)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (credential_hash) DO NOTHING RETURNING id",
                &[
                    &link.credential_hash,
                    &link.role.as_str(),
                    &link.created_by,
                    &link.created_ms,
                    &link.expires_ms,
                ],
            )
            .await
            .map_err(pg("create a dashboard sign-in link"))?;
        match row {
            Some(row) => Ok(row.get::<_, i64>(0) as u64),
            None => Err(StoreError::AlreadyExists {
                what: "a dashboard sign-in link with this hash",
            }),
        }
    }

    async fn redeem_ui_link(
        &self,
        credential_hash: String,
        now_ms: i64,
    ) -> Result<UiLinkRedeem, StoreError> {
        const CX: &str = "redeem a dashboard sign-in link";
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await.map_err(pg(CX))?;
        // Row-locks the link: a concurrent redeem waits, then re-checks the
        // condition against this one's committed update and finds it used.
        let won = tx
            .query_opt(
                "UPDATE ui_links SET used_ms = $2
                 WHERE credential_hash = $1 AND revoked_ms IS NULL AND used_ms IS NULL
                   AND expires_ms > $2
                 RETURNING id, role",
                &[&credential_hash, &now_ms],
            )
            .await
            .map_err(pg(CX))?;
        let answer = match won {
            Some(row) => UiLinkRedeem::SignedIn {
                id: row.get::<_, i64>(0) as u64,
                role: stored_ui_role(row.get(1)),
            },
            None => {
                let row = tx
                    .query_opt(
                        "SELECT revoked_ms, used_ms, expires_ms FROM ui_links WHERE credential_hash = $1",
                        &[&credential_hash],
                    )
                    .await
                    .map_err(pg(CX))?
                    .map(|row| (row.get(0), row.get(1), row.get(2)));
                ui_link_refusal(row, now_ms)
            }
        };
        tx.commit().await.map_err(pg(CX))?;
        Ok(answer)
    }

    async fn ui_links(&self) -> Result<Vec<UiLinkRecord>, StoreError> {
        let conn = self.conn().await?;
        let rows = conn
            .query(
                "SELECT id, role, created_by, created_ms, expires_ms, used_ms, revoked_ms
                 FROM ui_links ORDER BY id DESC",
                &[],
            )
            .await
            .map_err(pg("list dashboard sign-in links"))?;
        Ok(rows
            .into_iter()
            .map(|row| UiLinkRecord {
                id: row.get::<_, i64>(0) as u64,
                role: stored_ui_role(row.get(1)),
                created_by: row.get(2),
                created_ms: row.get(3),
                expires_ms: row.get(4),
                used_ms: row.get(5),
                revoked_ms: row.get(6),
            })
            .collect())
    }

    async fn revoke_ui_link(&self, id: u64, now_ms: i64) -> Result<bool, StoreError> {
        let Some(stored) = stored_id(id) else {
            return Ok(false);
        };
        let conn = self.conn().await?;
        let n = conn
            .execute(
                "UPDATE ui_links SET revoked_ms = $2 WHERE id = $1 AND revoked_ms IS NULL",
                &[&stored, &now_ms],
            )
            .await
            .map_err(pg("revoke a dashboard sign-in link"))?;
        Ok(n == 1)
    }
}

/// Brings the (empty) database at `url` only up to schema `version` (an older
/// Flotilla's database), for tests of what connecting to it does.
///
/// # Errors
/// [`StoreError::PostgresConnect`], [`StoreError::Postgres`],
/// [`StoreError::PostgresMigration`].
#[cfg(any(test, feature = "testing"))]
pub(crate) async fn create_at_version(url: &str, version: i64) -> Result<(), StoreError> {
    let config: Config = url
        .parse()
        .map_err(|source| StoreError::PostgresConnect { source })?;
    let (mut client, connection) = config
        .connect(NoTls)
        .await
        .map_err(|source| StoreError::PostgresConnect { source })?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let upto = MIGRATIONS
        .iter()
        .position(|m| m.version == version)
        .map_or(0, |i| i + 1);
    let done = migrate_with(&mut client, &MIGRATIONS[..upto], None).await;
    drop(client);
    let _ = driver.await;
    done
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

    /// A database made by an older build (schema 2, with data) is brought up to
    /// the current schema on connect, keeping its data. Needs the tests'
    /// PostgreSQL server (`FLOTILLA_TEST_POSTGRES_URL`, `scripts/postgres`).
    #[test]
    fn schema_2_is_upgraded_in_place() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let admin_url = crate::authority::testing::admin_url();
            let db = crate::authority::testing::create_database(&admin_url)
                .await
                .unwrap();
            {
                let config: Config = db.url.parse().unwrap();
                let (mut client, connection) = config.connect(NoTls).await.unwrap();
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                migrate_with(&mut client, &MIGRATIONS[..2], None).await.unwrap();
                client
                    .execute(
                        "INSERT INTO agent_calls (id, host, call, created_ms) VALUES (1, 'studio', '{}', 1)",
                        &[],
                    )
                    .await
                    .unwrap();
            }
            let authority = PostgresAuthority::connect(&db.url).await.unwrap();
            assert_eq!(
                authority.schema_version().await.unwrap(),
                AUTHORITY_SCHEMA_VERSION
            );
            assert_eq!(authority.last_call_id().await.unwrap(), 1);
            assert!(authority
                .put_blob("ab".repeat(32), 3, 1)
                .await
                .unwrap());
            assert_eq!(
                authority
                    .create_rollout("{}".into(), "flotilla".into(), 2)
                    .await
                    .unwrap(),
                1
            );
            drop(authority);
            crate::authority::testing::drop_database(&admin_url, &db.name)
                .await
                .unwrap();
        });
    }

    #[test]
    fn invalid_url_is_a_connect_error() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let err = rt
            .block_on(PostgresAuthority::connect("postgres://[::1"))
            .unwrap_err();
        assert!(matches!(err, StoreError::PostgresConnect { .. }), "{err}");
    }
}
