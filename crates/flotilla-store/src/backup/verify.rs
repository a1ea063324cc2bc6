//! Verifying an archive: its manifest (against its own digest and this build's
//! versions), every file (present, its size, its SHA-256, read from disk), then a
//! real restore into a scratch place — `files/` copied out into a scratch directory
//! beside the archive, every SQLite database there checked (`PRAGMA
//! integrity_check`, schema, every table's row count against the count recorded at
//! backup time); a PostgreSQL dump restored with `pg_restore` into a scratch
//! database and its row counts compared the same way. Scratch places are removed
//! afterwards.

use super::archive::{self, check_files, extract};
use super::error::BackupError;
use super::manifest::{Engine, Manifest};
use super::{postgres, sqlite, Postgres};
use std::path::{Path, PathBuf};

/// What a verification checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The archive's manifest.
    pub manifest: Manifest,
    /// Files checked (size and SHA-256).
    pub files: usize,
    /// Databases restored and checked.
    pub databases: usize,
}

/// A scratch directory beside `archive` (`.<archive name>.verify-<pid>`), removed
/// when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        archive::make_removable(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Checks every file, then restores `files/` into a scratch directory and checks
/// every SQLite database there. PostgreSQL dumps are left to the caller.
pub(crate) fn files_and_sqlite(archive: &Path, manifest: &Manifest) -> Result<(), BackupError> {
    check_files(archive, manifest)?;
    let name = archive
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let scratch = Scratch(archive.parent().unwrap_or(Path::new(".")).join(format!(
        ".{}.verify-{}",
        name.trim_start_matches('.'),
        std::process::id()
    )));
    let _ = std::fs::remove_dir_all(&scratch.0);
    archive::create_private_dir(&scratch.0)?;
    extract(archive, manifest, &scratch.0)?;
    for db in manifest
        .databases
        .iter()
        .filter(|d| d.engine == Engine::Sqlite)
    {
        let Some(path) = archive::restored_path(&scratch.0, &db.path) else {
            continue;
        };
        sqlite::check(&path, db)?;
    }
    Ok(())
}

/// Verifies `archive` (module docs). An archive holding a PostgreSQL dump needs
/// [`verify_with_postgres`].
///
/// # Errors
/// [`BackupError::Incomplete`], [`BackupError::Corrupt`],
/// [`BackupError::Damaged`], [`BackupError::TooNew`], [`BackupError::Check`],
/// [`BackupError::Database`] (a PostgreSQL dump), [`BackupError::Io`],
/// [`BackupError::Sqlite`].
pub fn verify(archive: &Path) -> Result<Verified, BackupError> {
    let manifest = Manifest::read(archive, sqlite::supported)?;
    manifest.without_postgres(archive, "it is verified against a PostgreSQL server")?;
    files_and_sqlite(archive, &manifest)?;
    Ok(Verified {
        files: manifest.files.len(),
        databases: manifest.databases.len(),
        manifest,
    })
}

/// [`verify`], and a PostgreSQL dump restored into a scratch database on the
/// server `pg` names (`flotilla_verify_<ms>_<pid>`; the user needs `CREATEDB`),
/// checked and dropped.
///
/// # Errors
/// As [`verify`], and [`BackupError::Postgres`], [`BackupError::PgTool`].
pub async fn verify_with_postgres(
    archive: &Path,
    pg: &Postgres,
    now_ms: i64,
) -> Result<Verified, BackupError> {
    let manifest = {
        let archive = archive.to_owned();
        blocking(move || {
            let manifest = Manifest::read(&archive, sqlite::supported)?;
            files_and_sqlite(&archive, &manifest)?;
            Ok(manifest)
        })
        .await?
    };
    postgres_part(archive, &manifest, pg, now_ms).await?;
    Ok(Verified {
        files: manifest.files.len(),
        databases: manifest.databases.len(),
        manifest,
    })
}

/// Verifies the PostgreSQL dump of `manifest`, if it has one.
pub(crate) async fn postgres_part(
    archive: &Path,
    manifest: &Manifest,
    pg: &Postgres,
    now_ms: i64,
) -> Result<(), BackupError> {
    match manifest.postgres() {
        Some(db) => postgres::verify(&pg.url, &pg.tools, &archive.join(&db.path), db, now_ms).await,
        None => Ok(()),
    }
}

/// Runs blocking file and SQLite work on the blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, BackupError> + Send + 'static,
) -> Result<T, BackupError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| BackupError::Io {
            path: PathBuf::from("(a blocking task)"),
            source: std::io::Error::other(e.to_string()),
        })?
}
