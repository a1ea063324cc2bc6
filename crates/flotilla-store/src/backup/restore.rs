//! Restoring an archive into the directory it came from (or another), with nothing
//! half-changed: the archive is read and checked first (manifest, versions, every
//! file's size and SHA-256); its files are copied into a temporary sibling of the
//! target (`.<name>.restoring-<time>`) and every database there checked (integrity,
//! schema, row counts); a PostgreSQL dump is restored into a new database and checked
//! the same way. Only then is the target swapped by renames: the current directory
//! becomes `<name>.before-restore-<time>` (kept: the caller may remove it), the
//! restored one takes its name; the database likewise
//! (`<db>_before_restore_<ms>`). A failure before the swap removes what was
//! prepared; a failed rename is undone.
//!
//! The caller makes sure nobody uses the target while it is swapped (the
//! authority's `serve.lock`, a project's lifecycle lock: `flotilla_exec::backup`
//! holds them around these calls).

use super::archive::make_removable;
use super::archive::{self, extract, sync_dir};
use super::error::BackupError;
use super::manifest::{holds_a_dump, stamp, Engine, Manifest};
use super::postgres::{self, Swapped};
use super::verify::blocking;
use super::{sqlite, Kind, Postgres};
use std::path::{Path, PathBuf};

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The archive's manifest.
    pub manifest: Manifest,
    /// The directory restored.
    pub target: PathBuf,
    /// Where its previous content is kept (`None`: it did not exist).
    pub previous: Option<PathBuf>,
    /// The PostgreSQL database restored, and where its previous content is kept.
    pub database: Option<Swapped>,
}

/// A directory restored under a temporary name, checked, not swapped in yet.
struct PreparedDir {
    temp: PathBuf,
    target: PathBuf,
    previous: PathBuf,
    swapped: Option<bool>,
}

impl Drop for PreparedDir {
    /// A restore given up before its swap removes what it prepared.
    fn drop(&mut self) {
        if self.swapped.is_none() {
            make_removable(&self.temp);
            let _ = std::fs::remove_dir_all(&self.temp);
        }
    }
}

impl PreparedDir {
    /// Renames the target (if it exists) to `previous`, then the restored
    /// directory to the target, and flushes their parent. The first rename is
    /// undone if the second fails.
    fn swap(&mut self) -> Result<(), BackupError> {
        let existed = self.target.exists();
        if existed {
            std::fs::rename(&self.target, &self.previous).map_err(BackupError::io(&self.target))?;
        }
        if let Err(e) = std::fs::rename(&self.temp, &self.target) {
            if existed {
                let _ = std::fs::rename(&self.previous, &self.target);
            }
            return Err(BackupError::io(&self.target)(e));
        }
        self.swapped = Some(existed);
        if let Some(parent) = self.target.parent() {
            sync_dir(parent)?;
        }
        Ok(())
    }

    /// Undoes [`PreparedDir::swap`]: the restored directory back to its temporary
    /// name (then removed), the previous one back to the target's name.
    fn undo(&mut self) {
        if let Some(existed) = self.swapped.take() {
            let _ = std::fs::rename(&self.target, &self.temp);
            if existed {
                let _ = std::fs::rename(&self.previous, &self.target);
            }
        }
    }
}

/// What an archive holding a PostgreSQL dump needs to be restored.
const NAME_THE_DATABASE: &str = "name the database to restore it into (--database-url)";

/// Reads and checks `archive` for a restore of `expect`.
fn check_archive(archive: &Path, expect: Kind) -> Result<Manifest, BackupError> {
    let manifest = Manifest::read(archive, sqlite::supported)?;
    if manifest.kind != expect {
        let hint = match manifest.kind {
            Kind::Authority => ": restore it with `flotilla serve restore`".to_string(),
            Kind::Project => format!(
                ": restore it with `flotilla restore` (project `{}`)",
                manifest.name
            ),
        };
        return Err(BackupError::WrongKind {
            archive: archive.to_owned(),
            found: manifest.kind,
            expected: expect,
            hint,
        });
    }
    archive::check_files(archive, &manifest)?;
    Ok(manifest)
}

