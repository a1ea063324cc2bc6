//! Backups that are proven: an archive of a project's state directory or of the
//! authority (its directory, and its PostgreSQL database when it has one), with a
//! manifest, verified after it is written by restoring it into a scratch place, and
//! restored with nothing half-changed.
//!
//! - **What an archive is**: a directory `<backup dir>/<what>-<UTC time>`
//!   (`project-chat-20261201T104103.120Z`, `authority-…`), mode 0700 (it holds the
//!   authority's keys and the agents' credentials' hashes): `manifest.json` (see
//!   [`Manifest`]: what, when, why, which Flotilla, every file with its size, mode
//!   and SHA-256, every database with its schema version and the row count of each
//!   table at backup time), `manifest.sha256` (the manifest's own digest),
//!   `files/` (the directory's content) and, for an authority on PostgreSQL,
//!   `postgres.dump` (`pg_dump --format=custom`). A directory rather than one tar
//!   file: no archive crate in the tree, and each file can be checked and copied on
//!   its own.
//! - **Consistent while in use**: SQLite databases (found by their header) are
//!   copied through SQLite's online backup API in one read transaction whose
//!   snapshot also gives the row counts; their `-wal`/`-shm` are not copied (the
//!   copy holds what they held). PostgreSQL is dumped from a snapshot exported by
//!   the transaction that counts the rows. Lock files (`*.lock`) and sockets are
//!   left out, and listed in the manifest as skipped.
//! - **Never half an archive**: written as `.<name>.partial`, every file and
//!   directory fsynced, then verified, then renamed to its name.
//! - **Verified after writing** ([`verify`]): every file's size and SHA-256 read
//!   back; `files/` copied into a scratch directory and every database there
//!   opened: `PRAGMA integrity_check`, its schema version, its tables and their row
//!   counts equal to the manifest's; a PostgreSQL dump restored into a scratch
//!   database and counted likewise. An archive that does not verify is removed and
//!   the backup fails ([`BackupError::Unverified`]).
//! - **Restore** ([`restore`]): refuses an archive that is incomplete, corrupt
//!   (its manifest's digest, a file's size or SHA-256), from a newer Flotilla or
//!   schema, or of another kind; restores into a temporary sibling, checks it,
//!   then swaps by renames, keeping the previous directory as
//!   `<dir>.before-restore-<UTC time>` (and a previous database as
//!   `<db>_before_restore_<ms>`).
//! - **Retention** ([`retention`]): after each backup, the archives of the same
//!   thing beyond the newest `keep` (default [`DEFAULT_KEEP`]) are removed.
//! - **Time** is an argument (`now_ms`), as everywhere in this crate; this module
//!   reads and writes the directories it is given, and runs `pg_dump`/`pg_restore`
//!   only through the caller's [`PgTools`].
//!
//! Files: [`manifest`] (the manifest, names, version checks), `archive.rs`
//! (writing an archive, checking and copying its files), [`sqlite`] (copies
//! through the backup API, checks), [`postgres`] (dump, scratch restore, swap),
//! `verify.rs`, `restore.rs`, [`retention`], [`error`].

pub mod error;
pub mod manifest;
pub mod postgres;
pub mod retention;
pub mod sqlite;

mod archive;
mod restore;
mod verify;

pub use error::BackupError;
pub use manifest::{DatabaseEntry, Engine, EntryKind, FileEntry, Manifest};
pub use postgres::{PgTools, Swapped};
pub use restore::{restore, restore_with_postgres, Restored};
pub use verify::{verify, verify_with_postgres, Verified};

use archive::Writer;
use manifest::POSTGRES_DUMP;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The version of Flotilla this crate belongs to (the workspace's, so the
/// binary's), recorded in every archive; an archive of a newer one is refused.
pub const FLOTILLA_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The archive format this build writes and the newest it reads.
pub const ARCHIVE_FORMAT: u32 = 1;

/// How many archives of one thing are kept unless told otherwise.
pub const DEFAULT_KEEP: usize = 10;

/// The backup directory's name, beside what is backed up (`<state
/// dir>/backups` for projects, `<authority dir>/../backups` for the authority).
pub const BACKUPS_DIR: &str = "backups";

/// What an archive holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A project's state directory (`<state dir>/projects/<name>`).
    Project,
    /// The authority's directory, and its PostgreSQL database when it has one.
    Authority,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Project => "project",
            Kind::Authority => "authority",
        })
    }
}

/// A backup to take.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// What it is.
    pub kind: Kind,
    /// The project's name (`authority` for the authority).
    pub name: &'a str,
    /// The directory to back up.
    pub source: &'a Path,
    /// The backup directory (created, 0700, if missing).
    pub to: &'a Path,
    /// Now, in milliseconds since the Unix epoch: the archive's time and name.
    pub now_ms: i64,
    /// Why: `manual`, `before-migration`, `before-self-update`, `before-adopt`.
    pub reason: &'a str,
    /// How many archives of this thing to keep in `to` (`0`: all).
    pub keep: usize,
}

