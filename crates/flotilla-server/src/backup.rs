//! Backups of the authority, as `flotilla serve backup`/`restore` and `flotilla
//! serve` itself take them (the archive, its verification and restore are
//! [`flotilla_store::backup`]'s): its directory (CA, certificates, `operator.json`,
//! `authority.db` through SQLite's online backup API, the controller's journal) and,
//! with `--database-url`, its PostgreSQL database (`pg_dump`).
//!
//! - Archives go to `<authority dir>/../backups/` unless told otherwise (beside
//!   the directory: a restore swaps the directory and keeps them).
//! - [`restore_authority`] refuses while a `flotilla serve` holds the directory's
//!   `serve.lock` (held by the restore while it swaps), and while sessions are
//!   connected to the PostgreSQL database.
//! - [`migration_hooks`]: a backup (reason `before-migration`) taken when the
//!   store is opened with an older schema, before it is migrated; a backup that
//!   fails stops the migration.

use crate::authority::{Backend, MigrationHooks, SERVE_LOCK_FILE};
use flotilla_exec::backup::{hold_for_restore, postgres, BackupPolicy};
use flotilla_store::backup::{self, BackupError, Kind, Request, Restored, Written, BACKUPS_DIR};
use flotilla_store::schema::{HookError, PendingMigration};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The name of the authority's archives (`authority-<time>`).
const NAME: &str = "authority";

/// The default backup directory of the authority in `dir`: `backups` beside it.
pub fn authority_backups(dir: &Path) -> PathBuf {
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.join(BACKUPS_DIR),
        _ => PathBuf::from(BACKUPS_DIR),
    }
}

/// Backs up the authority in `dir` (and its PostgreSQL database, for a
/// [`Backend::Postgres`]) into `policy`'s directory, verified (a PostgreSQL dump by
/// a restore into a scratch database: the user needs `CREATEDB`), then keeps the
/// newest `policy.keep`.
///
/// # Errors
/// As [`flotilla_store::backup::create`] and
/// [`flotilla_store::backup::create_with_postgres`].
pub async fn backup_authority(
    dir: &Path,
    backend: &Backend,
    policy: &BackupPolicy,
    reason: &str,
    now_ms: i64,
) -> Result<Written, BackupError> {
    let to = backups_of(dir, policy);
    match backend {
        Backend::Sqlite(_) => {
            let (dir, reason, keep) = (dir.to_owned(), reason.to_string(), policy.keep);
            let blocking_to = to.clone();
            tokio::task::spawn_blocking(move || {
                backup::create(&request(&dir, &blocking_to, &reason, now_ms, keep))
            })
            .await
            .map_err(|e| BackupError::Io {
                path: to,
                source: std::io::Error::other(e.to_string()),
            })?
        }
        Backend::Postgres(url) => {
            let req = request(dir, &to, reason, now_ms, policy.keep);
            backup::create_with_postgres(&req, &postgres(url)).await
        }
    }
}

/// `policy`'s backup directory for the authority in `dir`.
fn backups_of(dir: &Path, policy: &BackupPolicy) -> PathBuf {
    policy.dir.clone().unwrap_or_else(|| authority_backups(dir))
}

fn request<'a>(
    dir: &'a Path,
    to: &'a Path,
    reason: &'a str,
    now_ms: i64,
    keep: usize,
) -> Request<'a> {
    Request {
        kind: Kind::Authority,
        name: NAME,
        source: dir,
        to,
        now_ms,
        reason,
        keep,
    }
}

/// Restores an authority archive into `dir` (and, when it holds a dump, into the
/// PostgreSQL database `database_url` names): refused while a `flotilla serve` holds
/// `dir`'s `serve.lock` (this restore holds it while it swaps); then as
/// [`flotilla_store::backup::restore_with_postgres`] (the previous directory kept as
/// `<dir>.before-restore-<time>`, the previous database as
/// `<db>_before_restore_<ms>`).
///
/// # Errors
/// [`BackupError::InUse`], and as [`flotilla_store::backup::restore_with_postgres`].
pub async fn restore_authority(
    dir: &Path,
    archive: &Path,
    database_url: Option<&str>,
    now_ms: i64,
) -> Result<Restored, BackupError> {
    let _lock = hold_for_restore(
        &dir.join(SERVE_LOCK_FILE),
        dir,
        &format!("flotilla serve restore {}", archive.display()),
    )?;
    let pg = database_url.map(postgres);
    backup::restore_with_postgres(archive, dir, Kind::Authority, pg.as_ref(), now_ms).await
}

/// The hooks that back the authority in `dir` up (reason `before-migration`, into
/// `policy`'s directory) before its store, `backend`, is migrated from an older
/// schema.
pub fn migration_hooks(dir: &Path, backend: &Backend, policy: &BackupPolicy) -> MigrationHooks {
    let (dir, policy) = (dir.to_owned(), policy.clone());
    match backend {
        Backend::Sqlite(_) => MigrationHooks {
            sqlite: Some(Arc::new(move |pending: &PendingMigration| {
                let to = backups_of(&dir, &policy);
                let now_ms = flotilla_exec::this_process::now_ms();
                let done =
                    backup::create(&request(&dir, &to, "before-migration", now_ms, policy.keep))?;
                announce(pending, &done);
                Ok(())
            })),
            postgres: None,
        },
        Backend::Postgres(url) => {
            let url = url.clone();
            MigrationHooks {
                sqlite: None,
                postgres: Some(Arc::new(move |pending: PendingMigration| {
                    let (dir, policy, url) = (dir.clone(), policy.clone(), url.clone());
                    Box::pin(async move {
                        let backend = Backend::Postgres(url);
                        let done = backup_authority(
                            &dir,
                            &backend,
                            &policy,
                            "before-migration",
                            flotilla_exec::this_process::now_ms(),
                        )
                        .await?;
                        announce(&pending, &done);
                        Ok::<(), HookError>(())
                    })
                })),
            }
        }
    }
}

/// Logs the backup taken before a migration.
fn announce(pending: &PendingMigration, done: &Written) {
    tracing::info!(
        archive = %done.archive.display(),
        from = pending.found,
        to = pending.target,
        "backed the authority up before migrating its store"
    );
}
