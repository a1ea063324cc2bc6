//! SQLite databases in a backup: recognised by their header, copied through
//! SQLite's online backup API (<https://www.sqlite.org/backup.html>) in one read
//! snapshot — the row count of every table is read in that same snapshot — and
//! checked after a restore (`PRAGMA integrity_check`, the tables and their row
//! counts, the schema version).

use super::error::BackupError;
use super::manifest::{DatabaseEntry, Engine};
use crate::authority::{AUTHORITY_APPLICATION_ID, AUTHORITY_SCHEMA_VERSION};
use crate::schema::{self, APPLICATION_ID, SCHEMA_VERSION};
use crate::store::BUSY_TIMEOUT;
use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

/// The first 16 bytes of every SQLite database file.
const HEADER: &[u8; 16] = b"SQLite format 3\0";

/// The files SQLite keeps beside a database (`<db>-wal`, `<db>-shm`,
/// `<db>-journal`): their content is in a copy made through the backup API.
pub(crate) const COMPANIONS: &[&str] = &["-wal", "-shm", "-journal"];

/// Whether `path` is an SQLite database (by its header).
pub(crate) fn is_database(path: &Path) -> bool {
    let mut head = [0u8; 16];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| &head == HEADER)
}

/// The schema a Flotilla `application_id` stands for, and the newest version of it
/// this build knows.
fn schema_of(application_id: i32) -> Option<(&'static str, i64)> {
    match application_id {
        APPLICATION_ID => Some(("state", SCHEMA_VERSION)),
        AUTHORITY_APPLICATION_ID => Some(("authority", AUTHORITY_SCHEMA_VERSION)),
        _ => None,
    }
}

/// The newest version of schema `name` (`state`, `authority`) this build knows.
pub fn supported(name: &str) -> Option<i64> {
    match name {
        "state" => Some(SCHEMA_VERSION),
        "authority" => Some(AUTHORITY_SCHEMA_VERSION),
        _ => None,
    }
}

fn fail(path: &Path, context: &'static str) -> impl FnOnce(rusqlite::Error) -> BackupError {
    let path = path.to_owned();
    move |source| BackupError::Sqlite {
        path,
        context,
        source,
    }
}

/// Every table of `conn`'s main database and its row count.
fn row_counts(conn: &Connection) -> rusqlite::Result<BTreeMap<String, i64>> {
    let names: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")?
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    let mut counts = BTreeMap::new();
    for name in names {
        let quoted = name.replace('"', "\"\"");
        let n: i64 = conn.query_row(&format!("SELECT count(*) FROM \"{quoted}\""), [], |r| {
            r.get(0)
        })?;
        counts.insert(name, n);
    }
    Ok(counts)
}

/// What is known of a database's schema: its name and version.
fn schema_facts(conn: &Connection) -> rusqlite::Result<(Option<String>, Option<i64>)> {
    let app: i32 = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    Ok(match schema_of(app) {
        Some((name, _)) => (Some(name.to_string()), Some(schema::current_version(conn)?)),
        None => (None, None),
    })
}