/// The PostgreSQL database of an authority, and how to run its client programs.
#[derive(Clone)]
pub struct Postgres {
    /// A libpq connection string (`postgres://user:password@host:port/db` or
    /// `key=value …`); never printed.
    pub url: String,
    /// Runs `pg_dump` and `pg_restore`.
    pub tools: Arc<dyn PgTools>,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the URL: it may hold a password.
        f.debug_struct("Postgres").finish_non_exhaustive()
    }
}

/// A backup taken and verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The archive.
    pub archive: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
    /// Older archives of the same thing removed by retention.
    pub pruned: Vec<PathBuf>,
}

impl Request<'_> {
    fn manifest(&self, source: &Path) -> Manifest {
        Manifest {
            format: ARCHIVE_FORMAT,
            kind: self.kind,
            name: self.name.to_string(),
            source: source.to_owned(),
            created_ms: self.now_ms,
            reason: self.reason.to_string(),
            flotilla_version: FLOTILLA_VERSION.to_string(),
            files: Vec::new(),
            databases: Vec::new(),
            skipped: Vec::new(),
        }
    }

    /// The source, absolute and resolved.
    fn source(&self) -> Result<PathBuf, BackupError> {
        match std::fs::canonicalize(self.source) {
            Ok(s) if s.is_dir() => Ok(s),
            _ => Err(BackupError::NoSource {
                path: self.source.to_owned(),
            }),
        }
    }

    /// Publishes the verified archive and prunes older ones.
    fn publish(&self, w: Writer, manifest: Manifest) -> Result<Written, BackupError> {
        let archive = w.publish()?;
        let pruned = retention::prune(self.to, self.kind, self.name, self.keep)?;
        Ok(Written {
            archive,
            manifest,
            pruned,
        })
    }

    fn name(&self) -> String {
        format!(
            "{}{}",
            manifest::prefix(self.kind, self.name),
            manifest::stamp(self.now_ms)
        )
    }
}

/// What to leave out of `source`: the backup directory `to` (which exists once the
/// archive is begun), when it is inside.
fn exclude(to: &Path, source: &Path) -> Vec<PathBuf> {
    std::fs::canonicalize(to)
        .ok()
        .filter(|to| to.starts_with(source))
        .into_iter()
        .collect()
}

/// Takes a backup of a directory (module docs): written, verified, published under
/// its name, then older archives of the same thing pruned to `keep`. For an
/// authority on PostgreSQL, [`create_with_postgres`].
///
/// # Errors
/// [`BackupError::NoSource`], [`BackupError::Unverified`] (the archive was
/// removed), [`BackupError::Io`], [`BackupError::Sqlite`]. No archive is left under
/// its name when it fails.
pub fn create(req: &Request<'_>) -> Result<Written, BackupError> {
    let source = req.source()?;
    let mut w = Writer::begin(req.to, &req.name())?;
    w.add_tree(&source, &exclude(req.to, &source))?;
    let manifest = w.write_manifest(req.manifest(&source))?;
    verify::files_and_sqlite(&w.partial, &manifest).map_err(|e| BackupError::Unverified {
        archive: w.path.clone(),
        source: Box::new(e),
    })?;
    req.publish(w, manifest)
}

/// [`create`] for an authority on PostgreSQL: its directory, and its database
/// dumped into the archive (`postgres.dump`), verified by a restore into a scratch
/// database.
///
/// # Errors
/// As [`create`], and [`BackupError::Postgres`], [`BackupError::PgTool`].
pub async fn create_with_postgres(
    req: &Request<'_>,
    pg: &Postgres,
) -> Result<Written, BackupError> {
    let source = req.source()?;
    let (to, name) = (req.to.to_owned(), req.name());
    let w = {
        let source = source.clone();
        verify::blocking(move || {
            let mut w = Writer::begin(&to, &name)?;
            w.add_tree(&source, &exclude(&to, &source))?;
            Ok(w)
        })
        .await?
    };
    let mut w = w;
    let entry = postgres::dump(&pg.url, &pg.tools, &w.partial.join(POSTGRES_DUMP)).await?;
    w.add_written(POSTGRES_DUMP, 0o600)?;
    w.databases.push(entry);
    let manifest = w.write_manifest(req.manifest(&source))?;
    let checked = {
        let (partial, manifest) = (w.partial.clone(), manifest.clone());
        verify::blocking(move || verify::files_and_sqlite(&partial, &manifest)).await
    };
    let checked = match checked {
        Ok(()) => verify::postgres_part(&w.partial, &manifest, pg, req.now_ms).await,
        Err(e) => Err(e),
    };
    checked.map_err(|e| BackupError::Unverified {
        archive: w.path.clone(),
        source: Box::new(e),
    })?;
    req.publish(w, manifest)
}
