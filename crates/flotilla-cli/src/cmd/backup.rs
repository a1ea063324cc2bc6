//! `flotilla backup [--to DIR] [--keep N]`: a verified archive of the project's state
//! directory; `flotilla serve backup`: of the authority (its directory, and its
//! PostgreSQL database with `--database-url`). A thin call into
//! `flotilla_exec::backup` / `flotilla_server::backup` (the archive itself is
//! `flotilla_store::backup`'s). Also the options of the automatic backups `serve`
//! and `agent run` take, and how a backup error becomes an exit status.

use super::authority::{authority_dir, StoreArgs};
use crate::{Cli, EXIT_OK, EXIT_REFUSED};
use flotilla_exec::backup::{BackupPolicy, DEFAULT_KEEP};
use flotilla_exec::statedir::StateDir;
use flotilla_store::backup::{BackupError, Written};
use std::path::PathBuf;

/// Where an archive goes and how many are kept.
#[derive(clap::Args, Debug, Clone)]
pub struct Where {
    /// The backup directory. Default: `<state dir>/backups` (a project), `backups`
    /// beside the authority directory (the authority).
    #[arg(long, env = "FLOTILLA_BACKUP_DIR", value_name = "DIR")]
    pub to: Option<PathBuf>,
    /// Keep the newest N archives of what is backed up in the backup directory
    /// (older ones are removed after a backup verifies); 0 keeps them all.
    #[arg(long, env = "FLOTILLA_BACKUP_KEEP", default_value_t = DEFAULT_KEEP, value_name = "N")]
    pub keep: usize,
    /// Print JSON: {archive, manifest, pruned}.
    #[arg(long)]
    pub json: bool,
}

impl Where {
    fn policy(&self) -> BackupPolicy {
        BackupPolicy {
            dir: self.to.clone(),
            keep: self.keep,
        }
    }
}

/// Arguments of `flotilla backup`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub to: Where,
}

/// Arguments of `flotilla serve backup`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub to: Where,
}

/// The automatic backups of `flotilla serve` (before a migration of its store) and
/// `flotilla agent run` (before a self-update).
#[derive(clap::Args, Debug, Clone)]
pub struct AutoArgs {
    /// Where automatic backups go (before a schema migration, before a
    /// self-update). Default: `backups` beside what is backed up.
    #[arg(long, env = "FLOTILLA_BACKUP_DIR", value_name = "DIR")]
    pub backup_dir: Option<PathBuf>,
    /// How many automatic archives of each thing to keep; 0 keeps them all.
    #[arg(long, env = "FLOTILLA_BACKUP_KEEP", default_value_t = DEFAULT_KEEP, value_name = "N")]
    pub backup_keep: usize,
}

impl AutoArgs {
    /// The policy these options say.
    pub fn policy(&self) -> BackupPolicy {
        BackupPolicy {
            dir: self.backup_dir.clone(),
            keep: self.backup_keep,
        }
    }
}

/// The project this invocation means: `-p`, else the inventory's; `Err(code)` when
/// the inventory is invalid (its diagnostics printed).
pub fn project(cli: &Cli) -> anyhow::Result<Result<String, u8>> {
    if let Some(p) = &cli.project {
        return Ok(Ok(p.clone()));
    }
    Ok(match super::topology_or_exit(cli)? {
        Ok((_, v)) => Ok(v.topology.project_name().to_string()),
        Err(code) => Err(code),
    })
}

/// `flotilla backup`.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let project = match project(cli)? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let state = StateDir::resolve(cli.state_dir.as_deref(), &project)?;
    let done = flotilla_exec::backup::backup_project(
        &state,
        &args.to.policy(),
        "manual",
        flotilla_exec::this_process::now_ms(),
    );
    report(done, &format!("project `{project}`"), args.to.json)
}

/// `flotilla serve backup`.
pub fn run_serve(cli: &Cli, args: &ServeArgs) -> anyhow::Result<u8> {
    let dir = authority_dir(cli, &args.store)?;
    let backend =
        flotilla_server::authority::Backend::choose(&dir, args.store.database_url.as_deref());
    let rt = super::runtime()?;
    let done = rt.block_on(flotilla_server::backup::backup_authority(
        &dir,
        &backend,
        &args.to.policy(),
        "manual",
        flotilla_exec::this_process::now_ms(),
    ));
    report(
        done,
        &format!("the authority ({})", backend.describe()),
        args.to.json,
    )
}

/// Prints what a backup did.
fn report(done: Result<Written, BackupError>, what: &str, json: bool) -> anyhow::Result<u8> {
    let w = match done {
        Ok(w) => w,
        Err(e) => return failed(e, json),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "archive": w.archive,
                "manifest": w.manifest,
                "pruned": w.pruned,
            }))?
        );
        return Ok(EXIT_OK);
    }
    let m = &w.manifest;
    println!("backed up {what} to {}", w.archive.display());
    let files = m
        .files
        .iter()
        .filter(|f| f.kind == flotilla_store::backup::EntryKind::File)
        .count();
    println!("  verified: {files} files by size and SHA-256, restored into a scratch place:");
    for db in &m.databases {
        let rows: i64 = db.tables.values().sum();
        println!(
            "    {}: {}schema {} version {}, {} tables, {rows} rows as at the backup",
            db.path,
            match db.engine {
                flotilla_store::backup::Engine::Sqlite => "integrity_check ok, ",
                flotilla_store::backup::Engine::Postgres => "pg_restore ok, ",
            },
            db.schema.as_deref().unwrap_or("unknown"),
            db.schema_version.map_or("-".into(), |v| v.to_string()),
            db.tables.len()
        );
    }
    for s in &m.skipped {
        println!("  left out: {s}");
    }
    for p in &w.pruned {
        println!("  removed (retention): {}", p.display());
    }
    Ok(EXIT_OK)
}

/// A backup or restore that did not happen: a refusal (an archive cut short,
/// altered, from a newer version; a target in use) prints why and is exit 1; an
/// archive of the other kind, a missing `--database-url` or a project with no state
/// is a usage error (2);
/// the rest, a failure to read or write, exit 3.
pub fn failed(e: BackupError, json: bool) -> anyhow::Result<u8> {
    match e {
        BackupError::WrongKind { .. }
        | BackupError::Database { .. }
        | BackupError::NoSource { .. } => Err(crate::usage_from(e.to_string(), e)),
        e if e.is_refusal() => {
            crate::print_error(&e);
            if json {
                println!(
                    "{}",
                    crate::error_json(&anyhow::Error::new(e), EXIT_REFUSED)
                );
            }
            Ok(EXIT_REFUSED)
        }
        e => Err(e.into()),
    }
}