/// Copies the database `src` (which others may be writing) to `dst` (a new file)
/// through the online backup API, in one step inside one read transaction, whose
/// snapshot also gives the row counts: the copy is consistent and holds exactly the
/// rows counted. The copy is left in rollback-journal mode (`journal_mode=DELETE`:
/// one file, nothing beside it; the store switches it back to WAL when it opens
/// it). `rel` is its path in the archive.
///
/// # Errors
/// [`BackupError::Sqlite`] naming `src` (or `dst`).
pub(crate) fn copy(src: &Path, dst: &Path, rel: &str) -> Result<DatabaseEntry, BackupError> {
    // Read-write without create: WAL readers need the shared-memory file, and a
    // database that vanished must not be made afresh.
    let from = Connection::open_with_flags(
        src,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(fail(src, "open it"))?;
    from.busy_timeout(BUSY_TIMEOUT)
        .map_err(fail(src, "set a busy timeout"))?;
    from.execute_batch("BEGIN DEFERRED")
        .map_err(fail(src, "begin a read transaction"))?;
    // The first read starts the snapshot the counts and the copy share.
    let (schema, schema_version) = schema_facts(&from).map_err(fail(src, "read its schema"))?;
    let tables = row_counts(&from).map_err(fail(src, "count its rows"))?;
    let mut to = Connection::open(dst).map_err(fail(dst, "create the copy"))?;
    {
        let backup = Backup::new(&from, &mut to).map_err(fail(src, "start the online backup"))?;
        let mut waited = Duration::ZERO;
        loop {
            match backup
                .step(-1)
                .map_err(fail(src, "copy it through the online backup API"))?
            {
                StepResult::Done => break,
                StepResult::More => {}
                StepResult::Busy | StepResult::Locked if waited < BUSY_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(20));
                    waited += Duration::from_millis(20);
                }
                _ => {
                    return Err(BackupError::Sqlite {
                        path: src.to_owned(),
                        context: "copy it through the online backup API (it stayed locked)",
                        source: rusqlite::Error::SqliteFailure(
                            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                            None,
                        ),
                    })
                }
            }
        }
    }
    from.execute_batch("COMMIT")
        .map_err(fail(src, "end the read transaction"))?;
    drop(from);
    to.pragma_update_and_check(None, "journal_mode", "DELETE", |r| r.get::<_, String>(0))
        .map_err(fail(dst, "set the copy's journal mode"))?;
    to.close()
        .map_err(|(_, e)| fail(dst, "close the copy")(e))?;
    Ok(DatabaseEntry {
        path: rel.to_string(),
        engine: Engine::Sqlite,
        schema,
        schema_version,
        tables,
    })
}

/// Checks a restored copy `path` against its manifest entry: `PRAGMA
/// integrity_check` answers `ok`, the same tables with the same row counts, the same
/// schema. The file must be in a scratch place or the restored directory: opening
/// it may create its journal beside it.
///
/// # Errors
/// [`BackupError::Check`] naming what differs; [`BackupError::Sqlite`].
pub(crate) fn check(path: &Path, entry: &DatabaseEntry) -> Result<(), BackupError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(fail(path, "open the restored copy"))?;
    let bad = |why: String| BackupError::Check {
        database: entry.path.clone(),
        why,
    };
    let report: Vec<String> = conn
        .prepare("PRAGMA integrity_check")
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(|e| match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt) => {
                bad(format!("integrity_check: {e}"))
            }
            _ => fail(path, "run integrity_check")(e),
        })?;
    if report != ["ok"] {
        return Err(bad(format!("integrity_check: {}", report.join("; "))));
    }
    let (schema, version) = schema_facts(&conn).map_err(fail(path, "read its schema"))?;
    if (schema.as_ref(), version) != (entry.schema.as_ref(), entry.schema_version) {
        return Err(bad(format!(
            "schema {} version {}, the manifest says {} version {}",
            schema.as_deref().unwrap_or("unknown"),
            version.map_or("-".into(), |v| v.to_string()),
            entry.schema.as_deref().unwrap_or("unknown"),
            entry.schema_version.map_or("-".into(), |v| v.to_string()),
        )));
    }
    let counts = row_counts(&conn).map_err(fail(path, "count its rows"))?;
    compare_counts(&entry.tables, &counts).map_err(bad)
}

/// Compares the row counts recorded at backup time with those found after a
/// restore: `Err` lists every table that differs.
pub(crate) fn compare_counts(
    recorded: &BTreeMap<String, i64>,
    found: &BTreeMap<String, i64>,
) -> Result<(), String> {
    let mut diffs = Vec::new();
    for (table, n) in recorded {
        match found.get(table) {
            None => diffs.push(format!("table {table} is missing (had {n} rows)")),
            Some(m) if m != n => {
                diffs.push(format!("table {table} has {m} rows, {n} at backup time"))
            }
            Some(_) => {}
        }
    }
    for table in found.keys().filter(|t| !recorded.contains_key(*t)) {
        diffs.push(format!("table {table} was not there at backup time"));
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(diffs.join("; "))
    }
}