/// Copies the archive's files into a temporary sibling of `target` and checks its
/// databases there.
fn prepare_dir(
    archive: &Path,
    manifest: &Manifest,
    target: &Path,
    now_ms: i64,
) -> Result<PreparedDir, BackupError> {
    let parent = target.parent().unwrap_or(Path::new("/"));
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    std::fs::create_dir_all(parent).map_err(BackupError::io(parent))?;
    let when = stamp(now_ms);
    let prepared = PreparedDir {
        temp: parent.join(format!(".{name}.restoring-{when}")),
        target: target.to_owned(),
        previous: parent.join(format!("{name}.before-restore-{when}")),
        swapped: None,
    };
    if prepared.previous.exists() {
        return Err(BackupError::Io {
            path: prepared.previous.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "a restore at this very time already kept the previous state here",
            ),
        });
    }
    archive::create_private_dir(&prepared.temp)?;
    extract(archive, manifest, &prepared.temp)?;
    for db in manifest
        .databases
        .iter()
        .filter(|d| d.engine == Engine::Sqlite)
    {
        if let Some(path) = archive::restored_path(&prepared.temp, &db.path) {
            sqlite::check(&path, db)?;
            // The check may leave an empty journal beside it.
            for c in sqlite::COMPANIONS {
                let mut p = path.clone().into_os_string();
                p.push(c);
                let _ = std::fs::remove_file(PathBuf::from(p));
            }
        }
    }
    Ok(prepared)
}

/// Restores `archive` (of `expect`'s kind) into `target` (module docs). An archive
/// holding a PostgreSQL dump needs [`restore_with_postgres`].
///
/// # Errors
/// Refusals, with nothing changed: [`BackupError::Incomplete`],
/// [`BackupError::Corrupt`], [`BackupError::Damaged`], [`BackupError::TooNew`],
/// [`BackupError::WrongKind`], [`BackupError::Check`], [`BackupError::Database`]
/// (a PostgreSQL dump). Failures: [`BackupError::Io`], [`BackupError::Sqlite`].
pub fn restore(
    archive: &Path,
    target: &Path,
    expect: Kind,
    now_ms: i64,
) -> Result<Restored, BackupError> {
    let manifest = check_archive(archive, expect)?;
    manifest.without_postgres(archive, NAME_THE_DATABASE)?;
    let mut dir = prepare_dir(archive, &manifest, target, now_ms)?;
    dir.swap()?;
    Ok(Restored {
        previous: dir.swapped.filter(|e| *e).map(|_| dir.previous.clone()),
        target: target.to_owned(),
        manifest,
        database: None,
    })
}

/// [`restore`], with the archive's PostgreSQL dump (if any) restored into the
/// database `pg` names: into a new database first (checked), swapped in after the
/// directory; the directory's swap is undone if the database's fails. A database
/// named for an archive without a dump is refused.
///
/// # Errors
/// As [`restore`], and [`BackupError::InUse`] (sessions on the database),
/// [`BackupError::Postgres`], [`BackupError::PgTool`].
pub async fn restore_with_postgres(
    archive: &Path,
    target: &Path,
    expect: Kind,
    pg: Option<&Postgres>,
    now_ms: i64,
) -> Result<Restored, BackupError> {
    let manifest = {
        let archive = archive.to_owned();
        blocking(move || check_archive(&archive, expect)).await?
    };
    let (dump, pg) = match (manifest.postgres().cloned(), pg) {
        (None, None) => {
            let (archive, target) = (archive.to_owned(), target.to_owned());
            return blocking(move || restore(&archive, &target, expect, now_ms)).await;
        }
        (Some(_), None) => return Err(holds_a_dump(archive, NAME_THE_DATABASE)),
        (None, Some(_)) => {
            return Err(BackupError::Database {
                why: format!(
                    "{} holds no PostgreSQL dump (it was taken from an authority on SQLite): restore it without --database-url",
                    archive.display()
                ),
            })
        }
        (Some(dump), Some(pg)) => (dump, pg),
    };
    let prepared_db = postgres::prepare(
        &pg.url,
        &pg.tools,
        &postgres::dump_path(archive),
        &dump,
        now_ms,
    )
    .await?;
    let prepared_dir = {
        let (archive, manifest, target) = (archive.to_owned(), manifest.clone(), target.to_owned());
        blocking(move || {
            let mut dir = prepare_dir(&archive, &manifest, &target, now_ms)?;
            dir.swap()?;
            Ok(dir)
        })
        .await
    };
    let mut dir = match prepared_dir {
        Ok(d) => d,
        Err(e) => {
            prepared_db.abandon().await;
            return Err(e);
        }
    };
    match prepared_db.swap().await {
        Ok(swapped) => Ok(Restored {
            previous: dir.swapped.filter(|e| *e).map(|_| dir.previous.clone()),
            target: target.to_owned(),
            manifest,
            database: Some(swapped),
        }),
        Err(e) => {
            dir.undo();
            Err(e)
        }
    }
}
