//! The SQL schema: forward-only numbered migrations, recorded in a
//! `schema_version` table, applied when a [`Store`](crate::Store) opens.
//!
//! Rules: a migration is never edited once released; a change is a new migration
//! with the next number. All pending migrations run in one `BEGIN IMMEDIATE`
//! transaction, so two processes opening a fresh file at once cannot both apply
//! them, and a failed migration leaves the file at its previous version.

use crate::error::StoreError;
use rusqlite::{Connection, TransactionBehavior};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;

/// A migration about to be applied to a database that already holds data (its
/// schema version is above 0 and below the one this build creates): what a
/// [`BeforeMigration`] hook is told, so that it can back the database up first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingMigration {
    /// The database file (`None` for the authority's PostgreSQL database).
    pub path: Option<PathBuf>,
    /// Its schema version now.
    pub found: i64,
    /// The version it is about to be brought to.
    pub target: i64,
}

/// What a migration hook's failure carries (a backup's typed error, boxed).
pub type HookError = Box<dyn std::error::Error + Send + Sync>;

/// Called before the pending migrations of an SQLite database holding data are
/// applied, while the migrating connection holds the database's write lock
/// (`BEGIN IMMEDIATE`: other connections may read, nobody writes or migrates): a
/// backup taken here is exactly the state the migration starts from. An error
/// stops the migration (nothing is migrated):
/// [`StoreError::BackupBeforeMigration`]. Not called for a fresh file (version 0)
/// or an up-to-date one.
pub type BeforeMigration<'a> = &'a (dyn Fn(&PendingMigration) -> Result<(), HookError> + Sync);

/// The same for the authority's PostgreSQL database, called (and awaited) inside
/// the migration's transaction, under its advisory lock (other authorities starting
/// wait; they may still write).
pub type BeforePostgresMigration = dyn Fn(PendingMigration) -> Pin<Box<dyn Future<Output = Result<(), HookError>> + Send>>
    + Send
    + Sync;

/// One schema migration (of `state.db`, or of the authority's `authority.db`:
/// see [`crate::authority::sqlite`]).
pub(crate) struct Migration {
    /// Its number: 1, 2, 3… (the schema version after it is applied).
    pub(crate) version: i64,
    /// One line, recorded in `schema_version`.
    pub(crate) description: &'static str,
    /// The SQL, run as one batch.
    pub(crate) sql: &'static str,
}

/// `PRAGMA application_id` of a Flotilla state database (`FLOT` in ASCII).
pub const APPLICATION_ID: i32 = 0x464C_4F54;

/// Every migration, in order. Never edit a released entry: append.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "journal (operations, steps), instances, desired lifecycle, stacks",
        sql: r#"
PRAGMA application_id = 1179406164;

-- One row per mutating CLI invocation, written before its first step and
-- updated when it finishes. Times are ms since the Unix epoch, passed in by the caller.
CREATE TABLE operations (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    verb            TEXT    NOT NULL,
    target          TEXT    NOT NULL,
    flags           TEXT    NOT NULL,          -- JSON array of strings
    plan_digest     TEXT    NOT NULL,
    topology_digest TEXT    NOT NULL,
    plan_json       TEXT    NOT NULL,
    who             TEXT    NOT NULL,          -- user@hostname
    pid             INTEGER NOT NULL,
    command_line    TEXT    NOT NULL,
    started_at_ms   INTEGER NOT NULL,
    ended_at_ms     INTEGER,                   -- NULL while running
    outcome         TEXT    NOT NULL CHECK (outcome IN
                        ('running', 'succeeded', 'failed', 'refused', 'interrupted', 'rolled-back')),
    error           TEXT,
    CHECK ((outcome = 'running') = (ended_at_ms IS NULL))
) STRICT;
CREATE INDEX operations_running ON operations (id) WHERE outcome = 'running';

-- One row per step, written before it runs and updated after.
CREATE TABLE steps (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    operation       INTEGER NOT NULL REFERENCES operations (id),
    wave            INTEGER NOT NULL CHECK (wave >= 0),
    component       TEXT    NOT NULL,
    action          TEXT    NOT NULL,
    started_at_ms   INTEGER NOT NULL,
    ended_at_ms     INTEGER,                   -- NULL while running
    outcome         TEXT    NOT NULL CHECK (outcome IN
                        ('running', 'succeeded', 'failed', 'refused', 'interrupted', 'rolled-back')),
    evidence        TEXT    NOT NULL DEFAULT 'null',  -- JSON
    CHECK ((outcome = 'running') = (ended_at_ms IS NULL))
) STRICT;
CREATE INDEX steps_by_operation ON steps (operation, wave, id);

