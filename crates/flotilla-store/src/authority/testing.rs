//! Helpers for tests that need a PostgreSQL authority store (this crate's and the
//! server's): a fresh, empty database per test on the server named by
//! `FLOTILLA_TEST_POSTGRES_URL` (started by `scripts/postgres`). Not for
//! production use.
//!
//! Databases are named `flt_test_<pid>_<random>`, `<pid>` being the test
//! process's. Each [`create_database`] first drops the test databases of
//! processes that no longer run (on Linux, where `/proc` tells), so tests that do
//! not clean up after themselves (or panicked) leak nothing for long.

use super::postgres::PostgresAuthority;
use crate::error::StoreError;
use tokio_postgres::{Client, Config, NoTls};

/// The environment variable that names the tests' PostgreSQL server (a superuser
/// URL, e.g. `postgres://postgres@127.0.0.1:54329/postgres`).
pub const TEST_POSTGRES_URL_VAR: &str = "FLOTILLA_TEST_POSTGRES_URL";

/// The prefix of every test database's name.
const PREFIX: &str = "flt_test_";

/// A database made by [`create_database`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestDatabase {
    /// Its name, `flt_test_<pid>_<random hex>`.
    pub name: String,
    /// A libpq `key=value` connection string for it (the admin URL's host, port,
    /// user and password), for [`PostgresAuthority::connect`].
    pub url: String,
}

/// The admin URL from [`TEST_POSTGRES_URL_VAR`].
///
/// # Panics
/// When the variable is unset, with a message naming `scripts/postgres`.
pub fn admin_url() -> String {
    std::env::var(TEST_POSTGRES_URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{TEST_POSTGRES_URL_VAR} is not set: the PostgreSQL tests need a PostgreSQL 15 \
             server. Start one with `eval \"$(scripts/postgres)\"` (scripts/test does this), \
             or set {TEST_POSTGRES_URL_VAR} to a superuser URL (postgres://user@host:port/db)."
        )
    })
}

/// Connects to the server as the admin (a superuser) and drives the connection.
async fn admin(admin_url: &str) -> Result<(Config, Client), StoreError> {
    let config: Config = admin_url
        .parse()
        .map_err(|source| StoreError::PostgresConnect { source })?;
    let (client, connection) = config
        .connect(NoTls)
        .await
        .map_err(|source| StoreError::PostgresConnect { source })?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok((config, client))
}

/// Quotes a libpq `key=value` value.
fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A random number from the operating system (`getrandom`).
fn random_u64() -> u64 {
    getrandom::u64().expect("the OS random source works")
}

/// Whether the process that made the test database `name` is gone (`false` when
/// that cannot be told: not Linux, or a name of another shape).
fn orphaned(name: &str) -> bool {
    let Some(pid) = name
        .strip_prefix(PREFIX)
        .and_then(|rest| rest.split('_').next())
        .and_then(|pid| pid.parse::<u32>().ok())
    else {
        return false;
    };
    let proc = std::path::Path::new("/proc");
    proc.join("self").exists() && !proc.join(pid.to_string()).exists()
}

/// Drops the test databases whose processes no longer run (errors ignored:
/// another test may be dropping the same one).
async fn reap(client: &Client) {
    let Ok(rows) = client
        .query(
            "SELECT datname FROM pg_database WHERE starts_with(datname, $1)",
            &[&PREFIX],
        )
        .await
    else {
        return;
    };
    for row in rows {
        let name: String = row.get(0);
        if orphaned(&name) {
            let _ = client
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await;
        }
    }
}

/// Creates a fresh, empty database on the server at `admin_url` (a superuser
/// URL), after dropping the test databases of processes that no longer run.
///
/// # Errors
/// [`StoreError::PostgresConnect`] or [`StoreError::Postgres`].
pub async fn create_database(admin_url: &str) -> Result<TestDatabase, StoreError> {
    let (config, client) = admin(admin_url).await?;
    reap(&client).await;
    let name = format!("{PREFIX}{}_{:016x}", std::process::id(), random_u64());
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .map_err(|source| StoreError::Postgres {
            context: "create a test database",
            source,
        })?;
    let mut url = vec![format!("dbname={}", quote(&name))];
    if let Some(user) = config.get_user() {
        url.push(format!("user={}", quote(user)));
    }
    if let Some(password) = config.get_password() {
        url.push(format!(
            "password={}",
            quote(&String::from_utf8_lossy(password))
        ));
    }
    for host in config.get_hosts() {
        match host {
            tokio_postgres::config::Host::Tcp(h) => url.push(format!("host={}", quote(h))),
            tokio_postgres::config::Host::Unix(p) => {
                url.push(format!("host={}", quote(&p.display().to_string())))
            }
        }
    }
    if let Some(port) = config.get_ports().first() {
        url.push(format!("port={port}"));
    }
    Ok(TestDatabase {
        name,
        url: url.join(" "),
    })
}

/// Drops the test database `name` (ending its connections).
///
/// # Errors
/// [`StoreError::PostgresConnect`] or [`StoreError::Postgres`].
pub async fn drop_database(admin_url: &str, name: &str) -> Result<(), StoreError> {
    let (_, client) = admin(admin_url).await?;
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await
        .map_err(|source| StoreError::Postgres {
            context: "drop a test database",
            source,
        })
}

