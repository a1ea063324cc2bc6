//! [`BackupError`]: everything that can go wrong taking, verifying or restoring a
//! backup, typed; [`BackupError::is_refusal`] tells a refused archive or target
//! (exit 1) from a failure to read or write (exit 3).

use super::Kind;
use std::path::PathBuf;

/// Why a backup, its verification or a restore did not happen. Every variant that
/// concerns an archive or a directory names it. A refusal (see
/// [`BackupError::is_refusal`]) changed nothing; a failure while writing a backup
/// leaves no archive under its final name.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackupError {
    /// A file or directory could not be read, written, renamed or synced.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },

    /// What should be backed up is not there.
    #[error("nothing to back up: {} does not exist (or is not a directory)", path.display())]
    NoSource {
        /// The directory.
        path: PathBuf,
    },

    /// An SQLite database could not be read, copied or checked.
    #[error("SQLite database {}: cannot {context}: {source}", path.display())]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// What was being done, e.g. `copy it through the online backup API`.
        context: &'static str,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },

    /// The PostgreSQL database could not be reached or read. The URL is not
    /// repeated: it may hold a password.
    #[error("PostgreSQL: cannot {context}: {source}")]
    Postgres {
        /// What was being done, e.g. `export a snapshot`.
        context: &'static str,
        /// What tokio-postgres said.
        #[source]
        source: tokio_postgres::Error,
    },

    /// `pg_dump` or `pg_restore` could not be run or failed.
    #[error("`{program}` {why}")]
    PgTool {
        /// The program.
        program: String,
        /// How it failed (its exit status and standard error, or why it could not
        /// be started).
        why: String,
    },

    /// The archive has no manifest (not an archive, or one cut short before its
    /// manifest was written).
    #[error("{} is not a complete flotilla backup: {what} is missing", archive.display())]
    Incomplete {
        /// The archive.
        archive: PathBuf,
        /// What is missing (`manifest.json`, a file it lists…).
        what: String,
    },

    /// The manifest cannot be read as one, or does not match its own digest
    /// (`manifest.sha256`).
    #[error("{} is corrupt: {why}", archive.display())]
    Corrupt {
        /// The archive.
        archive: PathBuf,
        /// What is wrong.
        why: String,
    },

    /// A file of the archive is not what its manifest recorded: shorter (cut short)
    /// or longer, or with other bytes.
    #[error("{} is damaged: {path} {why}", archive.display())]
    Damaged {
        /// The archive.
        archive: PathBuf,
        /// The file, relative to the archive.
        path: String,
        /// E.g. `has 812 bytes, the manifest says 4096 (cut short)`, `has SHA-256
        /// sha256:… , the manifest says sha256:…`.
        why: String,
    },

    /// The archive was written by a newer Flotilla, or holds a database of a newer
    /// schema than this build understands.
    #[error("{} comes from a newer flotilla: {what}; restore it with that version or a later one", archive.display())]
    TooNew {
        /// The archive.
        archive: PathBuf,
        /// What is newer, e.g. `flotilla 0.3.0 (this is 0.1.0)`, `authority.db has
        /// schema version 12 (this flotilla understands 11)`.
        what: String,
    },

    /// The archive holds something else than what the command restores.
    #[error("{} holds {found} state, not {expected} state{hint}", archive.display())]
    WrongKind {
        /// The archive.
        archive: PathBuf,
        /// What it holds.
        found: Kind,
        /// What was asked for.
        expected: Kind,
        /// What to run instead (starts with `: `), or empty.
        hint: String,
    },

    /// The archive holds a PostgreSQL dump and no database was named to restore
    /// it into (or the other way round).
    #[error("{why}")]
    Database {
        /// What is missing or does not fit.
        why: String,
    },

    /// A restored copy failed its checks: `PRAGMA integrity_check`, its tables or
    /// their row counts differ from what the manifest recorded at backup time, its
    /// schema version differs.
    #[error("{database} does not verify: {why}")]
    Check {
        /// The database (its file in the archive, or `PostgreSQL dump`).
        database: String,
        /// What differs.
        why: String,
    },

    /// The backup was written but did not verify; it was removed.
    #[error("the backup {} did not verify and was removed", archive.display())]
    Unverified {
        /// The archive that was removed.
        archive: PathBuf,
        /// Why it did not verify.
        #[source]
        source: Box<BackupError>,
    },

    /// The place a restore would replace is in use (a running `flotilla serve`, a
    /// mutating invocation holding the project's lifecycle lock, sessions on the
    /// PostgreSQL database).
    #[error("{target} is in use by {holder}: stop that first, then restore")]
    InUse {
        /// The directory or database.
        target: String,
        /// Who uses it.
        holder: String,
    },
}

impl BackupError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> BackupError {
        let path = path.into();
        move |source| BackupError::Io { path, source }
    }

    /// Whether this is a refusal — an archive that is not whole, not ours to read,
    /// from a newer version, of the wrong kind, one that does not verify, or a
    /// target in use — rather than a failure to read, write or reach something.
    pub fn is_refusal(&self) -> bool {
        match self {
            BackupError::Incomplete { .. }
            | BackupError::Corrupt { .. }
            | BackupError::Damaged { .. }
            | BackupError::TooNew { .. }
            | BackupError::WrongKind { .. }
            | BackupError::Check { .. }
            | BackupError::InUse { .. } => true,
            BackupError::Unverified { source, .. } => source.is_refusal(),
            _ => false,
        }
    }
}