-- What Flotilla started and believes runs: one per component, with the runtime
-- identity measured at start.
CREATE TABLE instances (
    component        TEXT    PRIMARY KEY,
    host             TEXT    NOT NULL,
    pid              INTEGER NOT NULL,
    pgid             INTEGER NOT NULL,
    start_time_ticks INTEGER NOT NULL CHECK (start_time_ticks >= 0),
    exe              TEXT    NOT NULL,
    exe_sha256       TEXT    NOT NULL,
    argv_digest      TEXT    NOT NULL,
    config_digest    TEXT    NOT NULL,
    operation        INTEGER NOT NULL REFERENCES operations (id),
    started_at_ms    INTEGER NOT NULL,
    log_path         TEXT    NOT NULL
) STRICT;

-- History: instance rows as they were when removed, with why and when.
CREATE TABLE removed_instances (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    component        TEXT    NOT NULL,
    host             TEXT    NOT NULL,
    pid              INTEGER NOT NULL,
    pgid             INTEGER NOT NULL,
    start_time_ticks INTEGER NOT NULL,
    exe              TEXT    NOT NULL,
    exe_sha256       TEXT    NOT NULL,
    argv_digest      TEXT    NOT NULL,
    config_digest    TEXT    NOT NULL,
    operation        INTEGER NOT NULL REFERENCES operations (id),
    started_at_ms    INTEGER NOT NULL,
    log_path         TEXT    NOT NULL,
    reason           TEXT    NOT NULL CHECK (reason IN ('stopped', 'vanished')),
    removed_at_ms    INTEGER NOT NULL
) STRICT;
CREATE INDEX removed_instances_by_component ON removed_instances (component, id);

-- Desired lifecycle per component, as last set by an operation.
CREATE TABLE desired (
    component TEXT    PRIMARY KEY,
    lifecycle TEXT    NOT NULL CHECK (lifecycle IN ('running', 'stopped', 'disabled')),
    set_at_ms INTEGER NOT NULL
) STRICT;

-- Stacks brought up, and the order their components actually started in.
CREATE TABLE stacks (
    stack         TEXT    PRIMARY KEY,
    started_at_ms INTEGER NOT NULL
) STRICT;
CREATE TABLE stack_members (
    stack     TEXT    NOT NULL REFERENCES stacks (stack) ON DELETE CASCADE,
    position  INTEGER NOT NULL,
    component TEXT    NOT NULL,
    PRIMARY KEY (stack, position)
) STRICT;
"#,
    },
    Migration {
        version: 2,
        description: "last observation of each component on a remote host",
        sql: r#"
-- What each component on a remote host looked like when last observed (the
-- controller's cache, shown with its age while the host cannot be reached).
CREATE TABLE host_observations (
    host           TEXT    NOT NULL,
    component      TEXT    NOT NULL,
    status         TEXT    NOT NULL,          -- JSON: the component's status then
    observed_at_ms INTEGER NOT NULL,
    PRIMARY KEY (host, component)
) STRICT;
"#,
    },
    Migration {
        version: 3,
        description: "the effective config an instance was started with",
        sql: r#"
-- Canonical JSON of the component's effective runtime config at start (NULL for
-- instances recorded before this version): what `up` compares key by key.
ALTER TABLE instances ADD COLUMN config_json TEXT;
ALTER TABLE removed_instances ADD COLUMN config_json TEXT;
"#,
    },
    Migration {
        version: 4,
        description: "steps by component, for each component's last step",
        sql: r#"
-- Status asks, for every component at once, which step last acted on it (and how
-- that step's operation ended): the newest step per component.
CREATE INDEX steps_by_component ON steps (component, id);
"#,
    },
    Migration {
        version: 5,
        description: "digests of files already hashed",
        sql: r#"
-- SHA-256 of files (executables) already hashed, keyed by what names a file's
-- content without reading it, so a new process does not hash them again.
-- dev and ino are u64 stored bit for bit; times in ns since the epoch.
CREATE TABLE file_digests (
    dev            INTEGER NOT NULL,
    ino            INTEGER NOT NULL,
    size           INTEGER NOT NULL,
    mtime_ns       INTEGER NOT NULL,
    ctime_ns       INTEGER NOT NULL,
    sha256         TEXT    NOT NULL,
    recorded_at_ms INTEGER NOT NULL,
    PRIMARY KEY (dev, ino, size, mtime_ns, ctime_ns)
) STRICT;
"#,
    },
    Migration {
        version: 6,
        description: "the script or module an interpreter ran, with its digest at start",
        sql: r#"
-- JSON array of {path, role, sha256} (NULL or '[]' when the executable is not an
-- interpreter, and for instances recorded before this version).
ALTER TABLE instances ADD COLUMN program_files TEXT;
ALTER TABLE removed_instances ADD COLUMN program_files TEXT;
"#,
    },
];