/// A [`PostgresAuthority`] on a fresh database made by [`create_database`] (left
/// for a later [`create_database`] to drop once this process has ended).
///
/// # Panics
/// When the server cannot be reached or the database cannot be made, with what
/// went wrong and a pointer to `scripts/postgres`.
pub async fn fresh_postgres(admin_url: &str) -> PostgresAuthority {
    let db = create_database(admin_url).await.unwrap_or_else(|e| {
        panic!("cannot make a test database on {TEST_POSTGRES_URL_VAR} (is scripts/postgres running?): {e}")
    });
    PostgresAuthority::connect(&db.url)
        .await
        .unwrap_or_else(|e| panic!("cannot open the test database {}: {e}", db.name))
}

/// A transaction of another client holding a table locked (see [`lock_table`]).
pub struct TableLock {
    client: tokio_postgres::Client,
}

impl TableLock {
    /// Ends the transaction, releasing the lock (dropping the value does too, by
    /// closing its connection).
    ///
    /// # Errors
    /// [`StoreError::Postgres`].
    pub async fn release(self) -> Result<(), StoreError> {
        self.client
            .batch_execute("COMMIT")
            .await
            .map_err(|source| StoreError::Postgres {
                context: "release a test's table lock",
                source,
            })
    }
}

/// Locks `table` of the database at `url` (a [`TestDatabase::url`]) against every
/// write (`LOCK TABLE … IN EXCLUSIVE MODE`, held by an open transaction of a
/// connection of its own) until [`TableLock::release`]: for tests that hold a
/// store's writes back while requests pile up.
///
/// # Errors
/// [`StoreError::PostgresConnect`] or [`StoreError::Postgres`].
pub async fn lock_table(url: &str, table: &str) -> Result<TableLock, StoreError> {
    let (_, client) = admin(url).await?;
    client
        .batch_execute(&format!("BEGIN; LOCK TABLE {table} IN EXCLUSIVE MODE"))
        .await
        .map_err(|source| StoreError::Postgres {
            context: "lock a table for a test",
            source,
        })?;
    Ok(TableLock { client })
}

/// Makes an SQLite authority database at `path` at schema `version` only (as an
/// older Flotilla left it), to test what opening it with this build does.
///
/// # Errors
/// As [`super::SqliteAuthority::open`].
pub fn sqlite_authority_at_version(path: &std::path::Path, version: i64) -> Result<(), StoreError> {
    super::sqlite::create_at_version(path, version)
}

/// Brings the empty PostgreSQL database at `url` to schema `version` only (as an
/// older Flotilla left it), to test what connecting with this build does.
///
/// # Errors
/// [`StoreError::PostgresConnect`], [`StoreError::Postgres`],
/// [`StoreError::PostgresMigration`].
pub async fn postgres_authority_at_version(url: &str, version: i64) -> Result<(), StoreError> {
    super::postgres::create_at_version(url, version).await
}

/// The last schema that kept blob bytes in the database (in chunks of
/// [`super::BLOB_CHUNK_BYTES`]); schema 9 moved them to files.
pub const LAST_SCHEMA_WITH_BLOB_CHUNKS: i64 = 8;

/// Makes an SQLite authority database at `path` as schema 8 left it, holding
/// `bytes` as the blob `sha256` in chunks (a *legacy* blob, for tests of moving
/// it to files).
///
/// # Panics
/// When the database cannot be made or written.
pub fn sqlite_with_legacy_blob(path: &std::path::Path, sha256: &str, bytes: &[u8]) {
    super::sqlite::create_at_version(path, LAST_SCHEMA_WITH_BLOB_CHUNKS).expect("schema 8");
    let conn = rusqlite::Connection::open(path).expect("open");
    conn.execute(
        "INSERT INTO blobs (sha256, size) VALUES (?1, ?2)",
        (sha256, bytes.len() as i64),
    )
    .expect("insert blob");
    for (n, chunk) in bytes.chunks(super::BLOB_CHUNK_BYTES).enumerate() {
        conn.execute(
            "INSERT INTO blob_chunks (sha256, n, bytes) VALUES (?1, ?2, ?3)",
            (sha256, n as i64, chunk),
        )
        .expect("insert chunk");
    }
}

/// As [`sqlite_with_legacy_blob`], in the empty PostgreSQL database at `url`.
///
/// # Panics
/// When the database cannot be reached or written.
pub async fn postgres_with_legacy_blob(url: &str, sha256: &str, bytes: &[u8]) {
    super::postgres::create_at_version(url, LAST_SCHEMA_WITH_BLOB_CHUNKS)
        .await
        .expect("schema 8");
    let config: tokio_postgres::Config = url.parse().expect("url");
    let (client, connection) = config
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connect");
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    client
        .execute(
            "INSERT INTO blobs (sha256, size) VALUES ($1, $2)",
            &[&sha256, &(bytes.len() as i64)],
        )
        .await
        .expect("insert blob");
    for (n, chunk) in bytes.chunks(super::BLOB_CHUNK_BYTES).enumerate() {
        client
            .execute(
                "INSERT INTO blob_chunks (sha256, n, bytes) VALUES ($1, $2, $3)",
                &[&sha256, &(n as i64), &chunk],
            )
            .await
            .expect("insert chunk");
    }
    drop(client);
    let _ = driver.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orphan_detection() {
        assert!(!orphaned(&format!("flt_test_{}_00ff", std::process::id())));
        assert!(!orphaned("flt_test_notapid_00ff"));
        assert!(!orphaned("postgres"));
        if std::path::Path::new("/proc/self").exists() {
            // Above pid_max (at most 2^22): never a live process.
            assert!(orphaned("flt_test_4294967295_00ff"));
        }
    }

    #[test]
    fn quoting() {
        assert_eq!(quote(r"a'b\c"), r"'a\'b\\c'");
    }
}
