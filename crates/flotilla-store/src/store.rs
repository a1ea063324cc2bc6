//! [`Store`]: the connection, opening (pragmas, migrations) and the private
//! helpers every query goes through. The queries themselves live in
//! [`journal`](crate::journal), [`instances`](crate::instances) and
//! [`stacks`](crate::stacks), each an `impl Store` block.

use crate::error::StoreError;
use crate::schema::{self, APPLICATION_ID};
use rusqlite::{Connection, ErrorCode, Transaction, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a statement waits for another connection's lock before failing with
/// [`StoreError::Busy`].
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The database's file name inside the state directory.
pub const STATE_DB_FILE: &str = "state.db";

/// Flotilla's local-mode state: the journal (operations and their steps), the
/// instances Flotilla started, desired lifecycles and stack start orders, in one
/// SQLite file.
///
/// - **Time**: the store never reads the clock. Every timestamp is an `i64` in
///   milliseconds since the Unix epoch, passed in by the caller (`*_ms`
///   parameters and fields), and is stored and returned as given.
/// - **No IO beyond SQL**: it does not look at processes, files or the
///   environment; e.g. deciding that an unfinished operation was interrupted is
///   the caller's job ([`Store::unfinished_operations`], [`Store::mark_interrupted`]).
/// - **Secrets**: never pass any (DESIGN.md invariant 9). Everything written here
///   is plain text on disk and shown by `--json` output; the store has no way to
///   recognise a secret, so it cannot refuse one.
/// - **Concurrency**: several processes may open the same file (one mutating CLI,
///   which also holds the lock file in `run/`, plus any number of readers such as
///   `status`). The file is in WAL mode, so readers never block the writer or each
///   other; writers wait up to [`BUSY_TIMEOUT`] for each other. Every mutating
///   method is one `BEGIN IMMEDIATE` transaction; multi-query reads read one
///   snapshot.
/// - **Threads**: `Store` is `Send` but not `Sync` (a `rusqlite::Connection`).
///   Share it between tasks behind a `Mutex`, or open one `Store` per thread. Its
///   methods block (briefly, or up to [`BUSY_TIMEOUT`] on contention): from async
///   code, call them in `tokio::task::spawn_blocking` or accept the short block.
#[derive(Debug)]
pub struct Store {
    pub(crate) conn: Connection,
    pub(crate) path: PathBuf,
}

impl Store {
    /// Opens the database at `path` (normally `<state dir>/`[`STATE_DB_FILE`]),
    /// creating the file if it does not exist (its directory must), and brings its
    /// schema up to [`SCHEMA_VERSION`](crate::SCHEMA_VERSION). Sets WAL mode, a
    /// busy timeout of [`BUSY_TIMEOUT`], and foreign keys on. Opening is
    /// idempotent: reopening an up-to-date file changes nothing and takes no write
    /// lock, so readers can open while a writer is mid-transaction. Several
    /// processes may open a fresh file at once: one applies the migrations, and
    /// the switch to WAL mode is retried (short sleeps, within [`BUSY_TIMEOUT`]).
    ///
    /// # Errors
    /// All name `path`:
    /// - [`StoreError::Open`]: cannot open or create the file (missing directory,
    ///   permissions…).
    /// - [`StoreError::NotADatabase`]: the file is not SQLite, or is corrupted.
    /// - [`StoreError::ForeignDatabase`]: an SQLite file of another application.
    /// - [`StoreError::SchemaTooNew`]: written by a newer Flotilla.
    /// - [`StoreError::Migration`]: a migration failed.
    /// - [`StoreError::Busy`]: another process held the lock too long.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let conn = Connection::open(path).map_err(|source| StoreError::Open {
            path: path.to_owned(),
            source,
        })?;
        Store::setup(conn, path.to_owned(), true)
    }

    /// Opens a fresh, private in-memory database with the same schema (for tests;
    /// nothing persists, and no other connection can see it). Errors are reported
    /// with the path `:memory:`.
    ///
    /// # Errors
    /// [`StoreError::Open`] or [`StoreError::Migration`] if SQLite fails (it does
    /// not in practice).
    pub fn open_in_memory() -> Result<Store, StoreError> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory().map_err(|source| StoreError::Open {
            path: path.clone(),
            source,
        })?;
        Store::setup(conn, path, false)
    }

    fn setup(mut conn: Connection, path: PathBuf, wal: bool) -> Result<Store, StoreError> {
        prepare(&conn, &path, APPLICATION_ID, wal)?;
        let classify = |source: rusqlite::Error| classify_open(&path, source);
        schema::migrate(&mut conn, &path, classify)?;
        Ok(Store { conn, path })
    }

    /// The database file this store was opened on (`:memory:` for
    /// [`Store::open_in_memory`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version recorded in the file (equal to
    /// [`SCHEMA_VERSION`](crate::SCHEMA_VERSION) once opened).
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] (or [`StoreError::Busy`] / [`StoreError::NotADatabase`])
    /// if the query fails.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.read("read the schema version", |conn| {
            Ok(schema::current_version(conn)?)
        })
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction, committed if `f` succeeds and
    /// rolled back otherwise; SQLite errors are classified with `context`.
    pub(crate) fn write<T>(
        &mut self,
        context: &'static str,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, TxError>,
    ) -> Result<T, StoreError> {
        let path = &self.path;
        let fail = |e: TxError| e.into_store_error(path, context);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| fail(e.into()))?;
        let out = f(&tx).map_err(fail)?;
        tx.commit().map_err(|e| fail(e.into()))?;
        Ok(out)
    }

    /// Runs the read-only `f`; SQLite errors are classified with `context`.
    /// `f` may open a snapshot with `conn.unchecked_transaction()` when it runs
    /// several queries.
    pub(crate) fn read<T>(
        &self,
        context: &'static str,
        f: impl FnOnce(&Connection) -> Result<T, TxError>,
    ) -> Result<T, StoreError> {
        f(&self.conn).map_err(|e| e.into_store_error(&self.path, context))
    }
}