/// The schema version this build creates and understands (the last migration's
/// number).
pub const SCHEMA_VERSION: i64 = MIGRATIONS[MIGRATIONS.len() - 1].version;

/// The version recorded in the file (0 for a fresh file).
pub(crate) fn current_version(conn: &Connection) -> rusqlite::Result<i64> {
    let exists: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'schema_version')",
        [],
        |row| row.get(0),
    )?;
    if !exists {
        return Ok(0);
    }
    conn.query_row(
        "SELECT COALESCE(MAX(version), 0) FROM schema_version",
        [],
        |row| row.get(0),
    )
}

/// Brings the file up to [`SCHEMA_VERSION`]; a no-op when it is already there.
///
/// # Errors
/// [`StoreError::SchemaTooNew`] for a file from a newer build,
/// [`StoreError::Migration`] when a migration fails, and whatever
/// `classify` makes of other SQLite errors.
pub(crate) fn migrate(
    conn: &mut Connection,
    path: &Path,
    classify: impl Fn(rusqlite::Error) -> StoreError,
) -> Result<(), StoreError> {
    apply(conn, path, classify, MIGRATIONS, None)
}

/// Brings the file up to the last of `migrations` (numbered 1, 2, 3…, recorded in
/// its `schema_version` table); a no-op when it is already there.
///
/// # Errors
/// [`StoreError::SchemaTooNew`] for a file from a newer build,
/// [`StoreError::Migration`] when a migration fails,
/// [`StoreError::BackupBeforeMigration`] when `before` fails, and whatever
/// `classify` makes of other SQLite errors.
pub(crate) fn apply(
    conn: &mut Connection,
    path: &Path,
    classify: impl Fn(rusqlite::Error) -> StoreError,
    migrations: &[Migration],
    before: Option<BeforeMigration<'_>>,
) -> Result<(), StoreError> {
    let supported = migrations.last().map_or(0, |m| m.version);
    let too_new = |found| StoreError::SchemaTooNew {
        path: path.to_owned(),
        found,
        supported,
    };
    // Fast path, read-only: readers opening an up-to-date file take no write lock.
    let found = current_version(conn).map_err(&classify)?;
    if found > supported {
        return Err(too_new(found));
    }
    if found == supported {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(&classify)?;
    // Another process may have migrated between the check and the lock.
    let found = current_version(&tx).map_err(&classify)?;
    if found > supported {
        return Err(too_new(found));
    }
    if let Some(before) = before.filter(|_| found > 0 && found < supported) {
        let pending = PendingMigration {
            path: Some(path.to_owned()),
            found,
            target: supported,
        };
        before(&pending).map_err(|source| StoreError::BackupBeforeMigration {
            database: path.display().to_string(),
            found,
            target: supported,
            source,
        })?;
    }
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_version (
             version     INTEGER PRIMARY KEY,
             description TEXT    NOT NULL
         ) STRICT;",
    )
    .map_err(&classify)?;
    for m in migrations.iter().filter(|m| m.version > found) {
        let failed = |source| StoreError::Migration {
            path: path.to_owned(),
            version: m.version,
            source,
        };
        tx.execute_batch(m.sql).map_err(failed)?;
        tx.execute(
            "INSERT INTO schema_version (version, description) VALUES (?1, ?2)",
            (m.version, m.description),
        )
        .map_err(failed)?;
    }
    tx.commit().map_err(&classify)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_one_by_one() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1, "{}", m.description);
        }
    }

    #[test]
    fn application_id_literal_matches_constant() {
        assert!(MIGRATIONS[0]
            .sql
            .contains(&format!("PRAGMA application_id = {APPLICATION_ID};")));
    }
}