/// An error inside a store method: raw SQLite (classified on the way out) or
/// already a [`StoreError`].
pub(crate) enum TxError {
    Sql(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for TxError {
    fn from(e: rusqlite::Error) -> Self {
        TxError::Sql(e)
    }
}

impl From<StoreError> for TxError {
    fn from(e: StoreError) -> Self {
        TxError::Store(e)
    }
}

impl TxError {
    pub(crate) fn into_store_error(self, path: &Path, context: &'static str) -> StoreError {
        match self {
            TxError::Store(e) => e,
            TxError::Sql(source) => match source.sqlite_error_code() {
                Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
                    StoreError::NotADatabase {
                        path: path.to_owned(),
                        source,
                    }
                }
                Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Busy {
                    path: path.to_owned(),
                    context,
                    source,
                },
                _ => StoreError::Sqlite { context, source },
            },
        }
    }
}

/// Puts the file in WAL mode (persistent in the file: a read-only check once it
/// is). Switching needs every other connection out of the way, and SQLite reports
/// `SQLITE_BUSY` at once, without its busy handler, when another process is
/// opening the same fresh file; so this retries with short sleeps, for at most
/// [`BUSY_TIMEOUT`] of sleeping in total (counted, not read from a clock).
/// What every Flotilla SQLite file gets when it is opened: the busy timeout, foreign
/// keys, a check that it is ours (`application_id` 0 for a new file, or `ours`; the
/// first statement that reads the file, so a non-SQLite or corrupted file is reported
/// here) and, for files (`wal`), WAL mode.
///
/// # Errors
/// [`StoreError::ForeignDatabase`], or what [`classify_open`] makes of SQLite's error.
pub(crate) fn prepare(
    conn: &Connection,
    path: &Path,
    ours: i32,
    wal: bool,
) -> Result<(), StoreError> {
    let classify = |source: rusqlite::Error| classify_open(path, source);
    conn.busy_timeout(BUSY_TIMEOUT).map_err(classify)?;
    conn.pragma_update(None, "foreign_keys", true)
        .map_err(classify)?;
    let app_id: i32 = conn
        .pragma_query_value(None, "application_id", |row| row.get(0))
        .map_err(classify)?;
    if app_id != 0 && app_id != ours {
        return Err(StoreError::ForeignDatabase {
            path: path.to_path_buf(),
            application_id: app_id,
        });
    }
    if wal {
        enable_wal(conn).map_err(classify)?;
    }
    Ok(())
}

pub(crate) fn enable_wal(conn: &Connection) -> rusqlite::Result<()> {
    let mut slept = Duration::ZERO;
    let mut pause = Duration::from_millis(1);
    loop {
        let current: String = conn.pragma_query_value(None, "journal_mode", |row| row.get(0))?;
        if current.eq_ignore_ascii_case("wal") {
            return Ok(());
        }
        let failure = match conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get::<_, String>(0))
        {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            // SQLite returns the unchanged mode when it could not switch.
            Ok(mode) => rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                Some(format!("could not switch journal_mode from {mode} to wal")),
            ),
            Err(e) if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy) => e,
            Err(e) => return Err(e),
        };
        if slept >= BUSY_TIMEOUT {
            return Err(failure);
        }
        std::thread::sleep(pause);
        slept += pause;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Classifies an SQLite error met while opening `path`.
pub(crate) fn classify_open(path: &Path, source: rusqlite::Error) -> StoreError {
    match TxError::Sql(source).into_store_error(path, "open the state database") {
        StoreError::Sqlite { source, .. } => StoreError::Open {
            path: path.to_owned(),
            source,
        },
        other => other,
    }
}
